"""Keys and values of prompts that many rows continue, kept once per distinct prompt, and
attention that reads them once for all those rows; for Qwen2- and Llama-architecture
causal LMs (decode.unsupported says which models).

decode.py samples with it (a rollout batch repeats each first prompt G times) and
cross_scoring.py teacher-forces every response after every context with it (the
responses' prefix tree after each context). The model's own modules compute the norms,
projections, MLP and rotary angles; attention and the rotation itself (transformers'
``apply_rotary_pos_emb`` bit for bit, in fewer operations) are computed here, so the
numbers follow transformers' forward to float rounding.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch
import torch.nn.functional as F


@dataclass
class PromptCache:
    """Keys and values per layer: each distinct prompt's ``[U, kv_heads, P, head_dim]``
    (right-padded to the longest, ``prompt_length`` real positions each), and each row's
    generated tokens ``[R, kv_heads, max_new_tokens, head_dim]``, slot ``t`` holding the
    row's ``t``-th new token. ``slot`` places row ``r`` at ``prompt * per_prompt + k`` in a
    ``[U * per_prompt]`` layout, so the rows of one prompt read its keys in one matmul."""

    prompt_keys: list[torch.Tensor]
    prompt_values: list[torch.Tensor]
    prompt_length: torch.Tensor
    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    prompt: torch.Tensor  # [R] the prompt each row continues
    slot: torch.Tensor | None = None  # computed from ``prompt`` when not given
    per_prompt: int = 0

    def __post_init__(self):
        if self.slot is None:
            counts = torch.bincount(self.prompt, minlength=self.prompt_length.numel())
            self.per_prompt = int(counts.max())
            first = torch.cumsum(counts, 0) - counts  # rows of one prompt, in row order
            order = torch.argsort(self.prompt, stable=True)
            rank = torch.empty_like(self.prompt)
            rank[order] = torch.arange(len(self.prompt), device=self.prompt.device) - first[self.prompt[order]]
            self.slot = self.prompt * self.per_prompt + rank

    # attend's per-cache layouts: they hold for every layer and step of a decode, so they are
    # made once, at the first use (cross-scoring, which attends otherwise, never makes them)
    @cached_property
    def row_of_slot(self) -> torch.Tensor:
        """``[U * per_prompt]``: the row in each slot of the per-prompt layout (a slot no row
        fills reads row 0: its products are never read back)."""
        rows = torch.zeros(self.prompt_length.numel() * self.per_prompt, dtype=torch.long, device=self.prompt.device)
        rows[self.slot] = torch.arange(len(self.prompt), device=self.prompt.device)
        return rows

    @cached_property
    def padding(self) -> torch.Tensor:
        """``[R, 1, 1, P]``: each row's padded prompt positions."""
        return ~prompt_mask(self)[:, None, None, :]

    def select(self, rows: torch.Tensor) -> PromptCache:
        """The cache of ``rows`` only (its own parts copied, the prompts' shared)."""
        return PromptCache(self.prompt_keys, self.prompt_values, self.prompt_length,
                           [k.index_select(0, rows) for k in self.keys],
                           [v.index_select(0, rows) for v in self.values], self.prompt[rows])

    def by_prompt(self, x: torch.Tensor) -> torch.Tensor:
        """Rows' ``x`` ``[R, KV, M, N]`` laid out per prompt ``[U * KV, per_prompt * M, N]``
        (where a prompt has fewer rows, its spare slots repeat row 0: ``by_row`` never reads them)."""
        rows, heads, m, n = x.shape
        prompts = self.prompt_length.numel()
        laid = x.index_select(0, self.row_of_slot)
        return laid.view(prompts, self.per_prompt, heads, m, n).transpose(1, 2).reshape(prompts * heads, -1, n)

    def by_row(self, x: torch.Tensor, heads: int) -> torch.Tensor:
        """The inverse of ``by_prompt``: ``[U * KV, per_prompt * M, N]`` to the rows' ``[R, KV, M, N]``."""
        prompts = self.prompt_length.numel()
        laid = x.view(prompts, heads, self.per_prompt, -1, x.size(-1)).transpose(1, 2)
        return laid.reshape(prompts * self.per_prompt, heads, -1, x.size(-1))[self.slot]


def attend(q: torch.Tensor, own_k: torch.Tensor, own_v: torch.Tensor, cache: PromptCache, layer: int,
           scale: float) -> torch.Tensor:
    """Attention of each row's one new query ``q`` ``[R, H, 1, D]`` over its prompt and its
    own keys and values ``[R, KV, W, D]``; ``[R, H, 1, D]``. The prompt's keys are read
    once for all the rows that continue it, and the softmax runs over the two parts
    without joining them (decoding reads the keys many times, writes few scores)."""
    rows, heads, span, dim = q.shape
    kv_heads = own_k.size(1)
    q = q.reshape(rows, kv_heads, heads // kv_heads * span, dim)  # query heads stacked per key/value head
    own = (q @ own_k.transpose(-1, -2)).float() * scale
    prompt_k = cache.prompt_keys[layer].flatten(0, 1)  # [U * KV, P, D]
    shared = cache.by_row(cache.by_prompt(q) @ prompt_k.transpose(-1, -2), kv_heads).float() * scale
    shared = shared.masked_fill(cache.padding, float("-inf"))
    top = torch.maximum(own.amax(-1, keepdim=True), shared.amax(-1, keepdim=True))
    own, shared = (own - top).exp(), (shared - top).exp()
    total = own.sum(-1, keepdim=True) + shared.sum(-1, keepdim=True)
    prompt_v = cache.prompt_values[layer].flatten(0, 1)
    out = own.to(q.dtype) @ own_v + cache.by_row(cache.by_prompt(shared.to(q.dtype)) @ prompt_v, kv_heads)
    return (out / total.to(q.dtype)).reshape(rows, heads, span, dim)


def attend_causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cache: PromptCache, layer: int,
                  scale: float, mask: torch.Tensor) -> torch.Tensor:
    """Attention of ``S`` new tokens per row (``q``, ``k``, ``v`` ``[R, H or KV, S, D]``) over
    the row's prompt and, causally, each other, through one fused attention call over
    ``[prompt, new]`` keys laid into one buffer (teacher forcing writes many scores: fusing
    them beats reading the prompt once); ``mask`` ``[R or 1, 1, S, P + S]``: what each new
    token sees (a prefix tree's, cross_scoring.py; ``prompt_mask`` gives the prompt part)."""
    rows, kv_heads, span, dim = k.shape
    prompt = cache.prompt_keys[layer].size(2)
    keys = k.new_empty(rows, kv_heads, prompt + span, dim)
    values = torch.empty_like(keys)
    keys[:, :, :prompt] = cache.prompt_keys[layer][cache.prompt]
    values[:, :, :prompt] = cache.prompt_values[layer][cache.prompt]
    keys[:, :, prompt:] = k
    values[:, :, prompt:] = v
    return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=scale,
                                          enable_gqa=q.size(1) != kv_heads)


def prompt_mask(cache: PromptCache) -> torch.Tensor:
    """``[R, P]``: which of its prompt's positions each row sees (the real ones)."""
    prompt = cache.prompt_keys[0].size(2)
    return (torch.arange(prompt, device=cache.prompt_length.device)[None, :]
            < cache.prompt_length[cache.prompt][:, None])


def layers(model, ids: torch.Tensor, positions: torch.Tensor, attend,
           embeds: torch.Tensor | None = None) -> torch.Tensor:
    """Hidden states ``[R, S, H]`` of tokens ``ids`` ``[R, S]`` at ``positions``, each layer's
    attention computed by ``attend(layer, q, k, v)`` from rotated queries and keys; the
    tokens' input embeddings are ``embeds`` ``[R, S, H]`` where given (a prompt's pictures
    merged in), else the model's embedding of ``ids``."""
    body = model.model
    hidden = body.embed_tokens(ids) if embeds is None else embeds
    rotate = rotary(*body.rotary_emb(hidden, positions))
    for index, layer in enumerate(body.layers):
        attn = layer.self_attn
        residual = hidden
        x = layer.input_layernorm(hidden)
        shape = (*ids.shape, -1, attn.head_dim)
        q = attn.q_proj(x).view(shape).transpose(1, 2)
        k = attn.k_proj(x).view(shape).transpose(1, 2)
        v = attn.v_proj(x).view(shape).transpose(1, 2)
        q, k = rotate(q), rotate(k)
        out = attend(index, attn, q, k, v)
        hidden = residual + attn.o_proj(out.transpose(1, 2).reshape(*ids.shape, -1))
        hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
    return hidden


def rotary(cos: torch.Tensor, sin: torch.Tensor):
    """The rotation at ``cos`` and ``sin`` ``[R, S, D]`` (the model's rotary module's), as a
    function of queries or keys ``[R, H, S, D]``: transformers' ``apply_rotary_pos_emb``
    bit for bit, ``x cos + rotate_half(x) sin`` with ``rotate_half(x) = [-x2, x1]``, written
    as ``x cos + roll(x) sin'`` with the sign on the first half of ``sin'``, made once for
    every layer (a product's sign is exact, so ``(-a) b == a (-b)``): four operations a
    tensor instead of seven, run twice a layer at every decode step."""
    half = cos.size(-1) // 2
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    signed = torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)

    def rotate(x: torch.Tensor) -> torch.Tensor:
        return x * cos + x.roll(half, dims=-1) * signed

    return rotate


def logits(model, hidden: torch.Tensor) -> torch.Tensor:
    return model.lm_head(model.model.norm(hidden)).float()


def zeros(model, rows: int, length: int, dtype: torch.dtype | None = None) -> list[torch.Tensor]:
    """Per layer ``[rows, kv_heads, length, head_dim]`` zeros in ``dtype`` (the model's if None)."""
    config = model.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    shape = (rows, config.num_key_value_heads, length, head_dim)
    # zeros, not empty: a masked slot still meets a zero weight, and 0 * NaN garbage is NaN
    return [torch.zeros(shape, dtype=dtype or model.dtype, device=model.device)
            for _ in range(config.num_hidden_layers)]


def prefill(model, prompts: list[list[int]], embed=None):
    """Each prompt's keys and values per layer ``[U, KV, P, D]`` (right-padded: causal
    attention never lets a real token see the padding after it), and its next-token
    logits ``[U, V]``. ``embed(ids)``: the padded prompts' input embeddings ``[U, P, H]``
    where they are not the token embeddings alone (a vision-language policy's pictures,
    vision.merged_embeddings)."""
    device = model.device
    lengths = torch.tensor([len(p) for p in prompts], device=device)
    ids = torch.zeros(len(prompts), int(lengths.max()), dtype=torch.long, device=device)
    for row, prompt in enumerate(prompts):
        ids[row, : len(prompt)] = torch.tensor(prompt, device=device)
    keys, values = [], []

    def attend(layer, attn, q, k, v):
        keys.append(k.contiguous())  # read at every step: laid out once
        values.append(v.contiguous())
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=attn.scaling,
                                              enable_gqa=attn.num_key_value_groups > 1)

    positions = torch.arange(ids.size(1), device=device)[None].expand(len(prompts), -1)
    hidden = layers(model, ids, positions, attend, None if embed is None else embed(ids))
    last = hidden[torch.arange(len(prompts), device=device), lengths - 1]
    return keys, values, lengths, logits(model, last)
