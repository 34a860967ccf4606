"""``core run --nproc N`` / ``--launcher ray``: one run on several processes
(mirage/core/run/launch.py), checked here before any process starts."""

from __future__ import annotations

from pathlib import Path

from mirage.core.config.run_config import RunConfig
from mirage.core.errors import ConfigError
from mirage.core.parallel.local_ray import LAUNCHERS, LOCAL_RAY, local_ray_refusal


def launch_problem(config: RunConfig, nproc: int, launcher: str | None,
                   ray_address: str | None = None) -> str | None:
    """Why ``config`` cannot run on ``nproc`` processes with ``launcher``, or None."""
    if nproc < 1:
        return f"--nproc {nproc}: expected a whole number of processes >= 1"
    if launcher is not None and launcher not in LAUNCHERS:
        return f"--launcher {launcher!r}: unknown; valid: {', '.join(LAUNCHERS)}"
    if (nproc > 1 or launcher is not None) and config.model.parallel == "none":
        return (f"--nproc {nproc}" + (f" --launcher {launcher}" if launcher else "")
                + " splits the run across processes, which needs model.parallel: ddp or fsdp (add "
                "--parallel ddp): each trajectory then samples from its own random stream, so the run is "
                "the same for any number of processes")
    if launcher == "ray" and ray_address is None:
        return local_ray_refusal("--launcher ray")
    return None


def launched(config: RunConfig | None, db: Path, *, nproc: int, launcher: str | None,
             ray_address: str | None, resume: str | None, extend_to: int | None, name: str | None,
             tags: tuple[str, ...], note: str | None, progress: bool) -> tuple[str, str, str | None]:
    """Run on ``nproc`` processes; returns (run id, stored status, stored error). The config
    is validated (or the resume planned) here first: a refusal is a ConfigError and no
    process starts."""
    from mirage.core.plugin_api.manager import build_plugins
    from mirage.core.run.checkpoints import plan_resume
    from mirage.core.run.launch import launch, make_job
    from mirage.core.run.validate import validate_config
    from mirage.core.store.run_store import new_run_id

    if resume:
        config, _ = plan_resume(db, resume, extend_to)
    assert config is not None
    if problem := launch_problem(config, nproc, launcher, ray_address):
        raise ConfigError(problem)
    plugins = build_plugins()
    validate_config(config, plugins)
    run_id = resume or new_run_id()
    backend = plugins.registries.backends.get(config.model.backend)
    job = make_job(nproc, db=db, run_id=run_id, config=None if resume else config, resume=bool(resume),
                   extend_to=extend_to, name=name, tags=tags, note=note, progress=progress,
                   threads_setting=config.threads, devices_per_rank=backend.devices_per_rank(config),
                   on_this_machine=ray_address in (None, LOCAL_RAY))
    status, error = launch(job, nproc, launcher or "torchrun", ray_address)
    return run_id, status, error
