"""When MIRAGE starts a local Ray: only when asked for by name (``--ray-address local``).

Ray 2.60's servers (GCS, raylet, workers, the dashboard agent) listen on every interface
whatever node address they are given (it turns 127.0.0.1 into the machine's own
address), and Ray's Jobs API runs code for whoever reaches them. So ``--launcher ray``
and ``--runner ray`` without ``--ray-address`` are refused before any work, with what to
do instead (docs/security.md). No import of Ray or torch here: the CLI reads it at start."""

from __future__ import annotations

LAUNCHERS = ("torchrun", "ray")
"""What starts a run's processes (mirage/core/run/launch.py): torch's elastic launcher on
this machine, or Ray Train workers."""
LOCAL_RAY = "local"
"""``--ray-address local``: start a local Ray, knowing that it listens on every interface."""


def local_ray_refusal(flag: str) -> str:
    """Why ``flag`` (``--launcher ray``, ``--runner ray``) without ``--ray-address`` is
    refused: Ray 2.60's servers (GCS, raylet, workers, agents) listen on every interface
    whatever node address they are given, and its Jobs API runs code for whoever reaches it."""
    return (f"{flag} without --ray-address would start a local Ray, whose servers listen on every "
            "interface of this machine (Ray cannot bind them to loopback); on one machine leave "
            f"{flag.split()[0]} out (torchrun and the process pool listen on loopback only), give "
            "--ray-address ADDRESS of a cluster on a trusted network, or --ray-address local to start "
            "a local Ray anyway (docs/security.md)")


def local_ray_warning() -> str:
    return ("warning: --ray-address local starts a local Ray whose servers listen on every interface "
            "of this machine; anyone who can reach it can run code through it (docs/security.md)")


def ray_init_address(address: str | None) -> str | None:
    """What ``ray.init(address=...)`` gets: None (start a local Ray) for ``local``."""
    return None if address == LOCAL_RAY else address
