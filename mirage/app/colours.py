"""One colour per run (and per group) for the whole page.

Vega assigns colours by the order in which a chart meets its labels, so the same run
would change colour between two charts that hold different runs. Every chart therefore
gets an explicit scale, computed once from the selection: the same label, the same colour.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import altair as alt

# Tableau 20 (Vega's "tableau20" scheme), strong shades first so that the first ten
# labels are easy to tell apart; beyond twenty labels the colours repeat.
PALETTE = (
    "#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#eeca3b", "#b279a2", "#ff9da6",
    "#9d755d", "#bab0ac", "#9ecae9", "#ffbf79", "#88d27a", "#ff9d98", "#439894", "#83bcb6",
    "#d67195", "#fcbfd2", "#d6a5c9", "#79706e",
)  # fmt: skip


@dataclass(frozen=True)
class Colours:
    """Labels in a fixed order and the colour each one keeps on every chart."""

    labels: tuple[str, ...]

    def colour(self, label: str) -> str:
        return PALETTE[self.labels.index(label) % len(PALETTE)]

    def scale(self) -> alt.Scale:
        """A Vega scale with this domain and range: a chart that holds only some of the
        labels still draws each in its own colour."""
        return alt.Scale(domain=list(self.labels),
                         range=[self.colour(label) for label in self.labels])


def colours_for(labels: Iterable[str]) -> Colours:
    """Colours for ``labels`` in their first-seen order (duplicates dropped)."""
    return Colours(tuple(dict.fromkeys(labels)))
