"""docs/metrics.md and the metric names a run emits must agree."""

import pytest

from mirage.core.run.loop import execute
from mirage.core.run.validate import build_config
from mirage.core.store.run_store import RunStore


@pytest.mark.slow
def test_emitted_metric_names_are_documented(tiny_config, tmp_path, documented_metric_names):
    documented = documented_metric_names
    emitted: set[str] = set()
    # GRPO emits the common names; PPO adds the critic's, DAPO dynamic sampling's and
    # the overlong penalty's.
    for algo in ("grpo", "ppo", "dapo"):
        data = tiny_config()
        data["filter"] = {"name": "none"}
        data["steps"] = 2
        data["algorithm"] = {"name": algo}
        if algo == "grpo":  # six groups fill the six gradient buckets q1..q6
            data["rollout"] = {"prompts": 6, "group_size": 2, "max_new_tokens": 32}
            data["diagnostics"] = {"every": 1, "options": {"grad": {"every": 1}}}
        db = tmp_path / f"{algo}.duckdb"
        run_id = execute(build_config(data), db, progress=False)
        names = {name for _, name, _ in RunStore(db).metrics(run_id)}
        assert names - documented == set(), f"{algo} emitted undocumented names"
        emitted |= names
    # and a stored probe (core probe --store) its probe/* names
    from mirage.core.plugin_api.manager import build_plugins
    from mirage.probe.measure import probe_config, probe_policy
    from mirage.probe.storing import store_probe

    plugins = build_plugins()
    probe = probe_policy(probe_config(tiny_config(), None), 1, "tiny", plugins=plugins, progress=False)
    store = RunStore(tmp_path / "probe.duckdb")
    names = {name for _, name, _ in store.metrics(store_probe(store, probe, plugins))}
    assert names - documented == set(), "a probe emitted undocumented names"
    emitted |= names
    # Every documented name is emitted by one of these runs (filter none, no KL: still
    # logged as 0), except the variance ratios, undefined while the tiny policy never wins,
    # the vllm backend's (tests/plugins/test_backend_vllm.py checks those) and the one of runs
    # on several processes (tests/core/test_parallel_run.py checks it).
    vllm_only = {"backend/sampler_logprob_abs_diff", "backend/sampler_kl"}
    assert documented - emitted <= {"filter/rv_cv", "probe/rv_cv", "time/communication"} | vllm_only, \
        "documented but never emitted"
