"""The memory plan (mirage/core/memory/): shapes counted from a config alone, each
component's arithmetic, what would fit, the sizes --device-memory reads, ``core plan`` and
``core run --plan/--device-memory``, and the estimate against measured CPU peaks."""

from __future__ import annotations

import importlib.util
import json
from dataclasses import replace
from pathlib import Path

import pytest
from shared_builds import build_once, built_data

from mirage.core.errors import ConfigError
from mirage.core.memory.plan import GIB, Lora, Settings, alternatives, estimate, lora_of, parse_size
from mirage.core.memory.run_plan import context_tokens, device_limit, refusal, run_plan, Limit
from mirage.core.memory.shape import QWEN25, ModelShape, shape_of, shape_of_checkpoint, tiny_shape
from mirage.core.plugin_api.manager import build_plugins
from mirage.core.run.validate import build_config

REPO = Path(__file__).resolve().parents[2]
SMALL = ModelShape(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128, vocab=1000)


def component(plan, name):
    return next(c.bytes for c in plan.components if c.name == name)


def test_the_qwen25_shapes_count_their_published_parameters():
    # Qwen2.5 model cards: 0.49B, 3.09B, 7.61B parameters
    for size, published in (("0.5B", 0.494e9), ("3B", 3.086e9), ("7B", 7.616e9)):
        assert QWEN25[size].parameters() == pytest.approx(published, rel=0.005), size


def test_a_shape_counts_what_transformers_builds():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    for tied in (True, False):
        config = Qwen2Config(vocab_size=100, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=tied)
        assert shape_of(config.to_dict()).parameters() == Qwen2ForCausalLM(config).num_parameters()


def test_the_tiny_shape_is_the_local_backends_tiny_model():
    from mirage.plugins.backend_local.model import build_tiny_model
    from mirage.plugins.backend_local.options import LocalOptions
    from mirage.core.memory.shape import TINY_VOCAB

    model = build_tiny_model(LocalOptions(hidden=32, layers=2, heads=4), TINY_VOCAB, 0, 1, 2)
    assert tiny_shape(32, 2, 4).parameters() == model.num_parameters()


def test_scoring_chunks_shrink_to_keep_one_chunks_logits_within_the_budget():
    """The local backend and the plan share one rule: 128 rows for a small vocabulary,
    fewer for a real model's (Qwen2.5's 151,936 words at 256 tokens: 20 GiB in 128 rows)."""
    from mirage.core.rl.score_chunks import LOGITS_BUDGET, score_rows

    assert score_rows(256, 100) == 128
    rows = score_rows(256, 151_936)
    assert 1 <= rows < 128 and rows * 256 * 151_936 * 4 <= LOGITS_BUDGET < (rows + 1) * 256 * 151_936 * 4
    assert score_rows(10**9, 10**9) == 1


def test_lora_parameters_are_rank_times_in_plus_out_per_adapted_projection():
    assert SMALL.lora_parameters(1, ("q_proj",)) == 2 * (64 + 64)
    assert SMALL.lora_parameters(2, ("k_proj", "down_proj")) == 2 * 2 * ((64 + 32) + (128 + 64))
    with pytest.raises(ConfigError, match="lm_head.*valid: q_proj"):
        SMALL.lora_parameters(1, ("lm_head",))


def test_the_components_follow_their_formulas():
    s = Settings(micro_batch=4, rollout_rows=8, context_tokens=20, response_tokens=12, reference=True)
    plan = estimate(SMALL, s)
    p = SMALL.parameters()
    assert component(plan, "weights") == 4 * p
    assert component(plan, "gradients") == 4 * p
    assert component(plan, "optimizer") == 8 * p  # AdamW: two float32 states
    assert component(plan, "reference") == 4 * p  # a full frozen copy
    # P x G sequences x (context + response) x layers x 2 x kv heads x head dim x 4 bytes
    assert component(plan, "kv cache") == 8 * 32 * 2 * 2 * 2 * 16 * 4
    assert plan.peak == max(plan.phase_total("update"), plan.phase_total("rollout"))
    half = estimate(SMALL, replace(s, dtype="bfloat16"))
    assert component(half, "kv cache") == component(plan, "kv cache") / 2


def test_lora_trains_only_the_adapters_and_the_reference_is_no_copy():
    s = Settings(micro_batch=4, context_tokens=20, reference=True, critic=True)
    plan = estimate(SMALL, replace(s, lora=Lora(4)))
    adapters = SMALL.lora_parameters(4)
    assert component(plan, "gradients") == 4 * adapters
    assert component(plan, "optimizer") == 8 * adapters
    assert component(plan, "reference") == 0
    full = estimate(SMALL, s)
    assert component(plan, "critic") < component(full, "critic")


def test_fsdp_divides_gradients_and_optimizer_state_by_the_ranks():
    s = Settings(micro_batch=4, context_tokens=20)
    one, four = estimate(SMALL, s), estimate(SMALL, replace(s, fsdp=True, ranks=4))
    assert component(four, "gradients") == component(one, "gradients") / 4
    assert component(four, "optimizer") == component(one, "optimizer") / 4
    assert component(four, "weight shards") == component(one, "weights") / 4  # beside the full replica


def test_fsdp_with_lora_shards_the_base_and_the_adapters_beside_the_replica():
    s = Settings(micro_batch=4, context_tokens=20, lora=Lora(4))
    one, four = estimate(SMALL, s), estimate(SMALL, replace(s, fsdp=True, ranks=4))
    adapters = SMALL.lora_parameters(4)
    assert component(four, "weight shards") == 4 * (SMALL.parameters() + adapters) / 4
    assert component(four, "gradients") == 4 * adapters / 4 and component(four, "optimizer") == 8 * adapters / 4
    critic = estimate(SMALL, replace(s, fsdp=True, ranks=4, critic=True))  # its adapter is copied too, frozen
    assert component(critic, "weight shards") == 4 * (SMALL.parameters() + 2 * adapters) / 4
    assert four.peak > one.peak  # the base's shards outweigh the adapters' state they save


def test_gradient_checkpointing_keeps_each_layers_input_only():
    s = Settings(micro_batch=8, context_tokens=100, response_tokens=20)
    deep = replace(SMALL, layers=12)
    assert component(estimate(deep, replace(s, gradient_checkpointing=True)), "activations") < \
        component(estimate(deep, s), "activations") / 2


def test_a_bfloat16_sampling_copy_costs_2_bytes_a_parameter_in_every_phase():
    s = Settings(micro_batch=4, rollout_rows=8, context_tokens=20, response_tokens=12)
    plain, sampled = estimate(SMALL, s), estimate(SMALL, replace(s, sampling_copy=True))
    assert "sampling copy" not in {c.name for c in plain.components}
    assert component(sampled, "sampling copy") == 2 * SMALL.parameters()
    assert sampled.peak == plain.peak + 2 * SMALL.parameters()
    config = build_config({"model": {"options": {"sampling_weights": "bfloat16"}}})
    assert run_plan(config, build_plugins().registries).settings.sampling_copy


def test_float64_cross_scoring_costs_8_bytes_a_parameter_while_scoring():
    s = Settings(micro_batch=4, rollout_rows=8, context_tokens=20, response_tokens=12)
    plain, widened = estimate(SMALL, s), estimate(SMALL, replace(s, float64_copy=True))
    assert "float64 copy" not in {c.name for c in plain.components}
    copy = next(c for c in widened.components if c.name == "float64 copy")
    assert copy.bytes == 8 * SMALL.parameters() and copy.phase == "score"
    config = build_config({"model": {"options": {"cross_score_dtype": "float64"}}})
    assert run_plan(config, build_plugins().registries).settings.float64_copy


def test_what_would_fit_names_only_settings_that_bring_it_under():
    shape, s = QWEN25["0.5B"], Settings(context_tokens=216, response_tokens=40, dtype="bfloat16")
    limit = 80e9
    assert estimate(shape, s).peak > limit  # the default micro-batch of 128 rows is the CPU's
    fits = alternatives(shape, s, limit)
    assert any("micro_batch_size=" in text for text in fits)
    micro = int(next(t for t in fits if "micro_batch_size=" in t).split("=")[1])
    assert estimate(shape, replace(s, micro_batch=micro)).peak <= limit
    assert estimate(shape, replace(s, micro_batch=micro * 2)).peak > limit


def test_sizes():
    assert parse_size("24GB") == 24e9
    assert parse_size("22.5GiB") == 22.5 * GIB
    assert parse_size("80g") == 80e9
    assert parse_size("1024") == 1024
    for bad in ("lots", "", "-3GB", "0", "12 parsecs", "GB"):
        assert parse_size(bad) is None, bad
    with pytest.raises(ConfigError, match="'lots' is not a size"):
        device_limit("lots", "cpu")
    assert device_limit(None, "cpu") is None


def test_model_lora_is_read_from_the_config_section():
    config = build_config({"model": {"lora": {"rank": 8}}})
    assert lora_of(config.model) == Lora(8)
    config = build_config({"model": {"lora": {"rank": 4, "target_modules": ["q_proj", "v_proj"]}}})
    assert lora_of(config.model) == Lora(4, ("q_proj", "v_proj"))
    assert lora_of(build_config({}).model) is None


def test_a_run_config_plans_its_model_critic_and_reference(tmp_path):
    from checkpoints import save_text_checkpoint

    registries = build_plugins().registries
    path = save_text_checkpoint(tmp_path / "ckpt")
    config = build_config({"model": {"path": str(path)}, "algorithm": {"name": "ppo", "kl_coef": 0.1}})
    plan = run_plan(config, registries)
    assert plan.shape == shape_of(json.loads((path / "config.json").read_text()))
    assert plan.settings.critic and plan.settings.reference
    assert plan.settings.context_tokens == context_tokens(config) == 216  # the instruction is shown
    tiny = run_plan(build_config({"model": {"options": {"hidden": 32, "layers": 2, "heads": 2}}}), registries)
    assert tiny.shape == tiny_shape(32, 2, 2) and tiny.settings.context_tokens == 128
    with pytest.raises(ConfigError, match="no config.json"):
        shape_of_checkpoint(str(tmp_path))


def test_a_refusal_says_when_scoring_alone_is_over():
    # the float32 weights alone (2 GB) pass a 1 GB card: no training setting helps
    plan = estimate(QWEN25["0.5B"], Settings(context_tokens=216, response_tokens=40, dtype="bfloat16"))
    line = refusal(plan, Limit(1e9, "--device-memory 1GB"))
    assert "none of LoRA, gradient checkpointing" in line and "scoring alone needs" in line


def test_qwen25_05b_fits_a_24gb_card_at_a_smaller_micro_batch():
    # RAGEN #92: scoring in chunks bounded by their logits leaves the update to plan for
    plan = estimate(QWEN25["0.5B"], Settings(context_tokens=216, response_tokens=40, dtype="bfloat16"))
    line = refusal(plan, Limit(24e9, "--device-memory 24GB"))
    assert "would fit:" in line and "micro" in line
    assert plan.phase_total("score") < 24e9


def test_a_refusal_is_one_line_naming_what_fits():
    plan = estimate(QWEN25["0.5B"], Settings(context_tokens=216, response_tokens=40, dtype="bfloat16"))
    line = refusal(plan, Limit(80e9, "--device-memory 80GB"))
    assert "\n" not in line and "above --device-memory 80GB" in line and "would fit:" in line
    assert refusal(plan, Limit(10 * plan.peak, "x")) is None


# ------------------------------------------------------------------ the commands

def test_core_plan_prints_a_table_per_component_and_the_total(cli):
    code, out, err = cli("plan", "--env", "frozenlake", "--set", "model.options.hidden=32",
                         "--set", "model.options.layers=2", "--device-memory", "80GB")
    assert code == 0, err
    for name in ("weights", "gradients", "optimizer", "activations", "kv cache", "total per rank"):
        assert name in out
    assert "GiB: fits" in out


@pytest.mark.parametrize("args, message", [
    (["--device-memory", "lots"], "--device-memory 'lots' is not a size"),
    (["--device-memory", "1GB"], "would fit: model.options.gradient_checkpointing=true; or algorithm.micro_batch_size="),
])
def test_core_run_refuses_before_any_work(cli, tmp_path, args, message):
    db = tmp_path / "runs.duckdb"
    code, _, err = cli("run", "--env", "frozenlake", "--steps", "1", "--db", db, *args)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not db.exists() and not any(tmp_path.iterdir())


def test_core_run_plan_prints_the_plan_first(cli, tmp_path):
    db = tmp_path / "runs.duckdb"
    code, out, _ = cli("run", "--env", "frozenlake", "--db", db, "--plan", "--device-memory", "1MB")
    assert code == 2 and "total per rank" in out and not db.exists()


# ------------------------------------------------------------------ measured

MEASURED = ["small", "wide-reference", "deep-critic", "small-long-response"]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_memory", REPO / "bench" / "memory.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def measured_peaks(tmp_path_factory) -> dict[str, dict]:
    """bench/memory.py's results for MEASURED, measured once per test run (one process
    imports torch once and forks a child per case; the xdist workers share the results)."""
    built = build_once(tmp_path_factory, "memory-plan-peaks",
                       lambda _: {r["case"]: r for r in _bench().run_cases(MEASURED)})
    return built_data(built)


@pytest.mark.slow
@pytest.mark.parametrize("case", MEASURED)
def test_the_plan_is_within_20_percent_of_the_measured_cpu_peak(case, measured_peaks):
    result = measured_peaks[case]
    assert result["parameters"] == result["planned_parameters"]
    assert 0.8 <= result["ratio"] <= 1.2, result


def test_core_plan_reads_a_directory_holding_only_config_json(cli, tmp_path):
    shape = QWEN25["0.5B"]
    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "qwen2", "hidden_size": shape.hidden, "num_hidden_layers": shape.layers,
        "num_attention_heads": shape.heads, "num_key_value_heads": shape.kv_heads,
        "intermediate_size": shape.intermediate, "vocab_size": shape.vocab, "tie_word_embeddings": True}))
    code, out, err = cli("plan", "--model", tmp_path, "--set", "model.lora.rank=16", "--set", "model.dtype=bfloat16")
    assert code == 0, err
    assert "494.0M parameters" in out and "the base, adapters disabled" not in out  # no KL: no reference
    code, _, err = cli("plan", "--model", tmp_path / "absent")
    assert code == 2 and "does not exist" in err


def test_the_vllm_engines_share_is_not_the_trainers(cli):
    code, out, err = cli("plan", "--env", "frozenlake", "--backend", "vllm", "--set", "model.options.gpu_memory=0.5",
                         "--device-memory", "2GB")
    assert code == 2 and "less the vLLM engine's share 0.5 (0.9 GiB)" in err, err
    code, out, err = cli("plan", "--env", "frozenlake", "--device-memory", "2GB")
    assert code == 0 and "GiB: fits" in out, err


def test_core_preflight_plan_prints_the_plan_before_its_batch(cli):
    code, out, err = cli("preflight", "--env", "frozenlake", "--prompts", "2", "--group-size", "2", "--plan")
    assert code == 0, err
    assert out.index("total per rank") < out.index("Std(RV)/Mean(RV)")
