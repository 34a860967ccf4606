"""The typed run configuration, components' own options, overrides, presets, old layouts."""


def __getattr__(name: str):
    """The names the flat ``config.py`` of plugin API 1 held, deprecated
    (mirage/moved_paths.py)."""
    from mirage.moved_paths import old_name

    return old_name(__name__, name)
