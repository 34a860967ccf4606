"""LocalBackend: batched generation, teacher-forced scoring and training with torch."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from transformers.utils import logging as hf_logging

from mirage.core.config.run_config import RunConfig
from mirage.core.rl.backend import Backend, CrossScores, PolicyOutput
from mirage.core.rl.image import Image
from mirage.core.rl.prompt import images_of
from mirage.plugins.backend_local import (chat_template, cross_scoring, decode, lora, precision, reference,
                                          saved_processor, sharding, vision, widened)
from mirage.core.rl.score_chunks import score_rows
from mirage.plugins.backend_local import model as model_lib
from mirage.plugins.backend_local.critic import AdapterValueModel, ValueModel
from mirage.plugins.backend_local.options import LocalOptions
from mirage.plugins.backend_local.sampler import SamplingCopy
from mirage.plugins.backend_local.warmstart import warm_start



class LocalBackend(Backend):
    """A transformers causal LM on this machine's CPU or GPU (``model.device``), in float32
    or bfloat16 mixed precision (``model.dtype``, precision.py)."""

    supports_critic = True
    parallel_modes = ("ddp", "fsdp")  # fsdp: sharding.py
    Options = LocalOptions

    def __init__(self, config: RunConfig, options: LocalOptions):
        super().__init__(config, options)
        hf_logging.disable_progress_bar()  # our own bar shows progress; theirs is per file
        self.device = precision.resolve_device(config.model.device)
        self.model = None
        self.tokenizer = None
        self.processor = None  # a vision-language policy's (vision.py); None for text
        self.optimizer = None
        self._reference = None
        self.critic = None  # ValueModel, built by init_critic (PPO)
        self.critic_optimizer = None
        self._critic_lr = None
        self.sharded: sharding.ShardedPolicy | None = None  # fsdp: the training copy, made at the first step
        self._optimizer_to_save: dict | None = None  # fsdp: the shards' optimizer, gathered for a checkpoint
        self.adapters: lora.Adapters | None = None  # model.lora: the policy's adapters (lora.py)
        self._base_reference = False  # model.lora: the reference is the base, adapters disabled
        self.weights_version = 0  # bumped by every change to the policy's weights
        self.sampling_copy: SamplingCopy | None = None  # sampling_weights: bfloat16 (sampler.py)
        self.widened = False  # a float64 copy of the policy is cross-scoring (widened.py)

    # ------------------------------------------------------------------ setup
    @classmethod
    def images_problem(cls, config: RunConfig) -> str | None:
        """None without ``model.path`` (the tiny vision-language policy, warm-started on the
        pictures) or for an image-text-to-text checkpoint; a text-only checkpoint, or one
        with a vision tower that is not image-text-to-text, is refused."""
        path = config.model.path
        return model_lib.image_text_problem(path) if path else None

    @classmethod
    def config_problem(cls, config: RunConfig) -> str | None:
        if problem := precision.device_problem(config.model.device):
            return problem
        if config.model.options.get("reference_env_options") and config.algorithm.kl_coef == 0:
            return ("model.options.reference_env_options sets the KL reference, but algorithm.kl_coef "
                    "is 0, so no KL term would read it; set algorithm.kl_coef > 0 or drop the option")
        if config.model.lora is not None and (problem := cls._lora_problem(config)):
            return problem
        if not config.model.path:
            return None
        return model_lib.model_source_error(config.model.path) or saved_processor.problem(config.model.path)

    @classmethod
    def _lora_problem(cls, config: RunConfig) -> str | None:
        """Why ``model.lora`` cannot adapt the policy (read from its shape alone), or None."""
        options = cls.Options(**config.model.options)
        if config.model.path and (problem := model_lib.model_source_error(config.model.path)):
            return problem
        skeleton = lora.skeleton(config, options.hidden, options.layers, options.heads)
        return None if skeleton is None else lora.problem(config.model.lora, skeleton)

    def prepare(self, env_cls, cache_dir: Path, *, progress: bool = True) -> dict[str, Any]:
        cfg = self.config.model
        if cfg.path:
            self.model, self.tokenizer = model_lib.load_pretrained(cfg.path)
            facts: dict[str, Any] = {"model_source": cfg.path}
        else:
            self.model, self.tokenizer, facts = warm_start(self.config, self.options, env_cls, cache_dir,
                                                              progress=progress)
        self.processor = (vision.processor_for(self.model, self.tokenizer, cfg.path)
                          if vision.is_vision_model(self.model) else None)
        if self.options.reference_env_options:
            source = cfg.path or facts.get("warmstart_key", "")
            self._reference, made = reference.templated_reference(
                self.model, self.tokenizer, self.config, self.options, env_cls, cache_dir, source,
                processor=self.processor, progress=progress)
            self._reference.to(self.device).eval()
            for p in self._reference.parameters():
                p.requires_grad_(False)
            facts |= made
        facts["parameters"] = model_lib.parameter_count(self.model)
        if cfg.lora is not None:  # the base's count above; the adapters' in the facts
            self.adapters = lora.Adapters(self.model, cfg.lora, seed=self.config.seed,
                                          source=cfg.path or facts.get("warmstart_key", ""))
            facts |= self.adapters.facts()
        self.model.to(self.device)  # the warm start trained (and cached) it in float32 on the CPU
        if self.options.gradient_checkpointing:  # each layer recomputed in the backward (issue 44)
            self.model.gradient_checkpointing_enable()
        self.optimizer = torch.optim.AdamW(self.trained(), lr=self.config.algorithm.lr, weight_decay=0.0)
        facts |= precision.facts(self.device, cfg.dtype, self.model)
        facts["chat_template"] = self.chat_template()
        if self.config.env.chat_template and not facts["chat_template"]:
            facts["chat_template_missing"] = "the tokenizer has no chat template: prompts encoded as they are"
        facts["decoder"] = self.decoder()
        if self.options.decoder == "lean" and facts["decoder"] != "lean":
            facts["decoder_fallback"] = decode.unsupported(self.model)
        if self.options.sampling_weights != "policy":
            facts["sampling_weights"] = self.options.sampling_weights
        if self.options.cross_score_dtype != "float32":
            facts["cross_score_dtype"] = self.options.cross_score_dtype
        return facts

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def encode_prompt(self, text: str, images: tuple[Image, ...] = ()) -> list[int]:
        if self.chat_template():
            text = chat_template.render(self.tokenizer, text)
        if images:  # each IMAGE_MARK becomes the picture's image tokens (the processor's expansion)
            return vision.encode_with_images(self.processor, text, tuple(images))
        return self.encode(text)

    def seen(self, contexts, ids: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """The model's picture inputs for ``contexts`` (``Prompt``s, in order) whose batch
        of input ``ids`` ``[B, T]`` the model reads: a vision-language policy's
        ``pixel_values`` (and what its processor gives beside them, vision.image_inputs);
        nothing for text."""
        if self.processor is None:
            return {}
        return vision.image_inputs(self.processor, images_of(contexts), self.device, ids)

    def chat_template(self) -> bool:
        """Whether prompts go through the tokenizer's chat template: asked for
        (``env.chat_template``) and the tokenizer has one."""
        return bool(self.config.env.chat_template) and chat_template.available(self.tokenizer)

    def compute(self):
        """The context every model call runs in (precision.compute)."""
        return precision.compute(self.device, "float32" if self.widened else self.config.model.dtype)

    # ------------------------------------------------------------------ generation
    @torch.no_grad()
    def generate(self, contexts, *, temperature, greedy, max_new_tokens, top_p=1.0, min_p=0.0, seeds=None):
        model = self.sampling_model()
        model.eval()
        pad, eos = self.tokenizer.pad_token_id, self.tokenizer.eos_token_id
        with self.compute():
            if self.decoder() == "lean":
                # the copy's samples cannot be the policy's generate's anyway: it draws the cheap exact way
                draw = "exponential" if model is self.model else "inverse_cdf"
                out = decode.generate(model, contexts, eos=eos, temperature=temperature, greedy=greedy,
                                      max_new_tokens=max_new_tokens, top_p=top_p, min_p=min_p, seeds=seeds,
                                      draw=draw)
            else:
                out = self.generate_plain(contexts, temperature=temperature, greedy=greedy,
                                          max_new_tokens=max_new_tokens, top_p=top_p, min_p=min_p, seeds=seeds,
                                          model=model)
        responses = []
        for row in out:
            if eos in row:  # keep the end token: the policy must learn to stop
                row = row[: row.index(eos) + 1]
            responses.append([t for t in row if t != pad or pad == eos])
        return responses

    def decoder(self) -> str:
        """``lean`` (decode.py) when configured and the model allows it, else ``generate``."""
        if self.options.decoder == "lean" and decode.unsupported(self.model) is None:
            return "lean"
        return "generate"

    def sampling_model(self) -> torch.nn.Module:
        """The model :meth:`generate` samples from: the policy, or with ``sampling_weights:
        bfloat16`` its bfloat16 copy, first brought to the policy's current weights."""
        if self.options.sampling_weights == "policy":
            return self.model
        self.sync_weights()
        return self.sampling_copy.model

    def sync_weights(self) -> None:
        """With ``sampling_weights: bfloat16``: the copy gets the policy's weights (merged,
        cast) when they changed since its last refresh (made at the first call)."""
        if self.options.sampling_weights == "policy":
            return
        if self.sampling_copy is None:
            self.sampling_copy = SamplingCopy(self.model, self.device)
        if self.sampling_copy.version != self.weights_version:
            self.sampling_copy.refresh(self.merged_weights(), self.weights_version)

    def weights_changed(self) -> None:
        """Say that the policy's weights changed outside :meth:`optimizer_step`,
        :meth:`train_step` and :meth:`load` (which say it themselves), e.g. a warm start's
        own optimizer: a separate sampler refreshes its copy before it samples again."""
        self.weights_version += 1

    @torch.no_grad()
    def generate_plain(self, contexts, *, temperature, greedy, max_new_tokens, top_p=1.0, min_p=0.0, seeds=None,
                       model=None):
        """Token ids from transformers' ``model.generate`` (left-padded batch), padded after
        the end token: the reference the lean loop is tested against. With ``seeds`` (and
        sampling) each row is generated alone after seeding the global generators with its
        seed, and their state is restored afterwards. ``model``: the policy unless given."""
        model = self.model if model is None else model
        if seeds is not None and len(seeds) != len(contexts):
            raise ValueError(f"{len(seeds)} seeds for {len(contexts)} contexts")
        if seeds is not None and not greedy:
            sampling = dict(temperature=temperature, greedy=False, max_new_tokens=max_new_tokens, top_p=top_p,
                            min_p=min_p, model=model)
            # model.generate draws from the global generator of the model's device only:
            # it and the CPU's are forked, so the caller's streams go on where they were.
            cuda = self.device.type == "cuda"
            out = []
            with torch.random.fork_rng(devices=[self.device] if cuda else [], device_type="cuda"):
                for context, seed in zip(contexts, seeds):
                    torch.default_generator.manual_seed(seed)
                    if cuda:
                        with torch.cuda.device(self.device):
                            torch.cuda.manual_seed(seed)
                    out += self.generate_plain([context], **sampling)
            return out
        pad, eos = self.tokenizer.pad_token_id, self.tokenizer.eos_token_id
        width = max(len(c) for c in contexts)
        ids = torch.full((len(contexts), width), pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, context in enumerate(contexts):  # left padding for decoder-only generation
            ids[row, width - len(context) :] = torch.tensor(context)
            mask[row, width - len(context) :] = 1
        sampling = {} if greedy else {"temperature": temperature, "top_k": 0, "top_p": top_p}
        if min_p > 0 and not greedy:
            sampling["min_p"] = min_p
        if self.processor is not None:  # a response never places a picture
            sampling["suppress_tokens"] = vision.placeholder_ids(model, self.processor)
        return model.generate(
            input_ids=ids.to(self.device),
            attention_mask=mask.to(self.device),
            **self.seen(contexts, ids),
            do_sample=not greedy,
            max_new_tokens=max_new_tokens,
            pad_token_id=pad,
            eos_token_id=eos,
            **sampling,
        )[:, width:].tolist()

    # ------------------------------------------------------------------ scoring
    def _pack(self, contexts, responses):
        """Right-padded ``context + response`` ids and attention mask ``[B, T]``, the
        positions ``[B, L]`` whose next-token prediction is a response token, and the
        response mask ``[B, L]``."""
        pad = self.tokenizer.pad_token_id
        lengths = [len(c) + len(r) for c, r in zip(contexts, responses)]
        width, resp_width = max(lengths), max(len(r) for r in responses)
        ids = torch.full((len(contexts), width), pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, (c, r) in enumerate(zip(contexts, responses)):
            ids[row, : len(c) + len(r)] = torch.tensor(c + r)
            mask[row, : len(c) + len(r)] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        starts = torch.tensor([len(c) - 1 for c in contexts], device=self.device)
        offsets = torch.arange(resp_width, device=self.device)
        positions = (starts[:, None] + offsets[None, :]).clamp(max=width - 2)
        resp_mask = (offsets[None, :] < torch.tensor([len(r) for r in responses], device=self.device)[:, None])
        return ids, mask, positions, resp_mask

    def per_token(self, model, contexts, responses) -> PolicyOutput:
        """Teacher-forced log-probs and entropies of ``responses`` after ``contexts``."""
        ids, mask, positions, resp_mask = self._pack(contexts, responses)
        width = ids.size(1)
        with self.compute():
            logits = model(input_ids=ids, attention_mask=mask, **self.seen(contexts, ids)).logits.float()
        picked = logits.gather(1, positions[:, :, None].expand(-1, -1, logits.size(-1)))
        targets = ids.gather(1, (positions + 1).clamp(max=width - 1))
        m = resp_mask.float()
        return PolicyOutput(*cross_scoring.token_stats(picked, targets, m), m)

    @torch.no_grad()
    def score(self, contexts, responses) -> PolicyOutput:
        self.model.eval()
        width = max((len(c) + len(r) for c, r in zip(contexts, responses)), default=1)
        rows = score_rows(width, self.model.config.get_text_config().vocab_size)
        parts = [
            self.per_token(self.model, contexts[i : i + rows], responses[i : i + rows])
            for i in range(0, len(contexts), rows)
        ]
        return _concat(parts)

    @torch.no_grad()
    def cross_score(self, contexts, responses, *, reuse_prefix: bool = True) -> CrossScores:
        """Each context is encoded once and every response teacher-forced after it
        (cross_scoring.py: the responses' prefix tree after each context's cached keys; for
        models the lean loop does not know, transformers' cache is deep-copied, repeated
        and extended per chunk). ``reuse_prefix=False``: every pair in full. Both in
        float32, or in float64 with ``cross_score_dtype: float64`` (widened.py)."""
        if self.options.cross_score_dtype == "float64" and not self.widened:
            with widened.float64_policy(self):
                return self.cross_score(contexts, responses, reuse_prefix=reuse_prefix)
        if not reuse_prefix:
            return super().cross_score(contexts, responses)
        if not contexts or not responses:
            empty = torch.zeros(len(responses), len(contexts), dtype=torch.float64)
            return CrossScores(empty, empty.clone())
        self.model.eval()
        with self.compute():
            if decode.unsupported(self.model) is None:
                return CrossScores(*cross_scoring.cross_score(self.model, contexts, responses))
            part = vision.language_part(self.model)
            if part is not None and decode.unsupported(part) is None:
                # a LLaVA policy: each context's pictures merged into its prefill, the
                # responses through the text model alone
                def embed(ids):
                    return vision.merged_embeddings(self.model, ids, self.seen(contexts, ids))
                return CrossScores(*cross_scoring.cross_score(part, contexts, responses, embed))
            return self.cross_score_copied(contexts, responses)

    @torch.no_grad()
    def cross_score_copied(self, contexts, responses) -> CrossScores:
        """Cross-scoring for any causal LM: each context's transformers cache is copied
        for every chunk of responses (bench/diagnostics.py compares it with the shared one)."""
        lengths = torch.tensor([len(r) for r in responses])
        width = max(int(lengths.max()), 1)
        ids = torch.full((len(responses), width), self.tokenizer.pad_token_id, dtype=torch.long)
        for row, response in enumerate(responses):
            ids[row, : len(response)] = torch.tensor(response, dtype=torch.long)
        mask = (torch.arange(width)[None, :] < lengths[:, None]).to(self.device)
        ids = ids.to(self.device)
        logprobs = torch.zeros(len(responses), len(contexts), dtype=torch.float64)
        entropy = torch.zeros_like(logprobs)
        for column, context in enumerate(contexts):
            # the model places the responses after the context's cache: Qwen2-VL's 3-D
            # rotary positions go on from the offset its forward computed for the context
            context_ids = torch.tensor([context], device=self.device)
            prefix = self.model(input_ids=context_ids, use_cache=True, **self.seen([context], context_ids))
            last = prefix.logits[:, -1:].float()
            rows = score_rows(width, last.size(-1))
            for start in range(0, len(responses), rows):
                chunk = ids[start : start + rows]
                logits = last.expand(chunk.size(0), -1, -1)
                if width > 1:  # right padding only follows real tokens: no mask needed
                    cache = copy.deepcopy(prefix.past_key_values)
                    cache.batch_repeat_interleave(chunk.size(0))
                    rest = self.model(input_ids=chunk[:, :-1], past_key_values=cache, use_cache=True)
                    logits = torch.cat([logits, rest.logits.float()], dim=1)
                chunk_mask = mask[start : start + rows].float()
                picked, spread = cross_scoring.token_stats(logits, chunk, chunk_mask)
                logprobs[start : start + chunk.size(0), column] = picked.double().sum(-1).cpu()
                entropy[start : start + chunk.size(0), column] = spread.double().sum(-1).cpu()
        return CrossScores(logprobs, entropy)

    # ------------------------------------------------------------------ training
    def fsdp(self) -> bool:
        """Whether the update runs on FSDP2 shards (``model.parallel: fsdp`` over more
        than one process); ``self.model`` is then the full replica sampling and scoring use."""
        return self.config.model.parallel == "fsdp" and self.world.distributed

    def train_step(self, rows, recipe) -> dict[str, float]:
        self.weights_changed()
        if not self.fsdp():
            return super().train_step(rows, recipe)
        if self.sharded is None:  # here, not in prepare: after every rank took the main rank's weights
            self.sharded = sharding.ShardedPolicy(self.model, self.trained(), self.world, self.device,
                                                  self.config.algorithm.lr, self.optimizer)
            # the replica's own optimizer is not stepped under fsdp: its (loaded) state goes
            self.optimizer = torch.optim.AdamW(self.trained(), lr=self.config.algorithm.lr, weight_decay=0.0)
        return sharding.train_step(self, self.sharded, rows, recipe)

    def gather_for_save(self) -> None:
        if self.fsdp() and self.sharded is not None:
            self._optimizer_to_save = self.sharded.plain_optimizer_state(
                self.model, self.trained(), self.config.algorithm.lr, self.world.is_main)

    def trained(self) -> list[torch.nn.Parameter]:
        """The policy's trained parameters: its adapter's with LoRA, else every weight."""
        if self.adapters is not None:
            return self.adapters.policy_parameters()
        return list(self.model.parameters())

    def gradient(self, loss: torch.Tensor, *, retain_graph: bool = False) -> torch.Tensor:
        params = [p for p in self.trained() if p.requires_grad]
        grads = torch.autograd.grad(loss, params, retain_graph=retain_graph, allow_unused=True)
        return torch.cat([
            (g if g is not None else torch.zeros_like(p)).reshape(-1).float()
            for g, p in zip(grads, params)
        ])

    def forward(self, contexts, responses) -> PolicyOutput:
        self.model.train()
        return self.per_token(self.model, contexts, responses)

    @torch.no_grad()
    def reference_logprobs(self, contexts, responses) -> torch.Tensor:
        if self._base_reference and self._reference is None:
            training = self.model.training
            self.model.eval()  # no adapter dropout, as the frozen copy is read
            with self.adapters.scope(None):
                out = self.per_token(self.model, contexts, responses).logprobs
            self.model.train(training)
            return out
        if self._reference is None:
            raise RuntimeError("no reference policy: call freeze_reference() first")
        return self.per_token(self._reference, contexts, responses).logprobs

    def has_reference(self) -> bool:
        return self._reference is not None or self._base_reference

    def freeze_reference(self) -> None:
        if self.adapters is not None:  # the base with the adapters disabled: no copy
            self._base_reference = True
            return
        self._reference = copy.deepcopy(self.model).eval()
        for p in self._reference.parameters():
            p.requires_grad_(False)

    def policy_parameters(self):
        return self.trained()

    def critic_parameters(self):
        if self.critic is None:
            raise RuntimeError("no critic: call init_critic() first")
        return self.critic.parameters()

    def optimizer_step(self, max_grad_norm: float) -> float:
        self.weights_changed()
        norm = torch.nn.utils.clip_grad_norm_(self.trained(), max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(norm)

    # ------------------------------------------------------------------ critic
    def init_critic(self, lr: float) -> None:
        if self.adapters is not None:  # its own adapter on the policy's base (critic.py)
            self.critic = AdapterValueModel(self.model, self.adapters, self.config.model.dtype).to(self.device)
        else:
            self.critic = ValueModel(self.model, self.config.model.dtype).to(self.device)
        self._critic_lr = lr
        self.critic_optimizer = torch.optim.AdamW(self.critic.parameters(), lr=lr, weight_decay=0.0)

    def has_critic(self) -> bool:
        return self.critic is not None

    def values(self, contexts, responses) -> torch.Tensor:
        if self.critic is None:
            raise RuntimeError("no critic: call init_critic() first")
        self.critic.train()
        ids, mask, positions, resp_mask = self._pack(contexts, responses)
        # V(s_t) is read where token t is predicted: after the context and response[:t].
        return self.critic(ids, mask, **self.seen(contexts, ids)).gather(1, positions) * resp_mask.float()

    def critic_step(self, max_grad_norm: float) -> float:
        norm = torch.nn.utils.clip_grad_norm_(self.critic.parameters(), max_grad_norm)
        self.critic_optimizer.step()
        self.critic_optimizer.zero_grad(set_to_none=True)
        return float(norm)

    # ------------------------------------------------------------------ checkpoints
    def merged_weights(self) -> dict[str, torch.Tensor]:
        """The policy's weights under a plain model's names: with LoRA, its adapter merged
        into the base (lora.py), the model itself left as it is."""
        if self.adapters is not None:
            return self.adapters.merged_state_dict()
        return self.model.state_dict()

    def export(self, directory: Path) -> None:
        """The policy as a whole Hugging Face checkpoint in ``directory`` (adapters merged):
        what ``--model``, ``core probe`` and vLLM load."""
        if self.adapters is not None:
            self.model.save_pretrained(directory, state_dict=self.merged_weights())
        else:
            self.model.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)
        if self.processor is not None:
            self.processor.save_pretrained(directory)

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        if self.adapters is not None:  # the adapter alone: the base comes from the run's config
            self.adapters.save(directory / "policy")
        else:
            self.model.save_pretrained(directory / "policy")
        self.tokenizer.save_pretrained(directory / "policy")
        # under fsdp the shards' optimizer, gathered by gather_for_save: one format for every
        # model.parallel, so a run resumes on any number of processes
        optimizer, self._optimizer_to_save = self._optimizer_to_save or self.optimizer.state_dict(), None
        torch.save(optimizer, directory / "optimizer.pt")
        if self._reference is not None:
            self._reference.save_pretrained(directory / "reference")
        if self.critic is not None:
            torch.save(self.critic.state_dict(), directory / "critic.pt")
            torch.save(self.critic_optimizer.state_dict(), directory / "critic_optimizer.pt")
        (directory / "backend.json").write_text(json.dumps(
            {"reference": self._reference is not None, "critic_lr": self._critic_lr,
             "base_reference": self._base_reference}
        ))

    def load(self, directory: Path) -> None:
        """What :meth:`save` wrote. With LoRA the adapter goes into the base :meth:`prepare`
        made (ConfigError, nothing changed, when the checkpoint's base is another one)."""
        self.weights_changed()
        if self.adapters is not None:
            self.adapters.load(directory / "policy")
        else:
            self.model, self.tokenizer = model_lib.load_pretrained(str(directory / "policy"))
            if self.processor is not None:
                self.processor.tokenizer = self.tokenizer
            self.model.to(self.device)
            if self.options.gradient_checkpointing:
                self.model.gradient_checkpointing_enable()
        self.optimizer = torch.optim.AdamW(self.trained(), lr=self.config.algorithm.lr, weight_decay=0.0)
        self.optimizer.load_state_dict(torch.load(directory / "optimizer.pt"))
        self.sharded = None  # fsdp: rebuilt at the next step, taking the optimizer's state
        saved = json.loads((directory / "backend.json").read_text())
        self._base_reference = saved.get("base_reference", False)
        if saved["reference"]:
            self._reference, _ = model_lib.load_pretrained(str(directory / "reference"))
            self._reference.to(self.device).eval()
        if saved.get("critic_lr") is not None:
            self.init_critic(saved["critic_lr"])  # the structure; the weights follow
            self.critic.load_state_dict(torch.load(directory / "critic.pt"))
            self.critic_optimizer.load_state_dict(torch.load(directory / "critic_optimizer.pt"))


def _concat(parts: list[PolicyOutput]) -> PolicyOutput:
    width = max(p.mask.size(1) for p in parts)

    def cat(name: str) -> torch.Tensor:
        return torch.cat([F.pad(getattr(p, name), (0, width - p.mask.size(1))) for p in parts])

    return PolicyOutput(cat("logprobs"), cat("entropy"), cat("mask"))
