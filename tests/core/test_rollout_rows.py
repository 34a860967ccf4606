"""The run loop stores each sampled turn with the pictures its prompt showed
(``rollout_rows``, mirage/core/run/loop.py): PNG bytes in the order of the prompt's
``<image>`` marks, none for a text turn; a real run in image mode stores the very rooms
it played."""

from __future__ import annotations

import pytest

from mirage.core.rl.batch import Batch, Group, Trajectory, Turn
from mirage.core.rl.image import IMAGE_MARK, Image, count_marks
from mirage.core.run.loop import rollout_rows
from mirage.envs.frozenlake import FrozenLake, FrozenLakeOptions


def lake(seed: int) -> Image:
    env = FrozenLake(FrozenLakeOptions(observation="image"))
    env.reset(seed)
    return env.render_image()


def turn(images: list[Image]) -> Turn:
    context = " ".join([IMAGE_MARK] * len(images) + ["<think>"]) if images else "a room <think>"
    return Turn(context=context, response="Z </think> <answer> Up </answer>", reasoning="Z", answer="Up",
                actions=["Up"], format_ok=True, reward=0.0, context_ids=[1], response_ids=[2],
                images=images)


def test_each_stored_turn_keeps_its_pictures_as_png_bytes_in_order():
    groups = [Group(p, p, [Trajectory(p, k, p, turns=[turn([lake(p)]), turn([lake(p), lake(p + 10)])])
                           for k in range(2)]) for p in range(2)]
    rows = rollout_rows(Batch(step=1, groups=groups), count=2)
    assert [(r.prompt_index, r.sample_index, r.turn) for r in rows] == [(0, 0, 0), (0, 0, 1), (1, 0, 0), (1, 0, 1)]
    assert [r.images for r in rows] == [(lake(0).png,), (lake(0).png, lake(10).png),
                                        (lake(1).png,), (lake(1).png, lake(11).png)]
    assert all(count_marks(r.prompt) == len(r.images) for r in rows)
    text = rollout_rows(Batch(step=1, groups=[Group(0, 0, [Trajectory(0, 0, 0, turns=[turn([])])])]), count=1)
    assert text[0].images == ()


@pytest.mark.slow  # a tiny vision-language policy's warm start and one step (about 20 s)
def test_a_run_in_image_mode_stores_the_rooms_it_played(tmp_path, monkeypatch):
    from mirage.core.run.loop import execute
    from mirage.core.run.validate import build_config
    from mirage.core.store.run_store import RunStore

    monkeypatch.setenv("MIRAGE_CACHE", str(tmp_path / "cache"))
    config = build_config({
        "env": {"name": "frozenlake", "options": {"observation": "image"}}, "steps": 1, "threads": 1,
        "rollout": {"prompts": 2, "group_size": 2, "max_new_tokens": 40, "stored_trajectories": 2},
        "validation": {"episodes": 2, "every": 1}, "filter": {"name": "none"},
        "model": {"options": {"hidden": 32, "layers": 1, "heads": 2, "vision_hidden": 16, "vision_layers": 1,
                              "warmstart_episodes": 20, "warmstart_steps": 5, "warmstart_batch": 8}}})
    db = tmp_path / "runs.duckdb"
    run_id = execute(config, db, progress=False)
    store = RunStore(db)
    seeds = {(g["step"], g["prompt_index"]): g["seed"] for g in store.groups(run_id)}
    rows = store.rollouts(run_id)
    assert {r["step"] for r in rows} == {0, 1}
    for row in rows:
        assert row["images"] and count_marks(row["prompt"]) == len(row["images"])
        assert all(Image(png).size == (64, 64) for png in row["images"])
        if row["turn"] == 0:  # the room the episode started in
            assert row["images"] == [lake(seeds[row["step"], row["prompt_index"]]).png]
