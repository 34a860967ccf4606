"""The collapse alarm: template collapse seen early (PAPER.md sections 1 and 6, finding 1).

Template collapse is input dependence falling to nothing while the reasoning stays as
varied as before. The rule (``diagnostics.alarm``) reads the MI diagnostic's numbers of
one scope on each step they exist (a check): a check is *collapsed* when retrieval
accuracy is within ``margin`` of its chance level while the policy entropy is at least
``entropy_ratio`` times its early level (the mean over the first ``baseline_checks``
checks). The alarm fires on a check that ends ``checks`` collapsed checks in a row; it
reports ``alarm/collapse`` 1 there and 0 on other checks, and leaves a notice that the
loop writes to the store's events table (kind ``collapse_alarm``) and shows on the
progress line (and, with ``alarm.stop``, the loop stops the run).
"""

from __future__ import annotations

from pydantic import BaseModel

from mirage.core.config.run_config import CollapseAlarmConfig, RunConfig
from mirage.core.plugin_api.components import Diagnostic
from mirage.core.rl.batch import Batch
from mirage.plugins.diagnostics.mi import MutualInformation

STATE = "collapse_alarm"  # run.state key: the streak and early entropies, checkpointed


def check_collapse(state: dict, accuracy: float, chance: float, entropy: float,
                   rule: CollapseAlarmConfig) -> str | None:
    """Advance the rule by one check (``state`` is updated in place); return the alarm's
    message when it fires, else None."""
    early = state.setdefault("early_entropy", [])
    if len(early) < rule.baseline_checks:
        early.append(entropy)
    level = sum(early) / len(early)
    collapsed = accuracy <= chance + rule.margin and entropy >= rule.entropy_ratio * level
    state["streak"] = state.get("streak", 0) + 1 if collapsed else 0
    if state["streak"] < rule.checks:
        return None
    return (f"collapse alarm ({rule.scope}): retrieval accuracy {accuracy:.3f} within "
            f"{rule.margin} of chance {chance:.3f} for {state['streak']} checks while policy "
            f"entropy {entropy:.3f} stays >= {rule.entropy_ratio} x its early level {level:.3f}")


class CollapseAlarm(Diagnostic):
    """Measures nothing itself; reviews each step's merged metrics (``review``)."""

    def __init__(self, config: RunConfig, options: BaseModel):
        super().__init__(config, options)
        self.rule = config.diagnostics.alarm

    @classmethod
    def config_problem(cls, config: RunConfig) -> str | None:
        """The alarm reads the ``mi`` diagnostic's numbers of its scope."""
        settings = config.diagnostics
        if "mi" not in settings.names:
            return "the 'collapse' alarm reads the 'mi' diagnostic: add 'mi' to diagnostics.names"
        scopes = MutualInformation.Options(**settings.options.get("mi", {})).scopes
        if settings.alarm.scope not in scopes:
            return (f"diagnostics.alarm.scope {settings.alarm.scope!r} is not among the mi "
                    f"diagnostic's scopes {scopes} (diagnostics.options.mi.scopes)")
        return None

    def measure(self, run, batch: Batch) -> dict[str, float]:
        return {}

    def review(self, run, metrics: dict[str, float]) -> dict[str, float]:
        prefix = f"mi/{self.rule.scope}/"
        needed = [metrics.get(prefix + name) for name in ("retrieval_acc", "retrieval_chance", "policy_entropy")]
        if any(value is None for value in needed):
            return {}  # not a check: the MI proxies did not run (or could not) this step
        message = check_collapse(run.state.setdefault(STATE, {}), *needed, self.rule)
        if message is not None:
            run.notices.append(("collapse_alarm", message))
        return {"alarm/collapse": float(message is not None)}
