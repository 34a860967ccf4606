"""The quartile filter (registry experiment ``quartiles``) and the rollout sampling options
top_p / min_p (experiment ``sampling``) reaching the local backend's generate."""

from __future__ import annotations

import pytest
import torch

from mirage.core.config.run_config import FilterConfig, RunConfig
from mirage.core.rl.batch import Batch, Group, Trajectory, Turn
from mirage.core.run.validate import build_config
from mirage.plugins.backend_local.backend import LocalBackend
from mirage.plugins.filters import QuartileFilter, quartile_indices


def group(index: int, returns: list[float]) -> Group:
    turns = lambda r: [Turn(context="X", response="Z", reasoning="Z", answer="Up", actions=["Up"],
                            format_ok=True, reward=r, context_ids=[1], response_ids=[2])]
    return Group(prompt_index=index, seed=index,
                 trajectories=[Trajectory(index, k, k, turns=turns(r)) for k, r in enumerate(returns)])


# variances: [1, 0, 1, 0] -> 1/3; [1, 0, 0, 0] -> 1/4; [1, 1, 1, 0] -> 1/4; all equal -> 0
RETURNS = [[1, 1, 1, 1], [1, 0, 1, 0], [0, 0, 0, 0], [1, 0, 0, 0],
           [1, 0, 1, 0], [1, 1, 1, 0], [0, 0, 0, 0], [1, 0, 1, 0]]


@pytest.mark.parametrize("quartile, expected", [
    (1, [1, 4]),  # the two highest of the three 1/3 groups (ties: lower index first)
    (2, [3, 7]),  # the last 1/3 group and the first 1/4 group
    (3, [0, 5]),  # the other 1/4 group and the first zero group
    (4, [2, 6]),  # zero variance
])
def test_quartile_filter_keeps_one_quarter_of_the_ranking(quartile, expected):
    batch = Batch(step=1, groups=[group(i, r) for i, r in enumerate(RETURNS)])
    config = RunConfig(filter=FilterConfig(name="quartile", options={"quartile": quartile}))
    selection = QuartileFilter(config, QuartileFilter.Options(quartile=quartile)).select(batch)
    assert selection.kept_groups == expected
    assert selection.metrics["filter/kept_ratio"] == pytest.approx(0.25)


def test_quartile_indices_keep_at_least_one_and_cover_the_batch():
    scores = [0.5, 0.1, 0.9]
    parts = [quartile_indices(scores, q) for q in (1, 2, 3, 4)]
    assert all(parts) and parts[0] == [2]
    assert quartile_indices(scores, 4, keep="smallest") == [2]  # the ranking reversed


def test_quartile_must_be_one_to_four(tiny_config):
    from mirage.core.errors import ConfigError
    from mirage.core.plugin_api.manager import build_plugins
    from mirage.core.run.validate import validate_config

    config = build_config(tiny_config() | {"filter": {"name": "quartile", "options": {"quartile": 5}}})
    with pytest.raises(ConfigError, match=r"^invalid filter\.options\.quartile: Input should be less than "
                                          r"or equal to 4 \(got 5\)$"):
        validate_config(config, build_plugins())


def local_backend(config) -> LocalBackend:
    """The local backend as the run builds it: ``cls(config, options)``."""
    return LocalBackend(config, LocalBackend.Options(**config.model.options))


@pytest.mark.parametrize("decoder", ["generate", "lean"])
def test_rollout_sampling_options_reach_generate(monkeypatch, tiny_config, decoder):
    from mirage.plugins.backend_local import decode
    from mirage.plugins.backend_local.model import build_tiny_model
    from mirage.plugins.backend_local.tokenizer import build_word_tokenizer

    data = tiny_config()
    data["rollout"] |= {"top_p": 0.9, "min_p": 0.2}
    data["model"]["options"] |= {"decoder": decoder}
    config = build_config(data)
    backend = local_backend(config)
    backend.tokenizer = build_word_tokenizer(["a b c", "c b a"])
    tok = backend.tokenizer
    backend.model = build_tiny_model(backend.options, len(tok), tok.pad_token_id, tok.eos_token_id,
                                     tok.bos_token_id)
    seen = []
    if decoder == "generate":
        real = backend.model.generate
        monkeypatch.setattr(backend.model, "generate", lambda **kw: seen.append(kw) or real(**kw))
    else:
        real = decode.generate
        monkeypatch.setattr(decode, "generate", lambda model, ctx, **kw: seen.append(kw) or real(model, ctx, **kw))
    ids = [backend.encode("a b")]
    backend.generate(ids, temperature=1.0, greedy=False, max_new_tokens=3, top_p=0.9, min_p=0.2)
    backend.generate(ids, temperature=0.5, greedy=False, max_new_tokens=3)
    backend.generate(ids, temperature=0.5, greedy=True, max_new_tokens=3, top_p=0.9, min_p=0.2)
    assert len(seen) == 3  # every call went through the configured decoder
    assert (seen[0]["top_p"], seen[0]["min_p"]) == (0.9, 0.2)
    if decoder == "generate":
        assert seen[1]["top_p"] == 1.0 and "min_p" not in seen[1]  # validation samples plainly
        assert "top_p" not in seen[2] and not seen[2]["do_sample"]
    else:
        assert (seen[1]["top_p"], seen[1]["min_p"]) == (1.0, 0.0)
        assert seen[2]["greedy"]
    assert (config.rollout.top_p, config.rollout.min_p) == (0.9, 0.2)


def test_min_p_truncates_the_sampled_tokens(tiny_config):
    """min-p 0.99 leaves only the most probable token: sampling equals greedy."""
    from mirage.plugins.backend_local.model import build_tiny_model
    from mirage.plugins.backend_local.tokenizer import build_word_tokenizer

    config = build_config(tiny_config())
    backend = local_backend(config)
    backend.tokenizer = build_word_tokenizer(["a b c d e f g", "g f e d c b a"])
    tok = backend.tokenizer
    torch.manual_seed(0)
    backend.model = build_tiny_model(backend.options, len(tok), tok.pad_token_id, tok.eos_token_id,
                                     tok.bos_token_id)
    ids = [backend.encode("a b c")] * 8
    greedy = backend.generate(ids, temperature=1.0, greedy=True, max_new_tokens=6)
    truncated = backend.generate(ids, temperature=1.0, greedy=False, max_new_tokens=6, min_p=0.99)
    plain = backend.generate(ids, temperature=1.0, greedy=False, max_new_tokens=6)
    assert truncated == greedy
    assert plain != greedy  # an untrained model's plain samples differ
