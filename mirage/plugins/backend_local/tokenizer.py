"""A word-level tokenizer built locally from text (no model hub needed)."""

from __future__ import annotations

from typing import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
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
    # Joins words with single spaces (no "##" pieces exist in a word-level vocabulary).
    tokenizer.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    trainer = trainers.WordLevelTrainer(special_tokens=list(SPECIAL.values()))
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    tokenizer.add_tokens(TAGS)  # after training, so the ids extend the vocabulary
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, **SPECIAL)
