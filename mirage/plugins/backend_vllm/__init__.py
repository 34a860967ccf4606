"""The vllm backend: rollouts sampled by a vLLM engine, everything else on the local torch
policy (docs/vllm.md). vLLM is imported only when a run uses this backend."""
