"""Which plugin's code raised: a stage's exception named by its plugin, file and line.

:func:`call_stage` is how the run loop calls every stage: the hook call, this blame for
an exception in it and the check of its result (mirage/core/plugin_api/results.py).

A plugin author reads one line (``filter 'boom' (plugin 'bad_filters') raised during
selection at step 2, at /home/me/bad_filters.py:12: ValueError: ...``) and finds the full
traceback in the run's events (kind ``error``). The line is the deepest frame of the
traceback inside the plugin's own code, so an error raised deep in torch still points at
the plugin's call that led there, never at pluggy or the run loop.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from mirage.core.errors import PluginResultError

EVENT_KIND = "error"

Result = TypeVar("Result")


class PluginError(RuntimeError):
    """A plugin raised inside a stage. The message is one line naming the component or
    hook, its plugin and the file and line that raised; ``traceback`` is the full one."""

    def __init__(self, message: str, traceback_text: str = "") -> None:
        super().__init__(message)
        self.traceback = traceback_text


@dataclass(frozen=True)
class Suspect:
    """Code a stage calls into: ``source`` names it in messages (``filter 'boom' (plugin
    'bad_filters')``), ``module`` is the module its code lives in."""

    source: str
    module: str


def component(source: str, obj: Any) -> Suspect:
    """A registered component (a class or an instance of one)."""
    cls = obj if isinstance(obj, type) else type(obj)
    return Suspect(source, cls.__module__)


def hook_suspects(run: Any, hook: str) -> list[Suspect]:
    """Every implementation of ``hook``, named ``HOOK of plugin 'NAME'``."""
    impls = getattr(run.plugins.manager.hook, hook).get_hookimpls()
    return [Suspect(f"{hook} of plugin {impl.plugin_name!r}", impl.function.__module__)
            for impl in reversed(impls)]  # pluggy's own call order


def component_source(run: Any, kind: str, name: str) -> str:
    """``filter 'top_p' (plugin 'mirage.filters')``: a component of registry ``kind``."""
    owner = getattr(run.plugins.registries, kind).owner(name)
    return f"{kind.removesuffix('s')} {name!r} (plugin {owner!r})"


def backend_suspect(run: Any) -> Suspect:
    """The run's backend, named by its registry name and plugin."""
    return component(component_source(run, "backends", run.config.model.backend), run.backend)


def plugin_files(module: str) -> tuple[Path, ...]:
    """The files and folders that hold a plugin's code: its top-level package (a
    third-party plugin) or, for a built-in, its own module or package under
    ``mirage.plugins``/``mirage.envs`` (``mirage.plugins.backend_local``), so the run
    loop and pluggy never count as the plugin."""
    parts = module.split(".")
    root = sys.modules.get(".".join(parts[:3] if parts[0] == "mirage" else parts[:1]))
    if root is None:
        return ()
    if hasattr(root, "__path__"):
        return tuple(Path(p).resolve() for p in root.__path__)
    file = getattr(root, "__file__", None)
    return (Path(file).resolve(),) if file else ()


def culprit(error: BaseException, suspects: Sequence[Suspect]) -> tuple[Suspect, str, int] | None:
    """The suspect whose code holds the deepest frame of ``error``'s traceback, with that
    frame's file and line; None when no frame is a suspect's (the error is the platform's)."""
    for frame in reversed(traceback.extract_tb(error.__traceback__)):
        path = Path(frame.filename).resolve()
        for suspect in suspects:
            if any(path == place or place in path.parents for place in plugin_files(suspect.module)):
                return suspect, frame.filename, frame.lineno or 0
    return None


@contextmanager
def blamed(stage: str, step: int, suspects: Callable[[], Sequence[Suspect]], *,
           error_class: type[PluginError] = PluginError, named: Suspect | None = None) -> Iterator[None]:
    """Raise an exception from the block again as ``error_class`` naming the suspect (from
    ``suspects()``, asked only on an error) whose code raised it; with no suspect's frame in the traceback, ``named`` is blamed without a
    place, and without ``named`` the exception goes on unchanged. Malformed results
    (PluginResultError) and PluginErrors from an inner stage go on unchanged."""
    try:
        yield
    except (PluginError, PluginResultError):
        raise
    except Exception as error:
        found = culprit(error, suspects())
        if found is None and named is None:
            raise
        source, place = (found[0].source, f", at {found[1]}:{found[2]}") if found else (named.source, "")
        raise error_class(
            f"{source} raised during {stage} at step {step}{place}: {type(error).__name__}: {error}",
            "".join(traceback.format_exception(error)),
        ) from error


def call_stage(run: Any, stage: str, call: Callable[[], Result], suspects: Callable[[], Sequence[Suspect]],
               check: Callable[[Result], object] | None = None, *,
               error_class: type[PluginError] = PluginError, named: Suspect | None = None) -> Result:
    """Call one stage at ``run.step`` and return its result: ``call()`` calls its hook, an
    exception in it is raised again naming the suspect whose code raised (:func:`blamed`,
    with ``error_class`` and ``named``), then ``check(result)`` stops the run on a
    malformed result with a PluginResultError naming the plugin."""
    with blamed(stage, run.step, suspects, error_class=error_class, named=named):
        result = call()
    if check is not None:
        check(result)
    return result
