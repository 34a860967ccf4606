"""How far the sampler's log-probs of its own sampled tokens are from the scorer's.

The engine samples (often in bf16, with its own kernels) and reports the log-prob of
every token it picked; the torch policy then scores the same (context, response) pairs
for the update's old log-probs. The two should agree; their gap is the off-policyness
that bf16 sampling against float32 training brings in.
"""

from __future__ import annotations

import math

import torch

ABS_DIFF = "backend/sampler_logprob_abs_diff"
KL = "backend/sampler_kl"


class SamplerAgreement:
    """Remembers the sampler's log-probs per sampled pair until the scorer scores that
    pair, and averages the gap over every compared token until :meth:`drain`."""

    def __init__(self) -> None:
        self.pending: dict[tuple[tuple[int, ...], tuple[int, ...]], list[float]] = {}
        self.abs_diff = self.kl = 0.0  # sums over the compared tokens
        self.tokens = 0

    def expect(self, context: list[int], response: list[int], logprobs: list[float]) -> None:
        """The sampler produced ``response`` after ``context`` with these token log-probs."""
        self.pending[(tuple(context), tuple(response))] = logprobs

    def compare(self, contexts: list[list[int]], responses: list[list[int]],
                scored: torch.Tensor) -> None:
        """``scored`` ``[B, L]`` holds the scorer's log-probs of ``responses``; each pair
        the sampler produced is compared once (a later scoring of it is not counted again)."""
        for row, (context, response) in enumerate(zip(contexts, responses)):
            sampled = self.pending.pop((tuple(context), tuple(response)), None)
            if sampled is None or not response:
                continue
            scorer = scored[row, : len(response)].double().tolist()
            for sampler_lp, scorer_lp in zip(sampled, scorer):
                self.abs_diff += abs(sampler_lp - scorer_lp)
                # k3 estimator (Schulman, "Approximating KL divergence"): with r = log q - log p
                # on tokens drawn from p, E[exp(r) - 1 - r] = KL(p || q) and every term is >= 0.
                gap = scorer_lp - sampler_lp
                self.kl += math.expm1(gap) - gap
            self.tokens += len(scorer)

    def drain(self) -> dict[str, float]:
        """Token means since the last drain (nothing when no token was compared); forgets
        the pairs never scored (validation's)."""
        measured = {} if not self.tokens else {
            ABS_DIFF: self.abs_diff / self.tokens, KL: self.kl / self.tokens}
        self.pending.clear()
        self.abs_diff = self.kl = 0.0
        self.tokens = 0
        return measured
