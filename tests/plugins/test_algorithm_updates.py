"""Each algorithm's whole update on a hand-made multi-turn batch, against a loss written
here from the textbook definitions.

The policy is a context-free categorical distribution over a 6-token vocabulary and the
critic a value per (context length, position) table, so the gradient of the
algorithm's loss can be compared with the gradient of an independent computation.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from mirage.core.parallel.world import World
from mirage.core.config.options import NoOptions
from mirage.core.config.run_config import RunConfig
from mirage.core.plugin_api.manager import build_plugins
from mirage.core.rl import training
from mirage.core.rl.backend import PolicyOutput
from mirage.core.rl.batch import Batch, Group, Trajectory, Turn
from mirage.core.run.validate import build_config
from mirage.plugins.verl_algorithms.register import DAPO, GRPO, PPO, DrGRPO

VOCAB = 6


class TableBackend:
    """Records the gradient at every optimizer step instead of stepping."""

    supports_critic = True

    def __init__(self):
        g = torch.Generator().manual_seed(0)
        self.logits = torch.randn(VOCAB, generator=g).requires_grad_()
        self.value_table = torch.randn(4, 8, generator=g).requires_grad_()
        self.policy_grads: list[torch.Tensor] = []
        self.critic_grads: list[torch.Tensor] = []
        self.critic_lr = None

    def _mask(self, responses):
        width = max(len(r) for r in responses)
        ids = torch.tensor([r + [0] * (width - len(r)) for r in responses])
        mask = torch.tensor([[1.0] * len(r) + [0.0] * (width - len(r)) for r in responses])
        return ids, mask

    def forward(self, contexts, responses):
        ids, mask = self._mask(responses)
        logp = torch.log_softmax(self.logits, -1)
        entropy = -(logp.exp() * logp).sum()
        return PolicyOutput(logp[ids] * mask, entropy * mask, mask)

    def values(self, contexts, responses):
        ids, mask = self._mask(responses)
        rows = torch.tensor([len(c) % 4 for c in contexts])
        return self.value_table[rows, : ids.size(1)] * mask

    def sync_weights(self):  # generation and training share the table
        pass

    def optimizer_step(self, max_grad_norm):
        self.policy_grads.append(self.logits.grad.clone())
        self.logits.grad = None
        return 0.0

    def critic_step(self, max_grad_norm):
        self.critic_grads.append(self.value_table.grad.clone())
        self.value_table.grad = None
        return 0.0

    def has_reference(self):
        return False

    def train_step(self, rows, recipe):  # the in-process default every torch backend gets
        return training.train_step(self, rows, recipe)

    def has_critic(self):
        return self.critic_lr is not None

    def init_critic(self, lr):
        self.critic_lr = lr


def turn(context_len: int, response: list[int], reward: float, old_shift: float) -> Turn:
    t = Turn("x", "y", "z", "a", [], True, reward, [9] * context_len, response)
    t.old_shift = old_shift  # the old policy's log-prob offset: ratios of exp(-old_shift)
    return t


def hand_batch() -> Batch:
    """Two groups of two multi-turn trajectories; returns 1 / 0 and 0.5 / 0.1."""
    g0 = [
        [turn(1, [1, 2], 0.0, 0.3), turn(2, [3], 1.0, -0.3)],
        [turn(1, [2, 2, 4], 0.0, 0.05)],
    ]
    g1 = [
        [turn(3, [5], 0.5, -0.22), turn(1, [1, 1], 0.0, 0.1)],
        [turn(2, [0, 3], -0.1, 0.4), turn(3, [4, 4, 4, 4], 0.2, -0.02)],
    ]
    groups = []
    for p, trajectories in enumerate([g0, g1]):
        groups.append(Group(p, seed=p, trajectories=[
            Trajectory(p, k, seed=p, turns=turns) for k, turns in enumerate(trajectories)
        ]))
    return Batch(step=1, groups=groups)


def set_old_logprobs(batch: Batch, backend: TableBackend) -> None:
    logp = torch.log_softmax(backend.logits.detach(), -1)
    for t in batch.trajectories:
        for tu in t.turns:
            tu.old_logprobs = [float(logp[i]) + tu.old_shift for i in tu.response_ids]


def config(algo: str, **algorithm) -> RunConfig:
    return build_config({
        "algorithm": {"name": algo, "mini_batch_size": 64, "entropy_coef": 0.01, **algorithm},
        "rollout": {"prompts": 2, "group_size": 2, "max_new_tokens": 4},
    })


def fake_run(backend) -> SimpleNamespace:
    return SimpleNamespace(backend=backend, plugins=build_plugins())


# --------------------------------------------------------------------------- by hand


def clipped_term(ratio, advantage, low, high):
    """PPO's clipped objective for one token, with veRL's dual clip (3) for A < 0."""
    term = torch.maximum(-advantage * ratio, -advantage * ratio.clamp(1 - low, 1 + high))
    return torch.minimum(term, torch.tensor(-advantage * 3.0)) if advantage < 0 else term


def aggregate(per_trajectory: list[torch.Tensor], mode: str) -> torch.Tensor:
    if mode == "token-mean":
        return torch.cat(per_trajectory).mean()
    if mode == "seq-mean-token-mean":
        return torch.stack([t.mean() for t in per_trajectory]).mean()
    if mode == "seq-mean-token-sum":
        return torch.stack([t.sum() for t in per_trajectory]).mean()
    raise AssertionError(mode)


def group_advantages_by_hand(returns, groups, by_std):
    out = []
    for r, g in zip(returns, groups):
        members = [x for x, h in zip(returns, groups) if h == g]
        mean = sum(members) / len(members)
        std = math.sqrt(sum((x - mean) ** 2 for x in members) / (len(members) - 1))
        out.append((r - mean) / (std + 1e-6) if by_std else r - mean)
    return out


def expected_policy_grad(backend, trajectories, token_advantages, mode, low, high, entropy_coef):
    """Gradient of aggregate(clipped terms) - entropy_coef * aggregate(entropy)."""
    logits = backend.logits.detach().clone().requires_grad_()
    logp = torch.log_softmax(logits, -1)
    entropy = -(logp.exp() * logp).sum()
    terms, entropies = [], []
    for trajectory, advantages in zip(trajectories, token_advantages):
        tokens = [(tok, tu.old_shift) for tu in trajectory.turns for tok in tu.response_ids]
        ratios = [torch.exp(logp[tok] - (logp[tok].detach() + shift)) for tok, shift in tokens]
        terms.append(torch.stack([clipped_term(r, a, low, high) for r, a in zip(ratios, advantages)]))
        entropies.append(entropy.expand(len(tokens)))
    loss = aggregate(terms, mode) - entropy_coef * aggregate(entropies, mode)
    loss.backward()
    return logits.grad


# --------------------------------------------------------------------------- outcome algorithms


@pytest.mark.parametrize("cls, algo, mode, by_std, high", [
    (GRPO, "grpo", "seq-mean-token-mean", True, 0.2),
    (DrGRPO, "drgrpo", "seq-mean-token-sum", False, 0.2),
    (DAPO, "dapo", "token-mean", True, 0.28),
])
def test_outcome_update_matches_the_textbook_loss(cls, algo, mode, by_std, high):
    backend = TableBackend()
    batch = hand_batch()
    set_old_logprobs(batch, backend)
    metrics = cls(config(algo), NoOptions()).update(fake_run(backend), batch)
    assert metrics["update/optimizer_steps"] == 1.0 and len(backend.policy_grads) == 1

    trajectories = batch.trajectories
    returns = [t.episode_return for t in trajectories]
    if algo == "dapo":
        # max_new_tokens 4, buffer 1: the 4-token turn gets the full -1 overlong penalty.
        returns[3] -= 1.0
        assert metrics["update/overlong_turns"] == pytest.approx(1 / 7)
        assert metrics["update/extra_rollout_rounds"] == 0.0  # every group has signal
    advantages = group_advantages_by_hand(returns, [0, 0, 1, 1], by_std)
    per_token = [[a] * sum(len(tu.response_ids) for tu in t.turns) for t, a in zip(trajectories, advantages)]
    expected = expected_policy_grad(backend, trajectories, per_token, mode, 0.2, high, 0.01)
    torch.testing.assert_close(backend.policy_grads[0], expected, rtol=1e-5, atol=1e-7)
    assert backend.critic_grads == []


def test_loss_scale_multiplies_the_advantages():
    backend, scaled = TableBackend(), TableBackend()
    for b, scale in [(backend, 1.0), (scaled, 0.25)]:
        batch = hand_batch()
        set_old_logprobs(batch, b)
        batch.loss_scale = scale
        GRPO(config("grpo", entropy_coef=0.0), NoOptions()).update(fake_run(b), batch)
    # Scaling A by 0.25 scales every clipped term (ratios are fixed) by 0.25.
    torch.testing.assert_close(scaled.policy_grads[0], 0.25 * backend.policy_grads[0])


def test_mini_batches_and_epochs_count_optimizer_steps():
    backend = TableBackend()
    batch = hand_batch()
    set_old_logprobs(batch, backend)
    metrics = GRPO(config("grpo", mini_batch_size=3, epochs=2), NoOptions()).update(fake_run(backend), batch)
    assert metrics["update/optimizer_steps"] == 4.0  # 4 trajectories: [3, 1] per epoch
    assert len(backend.policy_grads) == 4


# --------------------------------------------------------------------------- PPO


def test_ppo_update_matches_gae_and_the_clipped_value_loss():
    backend = TableBackend()
    batch = hand_batch()
    set_old_logprobs(batch, backend)
    metrics = PPO(config("ppo"), NoOptions()).update(fake_run(backend), batch)
    assert backend.critic_lr == 5e-4  # the critic was built with the resolved critic lr
    assert len(backend.policy_grads) == 1 and len(backend.critic_grads) == 1

    # GAE by hand, gamma = lambda = 1: return-to-go minus value, per trajectory, over its
    # turns' response tokens laid end to end; each turn's reward on its last token.
    table = backend.value_table.detach()
    per_traj_adv, per_traj_ret, per_traj_val = [], [], []
    for t in batch.trajectories:
        values = [float(table[len(tu.context_ids) % 4, j]) for tu in t.turns for j in range(len(tu.response_ids))]
        rewards = []
        for tu in t.turns:
            rewards += [0.0] * (len(tu.response_ids) - 1) + [tu.reward]
        to_go = [sum(rewards[k:]) for k in range(len(rewards))]
        per_traj_adv.append([g - v for g, v in zip(to_go, values)])
        per_traj_ret.append(to_go)
        per_traj_val.append(values)
    flat = np.array([a for adv in per_traj_adv for a in adv])
    mean, std = flat.mean(), flat.std(ddof=1)
    whitened = [[(a - mean) / math.sqrt(std**2 + 1e-8) for a in adv] for adv in per_traj_adv]

    expected = expected_policy_grad(backend, batch.trajectories, whitened, "token-mean", 0.2, 0.2, 0.01)
    torch.testing.assert_close(backend.policy_grads[0], expected, rtol=1e-5, atol=1e-7)

    # Value loss: 0.5 * token mean of the squared error (new values equal the old ones on
    # the first pass, so clipping changes nothing).
    value_table = table.clone().requires_grad_()
    errors = []
    for t, returns in zip(batch.trajectories, per_traj_ret):
        predicted = [value_table[len(tu.context_ids) % 4, j] for tu in t.turns for j in range(len(tu.response_ids))]
        errors += [(v - r) ** 2 for v, r in zip(predicted, returns)]
    (0.5 * torch.stack(errors).mean()).backward()
    torch.testing.assert_close(backend.critic_grads[0], value_table.grad, rtol=1e-5, atol=1e-7)
    assert metrics["update/value_loss"] == pytest.approx(0.5 * float(torch.stack(errors).mean().detach()), rel=1e-5)


# --------------------------------------------------------------------------- DAPO dynamic sampling


class ScriptedRollout:
    """Fills each extra batch's groups with one-turn trajectories of scripted returns."""

    def __init__(self, returns_per_round: list[list[list[float]]]):
        self.rounds = iter(returns_per_round)
        self.seeds: list[list[int]] = []

    def mirage_rollout(self, run, batch):
        self.seeds.append([g.seed for g in batch.groups])
        for group, returns in zip(batch.groups, next(self.rounds)):
            for trajectory, ret in zip(group.trajectories, returns):
                trajectory.turns = [turn(1, [1, 2], ret, 0.0)]
        return batch

    def mirage_score(self, run, contexts, responses):
        return [[-1.0] * len(r) for r in responses]


def test_dynamic_sampling_drops_uniform_groups_and_refills_from_extra_rounds():
    backend = TableBackend()
    batch = hand_batch()
    batch.groups[1].trajectories[1].turns[0].reward = 0.3  # group 1: returns 0.5 and 0.5
    set_old_logprobs(batch, backend)
    rollout = ScriptedRollout([
        [[1.0, 1.0], [0.0, 0.0]],  # round 1: nothing with signal
        [[0.0, 1.0], [1.0, 0.0]],  # round 2: two groups with signal, one is needed
    ])
    run = SimpleNamespace(backend=backend, hook=rollout, step=1, plugins=build_plugins(), world=World())
    algo = DAPO(config("dapo", extra_rollout_rounds=5), NoOptions())
    groups, metrics = algo.training_groups(run, batch)
    assert metrics == {"update/extra_rollout_rounds": 2.0, "update/dropped_groups": 3.0}
    assert groups[0] is batch.groups[0] and len(groups) == 2
    assert [t.episode_return for t in groups[1].trajectories] == [0.0, 1.0]
    assert all(tu.old_logprobs == [-1.0, -1.0] for t in groups[1].trajectories for tu in t.turns)
    assert rollout.seeds[0] != rollout.seeds[1]
    assert not set(rollout.seeds[0]) & {g.seed for g in batch.groups}


def test_dynamic_sampling_stops_after_the_extra_round_budget():
    batch = hand_batch()
    for group in batch.groups:
        for t in group.trajectories:
            t.turns = [turn(1, [1], 1.0, 0.0)]
    rollout = ScriptedRollout([[[1.0, 1.0], [1.0, 1.0]]] * 3)
    run = SimpleNamespace(backend=TableBackend(), hook=rollout, step=1, plugins=build_plugins(), world=World())
    metrics = DAPO(config("dapo", extra_rollout_rounds=2), NoOptions()).update(run, batch)
    assert metrics["update/extra_rollout_rounds"] == 2.0
    assert metrics["update/dropped_groups"] == 6.0
    assert metrics["update/trajectories"] == 0.0 and metrics["update/optimizer_steps"] == 0.0
