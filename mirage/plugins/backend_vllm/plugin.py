"""Registers the vLLM-sampling backend as ``vllm``."""

from mirage.core.plugin_api.hookspecs import hookimpl


@hookimpl
def mirage_register_backends(register):
    from mirage.plugins.backend_vllm.backend import VLLMBackend

    register("vllm", VLLMBackend)
