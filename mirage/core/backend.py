"""The backend contract: a policy that generates, scores and trains on token ids."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import torch

    from mirage.core.config import RunConfig
    from mirage.core.env import Environment


@dataclass
class PolicyOutput:
    """Per-token outputs for a padded batch of responses, shapes ``[B, L]``.

    ``logprobs`` carries gradient when produced by :meth:`Backend.forward`; ``mask`` is
    1 on response tokens and 0 on padding.
    """

    logprobs: "torch.Tensor"
    entropy: "torch.Tensor"
    mask: "torch.Tensor"


class Backend(ABC):
    """A trainable policy. ``cls(config)`` is called once per run.

    A backend that sets ``supports_critic = True`` also trains a critic (a value model
    for PPO's GAE): :meth:`init_critic`, :meth:`values`, :meth:`critic_step`, and
    :meth:`save`/:meth:`load` include it.
    """

    supports_critic: ClassVar[bool] = False

    def __init__(self, config: "RunConfig"):
        self.config = config

    @classmethod
    def config_problem(cls, config: "RunConfig") -> str | None:
        """A one-line reason this backend cannot run ``config`` (checked before any
        work), or None."""
        return None

    @abstractmethod
    def prepare(self, env_cls: type["Environment"], cache_dir: Path) -> dict[str, Any]:
        """Load or build (and warm-start) the policy for ``env_cls``; return facts to
        record (parameter count, where it came from, warm-start metrics)."""

    @abstractmethod
    def encode(self, text: str) -> list[int]: ...

    @abstractmethod
    def decode(self, ids: list[int]) -> str: ...

    @abstractmethod
    def generate(
        self, contexts: list[list[int]], *, temperature: float, greedy: bool, max_new_tokens: int
    ) -> list[list[int]]:
        """Sample one response per context (batched); return response ids without
        padding or end-of-sequence token."""

    @abstractmethod
    def score(self, contexts: list[list[int]], responses: list[list[int]]) -> PolicyOutput:
        """Teacher-forced per-token log-probs and entropies, no gradient."""

    @abstractmethod
    def forward(self, contexts: list[list[int]], responses: list[list[int]]) -> PolicyOutput:
        """Like :meth:`score`, with gradient, for the update."""

    @abstractmethod
    def reference_logprobs(
        self, contexts: list[list[int]], responses: list[list[int]]
    ) -> "torch.Tensor":
        """Log-probs under the frozen initial policy (for a KL penalty), ``[B, L]``."""

    @abstractmethod
    def freeze_reference(self) -> None:
        """Keep a frozen copy of the current policy for :meth:`reference_logprobs`."""

    @abstractmethod
    def has_reference(self) -> bool: ...

    @abstractmethod
    def optimizer_step(self, max_grad_norm: float) -> float:
        """Clip, step and zero the optimizer; return the pre-clip gradient norm."""

    # ------------------------------------------------------------------ critic (optional)
    def init_critic(self, lr: float) -> None:
        """Build a value model from the current policy, with its own optimizer at ``lr``."""
        raise NotImplementedError(f"{type(self).__name__} provides no critic")

    def has_critic(self) -> bool:
        return False

    def values(self, contexts: list[list[int]], responses: list[list[int]]) -> "torch.Tensor":
        """``[B, L]`` value of the state before each response token (the context and the
        response so far), with gradient; 0 on padding."""
        raise NotImplementedError(f"{type(self).__name__} provides no critic")

    def critic_step(self, max_grad_norm: float) -> float:
        """Clip, step and zero the critic's optimizer; return the pre-clip gradient norm."""
        raise NotImplementedError(f"{type(self).__name__} provides no critic")

    @abstractmethod
    def save(self, directory: Path) -> None:
        """Write policy, optimizer and tokenizer state for resuming."""

    @abstractmethod
    def load(self, directory: Path) -> None:
        """Restore what :meth:`save` wrote."""
