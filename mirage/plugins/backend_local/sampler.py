"""A bfloat16 copy of the policy that rollouts sample from (``model.options.sampling_weights:
bfloat16``), as veRL samples with a bfloat16 vLLM engine beside its float32 actor.

Decoding a rollout batch reads every weight once per new token for only P x G rows, so its
matrix products are bound by reading the weights: bfloat16 weights halve those bytes, and a
CPU with bfloat16 matrix units (AMX) or a GPU multiplies them faster too. Autocast
(``model.dtype: bfloat16``) casts each weight once per ``generate`` call, but only a weight
that requires grad (frozen LoRA bases are cast again at every product), and it changes the
update's precision as well; the copy changes nothing but sampling.

The copy is a plain model of the policy's architecture: with LoRA the adapter is merged in
(``LocalBackend.merged_weights``), so sampling pays no adapter products. Its parameters are
bfloat16 and its buffers stay as the policy's (the rotary frequencies in float32: in
bfloat16 a position's angle would be off by up to position x 2^-9 radians). Its samples
cannot be the float32 policy's for a seed anyway, so the lean loop draws them by inverse
CDF (decode.py), and on the CPU keeps their attention in float32 and multiplies by linear
weights that oneDNN laid out once per refresh (packed_linear.py). On SmolLM2-135M, one
thread, about 3x the sampled tokens a second of transformers' generate in float32 and
1.7x the lean loop's (bench/real_model.py); the tiny policy, whose decode steps are bound
by per-operation overhead rather than by reading weights, gains nothing.

Freshness: the backend counts every change of the policy's weights (``weights_version``:
an optimizer step, a training step, a load, or ``weights_changed`` from code that trains the
policy its own way) and refreshes the copy before the first sample after a change. The
update never reads the sampler's numbers: the score stage recomputes the old log-probs with
the float32 policy (mirage/core/run/scoring.py), so the importance ratio of the first epoch
carries the precision gap and PPO's clip bounds it.
"""

from __future__ import annotations

import copy

import torch

from mirage.plugins.backend_local import packed_linear

DTYPE = torch.bfloat16


class SamplingCopy:
    """The bfloat16 model :meth:`LocalBackend.generate` samples from, and the weights
    version it holds."""

    def __init__(self, policy: torch.nn.Module, device: torch.device):
        # the architecture from its config (a LoRA-adapted policy's layers are peft's; the
        # copy's are plain); its weights come in refresh
        self.model = type(policy)(policy.config)
        self.model.generation_config = copy.deepcopy(policy.generation_config)
        with torch.no_grad():
            for parameter in self.model.parameters():
                parameter.data = parameter.data.to(DTYPE)
        self.model.to(device).eval().requires_grad_(False)
        # on a CPU, oneDNN lays each linear weight out once (packed_linear.py)
        self.packed = packed_linear.convert(self.model) if packed_linear.available(device) else []
        self.version: int | None = None  # nothing loaded yet

    @torch.no_grad()
    def refresh(self, weights: dict[str, torch.Tensor], version: int) -> None:
        """Load the policy's ``weights`` (plain names, float32) cast to bfloat16."""
        packed_linear.unpack(self.packed)
        self.model.load_state_dict(weights, strict=True)
        packed_linear.pack(self.model, self.packed)
        self.version = version

    @torch.no_grad()
    def weights(self) -> dict[str, torch.Tensor]:
        """The copy's weights by name (a packed layer's recovered from its packed layout)."""
        names = {id(layer): name for name, layer in self.model.named_modules()}
        out = dict(self.model.state_dict())
        for layer in self.packed:
            out[names[id(layer)] + ".weight"] = packed_linear.weight(layer)
        return out
