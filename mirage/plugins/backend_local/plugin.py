"""Registers the local torch + transformers backend as ``local``."""

from mirage.core.plugin_api.hookspecs import hookimpl


@hookimpl
def mirage_register_backends(register):
    from mirage.plugins.backend_local.backend import LocalBackend

    register("local", LocalBackend)
