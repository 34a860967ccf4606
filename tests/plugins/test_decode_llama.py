"""The lean decode loop and the shared-cache cross-scoring on the Llama architecture
(LlamaForCausalLM: SmolLM2 and Llama checkpoints), checked as test_decode.py checks them on
Qwen2: greedy, sampled and per-row seeded samples equal transformers' ``model.generate``
token for token, and cross-scoring with each context's cache reused equals scoring every
pair in full. The models are random tiny Llamas, with and without projection biases,
grouped-query attention and each rope type the loop accepts; a rope type it does not
reproduce falls back to ``generate`` with a reason."""

from __future__ import annotations

import random

import pytest
import torch
from test_decode import CASES, EOS, PAD, VOCAB, check_cross_scoring, grouped_contexts, plain
from transformers import LlamaConfig, LlamaForCausalLM

from mirage.plugins.backend_local import cross_scoring, decode

ROPE = {
    "default": None,
    "linear": {"rope_type": "linear", "factor": 2.0},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 64},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64},
}


def tiny_llama(seed: int, *, kv_heads: int = 4, bias: bool = False, rope: str = "default") -> LlamaForCausalLM:
    """A random tiny Llama whose end token is likely enough that rows stop at different steps."""
    torch.manual_seed(seed)
    extra = {"rope_parameters": {"rope_theta": 10000.0, **ROPE[rope]}} if ROPE[rope] else {}
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=kv_heads, max_position_embeddings=256, tie_word_embeddings=True,
        attention_bias=bias, mlp_bias=bias, pad_token_id=PAD, eos_token_id=EOS, bos_token_id=2, **extra,
    )).eval()
    with torch.no_grad():
        model.model.embed_tokens.weight[EOS] *= 2.0
    return model


def test_the_loop_serves_llama_and_refuses_the_rope_types_it_does_not_reproduce() -> None:
    assert decode.unsupported(tiny_llama(0)) is None
    for rope in ROPE:
        model = tiny_llama(0, rope=rope)
        assert model.config.rope_parameters["rope_type"] == rope
        assert decode.unsupported(model) is None
    dynamic = tiny_llama(0)
    dynamic.config.rope_parameters = {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}
    assert "rope type 'dynamic'" in decode.unsupported(dynamic)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("kv_heads,bias", [(4, False), (2, False), (2, True)], ids=["mha", "gqa", "gqa-bias"])
def test_lean_loop_samples_what_generate_samples_on_llama(case: str, kv_heads: int, bias: bool) -> None:
    model = tiny_llama(0, kv_heads=kv_heads, bias=bias)
    contexts = grouped_contexts(1, prompts=5, group=6)
    torch.manual_seed(7)
    expected = plain(model, contexts, **CASES[case])
    torch.manual_seed(7)
    got = decode.generate(model, contexts, eos=EOS, **CASES[case])
    assert got == expected
    if case == "sampled":  # rows stopped at different steps: the compaction ran
        assert len({len(row) for row in got}) > 3 and any(row[-1] == EOS for row in got)


@pytest.mark.parametrize("rope", [r for r in ROPE if r != "default"])
@pytest.mark.parametrize("case", ["sampled", "greedy"])
def test_lean_loop_samples_what_generate_samples_with_scaled_rope(rope: str, case: str) -> None:
    """Contexts up to 60 tokens and 24 new: positions pass llama3's and yarn's original 64."""
    model = tiny_llama(1, kv_heads=2, rope=rope)
    rng = random.Random(3)
    distinct = [[rng.randrange(3, VOCAB) for _ in range(n)] for n in (12, 45, 60)]
    contexts = [list(c) for c in distinct for _ in range(3)]
    torch.manual_seed(5)
    expected = plain(model, contexts, **CASES[case])
    torch.manual_seed(5)
    assert decode.generate(model, contexts, eos=EOS, **CASES[case]) == expected


@pytest.mark.parametrize("sampling", ["sampled", "warped"])
def test_seeded_rows_sample_what_generate_samples_for_each_row_alone(sampling: str) -> None:
    """Per-row seeds: row r equals ``model.generate`` of its context alone after seeding the
    global generator with its seed (what LocalBackend.generate_plain does)."""
    model = tiny_llama(2, kv_heads=2)
    contexts = grouped_contexts(4, prompts=3, group=3)
    seeds = [100 + row for row in range(len(contexts))]
    got = decode.generate(model, contexts, eos=EOS, seeds=seeds, **CASES[sampling])
    expected = []
    for context, seed in zip(contexts, seeds):
        torch.manual_seed(seed)
        expected += plain(model, [context], **CASES[sampling])
    assert got == expected
    assert len({len(row) for row in got}) > 2


@pytest.mark.parametrize("nodes", [128, 5])
@pytest.mark.parametrize("kv_heads,bias", [(4, False), (2, True)], ids=["mha", "gqa-bias"])
def test_cross_scoring_equals_scoring_every_pair_in_full_on_llama(monkeypatch, nodes: int, kv_heads: int,
                                                                   bias: bool) -> None:
    monkeypatch.setattr(cross_scoring, "NODES", nodes)
    check_cross_scoring(tiny_llama(8, kv_heads=kv_heads, bias=bias), atol=1e-5)
