"""A filter written on 4 December 2026: keeps the ceil(rho x P) groups with the highest
mean return."""

import math

from mirage.core.batch import Batch, Selection
from mirage.core.components import Filter
from mirage.core.hookspecs import hookimpl

__version__ = "0.1.0"


class BestMean(Filter):
    def select(self, batch: Batch) -> Selection:
        count = max(1, math.ceil(self.config.rho * len(batch.groups)))
        order = sorted(range(len(batch.groups)), key=lambda i: (-batch.groups[i].reward_mean, i))
        kept = sorted(order[:count])
        return Selection(kept, metrics={"filter/kept_ratio": len(kept) / len(batch.groups)})


@hookimpl
def mirage_register_filters(register):
    register("best_mean", BestMean)
