"""LoRA on the local backend (``model.lora``, mirage/plugins/backend_local/lora.py): the
adapters are all that trains, the reference is the base with them disabled, the critic
trains its own adapter on the same base, checkpoints hold the adapter and refuse another
base, and the merged export scores as the adapted policy does."""

from __future__ import annotations

import json

import pytest
import torch

from mirage.core.errors import ConfigError
from mirage.core.run.validate import build_config
from mirage.envs.frozenlake import FrozenLake
from mirage.plugins.backend_local.backend import LocalBackend
from mirage.plugins.backend_local.model import load_pretrained

CONTEXTS = [[5, 6, 7], [5, 8]]
RESPONSES = [[9, 10, 11, 12], [13]]


def lora_config(tiny_config, steps: int = 2, **lora):
    data = tiny_config()
    data["model"]["options"].update(warmstart_episodes=10, warmstart_steps=steps)
    data["model"]["lora"] = {"rank": 4, **lora}
    data["algorithm"] = {"name": "ppo", "kl_coef": 0.1}
    return build_config(data)


def prepared(config, cache) -> LocalBackend:
    backend = LocalBackend(config, LocalBackend.Options(**config.model.options))
    backend.prepare(FrozenLake, cache, progress=False)
    return backend


@pytest.fixture
def cache(tmp_path_factory):
    return tmp_path_factory.getbasetemp() / "lora-warmstart-cache"


@pytest.fixture
def backend(tiny_config, cache) -> LocalBackend:
    return prepared(lora_config(tiny_config), cache)


def policy_step(backend: LocalBackend) -> None:
    """One optimizer step on a loss of the policy, its KL reference and the critic, as a
    training step computes them: every forward, then one backward."""
    out = backend.forward(CONTEXTS, RESPONSES)
    if not backend.has_reference():
        backend.freeze_reference()
    reference = backend.reference_logprobs(CONTEXTS, RESPONSES)
    loss = -(out.logprobs * out.mask).sum() + ((out.logprobs - reference) ** 2).sum()
    if backend.has_critic():
        loss = loss + (backend.values(CONTEXTS, RESPONSES) - 1).pow(2).sum()
    loss.backward()
    backend.optimizer_step(1.0)
    if backend.has_critic():
        backend.critic_step(1.0)


def snapshot(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().clone() for name, tensor in module.state_dict().items()}


def test_only_the_adapters_train_and_hold_optimizer_state(backend):
    trained = backend.trained()
    names = {id(p): name for name, p in backend.model.named_parameters()}
    assert trained and all(".lora_" in names[id(p)] and ".default." in names[id(p)] for p in trained)
    assert all(not p.requires_grad for name, p in backend.model.named_parameters() if ".lora_" not in name)
    before = snapshot(backend.model)
    backend.freeze_reference()
    reference = backend.reference_logprobs(CONTEXTS, RESPONSES)
    policy_step(backend)
    policy_step(backend)
    after = backend.model.state_dict()
    changed = {name for name in before if not torch.equal(before[name], after[name])}
    assert changed and all(".lora_" in name and ".default." in name for name in changed)
    assert torch.equal(backend.reference_logprobs(CONTEXTS, RESPONSES), reference)  # the base never moved
    state = backend.optimizer.state_dict()["state"]
    assert len(state) == len(trained)
    assert sum(p.numel() for p in trained) < 0.5 * sum(p.numel() for p in backend.model.parameters())


def test_with_the_adapters_disabled_the_policy_is_the_base_exactly(backend, tiny_config, cache):
    for p in backend.trained():  # adapters far from their zero start
        torch.nn.init.normal_(p, std=0.5)
    base = prepared(build_config({**tiny_config(), "model": {
        "options": {**tiny_config()["model"]["options"], "warmstart_episodes": 10, "warmstart_steps": 2}}}), cache)
    expected = base.score(CONTEXTS, RESPONSES).logprobs
    backend.freeze_reference()
    assert not torch.equal(backend.score(CONTEXTS, RESPONSES).logprobs, expected)
    assert torch.equal(backend.reference_logprobs(CONTEXTS, RESPONSES), expected)
    assert backend._reference is None  # no copy of the model was made


def test_the_critic_trains_its_own_adapter_and_head_on_the_shared_base(backend):
    backend.init_critic(1e-2)
    torch.nn.init.normal_(backend.critic.head.weight)
    ids = {id(p) for p in backend.critic.parameters()}
    names = {name for name, p in backend.model.named_parameters() if id(p) in ids}
    assert names and all(".lora_" in name and ".critic." in name for name in names)
    assert len(ids) == len(names) + 2  # the adapter and the head, no copy of the base
    policy = snapshot(backend.model)
    values = backend.values(CONTEXTS, RESPONSES)
    (values - 1).pow(2).sum().backward()
    assert all(p.grad is None for p in backend.trained())  # the value loss never reaches the policy
    backend.critic_step(1.0)
    after = backend.model.state_dict()
    changed = {name for name in policy if not torch.equal(policy[name], after[name])}
    assert changed and all(".critic." in name for name in changed)


def test_the_merged_export_scores_as_the_adapted_policy(backend, tmp_path):
    for p in backend.trained():
        torch.nn.init.normal_(p, std=0.3)
    backend.export(tmp_path / "merged")
    merged, _ = load_pretrained(str(tmp_path / "merged"))
    assert not any(".lora_" in name for name, _ in merged.named_parameters())
    adapted = backend.score(CONTEXTS, RESPONSES).logprobs
    with torch.no_grad():
        exported = backend.per_token(merged.eval(), CONTEXTS, RESPONSES).logprobs
    assert (adapted - exported).abs().max().item() <= 1e-5
    backend.freeze_reference()
    assert (adapted - backend.reference_logprobs(CONTEXTS, RESPONSES)).abs().max().item() > 1e-3  # adapters count


def test_a_checkpoint_holds_the_adapters_and_resumes_from_them(backend, tiny_config, cache, tmp_path):
    backend.init_critic(1e-2)
    policy_step(backend)
    backend.save(tmp_path / "step")
    held = {path.name for path in (tmp_path / "step" / "policy").iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", "base.json"} <= held
    assert not any(name.startswith("model") for name in held)  # no copy of the base
    again = prepared(lora_config(tiny_config), cache)
    again.load(tmp_path / "step")
    assert torch.equal(again.score(CONTEXTS, RESPONSES).logprobs, backend.score(CONTEXTS, RESPONSES).logprobs)
    assert torch.equal(again.values(CONTEXTS, RESPONSES), backend.values(CONTEXTS, RESPONSES))
    assert again.has_reference()
    other = prepared(lora_config(tiny_config, steps=3), cache)  # another warm start: another base
    with pytest.raises(ConfigError, match="trained on another base"):
        other.load(tmp_path / "step")


@pytest.mark.parametrize("lora, parallel, message", [
    ({"rank": 33}, "none", "model.lora.rank 33 exceeds the model's hidden size (32)"),
    ({"target_modules": ["q_proj", "c_attn"]}, "none", "the model has no module 'c_attn'; its modules "
     "that take adapters: down_proj, embed_tokens, gate_proj, k_proj, lm_head, o_proj, q_proj, up_proj, v_proj"),
])
def test_lora_that_cannot_adapt_the_policy_is_refused_before_any_work(tiny_config, lora, parallel, message):
    data = tiny_config()
    data["model"] |= {"lora": lora, "parallel": parallel}
    assert message in LocalBackend.config_problem(build_config(data))


@pytest.mark.parametrize("parallel", ["none", "ddp", "fsdp"])
def test_lora_runs_under_every_parallel_mode(tiny_config, parallel):
    """fsdp included (tests/core/test_fsdp_lora.py: 2 processes equal one)."""
    data = tiny_config()
    data["model"] |= {"lora": {"rank": 4}, "parallel": parallel}
    assert LocalBackend.config_problem(build_config(data)) is None


# ---------------------------------------------------------------------------- end to end
LORA_RUN = ("--algo", "ppo", "--filter", "none", "--set", "model.lora.rank=4", "--set", "algorithm.kl_coef=0.05",
            "--quiet")


def stored_metrics(db) -> dict[str, float]:
    from mirage.core.store.run_store import RunStore

    store = RunStore(db)
    (run,) = store.list_runs()
    return {f"{step}:{name}": value for step, name, value in store.metrics(run["run_id"])
            if not name.startswith("time/")}


@pytest.mark.slow  # three short PPO runs (six steps in all), a merge and a probe
def test_a_lora_run_resumed_from_its_checkpoint_reproduces_the_uninterrupted_run(cli, tiny_config_file, tmp_path):
    from mirage.core.store.run_store import RunStore
    from mirage.plugins.backend_local.merge import restored

    whole, part = tmp_path / "whole.duckdb", tmp_path / "part.duckdb"
    # one step after the resume: its update needs the restored adapters, optimizer and critic
    code, out, err = cli("run", "--config", tiny_config_file, "--db", whole, "--steps", "3", *LORA_RUN)
    assert code == 0, err
    code, out, err = cli("run", "--config", tiny_config_file, "--db", part, "--steps", "2", *LORA_RUN)
    assert code == 0, err
    run_id = RunStore(part).list_runs()[0]["run_id"]
    code, out, err = cli("run", "--db", part, "--resume", run_id, "--steps", "3", "--quiet")
    assert code == 0, err
    expected = stored_metrics(whole)
    assert stored_metrics(part) == pytest.approx(expected, rel=1e-6, abs=1e-6)
    assert any(name.endswith("update/critic_grad_norm") and value > 0 for name, value in expected.items())

    # the merged export of its last checkpoint scores as the adapted policy
    code, out, err = cli("merge", f"{run_id}@3", "--out", tmp_path / "merged", "--db", part)
    assert code == 0, err
    merged, _ = load_pretrained(str(tmp_path / "merged"))
    adapted = restored(f"{run_id}@3", part)
    with torch.no_grad():
        exported = adapted.per_token(merged.eval(), CONTEXTS, RESPONSES).logprobs
    assert (adapted.score(CONTEXTS, RESPONSES).logprobs - exported).abs().max().item() <= 1e-5
    code, out, err = cli("merge", f"{run_id}@3", "--out", tmp_path / "merged", "--db", part)
    assert code == 2 and "expected a new or empty folder" in err
    code, out, err = cli("merge", f"{run_id}@2", "--out", tmp_path / "other", "--db", part)
    assert code == 2 and "no checkpoint at step 2" in err and not (tmp_path / "other").exists()
    code, out, err = cli("probe", "--model", f"{run_id}@3", "--db", part, "--quiet", "--json")
    assert code == 0, err  # core probe merges a LoRA run's step itself (once, in the cache)
    assert json.loads(out)["probes"][0]["model"] == f"{run_id}@3"
    adapter = tmp_path / "checkpoints" / run_id / "step-000003" / "policy"
    code, out, err = cli("run", "--config", tiny_config_file, "--db", tmp_path / "new.duckdb", "--model", adapter)
    assert code == 2 and "holds LoRA adapters" in err and "core merge" in err
    assert not (tmp_path / "new.duckdb").exists()


@pytest.mark.parametrize("setting, message", [
    ("model.lora.target_modules=[\"q_proj\",\"nope\"]", "the model has no module 'nope'; its modules that take adapters: "),
    ("model.lora.rank=0", "--set model.lora.rank=0: Input should be greater than or equal to 1"),
    ("model.lora.rank=64", "exceeds the model's hidden size (32)"),
])
def test_bad_lora_settings_are_one_line_exit_2_and_nothing_written(cli, tiny_config_file, tmp_path, setting, message):
    db = tmp_path / "runs.duckdb"
    code, out, err = cli("run", "--config", tiny_config_file, "--db", db, "--set", setting, "--quiet")
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not db.exists()
