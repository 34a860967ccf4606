"""Per-row seeds (``Backend.generate(..., seeds=...)``, what the data-parallel rollout relies
on): a row's sample depends on its context, the sampling settings and its seed alone, not
on the other rows, their order or count, nor on the global torch generator, which is left
where it was. Both decoders of the local backend (the lean loop and transformers'
``model.generate``) are checked on the random tiny Qwen2 of test_decode.py, whose rows stop
at different steps (so the lean loop's compaction runs)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from test_decode import EOS, PAD, grouped_contexts, tiny_qwen

from mirage.core.run.validate import build_config
from mirage.plugins.backend_local.backend import LocalBackend

SAMPLED = dict(temperature=1.0, greedy=False, max_new_tokens=24)
WARPED = dict(temperature=0.7, greedy=False, max_new_tokens=24, top_p=0.8, min_p=0.05)
GREEDY = dict(temperature=1.0, greedy=True, max_new_tokens=24)


def local_backend(tiny_config, decoder: str) -> LocalBackend:
    """The local backend with the tiny Qwen2 as its policy and ``decoder`` in use."""
    data = tiny_config()
    data["model"]["options"] |= {"decoder": decoder}
    config = build_config(data)
    backend = LocalBackend(config, LocalBackend.Options(**config.model.options))
    backend.model = tiny_qwen(0).to(backend.device)
    backend.tokenizer = SimpleNamespace(pad_token_id=PAD, eos_token_id=EOS)  # all generate reads of it
    assert backend.decoder() == decoder
    return backend


@pytest.fixture(params=["lean", "generate"])
def backend(request, tiny_config) -> LocalBackend:
    return local_backend(tiny_config, request.param)


def generate(backend: LocalBackend, contexts, seeds, sampling=SAMPLED, *, global_seed: int = 0):
    """``backend.generate`` with the global generator at ``global_seed`` beforehand."""
    torch.manual_seed(global_seed)
    return backend.generate(contexts, seeds=seeds, **sampling)


# Six contexts, three prompts twice each (the lean loop shares a repeated prompt's cache).
CONTEXTS = grouped_contexts(1, prompts=3, group=2)
SEEDS = [11, 22, 33, 44, 55, 66]


@pytest.mark.parametrize("sampling", [SAMPLED, WARPED], ids=["sampled", "warped"])
def test_a_row_samples_the_same_whatever_else_is_in_the_batch(backend, sampling):
    together = generate(backend, CONTEXTS, SEEDS, sampling)
    assert len({len(row) for row in together}) > 2  # rows stopped at different steps
    assert generate(backend, [CONTEXTS[2]], [SEEDS[2]], sampling, global_seed=1) == [together[2]]
    assert generate(backend, [CONTEXTS[5], CONTEXTS[0]], [SEEDS[5], SEEDS[0]], sampling,
                    global_seed=2) == [together[5], together[0]]
    # more rows, in another order, one of them a repeat of row 3 with another seed
    others = grouped_contexts(9, prompts=4, group=1)
    order = [4, 1, 3]
    mixed = generate(backend, [others[0], *(CONTEXTS[i] for i in order), others[1], others[2], CONTEXTS[3]],
                     [7, *(SEEDS[i] for i in order), 8, 9, 10], sampling, global_seed=3)
    assert mixed[1:4] == [together[i] for i in order]


def test_the_seeds_decide_the_samples(backend):
    batches = [generate(backend, CONTEXTS, [seed + offset for seed in SEEDS]) for offset in range(4)]
    assert len({tuple(map(tuple, rows)) for rows in batches}) == 4
    # the same context and the same seed: the same sample, in one batch too
    twice = generate(backend, [CONTEXTS[0], CONTEXTS[0], CONTEXTS[0]], [5, 6, 5])
    assert twice[0] == twice[2] and twice[0] != twice[1]


def test_seeded_generation_leaves_the_global_generator_alone(backend):
    torch.manual_seed(4)
    before = torch.get_rng_state()
    backend.generate(CONTEXTS, seeds=SEEDS, **SAMPLED)
    assert torch.equal(torch.get_rng_state(), before)


def test_greedy_ignores_the_seeds(backend):
    greedy = generate(backend, CONTEXTS, None, GREEDY)
    assert generate(backend, CONTEXTS, SEEDS, GREEDY) == greedy
    assert generate(backend, CONTEXTS, [seed + 1 for seed in SEEDS], GREEDY, global_seed=5) == greedy


def test_one_seed_per_context(backend):
    with pytest.raises(ValueError, match="^5 seeds for 6 contexts$"):
        backend.generate(CONTEXTS, seeds=SEEDS[:5], **SAMPLED)


def test_both_decoders_draw_the_same_samples_from_the_same_seeds(tiny_config):
    """A row's stream in the lean loop is what ``torch.multinomial`` draws for it alone."""
    lean, plain = (local_backend(tiny_config, decoder) for decoder in ("lean", "generate"))
    for sampling in (SAMPLED, WARPED):
        assert generate(lean, CONTEXTS, SEEDS, sampling) == generate(plain, CONTEXTS, SEEDS, sampling)
