"""Low-rank adapters on the local backend's policy, through peft (``model.lora``).

The policy's transformers model keeps its place (the lean decode loop, cross-scoring and
the critic read its modules as before): peft injects its LoRA layers into it, and the
:class:`Adapters` beside it switch them. Only adapter weights train. Two adapters share the
one frozen base: ``default``, the policy's, and ``critic``, PPO's value model's (with its own
value head, critic.py), so the critic's loss never reaches the policy's adapter and no
second or third copy of the weights is made. The KL reference is the base with the
adapters disabled.

peft's own switches (``set_adapter``, ``disable_adapter``) also set ``requires_grad`` (the
active adapter's on, the others' off); a step computes the policy's forward, the reference's
and the critic's before one backward, so :meth:`Adapters.scope` puts every adapter's flag
back after a switch.
"""

from __future__ import annotations

import hashlib
import json
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import torch

from mirage.core.config.run_config import LoraConfig, RunConfig
from mirage.core.errors import ConfigError

POLICY = "default"  # peft's name for a model's first adapter
CRITIC = "critic"
BASE_FILE = "base.json"  # beside a checkpoint's adapter: which base it was trained on
ADAPTER_FILE = "adapter_config.json"  # what peft writes beside an adapter's weights
_SAMPLED = 4096  # values per tensor in a base's fingerprint
_LISTED = 24  # module names an error lists


def peft_config(lora: LoraConfig):
    from peft import LoraConfig as PeftLoraConfig

    targets = lora.target_modules if lora.target_modules == "all-linear" else list(lora.target_modules)
    return PeftLoraConfig(r=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                          target_modules=targets, bias="none")


def targetable(model: torch.nn.Module) -> list[str]:
    """The names (last part) of the modules of ``model`` that LoRA can adapt: its linear,
    embedding and convolution layers."""
    from transformers.pytorch_utils import Conv1D

    kinds = (torch.nn.Linear, torch.nn.Embedding, torch.nn.Conv1d, torch.nn.Conv2d, Conv1D)
    return sorted({name.rpartition(".")[2] for name, module in model.named_modules()
                   if name and isinstance(module, kinds)})


def problem(lora: LoraConfig, model: torch.nn.Module) -> str | None:
    """Why ``lora`` cannot adapt ``model`` (a skeleton will do: only names and sizes are
    read): a rank above the hidden size, or target modules it does not have; or None."""
    hidden = model.config.get_text_config().hidden_size
    if lora.rank > hidden:
        return f"model.lora.rank {lora.rank} exceeds the model's hidden size ({hidden})"
    if lora.target_modules == "all-linear":
        return None
    have = targetable(model)
    missing = [name for name in lora.target_modules if name not in have]
    if missing:
        shown = ", ".join(have[:_LISTED]) + (f" and {len(have) - _LISTED} more" if len(have) > _LISTED else "")
        return (f"model.lora.target_modules: the model has no module {', '.join(map(repr, missing))}; "
                f"its modules that take adapters: {shown or 'none'}")
    return None


def skeleton(config: RunConfig, hidden: int, layers: int, heads: int) -> torch.nn.Module | None:
    """The policy's modules without weights (on the meta device): the tiny policy's shape,
    or a local checkpoint's config.json; None for a hub id (checked when it loads)."""
    from transformers import AutoConfig, AutoModelForCausalLM, Qwen2Config, Qwen2ForCausalLM

    path = config.model.path
    with torch.device("meta"):
        if path is None:
            return Qwen2ForCausalLM(Qwen2Config(vocab_size=16, hidden_size=hidden, intermediate_size=hidden * 3,
                                                num_hidden_layers=layers, num_attention_heads=heads,
                                                num_key_value_heads=heads, tie_word_embeddings=True))
        local = Path(path).expanduser()
        if not (local / "config.json").is_file():
            return None
        try:
            return AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(str(local)))
        except (ValueError, KeyError):  # not a causal LM (image-text-to-text): checked when it loads
            return None


def fingerprint(model: torch.nn.Module) -> str:
    """A digest of a base model's weights: every tensor's name and shape and an evenly
    strided sample of its values (exact, and the same on any device)."""
    digest = hashlib.sha256()
    with torch.no_grad():
        for name, tensor in sorted(model.state_dict().items()):
            flat = tensor.reshape(-1)
            sample = flat[:: max(1, flat.numel() // _SAMPLED)].float().cpu().contiguous()
            digest.update(f"{name}:{tuple(tensor.shape)}".encode())
            digest.update(sample.numpy().tobytes())
    return digest.hexdigest()[:16]


class Adapters:
    """The LoRA adapters injected into one model: which parameters train, the switches
    between the policy's adapter, the critic's and none, checkpoints and merged weights."""

    def __init__(self, model: torch.nn.Module, lora: LoraConfig, *, seed: int, source: str):
        from peft import get_peft_model

        self.lora = lora
        self.base = {"source": source, "fingerprint": fingerprint(model)}
        # the adapters' random initialisation comes from the run's seed, not the global stream
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            try:
                self.peft = get_peft_model(model, peft_config(lora))
            except ValueError as error:  # a target module peft cannot find or adapt
                raise ConfigError(f"model.lora: {' '.join(str(error).split())[:300]}") from None
        self.model = self.peft.get_base_model()  # ``model`` itself, its layers now adapted
        self._seed = seed
        self._restore()

    def _adapter(self, name: str) -> list[torch.nn.Parameter]:
        return [p for key, p in self.model.named_parameters() if ".lora_" in key and f".{name}." in key]

    def policy_parameters(self) -> list[torch.nn.Parameter]:
        return self._adapter(POLICY)

    def add_critic(self) -> list[torch.nn.Parameter]:
        """The critic's adapter (made once, from the run's seed); its parameters."""
        if CRITIC not in self.peft.peft_config:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(self._seed + 1)
                self.peft.add_adapter(CRITIC, peft_config(self.lora))
            self._restore()
        return self._adapter(CRITIC)

    def _restore(self) -> None:
        """The policy's adapter active; every adapter trainable, the base frozen."""
        self.peft.set_adapter(POLICY)
        for key, p in self.model.named_parameters():
            p.requires_grad_(".lora_" in key)

    @contextmanager
    def scope(self, name: str | None) -> Iterator[None]:
        """Forwards inside run with adapter ``name`` (None: none, the base model)."""
        try:
            if name is None:
                with self.peft.disable_adapter():
                    yield
            else:
                self.peft.set_adapter(name)
                yield
        finally:
            self._restore()

    # ------------------------------------------------------------------ checkpoints
    def save(self, directory: Path) -> None:
        """The policy's adapter as peft writes it (adapter_config.json and weights) and
        ``base.json``, which base it adapts."""
        self.peft.save_pretrained(str(directory), selected_adapters=[POLICY], save_embedding_layers=False)
        (directory / BASE_FILE).write_text(json.dumps(self.base))

    def load(self, directory: Path) -> None:
        """The policy's adapter from :meth:`save`'s ``directory``; ConfigError when it was
        trained on another base than this one."""
        from peft import set_peft_model_state_dict
        from peft.utils import load_peft_weights

        if not (directory / ADAPTER_FILE).is_file():
            raise ConfigError(f"{directory} holds a whole model, not LoRA adapters: model.lora "
                              "resumes only from a run that trained adapters")
        saved = json.loads((directory / BASE_FILE).read_text())
        if saved["fingerprint"] != self.base["fingerprint"]:
            raise ConfigError(f"the LoRA adapters in {directory} were trained on another base "
                              f"({saved['source']}, weights {saved['fingerprint']}) than this run's "
                              f"({self.base['source']}, weights {self.base['fingerprint']})")
        found = set_peft_model_state_dict(self.peft, load_peft_weights(str(directory)), adapter_name=POLICY)
        if found.unexpected_keys:
            raise ConfigError(f"the LoRA adapters in {directory} do not fit this model "
                              f"(unexpected: {', '.join(found.unexpected_keys[:4])})")

    def state(self, name: str) -> dict[str, torch.Tensor]:
        from peft import get_peft_model_state_dict

        return get_peft_model_state_dict(self.peft, adapter_name=name)

    def load_state(self, name: str, state: dict[str, torch.Tensor]) -> None:
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(self.peft, state, adapter_name=name)
        self._restore()

    # ------------------------------------------------------------------ merged weights
    @torch.no_grad()
    def merged_state_dict(self) -> dict[str, torch.Tensor]:
        """The weights of the policy with its adapter merged in, under the plain model's
        names (what a Hugging Face checkpoint or vLLM's load_weights reads); the model
        itself is left as it is (merging in place and back would round the base)."""
        from peft.tuners.lora import LoraLayer

        state = {key.replace(".base_layer.", "."): tensor for key, tensor in self.model.state_dict().items()
                 if ".lora_" not in key}
        for name, module in self.model.named_modules():
            if isinstance(module, LoraLayer) and POLICY in module.lora_A:
                weight = module.get_base_layer().weight
                state[f"{name}.weight"] = weight + module.get_delta_weight(POLICY).to(weight.dtype)
        return state

    def facts(self) -> dict[str, Any]:
        return {"lora_rank": self.lora.rank, "lora_alpha": self.lora.alpha,
                "lora_parameters": sum(p.numel() for p in self.policy_parameters()),
                "lora_targets": sorted({name.rpartition(".")[2]
                                        for name in self.peft.peft_config[POLICY].target_modules}),
                "lora_base": self.base["fingerprint"]}

