"""Linear layers of the bfloat16 sampling copy with their weights laid out once by oneDNN
(CPU only), as torch.compile's CPU freezing lays them.

A decode step multiplies every weight by only P x G rows. For that shape torch's plain
bfloat16 ``F.linear`` reorders the weight for oneDNN at every call; a weight reordered once
(``torch.ops.mkldnn._reorder_linear_weight``) and multiplied by
``torch.ops.mkldnn._linear_pointwise`` gives bit-identical outputs in about three quarters
of the time at 16 rows on SmolLM2-135M's shapes, and the same time at a prefill's 768 rows
(on a 2-core Xeon without AMX; the whole decode loop of 32 new tokens took 6.78 s against
7.47 s, interleaved, README "Sampling a real model in bfloat16"). The plain weight is freed once packed,
unless another module shares it (tied embeddings), so the copy stays 2 bytes a parameter.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

DECODE_ROWS = 16  # the batch the layout is chosen for (any batch multiplies correctly)


def available(device: torch.device) -> bool:
    return (device.type == "cpu" and torch.backends.mkldnn.is_available()
            and torch.ops.mkldnn._is_mkldnn_bf16_supported())


class PackedLinear(torch.nn.Linear):
    """``nn.Linear`` that multiplies by its packed weight when it has one."""

    packed: torch.Tensor | None = None
    shape: torch.Size | None = None  # the plain weight's, while it is freed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed is None:
            return F.linear(x, self.weight, self.bias)
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")


def weight(layer: PackedLinear) -> torch.Tensor:
    """The layer's plain weight, recovered exactly from the packed one where it was freed
    (the identity times the weight: every output one product by 1 and sums of zeros)."""
    if layer.packed is None or layer.shape is None:
        return layer.weight
    eye = torch.eye(layer.shape[1], dtype=layer.weight.dtype, device=layer.weight.device)
    return torch.ops.mkldnn._linear_pointwise(eye, layer.packed, None, "none", [], "").T.contiguous()


def convert(model: torch.nn.Module) -> list[PackedLinear]:
    """Make every ``nn.Linear`` of ``model`` a :class:`PackedLinear` (nothing packed yet)."""
    layers = []
    for module in model.modules():
        if type(module) is torch.nn.Linear:
            module.__class__ = PackedLinear
            layers.append(module)
    return layers


def unpack(layers: list[PackedLinear]) -> None:
    """Give freed weights their room back, for a ``load_state_dict``."""
    for layer in layers:
        if layer.shape is not None:
            layer.weight.data = torch.empty(layer.shape, dtype=layer.weight.dtype, device=layer.weight.device)
            layer.shape = None
        layer.packed = None


def pack(model: torch.nn.Module, layers: list[PackedLinear]) -> None:
    """Pack every layer's weight; free the plain one where no other module holds it."""
    shared = {id(p) for m in model.modules() if not isinstance(m, PackedLinear)
              for p in m.parameters(recurse=False)}
    for layer in layers:
        layer.packed = torch.ops.mkldnn._reorder_linear_weight(layer.weight.detach(), DECODE_ROWS)
        if id(layer.weight) not in shared:
            layer.shape = layer.weight.shape
            layer.weight.data = torch.empty(0, dtype=layer.weight.dtype, device=layer.weight.device)
