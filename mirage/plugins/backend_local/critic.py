"""The critic for PPO: a copy of the policy's transformer with a scalar value head.

veRL's critic is a separate model initialised from the actor's checkpoint with a fresh
value head; this is the same at the local backend's scale. The head starts at zero, so
the first values are 0 and the first GAE advantages are the plain returns.

With LoRA (``model.lora``) the critic copies nothing: :class:`AdapterValueModel` reads the
policy's own frozen base through an adapter of its own (lora.py's ``critic``), so the value
loss trains that adapter and the head and never the policy's adapter, and the weights are
held once for the policy, the reference and the critic.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from mirage.plugins.backend_local import precision


class ValueModel(nn.Module):
    """``forward(input_ids, attention_mask) -> [B, T]`` value at every position."""

    def __init__(self, policy: nn.Module, dtype: str = "float32"):
        super().__init__()
        self.dtype_name = dtype  # the policy's model.dtype: its backbone computes likewise
        self.backbone = copy.deepcopy(policy.base_model)  # the transformer without its LM head
        self.head = nn.Linear(policy.config.get_text_config().hidden_size, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **seen) -> torch.Tensor:
        """``seen``: a vision-language policy's ``pixel_values``."""
        with precision.compute(input_ids.device, self.dtype_name):
            hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask, **seen).last_hidden_state
        return self.head(hidden.float()).squeeze(-1)  # the head and the value loss in float32


class AdapterValueModel(nn.Module):
    """``forward(input_ids, attention_mask) -> [B, T]`` value at every position, from the
    hidden states of the policy's base under the critic's adapter (``adapters.scope``).
    Its parameters, optimizer and state dict are the critic adapter's and the head's only."""

    def __init__(self, policy: nn.Module, adapters, dtype: str = "float32"):
        super().__init__()
        self.dtype_name = dtype
        self.adapter = nn.ParameterList(adapters.add_critic())  # shared with the policy's model, not copied
        self._adapters = adapters  # not a module: the base is the policy's, never the critic's state
        self._body = policy.base_model.forward  # the transformer without its LM head
        self.head = nn.Linear(policy.config.get_text_config().hidden_size, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **seen) -> torch.Tensor:
        from mirage.plugins.backend_local.lora import CRITIC

        with self._adapters.scope(CRITIC), precision.compute(input_ids.device, self.dtype_name):
            hidden = self._body(input_ids=input_ids, attention_mask=attention_mask, **seen).last_hidden_state
        return self.head(hidden.float()).squeeze(-1)
