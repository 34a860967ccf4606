"""``model.parallel: fsdp`` (backend_local/sharding.py) on two gloo processes takes the
step one process takes.

As test_parallel_training.py does for ddp: the tiny policy in float64, one ``train_step``
(grpo with a KL term, so the reference replica is read too) in this process and on two
spawned processes, compared within 1e-10: the replica's weights, the shards' gathered
weights and the metrics. The row counts cover a rank padded with a zero-loss micro-batch
(5 rows: micro-batches of 2, 2 and 1, two on rank 0 and one on rank 1) and a rank with
nothing to do (1 row).
"""

from __future__ import annotations

import pytest
import torch
from test_parallel_training import backend as tiny_backend
from test_parallel_training import close, measured_on_two_ranks, rows, two_rank_cases
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

from mirage.core.parallel.world import World
from mirage.plugins.backend_local.backend import LocalBackend
from mirage.plugins.verl_algorithms.loss import ClippedPolicyLoss

# process groups of 2 ranks, started once for the module's cases; busy processes: one
# such test at a time, on one xdist worker (tests/conftest.py)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("busy")]

RTOL = 1e-10


def backend(world: World, critic: bool = False) -> LocalBackend:
    policy = tiny_backend(critic, parallel="fsdp")  # a replicated critic: gradients summed as under ddp
    policy.world = world
    return policy


def flat(parameters) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in parameters])


def measure(world: World, count: int, critic: bool = False) -> dict:
    policy = backend(world, critic)
    metrics = policy.train_step(rows(critic)[:count], ClippedPolicyLoss(policy.config.algorithm))
    measured = {"parameters": flat(policy.model.parameters()), "metrics": metrics,
                "critic": flat(policy.critic.parameters()) if critic else None}
    if policy.sharded is not None:  # what the shards hold, gathered: the replica's weights
        full = get_model_state_dict(policy.sharded.module, options=StateDictOptions(full_state_dict=True))
        measured["shards"] = flat(full[name] for name, _ in policy.model.named_parameters())
    return measured


CASES = {"2+2-micro-batches": (7, False), "2+1-padded": (5, False), "1+0-padded": (1, False),
         "ppo-critic-2+1-padded": (5, True)}


two_rank_cases("fsdp", measure, CASES)


@pytest.fixture(scope="session")  # never rebuilt, wherever xdist interleaves the module's tests
def two_processes(tmp_path_factory) -> dict[str, list[dict]]:
    """Each case measured on the two ranks of one spawned gloo group (shared with
    test_parallel_training's and test_fsdp_lora's cases): case -> [rank 0, rank 1]."""
    return measured_on_two_ranks(tmp_path_factory, "fsdp")


@pytest.mark.parametrize("case", CASES)
def test_one_fsdp_step_on_two_processes_is_the_one_process_step(case, two_processes):
    count, critic = CASES[case]
    torch.set_num_threads(1)
    alone = measure(World(), count, critic)
    start = flat(backend(World()).model.parameters())
    assert not torch.equal(alone["parameters"], start)  # the step moved them
    for rank, got in enumerate(two_processes[case]):
        if critic:  # its value head computes in float32 whatever the policy's dtype
            assert close(got["critic"], alone["critic"], float32=True), f"rank {rank}: critic differs"
        assert close(got["parameters"], alone["parameters"]), f"rank {rank}: replica differs"
        assert close(got["shards"], alone["parameters"]), f"rank {rank}: shards differ"
        assert got["metrics"].keys() == alone["metrics"].keys()
        for name, value in alone["metrics"].items():
            assert got["metrics"][name] == pytest.approx(value, rel=RTOL, abs=1e-15), name

