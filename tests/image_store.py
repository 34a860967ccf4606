"""A store holding one FrozenLake run in image mode, written through the RunStore API with
the environment's real pictures (no policy to train): the rollout turns the store, the
CLI and the app keep and show pictures for. Each of 2 steps stores 2 trajectories (prompts
0 and 1, sample 0) of 2 turns; every turn's prompt shows one picture, the room as the
turn saw it."""

from __future__ import annotations

from pathlib import Path

from mirage.core.config.run_config import RunConfig
from mirage.core.rl.image import IMAGE_MARK, Image
from mirage.core.store.rollouts import RolloutRow
from mirage.core.store.run_store import RunStore
from mirage.envs.frozenlake import FrozenLake, FrozenLakeOptions

RUN_ID = "20261206-120000-1a2b3c"
STEPS, PROMPTS, TURNS = (0, 1), (0, 1), 2
ACTIONS = ("Right", "Down")


def config() -> dict:
    return RunConfig.model_validate({
        "env": {"name": "frozenlake", "options": {"observation": "image"}}, "steps": 1,
        "rollout": {"prompts": len(PROMPTS), "group_size": 1},
    }).model_dump(mode="json")


def turns(step: int) -> list[tuple[RolloutRow, Image]]:
    """The step's stored turns, each with the picture it showed."""
    found = []
    for prompt in PROMPTS:
        env = FrozenLake(FrozenLakeOptions(observation="image"))
        env.reset(seed=10 * step + prompt)
        for turn, action in zip(range(TURNS), ACTIONS):
            picture = env.render_image()
            found.append((RolloutRow(
                prompt, 0, turn, f"{IMAGE_MARK}\nWhich move? <think>",
                f"step {step}: the picture shows the lake of room {prompt}; I go {action}.",
                action, 0.0, (picture.png,)), picture))
            env.step(action)
            if env.done:
                break
    return found


def write_image_store(path: Path) -> RunStore:
    """The image run (RUN_ID, finished) in a new store at ``path``."""
    store = RunStore(path)
    store.create_run(RUN_ID, config(), [], None, seed=0, name="lake-pictures")
    for step in STEPS:
        store.record_step(RUN_ID, step, {"train/success": 0.5, "val/success": 0.5},
                          rollouts=[row for row, _ in turns(step)])
    store.set_status(RUN_ID, "finished")
    return store
