"""A filter written on 4 December 2026 that breaks the contract: its selection names a
group index past the end of the batch."""

from mirage.core.batch import Batch, Selection
from mirage.core.components import Filter
from mirage.core.hookspecs import hookimpl

__version__ = "0.1.0"


class OutOfRange(Filter):
    def select(self, batch: Batch) -> Selection:
        return Selection([len(batch.groups)])


@hookimpl
def mirage_register_filters(register):
    register("out_of_range", OutOfRange)
