"""The tiny vision-language policy: a LLaVA-architecture model built from a config in code.

A CLIP vision tower (16-pixel patches: one per tile of the grid worlds' pictures, each
with a learned absolute position) feeds a two-layer projector into the same Qwen2 text
model the text policy uses; transformers and vLLM both serve the architecture
(``LlavaForConditionalGeneration``). Its processor is built locally: a CLIP image
processor constructed in code (no resizing or cropping: the picture's pixels as they are,
normalised) and the word-level tokenizer with ``IMAGE_MARK`` as its image token.

Why LLaVA rather than Qwen2-VL: CLIP's learned absolute position embeddings put each
patch's place in its features, where Qwen2-VL places patches by rotary positions only
(they shape attention scores, not the values a later layer reads). Neither tiny model
learned to read the picture from the text policy's kind of reasoning; what taught the
LLaVA one to read was demonstrations whose reasoning reads the picture out tile by tile
(docs/warm-start.md, "The visual policies").
"""

from __future__ import annotations

from typing import Iterable

import torch
from transformers import CLIPVisionConfig, LlavaConfig, LlavaForConditionalGeneration, LlavaProcessor

from mirage.core.rl.image import IMAGE_MARK, Image
from mirage.plugins.backend_local.options import LocalOptions

PATCH = 16  # one patch per tile (mirage.envs.sprites.TILE)


def is_vision_model(model) -> bool:
    """Whether ``model`` reads pictures (its config has a vision tower)."""
    return is_vision_config(model.config)


def is_vision_config(config) -> bool:
    """Whether a transformers ``config`` has a vision tower."""
    return getattr(config, "vision_config", None) is not None


def image_processor(width: int, height: int):
    """CLIP normalisation of pictures taken as they are (``width`` x ``height`` pixels)."""
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    return CLIPImageProcessorPil(do_resize=False, do_center_crop=False,
                                 size={"height": height, "width": width},
                                 crop_size={"height": height, "width": width})


def add_image_token(tokenizer) -> int:
    """Add ``IMAGE_MARK`` to ``tokenizer`` as one special token; its id."""
    tokenizer.add_special_tokens({"additional_special_tokens": [IMAGE_MARK]})
    return tokenizer.convert_tokens_to_ids(IMAGE_MARK)


def build_processor(tokenizer, width: int, height: int) -> LlavaProcessor:
    """The processor of the tiny policy: the image processor above and ``tokenizer``
    (which has ``IMAGE_MARK``, :func:`add_image_token`)."""
    return LlavaProcessor(image_processor=image_processor(width, height), tokenizer=tokenizer,
                          patch_size=PATCH, vision_feature_select_strategy="default",
                          image_token=IMAGE_MARK, num_additional_image_tokens=1)


def tiny_vision_config(options: LocalOptions, text_config, image_token_id: int, width: int,
                       height: int) -> LlavaConfig:
    """A LLaVA config: a CLIP tower of ``options.vision_hidden`` x ``options.vision_layers``
    over ``width`` x ``height`` pictures (square: CLIP's positions form one grid) and the
    tiny Qwen2 ``text_config``."""
    if width != height or width % PATCH:
        raise ValueError(f"the tiny vision tower takes square pictures a multiple of {PATCH} pixels wide, "
                         f"not {width} x {height}")
    vision = CLIPVisionConfig(hidden_size=options.vision_hidden, intermediate_size=2 * options.vision_hidden,
                              num_hidden_layers=options.vision_layers, num_attention_heads=4,
                              image_size=width, patch_size=PATCH, num_channels=3,
                              projection_dim=options.vision_hidden)
    return LlavaConfig(vision_config=vision, text_config=text_config, image_token_index=image_token_id,
                       vision_feature_select_strategy="default", vision_feature_layer=-1,
                       image_seq_length=(width // PATCH) * (height // PATCH), tie_word_embeddings=True)


def build_tiny_vision_model(config: LlavaConfig):
    from mirage.plugins.backend_local.model import _BUILDING

    with _BUILDING:
        return LlavaForConditionalGeneration(config)


def processor_for(model, tokenizer, path: str | None = None):
    """The processor of a vision-language ``model``: the one saved at ``path`` (a
    checkpoint's ``processor_config.json``), else the tiny policy's, built from its config."""
    from pathlib import Path

    if path is not None and (Path(path).expanduser() / "processor_config.json").is_file():
        from transformers import AutoProcessor

        processor = AutoProcessor.from_pretrained(path)
        processor.tokenizer = tokenizer  # the one the backend encodes and decodes with
        return processor
    size = model.config.vision_config.image_size
    return build_processor(tokenizer, size, size)


def image_token_id(model) -> int:
    """The id that stands for one image feature in ``model``'s input ids."""
    config = model.config
    found = getattr(config, "image_token_index", None)
    return found if found is not None else config.image_token_id


def image_inputs(processor, images: Iterable[Image], device) -> dict[str, torch.Tensor]:
    """The pictures as the model's inputs (``pixel_values``, and whatever else the image
    processor gives, such as Qwen2-VL's ``image_grid_thw``); empty for none."""
    images = [image.pil for image in images]
    if not images:
        return {}
    out = processor.image_processor(images, return_tensors="pt")
    return {name: value.to(device) for name, value in out.items()}


def encode_with_images(processor, text: str, images: tuple[Image, ...]) -> list[int]:
    """Token ids of ``text`` with each ``IMAGE_MARK`` expanded to the picture's image
    tokens (the processor's own expansion, so a pretrained model's processor does the same)."""
    marks = text.count(IMAGE_MARK)
    if marks != len(images):
        raise ValueError(f"the prompt places {marks} pictures but {len(images)} were given")
    out = processor(text=[text], images=[image.pil for image in images] or None, add_special_tokens=False)
    return list(out["input_ids"][0])
