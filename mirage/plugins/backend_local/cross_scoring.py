"""Every response teacher-forced after every context (the MI proxies' cross-scoring),
each context computed once and each shared beginning of the responses once per context.

Each context is prefilled once (prompt_cache.prefill); its last logits predict every
response's first token. The responses, in chunks, form a prefix tree (response_trie.py):
each distinct prefix is one token of a sequence after each context, attending to its
context's cached keys and, through a mask, to its ancestors (the prefixes it extends) in
one fused attention call. Results equal scoring every pair in full within float rounding
(tests/plugins/test_decode.py and tests/plugins/test_vision_cross_scoring.py compare them;
bench/diagnostics.py times them).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mirage.plugins.backend_local import prompt_cache, response_trie

NODES = 128  # tree nodes per chunk of responses: each attends to all of its chunk's (masked)
ROWS = 4096  # node rows (contexts x nodes) teacher-forced at once
LOGITS = 2**25  # floats of logits per chunk (128 MB in float32)


def _stats(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs ``[..., V]`` and entropies ``[...]`` of ``logits``."""
    log_probs = F.log_softmax(logits, dim=-1)
    return log_probs, -(log_probs.exp() * log_probs).sum(-1)


def token_stats(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Masked log-probs of ``targets`` ``[B, L]`` and policy entropies ``[B, L]`` from the
    next-token ``logits`` ``[B, L, V]`` that predict them."""
    log_probs, entropy = _stats(logits)
    picked = log_probs.gather(-1, targets[:, :, None]).squeeze(-1)
    return picked * mask, entropy * mask


@torch.no_grad()
def cross_score(model, contexts: list[list[int]], responses: list[list[int]], embed=None
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logprobs, entropy)``, each ``[R, C]`` float64 on the CPU: response ``r``'s summed
    log-prob (and per-token entropy) after context ``c`` (0 for an empty response).
    ``embed``: the contexts' input embeddings from their padded ids, where pictures are
    merged in (prompt_cache.prefill); the responses are text (the tree holds real tokens
    only: no padding)."""
    device = model.device
    keys, values, lengths, first = prompt_cache.prefill(model, contexts, embed)
    logprobs = torch.zeros(len(responses), len(contexts), dtype=torch.float64)
    entropy = torch.zeros_like(logprobs)
    # each response's first token, predicted by each context's last logits
    first_lp, first_entropy = _stats(first)
    scored = [r for r, z in enumerate(responses) if z]
    if scored:
        heads = torch.tensor([responses[r][0] for r in scored], device=device)
        logprobs[scored] = first_lp[:, heads].T.double().cpu()
        entropy[scored] = first_entropy[None, :].expand(len(scored), -1).double().cpu()
    vocab = first.size(-1)
    for chunk in response_trie.chunks(responses, NODES):
        trie = response_trie.build([responses[r] for r in chunk], device)
        if not len(trie.node):  # responses of one token: scored above
            continue
        per_block = max(1, min(ROWS // trie.size, LOGITS // (trie.size * vocab)))
        rows = torch.tensor(chunk)
        for start in range(0, len(contexts), per_block):
            block = slice(start, min(start + per_block, len(contexts)))
            picked, spread = _block(model, keys, values, lengths, block, trie, len(chunk))
            logprobs[rows, block] += picked.T.cpu()
            entropy[rows, block] += spread.T.cpu()
    return logprobs, entropy


def _block(model, keys, values, lengths, block: slice, trie: response_trie.Trie, responses: int
           ) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed scores ``[K, N]`` of the tree's ``responses`` (``N``) tokens after the first,
    under the contexts in ``block`` (``K`` of them): one row per context, the tree's nodes
    its sequence."""
    device = trie.ids.device
    contexts, size = block.stop - block.start, trie.size
    cache = prompt_cache.PromptCache([k[block] for k in keys], [v[block] for v in values], lengths[block],
                                     [], [], torch.arange(contexts, device=device))
    positions = lengths[block][:, None] + trie.depth[None, :]
    seen = prompt_cache.prompt_mask(cache)
    visible = torch.cat([seen[:, None, :].expand(-1, size, -1), trie.sees[None].expand(contexts, -1, -1)],
                        dim=-1)[:, None]

    def attend(layer, attn, q, k, v):
        return prompt_cache.attend_causal(q, k, v, cache, layer, attn.scaling, visible)

    hidden = prompt_cache.layers(model, trie.ids[None].expand(contexts, -1), positions, attend)
    log_probs, node_entropy = _stats(prompt_cache.logits(model, hidden))
    # summed in float64, as the full path sums (Backend.cross_score)
    picked = log_probs[:, trie.node, trie.target].double()
    sums = picked.new_zeros(contexts, responses).index_add_(1, trie.response, picked)
    spread = picked.new_zeros(contexts, responses).index_add_(1, trie.response, node_entropy[:, trie.node].double())
    return sums, spread
