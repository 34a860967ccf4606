"""Partial RunConfigs shared by the test suite and the benchmarks."""

# A run that takes seconds on a 2-core CPU: a tiny model, a tiny warm start, P x G = 2 x 4.
# Used by tests/conftest.py and the benches' --tiny flags; it checks plumbing, never learning.
TINY: dict = {
    "model": {"options": {
        "hidden": 32,
        "layers": 1,
        "heads": 2,
        "warmstart_episodes": 40,
        "warmstart_steps": 15,
        "warmstart_batch": 16,
    }},
    "rollout": {"prompts": 2, "group_size": 4, "max_new_tokens": 32},
    "validation": {"episodes": 4, "every": 2},
    "diagnostics": {"every": 1},
    "steps": 4,
    "checkpoint_every": 1,
    "threads": 1,
}
