"""The local backend scores in chunks whose logits fit a budget (mirage/core/rl/score_chunks.py):
smaller chunks give the same scores as one chunk of every row."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from mirage.core.config.presets import TINY
from mirage.core.rl import score_chunks
from mirage.core.run.validate import build_config
from mirage.plugins.backend_local.backend import LocalBackend
from mirage.plugins.backend_local.options import LocalOptions

VOCAB, PAD = 40, 0


def backend() -> LocalBackend:
    policy = LocalBackend(build_config({"env": {"name": "frozenlake"}, **copy.deepcopy(TINY)}), LocalOptions())
    torch.manual_seed(0)
    policy.model = Qwen2ForCausalLM(Qwen2Config(
        vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=64, pad_token_id=PAD, eos_token_id=1))
    policy.tokenizer = SimpleNamespace(pad_token_id=PAD, eos_token_id=1)
    return policy


def test_chunks_bounded_by_their_logits_score_as_one_chunk(monkeypatch):
    generator = torch.Generator().manual_seed(1)
    contexts = [torch.randint(2, VOCAB, (3 + i % 4,), generator=generator).tolist() for i in range(9)]
    responses = [torch.randint(2, VOCAB, (2 + i % 3,), generator=generator).tolist() for i in range(9)]
    policy = backend()
    whole = policy.score(contexts, responses)
    width = max(len(c) + len(r) for c, r in zip(contexts, responses))
    monkeypatch.setattr(score_chunks, "LOGITS_BUDGET", 2 * width * VOCAB * 4)  # two rows a chunk
    assert score_chunks.score_rows(width, VOCAB) == 2
    calls = []
    per_token = policy.per_token
    monkeypatch.setattr(policy, "per_token", lambda model, c, r: calls.append(len(c)) or per_token(model, c, r))
    chunked = policy.score(contexts, responses)
    assert calls == [2, 2, 2, 2, 1]
    for name in ("logprobs", "entropy"):
        a, b = getattr(whole, name), getattr(chunked, name)
        assert torch.allclose(a, b, atol=1e-6), name
