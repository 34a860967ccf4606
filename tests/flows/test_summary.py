"""The per-cell summary table and the one-line verdict of a sweep."""

from mirage.flows.summary import SUMMARY_METRICS, render, verdict

ROWS = [
    {"cell": "filter.name=none", "seed": 0, "status": "finished", "reused": False, "error": None,
     "success": 0.5, "retrieval_acc": 0.875, "entropy": 1.25, "kept_ratio": 1.0, "run_id": "r1"},
    {"cell": "filter.name=top_p", "seed": 0, "status": "finished", "reused": True, "error": None,
     "success": 0.25, "retrieval_acc": None, "entropy": float("nan"), "kept_ratio": 0.5, "run_id": "r2"},
    {"cell": "filter.name=top_k", "seed": 0, "status": "failed", "reused": False,
     "error": "OSError: no model here", "success": None, "retrieval_acc": None, "entropy": None,
     "kept_ratio": None, "run_id": "r3"},
]


def test_summary_names_the_paper_metrics():
    assert SUMMARY_METRICS == {"success": "val/success", "retrieval_acc": "mi/first_turn/retrieval_acc",
                               "entropy": "update/entropy", "kept_ratio": "filter/kept_ratio"}


def test_render_shows_every_cell_and_each_failure():
    text = render(ROWS).splitlines()
    assert text[0].split() == ["cell", "seed", "status", "success", "retrieval_acc", "entropy",
                               "kept_ratio", "run_id"]
    assert text[1].split() == ["filter.name=none", "0", "finished", "0.500", "0.875", "1.250", "1.000", "r1"]
    assert text[2].split() == ["filter.name=top_p", "0", "finished", "(reused)", "0.250", "-", "-", "0.500", "r2"]
    assert text[4] == "failed: filter.name=top_k seed 0: OSError: no model here"


def test_verdict_counts_run_reused_and_failed():
    assert verdict(ROWS) == "3 cells: 1 run, 0 loaded, 1 reused, 1 failed"


def test_a_cell_only_loaded_from_an_interrupted_sweep_is_not_counted_as_run():
    """issue 22 (5): a re-run said "6 run, 0 reused" for 4 cells it only loaded."""
    rows = [dict(ROWS[0], loaded=True), *ROWS]
    assert verdict(rows) == "4 cells: 1 run, 1 loaded, 1 reused, 1 failed"
    assert render(rows).splitlines()[1].split()[2:4] == ["finished", "(loaded)"]
