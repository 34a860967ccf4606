"""The report says which MI convention every number uses, and shows finding 4 on both
per-token scales once a study's runs carry both (docs/conventions.md, issue #46)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from mirage.core.config.run_config import RunConfig
from mirage.report.conventions import carries_both_scales, mi_conventions, scale_statement
from mirage.report.findings import spearman
from mirage.report.results import Study, run_labels


def config(seed: int, **mi) -> dict:
    data = RunConfig(seed=seed).model_dump(mode="json")
    data["diagnostics"]["options"] = {"mi": mi} if mi else {}
    return data


def test_a_runs_mi_conventions_read_from_its_config():
    assert mi_conventions(config(0)) == "mirage"
    assert mi_conventions(config(0, scopes=["first_turn"])) == "mirage"
    assert mi_conventions(config(0, token_marginal="of_means")) == "token_marginal: of_means"
    ragen = mi_conventions(config(0, convention="ragen"))
    assert "columns: separate" in ragen and "retrieval_ties: topk" in ragen


def study(both_scales: bool, runs: int = 8) -> Study:
    rng = np.random.default_rng(0)
    labels = pd.DataFrame([run_labels(config(seed)) for seed in range(runs)])
    labels.insert(0, "run_id", [f"r{seed}" for seed in range(runs)])
    labels.insert(1, "experiment", "reproduction_powered")
    names = ["val/success", "mi/trajectory/mi_zscore", "mi/first_turn/mi_est"]
    if both_scales:
        names += ["mi/trajectory/mi_zscore_of_means", "mi/first_turn/mi_zscore_of_means",
                  "mi/first_turn/mi_est_of_means"]
    rows = [(run_id, step, name, float(rng.normal()))
            for run_id in labels["run_id"] for step in (1, 2, 3) for name in names]
    return Study(labels, pd.DataFrame(rows, columns=["run_id", "step", "name", "value"]))


def test_finding_4_shows_the_reference_scale_only_when_the_runs_carry_it(tmp_path):
    one, both = study(False), study(True)
    assert not carries_both_scales(one) and carries_both_scales(both)
    rows_one = spearman(one, tmp_path).tables[0]
    rows_both = spearman(both, tmp_path).tables[0]
    assert "RAGEN scale" not in rows_one[1] and "MIRAGE's per-token scale (PAPER.md's formula) only" in rows_one[0]
    assert "trajectory MI-ZScore (RAGEN scale)" in rows_both[1] and "RAGEN scale" in rows_both[0]


def test_the_page_says_which_scale_it_holds():
    configs = pd.Series([json.dumps(config(seed)) for seed in range(3)])
    only = scale_statement(study(False), configs, "reproduction_powered")
    assert "finding 4 holds MIRAGE's (PAPER.md's) per-token scale only" in only
    assert "kept no checkpoints to re-score" in only and "default conventions" in only
    assert "Finding 4 shows both scales" in scale_statement(study(True), configs, "x")
    assert only.endswith("for a study whose runs carry them.")
    assert scale_statement(study(False), configs, "x", ["mechanism"]).endswith(
        'carry them: "Finding 4 on `mechanism`".')
    mixed = pd.Series([json.dumps(config(0, convention="ragen"))])
    assert "columns: separate" in scale_statement(study(True), mixed, "x")
