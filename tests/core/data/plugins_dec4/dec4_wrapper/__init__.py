"""A wrapper registration hook written on 4 December 2026: it lets the other plugins
register their filters first, then adds one of its own."""

from mirage.core.batch import Selection
from mirage.core.components import Filter
from mirage.core.hookspecs import hookimpl

__version__ = "0.1.0"

CALLS = []  # one entry per call of the wrapper, after the wrapped hooks ran


class WrappedNone(Filter):
    def select(self, batch):
        return Selection(list(range(len(batch.groups))))


@hookimpl(wrapper=True)
def mirage_register_filters(register):
    result = yield
    CALLS.append("after the others")
    register("wrapped_none", WrappedNone)
    return result
