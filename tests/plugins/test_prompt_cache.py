"""prompt_cache's pieces that the decode loop runs at every layer of every step: the
rotation (transformers' own, bit for bit), the per-prompt layout and the padding mask."""

from __future__ import annotations

import pytest
import torch
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from mirage.plugins.backend_local import prompt_cache


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows, heads, span, dim", [(16, 9, 1, 64), (4, 3, 40, 64), (2, 4, 7, 32)])
def test_the_rotation_is_transformers_own_bit_for_bit(dtype, rows, heads, span, dim):
    generator = torch.Generator().manual_seed(rows * span)
    q = torch.randn(rows, heads, span, dim, generator=generator).to(dtype)
    k = torch.randn(rows, 3, span, dim, generator=generator).to(dtype)
    angles = torch.randn(rows, span, dim // 2, generator=generator).repeat(1, 1, 2) * 100
    cos, sin = angles.cos().to(dtype), angles.sin().to(dtype)
    expected_q, expected_k = apply_rotary_pos_emb(q, k, cos, sin)
    rotate = prompt_cache.rotary(cos, sin)
    assert torch.equal(rotate(q), expected_q) and torch.equal(rotate(k), expected_k)


def cache_of(prompts: list[int], lengths: list[int], longest: int = 6) -> prompt_cache.PromptCache:
    keys = [torch.zeros(len(lengths), 2, longest, 4)]
    return prompt_cache.PromptCache(keys, keys, torch.tensor(lengths), keys, keys, torch.tensor(prompts))


def test_rows_laid_out_per_prompt_come_back_as_they_were_with_uneven_groups():
    cache = cache_of([2, 0, 2, 1, 2, 0], [3, 6, 1])  # prompt 2 has three rows, 1 one
    x = torch.randn(6, 2, 1, 4)
    laid = cache.by_prompt(x)
    assert laid.shape == (3 * 2, 3 * 1, 4)  # [U * KV, per_prompt * M, N]
    assert torch.equal(cache.by_row(laid, heads=2), x)
    # the rows of prompt 2, key/value head 1, side by side in row order (rows 0, 2, 4)
    assert torch.equal(laid[2 * 2 + 1], x[[0, 2, 4], 1, 0])


def test_the_padding_mask_marks_each_rows_prompt_positions_past_its_length():
    cache = cache_of([2, 0, 1], [3, 6, 1])
    assert cache.padding.shape == (3, 1, 1, 6)
    assert cache.padding[:, 0, 0].tolist() == [[False] + [True] * 5, [False] * 3 + [True] * 3, [False] * 6]
    kept = cache.select(torch.tensor([2, 0]))
    assert kept.padding[:, 0, 0].tolist() == [[False] * 6, [False] + [True] * 5]
