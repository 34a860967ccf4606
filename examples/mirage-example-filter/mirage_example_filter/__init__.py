"""Example third-party plugin: registers the filter ``best_half``.

It keeps the half of the prompt groups with the highest mean reward (at least one),
a deliberately naive rule that shows the whole path: a ``Filter`` subclass with ``select``, a
registration hook, and an entry point in the ``mirage`` group.
"""

from mirage.core.plugin_api.components import Filter
from mirage.core.plugin_api.hookspecs import hookimpl
from mirage.core.rl.batch import Batch, Selection

__version__ = "0.1.0"


class BestHalfFilter(Filter):
    """Keeps the ceil(P/2) groups with the highest mean episode return."""

    def select(self, batch: Batch) -> Selection:
        order = sorted(range(len(batch.groups)), key=lambda i: (-batch.groups[i].reward_mean, i))
        kept = sorted(order[: max(1, (len(order) + 1) // 2)])
        return Selection(kept, metrics={"filter/kept_ratio": len(kept) / len(order)})


@hookimpl
def mirage_register_filters(register):
    register("best_half", BestHalfFilter)
