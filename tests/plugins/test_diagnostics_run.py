"""Diagnostics inside real (tiny) runs: the collapse alarm and the checkpointed EMA."""

from __future__ import annotations

import pytest

from mirage.core.run.loop import CollapseAlarmStop, execute
from mirage.core.run.validate import build_config
from mirage.core.store.run_store import RunStore


def _config(tiny_config, steps: int, **alarm):
    data = tiny_config()
    data["steps"] = steps
    data["diagnostics"] = {"every": 1, "alarm": alarm}
    return build_config(data)


def _values(store: RunStore, run_id: str, name: str) -> dict[int, float]:
    return {step: value for step, _, value in store.metrics(run_id, name)}


@pytest.mark.slow
def test_alarm_writes_events_and_metric_and_can_stop(tiny_config, tmp_path):
    db = tmp_path / "runs.duckdb"
    always = dict(margin=1.0, checks=1, baseline_checks=1, entropy_ratio=0.0)
    run_id = execute(_config(tiny_config, 1, **always), db, progress=False)
    store = RunStore(db)
    assert _values(store, run_id, "alarm/collapse") == {0: 1.0, 1: 1.0}
    alarms = [e for e in store.events(run_id) if e["kind"] == "collapse_alarm"]
    assert [e["step"] for e in alarms] == [0, 1]
    assert "retrieval accuracy" in alarms[0]["message"]

    never = execute(_config(tiny_config, 1, margin=1.0, entropy_ratio=100.0), db, progress=False)
    assert _values(store, never, "alarm/collapse") == {0: 0.0, 1: 0.0}
    assert not [e for e in store.events(never) if e["kind"] == "collapse_alarm"]

    with pytest.raises(CollapseAlarmStop):
        execute(_config(tiny_config, 3, stop=True, **always), db, progress=False)
    stopped = [r for r in store.list_runs() if r["run_id"] not in (run_id, never)][0]
    assert stopped["status"] == "stopped"
    assert [e["kind"] for e in store.events(stopped["run_id"])][-1] == "stopped"


@pytest.mark.slow
def test_resumed_run_continues_the_zscore_ema(tiny_config, tmp_path):
    config = _config(tiny_config, 3)
    whole = execute(config, tmp_path / "whole.duckdb", progress=False)

    def interrupt(step, metrics):
        if step == 2:
            raise KeyboardInterrupt

    db = tmp_path / "resumed.duckdb"
    with pytest.raises(KeyboardInterrupt):
        execute(config, db, progress=False, on_step=interrupt)
    run_id = RunStore(db).list_runs()[0]["run_id"]
    execute(None, db, resume=run_id, progress=False)
    for scope in ("first_turn", "trajectory"):
        name = f"mi/{scope}/mi_zscore_ema"
        expected = _values(RunStore(tmp_path / "whole.duckdb"), whole, name)
        got = _values(RunStore(db), run_id, name)
        assert got[3] == pytest.approx(expected[3], rel=1e-9)
        # the EMA carries history: at step 3 it is not the step's own z-score
        own = _values(RunStore(db), run_id, f"mi/{scope}/mi_zscore")[3]
        assert got[3] != pytest.approx(own, rel=1e-6)
