"""The local backend's warm-start cache and checkpoint loading keep the tokenizer intact.

A cached warm start, a resumed checkpoint and ``--model`` all reload a saved directory
through ``model.load_pretrained``; the policy must see exactly the token ids it was
trained on.
"""

from __future__ import annotations

import pytest
import torch

from mirage.core.config.run_config import EnvConfig
from mirage.core.rl.episode import build_context, format_response, start_episode
from mirage.core.run.validate import build_config
from mirage.envs.frozenlake import FrozenLake
from mirage.plugins.backend_local.model import load_pretrained
from mirage.plugins.backend_local.options import LocalOptions
from mirage.plugins.backend_local.warmstart import cache_key, warm_start


def local_options(config) -> LocalOptions:
    """The local backend's options of ``config`` (``model.options``)."""
    return LocalOptions(**config.model.options)


def key(config) -> str:
    """The warm start's cache key for ``config`` on FrozenLake."""
    return cache_key(config, local_options(config), FrozenLake)


def sample_texts() -> list[str]:
    env = FrozenLake()
    cfg = EnvConfig(name="frozenlake")
    state = start_episode(env, 3, cfg)
    return [
        build_context(state, cfg),
        format_response("I am at row 1 col 2 , the goal is down .", ["Down", "Right"]),
        "Up || Left </answer> unknownword",
    ]


@pytest.fixture(scope="module")
def built_and_cached(tmp_path_factory, tiny_config):
    data = tiny_config()
    data["model"]["options"].update(warmstart_episodes=10, warmstart_steps=2)
    config = build_config(data)
    options = local_options(config)
    cache = tmp_path_factory.mktemp("warmstart-cache")
    built = warm_start(config, options, FrozenLake, cache)
    cached = warm_start(config, options, FrozenLake, cache)
    return built, cached


def test_second_warm_start_comes_from_the_cache(built_and_cached):
    (_, _, built_facts), (_, _, cached_facts) = built_and_cached
    assert (built_facts["warmstart_cached"], built_facts["warmstart_source"]) == (False, "built")
    assert (cached_facts["warmstart_cached"], cached_facts["warmstart_source"]) == (True, "cache")
    where = {"warmstart_cached", "warmstart_source"}
    assert {k: v for k, v in cached_facts.items() if k not in where} == {
        k: v for k, v in built_facts.items() if k not in where
    }


def test_cached_weights_equal_the_built_ones(built_and_cached):
    (built_model, _, _), (cached_model, _, _) = built_and_cached
    built, cached = built_model.state_dict(), cached_model.state_dict()
    assert built.keys() == cached.keys()
    assert all(torch.equal(built[k], cached[k]) for k in built)


@pytest.mark.parametrize("index", range(3))
def test_cached_tokenizer_encodes_like_the_built_one(built_and_cached, index):
    (_, built, _), (_, cached, _) = built_and_cached
    text = sample_texts()[index]
    ids = built.encode(text, add_special_tokens=False)
    assert cached.encode(text, add_special_tokens=False) == ids
    assert cached.decode(ids, skip_special_tokens=True) == built.decode(ids, skip_special_tokens=True)
    assert (cached.pad_token_id, cached.eos_token_id) == (built.pad_token_id, built.eos_token_id)


def test_built_tokenizer_round_trips_protocol_text(built_and_cached):
    (_, built, _), _ = built_and_cached
    text = format_response("Goal at row 3 col 2 .", ["Down", "Right"])  # words every prompt has
    ids = built.encode(text, add_special_tokens=False)
    assert built.unk_token_id not in ids
    assert built.decode(ids, skip_special_tokens=True) == text


def test_load_pretrained_of_a_saved_directory_keeps_the_tokenizer(built_and_cached, tmp_path):
    (model, tokenizer, _), _ = built_and_cached
    model.save_pretrained(tmp_path / "policy")
    tokenizer.save_pretrained(tmp_path / "policy")
    _, loaded = load_pretrained(str(tmp_path / "policy"))
    for text in sample_texts():
        assert loaded.encode(text, add_special_tokens=False) == tokenizer.encode(
            text, add_special_tokens=False)


def test_warmstart_env_options_share_one_warm_start_across_a_slip_sweep(tiny_config):
    """Cells of a stochasticity sweep that set ``model.warmstart_env_options: {slip: 0}``
    start from the deterministic lake's warm start: the same cache entry as a slip-0 run,
    and demonstrations collected without slip."""
    from mirage.plugins.backend_local.warmstart import demo_options

    def config(slip: float, override: dict) -> object:
        data = tiny_config()
        data["env"]["options"] = {"slip": slip}
        data["model"]["options"]["warmstart_env_options"] = override
        return build_config(data)

    plain = config(0.0, {})
    swept = [config(slip, {"slip": 0.0}) for slip in (0.2, 0.8)]
    assert demo_options(swept[0], local_options(swept[0]), FrozenLake) == {}
    assert {key(c) for c in swept} == {key(plain)}
    own = config(0.2, {})
    assert demo_options(own, local_options(own), FrozenLake) == {"slip": 0.2}
    assert key(own) != key(plain)


_UNSET = object()


def test_warmstart_seed_shares_one_warm_start_across_run_seeds(tiny_config):
    """By default every run seed starts from one policy (``model.options.warmstart_seed``
    0: one cache entry, the one a run of seed 0 builds); another value names another
    warm start; None gives each run seed its own, as runs stored before the default did."""
    from mirage.plugins.backend_local.warmstart import warmstart_seed

    def config(seed: int, shared=_UNSET) -> object:
        data = tiny_config()
        data["env"] = {"name": "frozenlake"}
        data["seed"] = seed
        if shared is not _UNSET:
            data["model"]["options"]["warmstart_seed"] = shared
        return build_config(data)

    default = [config(seed) for seed in range(5)]
    assert [warmstart_seed(c, local_options(c)) for c in default] == [0] * 5
    assert {key(c) for c in default} == {key(config(3, 0))} == {key(config(0, None))}
    assert key(config(0, 7)) == key(config(7, None)) != key(config(0))
    assert key(config(1, None)) != key(config(0, None))


def test_models_loaded_in_two_threads_at_once_are_whole(built_and_cached, tmp_path):
    """A thread-runner sweep loads cells' models concurrently. transformers' loading
    switches are process-wide: without the backend's lock most loads in a two-thread
    race came out with meta (empty) parameters."""
    import threading

    (model, tokenizer, _), _ = built_and_cached
    model.save_pretrained(tmp_path / "policy")
    tokenizer.save_pretrained(tmp_path / "policy")
    broken = tmp_path / "broken"  # fails while loading, after transformers set its switches
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "qwen2"}')
    (broken / "model.safetensors").write_text("not safetensors")
    done = threading.Event()

    def load_broken() -> None:
        while not done.is_set():
            try:
                load_pretrained(str(broken))
            except Exception:  # noqa: BLE001 - it is meant to fail
                pass

    other = threading.Thread(target=load_broken)
    other.start()
    try:
        loaded = [load_pretrained(str(tmp_path / "policy"))[0] for _ in range(10)]
    finally:
        done.set()
        other.join()
    assert not [m for m in loaded if any(p.is_meta for p in m.parameters())]
