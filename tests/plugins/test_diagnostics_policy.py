"""The diagnostics with the real tiny policy: prefix reuse, shuffled prompts, gradients."""

from __future__ import annotations

import random
import re

import pytest
from fitting import fit
import torch

from mirage.core.plugin_api.manager import build_plugins
from mirage.core.rl.batch import make_batch
from mirage.core.rl.episode import format_response
from mirage.core.run.loop import cache_dir, open_session
from mirage.core.run.validate import build_config, validate_config
from mirage.plugins.diagnostics.cross_scoring import first_turns


def make_session(tiny_config, **diagnostics):
    data = tiny_config()
    data["diagnostics"] = {"every": 1, **diagnostics}
    data["rollout"] = {"prompts": 4, "group_size": 3, "max_new_tokens": 32}
    data.setdefault("algorithm", {})
    return data


def open_run(data):
    config = build_config(data)
    plugins = build_plugins()
    session = open_session(config, plugins, validate_config(config, plugins))
    session.backend.prepare(session.env_cls, cache_dir())
    session.step = 1
    return session


def rolled_out(session, seeds=(11, 12, 13, 14), group_size=3, temperature=1.0):
    torch.manual_seed(0)
    batch = make_batch(1, list(seeds), group_size, temperature=temperature)
    session.hook.mirage_rollout(run=session, batch=batch)
    return batch


@pytest.mark.parametrize("path", ["shared prompt cache", "copied cache"])
def test_prefix_reuse_agrees_with_full_scoring(tiny_config, monkeypatch, path):
    """Both reuse paths: the shared prompt cache (Qwen2 models) and the copied cache
    (models the lean loop does not know)."""
    from mirage.plugins.backend_local import decode

    session = open_run(make_session(tiny_config))
    if path == "copied cache":
        monkeypatch.setattr(decode, "unsupported", lambda model: "forced by the test")
    batch = rolled_out(session)
    contexts = [t.context_ids for t in first_turns(batch)][::3]
    responses = [t.response_ids for t in batch.trajectories[0].turns] + [[5], [7, 8, 9]]
    cached = session.hook.mirage_cross_score(run=session, contexts=contexts, responses=responses)
    full = session.backend.cross_score(contexts, responses, reuse_prefix=False)
    assert cached.logprobs.shape == (len(responses), len(contexts))
    assert torch.allclose(cached.logprobs, full.logprobs, atol=1e-4, rtol=0)
    assert torch.allclose(cached.entropy, full.entropy, atol=1e-4, rtol=0)
    # and the naive path is the score hook's per-token log-probs, summed
    pair = session.hook.mirage_score(run=session, contexts=[contexts[1]], responses=[responses[0]])
    assert abs(sum(pair[0]) - float(full.logprobs[0, 1])) < 1e-4


def test_shuffled_prompts_bring_retrieval_to_chance(tiny_config):
    """Teach the policy to restate its state in Z, roll out, then score the same
    reasonings against a shuffled prompt assignment."""
    data = make_session(tiny_config, options={"mi": {"scopes": ["first_turn"]}})
    data["algorithm"] = {"lr": 3e-3}
    session = open_run(data)
    seeds = (21, 22, 23, 24)
    turns = first_turns(rolled_out(session, seeds, 1))
    contexts = [t.context_ids for t in turns]
    places = [re.search(r"Player at row \d+ col \d+ \. Goal at row \d+ col \d+ \.", t.context)
              for t in turns]
    assert all(places) and len({p.group(0) for p in places}) == 4
    targets = [session.backend.encode(format_response(p.group(0), ["Up"])) for p in places]
    # a supervised fit of the four (X, Z) pairs, until nearly exact
    assert fit(session.backend, contexts, targets, steps=600, below=0.005) < 0.005
    batch = rolled_out(session, seeds, 4, temperature=0.5)
    mi = session.diagnostics["mi"]
    own = mi.measure(session, batch)
    assert own["mi/first_turn/retrieval_chance"] == 0.25
    assert own["mi/first_turn/retrieval_acc"] >= 0.9
    shuffled_acc, shuffled_mi = [], []
    rng = random.Random(0)
    for _ in range(8):
        turns = first_turns(batch)
        shuffled = [t.context_ids for t in turns]
        rng.shuffle(shuffled)
        for turn, context in zip(turns, shuffled):
            turn.context_ids = context
        m = mi.measure(session, batch)
        shuffled_acc.append(m["mi/first_turn/retrieval_acc"])
        shuffled_mi.append(m["mi/first_turn/mi_est"])
    assert abs(sum(shuffled_acc) / 8 - 0.25) < 0.1
    assert sum(shuffled_mi) / 8 < own["mi/first_turn/mi_est"] / 3


@pytest.mark.parametrize("algo", ["grpo", "drgrpo", "dapo", "ppo"])
def test_gradient_decomposition_leaves_the_model_as_it_was(tiny_config, algo):
    data = make_session(tiny_config, options={"grad": {"every": 1}})
    data["algorithm"] = {"name": algo, "kl_coef": 0.01}
    session = open_run(data)
    batch = rolled_out(session, seeds=(31, 32), group_size=4)
    for k, trajectory in enumerate(batch.groups[0].trajectories):  # group 0: all equal
        for turn in trajectory.turns:
            turn.reward = 0.0
    for k, trajectory in enumerate(batch.groups[1].trajectories):  # group 1: varied
        trajectory.turns[-1].reward = float(k)
    from mirage.core.run.scoring import score_batch
    score_batch(session, batch)
    session.backend.freeze_reference()
    model = session.backend.model
    before = {k: v.clone() for k, v in model.state_dict().items()}
    metrics = session.diagnostics["grad"].measure(session, batch)
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert all(p.grad is None for p in model.parameters())
    # two groups: rank 0 -> q1 (the zero-variance group), rank 1 -> q4
    assert {k.split("/")[1] for k in metrics} == {"q1", "q4", "all"}
    assert metrics["grad/q4/task/total"] > 0
    assert metrics["grad/q1/entropy/total"] > 0 and metrics["grad/q1/kl/total"] >= 0
    if algo in ("grpo", "drgrpo"):  # group-outcome advantage of an all-equal group is 0
        assert metrics["grad/q1/task/total"] == 0.0
    samples = len(batch.groups[1].trajectories)
    assert metrics["grad/q4/task/per_sample"] == pytest.approx(metrics["grad/q4/task/total"] / samples)
