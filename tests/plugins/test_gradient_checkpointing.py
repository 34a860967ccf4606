"""``model.options.gradient_checkpointing``: the local backend recomputes each decoder
layer in the backward pass (transformers' gradient_checkpointing_enable) and trains to the
same numbers as without it; the option leaves every existing config's hash as it was."""

from __future__ import annotations

import torch

from mirage.core.run.validate import build_config
from mirage.envs.frozenlake import FrozenLake
from mirage.plugins.backend_local.backend import LocalBackend

CONTEXTS = [[5, 6, 7], [5, 8]]
RESPONSES = [[9, 10, 11, 12], [13]]


def prepared(tiny_config, cache, **options) -> LocalBackend:
    data = tiny_config()
    data["model"]["options"].update(warmstart_episodes=10, warmstart_steps=2, **options)
    config = build_config(data)
    backend = LocalBackend(config, LocalBackend.Options(**config.model.options))
    backend.prepare(FrozenLake, cache, progress=False)
    return backend


def gradients(backend: LocalBackend) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    out = backend.forward(CONTEXTS, RESPONSES)
    (-(out.logprobs * out.mask).sum() - 0.01 * out.entropy.sum()).backward()
    return out.logprobs.detach(), {n: p.grad.clone() for n, p in backend.model.named_parameters()}


def test_a_checkpointed_policy_trains_to_the_same_numbers(tiny_config, tmp_path):
    plain = prepared(tiny_config, tmp_path)
    checkpointed = prepared(tiny_config, tmp_path, gradient_checkpointing=True)  # the same cached warm start
    assert checkpointed.model.is_gradient_checkpointing and not plain.model.is_gradient_checkpointing
    logprobs, grads = gradients(plain)
    logprobs_c, grads_c = gradients(checkpointed)
    torch.testing.assert_close(logprobs_c, logprobs)
    for name, grad in grads.items():
        torch.testing.assert_close(grads_c[name], grad, msg=name)


def test_the_option_changes_no_existing_hash():
    # option defaults are not stored in model.options: a config that does not give it
    # hashes as before the option existed (this is the default config's hash then)
    assert "gradient_checkpointing" not in build_config({}).model.options
    # the hashes before the option (commit b8299aa)
    assert build_config({}).run_hash() == "dae3e85d992f1bf8"
    assert build_config({"model": {"options": {"hidden": 32}}}).run_hash() == "cacaa1947bd07459"
    assert build_config({}).run_hash() != build_config(
        {"model": {"options": {"gradient_checkpointing": True}}}).run_hash()
