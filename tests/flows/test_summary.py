"""The per-cell summary table and the one-line verdict of a sweep."""

from mirage.flows.summary import REASON_CHARS, SUMMARY_METRICS, first_failure, progress_line, reason, render, verdict

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


def test_a_failure_reason_is_one_line():
    assert reason("ValueError: bad\n  traceback line") == "ValueError: bad"
    assert reason(None) == reason("  ") == "no error recorded"
    long = reason("E: " + "x" * 1000)
    assert len(long) == REASON_CHARS and long.endswith("...")


def test_the_first_failure_names_the_cell_and_its_reason():
    assert first_failure(ROWS) == "filter.name=top_k seed=0: OSError: no model here"
    assert first_failure(ROWS[:2]) is None


def test_a_progress_line_counts_the_cells_so_far():
    rows = [*ROWS, {**ROWS[0], "cell": "filter.name=entropy", "status": "pending"}]
    assert progress_line(ROWS[2], rows) == ("[3/4] filter.name=top_k seed=0: failed (OSError: no model "
                                            "here); 2 finished, 1 failed, 0 stopped, 1 pending")
    assert progress_line(ROWS[0], rows).startswith("[3/4] filter.name=none seed=0: finished; ")
