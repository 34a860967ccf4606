"""Every response teacher-forced after every context (the MI proxies' cross-scoring),
each context computed once.

Each context is prefilled once (prompt_cache.prefill); its last logits predict every
response's first token; the responses' other tokens run through the model in chunks of
pairs, each pair attending to its context's cached keys (laid once per layer and chunk
beside the pair's own keys, for one fused attention call). Results equal scoring every
pair in full within float rounding (tests/plugins/test_decode.py and
tests/plugins/test_diagnostics_policy.py compare them; bench/diagnostics.py times them).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mirage.plugins.backend_local import prompt_cache

PAIRS = 256  # pairs teacher-forced at once, fewer where their logits would pass LOGITS
LOGITS = 2**25  # floats of logits per chunk (128 MB in float32)


def token_stats(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Masked log-probs of ``targets`` ``[B, L]`` and policy entropies ``[B, L]`` from the
    next-token ``logits`` ``[B, L, V]`` that predict them."""
    log_probs = F.log_softmax(logits, dim=-1)
    picked = log_probs.gather(-1, targets[:, :, None]).squeeze(-1)
    entropy = -(log_probs.exp() * log_probs).sum(-1)
    return picked * mask, entropy * mask


@torch.no_grad()
def cross_score(model, contexts: list[list[int]], responses: list[list[int]], pad: int, embed=None
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logprobs, entropy)``, each ``[R, C]`` float64 on the CPU: response ``r``'s summed
    log-prob (and per-token entropy) after context ``c`` (0 for an empty response).
    ``embed``: the contexts' input embeddings from their padded ids, where pictures are
    merged in (prompt_cache.prefill); the responses are text."""
    device = model.device
    keys, values, lengths, first = prompt_cache.prefill(model, contexts, embed)
    count = len(responses)
    width = max(1, max(len(r) for r in responses))
    ids = torch.full((count, width), pad, dtype=torch.long, device=device)
    for row, response in enumerate(responses):
        ids[row, : len(response)] = torch.tensor(response, device=device)
    mask = (torch.arange(width, device=device)[None, :]
            < torch.tensor([len(r) for r in responses], device=device)[:, None]).float()
    logprobs = torch.zeros(count, len(contexts), dtype=torch.float64)
    entropy = torch.zeros_like(logprobs)
    pairs = max(1, min(PAIRS, LOGITS // (width * model.config.vocab_size)))
    per_chunk = max(1, pairs // count)  # contexts whose pairs go through together
    for start in range(0, len(contexts), per_chunk):
        block = slice(start, min(start + per_chunk, len(contexts)))
        for first_row in range(0, count, pairs):
            rows = slice(first_row, min(first_row + pairs, count))
            picked, spread = _block(model, keys, values, lengths, first, block, ids[rows], mask[rows])
            logprobs[rows, block] = picked.double().cpu()
            entropy[rows, block] = spread.double().cpu()
    return logprobs, entropy


def _block(model, keys, values, lengths, first, block: slice, ids: torch.Tensor, mask: torch.Tensor
           ) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores ``[N, K]`` of responses ``ids`` ``[N, W]`` after the contexts in ``block``."""
    device = ids.device
    count, width = ids.shape
    contexts = block.stop - block.start
    # pairs context-major: pair k * N + n is response n after the block's k-th context
    prompt = torch.arange(contexts, device=device).repeat_interleave(count)
    cache = prompt_cache.PromptCache([k[block] for k in keys], [v[block] for v in values], lengths[block],
                                     [], [], prompt)
    last = first[block].repeat_interleave(count, dim=0)[:, None]  # predicts each response's first token
    logits = last
    if width > 1:
        inputs = ids[:, :-1].repeat(contexts, 1)
        positions = lengths[block].repeat_interleave(count)[:, None] + torch.arange(width - 1, device=device)

        visible = prompt_cache.causal_mask(cache, width - 1)

        def attend(layer, attn, q, k, v):
            return prompt_cache.attend_causal(q, k, v, cache, layer, attn.scaling, visible)

        hidden = prompt_cache.layers(model, inputs, positions, attend)
        logits = torch.cat([last, prompt_cache.logits(model, hidden)], dim=1)
    picked, spread = token_stats(logits, ids.repeat(contexts, 1), mask.repeat(contexts, 1))
    return picked.sum(-1).view(contexts, count).T, spread.sum(-1).view(contexts, count).T
