"""A word-level tokenizer built locally from text (no model hub needed)."""

from __future__ import annotations

from typing import Iterable

from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

SPECIAL = {"pad_token": "[PAD]", "unk_token": "[UNK]", "bos_token": "[BOS]", "eos_token": "[EOS]"}
# Kept whole so the answer format is a handful of tokens, not split on punctuation.
TAGS = ["<think>", "</think>", "<answer>", "</answer>", "||"]


def build_word_tokenizer(corpus: Iterable[str]) -> PreTrainedTokenizerFast:
    """Train a whitespace/punctuation word-level vocabulary on ``corpus``."""
    tokenizer = Tokenizer(models.WordLevel(unk_token=SPECIAL["unk_token"]))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation("isolated")]
    )
    tokenizer.add_special_tokens(list(SPECIAL.values()))
    tokenizer.add_tokens(TAGS)
    trainer = trainers.WordLevelTrainer(special_tokens=list(SPECIAL.values()) + TAGS)
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, **SPECIAL)
