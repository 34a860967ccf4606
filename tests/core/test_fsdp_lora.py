"""``model.parallel: fsdp`` with LoRA (``model.lora``): the sharded copy holds the frozen
base and the adapters, only the policy's adapter trains, and two processes take the step
(and store the run) one process takes.

As test_fsdp_training.py does for full training: the tiny float64 policy with rank-4
adapters on every linear layer (their B set away from 0, so A trains from the first
step too), one ``train_step`` (grpo with a KL term: the reference is the base with the
adapters disabled, read on the replica; ppo: the critic's own adapter beside it) in this
process and on two spawned gloo processes, compared within 1e-10, and the AdamW state a
checkpoint holds (gathered from the shards); the grpo case starts from an optimizer's
state, as a resumed run does. Then a short PPO run, two steps on two processes extended
from its checkpoint on one, stores the metrics of one uninterrupted process.
"""

from __future__ import annotations

import math

import pytest
import torch
from test_fsdp_training import flat
from test_parallel_training import backend as tiny_backend
from test_parallel_training import close, measured_on_two_ranks, rows, two_rank_cases
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

from mirage.core.config.run_config import LoraConfig
from mirage.core.parallel.world import World
from mirage.core.store.run_store import RunStore
from mirage.plugins.backend_local import lora
from mirage.plugins.backend_local.backend import LocalBackend
from mirage.plugins.verl_algorithms.loss import ClippedPolicyLoss

# process groups of 2 ranks and runs on 2 processes: one such test at a time, on one
# xdist worker (tests/conftest.py)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("busy")]

RTOL = 1e-10


def backend(world: World, critic: bool = False) -> LocalBackend:
    policy = tiny_backend(critic, parallel="fsdp")  # grpo or ppo; its full critic replaced below
    policy.world = world
    policy.adapters = lora.Adapters(policy.model, LoraConfig(rank=4), seed=0, source="tiny")
    generator = torch.Generator().manual_seed(2)
    with torch.no_grad():  # B = 0 would leave A's first gradient 0
        for name, parameter in policy.model.named_parameters():
            if ".lora_B." in name:
                parameter.copy_(0.1 * torch.randn(parameter.shape, generator=generator, dtype=parameter.dtype))
    policy.optimizer = torch.optim.AdamW(policy.trained(), lr=1e-2, weight_decay=0.0)
    if critic:
        policy.init_critic(1e-2)  # its own adapter on the base; the sharded copy is made at the step
    return policy


def split(policy: LocalBackend) -> tuple[torch.Tensor, torch.Tensor]:
    """The replica's base weights and its policy adapter's, each flat."""
    base = [p for name, p in policy.model.named_parameters() if ".lora_" not in name]
    return flat(base), flat(policy.trained())


def measure(world: World, count: int, critic: bool = False, resumed: bool = False) -> dict:
    """The fsdp step (one process: the plain step) on ``count`` rows; ``resumed``: after a
    plain step every rank takes alike, whose AdamW state the shards take over (as from a
    checkpoint)."""
    policy = backend(World() if resumed else world, critic)
    recipe = ClippedPolicyLoss(policy.config.algorithm)
    turns = [r.turn for r in rows(critic)[:count]]
    contexts, responses = [t.prompt for t in turns], [t.response_ids for t in turns]
    policy.freeze_reference()
    before = policy.reference_logprobs(contexts, responses)
    if resumed:
        policy.train_step(rows(critic)[:count], recipe)
        policy.world = world
    metrics = policy.train_step(rows(critic)[:count], recipe)
    policy.gather_for_save()  # the checkpoint's optimizer: on the main rank, the shards' gathered
    base, adapter = split(policy)
    measured = {"base": base, "adapter": adapter, "metrics": metrics,
                "reference": (before, policy.reference_logprobs(contexts, responses)),
                "critic": flat(policy.critic.parameters()) if critic else None,
                "optimizer": policy._optimizer_to_save or policy.optimizer.state_dict()}
    if policy.sharded is not None:  # the shards' policy adapter, gathered: the replica's
        full = get_model_state_dict(policy.sharded.module, options=StateDictOptions(full_state_dict=True))
        measured["shards"] = flat(full[name] for name in policy.sharded.trained)
        measured["trainable"] = [name for name, p in policy.sharded.module.named_parameters() if p.requires_grad]
        measured["optimized"] = sum(len(g["params"]) for g in policy.sharded.optimizer.param_groups)
    return measured


CASES = {"grpo-kl-resumed-2+1-padded": (5, False, True), "ppo-critic-1+0-padded": (1, True, False)}


two_rank_cases("fsdp-lora", measure, CASES)


@pytest.fixture(scope="session")  # never rebuilt, wherever xdist interleaves the module's tests
def two_processes(tmp_path_factory) -> dict[str, list[dict]]:
    """Each case measured on the two ranks of one spawned gloo group (shared with
    test_parallel_training's and test_fsdp_training's cases): case -> [rank 0, rank 1]."""
    return measured_on_two_ranks(tmp_path_factory, "fsdp-lora")


@pytest.mark.parametrize("case", CASES)
def test_one_fsdp_lora_step_on_two_processes_is_the_one_process_step(case, two_processes):
    count, critic, resumed = CASES[case]
    torch.set_num_threads(1)
    alone = measure(World(), count, critic, resumed)
    start_base, start_adapter = split(backend(World()))
    assert torch.equal(alone["base"], start_base)  # the base is frozen
    assert not torch.equal(alone["adapter"], start_adapter)  # the step moved the adapter
    for rank, got in enumerate(two_processes[case]):
        assert torch.equal(got["base"], start_base), f"rank {rank}: the base moved"
        assert close(got["adapter"], alone["adapter"]), f"rank {rank}: adapter differs"
        assert close(got["shards"], alone["adapter"]), f"rank {rank}: shards differ"
        # only the policy's adapter trains in the sharded copy (not the critic's, nor the base)
        assert all(".lora_" in name and ".default." in name for name in got["trainable"])
        assert got["optimized"] == len(got["trainable"]) > 0
        before, after = got["reference"]  # the base with the adapters disabled, unmoved
        assert torch.equal(before, after) and close(after, alone["reference"][1])
        if critic:  # its value head computes in float32 whatever the policy's dtype
            assert close(got["critic"], alone["critic"], float32=True), f"rank {rank}: critic differs"
        if rank == 0:  # the policy adapter's AdamW state, as one process holds it
            mine, theirs = got["optimizer"], alone["optimizer"]
            assert mine["state"].keys() == theirs["state"].keys() and len(theirs["state"]) == len(got["trainable"])
            for index, state in theirs["state"].items():
                assert all(close(mine["state"][index][key], value) for key, value in state.items()), index
        assert got["metrics"].keys() == alone["metrics"].keys()
        for name, value in alone["metrics"].items():
            assert got["metrics"][name] == pytest.approx(value, rel=RTOL, abs=1e-15), name


# ---------------------------------------------------------------------------- end to end
LORA_PPO = ("--filter", "none", "--algo", "ppo", "--set", "model.lora.rank=4", "--set", "algorithm.kl_coef=0.05",
            "--quiet")


def stored_metrics(db) -> dict[str, float]:
    store = RunStore(db)
    (run,) = store.list_runs()
    return {f"{step}:{name}": value for step, name, value in store.metrics(run["run_id"])
            if not name.startswith("time/")}


def test_a_lora_fsdp_run_resumed_on_one_process_stores_the_metrics_of_one(cli, tiny_config_file, tmp_path):
    """Two steps under fsdp on two processes (ending on a validation step, as the
    uninterrupted run validates there), extended from the checkpoint (the adapters and
    their optimizer state gathered from the shards) to three on one process."""
    def run(name: str, *args) -> dict[str, float]:
        db = tmp_path / f"{name}.duckdb"
        code, out, err = cli("run", "--db", db, "--config", tiny_config_file, *LORA_PPO, *args, timeout=600)
        assert code == 0, err
        return db

    # ddp on one process: its samples drawn from per-trajectory streams, as the ranks' are
    one = stored_metrics(run("one", "--steps", "3", "--parallel", "ddp"))
    db = run("fsdp", "--steps", "2", "--parallel", "fsdp", "--nproc", "2")
    code, out, err = cli("run", "--db", db, "--resume", RunStore(db).list_runs()[0]["run_id"], "--steps", "3",
                         "--nproc", "1", "--quiet", timeout=600)
    assert code == 0, err
    got = stored_metrics(db)
    assert got.keys() == one.keys(), sorted(got.keys() ^ one.keys())
    # float32 sums over differently padded shares move in their last bits (test_parallel_run.py)
    assert not {name for name in one if not math.isclose(got[name], one[name], rel_tol=1e-5, abs_tol=1e-5)}
    assert all(name.split(":")[1] != "update/grad_norm" or value > 0 for name, value in one.items())
