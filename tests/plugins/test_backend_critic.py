"""The local backend's critic (PPO's value model): values, its own optimizer, checkpoints."""

from __future__ import annotations

import pytest
import torch

from mirage.core.run.validate import build_config
from mirage.envs.frozenlake import FrozenLake
from mirage.plugins.backend_local.backend import LocalBackend

CONTEXTS = [[5, 6, 7], [5, 8]]
RESPONSES = [[9, 10, 11, 12], [13]]


def local_backend(config) -> LocalBackend:
    """The local backend as the run builds it: ``cls(config, options)``."""
    return LocalBackend(config, LocalBackend.Options(**config.model.options))


@pytest.fixture
def backend(tmp_path_factory, tiny_config):
    data = tiny_config()
    data["model"]["options"].update(warmstart_episodes=10, warmstart_steps=2)
    data["algorithm"] = {"name": "ppo"}
    b = local_backend(build_config(data))
    b.prepare(FrozenLake, tmp_path_factory.getbasetemp() / "critic-warmstart-cache")
    return b


def test_no_critic_until_built(backend):
    assert LocalBackend.supports_critic and not backend.has_critic()
    with pytest.raises(RuntimeError, match="init_critic"):
        backend.values(CONTEXTS, RESPONSES)


def test_values_start_at_zero_and_are_masked(backend):
    backend.init_critic(1e-3)
    values = backend.values(CONTEXTS, RESPONSES)
    assert values.shape == (2, 4) and values.requires_grad
    assert values.abs().sum().item() == 0.0  # zero value head
    torch.nn.init.normal_(backend.critic.head.weight)
    values = backend.values(CONTEXTS, RESPONSES)
    assert values[1, 1:].abs().sum().item() == 0.0  # padding
    assert values[0].abs().min().item() > 0.0


def test_a_value_sees_the_context_and_only_the_response_before_it(backend):
    backend.init_critic(1e-3)
    torch.nn.init.normal_(backend.critic.head.weight)
    with torch.no_grad():
        full = backend.values([CONTEXTS[0]], [RESPONSES[0]])[0]
        prefix = backend.values([CONTEXTS[0]], [RESPONSES[0][:2]])[0]
        other_context = backend.values([[5, 6, 8]], [RESPONSES[0]])[0]
    torch.testing.assert_close(full[:2], prefix)
    assert not torch.allclose(full, other_context)


def test_critic_step_trains_the_critic_only(backend):
    backend.init_critic(1e-2)
    policy_before = [p.detach().clone() for p in backend.model.parameters()]
    target = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0] * 4, [1.0, 0.0, 0.0, 0.0]])
    losses = []
    for _ in range(5):
        values = backend.values(CONTEXTS, RESPONSES)
        loss = (((values - target) ** 2) * mask).sum() / mask.sum()
        loss.backward()
        assert backend.critic_step(1.0) > 0.0
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    assert all(torch.equal(a, b) for a, b in zip(policy_before, backend.model.parameters()))
    assert all(p.grad is None for p in backend.model.parameters())


def test_checkpoint_keeps_the_critic_and_its_optimizer(backend, tmp_path):
    backend.init_critic(1e-2)
    torch.nn.init.normal_(backend.critic.head.weight)
    backend.values(CONTEXTS, RESPONSES).sum().backward()
    backend.critic_step(1.0)
    backend.save(tmp_path / "ckpt")
    restored = local_backend(backend.config)
    restored.load(tmp_path / "ckpt")
    assert restored.has_critic()
    with torch.no_grad():
        torch.testing.assert_close(restored.values(CONTEXTS, RESPONSES), backend.values(CONTEXTS, RESPONSES))
    saved, loaded = backend.critic_optimizer.state_dict(), restored.critic_optimizer.state_dict()
    assert loaded["param_groups"][0]["lr"] == 1e-2
    assert saved["state"].keys() == loaded["state"].keys()


def test_checkpoint_without_a_critic_restores_none(backend, tmp_path):
    backend.save(tmp_path / "ckpt")
    restored = local_backend(backend.config)
    restored.load(tmp_path / "ckpt")
    assert not restored.has_critic()
