"""The warm-started policies shipped with the package (mirage/plugins/backend_local/policies):
each is what today's code would build under its cache key, a run at the default settings
loads it instead of training, and runs of every seed share one warm start."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from mirage.core.plugin_api.manager import build_plugins
from mirage.core.run.loop import execute
from mirage.core.run.validate import build_config
from mirage.core.store.run_store import RunStore
from mirage.plugins.backend_local import shipped
from mirage.plugins.backend_local.options import WARM_START_SHAPE, LocalOptions
from mirage.plugins.backend_local.warmstart import cache_key, warm_start

REBUILD_MINUTES = {"sokoban": 16, "frozenlake": 11}  # one torch thread, this machine's kind


def rebuild_command(name: str) -> str:
    env, observation = shipped.split_name(name)
    shown = "" if observation == "text" else f" --set env.options.observation={observation}"
    return f"core warmstart {env}{shown} --set threads=1 --rebuild"


def default_key(name: str) -> str:
    """The cache key of shipped policy ``name``'s warm start (``ENV`` or ``ENV-image``) at
    the built-in defaults, by today's code."""
    env, observation = shipped.split_name(name)
    options = {} if observation == "text" else {"observation": observation}
    config = build_config({"env": {"name": env, "options": options}})
    return cache_key(config, LocalOptions(**config.model.options),
                     build_plugins().registries.envs.get(env))


def test_the_main_job_and_the_studies_environments_ship_a_policy():
    assert {"sokoban", "frozenlake", "sokoban-image", "frozenlake-image"} <= set(shipped.names())


@pytest.mark.parametrize("env", shipped.names())
def test_a_shipped_policy_is_what_todays_code_builds(env):
    """Fails when the code that builds a warm start (demonstrations and their phrasing,
    tokenizer, model shape, the local backend's options) no longer builds this policy
    under its key: a run would then train its own instead of loading it."""
    record = shipped.record(env)
    built_as = record["warmstart_key"]
    assert default_key(env) == built_as, (
        f"the shipped {env!r} policy is stale: today's code builds {env}'s default warm start "
        f"under cache key {default_key(env)}, the shipped one was built under {built_as} (at "
        f"{record['provenance']['commit']}). Rebuild it with `{rebuild_command(env)}` (about {REBUILD_MINUTES.get(env, 15)} minutes on a 2-core "
        f"machine) and commit mirage/plugins/backend_local/policies/{env}/")


@pytest.mark.parametrize("env", shipped.names())
def test_a_shipped_policy_records_where_it_came_from_and_how_good_it_is(env):
    record = shipped.record(env)
    provenance = record["provenance"]
    assert provenance["command"].startswith(f"core warmstart {shipped.split_name(env)[0]}")
    assert provenance["commit"] and provenance["built_at"]
    # built at the defaults: every setting it recorded (options added since, such as the KL
    # reference's, play no part in a warm start) and every one that shapes a warm start
    recorded, defaults = provenance["settings"]["model_options"], LocalOptions().model_dump(mode="json")
    assert set(WARM_START_SHAPE) <= set(recorded) <= set(defaults)
    assert recorded == {name: defaults[name] for name in recorded}
    quality = provenance["quality"]
    assert 0 < quality["validation_success"] <= 1 and quality["validation_episodes"] >= 128
    # the warm start reads its prompt: first-turn retrieval far above chance
    assert quality["first_turn_retrieval"] > 4 * quality["retrieval_chance"]
    assert 0 < record["warmstart_demo_success"] <= 1 and record["warmstart_final_loss"] < 1
    weights = shipped.POLICIES / env / "model.safetensors"
    assert weights.stat().st_size < 8 * 2**20  # a few MB each


def test_a_changed_demonstration_phrasing_makes_the_shipped_policy_stale(monkeypatch):
    """The staleness check sees the demonstrations themselves, not only settings: one
    reworded FrozenLake template gives another cache key."""
    from mirage.envs import frozenlake

    reworded = [frozenlake._TEMPLATES[0].replace("I am at", "I stand at"), *frozenlake._TEMPLATES[1:]]
    monkeypatch.setattr(frozenlake._Demo, "templates", reworded)
    assert default_key("frozenlake") != shipped.record("frozenlake")["warmstart_key"]


def test_a_redrawn_picture_makes_the_shipped_image_policy_stale(monkeypatch):
    """The image policy's key sees the pictures it learned from: one recoloured tile (the
    words of the demonstrations unchanged) gives another cache key."""
    from mirage.envs import frozenlake

    assert default_key("frozenlake-image") == shipped.record("frozenlake-image")["warmstart_key"]
    tiles = dict(frozenlake.FROZENLAKE_TILES)
    tiles["_"] = 255 - tiles["_"]
    monkeypatch.setattr(frozenlake, "FROZENLAKE_TILES", tiles)
    assert default_key("frozenlake-image") != shipped.record("frozenlake-image")["warmstart_key"]


@pytest.mark.parametrize("name", ["sokoban", "frozenlake-image"])
def test_a_run_at_the_defaults_loads_the_shipped_policy(tmp_path, monkeypatch, name):
    """With an empty cache, the default warm start (Sokoban's; visual FrozenLake's, a
    vision-language model) comes from the package: the weights the run starts from are
    the shipped ones, and nothing is trained or cached."""
    cache = tmp_path / "empty-cache"
    monkeypatch.setenv("MIRAGE_CACHE", str(cache))
    env, observation = shipped.split_name(name)
    config = build_config({"env": {"name": env, "options": {} if observation == "text" else {"observation": observation}}})
    env_cls = build_plugins().registries.envs.get(env)
    model, _, facts = warm_start(config, LocalOptions(**config.model.options), env_cls, cache,
                                 progress=False)
    assert facts["warmstart_source"] == "shipped" and facts["warmstart_cached"] is True
    assert type(model).__name__ == ("Qwen2ForCausalLM" if observation == "text" else "LlavaForConditionalGeneration")
    saved = load_file(shipped.POLICIES / name / "model.safetensors")
    model.save_pretrained(tmp_path / "as-loaded")  # saved names (LLaVA's differ from its state_dict's)
    state = load_file(tmp_path / "as-loaded" / "model.safetensors")
    assert saved.keys() == state.keys()
    assert all(torch.equal(state[name], value) for name, value in saved.items())
    assert not (cache / "warmstart").exists()


def test_a_build_says_why_how_long_and_how_to_avoid_it(tiny_config, tmp_path, capsys):
    config = build_config(tiny_config())
    env_cls = build_plugins().registries.envs.get("frozenlake")
    warm_start(config, LocalOptions(**config.model.options), env_cls, tmp_path, progress=True)
    said = capsys.readouterr().err
    assert "the 'frozenlake' policy shipped with the package was built at other settings" in said
    assert "to load the shipped one instead, leave" in said and "model.options at their defaults" in said
    assert "warm start: about " in said and " on this machine (15 steps)" in said


def test_without_a_shipped_policy_a_build_says_how_to_have_it_ready(tiny_config, tmp_path, capsys):
    config = build_config(tiny_config() | {"env": {"name": "countdown"}})
    env_cls = build_plugins().registries.envs.get("countdown")
    warm_start(config, LocalOptions(**config.model.options), env_cls, tmp_path, progress=True)
    said = capsys.readouterr().err
    assert f"no policy ships for 'countdown' (shipped: {', '.join(shipped.names())})" in said
    assert "build it once with `core warmstart countdown`" in said


def test_run_seeds_share_one_warm_start(tiny_config, tmp_path, monkeypatch):
    """Runs of seeds 0-2 at the default warm-start seed: the first builds the warm start,
    the other two load it from the cache; one cache entry."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("MIRAGE_CACHE", str(cache))
    db = tmp_path / "runs.duckdb"
    for seed in range(3):
        execute(build_config(tiny_config() | {"seed": seed, "steps": 1}), db, progress=False)
    store = RunStore(db)
    sources = []
    for run in store.list_runs():
        (backend,) = [e for e in store.events(run["run_id"]) if e["kind"] == "backend"]
        sources.append(json.loads(backend["message"])["warmstart_source"])
    assert sources == ["built", "cache", "cache"]
    assert len(list((cache / "warmstart").iterdir())) == 1


def test_an_image_policy_ships_under_its_own_name():
    """Image observations warm-start a vision-language policy of their own, shipped beside
    the text one as ``ENV-image``."""
    assert shipped.policy_name("frozenlake") == "frozenlake"
    assert shipped.policy_name("frozenlake", "image") == "frozenlake-image"
    assert shipped.split_name("frozenlake-image") == ("frozenlake", "image")
    assert shipped.split_name("sokoban") == ("sokoban", "text")
    image = build_config({"env": {"name": "sokoban", "options": {"observation": "image"}}})
    assert shipped.policy_of(image) == "sokoban-image"
    assert default_key("sokoban-image") != default_key("sokoban")
