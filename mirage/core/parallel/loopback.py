"""A one-machine process group that opens no socket beyond loopback.

torch's elastic launcher (what ``torchrun`` runs) meets its ranks through a c10d
rendezvous whose ``TCPStore`` listens on every interface whatever host it is given, and
``init_process_group("env://")`` starts a second one on rank 0. On one machine neither is
needed: :class:`FileRendezvous` (registered as the ``mirage-file`` rendezvous backend)
hands the launcher a :class:`torch.distributed.FileStore` in the run's temporary
directory, the ranks join their process group through the same kind of store
(``init_method="file://..."``), and gloo's own sockets are put on the loopback interface
(:data:`LOOPBACK_ENV`). Ranks then exchange their tensors and pickled objects over
127.0.0.1 only (docs/scaling.md, "What listens where")."""

from __future__ import annotations

import socket

import torch.distributed as dist
from torch.distributed.elastic.rendezvous import (
    RendezvousHandler, RendezvousInfo, RendezvousParameters, RendezvousStoreInfo,
    rendezvous_handler_registry,
)

BACKEND = "mirage-file"
LOOPBACK = "127.0.0.1"


def loopback_interface() -> str:
    """The name of the loopback interface (``lo`` on Linux)."""
    try:
        import psutil

        for name, addresses in psutil.net_if_addrs().items():
            if any(a.family == socket.AF_INET and a.address == LOOPBACK for a in addresses):
                return name
    except Exception:  # noqa: BLE001 - fall back to Linux's name
        pass
    return "lo"


def loopback_env() -> dict[str, str]:
    """What a rank's collectives read to stay on loopback: gloo's and NCCL's socket
    interface."""
    interface = loopback_interface()
    return {"GLOO_SOCKET_IFNAME": interface, "NCCL_SOCKET_IFNAME": interface}


class FileRendezvous(RendezvousHandler):
    """The one node of a one-machine job: rank 0 of 1, its store a file (``path`` in the
    rendezvous configs)."""

    def __init__(self, params: RendezvousParameters) -> None:
        self._path = params.get("path")
        if not self._path:
            raise ValueError("the mirage-file rendezvous needs a 'path' in its configs")
        self._run_id = params.run_id
        self._closed = False

    def get_backend(self) -> str:
        return BACKEND

    @property
    def use_agent_store(self) -> bool:
        return False

    def next_rendezvous(self) -> RendezvousInfo:
        store = dist.FileStore(self._path, 1)
        return RendezvousInfo(store, 0, 1, RendezvousStoreInfo(LOOPBACK, 0))

    def is_closed(self) -> bool:
        return self._closed

    def set_closed(self) -> None:
        self._closed = True

    def num_nodes_waiting(self) -> int:
        return 0

    def get_run_id(self) -> str:
        return self._run_id

    def shutdown(self) -> bool:
        self._closed = True
        return True


def register() -> None:
    """Make ``rdzv_backend="mirage-file"`` known to torch's launcher (once per process)."""
    rendezvous_handler_registry.register(BACKEND, FileRendezvous)  # the same creator again is fine

