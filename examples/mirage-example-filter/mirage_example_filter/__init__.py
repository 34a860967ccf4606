"""Example third-party plugin: registers the filter ``best_half``.

It keeps the half of the prompt groups with the highest mean reward (at least one),
a deliberately naive rule that shows the whole path: a ``Filter`` subclass with ``select``, a
registration hook, and an entry point in the ``mirage`` group.
"""

from mirage.plugin import Filter, hookimpl, Batch, Selection

__version__ = "0.1.0"
MIRAGE_PLUGIN_API = ">=2.1,<3"  # the plugin API it is written for (docs/plugin-api.md)


class BestHalfFilter(Filter):
    """Keeps the ceil(P/2) groups with the highest mean episode return."""

    def select(self, batch: Batch) -> Selection:
        order = sorted(range(len(batch.groups)), key=lambda i: (-batch.groups[i].reward_mean, i))
        kept = sorted(order[: max(1, (len(order) + 1) // 2)])
        return Selection(kept, metrics={"filter/kept_ratio": len(kept) / len(order)})


@hookimpl
def mirage_register_filters(register):
    register("best_half", BestHalfFilter)
