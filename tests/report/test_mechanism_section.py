"""The mechanism study's sections and top line (mirage/report/mechanism.py) on a synthetic
store: top-p's arms told apart by their mass rule, every endpoint's paired difference, and
a gate that needs reward variance to fall as well as template collapse; a failed gate's top
line names the preconditions that failed."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from shared_builds import build_once

from mirage.core.config.run_config import RunConfig
from mirage.core.store.run_store import RunStore
from mirage.report.mechanism import CONTROLS_KEY, KEY, LINEAR, MAIN, headline, mechanism_study
from mirage.report.results import export_study, read_study
from mirage.report.verdicts import GATE_FAILED, GATE_PENDING

STEPS = 30  # reward variance is read over the first and last 10 steps
CHECKS = (0, 10, 20, 30)
# arm -> (filter, rho, softmax mass rule, regulariser scale, retrieval it falls to)
ARMS = {"none": ("none", 0.9, False, 1.0, 0.15), "main": ("top_p", 0.9, True, 1.0, 0.55),
        "linear": ("top_p", 0.9, False, 1.0, 0.40), "all": ("top_p", 1.0, False, 1.0, 0.30),
        "rescaled": ("none", 0.9, False, 0.75, 0.20)}


def _config(flt: str, rho: float, softmax: bool, scale: float, seed: int) -> dict:
    config = RunConfig().model_dump(mode="json")
    config.update(seed=seed, steps=STEPS)
    config["env"]["name"] = "frozenlake"
    config["filter"].update(name=flt, rho=rho)
    if softmax:
        config["filter"]["options"] = {"mode": "softmax"}
    config["algorithm"].update(entropy_coef=0.1 * scale, kl_coef=0.1 * scale)
    return config


def _write(store: RunStore, experiment: str, variance_falls: bool, arms: tuple[str, ...]) -> None:
    """The study's runs of ``arms``; only the unfiltered arm's runs store the per-step reward
    metrics the gate reads (a store write costs tens of milliseconds here)."""
    for arm in arms:
        flt, rho, softmax, scale, floor = ARMS[arm]
        for seed in range(5):
            run_id = f"{experiment}-{arm}-{seed}"
            store.create_run(run_id, _config(flt, rho, softmax, scale, seed), [], None,
                             experiment=experiment, seed=seed)
            per_step = sorted({*range(1, 11), *range(STEPS - 9, STEPS + 1), *CHECKS})  # the windows
            for step in per_step if arm == "none" else CHECKS:
                late = step / STEPS
                metrics = {"reward/std_mean": 0.4 - (0.3 * late if variance_falls else 0.0) + 0.01 * seed,
                           "reward/zero_variance_groups": 2.0, "reward/mixed_share": 0.5}
                if step in CHECKS:
                    fall = min(1.0, step / CHECKS[1])
                    metrics |= {"mi/first_turn/retrieval_acc": 0.9 - fall * (0.9 - floor) + 0.01 * seed * fall,
                                "mi/first_turn/retrieval_chance": 0.125, "mi/first_turn/h_cond": 0.2 + 0.3 * fall,
                                "mi/first_turn/mi_est": 1.0 - 0.5 * fall + floor,
                                "mi/first_turn/format_valid": 1.0,
                                "val/success": 0.6 + 0.2 * floor * fall + 0.003 * seed}
                if step and step % 10 == 0:  # the regulariser outweighs the task in q1 only
                    metrics |= {"grad/q1/task/total": 0.2, "grad/q1/entropy/total": 0.5, "grad/q1/kl/total": 0.1,
                                "grad/all/task/total": 1.0, "grad/all/entropy/total": 0.3, "grad/all/kl/total": 0.1}
                store.record_step(run_id, step, metrics)
            store.set_status(run_id, "finished")


def _export(directory: Path) -> dict:
    for name, falls, arms in (("flat", False, tuple(ARMS)), ("falls", True, ("none", "main"))):
        store = RunStore(directory / f"{name}.duckdb")
        _write(store, "mechanism", falls, arms)
        export_study(directory / f"{name}.duckdb", directory / name, ("mechanism",))
    return {}


@pytest.fixture(scope="session")
def exported(tmp_path_factory) -> Path:
    return build_once(tmp_path_factory, "mechanism-study", _export)


def test_collapse_without_falling_reward_variance_fails_the_gate(exported, tmp_path):
    results = read_study(exported / "flat")
    main, controls = mechanism_study(results, tmp_path / "img")
    assert (main.key, controls.key) == (KEY, CONTROLS_KEY)
    checks = {check.label: check.comparison for check in main.checks + controls.checks}
    # both of top-p's mass rules are arms of their own, each against no filter
    assert checks[f"first-turn retrieval acc. {MAIN} - none"].mean == pytest.approx(0.55 - 0.15, abs=0.01)
    assert checks[f"first-turn retrieval acc. {LINEAR} - none"].mean == pytest.approx(0.40 - 0.15, abs=0.01)
    assert checks[f"success {MAIN} - top-p 1"].n == 5
    assert f"first-turn retrieval acc. {MAIN} - none, regulariser x0.75" in checks
    assert main.evidence[0].startswith("5 of 5 unfiltered seeds end in the template-collapse signature")
    assert "reward variance did not fall without a filter" in main.evidence[0]
    assert main.evidence[0].endswith("so the gate failed.")
    assert main.verdict == controls.verdict == GATE_FAILED
    differences = next(table for caption, table in controls.tables if caption.startswith("Every endpoint"))
    assert "first-turn MI-Est" in differences and f"| {MAIN} - none |" in differences
    top = headline(results)
    assert top.startswith("**The paper's causal chain did not act in the lab (a negative result):**")
    failed, held = top.split("Preconditions that failed: ")[1].split(" Held: ")
    assert failed.startswith("(1) reward variance fell: (first 10 vs last 10 iterations")
    assert "the regulariser dominated the low-variance groups: its share of the gradient in the lowest " \
           "reward-std bucket q1 was 0.75" in held
    assert "template collapse: 5 of 5 unfiltered seeds" in held and "the format stayed valid: 5 of 5" in held


def test_the_gate_is_pending_while_unfiltered_seeds_are_missing(exported, tmp_path):
    whole = read_study(exported / "flat")
    running = replace(whole, runs=whole.runs[whole.runs["seed"] < 3])  # seeds 3 and 4 not finished
    main, controls = mechanism_study(running, tmp_path / "img")
    assert main.evidence[0].endswith("so the gate is pending: 3 of the 5 planned unfiltered seeds have finished.")
    assert main.verdict == controls.verdict == GATE_PENDING
    top = headline(running)
    assert top.startswith("**`mechanism` is still running:**") and "negative" not in top


def test_falling_reward_variance_and_collapse_pass_the_gate(exported, tmp_path):
    results = read_study(exported / "falls")
    main, controls = mechanism_study(results, tmp_path / "img")
    assert main.evidence[0].endswith("so the gate passed.") and main.gate is None
    assert main.verdict != GATE_FAILED
    assert "and reward variance fell, so its section tests" in headline(results)
