"""VLLMBackend: the local torch policy, with rollouts sampled by a vLLM engine."""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Any

import torch
from pydantic import Field

from mirage.core.config.run_config import RunConfig
from mirage.core.rl.backend import PolicyOutput
from mirage.plugins.backend_local.backend import LocalBackend
from mirage.plugins.backend_local.options import LocalOptions
from mirage.plugins.backend_vllm import support
from mirage.plugins.backend_vllm.agreement import SamplerAgreement
from mirage.plugins.backend_vllm.sampling import cut_response, sampled_logprobs, sampling_arguments

SEED_BOUND = 2**31 - 1  # per-request seeds are drawn below this


def engine_prompt(kind, context) -> dict:
    """One request: the context's token ids and, for a prompt with pictures, the pictures
    as vLLM's ``multi_modal_data``. The ids already hold each picture's image tokens (the
    processor's expansion, what the trainer scores); vLLM finds them there rather than
    expanding again (its multi-modal processor detects applied prompt updates)."""
    prompt = kind(prompt_token_ids=list(context))
    if pictures := getattr(context, "images", ()):
        prompt["multi_modal_data"] = {"image": [picture.pil for picture in pictures]}
    return prompt


class VLLMOptions(LocalOptions):
    """The local backend's options (the policy it trains is the local one) and the engine's."""

    gpu_memory: float = Field(
        0.5, gt=0, le=1, description="on a GPU: the share of GPU memory the vLLM engine reserves "
        "(weights and key/value cache); the torch trainer uses the rest (docs/vllm.md)",
    )
    tensor_parallel_size: int = Field(
        1, ge=1, description="the GPUs one vLLM engine spans (vLLM's tensor parallelism; its "
        "workers then run in their own processes); with model.parallel: ddp, per rank (docs/vllm.md)",
    )


class VLLMBackend(LocalBackend):
    """Scoring, cross-scoring, the update and checkpoints on the local torch policy;
    :meth:`generate` on a vLLM engine holding a copy of its weights, refreshed by
    :meth:`sync_weights` whenever an optimizer step or a load changed them."""

    Options = VLLMOptions

    def __init__(self, config: RunConfig, options: VLLMOptions):
        super().__init__(config, options)
        self.engine = None
        self.engine_dir: Path | None = None
        self.synced_version = 0  # the weights_version the engine holds (LocalBackend counts changes)
        self.agreement = SamplerAgreement()

    @classmethod
    def devices_per_rank(cls, config: RunConfig) -> int:
        return cls.Options(**config.model.options).tensor_parallel_size

    @classmethod
    def config_problem(cls, config: RunConfig) -> str | None:
        options = cls.Options(**config.model.options)
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if options.sampling_weights != "policy":
            return ("model.options.sampling_weights chooses the local backend's sampler; the vllm "
                    "engine samples in model.dtype (docs/vllm.md)")
        return (super().config_problem(config) or support.vllm_missing()
                or support.too_few_gpus(options.tensor_parallel_size, gpus=gpus)
                or support.unsupported_model(config, options, on_gpu=gpus > 0))

    def prepare(self, env_cls, cache_dir: Path, *, progress: bool = True) -> dict[str, Any]:
        """The local policy, then this backend's own engine on a copy of it. Nothing is shared
        between backends: each instance (each data-parallel rank's) writes its own engine
        directory and starts its own engine."""
        facts = super().prepare(env_cls, cache_dir, progress=progress)
        # The engine reads the policy the way it reads any checkpoint: from a directory.
        (cache_dir / "vllm").mkdir(parents=True, exist_ok=True)
        self.engine_dir = Path(tempfile.mkdtemp(prefix="engine-", dir=cache_dir / "vllm"))
        weakref.finalize(self, shutil.rmtree, self.engine_dir, True)
        # with model.lora the engine holds the merged model: it never sees the adapters
        self.export(self.engine_dir)  # the processor too: the engine's own reads the pictures
        # The engine core (vLLM's scheduler) in this process, at every tensor_parallel_size:
        # the variable picks only the LLM's client, in-process or a background engine-core
        # process (vllm/envs.py: "enable multiprocessing in LLM"). The model workers are the
        # executor's business: one in this process for a single GPU; for more, vLLM's
        # ParallelConfig.distributed_executor_backend defaults to "mp" when the host has the
        # tensor x pipeline parallel GPUs, one worker process per GPU whatever the variable says.
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        import vllm

        self.engine = vllm.LLM(
            model=str(self.engine_dir), dtype=self.config.model.dtype, seed=self.config.seed,
            # sample only as the run says: no defaults from the checkpoint's generation config
            generation_config="vllm",
            gpu_memory_utilization=self.options.gpu_memory,
            tensor_parallel_size=self.options.tensor_parallel_size,
        )
        self.synced_version = self.weights_version
        return facts | {"decoder": "vllm", "vllm_version": getattr(vllm, "__version__", "unknown"),
                        "tensor_parallel_size": self.options.tensor_parallel_size}

    # ------------------------------------------------------------------ weight changes
    def sync_weights(self) -> None:
        """This backend's engine gets this backend's weights, when they changed since its
        last sync. ``collective_rpc`` reaches every worker of the engine: with one GPU the
        worker is in this process and gets the tensors themselves; with tensor_parallel_size
        t > 1 vLLM pickles the call once and each of the t worker processes reads it (the
        whole tensors; its weight loaders keep its shard), so every sync copies the policy
        through host memory. The tensors go as CPU tensors then: torch pickles a GPU tensor
        through host memory anyway, and unpickles it onto the sender's device index (cuda:0)
        in every worker, beside the first worker's shard. With ``model.lora`` the weights
        sent are the merged ones (the base plus the adapter's update; the engine's model is a
        plain one), all of them: a LoRA request per sync would spare the transfer but needs
        an engine started with enable_lora and a sampler that applies the adapter itself."""
        if self.engine is None or self.synced_version == self.weights_version:
            return
        local = self.options.tensor_parallel_size == 1
        weights = [(name, tensor.detach() if local else tensor.detach().cpu())
                   for name, tensor in self.merged_weights().items()]
        # The worker's reload_weights (vLLM's own route for new weights in a running engine):
        # the model's load_weights between vLLM's layerwise-reload set-up and finish, which
        # restore the loaders a bare load_weights finds gone after the first load.
        self.engine.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
        self.synced_version = self.weights_version

    # ------------------------------------------------------------------ generation
    def generate(self, contexts, *, temperature, greedy, max_new_tokens, top_p=1.0, min_p=0.0, seeds=None):
        if seeds is not None and len(seeds) != len(contexts):
            raise ValueError(f"{len(seeds)} seeds for {len(contexts)} contexts")
        if not contexts or max_new_tokens < 1:
            return [[] for _ in contexts]
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        eos, pad = self.tokenizer.eos_token_id, self.tokenizer.pad_token_id
        if seeds is None:
            # Drawn from the torch generator the loop seeds per step and per validation, so a
            # run (and a resumed one) asks the engine for the same samples every time.
            seeds = torch.randint(0, SEED_BOUND, (len(contexts),)).tolist()
        else:  # the caller's, each request's sample its own (Backend.generate)
            seeds = [seed % SEED_BOUND for seed in seeds]
        params = [SamplingParams(**sampling_arguments(
            temperature=temperature, greedy=greedy, max_new_tokens=max_new_tokens, top_p=top_p,
            min_p=min_p, seed=seed, eos=eos)) for seed in seeds]
        prompts = [engine_prompt(TokensPrompt, context) for context in contexts]
        outputs = self.engine.generate(prompts, params, use_tqdm=False)
        responses = []
        for context, output in zip(contexts, outputs):
            sample = output.outputs[0]
            ids, logprobs = cut_response(list(sample.token_ids), sampled_logprobs(sample), eos=eos, pad=pad)
            if logprobs is not None:
                self.agreement.expect(context, ids, logprobs)
            responses.append(ids)
        return responses

    # ------------------------------------------------------------------ scoring
    def score(self, contexts, responses) -> PolicyOutput:
        out = super().score(contexts, responses)
        self.agreement.compare(contexts, responses, out.logprobs)
        return out

    def step_metrics(self) -> dict[str, float]:
        return self.agreement.drain()
