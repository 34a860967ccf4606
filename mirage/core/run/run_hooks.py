"""Calls the run hooks (``mirage_run_start``, ``mirage_step_end``, ``mirage_run_end``)
plugin by plugin.

These hooks feed observers (experiment trackers) from what the store recorded. The store
is the source of truth, so an observer that raises must not fail the run or silence the
others: it is reported once, as a ``logger`` notice the loop writes to the store's
events, and skipped for the rest of the run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from mirage.core.plugin_api.session import RunSession

NOTICE_KIND = "logger"


def guarded(run: RunSession, source: str, when: str, call: Callable[[], Any]) -> bool:
    """Run ``call``; if it raises, add a notice naming ``source`` and return False."""
    try:
        call()
    except Exception as error:
        run.notices.append((NOTICE_KIND, f"{source} raised {when}: {type(error).__name__}: "
                                         f"{error}; it is skipped for the rest of the run"))
        return False
    return True


class RunHooks:
    """The run hooks of one run, each implementation isolated from the others."""

    def __init__(self, run: RunSession, run_id: str) -> None:
        self.run = run
        self.run_id = run_id
        self.skipped: set[str] = set()

    def call(self, name: str, when: str, **kwargs: Any) -> None:
        manager = self.run.plugins.manager
        impls = getattr(manager.hook, name).get_hookimpls()
        for impl in reversed(impls):  # pluggy's own call order
            if impl.plugin_name in self.skipped:
                continue
            others = [other.plugin for other in impls if other.plugin is not impl.plugin]
            only_this = manager.subset_hook_caller(name, others)
            source = f"{name} of plugin {impl.plugin_name!r}"
            if not guarded(self.run, source, when,
                           lambda: only_this(run=self.run, run_id=self.run_id, **kwargs)):
                self.skipped.add(impl.plugin_name)

    def start(self, store_dir: Path, first_step: int) -> None:
        self.call("mirage_run_start", f"at the start (step {first_step})",
                  store_dir=store_dir, first_step=first_step)

    def step_end(self, step: int, metrics: dict[str, float]) -> None:
        self.call("mirage_step_end", f"at step {step}", step=step, metrics=metrics)

    def end(self, status: str, message: str | None) -> None:
        self.call("mirage_run_end", f"at the end (status {status})", status=status, message=message)
