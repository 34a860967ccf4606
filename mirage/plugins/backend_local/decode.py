"""A lean batched decode loop for Qwen2- and Llama-architecture causal LMs (the default
policy, Qwen2/Qwen2.5 checkpoints, SmolLM2 and other LlamaForCausalLM checkpoints).

What ``model.generate`` spends its time on for a rollout batch, and what this loop does
instead (bench/generation.py measures both):

- a batch's prompts repeat (a group's trajectories share their first prompt): here each
  distinct prompt is prefilled once and its keys and values are kept once, read by every
  row that continues it, instead of once per row;
- the key/value cache grows by concatenation at every step: here the generated tokens'
  keys and values go into a cache allocated once;
- finished rows stay in the batch: here they leave it whenever a quarter of it has finished.

It samples exactly as ``model.generate`` does: the same logits processors (transformers'
own), and one exponential draw over the whole ``[batch, vocab]`` per step, which is how
``torch.multinomial`` draws a single sample; a row's token depends only on its own
probabilities and its own slice of the draw, so the same seed gives the same samples
whichever rows are still running (tests/plugins/test_decode.py). With per-row ``seeds``
each row draws from its own generator instead, one exponential draw over the vocabulary
per step, which is what ``torch.multinomial`` draws for that row alone
(tests/plugins/test_seeded_generation.py).

The bfloat16 sampling copy (sampler.py), whose samples cannot be ``model.generate``'s on
the float32 policy anyway, draws by inverse CDF instead (``draw="inverse_cdf"``): one
uniform per row and step rather than one exponential per row and vocabulary entry, the
same distribution at a fraction of the cost for a 49k vocabulary. For a bfloat16 model on
the CPU the keys, values and attention scores stay float32 (see ``generate``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import LogitsProcessorList, MinPLogitsWarper, TemperatureLogitsWarper, TopPLogitsWarper

from mirage.plugins.backend_local import prompt_cache

COMPACT_AT = 0.75  # rows leave the batch once no more than this share of it is running
SHARE_WASTE = 1.5  # prompts are shared while their rows, padded to the most per prompt, are at most this x the batch

# Generation-config fields a checkpoint may set without changing what this loop samples:
# the ones the backend passes explicitly, token ids and bookkeeping.
_HARMLESS = {"bos_token_id", "eos_token_id", "pad_token_id", "do_sample", "temperature", "top_k",
             "top_p", "min_p", "max_length", "max_new_tokens", "transformers_version", "_from_model_config",
             "use_cache", "output_attentions", "output_hidden_states"}


# Architectures whose decoder layer is prompt_cache.layers' layout: pre-norm, q/k/v/o
# projections (with or without bias, which the model's own modules apply), rotary queries
# and keys, gated MLP. Llama differs from Qwen2 only in biases and rope scaling variants.
ARCHITECTURES = ("qwen2", "llama")
# Rope types whose cos and sin depend on the position alone, computed once by the model's
# own rotary module: the loop asks it for each step's positions and gets what the full
# forward gets. "dynamic" and "longrope" rescale by the sequence length of each call,
# which the loop's calls (distinct prompts, then one token) do not reproduce.
STATIC_ROPE = ("default", "linear", "llama3", "yarn")


def unsupported(model) -> str | None:
    """Why this loop cannot stand in for ``model.generate`` on ``model``, or None."""
    config = model.config
    model_type = getattr(config, "model_type", None)
    if model_type not in ARCHITECTURES:
        return f"model type {model_type!r} (the lean loop knows {', '.join(ARCHITECTURES)})"
    if getattr(config, "use_sliding_window", False):
        return "sliding-window attention"
    rope = (getattr(config, "rope_parameters", None) or {}).get("rope_type", "default")
    if rope not in STATIC_ROPE:
        return f"rope type {rope!r} (the lean loop knows {', '.join(STATIC_ROPE)})"
    extra = set(model.generation_config.to_diff_dict()) - _HARMLESS
    if extra:
        return f"the checkpoint's generation config sets {sorted(extra)}"
    return None


def _processors(temperature: float, top_p: float, min_p: float) -> LogitsProcessorList:
    """The warpers ``model.generate`` builds for these settings, in its order."""
    warpers = LogitsProcessorList()
    if temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(temperature))
    if top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p=top_p))
    if min_p > 0:
        warpers.append(MinPLogitsWarper(min_p=min_p))
    return warpers


def _inverse_cdf(probs: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """The token of each row ``[R, V]`` whose cumulative probability first exceeds the row's
    ``uniform`` ``[R, 1]`` share of its total: an exact draw from ``probs`` (summed in float64,
    so a token's chance is its probability to about 1e-16; one of probability 0 is never
    drawn), ``[R]``."""
    cdf = probs.double().cumsum(-1)
    total = cdf[:, -1:]
    target = torch.minimum(uniform * total, torch.nextafter(total, torch.zeros_like(total)))
    return torch.searchsorted(cdf, target, right=True).squeeze(1)


def _sample(probs: torch.Tensor, rows: torch.Tensor, batch: int, generators, draw: str) -> torch.Tensor:
    """Each running row's token ``[R]`` from its probabilities ``[R, V]`` (``rows``: the batch
    row each decodes). From the global generator one draw covers the whole batch, so a row's
    share is the same whichever rows still run; with ``generators`` each row's own stream
    advances once per step while the row runs."""
    uniform = draw == "inverse_cdf"

    def noise(rows_drawn: int, generator=None) -> torch.Tensor:
        if uniform:
            return torch.empty(rows_drawn, 1, dtype=torch.float64, device=probs.device).uniform_(generator=generator)
        return torch.empty(rows_drawn, probs.size(-1), device=probs.device).exponential_(1, generator=generator)

    if generators is None:
        drawn = noise(batch)[rows]
    else:
        drawn = torch.cat([noise(1, generators[row]) for row in rows.tolist()])
    return _inverse_cdf(probs, drawn) if uniform else (probs / drawn).argmax(-1)


@torch.no_grad()
def generate(model, contexts: list[list[int]], *, eos: int, temperature: float, greedy: bool,
             max_new_tokens: int, top_p: float = 1.0, min_p: float = 0.0,
             seeds: list[int] | None = None, draw: str = "exponential") -> list[list[int]]:
    """Sampled (or greedy) continuations of ``contexts``, each ending at its first ``eos``
    (kept) or after ``max_new_tokens`` tokens. The global torch generator supplies the
    draws, or with ``seeds`` (one per context) each row's own generator seeded with its
    seed, so that a row's sample does not depend on the other rows (Backend.generate).
    ``draw``: ``exponential``, one exponential per row and vocabulary entry per step (what
    ``model.generate`` draws: the same samples for the same seed), or ``inverse_cdf``, one
    uniform per row and step (the same distribution, other samples, and at a 49k vocabulary
    and 16 rows about 20 ms a step less on this CPU)."""
    if draw not in ("exponential", "inverse_cdf"):
        raise ValueError(f"draw {draw!r}: exponential or inverse_cdf")
    device = model.device
    batch = len(contexts)
    if seeds is not None and len(seeds) != batch:
        raise ValueError(f"{len(seeds)} seeds for {batch} contexts")
    out: list[list[int]] = [[] for _ in range(batch)]
    if max_new_tokens < 1 or not batch:
        return out
    distinct: dict[tuple[int, ...], int] = {}
    prompt = torch.tensor([distinct.setdefault(tuple(c), len(distinct)) for c in contexts], device=device)
    keys, values, lengths, logits = prompt_cache.prefill(model, [list(c) for c in distinct])
    # A CPU has no fast bfloat16 kernel for attention's small batched products (2.5x slower
    # than float32 at SmolLM2-135M's shape, 16 rows): keys, values and scores stay float32 there.
    widen = device.type == "cpu" and model.dtype != torch.float32
    if widen:
        keys, values = [k.float() for k in keys], [v.float() for v in values]
    logits = logits.index_select(0, prompt)  # each row's first next-token logits
    if len(distinct) * int(torch.bincount(prompt).max()) > SHARE_WASTE * batch:
        # Too uneven to share (most prompts once, a few many times): each row gets its
        # own copy of its prompt, once, rather than padding every prompt's rows per step.
        keys, values = [k.index_select(0, prompt) for k in keys], [v.index_select(0, prompt) for v in values]
        lengths, prompt = lengths.index_select(0, prompt), torch.arange(batch, device=device)
    cached = torch.float32 if widen else model.dtype
    cache = prompt_cache.PromptCache(keys, values, lengths, prompt_cache.zeros(model, batch, max_new_tokens, cached),
                                     prompt_cache.zeros(model, batch, max_new_tokens, cached), prompt)
    rows = torch.arange(batch, device=device)  # the batch row each cache row decodes
    warpers = _processors(temperature, top_p, min_p)
    running = torch.ones(batch, dtype=torch.bool, device=device)
    generators = None if greedy or seeds is None else [torch.Generator(device=device).manual_seed(seed)
                                                       for seed in seeds]
    for step in range(max_new_tokens):
        if greedy:
            tokens = logits.argmax(-1)
        else:
            probs = F.softmax(warpers(None, logits), dim=-1)
            tokens = _sample(probs, rows, batch, generators, draw)
        live = running[rows]
        for row, token in zip(rows[live].tolist(), tokens[live].tolist()):
            out[row].append(token)
        running[rows[live & (tokens == eos)]] = False
        if step == max_new_tokens - 1 or not running.any():
            break
        keep = running[rows]
        if int(keep.sum()) <= COMPACT_AT * len(rows):
            kept = keep.nonzero().squeeze(1)
            cache, rows, tokens = cache.select(kept), rows[kept], tokens[kept]

        def attend(layer, attn, q, k, v, step=step):
            cache.keys[layer][:, :, step] = k[:, :, 0]
            cache.values[layer][:, :, step] = v[:, :, 0]
            own = slice(0, step + 1)
            attended = prompt_cache.attend(q.float() if widen else q, cache.keys[layer][:, :, own],
                                           cache.values[layer][:, :, own], cache, layer, attn.scaling)
            return attended.to(q.dtype)

        position = (cache.prompt_length[cache.prompt] + step)[:, None]
        hidden = prompt_cache.layers(model, tokens[:, None], position, attend)
        logits = prompt_cache.logits(model, hidden[:, 0])
    return out
