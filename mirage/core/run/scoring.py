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
    error names the plugin (or backend) whose code raised it. In a data-parallel run the
    ranks score shares of the turns and every rank gets all of them."""
    turns = [turn for t in batch.trajectories for turn in t.turns if turn.response_ids]
    if not turns:
        return
    def score(part: list) -> list[list[float]]:
        return call_stage(
            run, "scoring",
            lambda: run.hook.mirage_score(run=run, contexts=[t.prompt for t in part],
                                          responses=[t.response_ids for t in part]),
            lambda: hook_suspects(run, "mirage_score") + [backend_suspect(run)])

    # each rank scores its share of the turns (all of them in a one-process run)
    logprobs = run.world.map_shares(score, turns)
    for turn, values in zip(turns, logprobs):
        turn.old_logprobs = values
