"""Which plugin did what inside one pluggy hook call.

Registration and command hooks are called once through pluggy (``manager.hook.NAME(...)``),
so wrappers wrap and the order is pluggy's, and every implementation receives the same
arguments. To keep a plugin's components (or commands) its own, and to set aside only the
plugin at fault, the platform tells the implementations apart by their running frames:
:func:`running_impl` names the implementation that is calling now (the innermost one on
the stack, a wrapper's generator frame included), :func:`raising_impl` the one whose frame
is deepest in an exception's traceback.
"""

from __future__ import annotations

import inspect
import traceback
from collections.abc import Sequence
from types import FrameType
from typing import Any

from pluggy import HookImpl

_MISSING = object()


def running_impl(impls: Sequence[HookImpl]) -> HookImpl | None:
    """The implementation among ``impls`` whose frame is innermost on the current stack:
    the one that called the function asking (None: none of them did)."""
    frame = inspect.currentframe()
    try:
        while frame is not None:
            found = _impl_of(frame, impls)
            if found is not None:
                return found
            frame = frame.f_back
        return None
    finally:
        del frame  # no reference cycle through this frame (the inspect module's advice)


def raising_impl(error: BaseException, impls: Sequence[HookImpl]) -> HookImpl | None:
    """The implementation among ``impls`` with the deepest frame in ``error``'s traceback
    (a wrapper that only passed on an inner implementation's exception is not it); None
    when the traceback holds none of theirs."""
    for frame, _ in reversed(list(traceback.walk_tb(error.__traceback__))):
        found = _impl_of(frame, impls)
        if found is not None:
            return found
    return None


def _impl_of(frame: FrameType, impls: Sequence[HookImpl]) -> HookImpl | None:
    return next((impl for impl in impls if _runs(frame, impl.function)), None)


def _runs(frame: FrameType, function: Any) -> bool:
    """Whether ``frame`` executes ``function``: its code and, since two plugins may share
    code (two instances of one class, two functions from one factory), its instance or
    the values it closes over."""
    plain = getattr(function, "__func__", function)
    code = getattr(plain, "__code__", None)
    if frame.f_code is not code:
        return False
    instance = getattr(function, "__self__", None)
    if instance is not None and frame.f_locals.get(code.co_varnames[0], _MISSING) is not instance:
        return False
    cells = zip(code.co_freevars, plain.__closure__ or ())
    return all(frame.f_locals.get(name, _MISSING) is _contents(cell) for name, cell in cells)


def _contents(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # a closed-over name not bound yet
        return _MISSING
