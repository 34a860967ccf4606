"""docs/writing-a-diagnostic.md's example diagnostic, executed from the page: measured on
hand-built batches, its review's streak and notice, and a tiny run that stores what it
measures on every step."""

from __future__ import annotations

import copy
from types import ModuleType, SimpleNamespace

from doc_examples import doc_module

from mirage.core.config.options import NoOptions, options_class
from mirage.core.config.presets import TINY
from mirage.core.config.run_config import RunConfig
from mirage.core.plugin_api.components import Diagnostic
from mirage.core.plugin_api.manager import build_plugins
from mirage.core.rl.batch import Batch, Group, Trajectory, Turn
from mirage.core.run.loop import execute
from mirage.core.run.validate import build_config
from mirage.core.store.run_store import RunStore


def doc_example() -> ModuleType:
    return doc_module("writing-a-diagnostic.md", "my_diagnostic")


def turn(reasoning: str) -> Turn:
    return Turn(context="", response="", reasoning=reasoning, answer="", actions=[],
                format_ok=True, reward=0.0, context_ids=[1], response_ids=[1])


def batch_of(*reasonings: list[str]) -> Batch:
    """One group per argument, one trajectory per group, one turn per reasoning."""
    groups = [Group(prompt_index=p, seed=p, trajectories=[
        Trajectory(prompt_index=p, sample_index=0, seed=0, turns=[turn(z) for z in texts])])
        for p, texts in enumerate(reasonings)]
    return Batch(step=1, groups=groups)


def diagnostic():
    cls = doc_example().ReasoningLength
    return cls(RunConfig(), options_class(cls)())  # as the run builds it


def test_measure_counts_words_over_every_turn():
    measured = diagnostic().measure(None, batch_of(["go down now", ""], ["left"]))
    assert measured == {"length/reasoning_words": (3 + 0 + 1) / 3, "length/empty_share": 1 / 3}
    assert diagnostic().measure(None, Batch(step=1, groups=[])) == {}


def test_it_is_due_every_step_where_the_default_is_not():
    example = diagnostic()
    assert RunConfig().diagnostics.every == 5
    assert all(example.due(step) for step in range(1, 8))
    default = type("Default", (Diagnostic,), {"measure": lambda self, run, batch: {}})
    assert [step for step in range(1, 8) if default(RunConfig(), NoOptions()).due(step)] == [1, 5]


def test_review_counts_all_empty_steps_and_says_so_at_three():
    example = diagnostic()
    run = SimpleNamespace(state={}, notices=[], step=0)
    streaks = []
    for run.step, share in enumerate([1.0, 1.0, 0.5, 1.0, 1.0, 1.0, 1.0], start=1):
        streaks.append(example.review(run, {"length/empty_share": share})["length/empty_streak"])
    assert streaks == [1.0, 2.0, 0.0, 1.0, 2.0, 3.0, 4.0]
    assert run.notices == [("empty_reasoning", "every reasoning was empty for 3 steps (step 6)")]
    assert example.review(run, {"reward/easy_share": 0.5}) == {}  # nothing measured


def test_its_option_sets_when_the_notice_comes():
    cls = doc_example().ReasoningLength
    example = cls(RunConfig(), cls.Options(notice_after=2))
    run = SimpleNamespace(state={}, notices=[], step=0)
    for run.step, share in enumerate([1.0, 1.0, 0.5, 1.0, 1.0, 1.0], start=1):
        example.review(run, {"length/empty_share": share})
    assert [message for _, message in run.notices] == [
        "every reasoning was empty for 2 steps (step 2)", "every reasoning was empty for 2 steps (step 5)"]


def test_a_tiny_run_stores_its_metrics_on_every_step(tmp_path):
    plugins = build_plugins(extra=[("my_diagnostic", doc_example())])
    data = {"env": {"name": "frozenlake"}, **copy.deepcopy(TINY), "steps": 2}
    data["diagnostics"] = {"names": ["reward", "length"], "every": 5, "options": {"length": {"notice_after": 1}}}
    data["rollout"] |= {"stored_trajectories": 8}  # every turn of the P x G = 8 trajectories
    db = tmp_path / "runs.duckdb"
    run_id = execute(build_config(data), db, plugins=plugins, progress=False)
    store = RunStore(db)
    measured = dict(((step, value) for step, _, value in store.metrics(run_id, "length/reasoning_words")))
    assert sorted(measured) == [0, 1, 2]  # due on every step, not only every 5
    for step, value in measured.items():
        words = [len(row["reasoning"].split()) for row in store.rollouts(run_id, step)]
        assert len(words) >= 8 and value == sum(words) / len(words)
    assert {step for step, _, _ in store.metrics(run_id, "length/empty_streak")} == {0, 1, 2}
    assert plugins.registries.diagnostics.owner("length") == "my_diagnostic"
