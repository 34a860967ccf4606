"""The lean decode loop samples what transformers' ``model.generate`` samples, and cross-scoring
without copies equals scoring every pair in full.

Each case seeds torch, generates with ``model.generate`` (through the backend's reference
path) and with the lean loop, and compares the token ids row by row. The models are
random tiny Qwen2 models: their next-token distributions are broad, so rows stop at
different steps (the loop's compaction runs) and a sampling difference would show at
once."""

from __future__ import annotations

import random

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Qwen2Config, Qwen2ForCausalLM

from mirage.plugins.backend_local import cross_scoring, decode

VOCAB, EOS, PAD = 48, 1, 0


def tiny_qwen(seed: int, *, heads: int = 4, kv_heads: int = 4, eos_bias: float = 2.0) -> Qwen2ForCausalLM:
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(Qwen2Config(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=256,
        tie_word_embeddings=True, pad_token_id=PAD, eos_token_id=EOS, bos_token_id=2,
    )).eval()
    with torch.no_grad():  # make the end token likely enough that rows finish at different steps
        model.model.embed_tokens.weight[EOS] *= eos_bias
    return model


def plain(model, contexts, **sampling) -> list[list[int]]:
    """``model.generate`` on the left-padded batch, cut after each row's end token."""
    width = max(len(c) for c in contexts)
    ids = torch.full((len(contexts), width), PAD)
    mask = torch.zeros_like(ids)
    for row, context in enumerate(contexts):
        ids[row, width - len(context):] = torch.tensor(context)
        mask[row, width - len(context):] = 1
    greedy = sampling.pop("greedy")
    extra = {} if greedy else {"temperature": sampling["temperature"], "top_k": 0,
                               "top_p": sampling.get("top_p", 1.0)}
    if not greedy and sampling.get("min_p", 0) > 0:
        extra["min_p"] = sampling["min_p"]
    out = model.generate(input_ids=ids, attention_mask=mask, do_sample=not greedy,
                         max_new_tokens=sampling["max_new_tokens"], pad_token_id=PAD, eos_token_id=EOS,
                         **extra)[:, width:].tolist()
    return [row[: row.index(EOS) + 1] if EOS in row else row for row in out]


def lean(model, contexts, **sampling) -> list[list[int]]:
    return decode.generate(model, contexts, eos=EOS, **sampling)


def grouped_contexts(seed: int, prompts: int, group: int) -> list[list[int]]:
    """``prompts`` distinct contexts of different lengths, each repeated ``group`` times
    (a rollout's first turn), shuffled so a prompt's rows are not adjacent."""
    rng = random.Random(seed)
    distinct = [[rng.randrange(3, VOCAB) for _ in range(rng.randrange(4, 20))] for _ in range(prompts)]
    contexts = [list(c) for c in distinct for _ in range(group)]
    rng.shuffle(contexts)
    return contexts


CASES = {
    "sampled": dict(temperature=1.0, greedy=False, max_new_tokens=24),
    "greedy": dict(temperature=0.5, greedy=True, max_new_tokens=24),
    "warped": dict(temperature=0.7, greedy=False, max_new_tokens=24, top_p=0.8, min_p=0.05),
    "one token": dict(temperature=1.0, greedy=False, max_new_tokens=1),
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("kv_heads", [4, 2])
def test_lean_loop_samples_what_generate_samples(case: str, kv_heads: int) -> None:
    model = tiny_qwen(0, kv_heads=kv_heads)
    contexts = grouped_contexts(1, prompts=5, group=6)
    torch.manual_seed(7)
    expected = plain(model, contexts, **CASES[case])
    torch.manual_seed(7)
    got = lean(model, contexts, **CASES[case])
    assert got == expected
    if case == "sampled":  # the comparison covered rows stopping at different steps
        assert len({len(row) for row in got}) > 3 and any(row[-1] == EOS for row in got)


def test_lean_loop_with_every_context_distinct() -> None:
    """Later turns: no prompt repeats, lengths differ."""
    model = tiny_qwen(3)
    contexts = grouped_contexts(4, prompts=12, group=1)
    torch.manual_seed(11)
    expected = plain(model, contexts, **CASES["sampled"])
    torch.manual_seed(11)
    assert lean(model, contexts, **CASES["sampled"]) == expected


def test_lean_loop_leaves_the_generator_where_generate_does() -> None:
    """The next draw after generating is the same: a rollout's later turns stay in step."""
    model = tiny_qwen(5)
    contexts = grouped_contexts(6, prompts=3, group=4)
    torch.manual_seed(2)
    plain(model, contexts, **CASES["sampled"])
    after_plain = torch.rand(3)
    torch.manual_seed(2)
    lean(model, contexts, **CASES["sampled"])
    assert torch.equal(torch.rand(3), after_plain)


def test_models_the_loop_does_not_know_fall_back_with_a_reason() -> None:
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_embd=16, n_layer=1, n_head=2))
    assert "gpt2" in decode.unsupported(gpt2)
    qwen = tiny_qwen(0)
    assert decode.unsupported(qwen) is None
    qwen.generation_config.repetition_penalty = 1.1
    assert "repetition_penalty" in decode.unsupported(qwen)


def full_pair_scores(model, contexts, responses):
    """Each pair through the model in full: summed log-prob and entropy of the response."""
    logprobs = torch.zeros(len(responses), len(contexts), dtype=torch.float64)
    entropy = torch.zeros_like(logprobs)
    with torch.no_grad():
        for c, context in enumerate(contexts):
            for r, response in enumerate(responses):
                logits = model(input_ids=torch.tensor([context + response])).logits[0, len(context) - 1 : -1]
                log_probs = torch.log_softmax(logits.float(), -1)
                logprobs[r, c] = float(log_probs.gather(-1, torch.tensor(response)[:, None]).sum())
                entropy[r, c] = float(-(log_probs.exp() * log_probs).sum())
    return logprobs, entropy


@pytest.mark.parametrize("nodes", [128, 5])
@pytest.mark.parametrize("kv_heads", [4, 2])
def test_cross_scoring_equals_scoring_every_pair_in_full(monkeypatch, nodes: int, kv_heads: int) -> None:
    """Chunks of at most 5 tree nodes split the responses across chunks; 128 takes them
    all at once."""
    monkeypatch.setattr(cross_scoring, "NODES", nodes)
    check_cross_scoring(tiny_qwen(8, kv_heads=kv_heads), atol=1e-4)


@pytest.mark.parametrize("nodes", [128, 3])
def test_responses_that_begin_alike_score_as_each_alone(monkeypatch, nodes: int) -> None:
    """Shared beginnings, a repeated response, one of one token and an empty one: the tree
    teacher-forces each shared prefix once per context, and every response's scores equal
    its pair scored in full (3 nodes a chunk splits the tree across chunks)."""
    monkeypatch.setattr(cross_scoring, "NODES", nodes)
    model = tiny_qwen(3, kv_heads=2)
    contexts = grouped_contexts(11, prompts=3, group=1)
    responses = [[5, 6, 7, 8, 9], [5, 6, 7, 10], [5, 6, 11], [5, 6, 7, 8, 9], [12], [], [5, 13, 7, 8]]
    logprobs, entropy = cross_scoring.cross_score(model, contexts, responses)
    want_logprobs, want_entropy = full_pair_scores(model, contexts, responses)
    assert torch.allclose(logprobs, want_logprobs, atol=1e-5, rtol=0)
    assert torch.allclose(entropy, want_entropy, atol=1e-5, rtol=0)
    assert torch.equal(logprobs[0], logprobs[3]) and not logprobs[5].any()


def check_cross_scoring(model, atol: float) -> None:
    """The shared-cache cross-scores of 6 responses under 4 contexts equal every pair
    scored in full, log-probs and entropies within ``atol``."""
    rng = random.Random(9)
    contexts = grouped_contexts(10, prompts=4, group=1)
    responses = [[rng.randrange(3, VOCAB) for _ in range(n)] for n in (1, 7, 3, 12, 1, 5)]
    logprobs, entropy = cross_scoring.cross_score(model, contexts, responses)
    want_logprobs, want_entropy = full_pair_scores(model, contexts, responses)
    assert logprobs.shape == (6, 4)
    assert torch.allclose(logprobs, want_logprobs, atol=atol, rtol=0)
    assert torch.allclose(entropy, want_entropy, atol=atol, rtol=0)


# ------------------------------------------------------------------ the inverse-CDF draw
# (what the local backend's bfloat16 sampling copy draws with: its samples cannot be
# model.generate's anyway, and one uniform per row is cheaper than one exponential per token)

def test_inverse_cdf_picks_the_token_whose_cumulative_probability_passes_the_draw() -> None:
    probs = torch.tensor([[0.25, 0.0, 0.5, 0.25]]).expand(6, -1)
    uniform = torch.tensor([[0.0], [0.2499], [0.25], [0.7499], [0.75], [1 - 1e-17]], dtype=torch.float64)
    assert decode._inverse_cdf(probs, uniform).tolist() == [0, 0, 2, 2, 3, 3]
    last_zero = torch.tensor([[0.5, 0.5, 0.0]])  # a draw at the very top never lands on it
    assert decode._inverse_cdf(last_zero, torch.tensor([[1.0]], dtype=torch.float64)).tolist() == [1]


def test_inverse_cdf_draws_each_token_with_its_probability() -> None:
    probs = torch.softmax(torch.tensor([2.0, 0.0, -1.0, 1.0, -30.0]), 0)
    draws = 200_000
    generator = torch.Generator().manual_seed(0)
    uniform = torch.rand(draws, 1, dtype=torch.float64, generator=generator)
    counts = torch.bincount(decode._inverse_cdf(probs.expand(draws, -1), uniform), minlength=5)
    share = counts.double() / draws
    spread = (probs.double() * (1 - probs.double()) / draws).sqrt()
    assert torch.all((share - probs.double()).abs() <= 5 * spread + 1e-12)


@pytest.mark.parametrize("case", ["sampled", "warped"])
def test_inverse_cdf_rows_sample_the_same_whatever_else_is_in_the_batch(case: str) -> None:
    model = tiny_qwen(0)
    contexts = grouped_contexts(1, prompts=3, group=2)
    seeds = [11, 22, 33, 44, 55, 66]
    sampling = dict(CASES[case], draw="inverse_cdf")
    together = lean(model, contexts, seeds=seeds, **sampling)
    assert len({len(row) for row in together}) > 1  # rows stopped at different steps
    assert lean(model, [contexts[4], contexts[1]], seeds=[seeds[4], seeds[1]], **sampling) == [together[4],
                                                                                                together[1]]
    torch.manual_seed(3)
    assert lean(model, contexts, **sampling) != together  # the global generator's draws are others


def test_a_bfloat16_model_decodes_on_the_cpu_with_float32_attention() -> None:
    model = tiny_qwen(0)
    for parameter in model.parameters():
        parameter.data = parameter.data.to(torch.bfloat16)
    contexts = grouped_contexts(1, prompts=3, group=2)
    torch.manual_seed(5)
    rows = lean(model, contexts, **dict(CASES["sampled"], draw="inverse_cdf"))
    assert all(rows) and all(0 <= token < VOCAB for row in rows for token in row)
