"""A fake vLLM: the public offline API the vllm backend uses, run by a transformers model.

It samples one request at a time with the model's key/value cache: greedy at temperature
0, else from the tempered, top-p and min-p truncated distribution with a generator seeded
by the request's seed. Log-probs are the raw model's (vLLM's default ``raw_logprobs``).
A vision-language model (its config has a ``vision_config``) reads each request's
pictures (``multi_modal_data``) with the processor saved in its directory, as vLLM does.
Every engine start (with the keyword arguments ``LLM`` was given), generation, batch of
pictures and weight load (``LLM.collective_rpc("reload_weights")``) is appended to
:data:`EVENTS`.

With ``tensor_parallel_size`` t > 1 there is still one model in this process (nothing is
sharded), but the weight sync is what vLLM's multiprocess executor does with it: the
call's arguments are pickled once and every one of the t workers gets its own copy, so
the engine never holds the trainer's tensors themselves; ``collective_rpc`` returns one
result per worker.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from transformers import (AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText, AutoProcessor,
                          LogitsProcessorList, MinPLogitsWarper, TopPLogitsWarper)

__version__ = "0.0.0+fake"

EVENTS: list[tuple[str, Any]] = []  # (kind, detail) in the order they happened

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "auto": torch.float32}


@dataclass
class SamplingParams:
    """The fields the backend sets; any other keyword is a TypeError, as in vLLM."""

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    min_p: float = 0.0
    max_tokens: int | None = 16
    seed: int | None = None
    stop_token_ids: list[int] = field(default_factory=list)
    logprobs: int | None = None
    detokenize: bool = True


@dataclass
class Logprob:
    logprob: float


@dataclass
class CompletionOutput:
    index: int
    token_ids: list[int]
    logprobs: list[dict[int, Logprob]] | None
    finish_reason: str


@dataclass
class RequestOutput:
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]


def weights_fingerprint(model: torch.nn.Module) -> float:
    """One number that changes whenever any weight changes (for order checks in tests)."""
    with torch.no_grad():
        return float(sum(p.double().sum() * (i + 1) for i, p in enumerate(model.parameters())))


def load_weights(model: torch.nn.Module, weights) -> None:
    """What the worker's ``reload_weights`` does to the model: every weight, strictly
    under the model's own (Hugging Face) names."""
    with torch.no_grad():
        dtype = next(model.parameters()).dtype
        model.load_state_dict({name: tensor.to(dtype) for name, tensor in weights})
    EVENTS.append(("load_weights", weights_fingerprint(model)))


def load_model(directory: str, dtype: torch.dtype):
    """The model of ``directory`` and, for a vision-language one (a ``vision_config``), the
    processor saved beside it (vLLM loads both from the model directory)."""
    config = AutoConfig.from_pretrained(directory)
    if getattr(config, "vision_config", None) is None:
        return AutoModelForCausalLM.from_pretrained(directory, dtype=dtype).eval(), None
    return (AutoModelForImageTextToText.from_pretrained(directory, dtype=dtype).eval(),
            AutoProcessor.from_pretrained(directory))


# The engine arguments the fake understands, with vLLM's defaults; any other keyword is a
# TypeError (vLLM's EngineArgs refuses unknown ones too).
ENGINE_DEFAULTS: dict[str, Any] = {"dtype": "auto", "seed": None, "generation_config": "auto",
                                   "gpu_memory_utilization": 0.9, "tensor_parallel_size": 1}


class LLM:
    def __init__(self, model: str, **engine_args: Any):
        if unknown := sorted(set(engine_args) - set(ENGINE_DEFAULTS)):
            raise TypeError(f"the fake engine takes no argument {', '.join(unknown)}")
        settings = ENGINE_DEFAULTS | engine_args
        self.model, self.processor = load_model(model, DTYPES[settings["dtype"]])
        self.seed = settings["seed"]
        self.workers = settings["tensor_parallel_size"]
        # what the caller passed, as given (defaults it left out are not recorded)
        EVENTS.append(("init", {"model": model} | engine_args))

    def collective_rpc(self, method: str, timeout: float | None = None, args: tuple = (),
                       kwargs: dict[str, Any] | None = None) -> list[Any]:
        """Only the worker method the backend calls: ``reload_weights(weights_iterator=...)``."""
        if method != "reload_weights" or args or set(kwargs or {}) != {"weights_iterator"}:
            raise NotImplementedError(f"the fake engine has no worker method {method!r} with these arguments")
        weights = kwargs["weights_iterator"]
        if self.workers > 1:  # the workers are other processes: they get pickled copies
            weights = pickle.loads(pickle.dumps(weights, protocol=pickle.HIGHEST_PROTOCOL))
        load_weights(self.model, weights)
        return [None] * self.workers

    @torch.no_grad()
    def generate(self, prompts, sampling_params, *, use_tqdm: bool = True) -> list[RequestOutput]:
        if isinstance(sampling_params, SamplingParams):
            sampling_params = [sampling_params] * len(prompts)
        EVENTS.append(("generate", weights_fingerprint(self.model)))
        pictures = [self._pictures(prompt) for prompt in prompts]
        if any(pictures):
            EVENTS.append(("pictures", [len(p.get("pixel_values", ())) for p in pictures]))
        return [self._one(prompt["prompt_token_ids"], params, inputs)
                for prompt, params, inputs in zip(prompts, sampling_params, pictures)]

    def _pictures(self, prompt) -> dict[str, torch.Tensor]:
        """The model inputs of a request's ``multi_modal_data`` (vLLM's: a list of PIL
        images under ``"image"``); a request whose ids hold image tokens without pictures,
        or pictures without their tokens, is refused as vLLM refuses it."""
        images = (prompt.get("multi_modal_data") or {}).get("image", [])
        if images and self.processor is None:
            raise ValueError("the model reads text only: it takes no multi_modal_data")
        if self.processor is None:
            return {}
        token = self.model.config.image_token_id
        placed = sum(1 for t in prompt["prompt_token_ids"] if t == token)
        features = self.model.config.image_seq_length * len(images)
        if placed != features:
            raise ValueError(f"the prompt holds {placed} image tokens; its {len(images)} pictures need {features}")
        return dict(self.processor.image_processor(images, return_tensors="pt")) if images else {}

    def _one(self, prompt: list[int], params: SamplingParams, pictures: dict[str, torch.Tensor]) -> RequestOutput:
        generator = torch.Generator().manual_seed(params.seed if params.seed is not None else self.seed or 0)
        warpers = LogitsProcessorList()
        if params.top_p < 1.0:
            warpers.append(TopPLogitsWarper(top_p=params.top_p))
        if params.min_p > 0:
            warpers.append(MinPLogitsWarper(min_p=params.min_p))
        out = self.model(input_ids=torch.tensor([prompt]), use_cache=True, **pictures)
        tokens: list[int] = []
        logprobs: list[dict[int, Logprob]] = []
        finish = "length"
        for _ in range(params.max_tokens):
            logits = out.logits[:, -1].float()
            raw = F.log_softmax(logits, dim=-1)
            if params.temperature == 0:
                token = int(logits.argmax(-1))
            else:
                probs = F.softmax(warpers(None, logits / params.temperature), dim=-1)
                token = int(torch.multinomial(probs, 1, generator=generator))
            tokens.append(token)
            logprobs.append({token: Logprob(float(raw[0, token]))})
            if token in params.stop_token_ids:
                finish = "stop"
                break
            out = self.model(input_ids=torch.tensor([[token]]), past_key_values=out.past_key_values,
                             use_cache=True)
        return RequestOutput(prompt, [CompletionOutput(0, tokens, logprobs if params.logprobs is not None
                                                       else None, finish)])
