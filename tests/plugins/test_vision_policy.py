"""The local backend's vision-language policy (issue #42): FrozenLake in image mode through
every stage, and the MI diagnostics keeping their meaning on pictures. The prompts of one
batch share their words (the picture is the whole state), so only the pictures tell the
prompts apart: a policy whose reasoning ignores them is at chance exactly, one whose
reasoning says what they show is retrieved."""

from __future__ import annotations

import pytest
import torch
from fitting import fit

from mirage.core.plugin_api.manager import build_plugins
from mirage.core.rl.episode import format_response
from mirage.core.rl.prompt import Prompt
from mirage.core.run.loop import measure_step, open_session
from mirage.core.run.validate import validate_config
from mirage.envs.frozenlake import PICTURE_WORDS
from mirage.envs.phrasing import grid_words
from mirage.envs.sprites import FROZENLAKE_TILES, read_grid
from mirage.plugins.backend_local import vision
from mirage.plugins.diagnostics.cross_scoring import assign_columns, first_turns
from mirage.probe.measure import probe_config

PROMPTS, GROUP = 4, 4
DATA = {"env": {"name": "frozenlake", "options": {"observation": "image"}},
        "rollout": {"prompts": PROMPTS, "group_size": GROUP, "max_new_tokens": 40, "temperature": 0.2},
        "algorithm": {"lr": 1e-2}, "threads": 1,
        "model": {"options": {"hidden": 32, "layers": 1, "heads": 2, "vision_hidden": 16, "vision_layers": 1,
                              "warmstart_episodes": 20, "warmstart_steps": 5, "warmstart_batch": 8}}}


def session_of(cache):
    config = probe_config(DATA, None)
    plugins = build_plugins()
    session = open_session(config, plugins, validate_config(config, plugins))
    session.backend.prepare(session.env_cls, cache, progress=False)
    return session


def picture_words(turn) -> str:
    """What the turn's picture shows, read from its pixels: the grid, row by row."""
    return grid_words(read_grid(turn.images[0], FROZENLAKE_TILES), PICTURE_WORDS)


def fitted(session, reasoning) -> dict[str, float]:
    """The session's policy fitted to answer step 0's pictures with
    ``format_response(reasoning(words, all words), ["Up"])``; step 0 measured again."""
    _, _, batch = measure_step(session, 0)
    turns = first_turns(batch)[::GROUP]  # one per room
    words = [picture_words(t) for t in turns]
    assert len(set(words)) == PROMPTS and len({tuple(t.context_ids) for t in turns}) == 1  # same text
    prompts = [t.prompt for t in turns]
    targets = [session.backend.encode(format_response(reasoning(w, words), ["Up"])) for w in words]
    assert fit(session.backend, prompts, targets, steps=2000, below=0.0005) < 0.0005
    metrics, _, _ = measure_step(session, 0)
    return metrics


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("vision-cache")


def test_the_policy_is_a_llava_model_that_sees_each_turns_picture(cache):
    session = session_of(cache)
    assert vision.is_vision_model(session.backend.model)
    assert type(session.backend.model).__name__ == "LlavaForConditionalGeneration"
    _, _, batch = measure_step(session, 0)
    image_token = vision.image_token_id(session.backend.model)
    patches = session.backend.model.config.image_seq_length
    for trajectory in batch.trajectories:
        for turn in trajectory.turns:
            assert len(turn.images) == 1 and turn.images[0].size == (64, 64)
            assert turn.context_ids.count(image_token) == patches  # the picture's tokens
            assert image_token not in turn.response_ids  # a response never places a picture
            assert turn.old_logprobs is not None and len(turn.old_logprobs) == len(turn.response_ids)


def test_prompts_with_the_same_words_are_told_apart_by_their_pictures(cache):
    session = session_of(cache)
    _, _, batch = measure_step(session, 0)
    turns = first_turns(batch)
    columns, owners = assign_columns([t.prompt for t in turns])
    assert len(columns) == PROMPTS and owners == [i // GROUP for i in range(PROMPTS * GROUP)]
    assert all(isinstance(c, Prompt) and len(c.images) == 1 for c in columns)


def test_cross_scoring_reuses_each_pictures_prefix_and_equals_scoring_each_pair(cache):
    session = session_of(cache)
    _, _, batch = measure_step(session, 0)
    turns = first_turns(batch)
    columns, _ = assign_columns([t.prompt for t in turns])
    responses = [t.response_ids for t in turns[::2]]
    reused = session.backend.cross_score(columns, responses)
    full = session.backend.cross_score(columns, responses, reuse_prefix=False)
    assert reused.logprobs.shape == (len(responses), PROMPTS)
    assert torch.allclose(reused.logprobs, full.logprobs, atol=1e-5)
    assert torch.allclose(reused.entropy, full.entropy, atol=1e-5)
    # the pictures matter: the same response scores differently under different rooms
    assert reused.logprobs.std(dim=1).min() > 0


@pytest.mark.slow  # fits two policies (about 10 s); the fast tier keeps the picture-told-apart tests
def test_reasoning_that_ignores_the_picture_is_at_chance_and_reasoning_that_reads_it_is_retrieved(cache):
    first = "mi/first_turn/"
    fixed = fitted(session_of(cache), lambda own, words: words[0])
    restating = fitted(session_of(cache), lambda own, words: own)
    chance = fixed[f"{first}retrieval_chance"]
    assert chance == 1 / PROMPTS
    # one reasoning for every picture: the own prompt is the best column for exactly one
    # prompt's rows, whatever the scores, so retrieval is chance exactly
    assert fixed[f"{first}retrieval_acc"] == chance
    assert fixed[f"{first}format_valid"] == 1.0
    assert restating[f"{first}retrieval_acc"] >= 0.9
    assert restating[f"{first}mi_est"] > fixed[f"{first}mi_est"]


@pytest.mark.slow  # two runs and their resumes (about 30 s); the fast tier keeps the stages above
@pytest.mark.parametrize("algorithm", ["ppo", "grpo"])
def test_image_runs_train_checkpoint_and_resume(algorithm, cache, tmp_path, monkeypatch):
    """A run in image mode updates the vision-language policy (PPO with its critic too),
    checkpoints it and resumes from the checkpoint."""
    from mirage.core.run.loop import execute
    from mirage.core.run.validate import build_config
    from mirage.core.store.run_store import RunStore

    monkeypatch.setenv("MIRAGE_CACHE", str(cache))
    data = {**DATA, "steps": 2, "algorithm": {"name": algorithm, "lr": 1e-3}, "filter": {"name": "none"},
            "validation": {"episodes": 2, "every": 2}}
    db = tmp_path / "runs.duckdb"
    run_id = execute(build_config(data), db, progress=False)
    execute(None, db, progress=False, resume=run_id, extend_to=3)
    store = RunStore(db)
    (run,) = store.list_runs()
    assert run["status"] == "finished"
    norms = store.metrics(run_id, "update/grad_norm")
    assert [step for step, _, _ in norms] == [1, 2, 3] and all(value > 0 for _, _, value in norms)
    if algorithm == "ppo":
        assert all(value > 0 for _, _, value in store.metrics(run_id, "update/critic_grad_norm"))


@pytest.mark.slow  # the command end to end (about 20 s)
def test_preflight_measures_reward_variance_on_pictures(cli, tmp_path):
    """``core preflight`` in image mode rolls out the shipped visual policy (nothing to
    train: an empty cache) and gives its verdict."""
    import os

    code, out, err = cli("preflight", "--env", "frozenlake", "--env-opt", "observation=image",
                         "--prompts", "4", "--group-size", "4",
                         env={**os.environ, "MIRAGE_CACHE": str(tmp_path / "empty-cache")})
    assert code == 0, err
    assert "zero-variance prompts:" in out and "verdict:" in out
    assert not (tmp_path / "empty-cache" / "warmstart").exists()


@pytest.mark.slow  # fine-tunes a reference (about 10 s)
def test_a_templated_reference_learns_from_the_pictures_with_the_policys_processor(cache, monkeypatch):
    """``reference_env_options`` in image mode: the reference is fine-tuned on
    demonstrations encoded with their pictures by the policy's own processor, and it
    scores the batch's prompts with their pictures. (The reference's demonstrations are
    the policy's own, ``demo_noise`` at its default: words the 20-episode policy knows.)"""
    from mirage.plugins.backend_local import reference

    used = []
    original = reference._encoded
    monkeypatch.setattr(reference, "_encoded", lambda tokenizer, pairs, images, processor=None:
                        used.append(processor) or original(tokenizer, pairs, images, processor))
    data = {**DATA, "algorithm": {"kl_coef": 0.5, "lr": 1e-2},
            "model": {"options": {**DATA["model"]["options"], "reference_steps": 3,
                                  "reference_env_options": {"demo_noise": 0.0}}}}
    config = probe_config(data, None)
    plugins = build_plugins()
    session = open_session(config, plugins, validate_config(config, plugins))
    facts = session.backend.prepare(session.env_cls, cache, progress=False)
    assert facts["reference_source"] == "built" and used == [session.backend.processor]
    _, _, batch = measure_step(session, 0)
    turns = first_turns(batch)
    scores = session.backend.reference_logprobs([t.prompt for t in turns], [t.response_ids for t in turns])
    assert scores.shape[0] == len(turns) and torch.isfinite(scores).all()
