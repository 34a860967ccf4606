"""The collapse study's section, from a small synthetic store holding runs of two
experiments, exported with `core report --from-store --experiment ...`."""

from __future__ import annotations

import re

import pytest

from mirage.core.config.run_config import RunConfig
from mirage.core.store.run_store import RunStore
from mirage.report import sustained
from mirage.report.collapse import collapse_study
from mirage.report.results import export_study, read_study

SEEDS = (0, 1, 2)
STEPS = (0, 5, 10, 15, 20)


def _config(flt: dict, seed: int) -> dict:
    config = RunConfig().model_dump(mode="json")
    config.update(seed=seed, steps=STEPS[-1], filter={**config["filter"], **flt},
                  env={**config["env"], "name": "frozenlake"})
    return config


def _fill(store: RunStore, experiment: str, run_id: str, flt: dict, seed: int, lift: float) -> None:
    """A run whose retrieval accuracy falls over training, less when ``lift`` is larger."""
    store.create_run(run_id, _config(flt, seed), [], None, experiment=experiment, seed=seed)
    for step in STEPS:
        fall = step / STEPS[-1]
        store.record_step(run_id, step, {
            "mi/first_turn/retrieval_acc": 0.6 - fall * (0.4 - lift) + 0.01 * seed,
            "mi/first_turn/retrieval_chance": 0.125,
            "mi/first_turn/h_cond": 0.4 + 0.1 * fall + 0.005 * seed,
            "val/success": 0.7 - fall * (0.3 - lift) - 0.02 * seed * (step % 10 == 0),
        })
    store.set_status(run_id, "finished")


@pytest.fixture
def store(tmp_path):
    store = RunStore(tmp_path / "runs.duckdb")
    for seed in SEEDS:
        _fill(store, "collapse", f"none-{seed}", {"name": "none"}, seed, lift=0.0)
        _fill(store, "collapse", f"topp-{seed}", {"name": "top_p", "rho": 0.9}, seed, lift=0.2 + 0.01 * seed)
        _fill(store, "other", f"other-{seed}", {"name": "none"}, seed, lift=0.0)
    return tmp_path / "runs.duckdb"


def test_collapse_section_pairs_top_p_with_no_filter_by_seed(store, tmp_path):
    assert export_study(store, tmp_path / "results", ("reproduction", "collapse")) == {
        "reproduction": 0, "collapse": 6}
    study = read_study(tmp_path / "results")
    assert set(study.runs["experiment"]) == {"collapse"}
    finding = collapse_study(study, tmp_path / "img")
    assert finding is not None and finding.figure == "collapse_study_curves.png"
    assert (tmp_path / "img" / finding.figure).stat().st_size > 1000
    by_label = {check.label: check for check in finding.checks}
    retrieval = by_label["frozenlake: retrieval acc. top-p 0.9 - none"].comparison
    # endpoint = mean of the last 3 checks (10, 15, 20): falls 0.5, 0.75, 1 of (0.4 - lift)
    assert retrieval.n == 3 and retrieval.mean == pytest.approx(0.75 * 0.21)
    assert by_label["frozenlake: retrieval acc. top-p 0.9 - none"].verdict == "holds"
    assert by_label["frozenlake: success top-p 0.9 - none"].verdict == "holds"
    assert finding.verdict == "holds"
    per_seed, checks = finding.tables[0][1], finding.tables[1][1]
    assert per_seed.count("| frozenlake | top-p 0.9 |") == 3 and "retrieval chance" in per_seed
    assert "95% CI (t)" in checks and "| p | p (Holm) |" in checks and "detectable (80%)" in checks
    assert "bootstrap" not in checks


def test_collapse_section_is_none_without_collapse_runs(store, tmp_path):
    export_study(store, tmp_path / "results", ("other",))
    assert collapse_study(read_study(tmp_path / "results"), tmp_path / "img") is None


def test_report_exports_the_named_experiments_and_renders_the_collapse_section(store, tmp_path, cli):
    out, results = tmp_path / "report.md", tmp_path / "results"
    code, stdout, stderr = cli("report", "--from-store", store, "--experiment", "collapse",
                               "--experiment", "other", "--results", results, "--out", out,
                               "--figures", tmp_path / "img", "--notes", tmp_path / "none.yaml")
    assert code == 0, stderr
    assert "exported 9 runs" in stdout and "collapse: 6, other: 3" in stdout
    text = out.read_text()
    assert "## Delayed degeneration, not template collapse (experiment `collapse`)" in text
    assert re.findall(r"\*\*Verdict: (.+?)\.\*\*", text) == ["holds"]
    assert "![Delayed degeneration" in text
    code, _, stderr = cli("report", "--from-store", store, "--experiment", "nothing",
                          "--results", results, "--out", out)
    assert code == 2 and "no finished run of experiment 'nothing'" in stderr


def test_signature_reads_the_regime_from_a_sustained_signal(tmp_path):
    """Per run: the regime of its endpoint (mean of the last 3 checks after the warm start),
    the regimes held for 3 consecutive checks with the first step of each, the single
    template-collapse checks counted, and the extremes."""
    from mirage.report import regime

    store = RunStore(tmp_path / "runs.duckdb")
    store.create_run("r", _config({"name": "none"}, 0), [], None, experiment="collapse", seed=0)
    # (retrieval, H(Z|X), format validity); chance 0.125, so "at chance" is <= 0.225
    readings = [(0.9, 0.2, 1.0), (0.3, 0.1, 0.9), (0.35, 0.1, 0.9), (0.4, 0.1, 0.9), (0.15, 0.1, 0.8),
                (0.14, 0.3, 0.95), (0.14, 0.3, 0.95), (0.14, 0.3, 0.95), (0.2, 0.3, 0.95), (0.3, 0.3, 0.95)]
    for step, (acc, h, fmt) in enumerate(readings):
        store.record_step("r", 5 * step, {
            "mi/first_turn/retrieval_acc": acc, "mi/first_turn/retrieval_chance": 0.125,
            "mi/first_turn/h_cond": h, "mi/first_turn/format_valid": fmt})
    store.set_status("r", "finished")
    export_study(tmp_path / "runs.duckdb", tmp_path / "results", ("collapse",))
    found = regime.signature(read_study(tmp_path / "results"), "r")
    # steps 5-15 tell inputs apart at half the entropy (compressed, held from 5); step 20 is
    # at chance at half the entropy (one check: not held); 25-40 at chance with entropy 1.5x
    # and a valid format (template collapse, held from 25); step 45 is input-dependent again
    assert found[f"held {sustained.K} checks (first step)"] == "compressed 5; template collapse 25"
    assert found["single checks in template collapse"] == "4 of 10"
    # endpoint: steps 35, 40, 45 -> retrieval (0.14 + 0.2 + 0.3) / 3 = 0.213 <= 0.225, H 1.5x
    assert found["retrieval (endpoint)"] == pytest.approx(0.64 / 3)
    assert found["regime (endpoint)"] == "template collapse"
    assert found["H(Z|X) / start (endpoint)"] == pytest.approx(1.5)
    assert found["lowest retrieval"] == 0.14 and found["highest H(Z|X) / start"] == pytest.approx(1.5)


def test_one_check_at_chance_is_no_regime(tmp_path):
    """A single check that dips under chance + 0.1 (by one or two samples) is neither an
    entered regime nor the run's regime: the gate counts endpoints."""
    from mirage.report import regime

    store = RunStore(tmp_path / "runs.duckdb")
    store.create_run("r", _config({"name": "none"}, 0), [], None, experiment="collapse", seed=0)
    for step, acc in enumerate([0.9, 0.26, 0.25, 0.21, 0.24, 0.25]):
        store.record_step("r", 5 * step, {
            "mi/first_turn/retrieval_acc": acc, "mi/first_turn/retrieval_chance": 0.125,
            "mi/first_turn/h_cond": 0.4, "mi/first_turn/format_valid": 1.0})
    store.set_status("r", "finished")
    export_study(tmp_path / "runs.duckdb", tmp_path / "results", ("collapse",))
    study = read_study(tmp_path / "results")
    found = regime.signature(study, "r")
    assert found["single checks in template collapse"] == "1 of 6"
    assert "template collapse" not in found[f"held {sustained.K} checks (first step)"]
    assert found["regime (endpoint)"] == "diverse"  # (0.21 + 0.24 + 0.25) / 3 = 0.233 > 0.225
    assert regime.count_regime(study, study.runs, "template collapse") == 0


def test_export_merges_several_stores_and_lists_every_calibration_cell(store, tmp_path):
    from mirage.report import regime

    other = RunStore(tmp_path / "calibration.duckdb")
    for coef in (0.1, 0.3):
        config = _config({"name": "none"}, 0)
        config["algorithm"]["entropy_coef"] = coef
        other.create_run(f"cal-{coef}", config, [], None, experiment="collapse_calibration", seed=0)
        for step in STEPS:
            other.record_step(f"cal-{coef}", step, {
                "mi/first_turn/retrieval_acc": 0.9 - coef * step / 10,
                "mi/first_turn/retrieval_chance": 0.125, "mi/first_turn/h_cond": 0.2 + coef * step,
                "mi/first_turn/format_valid": 1.0, "val/success": 0.7})
        other.set_status(f"cal-{coef}", "finished")
    counts = export_study([store, tmp_path / "calibration.duckdb"], tmp_path / "results",
                          ("collapse", "collapse_calibration"))
    assert counts == {"collapse": 6, "collapse_calibration": 2}
    table = regime.calibration_table(read_study(tmp_path / "results"), "collapse_calibration")
    assert list(table["entropy coef"]) == ["0.1", "0.3"] and "kl coef" not in table  # only what varies
    # 0.3: retrieval 0.9 - 0.6 = 0.3 at step 20, never within 0.1 of chance, while H(Z|X)
    # grows 0.2 -> 6.2; with 0.1 it reaches 0.7 (3.5x its start) at step 5: both runs
    # degenerate there by the entropy rule, though every response parses
    assert list(table["regime (endpoint)"]) == ["degeneration", "degeneration"]
    assert list(table[f"held {sustained.K} checks (first step)"]) == ["degeneration 5"] * 2
    assert list(table["single checks in template collapse"]) == ["0 of 5"] * 2
    assert table["lowest retrieval"].tolist() == pytest.approx([0.7, 0.3])


def test_degeneration_begins_at_the_first_of_three_consecutive_degenerate_checks(tmp_path):
    from mirage.report import regime

    store = RunStore(tmp_path / "runs.duckdb")
    store.create_run("r", _config({"name": "none"}, 0), [], None, experiment="collapse", seed=0)
    # a single check below half the responses parsing (step 10) is no onset; 20-30 is
    for step, fmt in enumerate([1.0, 0.9, 0.4, 0.9, 0.4, 0.0, 0.0]):
        store.record_step("r", 5 * step, {
            "mi/first_turn/retrieval_acc": 0.9, "mi/first_turn/retrieval_chance": 0.125,
            "mi/first_turn/h_cond": 0.2, "mi/first_turn/format_valid": fmt})
    store.set_status("r", "finished")
    export_study(tmp_path / "runs.duckdb", tmp_path / "results", ("collapse",))
    found = regime.signature(read_study(tmp_path / "results"), "r")
    assert found[f"held {sustained.K} checks (first step)"] == "degeneration 20"
    assert found["regime (endpoint)"] == "degeneration"
    assert regime.degenerate_step(read_study(tmp_path / "results"), "r") == 20.0


def test_a_run_that_never_degenerates_is_censored_one_check_past_its_last(tmp_path):
    from mirage.report import regime

    store = RunStore(tmp_path / "runs.duckdb")
    store.create_run("r", _config({"name": "top_p"}, 0), [], None, experiment="collapse", seed=0)
    for step in (0, 5, 10):
        store.record_step("r", step, {"mi/first_turn/format_valid": 0.9,
                                         "mi/first_turn/retrieval_acc": 0.9,
                                         "mi/first_turn/retrieval_chance": 0.125,
                                         "mi/first_turn/h_cond": 0.2})
    store.set_status("r", "finished")
    export_study(tmp_path / "runs.duckdb", tmp_path / "results", ("collapse",))
    assert regime.degenerate_step(read_study(tmp_path / "results"), "r") == 15.0


def test_regulariser_share_counts_only_checks_before_the_format_broke(tmp_path):
    """gradient_shares: (||g_ent|| + ||g_kl||) / (||g_task|| + ||g_ent|| + ||g_kl||) per arm and bucket, averaged over
    checks before the first step any run's format validity fell below 0.9, leaving out a
    bucket's checks without task gradient (share 1 by construction)."""
    from mirage.report import regime

    store = RunStore(tmp_path / "runs.duckdb")
    for algorithm, task in (("grpo", 1.0), ("drgrpo", 3.0)):
        config = _config({"name": "none"}, 0)
        config["algorithm"]["name"] = algorithm
        store.create_run(algorithm, config, [], None, experiment="collapse_gradients", seed=0)
        for step, valid in ((5, 1.0), (10, 0.95), (15, 0.8), (20, 0.3)):
            store.record_step(algorithm, step, {
                "mi/first_turn/format_valid": valid if algorithm == "grpo" else 1.0,
                "grad/q1/task/total": 0.0, "grad/q1/entropy/total": 2.0,  # no task signal
                "grad/q6/task/total": task * step, "grad/q6/entropy/total": 1.0 * step,
                "grad/q6/kl/total": (1.0 if algorithm == "drgrpo" else 0.0) * step,
            })
        store.set_status(algorithm, "finished")
    export_study(tmp_path / "runs.duckdb", tmp_path / "results", ("collapse_gradients",))
    study = read_study(tmp_path / "results")
    until = regime.valid_format_until(study, study.runs)
    assert until == 15  # grpo's format validity 0.8 there
    shares = regime.gradient_shares(study, study.runs, by=["algorithm"], before=until).set_index("algorithm")
    # the regulariser is the entropy and the KL term: (1 + 1) / (3 + 1 + 1) with Dr. GRPO's KL
    assert shares.loc["grpo", "q6"] == pytest.approx(0.5) and shares.loc["drgrpo", "q6"] == pytest.approx(0.4)
    assert "q1" not in shares.columns  # every q1 check lacked a task gradient
    assert shares.loc["grpo", "checks"] == 2 and shares.loc["grpo", "steps"] == "5-10"
    everything = regime.gradient_shares(study, study.runs, by=["algorithm"])
    assert everything.set_index("algorithm").loc["grpo", "checks"] == 4
