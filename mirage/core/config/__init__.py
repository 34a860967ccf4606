"""The typed run configuration, components' own options, overrides, presets, old layouts."""


def __getattr__(name: str):
    """The names the flat ``config.py`` of plugin API 1 held, deprecated
    (mirage/core/plugin_api/moved.py)."""
    from mirage.core.plugin_api.moved import old_name

    return old_name(__name__, name)
