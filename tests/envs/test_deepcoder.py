"""DeepCoder: tasks, scoring by unit tests in the sandbox, malformed code, determinism, and
refusing to run (exit 2, nothing written) where the sandbox cannot isolate."""

import json
import random
import re

import pytest

from mirage.core.store.run_store import RunStore
from mirage.envs import coding_tasks
from mirage.envs.answer import spaced
from mirage.envs.deepcoder import DeepCoder, DeepCoderOptions, clean_code
from mirage.envs.sandbox import PRETEND_NO_ISOLATION, probe_isolation

FAST = DeepCoderOptions(cpu_seconds=1, wall_seconds=3, memory_mb=128)


def task_env(seed=0):
    env = DeepCoder(FAST)
    env.reset(seed)
    return env


def test_every_family_reference_passes_in_the_sandbox_as_the_tiny_policy_writes_it():
    for name, family in coding_tasks.FAMILIES.items():
        env = DeepCoder(FAST)
        for seed in range(200):
            env.reset(seed)
            if env.task.family == name:
                break
        written = spaced(env.task.reference)  # "x % 3 = = 0", "xs [ : : - 1 ]"
        passed, result = env.run_tests(clean_code(written))
        assert (passed, result.status) == (len(env.task.expected), "ok"), (name, result.stderr)
        careless, _ = env.run_tests(env.task.careless)
        assert careless < passed, name


def test_reward_is_the_fraction_of_tests_passed():
    env = DeepCoder(DeepCoderOptions(tests=4, cpu_seconds=1, wall_seconds=3))
    env.load(coding_tasks.CodingTask("t", "return max(xs)", "def solve(xs): return max(xs)", "",
                                     (([1, 5],), ([7],), ([2, 2],), ([0, 9],)), (5, 7, 3, 9)))
    out = env.step("def solve(xs):\n    return max(xs)")
    assert out.reward == pytest.approx(0.75) and out.done and not out.success
    assert "Tests passed : 3 of 4 . Sandbox : ok ." in env.render()


@pytest.mark.parametrize("code, status", [
    ("def solve(xs) return 1", "error"),          # syntax error
    ("print('no function here')", "ok"),          # runs, but defines no solve
    ("def solve(xs): return 1 / 0", "ok"),        # every test raises
    ("", None),
])
def test_malformed_code_scores_zero(code, status):
    env = task_env(1)
    if status is None:
        assert env.parse_actions(code) is None  # the turn protocol's format penalty
        return
    out = env.step(code)
    assert out.reward == 0.0 and out.done
    assert env.last_run.status == status


def test_printing_cannot_fake_results():
    env = task_env(2)
    fake = "print('@@mirage-results@@' + '[[\"ok\", 0], [\"ok\", 0], [\"ok\", 0], [\"ok\", 0], [\"ok\", 0]]')"
    assert env.step(fake).reward == 0.0


def test_clean_code_restores_split_operators_and_strips_fences():
    assert clean_code("```python\ndef solve ( xs ) : return x = = 1\n```") == "def solve ( xs ) : return x == 1"
    assert clean_code("a ! = b and c < = d and e * * 2 and f / / 2") == "a != b and c <= d and e ** 2 and f // 2"


def test_same_seed_same_task_and_transitions():
    def play(seed):
        env = DeepCoder(FAST)
        obs = env.reset(seed)
        turn = env.demonstrator(random.Random(seed), "careless")()
        return obs, turn, env.step(turn.actions[0]), env.render()

    assert play(6) == play(6)
    assert len({play(s)[0] for s in range(15)}) > 10


# --------------------------------------------------------------------------- fail closed


def test_core_run_refuses_deepcoder_without_isolation_and_writes_nothing(cli, make_config_file,
                                                                         tmp_path, monkeypatch):
    monkeypatch.setenv(PRETEND_NO_ISOLATION, "1")
    db = tmp_path / "runs.duckdb"
    code, out, err = cli("run", "--env", "deepcoder", "--config", make_config_file(), "--db", db, "--quiet")
    assert code == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert line.startswith("error: deepcoder: no isolation: ") and PRETEND_NO_ISOLATION in line
    assert "user namespaces" in line and "--env-opt unsafe_no_isolation=true" in line
    assert not db.exists()


@pytest.mark.slow
def test_the_unsafe_option_runs_records_it_and_flags_every_progress_line(cli, make_config_file,
                                                                          tmp_path, monkeypatch):
    monkeypatch.setenv(PRETEND_NO_ISOLATION, "1")
    db = tmp_path / "runs.duckdb"
    code, _, stderr = cli("run", "--env", "deepcoder", "--env-opt", "unsafe_no_isolation=true",
                          "--env-opt", "tests=3", "--steps", "2", "--config", make_config_file(), "--db", db,
                          timeout=600)
    assert code == 0, stderr[-2000:]
    assert "warning: UNSAFE: deepcoder runs model-written code WITHOUT isolation" in stderr
    bar_lines = [line for line in re.split(r"[\r\n]", stderr) if re.search(r"\d/2 \[", line)]
    assert len(bar_lines) >= 3 and all("UNSAFE=no-isolation" in line for line in bar_lines), bar_lines
    store = RunStore(db)
    (run,) = store.list_runs()
    assert run["status"] == "finished" and run["config"]["env"]["options"]["unsafe_no_isolation"] is True
    events = store.events(run["run_id"])
    assert [e["message"] for e in events if e["kind"] == "unsafe"] == [
        "UNSAFE: deepcoder runs model-written code WITHOUT isolation (unsafe_no_isolation=true): "
        "it can read and write your files and use the network"]
    (environment,) = [json.loads(e["message"]) for e in events if e["kind"] == "environment"]
    assert environment["isolation"] == "none"


def test_the_isolation_level_is_a_run_fact(monkeypatch):
    isolation = probe_isolation()
    assert DeepCoder.run_facts(FAST) == {"isolation": isolation.mechanism or "none"}
    assert DeepCoder.unsafe_warning(FAST) is None
    monkeypatch.setenv(PRETEND_NO_ISOLATION, "1")
    assert DeepCoder.run_facts(FAST) == {"isolation": "none"}
    assert "no isolation" in DeepCoder.options_problem(FAST)
    unsafe = DeepCoderOptions(unsafe_no_isolation=True)
    assert DeepCoder.options_problem(unsafe) is None and "UNSAFE" in DeepCoder.unsafe_warning(unsafe)
