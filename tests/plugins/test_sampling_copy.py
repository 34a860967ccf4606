"""The local backend's bfloat16 sampling copy (``model.options.sampling_weights: bfloat16``,
mirage/plugins/backend_local/sampler.py): rollouts sample from the policy's weights cast to
bfloat16 (LoRA merged in), the copy is never stale (after an update, a load or a warm
start's own steps it holds the policy's current weights), and the update reads only the
float32 policy's log-probs."""

from __future__ import annotations

import pytest
import torch

from mirage.core.plugin_api.manager import build_plugins
from mirage.core.rl.batch import make_batch
from mirage.core.run.loop import cache_dir, open_session
from mirage.core.run.scoring import score_batch
from mirage.core.run.stages import rollout
from mirage.core.run.validate import build_config, validate_config
from mirage.plugins.backend_local import packed_linear, pretrained_warmstart
from mirage.plugins.backend_local.backend import LocalBackend

CONTEXTS = [[5, 6, 7], [5, 8]]
BIG_LR = 0.05  # an AdamW step moves each weight by about this: every bfloat16 value changes


def session_of(tiny_config, *, lora=None, **sections):
    data = tiny_config()
    data["model"]["options"]["sampling_weights"] = "bfloat16"
    if lora:
        data["model"]["lora"] = lora
    data |= {"filter": {"name": "none"}, "diagnostics": {"names": []}, "algorithm": {"lr": BIG_LR}}
    for name, values in sections.items():
        data[name] = data.get(name, {}) | values
    config = build_config(data)
    plugins = build_plugins()
    session = open_session(config, plugins, validate_config(config, plugins))
    session.backend.prepare(session.env_cls, cache_dir(), progress=False)
    return session


def sampled_weights(backend: LocalBackend) -> dict[str, torch.Tensor]:
    """The weights the next sample is drawn with, cloned (packed ones recovered from their
    packed layout: what the copy multiplies by)."""
    backend.sampling_model()  # brought up to date
    return {name: tensor.clone() for name, tensor in backend.sampling_copy.weights().items()}


def assert_holds_the_policy_cast(backend: LocalBackend) -> dict[str, torch.Tensor]:
    sampled, policy = sampled_weights(backend), backend.merged_weights()
    assert sampled.keys() == policy.keys()
    for name, tensor in policy.items():
        assert torch.equal(sampled[name], tensor.to(sampled[name].dtype)), name
    return sampled


def take_a_step(backend: LocalBackend, gradient: float) -> None:
    """One optimizer step with every trained gradient set to ``gradient``."""
    for parameter in backend.trained():
        parameter.grad = torch.full_like(parameter, gradient)
    backend.optimizer_step(max_grad_norm=1e9)


def moved(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor]) -> set[str]:
    return {name for name in before if not torch.equal(before[name], after[name])}


def test_the_copy_is_bfloat16_with_float32_buffers_and_follows_every_update(tiny_config):
    backend = session_of(tiny_config).backend
    assert backend.sampling_copy is None  # made at the first sample
    assert backend.generate(CONTEXTS, temperature=1.0, greedy=False, max_new_tokens=4)
    copy = backend.sampling_copy.model
    assert copy is not backend.model
    assert {p.dtype for p in copy.parameters()} == {torch.bfloat16}
    assert {b.dtype for b in copy.buffers()} == {torch.float32}  # rotary frequencies keep their precision
    assert all(not p.requires_grad for p in copy.parameters())
    started = assert_holds_the_policy_cast(backend)
    take_a_step(backend, 0.01)
    assert moved(started, assert_holds_the_policy_cast(backend))


def test_the_update_reads_the_float32_policys_log_probs(tiny_config):
    session = session_of(tiny_config, rollout={"max_new_tokens": 8}, env={"max_turns": 1})
    torch.manual_seed(0)
    batch = make_batch(1, [11, 12], 2, temperature=1.0)
    rollout(session, batch, "rollout")  # sampled by the copy
    score_batch(session, batch)  # what the update reads as old log-probs
    turns = [turn for t in batch.trajectories for turn in t.turns if turn.response_ids]
    scored = session.backend.score([t.prompt for t in turns[:4]], [t.response_ids for t in turns[:4]])
    for row, turn in enumerate(turns[:4]):
        mask = scored.mask[row].bool()
        assert turn.old_logprobs == pytest.approx(scored.logprobs[row][mask].tolist(), abs=1e-6)
    # the policy itself was never cast
    assert {p.dtype for p in session.backend.model.parameters()} == {torch.float32}


def test_a_load_brings_the_copy_back_to_the_loaded_weights(tiny_config, tmp_path):
    backend = session_of(tiny_config).backend
    saved = assert_holds_the_policy_cast(backend)
    backend.save(tmp_path / "checkpoint")
    take_a_step(backend, 0.01)
    assert moved(saved, assert_holds_the_policy_cast(backend))
    backend.load(tmp_path / "checkpoint")
    assert not moved(saved, assert_holds_the_policy_cast(backend))


def test_with_lora_the_copy_is_a_plain_model_holding_the_merged_weights(tiny_config):
    backend = session_of(tiny_config, lora={"rank": 4}).backend
    started = assert_holds_the_policy_cast(backend)
    assert not any(".lora_" in name or "base_layer" in name for name in started)
    take_a_step(backend, 0.01)
    changed = moved(started, assert_holds_the_policy_cast(backend))
    assert changed and all(name.rpartition(".")[0].endswith("_proj") for name in changed)  # adapted layers


def test_a_warm_starts_own_steps_reach_the_copy(tiny_config):
    # core warmstart trains the policy with its own optimizer and measures it by sampling
    session = session_of(tiny_config, validation={"episodes": 2}, env={"max_turns": 1},
                         rollout={"max_new_tokens": 8})
    backend = session.backend
    started = assert_holds_the_policy_cast(backend)
    facts = pretrained_warmstart.finetune(session, target_format=1.0, check_every=1, max_steps=1, batch_size=4,
                                          episodes=4, lr=BIG_LR, progress=False)
    assert facts["warmstart_steps"] == 1
    assert moved(started, assert_holds_the_policy_cast(backend))


def test_by_default_the_policy_samples_and_no_copy_is_made(tiny_config):
    data = tiny_config()
    config = build_config(data)
    backend = LocalBackend(config, LocalBackend.Options(**config.model.options))
    backend.prepare(build_plugins().registries.envs.get("frozenlake"), cache_dir(), progress=False)
    assert backend.sampling_model() is backend.model
    backend.generate(CONTEXTS, temperature=1.0, greedy=False, max_new_tokens=4)
    assert backend.sampling_copy is None


def test_the_vllm_backend_refuses_the_local_samplers_option(tiny_config):
    from mirage.plugins.backend_vllm.backend import VLLMBackend

    data = tiny_config()
    data["model"]["options"]["sampling_weights"] = "bfloat16"
    data["model"]["backend"] = "vllm"
    problem = VLLMBackend.config_problem(build_config(data))
    assert problem and "sampling_weights" in problem and "model.dtype" in problem


@pytest.mark.skipif(not packed_linear.available(torch.device("cpu")), reason="no oneDNN bfloat16 on this CPU")
def test_on_a_cpu_the_copys_linear_weights_are_packed_and_multiply_as_the_plain_ones(tiny_config):
    backend = session_of(tiny_config).backend
    backend.generate(CONTEXTS, temperature=1.0, greedy=False, max_new_tokens=2)
    copy = backend.sampling_copy
    assert copy.packed and all(layer.packed is not None for layer in copy.packed)
    policy = backend.merged_weights()
    names = {id(layer): name for name, layer in copy.model.named_modules()}
    for layer in copy.packed:
        plain = policy[names[id(layer)] + ".weight"].to(torch.bfloat16)
        # freed unless another module shares it (the tied embedding)
        assert layer.weight.numel() == 0 or layer.weight.data_ptr() == copy.model.get_input_embeddings().weight.data_ptr()
        for rows in (16, 5):
            x = torch.randn(rows, plain.size(1), dtype=torch.bfloat16)
            assert torch.equal(layer(x), torch.nn.functional.linear(x, plain, layer.bias))
