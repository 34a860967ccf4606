"""GRPOTrainer with MIRAGE's diagnostics and filters (docs/integrations.md, section TRL).

Relies on two private methods of TRL 1.16.0's GRPOTrainer, hence the pinned extra (the
tests in tests/integrations/test_trl.py fail if either changes shape):

* ``_calculate_rewards(inputs, prompts, completions, completion_ids_list)`` returns the
  ``[P * G, F]`` rewards of every reward function, gathered across processes; the
  override only remembers them.
* ``_generate_and_score_completions(inputs)`` returns this process's rows (prompt_ids,
  prompt_mask, completion_ids, completion_mask, advantages, num_items_in_batch, ...);
  the override filters and diagnoses them after TRL has built them.

Metrics go into ``self._metrics[mode]``, which ``GRPOTrainer.log`` averages over the
logging window and hands to every ``report_to`` backend (W&B, TensorBoard, MLflow).

Dropping rows: a dropped completion keeps its place in the batch with its
``completion_mask`` and advantage set to 0, and ``num_items_in_batch`` is recounted from
the masks. Every term of GRPO's loss (the policy term, the KL penalty, the entropy
bonus) is summed over masked tokens only, and the token-normalised losses (``dapo``, the
default, ``bnpo``, ``cispo``, ``vespo``) divide by the masked token count, so for them a
masked row is exactly a dropped one. The per-sequence losses (``grpo``, ``sapo``,
``dr_grpo``, ``luspo``) still count a masked row in their batch mean, which scales the
kept rows' gradient by the kept share of the micro-batch.

Several processes: the filter runs on the gathered rewards, so every process keeps the
same groups and masks its own rows. The MI pass gathers every process's prompts and
completions (and, with a vision-language model, each distinct prompt's image inputs, as
CPU tensors) and each process scores the whole matrix (the same forwards on every rank,
so sharded models stay in step); the main process's values are what TRL logs.

Vision-language models: the filter only masks rows, so it needs nothing more; the MI pass
scores each prompt with its own image inputs (:mod:`~mirage.integrations.trl.images`).
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch
from accelerate.utils import gather_object
from trl import GRPOTrainer

from mirage.integrations.trl.diagnose import step_metrics
from mirage.integrations.trl.filtering import build_filter, rewards_batch, select_rows
from mirage.integrations.trl.images import PromptImages, row_images
from mirage.integrations.trl.options import MirageOptions


class MirageGRPOTrainer(GRPOTrainer):
    """A GRPOTrainer that filters each step's groups with a MIRAGE filter and, every
    ``mirage.every`` steps, logs the MI proxies of the step's completions.

    Takes GRPOTrainer's arguments and one more, ``mirage`` (:class:`MirageOptions`; None:
    the defaults, no filter and a diagnosis every 5 steps). Metrics, all under
    ``mirage/``: ``filter/*`` every step, ``mi/*`` and ``time/diagnose`` on diagnosed
    steps, ``time/filter`` every step.
    """

    def __init__(self, *args: Any, mirage: MirageOptions | None = None, **kwargs: Any) -> None:
        self.mirage = mirage if mirage is not None else MirageOptions()
        self.mirage_filter = build_filter(self.mirage)  # fails early on an unknown name or option
        self._mirage_rewards: torch.Tensor | None = None
        super().__init__(*args, **kwargs)
        if self.mirage.filter != "none" and self.multi_objective_aggregation != "sum_then_normalize":
            raise ValueError(
                f"MIRAGE's filter {self.mirage.filter!r} ranks groups by the variance of one scalar "
                "reward per completion, which needs multi_objective_aggregation='sum_then_normalize' "
                f"(got {self.multi_objective_aggregation!r})")

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._mirage_rewards = rewards_per_func
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        rewards_per_func, self._mirage_rewards = self._mirage_rewards, None
        if not self.model.training:  # evaluation: nothing to filter, nothing to diagnose
            return output
        if self.diagnosis_due():
            started = time.perf_counter()
            self.log_mirage(self.diagnose(output))
            self.log_mirage({"time/diagnose": time.perf_counter() - started})
        started = time.perf_counter()
        self.log_mirage(self.filter_rows(output, rewards_per_func))
        self.log_mirage({"time/filter": time.perf_counter() - started})
        return output

    def diagnosis_due(self) -> bool:
        """Whether this generation feeds an optimiser step that is a multiple of
        ``every``: it feeds steps global_step + 1 to global_step + span, span being
        steps_per_generation * num_iterations / gradient_accumulation_steps (at least 1)."""
        span = self.args.steps_per_generation * self.num_iterations / self.args.gradient_accumulation_steps
        done = self.state.global_step
        return (done + max(1, math.ceil(span))) // self.mirage.every > done // self.mirage.every

    def step_rewards(self, rewards_per_func: torch.Tensor) -> torch.Tensor:
        """``[P * G]`` one scalar reward per row: the weighted sum over reward functions
        (NaN where every function returned None), as GRPO's ``sum_then_normalize``."""
        weights = self.reward_weights.to(rewards_per_func.device)
        rewards = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)
        rewards[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
        return rewards

    def filter_rows(self, output: dict[str, Any], rewards_per_func: torch.Tensor) -> dict[str, float]:
        """Apply the filter to the step's groups in place (see the module docstring for
        why masking is dropping); return the filter's metrics."""
        completion_ids, completion_mask = output["completion_ids"], output["completion_mask"]
        local = [ids[mask.bool()].tolist() for ids, mask in zip(completion_ids, completion_mask)]
        batch = rewards_batch(self.step_rewards(rewards_per_func).tolist(), gather_object(local),
                              self.num_generations, self.state.global_step + 1)
        rows = select_rows(self.mirage_filter, batch)
        start = self.accelerator.process_index * len(local)
        keep = torch.tensor(rows.keep[start:start + len(local)], device=completion_mask.device)
        output["completion_mask"] = completion_mask * keep.unsqueeze(1).to(completion_mask.dtype)
        advantages = output["advantages"]
        shape = (-1,) + (1,) * (advantages.dim() - 1)
        output["advantages"] = advantages * keep.view(shape).to(advantages.dtype)
        if "num_items_in_batch" in output:
            loss_mask = output["completion_mask"]
            if "tool_mask" in output:
                loss_mask = loss_mask * output["tool_mask"]
            output["num_items_in_batch"] = self.accelerator.gather(loss_mask.sum()).sum()
        return {name: value for name, value in rows.selection.metrics.items() if not math.isnan(value)}

    def diagnose(self, output: dict[str, Any]) -> dict[str, float]:
        """The ``mi/*`` metrics of the whole step (every process's rows, gathered)."""
        # first: an unhandled image layout is refused before any gather
        images = row_images(output, self.processing_class)
        if self.tools and any(entry is not None for entry in images):
            raise ValueError("MIRAGE's MI pass does not score a vision-language model with tools: a tool "
                             "response can add images to a completion, whose text is re-encoded without them")
        prompts = [ids[mask.bool()].tolist() for ids, mask in zip(output["prompt_ids"], output["prompt_mask"])]
        tokenizer = getattr(self.processing_class, "tokenizer", self.processing_class)
        completions = tokenizer.batch_decode(
            [ids[mask.bool()].tolist() for ids, mask in zip(output["completion_ids"], output["completion_mask"])],
            skip_special_tokens=True)
        return step_metrics(self.model, tokenizer, gather_object(prompts), gather_object(completions), self.mirage,
                            gather_images(images))

    def log_mirage(self, metrics: dict[str, float]) -> None:
        """Hand ``metrics`` to TRL's logger under ``mirage/`` (averaged per logging window)."""
        for name, value in metrics.items():
            self._metrics["train"][f"mirage/{name}"].append(float(value))


def gather_images(images: list[PromptImages | None]) -> list[PromptImages | None]:
    """Every process's rows' image inputs, in row order: each process sends each distinct
    prompt image once (its rows repeat it num_generations times) and the rows' digests."""
    distinct = {entry.digest: entry for entry in images if entry is not None}
    table = {digest: entry for tables in gather_object([distinct]) for digest, entry in tables.items()}
    return [None if digest is None else table[digest]
            for digest in gather_object([entry.digest if entry is not None else None for entry in images])]
