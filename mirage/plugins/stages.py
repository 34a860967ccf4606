"""Default stage implementations: delegate to the components the run selected."""

from __future__ import annotations

from mirage.core.plugin_api.blame import component_source
from mirage.core.plugin_api.hookspecs import hookimpl
from mirage.core.plugin_api.results import CheckedMetrics, check_metrics
from mirage.core.plugin_api.session import RunSession
from mirage.core.rl.batch import Batch, Selection


@hookimpl
def mirage_score(run: RunSession, contexts: list[list[int]], responses: list[list[int]]):
    out = run.backend.score(contexts, responses)
    lengths = out.mask.sum(-1).long().tolist()
    return [row[:n] for row, n in zip(out.logprobs.tolist(), lengths)]


@hookimpl
def mirage_filter(run: RunSession, batch: Batch) -> Selection:
    return run.filter.select(batch)


@hookimpl
def mirage_update(run: RunSession, batch: Batch):
    return run.algorithm.update(run, batch)


@hookimpl
def mirage_cross_score(run: RunSession, contexts: list[list[int]], responses: list[list[int]]):
    return run.backend.cross_score(contexts, responses)


@hookimpl
def mirage_diagnose(run: RunSession, batch: Batch):
    metrics = CheckedMetrics()
    for name, diagnostic in run.diagnostics.items():
        if diagnostic.due(max(run.step, 1)):  # step 0 (the starting policy) asks as step 1
            measured = diagnostic.measure(run, batch)
            # checked here, where the diagnostic (not this stage plugin) can be named
            check_metrics(measured, component_source(run, "diagnostics", name), batch.step)
            metrics.update(measured)
    return metrics
