"""Reads scripts/gpu_smoke.sh's run back from its store: timings per stage, the sampler/scorer
agreement per step, and whether the engine kept up with the trainer's weights.

    python scripts/gpu_smoke_report.py DB RUN_NAME MODEL START END OUT_JSON

(START and END: the run's wall-clock start and end, in seconds since the epoch)

Writes OUT_JSON and prints a summary; exits 1 with one ``gpu_smoke:`` line when a check fails.
"""

from __future__ import annotations

import importlib.metadata as metadata
import json
import os
import sys
from pathlib import Path

from mirage.core.store.run_index import find_run
from mirage.core.store.run_store import RunStore

ABS_DIFF = "backend/sampler_logprob_abs_diff"
KL = "backend/sampler_kl"
PACKAGES = ("torch", "vllm", "transformers", "verl", "mirage-rl")
# Starting thresholds, not measured on a GPU yet (docs/gpu.md): bf16 sampling against float32
# scoring should stay well inside them; a sampler left on stale weights after an update should not.
MAX_KL = float(os.environ.get("MIRAGE_SMOKE_MAX_KL", "0.02"))
MAX_ABS_DIFF = float(os.environ.get("MIRAGE_SMOKE_MAX_ABS_DIFF", "0.1"))
FIRST_STEP_AFTER_AN_UPDATE = 2  # step 0 is the starting policy; step 1 rolls out before updating


def agreement_problems(steps: dict[int, dict[str, float]], max_kl: float = MAX_KL,
                       max_abs_diff: float = MAX_ABS_DIFF) -> list[str]:
    """What is wrong with the sampler/scorer agreement of a run's ``{step: {metric: value}}``."""
    kl = {s: m[KL] for s, m in steps.items() if KL in m}
    abs_diff = {s: m[ABS_DIFF] for s, m in steps.items() if ABS_DIFF in m}
    iterations = sorted(s for s in steps if s >= 1)  # step 0 may go without
    if not iterations or not set(iterations) <= set(kl) & set(abs_diff):
        return [f"sampler/scorer agreement logged at steps {sorted(kl)}, expected {iterations}"]
    problems = []
    if max(kl.values()) > max_kl or max(abs_diff.values()) > max_abs_diff:
        problems.append(f"sampler/scorer gap above the thresholds (KL {max_kl}, mean |diff| "
                        f"{max_abs_diff}): KL {kl}, mean |diff| {abs_diff}")
    # Before the first update the gap is numerics only (bf16 against float32); if the engine
    # missed a sync, later rollouts also carry the distance between old and new weights.
    before = max(v for s, v in kl.items() if s < FIRST_STEP_AFTER_AN_UPDATE)
    after = {s: v for s, v in kl.items() if s >= FIRST_STEP_AFTER_AN_UPDATE}
    if after and max(after.values()) > 3 * before + 0.005:
        problems.append(f"the sampler/scorer KL grew after the first update ({before:.4g} before, "
                        f"{after} after): is the engine synced after every update?")
    return problems


def versions() -> dict[str, str | None]:
    found = {}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def smoke_report(db: Path, run: str, model: str, wall_seconds: float) -> dict:
    store = RunStore(db)
    run_id = find_run(store.list_runs(), run)["run_id"]
    steps: dict[int, dict[str, float]] = {}
    for step, name, value in store.metrics(run_id):
        steps.setdefault(step, {})[name] = value
    stages = sorted({name for values in steps.values() for name in values if name.startswith("time/")})
    return {
        "run_id": run_id, "db": str(db), "model": model, "versions": versions(),
        "wall_seconds": wall_seconds,
        "mean_seconds_per_step": {name: sum(v[name] for v in steps.values() if name in v)
                                  / sum(name in v for v in steps.values()) for name in stages},
        "sampler_kl": {step: values.get(KL) for step, values in steps.items()},
        "sampler_logprob_abs_diff": {step: values.get(ABS_DIFF) for step, values in steps.items()},
        "thresholds": {"max_kl": MAX_KL, "max_abs_diff": MAX_ABS_DIFF},
        "problems": agreement_problems(steps),
        "steps": steps,
    }


def main(argv: list[str]) -> int:
    db, run, model, start, end, out = argv
    report = smoke_report(Path(db), run, model, float(end) - float(start))
    try:
        import torch

        if torch.cuda.is_available():
            report |= {"cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name(0)}
    except ImportError:
        pass
    Path(out).write_text(json.dumps(report, indent=2, default=str))
    rounded = {name: round(value, 3) for name, value in report["mean_seconds_per_step"].items()}
    print(f"run {report['run_id']}: {report['wall_seconds']:.1f} s in all; mean per step {rounded}")
    print(f"sampler vs scorer: KL {report['sampler_kl']}, mean |diff| {report['sampler_logprob_abs_diff']}")
    print(f"timings: {out}")
    if report["problems"]:
        print("gpu_smoke: " + "; ".join(report["problems"]), file=sys.stderr)
        return 1
    print("gpu_smoke: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
