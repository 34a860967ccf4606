"""What the benchmarks share: a run session built from partial config data, its policy
prepared (the warm start is cached under ~/.cache/mirage after its first build)."""

from __future__ import annotations

from mirage.core.plugin_api.manager import build_plugins
from mirage.core.plugin_api.session import RunSession
from mirage.core.run.loop import cache_dir, open_session
from mirage.core.run.validate import build_config, validate_config


def prepared_session(data: dict) -> RunSession:
    """A session for the RunConfig built from ``data``, its backend prepared."""
    config = build_config(data)
    plugins = build_plugins()
    session = open_session(config, plugins, validate_config(config, plugins))
    session.backend.prepare(session.env_cls, cache_dir())
    return session
