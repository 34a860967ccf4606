"""The template-collapse study's sections (mirage/report/template.py) on a synthetic store:
the arms (the rescaled regulariser named by its factor), the remedy's and the controls'
paired checks over the seeds both arms finished, and the gate that counts unfiltered seeds
ending in template collapse by the sustained rule: a failed gate leaves both sections
without a verdict."""

from __future__ import annotations

from pathlib import Path

import pytest
from shared_builds import build_once

from mirage.core.config.run_config import RunConfig
from mirage.core.store.run_store import RunStore
from mirage.report.results import export_study, read_study
from mirage.report.template import CONTROLS_KEY, KEY, headline, template_study
from mirage.report.verdicts import GATE_PENDING

STEPS = (0, 20, 40, 60)
# arm -> (filter, rho, entropy coef, KL coef, retrieval it falls to)
ARMS = {"none": ("none", 0.9, 0.3, 3.0, 0.15), "top-p 0.9": ("top_p", 0.9, 0.3, 3.0, 0.45),
        "top-p 1": ("top_p", 1.0, 0.3, 3.0, 0.30), "rescaled": ("none", 0.9, 0.15, 1.5, 0.25),
        "top-k 0.5": ("top_k", 0.5, 0.3, 3.0, 0.35)}
SPREAD = {"none": 0.004, "top-p 0.9": 0.01, "top-p 1": 0.002, "rescaled": 0.006, "top-k 0.5": 0.008}  # per seed


def _config(flt: str, rho: float, entropy: float, kl: float, seed: int) -> dict:
    config = RunConfig().model_dump(mode="json")
    config.update(seed=seed, steps=STEPS[-1])
    config["env"]["name"] = "frozenlake"
    config["filter"].update(name=flt, rho=rho)
    config["algorithm"].update(entropy_coef=entropy, kl_coef=kl)
    return config


def _write_runs(store: RunStore, seeds) -> list[str]:
    """Write the study's runs of ``seeds`` to ``store``; return their ids."""
    written = []
    for arm, (flt, rho, entropy, kl, floor) in ARMS.items():
        for seed in seeds:
            if arm == "top-p 0.9" and seed == 2:
                continue  # a study still running: seed 2 has no top-p run yet
            run_id = f"{arm}-{seed}"
            store.create_run(run_id, _config(flt, rho, entropy, kl, seed), [], None,
                             experiment="template_collapse", seed=seed)
            for step in STEPS:
                fall = min(1.0, step / STEPS[1])  # at its floor from the first check on
                store.record_step(run_id, step, {
                    "mi/first_turn/retrieval_acc": 0.9 - fall * (0.9 - floor) + SPREAD[arm] * seed * fall,
                    "mi/first_turn/retrieval_chance": 0.125, "mi/first_turn/h_cond": 0.2 + 0.3 * fall,
                    "mi/first_turn/format_valid": 1.0, "val/success": 0.7 + 0.1 * floor * fall + 0.001 * seed})
            written.append(run_id)
    return written


def _export(directory: Path) -> dict:
    """The study of seeds 0-2 exported to ``directory / "3"``, then with seed 3 too to
    ``directory / "4"``: one store, its seed-3 runs written after the first export."""
    store = RunStore(directory / "runs.duckdb")
    for seeds, target in (((0, 1, 2), "3"), ((3,), "4")):
        for run_id in _write_runs(store, seeds):
            store.set_status(run_id, "finished")
        export_study(directory / "runs.duckdb", directory / target, ("template_collapse",))
    return {}


@pytest.fixture(scope="session")
def exported(tmp_path_factory) -> Path:
    """The synthetic study's exports, written once per test run (shared by the xdist
    workers: conftest's ``build_once``; read-only)."""
    return build_once(tmp_path_factory, "template-study", _export)


@pytest.fixture
def results(exported):
    return read_study(exported / "3")


def test_remedy_controls_and_gate(results, tmp_path):
    main, controls = template_study(results, tmp_path / "img")
    assert (main.key, controls.key) == (KEY, CONTROLS_KEY)
    checks = {check.label: check for check in main.checks + controls.checks}
    remedy = checks["first-turn retrieval acc. top-p 0.9 - none"].comparison
    assert remedy.n == 2  # seeds 0 and 1: the ones both arms finished
    # endpoints are the last 3 checks after the warm start (20, 40, 60), all at the floor
    assert remedy.mean == pytest.approx(0.45 - 0.15, abs=0.01)
    assert set(checks) >= {"first-turn retrieval acc. top-p 0.9 - top-p 1",
                           "first-turn retrieval acc. top-p 0.9 - none, regulariser x0.5",
                           "first-turn retrieval acc. top-k 0.5 - none"}
    # every unfiltered seed ends within 0.1 of chance, H(Z|X) 2.5x its start, format valid
    assert main.evidence[0].startswith("3 of 3 unfiltered seeds end in the template-collapse "
                                       "signature by the sustained rule")
    assert "3 of them with H(Z|X) at most 3 x its start" in main.evidence[0]
    assert main.evidence[0].endswith("so the gate is pending: 3 of the 5 planned unfiltered seeds have finished.")
    assert (tmp_path / "img" / main.figure).stat().st_size > 1000
    # fewer than the gate's 4 seeds collapsed while 2 of the 5 planned seeds have not
    # finished: the page's top says the gate is pending, and neither section has a
    # verdict, whatever its checks show
    top = headline(results)
    assert "3 of 3 unfiltered seeds end in template collapse by the sustained rule so far" in top
    assert "(3 of the 5 planned unfiltered seeds have finished), so its gate (4 of 5) is pending" in top
    assert "induced by an entropy bonus 0.3, a KL term 3 towards the starting policy" in top
    assert checks["first-turn retrieval acc. top-p 0.9 - none"].verdict == "holds"
    assert main.verdict == controls.verdict == GATE_PENDING
    signatures = next(table for caption, table in main.tables if caption.startswith("Per run"))
    assert signatures.count("| none | ") == 3 and "template collapse 20" in signatures


def test_a_passed_gate_gives_the_checks_verdict(exported, tmp_path):
    main, controls = template_study(read_study(exported / "4"), tmp_path / "img")
    assert main.evidence[0].startswith("4 of 4 unfiltered seeds end in the template-collapse signature")
    assert main.evidence[0].endswith("so the gate passed.")
    # both arms' retrieval and success differ in every seed: the checks hold, and so does the finding
    assert main.gate is None and controls.gate is None and main.verdict == "holds"


def test_no_runs_no_sections(tmp_path):
    store = RunStore(tmp_path / "runs.duckdb")
    store.create_run("other", _config("none", 0.9, 0.3, 3.0, 0), [], None, experiment="other", seed=0)
    store.set_status("other", "finished")
    export_study(tmp_path / "runs.duckdb", tmp_path / "results", ("other",))
    assert template_study(read_study(tmp_path / "results"), tmp_path / "img") == []
    assert headline(read_study(tmp_path / "results")) == ""
