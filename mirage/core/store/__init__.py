"""The DuckDB run store: file, migrations, runs, rollouts, labels, liveness, export."""


def __getattr__(name: str):
    """The names the flat ``store.py`` of plugin API 1 held, deprecated
    (mirage/moved_paths.py)."""
    from mirage.moved_paths import old_name

    return old_name(__name__, name)
