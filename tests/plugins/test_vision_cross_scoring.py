"""MI cross-scoring of a LLaVA policy through the lean path (issue #42): each context's
pictures are merged into its prefill once and every response reads the cached keys; the
scores equal scoring each (context, response) pair in full, in both MI scopes."""

from __future__ import annotations

import pytest
import torch

from mirage.core.run.loop import measure_step
from mirage.plugins.backend_local import cross_scoring, vision
from mirage.plugins.diagnostics.cross_scoring import assign_columns, first_turns, sampled_turns
from test_vision_policy import PROMPTS, session_of


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    session = session_of(tmp_path_factory.mktemp("vision-cache"))
    _, _, batch = measure_step(session, 0)
    return session, batch


def _both(session, turns):
    columns, _ = assign_columns([t.prompt for t in turns])
    responses = [t.response_ids for t in turns]
    return (session.backend.cross_score(columns, responses),
            session.backend.cross_score(columns, responses, reuse_prefix=False), columns, responses)


def test_a_llava_policy_scores_through_its_text_model_with_the_pictures_merged(scored, monkeypatch):
    session, batch = scored
    part = vision.language_part(session.backend.model)
    assert part is not None and part.model is session.backend.model.model.language_model
    calls = []
    real = cross_scoring.cross_score
    monkeypatch.setattr(cross_scoring, "cross_score", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    monkeypatch.setattr(type(session.backend), "cross_score_copied",
                        lambda *a: pytest.fail("the copied cache is the fallback, not the LLaVA path"))
    columns, _ = assign_columns([t.prompt for t in first_turns(batch)])
    session.backend.cross_score(columns, [t.response_ids for t in first_turns(batch)[:3]])
    assert calls == [part]


@pytest.mark.parametrize("scope", ["first_turn", "trajectory"])
def test_reused_prefixes_equal_scoring_every_pair_in_full(scored, scope):
    session, batch = scored
    turns = first_turns(batch) if scope == "first_turn" else sampled_turns(batch, 12, 0)
    reused, full, columns, responses = _both(session, turns)
    assert reused.logprobs.shape == (len(responses), len(columns))
    assert float((reused.logprobs - full.logprobs).abs().max()) <= 1e-5, (reused.logprobs - full.logprobs).abs().max()
    # summed entropies reach about 165 nats over 40 float32 terms: equal to float rounding
    assert torch.allclose(reused.entropy, full.entropy, atol=1e-5, rtol=1e-6)
    # the pictures reach the scores: one response scores differently under different rooms
    assert reused.logprobs.std(dim=1).min() > 0


def test_a_prompt_without_its_picture_scores_otherwise(scored):
    """The merge is what makes the columns differ: the same text ids with another room's
    picture give another score."""
    session, batch = scored
    turns = first_turns(batch)
    columns, _ = assign_columns([t.prompt for t in turns])
    assert len(columns) == PROMPTS and len({tuple(c) for c in columns}) == 1  # same words, rooms differ
    response = [turns[0].response_ids]
    scores = session.backend.cross_score(columns, response).logprobs[0]
    assert len(set(scores.tolist())) == PROMPTS


@pytest.mark.parametrize("scope", ["first_turn", "trajectory"])
def test_in_float64_both_ways_agree_to_float64_rounding(scored, scope, monkeypatch):
    """``cross_score_dtype: float64``: the tree and every pair in full both score with a
    float64 copy of the policy, which is gone after the call; float32 differs from it by
    float32 rounding only."""
    session, batch = scored
    backend = session.backend
    turns = first_turns(batch) if scope == "first_turn" else sampled_turns(batch, 12, 0)
    single, _, _, _ = _both(session, turns)
    policy = backend.model
    monkeypatch.setattr(backend, "options", backend.options.model_copy(update={"cross_score_dtype": "float64"}))
    reused, full, _, _ = _both(session, turns)
    assert backend.model is policy and not backend.widened
    assert next(policy.parameters()).dtype == torch.float32
    assert float((reused.logprobs - full.logprobs).abs().max()) <= 1e-9
    assert float((reused.entropy - full.entropy).abs().max()) <= 1e-9
    assert 0 < float((reused.logprobs - single.logprobs).abs().max()) <= 1e-3
