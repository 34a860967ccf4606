"""A diagnostic written on 4 December 2026: how templated the first-turn reasoning is,
as the share of trajectories whose first reasoning equals the most common one."""

from collections import Counter

from mirage.core.components import Diagnostic
from mirage.core.hookspecs import hookimpl

__version__ = "0.1.0"


class TemplateShare(Diagnostic):
    def __init__(self, config):
        super().__init__(config)
        self.seen_steps = 0

    def measure(self, run, batch):
        self.seen_steps += 1
        firsts = [t.turns[0].reasoning for t in batch.trajectories if t.turns]
        if not firsts:
            return {}
        top = Counter(firsts).most_common(1)[0][1]
        return {"template/share": top / len(firsts), "template/every": float(self.config.diagnostics.every)}


@hookimpl
def mirage_register_diagnostics(register):
    register("template_share", TemplateShare)
