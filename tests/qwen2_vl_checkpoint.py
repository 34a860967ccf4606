"""A tiny Qwen2-VL / Qwen2.5-VL checkpoint built and saved locally (no hub), laid out as the
hub's Qwen2-VL-Instruct repositories are: ``config.json`` and the weights, the tokenizer
with its chat template, and ``preprocessor_config.json`` naming the image processor and
the processor class (no ``processor_config.json``, no video processor config).

The tokenizer is the project's word-level tokenizer trained on FrozenLake's image-mode
demonstrations, with Qwen2-VL's special tokens added; the chat template is Qwen2-VL-
Instruct's own. The image processor cuts 8-pixel patches merged 2 x 2, so a 64 x 64
picture is a 8 x 8 grid of patches: 16 image tokens.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

# Qwen2-VL-Instruct's chat template, as its hub repository ships it.
CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}Picture {{ image_count.value }}: "
    "{% endif %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
           "<|image_pad|>", "<|video_pad|>"]
PATCH, MERGE = 8, 2
FAMILIES = {"qwen2_vl": "Qwen2VLProcessor", "qwen2_5_vl": "Qwen2_5_VLProcessor"}


def word_tokenizer():
    """The word tokenizer of FrozenLake's image-mode demonstrations and the chat template's
    words, with Qwen2-VL's special tokens; ``<|im_end|>`` ends a turn (its eos)."""
    from mirage.core.config.run_config import EnvConfig
    from mirage.core.rl.demos import collect_demonstrations
    from mirage.core.rl.image import IMAGE_MARK
    from mirage.envs.frozenlake import FrozenLake, FrozenLakeOptions
    from mirage.plugins.backend_local.tokenizer import build_word_tokenizer

    demos = collect_demonstrations(FrozenLake, FrozenLakeOptions(observation="image"),
                                   EnvConfig(name="frozenlake", options={"observation": "image"}), 10, 0)
    corpus = [c.replace(IMAGE_MARK, " ") + "\n" + r for c, r in demos.pairs]
    tokenizer = build_word_tokenizer(corpus + ["system user assistant You are a helpful assistant ."])
    tokenizer.add_special_tokens({"additional_special_tokens": SPECIAL})
    tokenizer.eos_token, tokenizer.pad_token = "<|im_end|>", "<|endoftext|>"
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def model_config(family: str, tokenizer):
    """A Qwen2-VL (``qwen2_vl``) or Qwen2.5-VL (``qwen2_5_vl``) config: a 1-layer text model
    of width 32 (head dim 16, M-RoPE sections 2 + 3 + 3) and a 1-block vision tower."""
    from transformers import Qwen2_5_VLConfig, Qwen2VLConfig

    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in SPECIAL}
    text = dict(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=2048,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]},
                bos_token_id=None, eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"])
    tokens = dict(image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
                  vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"])
    if family == "qwen2_vl":
        vision = dict(depth=1, embed_dim=16, hidden_size=32, num_heads=2, patch_size=PATCH,
                      spatial_merge_size=MERGE, temporal_patch_size=2)
        return Qwen2VLConfig(text_config=text, vision_config=vision, **tokens)
    vision = dict(depth=1, hidden_size=16, intermediate_size=32, out_hidden_size=32, num_heads=2, patch_size=PATCH,
                  spatial_merge_size=MERGE, temporal_patch_size=2, window_size=32, fullatt_block_indexes=[0])
    return Qwen2_5_VLConfig(text_config=text, vision_config=vision, **tokens)


def image_processor():
    """Qwen2-VL's image processor (its PIL backend: no torchvision needed) for 16 x 16 to
    64 x 64 pictures."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    return Qwen2VLImageProcessorPil(patch_size=PATCH, merge_size=MERGE, temporal_patch_size=2,
                                    min_pixels=16 * 16, max_pixels=64 * 64)


def save_checkpoint(target: Path, family: str = "qwen2_vl", seed: int = 0) -> Path:
    """A freshly initialised tiny ``family`` model with its tokenizer, chat template and
    image processor, saved at ``target``."""
    from transformers import AutoModelForImageTextToText

    tokenizer = word_tokenizer()
    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(model_config(family, tokenizer))
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)
    image_processor().save_pretrained(target)
    preprocessor = target / "preprocessor_config.json"
    saved = json.loads(preprocessor.read_text())
    preprocessor.write_text(json.dumps({**saved, "processor_class": FAMILIES[family]}, indent=2))
    return target
