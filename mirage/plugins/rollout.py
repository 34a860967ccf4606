"""Multi-turn rollout: every episode of the batch advances one turn per batched generate."""

from __future__ import annotations

from mirage.core.plugin_api.hookspecs import hookimpl
from mirage.core.plugin_api.session import RunSession
from mirage.core.rl.batch import Batch, Turn
from mirage.core.rl.episode import apply_response, build_context, context_images, start_episode
from mirage.core.rl.prompt import encode_prompt


@hookimpl
def mirage_rollout(run: RunSession, batch: Batch) -> Batch:
    """Default rollout through ``run.backend.generate``; works with any backend."""
    env_config = run.config.env
    episodes = []
    for group in batch.groups:
        for trajectory in group.trajectories:
            env = run.make_env()
            state = start_episode(env, group.seed, env_config)
            env.seed_transitions(trajectory.seed)
            episodes.append((trajectory, state))

    max_new_tokens = run.config.rollout.max_new_tokens
    while active := [(t, s) for t, s in episodes if not s.done]:
        contexts = [build_context(state, env_config) for _, state in active]
        images = [context_images(state, env_config) for _, state in active]
        context_ids = [encode_prompt(run.backend, c, pictures) for c, pictures in zip(contexts, images)]
        # per-trajectory streams only where the batch asks (data-parallel runs): a backend
        # from before the seeds argument still samples every other run
        seeded = {} if batch.sampling_seed is None else {
            "seeds": [batch.row_seed(t, len(t.turns)) for t, _ in active]}
        response_ids = run.backend.generate(
            context_ids, temperature=batch.temperature, greedy=batch.greedy, max_new_tokens=max_new_tokens,
            top_p=batch.top_p, min_p=batch.min_p, **seeded,
        )
        for (trajectory, state), context, pictures, ids, resp in zip(active, contexts, images, context_ids,
                                                                    response_ids):
            response = run.backend.decode(resp)
            result = apply_response(state, response, env_config)
            trajectory.turns.append(
                Turn(
                    context=context,
                    response=response,
                    reasoning=result.reasoning,
                    answer=result.answer,
                    actions=result.actions,
                    format_ok=result.format_ok,
                    reward=result.reward,
                    context_ids=list(ids),
                    response_ids=resp,
                    images=pictures,
                )
            )
            if state.done:
                trajectory.done = True
                trajectory.success = state.env.success
    return batch

