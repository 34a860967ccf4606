"""Data-parallel training on torch.distributed (gloo, CPU): two processes, each working on
its share of the rows and summing gradients, take the step one process takes.

Each check runs the same seeded work in this process (a world of one) and on two spawned
processes with a gloo group, the tiny policy in float64, and compares: parameters after
one ``train_step`` (with and without a critic), its grad norm and loss metrics (within
1e-10), each loss term's gradient (``loss_gradients``, float32 by design), and the
cross-scoring matrix the ``mi`` diagnostic
gathers from its shards.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from transformers import Qwen2Config, Qwen2ForCausalLM

from mirage.core.config.presets import TINY
from mirage.core.parallel.world import World, current_world
from mirage.core.rl.batch import Turn
from mirage.core.rl.training import Row
from mirage.core.run.validate import build_config
from mirage.plugins.backend_local.backend import LocalBackend
from mirage.plugins.backend_local.options import LocalOptions
from mirage.plugins.diagnostics import cross_scoring
from mirage.plugins.verl_algorithms.loss import ClippedPolicyLoss

# process groups of 2 ranks, started once for the module's cases; busy processes: one
# such test at a time, on one xdist worker (tests/conftest.py)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("busy")]

RTOL = 1e-10
VOCAB, PAD = 40, 0
ROWS = 7  # micro-batches of 2 (2 + 2 on two ranks) or 3 (3 + 3, then 1: 2 + 1 micro-batches)


def backend(critic: bool, micro: int = 2, parallel: str = "ddp") -> LocalBackend:
    """A local backend over a seeded tiny float64 policy (no warm start), grpo or ppo."""
    data = {"env": {"name": "frozenlake"}, **copy.deepcopy(TINY)}
    data["model"] = {**data["model"], "parallel": parallel}
    data["algorithm"] = {"name": "ppo" if critic else "grpo", "micro_batch_size": micro, "kl_coef": 0.05,
                         "entropy_coef": 0.01, "lr": 1e-2}
    config = build_config(data)
    policy = LocalBackend(config, LocalOptions())
    torch.manual_seed(0)
    policy.model = Qwen2ForCausalLM(Qwen2Config(
        vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=64, pad_token_id=PAD, eos_token_id=1)).double()
    policy.tokenizer = SimpleNamespace(pad_token_id=PAD, eos_token_id=1)
    policy.optimizer = torch.optim.AdamW(policy.model.parameters(), lr=1e-2, weight_decay=0.0)
    if critic:
        policy.init_critic(1e-2)  # its backbone a float64 copy of the policy's; its head float32
    return policy


def rows(critic: bool) -> list[Row]:
    generator = torch.Generator().manual_seed(1)
    made = []
    for index in range(ROWS):
        context = torch.randint(2, VOCAB, (3 + index % 3,), generator=generator).tolist()
        response = torch.randint(2, VOCAB, (2 + index % 4,), generator=generator).tolist()
        turn = Turn(context="", response="", reasoning="", answer="", actions=[], format_ok=True, reward=0.0,
                    context_ids=context, response_ids=response,
                    old_logprobs=(-torch.rand(len(response), generator=generator, dtype=torch.float64) - 2).tolist())
        length = len(response)
        made.append(Row(turn, advantages=torch.randn(length, generator=generator, dtype=torch.float64),
                        returns=torch.randn(length, generator=generator, dtype=torch.float64) if critic else None,
                        old_values=torch.randn(length, generator=generator, dtype=torch.float64) if critic else None,
                        weight=1.0 / sum(2 + i % 4 for i in range(ROWS))))
    return made


def measure(world: World, critic: bool, micro: int = 2) -> dict:
    """One train_step, then the gradient decomposition and cross-scoring, on ``world``."""
    policy = backend(critic, micro)
    policy.world = world
    recipe = ClippedPolicyLoss(policy.config.algorithm)
    metrics = policy.train_step(rows(critic), recipe)
    gradients = policy.loss_gradients(rows(critic), recipe)
    turns = [r.turn for r in rows(critic)]
    run = SimpleNamespace(world=world, hook=SimpleNamespace(
        mirage_cross_score=lambda run, contexts, responses: policy.cross_score(contexts, responses)))
    scored = cross_scoring.cross_score(run, turns, [t.response_ids for t in turns])
    return {
        "parameters": torch.cat([p.detach().reshape(-1) for p in policy.model.parameters()]),
        "critic": torch.cat([p.detach().reshape(-1) for p in policy.critic.parameters()]) if critic else None,
        "metrics": metrics,
        "gradients": gradients,
        "cross": (scored.logprobs, scored.entropy),
    }


CASES = {"grpo": (False, 2), "grpo-uneven-micro-batches": (False, 3), "ppo-with-critic": (True, 2)}


def _rank(rank: int, size: int, rendezvous: str, out: str, measure_case: Callable[..., dict],
          cases: dict) -> None:
    """Every case in turn on one process group (starting the processes is most of the
    cost): ``measure_case(world, *arguments)``, saved as ``{case}-rank{rank}.pt``."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=size)
    try:
        for case, arguments in cases.items():
            torch.save(measure_case(current_world(), *arguments), f"{out}/{case}-rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def on_two_processes(directory: Path, measure_case: Callable[..., dict], cases: dict) -> dict[str, list[dict]]:
    """Each case measured by ``measure_case`` (a module-level function: the spawned ranks
    import it) on the two ranks of one spawned gloo group: case -> [rank 0, rank 1]."""
    mp.start_processes(_rank, args=(2, str(directory / "rendezvous"), str(directory), measure_case, cases),
                       nprocs=2, start_method="spawn", join=True)
    return {case: [torch.load(directory / f"{case}-rank{rank}.pt", weights_only=False) for rank in range(2)]
            for case in cases}


# Every module's cases on two ranks (this one's, test_fsdp_training's, test_fsdp_lora's),
# registered as each is imported: the first of their fixtures to run measures them all on
# one spawned gloo group (two fresh processes, their imports paid once). All three modules
# are in the busy group: one xdist worker, one spawn.
TWO_RANK_CASES: dict[str, tuple[Callable[..., dict], dict]] = {}
_two_rank_results: dict[str, dict[str, list[dict]]] = {}


def two_rank_cases(name: str, measure_case: Callable[..., dict], cases: dict) -> None:
    """Register a module's ``cases`` for ``measure_case`` (module level: the ranks import it)."""
    TWO_RANK_CASES[name] = (measure_case, cases)


def _measure_with(world: World, measure_case: Callable[..., dict], *arguments) -> dict:
    return measure_case(world, *arguments)


def measured_on_two_ranks(tmp_path_factory, name: str) -> dict[str, list[dict]]:
    """The registered cases of ``name`` measured on two ranks: case -> [rank 0, rank 1]."""
    if name not in _two_rank_results:
        pending = {n: registered for n, registered in TWO_RANK_CASES.items() if n not in _two_rank_results}
        flat = {f"{n}--{case}": (measure_case, *arguments)
                for n, (measure_case, cases) in pending.items() for case, arguments in cases.items()}
        got = on_two_processes(tmp_path_factory.mktemp("two-ranks"), _measure_with, flat)
        for n, (_, cases) in pending.items():
            _two_rank_results[n] = {case: got[f"{n}--{case}"] for case in cases}
    return _two_rank_results[name]


two_rank_cases("ddp", measure, CASES)


@pytest.fixture(scope="session")  # never rebuilt, wherever xdist interleaves the module's tests
def two_processes(tmp_path_factory) -> dict[str, list[dict]]:
    return measured_on_two_ranks(tmp_path_factory, "ddp")


def close(a: torch.Tensor, b: torch.Tensor, float32: bool = False) -> bool:
    """Equal within ``RTOL`` (float64), or float32 rounding for what is computed in float32
    whatever the policy's dtype: the gradient decomposition's flat gradients, the critic's
    value head."""
    rtol = 1e-5 if float32 or a.dtype != torch.float64 else RTOL
    return a.dtype == b.dtype and bool(torch.allclose(a, b, rtol=rtol, atol=rtol * float(a.abs().max())))


@pytest.mark.parametrize("case", CASES)
def test_one_step_on_two_processes_is_the_one_process_step(case, two_processes):
    critic, micro = CASES[case]
    torch.set_num_threads(1)
    alone = measure(World(), critic, micro)
    for rank, got in enumerate(two_processes[case]):
        assert close(got["parameters"], alone["parameters"]), f"rank {rank}: parameters differ"
        assert not torch.equal(alone["parameters"], torch.cat(
            [p.detach().reshape(-1) for p in backend(critic).model.parameters()]))  # the step moved them
        if critic:
            assert close(got["critic"], alone["critic"], float32=True), f"rank {rank}: critic differs"
        assert got["metrics"].keys() == alone["metrics"].keys()
        for name, value in alone["metrics"].items():
            assert got["metrics"][name] == pytest.approx(value, rel=RTOL, abs=1e-15), name
        assert got["gradients"].keys() == alone["gradients"].keys() == {"task", "entropy", "kl"}
        for name, gradient in alone["gradients"].items():
            assert close(got["gradients"][name], gradient), f"rank {rank}: gradient of {name} differs"
        for mine, theirs in zip(got["cross"], alone["cross"]):
            assert mine.shape == theirs.shape == (ROWS, ROWS) and close(mine, theirs)


def test_a_world_shares_every_item_once_in_order():
    for count in range(0, 9):
        for size in (1, 2, 3, 5):
            shares = [World(rank, size).share(count) for rank in range(size)]
            assert [i for share in shares for i in share] == list(range(count))
            assert max(map(len, shares)) - min(map(len, shares)) <= 1
    assert list(World(1, 2).share(1)) == []  # a rank may have nothing to do
    assert World().map_shares(lambda part: [x * 2 for x in part], [1, 2, 3]) == [2, 4, 6]
