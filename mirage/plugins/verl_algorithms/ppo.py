"""PPO's advantages: GAE over each multi-turn trajectory, with values from a critic.

Layout (docs/algorithms.md): a trajectory's turns are laid end to end as one token
sequence of the policy's response tokens only (environment text is left out, which is
what veRL's GAE does with observation tokens masked to 0). Each turn's reward sits on
that turn's last response token; each token's value is the critic's V(context + the
response so far). veRL's ``gae`` estimator then runs over the padded ``[N, T]`` batch
and whitens the advantages over all tokens of the batch; returns (advantage + value,
before whitening) are the critic's targets.
"""

from __future__ import annotations

import torch

from mirage.core.config.run_config import AlgorithmConfig
from mirage.core.rl.batch import Trajectory
from mirage.plugins.verl_algorithms.common import Row, core_algos


def lay_out(rewards: list[list[float]], values: list[list[torch.Tensor]]):
    """Token-level ``(rewards, values, mask)``, each ``[N, T]``, from per-turn rewards and
    per-turn value vectors of N trajectories (T: the longest trajectory's token count).

    A turn without response tokens passes its reward to the last token before it (or,
    when it comes first, to the next turn's last token)."""
    lengths = [sum(v.numel() for v in turns) for turns in values]
    width = max(max(lengths, default=0), 1)
    token_rewards = torch.zeros(len(values), width)
    token_values = torch.zeros(len(values), width)
    mask = torch.zeros(len(values), width)
    for i, (turn_rewards, turn_values) in enumerate(zip(rewards, values)):
        offset, pending = 0, 0.0
        for reward, value in zip(turn_rewards, turn_values):
            n = value.numel()
            token_values[i, offset : offset + n] = value
            mask[i, offset : offset + n] = 1.0
            offset += n
            if offset:
                token_rewards[i, offset - 1] += reward + pending
                pending = 0.0
            else:
                pending += reward
    return token_rewards, token_values, mask


def gae(rewards: list[list[float]], values: list[list[torch.Tensor]], gamma: float,
        lam: float) -> tuple[list[list[torch.Tensor]], list[list[torch.Tensor]]]:
    """veRL's ``gae`` estimator on the laid-out trajectories; returns (whitened
    advantages, returns), split back into the per-turn shapes of ``values``."""
    token_rewards, token_values, mask = lay_out(rewards, values)
    estimator = core_algos().get_adv_estimator_fn("gae")
    advantages, returns = estimator(
        token_level_rewards=token_rewards, values=token_values, response_mask=mask,
        gamma=gamma, lam=lam,
    )

    def split(tensor: torch.Tensor) -> list[list[torch.Tensor]]:
        out = []
        for i, turns in enumerate(values):
            pieces = torch.split(tensor[i, : sum(v.numel() for v in turns)], [v.numel() for v in turns])
            out.append([p.clone() for p in pieces])
        return out

    return split(advantages), split(returns)


@torch.no_grad()
def old_values(run, trajectories: list[Trajectory], chunk: int) -> list[list[torch.Tensor]]:
    """The critic's values of every response token before the update, per turn."""
    turns = [turn for t in trajectories for turn in t.turns]
    flat: list[torch.Tensor] = []
    for start in range(0, len(turns), chunk):
        part = [turn for turn in turns[start : start + chunk] if turn.response_ids]
        if part:
            values = run.backend.values([t.prompt for t in part], [t.response_ids for t in part])
            # on the CPU, beside the advantages and returns (the backend's device may differ)
            flat += [row[: len(t.response_ids)].float().cpu() for row, t in zip(values, part)]
    filled = iter(flat)
    return [
        [next(filled) if turn.response_ids else torch.zeros(0) for turn in t.turns] for t in trajectories
    ]


def gae_rows(run, trajectories: list[Trajectory], rewards: list[list[float]],
             settings: AlgorithmConfig) -> list[list[Row]]:
    """Per trajectory, one row per turn with response tokens: GAE advantages, returns
    and old values. Builds the critic from the current policy on first use."""
    if not run.backend.has_critic():
        run.backend.init_critic(settings.critic_lr)
    values = old_values(run, trajectories, settings.micro_batch_size)
    advantages, returns = gae(rewards, values, settings.gamma, settings.lam)
    return [
        [
            Row(turn, advantage, returns=ret, old_values=value)
            for turn, advantage, ret, value in zip(t.turns, adv_turns, ret_turns, value_turns)
            if turn.response_ids
        ]
        for t, adv_turns, ret_turns, value_turns in zip(trajectories, advantages, returns, values)
    ]
