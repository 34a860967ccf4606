"""The thread policy: which limit decides ``threads: auto``, the override, and the record."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
import torch

from mirage.core.errors import ConfigError
from mirage.core.run import threads
from mirage.core.run.loop import execute
from mirage.core.run.validate import build_config


def test_a_configured_count_is_used_as_it_is() -> None:
    assert threads.choose(3, {"MIRAGE_THREADS": "1"}) == threads.ThreadChoice(3, "configured")


def test_the_environment_overrides_auto() -> None:
    assert threads.choose("auto", {"MIRAGE_THREADS": "5"}) == threads.ThreadChoice(5, "MIRAGE_THREADS=5")


@pytest.mark.parametrize("value", ["0", "two", "-1", "1.5"])
def test_a_bad_override_is_refused_with_its_value(value: str) -> None:
    with pytest.raises(ValueError, match=f"MIRAGE_THREADS={value!r}"):
        threads.choose("auto", {"MIRAGE_THREADS": value})


def test_cgroup_quota_v2_and_v1(tmp_path: Path) -> None:
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert threads.cgroup_quota(tmp_path) == 1.5
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert threads.cgroup_quota(tmp_path) is None
    (tmp_path / "cpu.max").unlink()
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("300000\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert threads.cgroup_quota(tmp_path) == 3.0
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert threads.cgroup_quota(tmp_path) is None


def test_hyper_threads_count_as_one_physical_core(tmp_path: Path) -> None:
    for cpu, core in enumerate([0, 0, 1, 1]):
        topology = tmp_path / f"cpu{cpu}" / "topology"
        topology.mkdir(parents=True)
        (topology / "physical_package_id").write_text("0\n")
        (topology / "core_id").write_text(f"{core}\n")
    assert threads.physical_cores({0, 1, 2, 3}, tmp_path) == 2
    assert threads.physical_cores({0, 2}, tmp_path) == 2
    assert threads.physical_cores({0, 1}, tmp_path) == 1
    assert threads.physical_cores({7}, tmp_path) is None  # unreadable: no limit from topology


@pytest.mark.parametrize(("load", "idle"), [(0.0, 4), (1.2, 3), (3.6, 1), (9.0, 1)])
def test_without_a_measured_share_the_load_average_decides(monkeypatch, load: float, idle: int) -> None:
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (load, load, load))
    assert threads.idle_cores(4) == idle


@pytest.mark.parametrize(("share", "idle"), [(1.0, 4), (0.7, 3), (0.3, 1), (0.0, 1)])
def test_the_measured_idle_share_decides_over_the_load_average(monkeypatch, share: float, idle: int) -> None:
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (9.0, 9.0, 9.0))
    assert threads.idle_cores(4, share) == idle


def test_idle_share_reads_proc_stat(tmp_path: Path, monkeypatch) -> None:
    stat = tmp_path / "stat"
    readings = iter(["cpu  100 0 100 800 0 0 0 0 0 0\n", "cpu  250 0 100 850 0 0 0 0 0 0\n"])
    monkeypatch.setattr(threads.time, "sleep", lambda seconds: stat.write_text(next(readings)))
    stat.write_text(next(readings))
    assert threads.idle_share(0.1, stat) == pytest.approx(50 / 200)
    assert threads.idle_share(0.1, tmp_path / "absent") is None


def test_auto_takes_the_tightest_limit_and_names_it(monkeypatch) -> None:
    monkeypatch.setattr(threads, "usable_cpus", lambda: 8)
    monkeypatch.setattr(threads, "cgroup_quota", lambda: 2.5)
    monkeypatch.setattr(threads, "physical_cores", lambda: 4)
    monkeypatch.setattr(threads, "idle_share", lambda: 0.9)
    choice = threads.choose("auto", {})
    assert choice.count == 2 and choice.reason.startswith("auto: cgroup quota")
    monkeypatch.setattr(threads, "idle_share", lambda: 0.1)
    choice = threads.choose("auto", {})
    assert choice.count == 1 and choice.reason.startswith("auto: idle cores")


@pytest.mark.slow
def test_a_run_records_the_threads_it_chose(tiny_config, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MIRAGE_THREADS", "1")
    before = torch.get_num_threads()
    data = tiny_config() | {"threads": "auto", "steps": 1}
    db = tmp_path / "runs.duckdb"
    try:
        run_id = execute(build_config(data), db, progress=False)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    with duckdb.connect(str(db), read_only=True) as con:
        message = con.execute("select message from events where run_id = ? and kind = 'backend'",
                              [run_id]).fetchall()[0][0]
    facts = json.loads(message)
    assert (facts["threads"], facts["threads_reason"]) == (1, "MIRAGE_THREADS=1")


def test_a_bad_override_stops_a_run_before_it_writes(tiny_config, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MIRAGE_THREADS", "lots")
    db = tmp_path / "runs.duckdb"
    with pytest.raises(ConfigError, match="MIRAGE_THREADS='lots'"):
        execute(build_config(tiny_config() | {"threads": "auto"}), db, progress=False)
    assert not db.exists()
