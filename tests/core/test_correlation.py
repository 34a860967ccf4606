"""diagnostic_success_correlation against hand-computed Spearman coefficients."""

from __future__ import annotations

import pandas as pd
import pytest

from mirage.core.analysis.correlation import diagnostic_success_correlation


def _long(rows: list[tuple[str, int, str, float]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["run_id", "step", "name", "value"])


def _runs() -> pd.DataFrame:
    """Four runs; val/success is logged twice, the last value (step 10) counts."""
    rows = []
    final_success = {"r1": 0.1, "r2": 0.2, "r3": 0.3, "r4": 0.4}
    for index, (run, success) in enumerate(final_success.items(), start=1):
        rows += [(run, 5, "val/success", 1.0 - success),       # earlier, reversed order
                 (run, 10, "val/success", success),
                 (run, 1, "up", float(index)),                   # rank-identical to success
                 (run, 1, "down", float(-index)),
                 (run, 1, "constant", 7.0),
                 # [1, 3, 2, 4] at step 2, [4, 3, 2, 1] at step 1
                 (run, 2, "moving", float([1, 3, 2, 4][index - 1])),
                 (run, 1, "moving", float([4, 3, 2, 1][index - 1]))]
    rows += [("r1", 1, "sparse", 1.0), ("r2", 1, "sparse", 2.0)]   # only two runs
    return _long(rows)


def test_last_values_by_default_sorted_by_magnitude():
    result = diagnostic_success_correlation(_runs())
    assert list(result.columns) == ["diagnostic", "spearman", "p_value", "runs"]
    by_name = result.set_index("diagnostic")
    # constant and sparse (2 runs) are dropped; the target is not a diagnostic.
    assert set(by_name.index) == {"up", "down", "moving"}
    assert by_name.loc["up", "spearman"] == pytest.approx(1.0)
    assert by_name.loc["down", "spearman"] == pytest.approx(-1.0)
    # moving's last value is [1, 3, 2, 4]: d = [0, 1, -1, 0], rho = 1 - 6*2/(4*15) = 0.8
    assert by_name.loc["moving", "spearman"] == pytest.approx(0.8)
    assert (by_name["runs"] == 4).all()
    assert list(result["spearman"].abs()) == sorted(result["spearman"].abs(), reverse=True)
    assert result.iloc[-1]["diagnostic"] == "moving"
    assert 0.0 <= by_name.loc["moving", "p_value"] <= 1.0


def test_step_and_window_select_values():
    at_one = diagnostic_success_correlation(_runs(), step=1).set_index("diagnostic")
    assert at_one.loc["moving", "spearman"] == pytest.approx(-1.0)
    assert "sparse" not in at_one.index
    # the window mean over steps 1..2 is [2.5, 3, 2, 2.5]: ranks [2.5, 4, 1, 2.5]
    # against [1, 2, 3, 4]; centred [0, 1.5, -1.5, 0] and [-1.5, -.5, .5, 1.5]:
    # Pearson on ranks = -1.5 / sqrt(4.5 * 5)
    windowed = diagnostic_success_correlation(_runs(), window=(1, 2)).set_index("diagnostic")
    assert windowed.loc["moving", "spearman"] == pytest.approx(-1.5 / (4.5 * 5) ** 0.5)
    # at step 2 only "moving" exists
    assert list(diagnostic_success_correlation(_runs(), step=2)["diagnostic"]) == ["moving"]


def test_custom_target_and_constant_target_and_bad_arguments():
    frame = _runs()
    by_up = diagnostic_success_correlation(frame, target="up").set_index("diagnostic")
    assert by_up.loc["val/success", "spearman"] == pytest.approx(1.0)
    flat = frame[frame["name"] != "val/success"]
    flat = pd.concat([flat, _long([(r, 3, "val/success", 0.5) for r in ("r1", "r2", "r3")])])
    assert diagnostic_success_correlation(flat).empty
    assert diagnostic_success_correlation(_runs(), step=99).empty
    with pytest.raises(ValueError, match="not both"):
        diagnostic_success_correlation(frame, step=1, window=(1, 2))
    with pytest.raises(ValueError, match="lacks column"):
        diagnostic_success_correlation(frame.drop(columns=["step"]))
