"""The table of docs/gpu.md: Qwen2.5 0.5B, 3B and 7B on 24 GB and 80 GB cards, full and
LoRA, from the plan itself (tests/docs keep the doc's copy equal to :func:`card_table`).

    .venv/bin/python -m mirage.core.memory.cards   # prints the table
"""

from __future__ import annotations

from dataclasses import replace

from mirage.core.memory.plan import GIB, Lora, Settings, estimate
from mirage.core.memory.run_plan import PROMPT_TOKENS
from mirage.core.memory.shape import QWEN25, ModelShape

CARDS = {"24 GB": 24e9, "80 GB": 80e9}
# The default run (P x G = 8 x 16, micro-batch 128, 40 response tokens, GRPO without KL) in
# bfloat16, with the instruction in the prompt (run_plan.PROMPT_TOKENS)
GPU_RUN = Settings(micro_batch=128, rollout_rows=128, context_tokens=PROMPT_TOKENS[True], response_tokens=40, dtype="bfloat16")
LORA = Lora(16)  # attention and MLP projections


def _largest_micro_batch(shape: ModelShape, s: Settings, limit: float) -> int | None:
    best, size = None, 1
    while size <= s.micro_batch and estimate(shape, replace(s, micro_batch=size)).peak <= limit:
        best, size = size, size * 2
    return best


def card_cell(shape: ModelShape, s: Settings, limit: float) -> str:
    """What runs on a card of ``limit`` bytes: the largest power-of-two micro-batch, with
    gradient checkpointing where it needs it (and fsdp over the fewest ranks), or why
    nothing does."""
    if estimate(shape, s).peak <= limit:
        return f"fits at micro-batch {s.micro_batch}"
    micro = _largest_micro_batch(shape, s, limit)
    if micro is not None:
        return f"micro-batch {micro}"
    checkpointed = replace(s, gradient_checkpointing=True)
    micro = _largest_micro_batch(shape, checkpointed, limit)
    if micro is not None:
        return f"micro-batch {micro}, checkpointed"
    for ranks in (2, 4, 8):
        micro = _largest_micro_batch(shape, replace(checkpointed, fsdp=True, ranks=ranks), limit)
        if micro is not None:
            return f"fsdp over {ranks}, micro-batch {micro}, checkpointed"
    smallest = estimate(shape, replace(checkpointed, micro_batch=1))
    binding = max(("rollout", "score", "update"), key=smallest.phase_total)
    return f"no ({binding} needs {smallest.phase_total(binding) / GIB:.0f} GiB)"


def card_table() -> str:
    head = ["model", "training", "trained parameters", "peak at micro-batch 128 (rollout / score / update), GiB",
            *(f"{card} card" for card in CARDS)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for size, shape in QWEN25.items():
        for training, lora in (("full", None), ("LoRA r16", LORA)):
            s = replace(GPU_RUN, lora=lora)
            plan = estimate(shape, s)
            trained = shape.lora_parameters(lora.rank, lora.targets) if lora else shape.parameters()
            phases = " / ".join(f"{plan.phase_total(p) / GIB:.1f}" for p in ("rollout", "score", "update"))
            cells = [f"Qwen2.5-{size}", training, f"{trained / 1e6:,.1f}M", phases,
                     *(card_cell(shape, s, limit) for limit in CARDS.values())]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(card_table())
