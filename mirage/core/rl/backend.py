"""The backend contract: a policy that generates, scores and trains on token ids."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from mirage.core.config.options import Component
from mirage.core.parallel.world import SINGLE, World
from mirage.core.rl.policy_output import CrossScores, PolicyOutput

if TYPE_CHECKING:
    from collections.abc import Iterable

    import torch

    from mirage.core.config.run_config import RunConfig
    from mirage.core.rl.env import Environment
    from mirage.core.rl.image import Image
    from mirage.core.rl.training import LossRecipe, Row


class Backend(Component, ABC):
    """A trainable policy, built once per run as ``cls(config, options)``: the run config
    and this class's validated ``Options`` from ``model.options``
    (:class:`mirage.core.config.options.Component`; docs/writing-a-backend.md).

    What every backend provides: :meth:`prepare`, :meth:`encode`/:meth:`decode`,
    :meth:`generate`, :meth:`score`, training through :meth:`train_step` and
    :meth:`save`/:meth:`load`. Training has two levels. :meth:`train_step` (one optimizer
    step over training rows with the algorithm's loss recipe) and :meth:`loss_gradients`
    are the seam: a backend whose trainer runs elsewhere (other processes, other GPUs)
    overrides them. Their defaults run in this process over the torch primitives
    :meth:`forward`, :meth:`reference_logprobs`/:meth:`freeze_reference`,
    :meth:`optimizer_step` and :meth:`gradient` (mirage/core/rl/training.py), which a
    single-process backend implements instead.

    A backend that sets ``supports_critic = True`` also trains a critic (a value model
    for PPO's GAE): :meth:`init_critic`, :meth:`values`, :meth:`critic_step`, and
    :meth:`save`/:meth:`load` include it.

    ``parallel_modes`` names the values of ``model.parallel`` besides ``none`` this
    backend runs under (data-parallel across processes needs per-row ``seeds`` in
    :meth:`generate` and the in-process training primitives).
    """

    supports_critic: ClassVar[bool] = False
    parallel_modes: ClassVar[tuple[str, ...]] = ()
    world: World = SINGLE
    """The processes of a data-parallel run (``model.parallel``), set by the run before
    :meth:`prepare`: the default :meth:`train_step` and :meth:`loss_gradients` work on this
    rank's share of the rows and sum over the ranks."""

    @classmethod
    def devices_per_rank(cls, config: "RunConfig") -> int:
        """GPUs each process of a data-parallel run needs (1; a backend whose sampler
        spans several, vllm's tensor parallelism, says so): the launcher gives every rank
        its own."""
        return 1

    @classmethod
    def config_problem(cls, config: "RunConfig") -> str | None:
        """A one-line reason this backend cannot run ``config`` (checked before any
        work), or None."""
        return None

    @classmethod
    def images_problem(cls, config: "RunConfig") -> str | None:
        """Why this backend cannot read the pictures of an environment in image mode
        (one line, checked before any work), or None where it can. Default: it reads text
        only."""
        return (f"backend {config.model.backend!r} reads text only: its policy cannot see the pictures of "
                f"env.options.observation 'image'; use observation 'text'")

    @abstractmethod
    def prepare(self, env_cls: type["Environment"], cache_dir: Path, *,
                progress: bool = True) -> dict[str, Any]:
        """Load or build (and warm-start) the policy for ``env_cls``; return facts to
        record (parameter count, where it came from, warm-start metrics). ``progress``
        False (``core run --quiet``, sweep cells) means no progress bar on stderr."""

    @abstractmethod
    def encode(self, text: str) -> list[int]: ...

    def encode_prompt(self, text: str, images: tuple[Image, ...] = ()) -> list[int]:
        """Token ids of a prompt (a context ``X``, ending in ``<think>``) as the policy
        should see it: the one place prompts become ids, for rollouts and validation alike
        (cross-scoring and the update reuse the ids a turn was sampled with). This default
        encodes the text as it is; a backend may render it first, e.g. through a chat
        template (``env.chat_template``). Reasonings and other text use :meth:`encode`.

        ``images``: the pictures the text's ``IMAGE_MARK``s place (image mode), passed only
        to a backend whose :meth:`images_problem` is None; it encodes each mark as its
        model's image tokens and later takes the ids back as a :class:`Prompt` carrying the
        pictures (``contexts`` of every method below). This default reads text only."""
        if images:
            raise NotImplementedError(f"backend {self.config.model.backend!r} reads text only")
        return self.encode(text)

    @abstractmethod
    def decode(self, ids: list[int]) -> str: ...

    @abstractmethod
    def generate(
        self, contexts: list[list[int]], *, temperature: float, greedy: bool, max_new_tokens: int,
        top_p: float = 1.0, min_p: float = 0.0, seeds: list[int] | None = None,
    ) -> list[list[int]]:
        """Sample one response per context (batched); return response ids without
        padding or end-of-sequence token. ``top_p`` < 1 and ``min_p`` > 0 truncate the
        sampling distribution (nucleus, min-p); both are ignored when ``greedy``.

        ``seeds``: one per context. When given, row i's sample depends only on its
        context, the sampling settings and ``seeds[i]``: not on the other rows, their
        order or count, nor on the global torch generator (the data-parallel rollout
        shards a batch's rows across processes and relies on it). None: the global torch
        generator supplies the draws. Ignored when ``greedy``."""

    @abstractmethod
    def score(self, contexts: list[list[int]], responses: list[list[int]]) -> PolicyOutput:
        """Teacher-forced per-token log-probs and entropies, no gradient."""

    def cross_score(self, contexts: list[list[int]], responses: list[list[int]], *,
                    reuse_prefix: bool = True) -> CrossScores:
        """Every response under every context (the MI proxies' cross-scoring).

        This default scores all ``R x C`` pairs in full through :meth:`score`; a backend
        that can reuse each context's key/value cache across the responses overrides it
        and honours ``reuse_prefix=False`` by falling back to this.
        """
        pairs = [(c, r) for r in responses for c in contexts]
        out = self.score([c for c, _ in pairs], [r for _, r in pairs])
        shape = (len(responses), len(contexts))
        # each response's float32 terms summed in float64: a sum near -100 in float32 would
        # round by up to about 1e-5 per term
        return CrossScores(out.logprobs.double().sum(-1).view(shape).cpu(),
                           out.entropy.double().sum(-1).view(shape).cpu())

    # ------------------------------------------------------------------ training (the seam)
    def train_step(self, rows: list["Row"], recipe: "LossRecipe") -> dict[str, float]:
        """One optimizer step over the mini-batch ``rows`` (turns with advantages and loss
        weights; with returns and old values when a critic trains too), its loss given by
        ``recipe``. Returns metrics under ``update/``: the recipe's stats summed over
        micro-batches, ``grad_norm`` (before clipping) and, with a critic,
        ``critic_grad_norm``. The default runs in this process
        (:func:`mirage.core.rl.training.train_step`)."""
        from mirage.core.rl import training

        return training.train_step(self, rows, recipe)

    def loss_gradients(self, rows: list["Row"], recipe: "LossRecipe") -> dict[str, "torch.Tensor"]:
        """Each of the recipe's loss terms' gradient over ``rows`` with respect to every
        policy parameter, flattened into one vector and summed over micro-batches, with
        no optimizer step and no change to the weights (the gradient decomposition). The
        default runs in this process over :meth:`forward` and :meth:`gradient`."""
        from mirage.core.rl import training

        return training.loss_gradients(self, rows, recipe)

    def gather_for_save(self) -> None:
        """Called on every rank of a data-parallel run just before the main rank's
        :meth:`save` (a collective, so a backend that shards its state across the ranks
        can bring it to the main rank); nothing by default."""

    # ------------------------------------------------------------------ in-process primitives
    def gradient(self, loss: "torch.Tensor", *, retain_graph: bool = False) -> "torch.Tensor":
        """The gradient of ``loss`` (built from :meth:`forward`) with respect to every
        policy parameter, flattened into one vector, without accumulating it into the
        parameters' ``.grad`` and without any optimizer step. A backend without it (and
        without its own :meth:`loss_gradients`) cannot run the ``grad`` diagnostic."""
        raise NotImplementedError(f"{type(self).__name__} provides no gradient()")

    def forward(self, contexts: list[list[int]], responses: list[list[int]]) -> PolicyOutput:
        """Like :meth:`score`, with gradient, for the default :meth:`train_step`."""
        raise NotImplementedError(f"{type(self).__name__} provides no forward(): override train_step")

    def reference_logprobs(
        self, contexts: list[list[int]], responses: list[list[int]]
    ) -> "torch.Tensor":
        """Log-probs under the frozen reference policy (for a KL penalty), ``[B, L]``."""
        raise NotImplementedError(f"{type(self).__name__} provides no reference policy")

    def freeze_reference(self) -> None:
        """Keep a frozen copy of the current policy for :meth:`reference_logprobs`."""
        raise NotImplementedError(f"{type(self).__name__} provides no reference policy")

    def has_reference(self) -> bool:
        return False

    def optimizer_step(self, max_grad_norm: float) -> float:
        """Clip, step and zero the optimizer; return the pre-clip gradient norm."""
        raise NotImplementedError(f"{type(self).__name__} provides no optimizer_step(): override train_step")

    def policy_parameters(self) -> "Iterable[torch.nn.Parameter]":
        """The policy's trained parameters, whose gradients a data-parallel run sums over
        the ranks (and whose values the main rank broadcasts at the start)."""
        raise NotImplementedError(f"{type(self).__name__} provides no policy_parameters(): "
                                  "it cannot train data-parallel")

    def critic_parameters(self) -> "Iterable[torch.nn.Parameter]":
        """The critic's, likewise."""
        raise NotImplementedError(f"{type(self).__name__} provides no critic")

    # ------------------------------------------------------------------ critic (optional)
    def init_critic(self, lr: float) -> None:
        """Build a value model from the current policy, with its own optimizer at ``lr``."""
        raise NotImplementedError(f"{type(self).__name__} provides no critic")

    def has_critic(self) -> bool:
        return False

    def values(self, contexts: list[list[int]], responses: list[list[int]]) -> "torch.Tensor":
        """``[B, L]`` value of the state before each response token (the context and the
        response so far), with gradient; 0 on padding. The algorithm reads the old values
        through it (under ``torch.no_grad``); the default :meth:`train_step` trains on it."""
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

    # ------------------------------------------------------------------ separate sampler (optional)
    def sync_weights(self) -> None:
        """Make the sampler that :meth:`generate` uses hold the trainer's current weights.
        The loop calls it before every stage that generates (training rollout, validation);
        a backend whose sampler is separate from its trainer (vllm) pushes the weights only
        if they changed since its last sync (after an update, a load or a resume). The
        default does nothing: generation and training share one model."""

    def step_metrics(self) -> dict[str, float]:
        """The backend's own metrics since the last call, stored with the step's metrics;
        the loop drains it once per step, after validation. Default: none."""
        return {}
