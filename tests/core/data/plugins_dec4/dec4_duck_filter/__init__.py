"""A filter written from the guides before 4 December 2026: duck-typed, no Filter base
class, its own constructor reading its options from the FilterConfig it is given."""

from pydantic import BaseModel, ConfigDict

from mirage.core.batch import Selection
from mirage.core.hookspecs import hookimpl

__version__ = "0.1.0"


class DuckOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    min_spread: float = 0.0


class DuckSpread:
    """Keeps the groups whose returns spread (max - min) exceeds ``min_spread``; all of
    them when none does."""

    Options = DuckOptions

    def __init__(self, config):
        self.config = config
        self.min_spread = self.Options(**config.options).min_spread
        self.shared_rho = config.rho

    def select(self, batch):
        spreads = []
        for group in batch.groups:
            returns = getattr(group, "returns", None) or [t.episode_return for t in group.trajectories]
            spreads.append(max(returns) - min(returns))
        kept = [i for i, spread in enumerate(spreads) if spread > self.min_spread]
        kept = kept or list(range(len(batch.groups)))
        return Selection(kept, metrics={"filter/kept_ratio": len(kept) / len(batch.groups)})


@hookimpl
def mirage_register_filters(register):
    register("duck_spread", DuckSpread)
