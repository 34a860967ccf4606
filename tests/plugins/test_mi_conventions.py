"""The MI proxies under MIRAGE's conventions and the reference code's (docs/conventions.md).

Every expected value is written from the formulas (PAPER.md sections 2 and 6) and checked
against the numbers of issue #46, where RAGEN's own code was run on the same inputs.
"""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mirage.core.config.run_config import RunConfig
from mirage.core.errors import ConfigError
from mirage.core.parallel.world import World
from mirage.core.rl.backend import CrossScores
from mirage.core.rl.batch import Batch, Group, Trajectory, Turn
from mirage.core.run.validate import component_options
from mirage.plugins.diagnostics.conventions import PRESETS, MIConventions
from mirage.plugins.diagnostics.cross_scoring import cross_score, drawn_turns
from mirage.plugins.diagnostics.mi import MIOptions, MutualInformation, mi_proxies
from mirage.plugins.diagnostics.retrieval import recall

MIRAGE, RAGEN = PRESETS["mirage"], PRESETS["ragen"]
PER_TOKEN = {"mi_est", "mi_zscore", "h_marg"}  # the only names whose value the scale moves


def lme(values: list[float]) -> float:
    """log mean exp, by hand."""
    return math.log(sum(math.exp(v) for v in values) / len(values))


# (a) the per-token marginal

def test_per_token_marginal_smallest_case():
    # P = 2, |Z| = 2; each reasoning -1 per token under its own prompt, -2 under the other
    scores = torch.tensor([[-2.0, -4.0], [-4.0, -2.0]], dtype=torch.float64)
    lengths, owner = torch.tensor([2, 2]), torch.tensor([0, 1])
    of_sums = -1.0 - lme([-2.0, -4.0]) / 2  # (matched - log mean exp L) / |Z|
    of_means = -1.0 - lme([-1.0, -2.0])  # matched / |Z| - log mean exp (L / |Z|)
    assert of_sums == pytest.approx(0.283, abs=5e-4) and of_means == pytest.approx(0.380, abs=5e-4)
    default = mi_proxies(scores, lengths, owner)
    ragen = mi_proxies(scores, lengths, owner, conventions=RAGEN)
    assert default["mi_est"] == pytest.approx(of_sums, abs=1e-12)
    assert ragen["mi_est"] == pytest.approx(of_means, abs=1e-12)
    for m in (default, ragen):  # both scales are logged whichever is chosen
        assert m["mi_est_of_sums"] == pytest.approx(of_sums, abs=1e-12)
        assert m["mi_est_of_means"] == pytest.approx(of_means, abs=1e-12)
        assert m["h_marg"] == m["mi_est"] + m["h_cond"]


def test_per_token_marginal_perfect_retrieval_at_p8():
    # P = 8, |Z| = 100, own prompt -1 per token, every other -1.5: perfect retrieval
    scores = torch.full((8, 8), -150.0, dtype=torch.float64)
    scores[range(8), range(8)] = -100.0
    lengths, owner = torch.full((8,), 100), torch.arange(8)
    of_sums = (-100.0 - lme([-100.0] + [-150.0] * 7)) / 100
    of_means = -1.0 - lme([-1.0] + [-1.5] * 7)
    assert of_sums == pytest.approx(0.0208, abs=5e-5) and of_means == pytest.approx(0.422, abs=5e-4)
    default = mi_proxies(scores, lengths, owner)
    ragen = mi_proxies(scores, lengths, owner, conventions=RAGEN)
    assert default["mi_est"] == pytest.approx(of_sums, rel=1e-12)
    assert ragen["mi_est"] == pytest.approx(of_means, rel=1e-12)
    # every row alike: std(marginal) = 0, so MI-ZScore = MI-Est / 1e-3
    assert default["mi_zscore"] == pytest.approx(20.8, abs=0.01)
    assert ragen["mi_zscore"] == pytest.approx(422.0, abs=0.1)
    assert ragen["mi_zscore_of_sums"] == default["mi_zscore"]
    assert default["retrieval_acc"] == ragen["retrieval_acc"] == 1.0


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 6), st.integers(1, 4), st.integers(0, 10_000))
def test_mi_est_of_means_is_never_below_mi_est_of_sums(prompts, samples, seed):
    # power-mean inequality: mean_j x_j^(1/|Z|) <= (mean_j x_j)^(1/|Z|) for |Z| >= 1
    generator = torch.Generator().manual_seed(seed)
    n = prompts * samples
    scores = -torch.rand(n, prompts, generator=generator, dtype=torch.float64) * 40
    lengths = torch.randint(1, 30, (n,), generator=generator)
    m = mi_proxies(scores, lengths, torch.arange(n) % prompts)
    assert m["mi_est_of_means"] >= m["mi_est_of_sums"] - 1e-12
    ones = mi_proxies(scores, torch.ones(n, dtype=torch.long), torch.arange(n) % prompts)
    assert ones["mi_est_of_means"] == pytest.approx(ones["mi_est_of_sums"], abs=1e-12)  # |Z| = 1


def test_mi_zscore_seq_hand_checked():
    scores = torch.tensor([[-2.0, -4.0], [-6.0, -3.0], [-5.0, -5.0]], dtype=torch.float64)
    owner, lengths = torch.tensor([0, 1, 0]), torch.tensor([2, 3, 5])
    marginal = [lme([-2.0, -4.0]), lme([-6.0, -3.0]), -5.0]
    gap = [a - b for a, b in zip([-2.0, -3.0, -5.0], marginal)]
    mean = sum(marginal) / 3
    std = math.sqrt(sum((x - mean) ** 2 for x in marginal) / 3)
    for conventions in (MIRAGE, RAGEN):
        m = mi_proxies(scores, lengths, owner, 1e-3, conventions)
        assert m["mi_zscore_seq"] == pytest.approx(sum(gap) / 3 / (std + 1e-3), abs=1e-12)


# (b) identical prompts, (d) empty reasoning: through cross_score

class StubRun:
    """Cross-scores through a hook: reasoning token 100 + c scores 0 under context [c] (and
    any context starting with c), ``other`` under the rest, so identical prompts tie."""

    def __init__(self, other: float = -2.0):
        self.world = World()
        self.state: dict = {}
        outer = self

        class Hook:
            def mirage_cross_score(self, run, contexts, responses):
                outer.asked = (contexts, responses)
                rows = [[0.0 if r[0] - 100 == c[0] else other for c in contexts] for r in responses]
                logprobs = torch.tensor(rows, dtype=torch.float64)
                return CrossScores(logprobs, torch.ones_like(logprobs))

        class Backend:
            def encode(self, text):
                return [int(t) for t in text.split()]

        self.hook, self.backend = Hook(), Backend()


def turn(context: list[int], reasoning: str) -> Turn:
    return Turn(context="", response=reasoning + " </think> <answer> Up </answer>", reasoning=reasoning,
                answer="", actions=[], format_ok=True, reward=0.0, context_ids=context, response_ids=[1])


def test_identical_prompts_one_column_per_group_against_merged():
    # prompts A, A, B (groups 0, 1, 2), one reasoning each, |Z| = 1
    turns = [turn([0], "100"), turn([0], "100"), turn([1], "101")]
    reasonings = [[100], [100], [101]]
    merged = cross_score(StubRun(), turns, reasonings)
    separate = cross_score(StubRun(), turns, reasonings, groups=[0, 1, 2])
    assert merged.logprobs.shape == (3, 2) and merged.signatures is None
    assert separate.logprobs.shape == (3, 3) and separate.signatures.tolist() == [0, 0, 1]
    default = mi_proxies(merged.logprobs, merged.lengths, merged.owners)
    ragen = mi_proxies(separate.logprobs, separate.lengths, separate.owners, conventions=RAGEN,
                       signatures=separate.signatures)
    # chance: 1/C against the mean share of columns holding one's own prompt
    assert default["retrieval_chance"] == 0.5
    assert ragen["retrieval_chance"] == pytest.approx((2 / 3 + 2 / 3 + 1 / 3) / 3) == pytest.approx(0.556, abs=5e-4)
    assert ragen["recall@2_chance"] == 1.0  # min(1, 5/9 x 2)
    seq_merged = (2 * (0 - lme([0, -2])) + (0 - lme([-2, 0]))) / 3
    seq_separate = (2 * (0 - lme([0, 0, -2])) + (0 - lme([-2, -2, 0]))) / 3
    assert default["mi_seq_est"] == pytest.approx(seq_merged, abs=1e-12) == pytest.approx(0.566, abs=5e-4)
    assert ragen["mi_seq_est"] == pytest.approx(seq_separate, abs=1e-12) == pytest.approx(0.513, abs=5e-4)
    assert default["retrieval_acc"] == ragen["retrieval_acc"] == 1.0  # an identical column is a hit


def test_an_identical_prompt_is_scored_once_and_its_columns_tie_exactly():
    run = StubRun()
    scored = cross_score(run, [turn([0], "100"), turn([0], "100"), turn([1], "101")],
                         [[100], [100], [101]], groups=[0, 1, 2])
    assert run.asked[0] == [[0], [1]]  # two distinct prompts asked for, three columns filled
    assert torch.equal(scored.logprobs[:, 0], scored.logprobs[:, 1])


def test_expected_credit_with_several_columns_of_ones_prompt():
    # one row, columns A, A, B all tied: the chance that an A is drawn first is 2/3
    scores = torch.zeros(1, 3, dtype=torch.float64)
    signatures = torch.tensor([0, 0, 1])
    got = recall(scores, torch.tensor([0]), 1, "expected", signatures)
    assert float(got) == pytest.approx(1 - math.comb(1, 1) / math.comb(3, 1))
    assert float(recall(scores, torch.tensor([2]), 1, "expected", signatures)) == pytest.approx(1 / 3)
    assert float(recall(scores, torch.tensor([2]), 2, "expected", signatures)) == pytest.approx(2 / 3)
    assert float(recall(scores, torch.tensor([2]), 1, "first", signatures)) == 0.0


def test_a_prompt_whose_reasonings_are_all_empty():
    # P = 2, the second prompt's reasoning is empty
    turns, reasonings = [turn([0], "100"), turn([1], "")], [[100], []]
    kept = cross_score(StubRun(), turns, reasonings)
    assert kept.logprobs.shape == (1, 2)  # MIRAGE: still a column
    assert cross_score(StubRun(), turns, reasonings, drop_empty=True) is None  # RAGEN: nothing
    assert cross_score(StubRun(), turns, reasonings, groups=[0, 1], drop_empty=True) is None
    m = mi_proxies(kept.logprobs, kept.lengths, kept.owners)
    assert m["retrieval_chance"] == 0.5 and m["retrieval_acc"] == 1.0


# (e) exact ties in retrieval

def test_retrieval_ties_first_index_against_expected_credit():
    # reasoning 0 wins outright; reasoning 1 ties its own column 1 with column 0
    scores = torch.tensor([[0.0, -1.0], [0.0, 0.0]], dtype=torch.float64)
    owner, lengths = torch.tensor([0, 1]), torch.ones(2, dtype=torch.long)
    assert mi_proxies(scores, lengths, owner)["retrieval_acc"] == 0.75
    assert mi_proxies(scores, lengths, owner, conventions=RAGEN)["retrieval_acc"] == 0.5
    # first index: a tied own column wins only when it comes first
    tied = torch.tensor([[3.0, 5.0, 5.0, 5.0, 1.0]])
    assert [float(recall(tied, torch.tensor([2]), k, "first")) for k in (1, 2, 3)] == [0.0, 1.0, 1.0]
    assert float(recall(tied, torch.tensor([1]), 1, "first")) == 1.0


def test_the_ragen_preset_ranks_recall_at_k_in_torch_topks_order():
    """RAGEN's Recall@k takes ``torch.topk`` over the best min(8, C) columns, whose order
    among ties is torch's, not the lowest index's (an outside check on RAGEN's own code
    found 159 of 506 cases with ties apart until the preset ranked so). P = 4, one
    reasoning each: reasoning 0 scores every column alike, the others are retrieved."""
    scores = torch.tensor([[0.0, 0.0, 0.0, 0.0],
                           [-9.0, 0.0, -9.0, -9.0],
                           [-9.0, -9.0, 0.0, -9.0],
                           [-9.0, -9.0, -9.0, 0.0]], dtype=torch.float64)
    owner = torch.arange(4)
    top2 = torch.topk(scores[0], 2).indices.tolist()  # torch's order among the four tied columns
    ragen = float(recall(scores, owner, 2, "topk").mean())
    assert ragen == (3 + (0 in top2)) / 4
    assert float(recall(scores, owner, 2, "first").mean()) == 1.0  # column 0 comes first by index
    assert float(recall(scores, owner, 2, "expected").mean()) == 0.875  # 2 of 4 tied: 0.5 for row 0
    # k = 1 is argmax, the first maximal column, under both first and topk
    assert recall(scores, owner, 1, "topk").tolist() == recall(scores, owner, 1, "first").tolist() == [1.0] * 4
    assert RAGEN.retrieval_ties == "topk"


# (c) trajectory scope: draws with replacement

def batch_of(turn_lists: list[list[Turn]]) -> Batch:
    groups = [Group(prompt_index=p, seed=p, trajectories=[
        Trajectory(prompt_index=p, sample_index=0, seed=p, turns=turns)]) for p, turns in enumerate(turn_lists)]
    return Batch(step=5, groups=groups)


def test_draws_with_replacement_skip_trajectories_without_a_reasoning():
    has = lambda t: bool(t.reasoning)  # noqa: E731
    batch = batch_of([[turn([0], "100"), turn([1], "101")], [turn([2], "")]])
    # min(32, 2 turns with a reasoning) = 2 draws; one landing on trajectory 1 gives nothing
    sizes = set()
    for seed in range(40):
        drawn = drawn_turns(batch, 32, seed=seed, has_reasoning=has)
        assert all(t.reasoning for t in drawn)
        assert drawn == drawn_turns(batch, 32, seed=seed, has_reasoning=has)  # reproducible
        sizes.add(len(drawn))
    assert sizes == {0, 1, 2}
    many = batch_of([[turn([p], str(100 + p))] for p in range(4)])
    draws = [drawn_turns(many, 4, seed=s, has_reasoning=has) for s in range(40)]
    assert all(len(d) == 4 for d in draws)
    assert any(len({id(t) for t in d}) < 4 for d in draws)  # with replacement: repeats happen


def test_trajectory_scope_one_column_per_draw_with_repeats_as_hits():
    # the same turn drawn twice: two columns holding one prompt, both hits, chance 1/2
    a, b = turn([0], "100"), turn([1], "101")
    scored = cross_score(StubRun(), [a, a, b], [[100], [100], [101]], groups=[0, 1, 2])
    m = mi_proxies(scored.logprobs, scored.lengths, scored.owners, conventions=RAGEN,
                   signatures=scored.signatures)
    assert m["retrieval_acc"] == 1.0 and m["retrieval_chance"] == pytest.approx(5 / 9)


# (f) the EMA's first check, and the options

def diagnostic(options: dict) -> MutualInformation:
    config = RunConfig()
    return MutualInformation(config, component_options(MutualInformation, options, "diagnostic", "mi",
                                                       "diagnostics.options.mi."))


def step_batch(step: int) -> Batch:
    batch = batch_of([[turn([0], "100")], [turn([1], "101")]])
    batch.step = step
    return batch


def test_the_ragen_convention_starts_checking_at_step_one():
    run = StubRun(other=-3.0)
    default, ragen = diagnostic({"scopes": ["first_turn"]}), diagnostic({"scopes": ["first_turn"], "convention": "ragen"})
    assert "mi/first_turn/mi_est" in default.measure(run, step_batch(0))
    assert ragen.measure(StubRun(), step_batch(0)) == {}
    assert "mi/first_turn/mi_est" in ragen.measure(StubRun(), step_batch(1))


def test_the_ema_moves_by_one_check():
    # two prompts, reasonings of 1 and 3 tokens: per-token marginals m and m / 3 with
    # m = log mean exp [0, other], so std(marginal / |Z|) = |m| / 3 at each check
    def spread(other: float) -> float:
        return abs(lme([0.0, other])) / 3

    others = {0: -1.0, 1: -2.0, 5: -4.0}
    default = diagnostic({"scopes": ["first_turn"]})
    ragen = diagnostic({"scopes": ["first_turn"], "convention": "ragen", "token_marginal": "of_sums"})
    runs = {"default": StubRun(), "ragen": StubRun()}
    for step, other in others.items():
        batch = batch_of([[turn([0], "100")], [turn([1], "101 7 7")]])
        batch.step = step
        for name, mi in (("default", default), ("ragen", ragen)):
            runs[name].hook = StubRun(other).hook
            mi.measure(runs[name], batch)
    by_hand = spread(-1.0)
    for other in (-2.0, -4.0):
        by_hand = 0.9 * by_hand + 0.1 * spread(other)
    assert runs["default"].state["mi_marginal_std_ema"]["first_turn"] == pytest.approx(by_hand, rel=1e-12)
    one_later = 0.9 * spread(-2.0) + 0.1 * spread(-4.0)  # the EMA starts at step 1
    assert runs["ragen"].state["mi_marginal_std_ema"]["first_turn"] == pytest.approx(one_later, rel=1e-12)


def test_the_preset_sets_every_convention_and_a_given_one_wins():
    assert MIOptions().conventions() == MIConventions() == MIRAGE
    assert MIOptions(convention="ragen").conventions() == RAGEN
    mixed = MIOptions(convention="ragen", token_marginal="of_sums").conventions()
    assert mixed.token_marginal == "of_sums" and mixed.columns == "separate"
    assert MIOptions(retrieval_ties="first").conventions().columns == "merged"


@pytest.mark.parametrize("option, value, valid", [
    ("convention", "verl", "'mirage' or 'ragen'"),
    ("token_marginal", "of_logs", "'of_sums' or 'of_means'"),
    ("columns", "grouped", "'merged' or 'separate'"),
    ("trajectory_draws", "bootstrap", "'without_replacement' or 'with_replacement'"),
    ("empty_columns", "skip", "'keep' or 'drop'"),
    ("retrieval_ties", "random", "'expected', 'first' or 'topk'"),
])
def test_an_unknown_convention_is_refused_naming_the_valid_ones(option, value, valid):
    with pytest.raises(ConfigError, match=f"diagnostics.options.mi.{option}.*{valid}"):
        diagnostic({option: value})


# where the conventions cannot matter, the presets agree exactly

@settings(max_examples=60, deadline=None)
@given(st.integers(2, 8), st.integers(1, 4), st.integers(0, 10_000))
def test_presets_agree_exactly_on_distinct_prompts_without_ties_or_empty_reasoning(prompts, samples, seed):
    generator = torch.Generator().manual_seed(seed)
    n = prompts * samples
    scores = -torch.rand(n, prompts, generator=generator, dtype=torch.float64) * 40  # no ties
    owner = torch.arange(n) % prompts
    lengths = torch.randint(1, 30, (n,), generator=generator)
    default = mi_proxies(scores, lengths, owner)
    ragen = mi_proxies(scores, lengths, owner, conventions=RAGEN, signatures=torch.arange(prompts))
    assert default.keys() == ragen.keys()
    for name in default.keys() - PER_TOKEN:
        assert ragen[name] == default[name], name
    ones = torch.ones(n, dtype=torch.long)  # |Z| = 1: the two per-token marginals coincide
    default, ragen = (mi_proxies(scores, ones, owner, conventions=c) for c in (MIRAGE, RAGEN))
    for name in PER_TOKEN:
        assert ragen[name] == pytest.approx(default[name], rel=1e-12, abs=1e-12)


def test_presets_agree_through_the_diagnostic_on_distinct_prompts():
    batch = batch_of([[turn([p], str(100 + p))] for p in range(4)])
    default = diagnostic({"scopes": ["first_turn"]}).measure(StubRun(), batch)
    ragen = diagnostic({"scopes": ["first_turn"], "convention": "ragen",
                        "token_marginal": "of_sums"}).measure(StubRun(), batch)
    assert default == ragen


@pytest.mark.slow
def test_a_tiny_run_with_both_ragen_presets(tiny_config, tmp_path):
    from mirage.core.run.loop import execute
    from mirage.core.run.validate import build_config
    from mirage.core.store.run_store import RunStore

    data = tiny_config()
    data["steps"] = 2
    data["diagnostics"] = {"every": 1, "options": {"mi": {"convention": "ragen"}}}
    data["filter"] = {"name": "top_p", "options": {"convention": "ragen"}}
    db = tmp_path / "runs.duckdb"
    run_id = execute(build_config(data), db, progress=False)
    metrics = {(step, name): value for step, name, value in RunStore(db).metrics(run_id)}
    assert not any(name.startswith("mi/") for step, name in metrics if step == 0)  # from step 1
    for scope in ("first_turn", "trajectory"):
        if (1, f"mi/{scope}/mi_est") in metrics:
            assert metrics[(1, f"mi/{scope}/mi_est")] == metrics[(1, f"mi/{scope}/mi_est_of_means")]
    assert (1, "mi/first_turn/reasoning_tokens") in metrics
