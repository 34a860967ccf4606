"""The score stage: old log-probs of a batch under the policy that sampled it. The run
loop calls it after every rollout, and so does an algorithm that samples extra rounds
(dapo's dynamic sampling), so both score exactly alike."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mirage.core.plugin_api.blame import backend_suspect, call_stage, hook_suspects

if TYPE_CHECKING:
    from mirage.core.plugin_api.session import RunSession
    from mirage.core.rl.batch import Batch


def score_batch(run: RunSession, batch: Batch) -> None:
    """Set ``old_logprobs`` on every turn with a response, through ``mirage_score``; an
    error names the plugin (or backend) whose code raised it."""
    turns = [turn for t in batch.trajectories for turn in t.turns if turn.response_ids]
    if not turns:
        return
    logprobs = call_stage(
        run, "scoring",
        lambda: run.hook.mirage_score(run=run, contexts=[t.context_ids for t in turns],
                                      responses=[t.response_ids for t in turns]),
        lambda: hook_suspects(run, "mirage_score") + [backend_suspect(run)])
    for turn, values in zip(turns, logprobs):
        turn.old_logprobs = values
