"""Whole runs (mirage/core/run/loop.py) through the CLI and ``execute``: what lands in the
store, determinism, crash-and-resume, and ``--model``.

All runs use the tiny config from conftest (a 1-layer, 32-wide model warm-started for
15 steps on 40 demonstrations), so a run takes seconds; the session-wide MIRAGE_CACHE
shares its warm start between tests.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections import Counter
from importlib import metadata
from pathlib import Path

import pytest
import yaml

from mirage.core.config.run_config import RunConfig
from mirage.core.plugin_api.manager import DEFAULT_PLUGINS
from mirage.core.run.loop import execute, step_seeds
from mirage.core.run.validate import build_config
from mirage.core.store.run_store import RunStore
from mirage.plugins.filters import top_p_indices

# Every test here trains a real (tiny) policy end to end.
pytestmark = pytest.mark.slow

MIRAGE_VERSION = metadata.version("mirage-rl")
REPO = Path(__file__).resolve().parents[2]


def finished_run_id(stdout: str) -> str:
    match = re.search(r"run (\S+) finished", stdout)
    assert match, stdout
    return match.group(1)


def metric_table(store: RunStore, run_id: str) -> dict[tuple[int, str], float]:
    rows = store.metrics(run_id)
    table = {(step, name): value for step, name, value in rows}
    assert len(table) == len(rows), "duplicate (step, name) metric rows"
    return table


def steps_with(table: dict[tuple[int, str], float], name: str) -> list[int]:
    return sorted(step for step, n in table if n == name)


def without_timings(table: dict[tuple[int, str], float]) -> dict[tuple[int, str], float]:
    return {key: value for key, value in table.items() if not key[1].startswith("time/")}


# --------------------------------------------------------------------------- (a) end to end


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, mirage_cache, tiny_config, cli_for_fixtures):
    """One finished 4-step run through the real CLI (a process of its own); returns (db,
    run_id, stdout, stderr)."""
    tmp = tmp_path_factory.mktemp("tiny-run")
    config = tmp / "tiny.yaml"
    config.write_text(yaml.safe_dump(tiny_config()))
    db = tmp / "runs" / "mirage.duckdb"
    env = {**os.environ, "MIRAGE_CACHE": str(mirage_cache), "MIRAGE_DISABLE_PLUGIN_AUTOLOAD": "1"}
    env.pop("MIRAGE_PLUGINS", None)
    code, out, err = cli_for_fixtures("run", "--config", config, "--db", db, "--quiet", env=env)
    assert code == 0, err
    return db, finished_run_id(out), out, err


def test_tiny_run_finishes_and_records_its_provenance(tiny_run):
    db, run_id, stdout, _ = tiny_run
    assert f"run {run_id} finished; results in {db}" in stdout
    store = RunStore(db)
    row = store.get_run(run_id)
    assert row["status"] == "finished" and row["error"] is None
    assert row["finished_at"] is not None and row["last_step"] == 4
    assert row["plugins"] == [{"name": n, "version": MIRAGE_VERSION} for n in DEFAULT_PLUGINS]
    assert row["seed"] == 0
    assert re.fullmatch(r"[0-9a-f]{40}", row["git_commit"] or ""), row["git_commit"]
    config = RunConfig.model_validate(row["config"])
    assert (config.env.name, config.steps, config.rollout.prompts, config.rollout.group_size) == (
        "frozenlake", 4, 2, 4)
    assert {k: config.model.options[k] for k in ("hidden", "layers", "heads")} == {"hidden": 32, "layers": 1, "heads": 2}
    backend = [e for e in store.events(run_id) if e["kind"] == "backend"]
    assert len(backend) == 1 and backend[0]["step"] == 0
    facts = json.loads(backend[0]["message"])
    assert facts["parameters"] > 0
    assert "warmstart_cached" in facts
    checkpoints = db.parent / "checkpoints" / run_id
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step-000004"]


def test_tiny_run_metrics_at_every_step(tiny_run):
    db, run_id, _, _ = tiny_run
    table = metric_table(RunStore(db), run_id)
    for name in ["train/return", "train/success", "train/turns", "train/format_valid"]:
        assert steps_with(table, name) == [0, 1, 2, 3, 4], name
    for name in ["filter/kept_ratio", "filter/kept_groups", "filter/empty_streak"]:
        assert steps_with(table, name) == [1, 2, 3, 4], name  # step 0 only evaluates
    # validation at step 0, every 2 steps, and the last step
    for name in ["val/success", "val/return", "val_greedy/success"]:
        assert steps_with(table, name) == [0, 2, 4], name
    for (step, name), value in table.items():
        if name.endswith("/success") or name == "filter/kept_ratio":
            assert 0.0 <= value <= 1.0, (step, name, value)
    # every return is a sum of format penalties (-0.1) and at most one goal reward (1)
    assert all(-0.5 - 1e-9 <= table[(s, "train/return")] <= 1.0 for s in range(5))


def test_tiny_run_records_the_mi_diagnostic(tiny_run):
    db, run_id, _, _ = tiny_run
    table = metric_table(RunStore(db), run_id)
    steps = steps_with(table, "mi/first_turn/retrieval_acc")
    assert steps, "no mi/first_turn/retrieval_acc metric was recorded"
    assert set(steps) <= {0, 1, 2, 3, 4}
    for step in steps:
        assert 0.0 <= table[(step, "mi/first_turn/retrieval_acc")] <= 1.0
        assert table[(step, "mi/first_turn/retrieval_chance")] == pytest.approx(0.5)  # P = 2
        h_marg, mi, h_cond = (table[(step, f"mi/first_turn/{n}")]
                              for n in ("h_marg", "mi_est", "h_cond"))
        assert h_marg == pytest.approx(mi + h_cond, abs=1e-9)


def test_tiny_run_group_rows(tiny_run):
    db, run_id, _, _ = tiny_run
    store = RunStore(db)
    table = metric_table(store, run_id)
    groups = store.groups(run_id)
    assert len(groups) == 5 * 2
    assert Counter((g["step"], g["prompt_index"]) for g in groups) == {
        (s, p): 1 for s in range(5) for p in range(2)
    }
    for step in range(5):
        rows = store.groups(run_id, step)
        assert [g["prompt_index"] for g in rows] == [0, 1]
        assert [g["seed"] for g in rows] == step_seeds(0, step, 2)
        for g in rows:
            assert g["reward_variance"] >= 0 and g["reward_std"] == pytest.approx(
                g["reward_variance"] ** 0.5)
        if step == 0:
            continue
        # the kept flags are top_p's decision (rho 0.9) on the recorded variances
        kept = [i for i, g in enumerate(rows) if g["kept"]]
        assert kept == top_p_indices([g["reward_variance"] for g in rows], 0.9)
        assert len(kept) == table[(step, "filter/kept_groups")]
        assert len(kept) / 2 == table[(step, "filter/kept_ratio")]


# --------------------------------------------------------------------------- (b) determinism


def determinism_config(data: dict) -> RunConfig:
    # a longer warm start so that answers (and rewards) vary; filter none so every step updates
    data["model"]["options"]["warmstart_steps"] = 100
    data["filter"] = {"name": "none"}
    data["steps"] = 3
    data["validation"]["every"] = 3
    return build_config(data)


@pytest.fixture(scope="module")
def three_runs(tmp_path_factory, tiny_config):
    """Same config and seed three times, in-process: A and B each build their warm start
    in an empty cache; C reuses A's cached warm start."""
    tmp = tmp_path_factory.mktemp("determinism")
    db = tmp / "runs.duckdb"
    config = determinism_config(tiny_config())
    ids = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MIRAGE_DISABLE_PLUGIN_AUTOLOAD", "1")
        for name, cache in [("A", "cache-a"), ("B", "cache-b"), ("C", "cache-a")]:
            mp.setenv("MIRAGE_CACHE", str(tmp / cache))
            ids[name] = execute(config, db, progress=False)
    return RunStore(db), ids


def test_determinism_config_exercises_updates(three_runs):
    store, ids = three_runs
    table = metric_table(store, ids["A"])
    assert steps_with(table, "update/pg_loss") == [1, 2, 3]
    assert steps_with(table, "mi/first_turn/retrieval_acc")


def test_same_seed_gives_identical_runs(three_runs):
    store, ids = three_runs
    a = without_timings(metric_table(store, ids["A"]))
    b = without_timings(metric_table(store, ids["B"]))
    for key in [(0, "train/return"), (1, "train/success"), (1, "filter/kept_ratio"),
                (1, "update/pg_loss"), (3, "update/pg_loss")]:
        assert key in a
    assert a == b
    assert store.groups(ids["A"]) == store.groups(ids["B"])


def test_cached_warm_start_gives_the_same_run_as_a_fresh_one(three_runs):
    store, ids = three_runs
    events = {name: json.loads(store.events(i)[0]["message"]) for name, i in ids.items()}
    assert events["A"]["warmstart_cached"] is False and events["C"]["warmstart_cached"] is True
    a = without_timings(metric_table(store, ids["A"]))
    c = without_timings(metric_table(store, ids["C"]))
    differing = sorted(key for key in a.keys() | c.keys() if a.get(key) != c.get(key))
    assert not differing, f"cached warm start changes the run: {differing[:8]}"


def test_tiny_run_stores_sampled_rollouts(tiny_run):
    db, run_id, _, _ = tiny_run
    config = RunConfig.model_validate(RunStore(db).get_run(run_id)["config"])
    count = config.rollout.stored_trajectories
    assert count == RunConfig().rollout.stored_trajectories == 4  # the default, P x G = 2 x 4
    rows = RunStore(db).rollouts(run_id)
    for step in range(5):
        at_step = [r for r in rows if r["step"] == step]
        # one trajectory per prompt in turn: samples 0 and 1 of prompts 0 and 1
        assert {(r["sample_index"], r["prompt_index"]) for r in at_step} == {
            (0, 0), (0, 1), (1, 0), (1, 1)}
        for key in {(r["sample_index"], r["prompt_index"]) for r in at_step}:
            turns = [r["turn"] for r in at_step if (r["sample_index"], r["prompt_index"]) == key]
            assert turns == list(range(len(turns))) and 1 <= len(turns) <= config.env.max_turns
        assert all(r["prompt"].rstrip().endswith("<think>") for r in at_step)
        assert all(isinstance(r["reward"], float) for r in at_step)


# --------------------------------------------------------------------------- (c) resume


def poll(store_path: Path, predicate, timeout: float, proc: subprocess.Popen):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the run exited early with {proc.returncode}")
        if store_path.exists():
            runs = RunStore(store_path).list_runs()
            if runs and predicate(runs[0]):
                return runs[0]
        time.sleep(0.05)
    pytest.fail("timed out waiting for the run")


def test_killed_run_resumes_without_duplicates(make_config_file, tiny_config, tmp_path, cli,
                                               cli_argv):
    # The tiny policy rarely earns differing rewards, so top_p may keep nothing for a
    # while; allow that rather than stop the run.
    config = make_config_file("resume.yaml", max_empty_steps=20)
    db = tmp_path / "runs" / "mirage.duckdb"
    log = (tmp_path / "first.log").open("w")
    proc = subprocess.Popen(
        cli_argv("run", "--config", config, "--db", db, "--quiet", "--steps", "12"),
        stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=os.environ.copy(),
    )
    try:
        row = poll(db, lambda r: (r["last_step"] or 0) >= 3, timeout=240, proc=proc)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        log.close()
    run_id = row["run_id"]
    store = RunStore(db)
    killed = store.get_run(run_id)
    assert killed["status"] == "running"  # a SIGKILL leaves no chance to record anything
    assert 3 <= killed["last_step"] < 12
    before = metric_table(store, run_id)
    groups_before = store.groups(run_id)

    code, out, err = cli("run", "--resume", run_id, "--db", db, "--quiet")
    assert code == 0, err
    assert finished_run_id(out) == run_id

    row = store.get_run(run_id)
    assert row["status"] == "finished" and row["last_step"] == 12 and row["error"] is None
    resumed = [e for e in store.events(run_id) if e["kind"] == "resumed"]
    assert len(resumed) == 1
    checkpoint_step = resumed[0]["step"]
    assert 2 <= checkpoint_step <= killed["last_step"]
    after = metric_table(store, run_id)  # also asserts no duplicate (step, name) rows
    assert steps_with(after, "train/return") == list(range(13))
    assert steps_with(after, "filter/kept_ratio") == list(range(1, 13))
    assert steps_with(after, "val/success") == [0, 2, 4, 6, 8, 10, 12]
    groups = store.groups(run_id)
    assert Counter((g["step"], g["prompt_index"]) for g in groups) == {
        (s, p): 1 for s in range(13) for p in range(2)
    }
    rollout_keys = Counter((r["step"], r["sample_index"], r["prompt_index"], r["turn"])
                           for r in store.rollouts(run_id))
    assert {step for step, *_ in rollout_keys} == set(range(13))
    assert max(rollout_keys.values()) == 1  # resumed steps replaced, never duplicated
    # what was recorded up to the checkpoint is untouched
    kept_before = {k: v for k, v in before.items() if k[0] <= checkpoint_step}
    assert kept_before == {k: v for k, v in after.items() if k[0] <= checkpoint_step}
    assert [g for g in groups_before if g["step"] <= checkpoint_step] == [
        g for g in groups if g["step"] <= checkpoint_step
    ]
    assert [e["kind"] for e in store.events(run_id)].count("backend") == 1
    checkpoints = db.parent / "checkpoints" / run_id
    assert sorted(p.name for p in checkpoints.iterdir() if p.name.startswith("step-")) == [
        "step-000012"
    ]


# --------------------------------------------------------------------------- (d) --model


@pytest.fixture
def saved_tiny_model(tmp_path) -> Path:
    """A tiny untrained model and a word tokenizer saved like a Hugging Face checkpoint."""
    from mirage.core.config.run_config import EnvConfig
    from mirage.core.rl.demos import collect_demonstrations
    from mirage.envs.frozenlake import FrozenLake, FrozenLakeOptions
    from mirage.plugins.backend_local.model import build_tiny_model
    from mirage.plugins.backend_local.options import LocalOptions
    from mirage.plugins.backend_local.tokenizer import build_word_tokenizer

    demos = collect_demonstrations(FrozenLake, FrozenLakeOptions(),
                                   EnvConfig(name="frozenlake", show_instruction=True), 10, 0)
    tokenizer = build_word_tokenizer(c + "\n" + r for c, r in demos.pairs)
    model = build_tiny_model(LocalOptions(hidden=32, layers=1, heads=2), len(tokenizer),
                             tokenizer.pad_token_id, tokenizer.eos_token_id,
                             tokenizer.bos_token_id)
    target = tmp_path / "tiny-model"
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)
    return target


def test_run_with_a_saved_model(saved_tiny_model, tiny_config_file, tmp_path, cli):
    db = tmp_path / "runs.duckdb"
    code, out, err = cli("run", "--model", saved_tiny_model, "--config", tiny_config_file,
                         "--steps", "2", "--db", db, "--quiet")
    assert code == 0, err
    run_id = finished_run_id(out)
    store = RunStore(db)
    row = store.get_run(run_id)
    assert row["status"] == "finished"
    assert row["config"]["model"]["path"] == str(saved_tiny_model)
    backend = [e for e in store.events(run_id) if e["kind"] == "backend"]
    facts = json.loads(backend[0]["message"])
    assert facts["model_source"] == str(saved_tiny_model)
    assert "warmstart_cached" not in facts  # no warm start for a given model
    table = metric_table(store, run_id)
    assert steps_with(table, "train/return") == [0, 1, 2]
