"""Write one fixture store with the code of an older commit (see README.md beside it).

Run from a checkout of that commit, with that checkout first on the path:

    PYTHONPATH=/tmp/old_vN python build_fixture.py OUT.duckdb [--sweep]

It runs one tiny training run through that commit's own CLI (``core run``), then, with
``--sweep``, records a one-cell sweep through that commit's own ``RunStore`` sweep API
(a real sweep needs a Prefect server; the rows are what its flow writes).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

TINY = {
    "env": {"name": "frozenlake"},
    "model": {"options": {"hidden": 32, "layers": 1, "heads": 2, "warmstart_episodes": 40,
                          "warmstart_steps": 15, "warmstart_batch": 16}},
    "rollout": {"prompts": 2, "group_size": 4, "max_new_tokens": 32},
    "validation": {"episodes": 4, "every": 2},
    "steps": 2,
    "seed": 1,
}


def tiny() -> dict:
    """TINY in the layout the commit reads: the local backend's settings flat in the model
    section before components owned their options (issue #21)."""
    try:  # from issue 34 on, the config is a package
        from mirage.core.config.run_config import ModelConfig
    except ImportError:  # the code of an older commit
        from mirage.core.config import ModelConfig

    if "options" in ModelConfig.model_fields:
        return TINY
    return {**TINY, "model": TINY["model"]["options"]}


def main() -> None:
    db = Path(sys.argv[1]).resolve()
    with tempfile.TemporaryDirectory() as scratch:
        config = Path(scratch) / "tiny.json"
        config.write_text(json.dumps(tiny()))
        env = {**os.environ, "MIRAGE_DISABLE_PLUGIN_AUTOLOAD": "1", "OMP_NUM_THREADS": "1",
               "MIRAGE_CACHE": str(Path(scratch) / "cache")}
        # The core program's module: mirage (its __main__) once core/cli.py stopped being a
        # script of its own (schema 5 on), mirage.core.cli before.
        import mirage

        program = "mirage" if (Path(mirage.__file__).parent / "__main__.py").exists() else "mirage.core.cli"
        subprocess.run([sys.executable, "-m", program, "run", "--config", str(config),
                        "--db", str(db), "--quiet"], check=True, env=env)
    try:  # from issue 34 on, the store is a package
        from mirage.core.store.run_store import RunStore
    except ImportError:  # the code of an older commit
        from mirage.core.store import RunStore

    store = RunStore(db)
    try:  # schema 4 on: the sweep tables are mirage/flows' own
        from mirage.flows.sweep_store import SweepStore
        sweeps = SweepStore(db)
    except ImportError:  # before: RunStore wrote them
        sweeps = store
    (run,) = store.list_runs()
    if "--sweep" in sys.argv:
        values = [value for _, _, value in store.metrics(run["run_id"], "val/success")]
        cell = {"sweep_id": "fixture-sweep", "experiment": "fixture", "cell": "seed=1", "seed": 1,
                "config_hash": "fixture-hash", "run_id": run["run_id"], "status": "finished",
                "reused": False, "loaded": False, "error": None,
                "success": values[-1] if values else None, "retrieval_acc": None, "entropy": None,
                "kept_ratio": None}
        if hasattr(sweeps, "start_sweep"):  # the sweeps table (live progress) exists
            pending = {**cell, "run_id": None, "status": "pending", "success": None}
            sweeps.start_sweep("fixture-sweep", "fixture", [pending], host="fixture-host", pid=1)
            sweeps.update_sweep_cell("fixture-sweep", cell)
            sweeps.finish_sweep("fixture-sweep", "completed", "fixture: 1 cells: 1 run")
        else:  # schema 2: only the per-cell summary rows
            sweeps.record_sweep_cells([cell])
    print(db, run["run_id"])


if __name__ == "__main__":
    main()
