"""A store written through the RunStore API with hand-checked values, for the
workbench views (grouped bands, x axes, colours, picker, paired differences)."""

from __future__ import annotations

from pathlib import Path

from mirage.core.config.run_config import RunConfig
from mirage.core.store.run_store import RunStore

SEEDS = (0, 1, 2)
LIFT = {"none": 0.0, "top_p": 0.2}  # top_p's train/success lies 0.2 above none's
P, G = 4, 2
SECONDS_PER_STEP = 30.0


def train_success(filter_name: str, seed: int, step: int) -> float:
    return 0.1 * step + LIFT[filter_name] + 0.01 * seed


def final_success(filter_name: str, seed: int) -> float:
    return 0.5 + LIFT[filter_name] * (1 + seed)  # paired differences 0.2, 0.4, 0.6


def config(env: str, filter_name: str, seed: int) -> dict:
    return RunConfig.model_validate({
        "env": {"name": env}, "filter": {"name": filter_name}, "seed": seed, "steps": 4,
        "rollout": {"prompts": P, "group_size": G},
    }).model_dump(mode="json")


def write_bench_store(path: Path) -> RunStore:
    """Two older sokoban runs (none, top_p; seed 0), then six newer FrozenLake runs
    (none and top_p over seeds 0-2): the newest six selected at first are FrozenLake's."""
    store = RunStore(path)
    for filter_name in LIFT:
        run_id = f"a-sokoban-{filter_name}"
        store.create_run(run_id, config("sokoban", filter_name, 0), [], None, seed=0)
        store.record_step(run_id, 0, {"train/success": 0.0, "val/success": 0.0})
        store.set_status(run_id, "finished")
    for filter_name in LIFT:
        for seed in SEEDS:
            run_id = f"b-lake-{filter_name}-{seed}"
            store.create_run(run_id, config("frozenlake", filter_name, seed), [], None,
                             seed=seed)
            for step in range(5):
                metrics = {"train/success": train_success(filter_name, seed, step)}
                if step:
                    metrics["time/step"] = SECONDS_PER_STEP
                if step in (0, 4):
                    metrics["val/success"] = final_success(filter_name, seed) if step else 0.0
                store.record_step(run_id, step, metrics)
            store.set_status(run_id, "finished")
    return store


def lake(filter_name: str, seed: int) -> str:
    return f"b-lake-{filter_name}-{seed}"
