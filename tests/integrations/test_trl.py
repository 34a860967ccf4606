"""The TRL integration (mirage/integrations/trl, docs/integrations.md): a tiny GRPOTrainer
run logs the MI proxies on the diagnosed steps and the filter's metrics on every step; the
filter keeps what MIRAGE's own rules keep on the same returns; the scorer equals one full
forward per pair; the reasoning rule splits the default format and refuses a bad regex."""

from __future__ import annotations

import importlib
import math
import statistics
import sys
import tomllib
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

import trl  # the test extra installs it: a missing TRL fails here rather than skipping
from datasets import Dataset  # noqa: E402
from trl import GRPOConfig  # noqa: E402

from mirage.integrations.trl import MirageGRPOTrainer, MirageOptions  # noqa: E402
from mirage.integrations.trl.filtering import build_filter, filled_returns  # noqa: E402
from mirage.integrations.trl.reasoning import split_completion  # noqa: E402
from mirage.integrations.trl.scoring import cross_score  # noqa: E402
from mirage.plugins.backend_local.model import build_tiny_model  # noqa: E402
from mirage.plugins.backend_local.options import LocalOptions  # noqa: E402
from mirage.plugins.backend_local.tokenizer import build_word_tokenizer  # noqa: E402
from mirage.plugins.diagnostics.mi import mi_proxies  # noqa: E402
from mirage.plugins.filters.rules import top_k_indices, top_p_indices, trajectory_indices  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
WORDS = "go left right up down one two three four five the a is at".split()
GROUP = 4


@pytest.fixture(scope="module")
def tokenizer():
    return build_word_tokenizer([" ".join(WORDS)])


def tiny_model(tokenizer, seed: int = 0):
    torch.manual_seed(seed)
    return build_tiny_model(LocalOptions(hidden=32, layers=1, heads=2), len(tokenizer),
                            tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer.bos_token_id)


def varied_reward(completions, **kwargs):
    return [float(len(text) % 3) for text in completions]


def make_trainer(tokenizer, tmp_path, mirage: MirageOptions, max_steps: int = 4, **config):
    torch.set_num_threads(1)
    args = GRPOConfig(output_dir=str(tmp_path), max_steps=max_steps, num_generations=GROUP,
                      per_device_train_batch_size=16, max_completion_length=12, use_cpu=True,
                      report_to=[], logging_steps=1, save_strategy="no", bf16=False, fp16=False,
                      seed=0, **config)
    dataset = Dataset.from_dict({"prompt": [f"go {word} one two" for word in WORDS[:8]]})
    return MirageGRPOTrainer(model=tiny_model(tokenizer), reward_funcs=varied_reward, args=args,
                             train_dataset=dataset, processing_class=tokenizer, mirage=mirage)


def whole_completion(text: str) -> str | None:
    """A random model writes no tags: take all of the completion as the reasoning."""
    return text or None


# --- a tiny run -----------------------------------------------------------------------

def test_a_tiny_run_logs_the_mi_proxies_every_n_steps_and_the_filter_every_step(tokenizer, tmp_path):
    trainer = make_trainer(tokenizer, tmp_path, MirageOptions(
        every=2, filter="top_p", rho=0.9, reasoning=whole_completion))
    trainer.train()
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]

    def steps_with(name: str) -> list[int]:
        return [entry["step"] for entry in logged if name in entry]

    assert steps_with("mirage/filter/kept_ratio") == [1, 2, 3, 4]
    assert steps_with("mirage/filter/kept_trajectories") == [1, 2, 3, 4]
    for name in ("retrieval_acc", "retrieval_chance", "mi_est", "mi_zscore", "h_cond", "h_marg",
                 "format_valid", "reasoning_tokens"):
        assert steps_with(f"mirage/mi/{name}") == [2, 4], name
    assert steps_with("mirage/time/diagnose") == [2, 4]
    for entry in logged:
        assert 0 < entry["mirage/filter/kept_ratio"] <= 1
        if "mirage/mi/mi_est" in entry:
            assert entry["mirage/mi/retrieval_chance"] == 1 / 4  # 16 rows: 4 prompts x 4
            assert math.isclose(entry["mirage/mi/h_marg"],
                                entry["mirage/mi/mi_est"] + entry["mirage/mi/h_cond"], abs_tol=1e-9)


def test_the_pin_is_the_installed_release():
    """The trainer overrides private methods of this exact release (trainer.py)."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert extras["optional-dependencies"]["trl"] == [f"trl=={trl.__version__}"]
    assert not any(dep.startswith("trl") for dep in extras["dependencies"])


def test_importing_without_trl_names_the_extra(monkeypatch):
    for name in [m for m in sys.modules if m.startswith("mirage.integrations.trl")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "trl", None)
    with pytest.raises(ImportError, match=r"pip install 'mirage-rl\[trl\]'"):
        importlib.import_module("mirage.integrations.trl")


# --- the filter -----------------------------------------------------------------------

RETURNS = [
    [1.0, 0.0, 0.0, 0.0],
    [1.0, 1.0, 1.0, 1.0],  # no variance
    [0.0, 2.0, 0.0, 2.0],
    [0.0, 1.0, 0.0, 0.0],  # ties the first group
    [0.5, 0.0, 0.5, 0.0],
    [0.0, 0.0, 0.0, 0.0],  # no variance
]


def step_output(rows: int, width: int = 5) -> dict:
    generator = torch.Generator().manual_seed(1)
    mask = (torch.arange(width)[None, :] < torch.randint(1, width + 1, (rows, 1), generator=generator)).long()
    return {
        "prompt_ids": torch.ones(rows, 3, dtype=torch.long),
        "prompt_mask": torch.ones(rows, 3, dtype=torch.long),
        "completion_ids": torch.randint(5, 10, (rows, width), generator=generator) * mask,
        "completion_mask": mask,
        "advantages": torch.randn(rows, generator=generator),
        "num_items_in_batch": mask.sum(),
    }


@pytest.fixture(scope="module")
def idle_trainer(tokenizer, tmp_path_factory):
    return make_trainer(tokenizer, tmp_path_factory.mktemp("idle"), MirageOptions(filter="top_p"))


def kept_groups_of(keep: torch.Tensor) -> list[int]:
    return [g for g in range(len(RETURNS)) if keep[g * GROUP]]


@pytest.mark.parametrize("filter_name, rho", [("top_p", 0.5), ("top_p", 0.9), ("top_p", 1.0),
                                              ("top_k", 0.3), ("top_k", 0.5), ("none", 0.9)])
def test_the_kept_groups_are_mirages_own_selection(idle_trainer, filter_name, rho):
    idle_trainer.mirage_filter = build_filter(
        MirageOptions(filter=filter_name, rho=rho))
    rewards = torch.tensor([r for group in RETURNS for r in group])[:, None]
    output = step_output(len(rewards))
    before = {key: value.clone() for key, value in output.items()}
    metrics = idle_trainer.filter_rows(output, rewards)

    # MIRAGE's rules on the same returns, called here on their own (top_p: 0.5 keeps one
    # group, top_k 0.5 breaks the tie of groups 0 and 3 by index)
    variances = [statistics.variance(group) for group in RETURNS]
    if filter_name == "top_p":
        expected = top_p_indices(variances, rho)
    elif filter_name == "top_k":
        expected = top_k_indices(variances, rho, eligible=[v > 0 for v in variances])
    else:
        expected = list(range(len(RETURNS)))
    kept_rows = torch.tensor([g in expected for g in range(len(RETURNS)) for _ in range(GROUP)])
    assert kept_groups_of(output["completion_mask"].sum(1) > 0) == expected
    assert torch.equal(output["completion_mask"][kept_rows], before["completion_mask"][kept_rows])
    assert torch.equal(output["advantages"][kept_rows], before["advantages"][kept_rows])
    assert not output["completion_mask"][~kept_rows].any()
    assert not output["advantages"][~kept_rows].any()
    assert output["num_items_in_batch"] == before["completion_mask"][kept_rows].sum()
    assert metrics["filter/kept_ratio"] == len(expected) / len(RETURNS)
    assert metrics["filter/kept_trajectories"] == GROUP * len(expected)


def test_a_trajectory_level_selection_maps_onto_its_rows(idle_trainer):
    idle_trainer.mirage_filter = build_filter(MirageOptions(filter="trajectory", rho=0.5))
    rewards = torch.tensor([r for group in RETURNS for r in group])[:, None]
    output = step_output(len(rewards))
    idle_trainer.filter_rows(output, rewards)
    expected = [k in trajectory_indices(group, 0.5) for group in RETURNS for k in range(GROUP)]
    assert (output["completion_mask"].sum(1) > 0).tolist() == expected
    assert not all(expected)


def test_weighted_rewards_are_summed_before_ranking(idle_trainer):
    """Two reward functions with weights (1, 2): the filter ranks r1 + 2 r2, as GRPO's
    sum_then_normalize does."""
    idle_trainer.mirage_filter = build_filter(
        MirageOptions(filter="top_k", rho=0.2))
    idle_trainer.reward_weights = torch.tensor([1.0, 2.0])
    try:
        first = torch.tensor([0.0, 3.0, 0.0, 3.0] + [0.0, 0.0, 0.0, 0.0])
        second = torch.tensor([0.0, 0.0, 0.0, 0.0] + [0.0, 2.0, 0.0, 2.0])  # weighted: var 16/3 > 3
        output = step_output(8)
        idle_trainer.filter_rows(output, torch.stack([first, second], dim=1))
    finally:
        idle_trainer.reward_weights = torch.ones(1)
    assert (output["completion_mask"].sum(1) > 0).tolist() == [False] * 4 + [True] * 4


def test_unscorable_rewards_add_no_deviation():
    assert filled_returns([1.0, math.nan, 3.0, math.nan]) == [1.0, 2.0, 3.0, 2.0]
    assert filled_returns([math.nan, math.nan]) == [0.0, 0.0]


def test_a_filter_needs_one_scalar_reward_per_completion(tokenizer, tmp_path):
    with pytest.raises(ValueError, match="sum_then_normalize"):
        make_trainer(tokenizer, tmp_path, MirageOptions(filter="top_p"),
                     multi_objective_aggregation="normalize_then_sum")


def test_an_unknown_filter_lists_the_valid_ones(tokenizer, tmp_path):
    with pytest.raises(Exception, match="top_p"):
        make_trainer(tokenizer, tmp_path, MirageOptions(filter="no_such_filter"))


# --- the scorer -----------------------------------------------------------------------

def test_the_cross_scores_equal_one_full_forward_per_pair(tokenizer):
    model = tiny_model(tokenizer, seed=3)
    ids = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    prompts = [ids("go left one"), ids("go left one"), ids("the a is at two three"), ids("up")]
    prefixes = [ids("<think>"), [], ids("a"), ids("<think> the")]
    reasonings = [ids("one two three"), ids("four"), [], ids("five five left right")]
    model.train()
    scores = cross_score(model, prompts, prefixes, reasonings, tokenizer.pad_token_id, batch_size=3)
    assert model.training  # its mode is given back
    model.eval()
    columns = [prompts[0], prompts[2], prompts[3]]
    rows = [0, 1, 3]  # the empty reasoning is not scored
    assert scores.owners.tolist() == [0, 0, 2]
    assert scores.lengths.tolist() == [3, 1, 4]
    with torch.no_grad():
        for i, n in enumerate(rows):
            for j, prompt in enumerate(columns):
                context = prompt + prefixes[n]
                sequence = torch.tensor([context + reasonings[n]])
                logprobs = torch.log_softmax(model(input_ids=sequence).logits[0].double(), dim=-1)
                alone = sum(float(logprobs[len(context) + t - 1, token]) for t, token in enumerate(reasonings[n]))
                assert math.isclose(float(scores.logprobs[i, j]), alone, abs_tol=1e-5)


def test_identical_reasonings_retrieve_at_chance(tokenizer):
    model = tiny_model(tokenizer, seed=4)
    ids = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    prompts = [ids(f"go {word}") for word in ("left", "right", "up") for _ in range(2)]
    same = ids("one two three")
    scores = cross_score(model, prompts, [[]] * 6, [same] * 6, tokenizer.pad_token_id, batch_size=4)
    proxies = mi_proxies(scores.logprobs, scores.lengths, scores.owners)
    assert proxies["retrieval_chance"] == 1 / 3
    assert math.isclose(proxies["retrieval_acc"], 1 / 3)
    assert proxies["mi_est"] <= 1e-12  # mean_j L_j - log mean_j exp L_j <= 0 (Jensen)


def test_fewer_than_two_prompts_are_not_scored(tokenizer):
    model = tiny_model(tokenizer)
    assert cross_score(model, [[5], [5]], [[], []], [[6], [7]], 0, batch_size=2) is None


# --- the reasoning rule ---------------------------------------------------------------

def test_the_default_rule_reads_the_think_answer_format():
    options = MirageOptions()
    split = split_completion("<think>a b</think><answer>x</answer>", options.reasoning)
    assert (split.prefix, split.reasoning, split.valid) == ("<think>", "a b", True)
    spaced = split_completion("so <think> a b </think>\n<answer> x </answer>", options.reasoning)
    assert (spaced.prefix, spaced.reasoning, spaced.valid) == ("so <think>", " a b ", True)
    for malformed in ("<think>a b</think>", "a b", "<answer>x</answer><think>a</think>", ""):
        split = split_completion(malformed, options.reasoning)
        assert (split.reasoning, split.valid) == ("", False), malformed


def test_a_custom_rule_is_a_regex_or_a_function():
    regex = MirageOptions(reasoning=r"^(.*?)</think>")
    split = split_completion("a b</think><answer>x</answer>", regex.reasoning)
    assert (split.prefix, split.reasoning, split.valid) == ("", "a b", True)
    function = MirageOptions(reasoning=lambda text: text.split("||")[0] or None)
    split = split_completion("go left || right", function.reasoning)
    assert (split.prefix, split.reasoning, split.valid) == ("", "go left ", True)
    assert not split_completion("|| right", function.reasoning).valid


@pytest.mark.parametrize("bad", ["<think>.*</think>", "<think>(.*</think>"])
def test_a_bad_regex_is_refused_when_the_options_are_built(bad):
    with pytest.raises(ValidationError, match="reasoning"):
        MirageOptions(reasoning=bad)
