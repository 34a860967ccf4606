"""Start the processes of one data-parallel run on an existing engine, and account for
how they end.

``core run --nproc N`` starts N processes on this machine through torch's elastic
launcher (what ``torchrun`` runs, called as a library); ``--launcher ray`` starts them as
Ray Train workers (``TorchTrainer``), on a local Ray or a cluster (``--ray-address``).
Either way every process runs :func:`run_rank`: the same entry point and the same loop
(mirage/core/run/loop.py), its :class:`~mirage.core.parallel.world.World` taken from the
process group the engine set up.

The launcher supervises: a rank that raises or dies ends the whole job (torchrun's agent,
or Ray Train, stops the others), and this process then marks the run ``failed`` with that
rank's error (and the traceback as a ``rank_error`` event), whatever state the dying
ranks left the store in. Its result is the run's stored status.
"""

from __future__ import annotations

import ctypes
import datetime
import logging
import os
import signal
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from mirage.core.config.run_config import RunConfig
from mirage.core.errors import ConfigError
from mirage.core.parallel import local_ray
from mirage.core.parallel.local_ray import LAUNCHERS
from mirage.core.parallel.world import current_world
from mirage.core.run import threads
from mirage.core.store.run_store import RunStore

# A collective waits this long for the slowest rank: the main rank's warm start (minutes)
# comes before the first one the others wait in.
COLLECTIVE_TIMEOUT = datetime.timedelta(hours=3)
# Variables a rank must see as the launching process does: plugins, cache, store, threads.
PASSED_ENV = ("MIRAGE_CACHE", "MIRAGE_PLUGINS", "MIRAGE_DISABLE_PLUGIN_AUTOLOAD", "MIRAGE_DB",
              "MIRAGE_THREADS", "PYTHONPATH")


@dataclass(frozen=True)
class Job:
    """What every rank needs to run its part of one run (pickled to each process)."""

    db: str
    run_id: str
    config: dict[str, Any] | None = None  # None when resuming: the stored config
    resume: bool = False
    extend_to: int | None = None
    name: str | None = None
    tags: tuple[str, ...] = ()
    note: str | None = None
    experiment: str | None = None  # a sweep cell's labels
    cell: str | None = None
    progress: bool = True
    env: dict[str, str] = field(default_factory=dict)
    gpus: tuple[str, ...] = ()  # the GPUs the launcher sees, shared out to the local ranks
    devices_per_rank: int = 1


def make_job(nproc: int, *, db: Path, run_id: str, config: RunConfig | None, resume: bool = False,
             extend_to: int | None = None, name: str | None = None, tags: tuple[str, ...] = (),
             note: str | None = None, progress: bool = True, threads_setting: int | str = "auto",
             devices_per_rank: int = 1, experiment: str | None = None, cell: str | None = None,
             on_this_machine: bool = True) -> Job:
    """The job of ``nproc`` processes, on this machine unless ``on_this_machine`` is False
    (a Ray cluster, which places them and their GPUs itself). On this machine, with
    ``threads: auto``, each rank gets its share of the cores this process would use
    (``MIRAGE_THREADS``), so N ranks do not each start as many threads as the machine has;
    on GPUs each local rank gets ``devices_per_rank`` of them; ConfigError when there are
    too few."""
    env = {name: os.environ[name] for name in PASSED_ENV if name in os.environ}
    if on_this_machine and threads_setting == "auto" and "MIRAGE_THREADS" not in env:
        env["MIRAGE_THREADS"] = str(max(1, threads.choose("auto").count // nproc))
    gpus = visible_gpus() if on_this_machine else ()
    if gpus and nproc * devices_per_rank > len(gpus):
        raise ConfigError(f"--nproc {nproc} with {devices_per_rank} GPU(s) per process needs "
                          f"{nproc * devices_per_rank} GPUs; this machine shows {len(gpus)}")
    return Job(db=str(Path(db).resolve()), run_id=run_id,
               config=None if config is None else config.model_dump(mode="json"), resume=resume,
               extend_to=extend_to, name=name, tags=tuple(tags), note=note, progress=progress, env=env,
               gpus=gpus, devices_per_rank=devices_per_rank, experiment=experiment, cell=cell)


def visible_gpus() -> tuple[str, ...]:
    """The GPUs this process may use, as ``CUDA_VISIBLE_DEVICES`` names them."""
    if not torch.cuda.is_available():
        return ()
    named = os.environ.get("CUDA_VISIBLE_DEVICES")
    if named:
        return tuple(name.strip() for name in named.split(",") if name.strip())
    return tuple(str(index) for index in range(torch.cuda.device_count()))


def launch(job: Job, nproc: int, launcher: str = "torchrun", ray_address: str | None = None) -> tuple[str, str | None]:
    """Run ``job`` on ``nproc`` processes; return the run's status (``finished``,
    ``stopped`` or ``failed``) and error as stored. A failed rank's error is in the store
    before this returns; a job that failed before the run was stored reports its error
    here only."""
    if launcher not in LAUNCHERS:
        raise ValueError(f"unknown launcher {launcher!r}; valid: {', '.join(LAUNCHERS)}")
    reason = None
    try:
        if launcher == "torchrun":
            _torchrun(job, nproc)
        else:
            _ray(job, nproc, ray_address)
    except KeyboardInterrupt:
        _mark(job, "stopped", "interrupted", None)
        raise
    except Exception as error:  # noqa: BLE001 - any failure of the job is the run's
        reason, details = failure_report(error)
        _mark(job, "failed", reason, details)
    row = RunStore(Path(job.db)).get_run(job.run_id) if Path(job.db).exists() else None
    if row is None:
        return "failed", reason or "the run's processes ended before it was stored"
    return row["status"], row.get("error")


def run_rank(job: Job) -> None:
    """One rank's part: its world from the process group, then the run loop. A run that
    stops itself (the collapse alarm, empty steps) stops every rank alike and is no error."""
    from mirage.core.run.loop import RunStopped, execute

    os.environ.update(job.env)
    world = current_world()
    config = None if job.config is None else RunConfig.model_validate(job.config)
    try:
        execute(config, Path(job.db), resume=job.run_id if job.resume else None,
                progress=job.progress and world.is_main, extend_to=job.extend_to, name=job.name,
                tags=job.tags, note=job.note, world=world, run_id=job.run_id, experiment=job.experiment,
                cell=job.cell)
    except RunStopped:
        pass


# ---------------------------------------------------------------------- torchrun
def _torchrun(job: Job, nproc: int) -> None:
    """torch's elastic launcher on this machine, meeting its ranks through files rather
    than a TCP store (which would listen on every interface): mirage/core/parallel/loopback.py."""
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    from mirage.core.parallel import loopback

    for name in ("torch.distributed.elastic", "torch.multiprocessing"):
        # a failure is reported once, by launch() naming the rank; not also as torch's log
        logging.getLogger(name).setLevel(logging.CRITICAL)
    loopback.register()
    with tempfile.TemporaryDirectory(prefix="mirage-rendezvous-") as stores:
        config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=nproc, run_id=job.run_id,
                              rdzv_backend=loopback.BACKEND, rdzv_endpoint="",
                              rdzv_configs={"path": str(Path(stores) / "launcher")}, max_restarts=0,
                              monitor_interval=0.2, start_method="spawn", local_addr=loopback.LOOPBACK)
        elastic_launch(config, _torchrun_rank)(job, str(Path(stores) / "group"))


def _torchrun_rank(job: Job, group_store: str) -> None:
    """A process torchrun started: its GPU (one per local rank), the process group (met
    through the file ``group_store``, its sockets on loopback), the run."""
    _die_with_parent()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if job.gpus:  # before CUDA starts in this process: it then sees only its own GPUs
        mine = job.gpus[local_rank * job.devices_per_rank : (local_rank + 1) * job.devices_per_rank]
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(mine)
    from mirage.core.parallel.loopback import loopback_env

    os.environ.update(loopback_env())
    torch.distributed.init_process_group("nccl" if job.gpus else "gloo", timeout=COLLECTIVE_TIMEOUT,
                                         init_method=f"file://{group_store}", rank=int(os.environ["RANK"]),
                                         world_size=int(os.environ["WORLD_SIZE"]))
    try:
        run_rank(job)
    finally:
        torch.distributed.destroy_process_group()


def _die_with_parent() -> None:
    """Linux: this process gets SIGKILL when the launching process dies (killed, say), so
    no rank outlives its launcher."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except OSError:
            pass


# ---------------------------------------------------------------------- Ray Train
def _ray(job: Job, nproc: int, address: str | None) -> None:
    import ray
    from ray.train import FailureConfig, RunConfig as RayRunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    address = local_ray.ray_init_address(address)  # "local": a local Ray, asked for knowingly
    if not ray.is_initialized():
        local = {} if address else {"num_cpus": max(os.cpu_count() or 1, nproc + 1)}
        if not address:
            print(local_ray.local_ray_warning(), file=sys.stderr, flush=True)
        ray.init(address=address, include_dashboard=False, log_to_driver=True, **local)
    gpus = bool(job.gpus) if not address else bool(ray.cluster_resources().get("GPU"))
    # Ray gives each worker its GPUs (CUDA_VISIBLE_DEVICES) from its resources
    per_worker = {"CPU": 1, **({"GPU": job.devices_per_rank} if gpus else {})}
    trainer = TorchTrainer(
        _ray_rank, train_loop_config={"job": job},
        scaling_config=ScalingConfig(num_workers=nproc, use_gpu=gpus, resources_per_worker=per_worker),
        torch_config=TorchConfig(backend="nccl" if gpus else "gloo",
                                 timeout_s=int(COLLECTIVE_TIMEOUT.total_seconds())),
        run_config=RayRunConfig(name=job.run_id, storage_path=str(Path(job.db).resolve().parent / "ray"),
                                failure_config=FailureConfig(max_failures=0)),
    )
    trainer.fit()


def _ray_rank(loop_config: dict[str, Any]) -> None:
    """A Ray Train worker: Ray has set up the process group (and the worker's GPU)."""
    run_rank(loop_config["job"])


# ---------------------------------------------------------------------- failures
def failure_report(error: BaseException) -> tuple[str, str]:
    """The one-line reason of a job's failure, naming the rank that caused it, and the
    details (each failed rank's error and traceback) for the ``rank_error`` event."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    if isinstance(error, ChildFailedError):
        failures = sorted(error.failures.items(), key=lambda item: _cause_order(item[1]))
        lines = []
        for rank, failure in failures:
            lines.append(f"rank {rank} (pid {failure.pid}): {_failure_text(failure)}")
        first_rank, first = failures[0]
        return f"rank {first_rank} failed: {_failure_line(first)}", "\n\n".join(lines)
    text = str(error)
    first = next((line for line in text.splitlines() if line.strip()), type(error).__name__)
    return f"{type(error).__name__}: {first}", text


def _cause_order(failure: Any) -> tuple[int, float]:
    """Killed ranks first (a rank that died cannot have been hurt by a rank that raised
    after it), then by time."""
    return (0 if failure.exitcode < 0 else 1, failure.timestamp)


def _failure_line(failure: Any) -> str:
    if failure.exitcode < 0:
        return f"killed by {failure.signal_name()} (pid {failure.pid})"
    message = _message(failure).get("message", "")
    return message.strip().splitlines()[-1] if message.strip() else f"exit code {failure.exitcode}"


def _failure_text(failure: Any) -> str:
    trace = _message(failure).get("extraInfo", {}).get("py_callstack")
    return _failure_line(failure) + (f"\n{trace}" if trace else "")


def _message(failure: Any) -> dict[str, Any]:
    """The error a rank recorded (torch's error file: ``message`` and ``extraInfo``)."""
    message = failure.message
    if isinstance(message, dict):
        return message
    return {"message": str(message or "")}


def _mark(job: Job, status: str, reason: str, details: str | None) -> None:
    """Set the run's status (and a failure's details) in the store, if the run got there."""
    store = RunStore(Path(job.db))
    row = store.get_run(job.run_id) if Path(job.db).exists() else None
    if row is None:
        return
    if details:
        store.record_event(job.run_id, row.get("last_step") or 0, "rank_error", details)
    store.set_status(job.run_id, status, reason)

