"""Zero-variance groups carry no signal, exactly: returns, group statistics, filters,
DAPO's dynamic sampling, the reward diagnostics and every group-outcome advantage
(docs/diagnostics.md, "Zero-variance groups"), with veRL's float32 estimator kept as the
``group_statistics: verl`` option and its artifact measured."""

from __future__ import annotations

import pytest
import torch

from mirage.core.config.options import NoOptions, options_class
from mirage.core.config.run_config import FilterConfig, RunConfig
from mirage.core.rl.batch import Batch, Group, Selection, Trajectory, Turn
from mirage.core.rl.returns import returns_equal
from mirage.core.run.loop import execute
from mirage.core.run.validate import build_config
from mirage.core.store.run_store import RunStore
from mirage.plugins.diagnostics.rewards import reward_structure
from mirage.plugins.filters import TopPFilter
from mirage.plugins.filters.metrics import selection_metrics
from mirage.plugins.verl_algorithms.dapo import has_signal
from mirage.plugins.verl_algorithms.outcome import (
    exact_group_advantages, group_advantages, outcome_rows, verl_group_advantages,
    verl_zero_variance_mass,
)
from mirage.plugins.verl_algorithms.register import DAPO, GRPO, DrGRPO
from mirage.plugins.verl_algorithms.update import mini_batches

from test_algorithm_updates import TableBackend, fake_run, hand_batch, set_old_logprobs

# -0.8 reached by two summation orders: a plain left-to-right sum of eight -0.1 turns and
# -0.5 + -0.3. They differ by one ulp, the "float dust" of issue 16.
DUST = sum([-0.1] * 8)
assert DUST != -0.5 + -0.3 and abs(DUST + 0.8) < 1e-15


def turn(reward: float, tokens: int = 1) -> Turn:
    return Turn("x", "y", "z", "a", [], True, reward, [1], [2] * tokens)


def group(index: int, returns: list[float | list[float]]) -> Group:
    """Trajectory k has return ``returns[k]`` (one turn) or those turn rewards."""
    trajectories = [
        Trajectory(index, k, 100 * index + k,
                   turns=[turn(r) for r in (ret if isinstance(ret, list) else [ret])])
        for k, ret in enumerate(returns)
    ]
    return Group(prompt_index=index, seed=100 * index, trajectories=trajectories)


def dust_group(index: int = 0) -> Group:
    return group(index, [DUST, -0.5 + -0.3, DUST, -0.5 + -0.3])


# --------------------------------------------------------------------------- advantages

EQUAL_BATCHES = [([10.4] * 16, 16), ([0.9] * 8, 8)]
NORM_BY_STD = {"grpo": True, "drgrpo": False, "dapo": True}


@pytest.mark.parametrize("returns, size", EQUAL_BATCHES)
@pytest.mark.parametrize("algo", ["grpo", "drgrpo", "dapo"])
def test_equal_returns_get_exactly_zero_advantage(returns, size, algo):
    settings = build_config({"algorithm": {"name": algo}}).algorithm
    assert settings.group_statistics == "exact"
    assert settings.norm_adv_by_std is NORM_BY_STD[algo]
    trajectories = [Trajectory(0, k, k, turns=[turn(r, 3)]) for k, r in enumerate(returns)]
    rows = outcome_rows(trajectories, [0] * size, [[r] for r in returns], settings)
    assert all(float(a) == 0.0 for turns in rows for row in turns for a in row.advantages)


@pytest.mark.parametrize("returns, verl_value", [([10.4] * 16, -0.480), ([0.9] * 8, -0.056)])
def test_the_verl_option_reproduces_the_float32_artifact(returns, verl_value):
    groups = [0] * len(returns)
    verl = group_advantages(returns, groups, True, "verl")
    assert verl.dtype == torch.float32
    assert verl.tolist() == pytest.approx([verl_value] * len(returns), abs=1e-3)
    assert group_advantages(returns, groups, True, "exact").abs().max().item() == 0.0


@pytest.mark.parametrize("norm_by_std", [True, False])
def test_a_group_with_variance_gets_verl_identical_advantages(norm_by_std):
    # A mixed batch: 16 x 10.4 (zero variance), a 0/1 group, a 4-valued group, a lone one.
    returns = [10.4] * 16 + [1.0, 0.0, 1.0, 0.0] + [0.3, -0.1, 2.5, 0.9] + [0.7]
    groups = [0] * 16 + [1] * 4 + [2] * 4 + [3]
    exact = exact_group_advantages(returns, groups, norm_by_std)
    verl = verl_group_advantages(returns, groups, norm_by_std)
    assert exact.dtype == torch.float64
    assert exact[:16].tolist() == [0.0] * 16
    assert verl[:16].abs().min().item() > 0  # the float32 artifact, with or without std
    torch.testing.assert_close(exact[16:].float(), verl[16:], rtol=1e-6, atol=1e-6)


# --------------------------------------------------------------------------- float dust


def test_returns_equal_within_a_relative_tolerance():
    assert returns_equal([DUST, -0.8]) and returns_equal([1e6, 1e6 + 1e-4]) and returns_equal([3.0])
    assert not returns_equal([1.0, 1.0 + 1e-8]) and not returns_equal([0.0, 0.01])


def test_turn_rewards_summed_in_any_order_give_one_return():
    eight_turns = group(0, [[-0.1] * 8, [-0.8], [-0.3, -0.5], [-0.5, -0.3]])
    assert len(set(eight_turns.returns)) == 1


def test_dust_group_has_exactly_zero_variance_everywhere():
    g = dust_group()
    assert len(set(g.returns)) == 2  # the floats do differ
    assert g.reward_variance == 0.0 and g.reward_std == 0.0
    batch = Batch(step=1, groups=[dust_group(0), group(1, [1.0, 0.0, 1.0, 0.0])])
    assert reward_structure(batch)["reward/zero_variance_groups"] == 1.0
    assert selection_metrics(batch, [0.0, 1 / 3], [1])["filter/zero_variance_groups"] == 1.0


def top_p(**settings) -> TopPFilter:
    """The top-p filter as the run builds it, ``settings`` being the ``filter`` section's."""
    return TopPFilter(RunConfig(filter=FilterConfig(**settings)), options_class(TopPFilter)())


def test_top_p_excludes_a_dust_group_without_include_zero():
    only_dust = Batch(step=1, groups=[dust_group(0), dust_group(1)])
    assert top_p(rho=1.0).select(only_dust).kept_groups == []
    mixed = Batch(step=1, groups=[dust_group(0), group(1, [1.0, 0.0, 1.0, 0.0])])
    assert top_p(rho=1.0).select(mixed).kept_groups == [1]
    assert top_p(rho=1.0, include_zero=True).select(only_dust).kept_groups == [0, 1]


def test_a_dust_group_is_no_signal_for_dynamic_sampling():
    assert not has_signal(dust_group())
    assert has_signal(group(0, [-0.8, -0.7]))


def test_a_dust_group_gets_exactly_zero_advantage_under_both_norms():
    returns = dust_group().returns
    for norm_by_std in (True, False):
        assert exact_group_advantages(returns, [0] * 4, norm_by_std).tolist() == [0.0] * 4


# --------------------------------------------------------------------------- the artifact metric


def test_verl_zero_variance_mass_measures_the_artifact():
    returns = [10.4] * 16 + [1.0, 0.0, 1.0, 0.0]
    groups = [0] * 16 + [1] * 4
    verl = verl_group_advantages(returns, groups, True)
    mass = verl_zero_variance_mass(returns, groups, True)
    assert mass > 0
    assert mass == pytest.approx(float(verl[:16].abs().sum()) / 20)
    assert verl_zero_variance_mass([1.0, 0.0, 0.5, 0.2], [0, 0, 1, 1], True) == 0.0
    assert verl_zero_variance_mass([], [], True) == 0.0


def ten_four_batch() -> Batch:
    """One group of 16 returns of 10.4 and one 0/1 group, two response tokens each."""
    groups = [group(0, [10.4] * 16), group(1, [1.0, 0.0, 1.0, 0.0])]
    for g in groups:
        for t in g.trajectories:
            t.turns[0].response_ids = [1, 3]
    return Batch(step=1, groups=groups)


@pytest.mark.parametrize("statistics", ["exact", "verl"])
def test_update_logs_the_artifact_whichever_option_is_active(statistics):
    metrics = {}
    for name, batch in [("mixed", ten_four_batch()), ("signal", hand_batch())]:
        backend = TableBackend()
        set_old_logprobs_for(batch, backend)
        config = build_config({
            "algorithm": {"name": "grpo", "group_statistics": statistics},
            "rollout": {"prompts": 2, "group_size": 2, "max_new_tokens": 4},
        })
        metrics[name] = GRPO(config, NoOptions()).update(fake_run(backend), batch)
    assert metrics["mixed"]["update/verl_zero_variance_advantage_mass"] > 0.3
    assert metrics["signal"]["update/verl_zero_variance_advantage_mass"] == 0.0


def set_old_logprobs_for(batch: Batch, backend: TableBackend) -> None:
    for t in batch.trajectories:
        for tu in t.turns:
            tu.old_shift = 0.0
    set_old_logprobs(batch, backend)


def test_exact_update_trains_a_zero_variance_group_with_no_task_gradient():
    # entropy_coef 0: the only loss is the task term, so the exact option's gradient on
    # a batch of nothing but equal returns is exactly zero; veRL's float32 one is not.
    grads = {}
    for statistics in ("exact", "verl"):
        batch = Batch(step=1, groups=[group(0, [10.4] * 16)])
        backend = TableBackend()
        set_old_logprobs_for(batch, backend)
        config = build_config({"algorithm": {
            "name": "grpo", "group_statistics": statistics, "entropy_coef": 0.0}})
        GRPO(config, NoOptions()).update(fake_run(backend), batch)
        grads[statistics] = backend.policy_grads[0]
    assert grads["exact"].abs().max().item() == 0.0
    assert grads["verl"].abs().max().item() > 0.0


# --------------------------------------------------------------------------- equal optimizer steps


@pytest.mark.parametrize("n, count, sizes", [
    (8, 2, [4, 4]), (7, 2, [3, 4]), (10, 4, [2, 3, 2, 3]), (3, 4, [1, 1, 1]), (0, 2, []),
])
def test_mini_batches_split_into_near_equal_parts(n, count, sizes):
    parts = mini_batches(list(range(n)), 32, count)
    assert [len(p) for p in parts] == sizes
    assert [i for p in parts for i in p] == list(range(n))


def test_mini_batches_by_size_when_no_count():
    assert mini_batches(list(range(5)), 2, None) == [[0, 1], [2, 3], [4]]


@pytest.mark.parametrize("cls, algo", [(GRPO, "grpo"), (DrGRPO, "drgrpo"), (DAPO, "dapo")])
def test_mini_batches_give_filtered_and_unfiltered_updates_equal_steps(cls, algo):
    steps = {}
    for count in (None, 2):
        for kept in ([0, 1], [1]):  # no filter vs a filter that kept one group of two
            backend = TableBackend()
            batch = hand_batch()
            set_old_logprobs(batch, backend)
            batch.apply(Selection(kept))
            config = build_config({
                "algorithm": {"name": algo, "mini_batch_size": 1, "mini_batches": count,
                              "dynamic_sampling": False},
                "rollout": {"prompts": 2, "group_size": 2, "max_new_tokens": 4},
            })
            metrics = cls(config, NoOptions()).update(fake_run(backend), batch)
            steps[count, len(kept)] = metrics["update/optimizer_steps"]
            assert len(backend.policy_grads) == metrics["update/optimizer_steps"]
    assert steps[None, 2] == 4.0 and steps[None, 1] == 2.0  # today's behaviour: confounded
    assert steps[2, 2] == steps[2, 1] == 2.0


@pytest.mark.slow
def test_tiny_runs_with_and_without_a_filter_take_equal_steps(tiny_config, tmp_path):
    # The tiny policy's groups all have zero variance, so a top_p run would keep nothing;
    # top_k with include_zero keeps half of them (1 of 2 groups, 4 of 8 trajectories).
    steps = {}
    for count in (None, 2):
        for name, rho in (("none", 1.0), ("top_k", 0.5)):
            data = tiny_config()
            data["steps"] = 2
            data["filter"] = {"name": name, "rho": rho, "include_zero": True}
            data["algorithm"] = {"name": "grpo", "mini_batch_size": 2, "mini_batches": count}
            db = tmp_path / f"{name}-{count}.duckdb"
            run_id = execute(build_config(data), db, progress=False)
            store = RunStore(db)
            assert store.list_runs()[0]["config"]["algorithm"]["mini_batches"] == count
            steps[count, name] = [v for _, n, v in store.metrics(run_id) if n == "update/optimizer_steps"]
    assert steps[None, "none"] == [4.0, 4.0] and steps[None, "top_k"] == [2.0, 2.0]
    assert steps[2, "none"] == steps[2, "top_k"] == [2.0, 2.0]
