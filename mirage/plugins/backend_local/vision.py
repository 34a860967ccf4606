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

from dataclasses import dataclass
from typing import Iterable

import torch
from transformers import CLIPVisionConfig, LlavaConfig, LlavaForConditionalGeneration, LlavaProcessor

from mirage.core.rl.image import IMAGE_MARK, Image
from mirage.plugins.backend_local import saved_processor
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
    checkpoint's processor configs, saved_processor.py), else the tiny policy's, built
    from its config."""
    if saved_processor.saved(path):
        return saved_processor.load(path, tokenizer)
    size = model.config.vision_config.image_size
    return build_processor(tokenizer, size, size)


@dataclass(frozen=True)
class LanguagePart:
    """The text model inside a LLaVA policy, shaped as the lean loops (prompt_cache.py)
    read a causal LM: ``model`` the decoder, ``lm_head``, its ``config``."""

    model: torch.nn.Module
    lm_head: torch.nn.Module
    config: object
    generation_config: object
    device: torch.device
    dtype: torch.dtype


def language_part(model) -> LanguagePart | None:
    """A LLaVA ``model``'s text model (its pictures enter as input embeddings, so every
    position after them is the text model's alone); None for any other model (Qwen2-VL
    places pictures by 3-D rotary positions, which the lean loops do not compute)."""
    if not isinstance(model, LlavaForConditionalGeneration):  # LoRA adapts its layers in place
        return None
    return LanguagePart(model.model.language_model, model.lm_head, model.config.text_config,
                        model.generation_config, model.device, model.dtype)


def merged_embeddings(model, ids: torch.Tensor, pixels: dict[str, torch.Tensor]) -> torch.Tensor:
    """The input embeddings ``[B, T, H]`` a LLaVA ``model``'s forward builds for ``ids``
    ``[B, T]`` and the pictures' inputs ``pixels`` (image_inputs, one picture per image
    run, in row order): token embeddings with each picture's projected features in
    place of its image tokens."""
    body, config = model.model, model.config
    embeds = body.get_input_embeddings()(ids)
    features = body.get_image_features(pixel_values=pixels["pixel_values"],
                                       vision_feature_layer=config.vision_feature_layer,
                                       vision_feature_select_strategy=config.vision_feature_select_strategy,
                                       return_dict=True).pooler_output
    features = torch.cat(list(features), dim=0).to(embeds.dtype)
    places = (ids == config.image_token_id)[..., None].expand_as(embeds)
    return embeds.masked_scatter(places, features)


def image_placeholder(processor) -> str:
    """What stands for one picture in a prompt's text before the processor expands it: what
    the chat template writes for an image (Qwen2-VL's ``<|vision_start|><|image_pad|>
    <|vision_end|>``), else the processor's image token (the tiny policy's ``IMAGE_MARK``)."""
    image_token = processor.image_token
    template = getattr(processor, "chat_template", None) or getattr(processor.tokenizer, "chat_template", None)
    if isinstance(template, dict):  # named templates: the default one
        template = template.get("default")
    if not template:
        return image_token
    before, after = "MIRAGE-BEFORE-PICTURE", "MIRAGE-AFTER-PICTURE"
    content = [{"type": "text", "text": before}, {"type": "image"}, {"type": "text", "text": after}]
    try:
        text = processor.tokenizer.apply_chat_template([{"role": "user", "content": content}],
                                                       chat_template=template, tokenize=False)
    except Exception:  # a template for text messages only (jinja cannot read the parts)
        return image_token
    start, end = text.find(before), text.find(after)
    between = text[start + len(before) : end] if 0 <= start < end else ""
    # a template that writes no image (text only) or something else: the token alone
    return between.strip() if between.count(image_token) == 1 else image_token


def image_token_id(model) -> int:
    """The id that stands for one image feature in ``model``'s input ids."""
    config = model.config
    found = getattr(config, "image_token_index", None)
    return found if found is not None else config.image_token_id


def placeholder_ids(model, processor) -> list[int]:
    """The ids that stand for a picture's (or a video's, or a sound's) features: a response
    never writes one (the model would look for features it was not given)."""
    found = {image_token_id(model)}
    for kind in ("image_token_ids", "video_token_ids", "audio_token_ids"):
        found |= {i for i in getattr(processor, kind, ()) if i is not None}
    return sorted(found)


def image_inputs(processor, images: Iterable[Image], device, ids: torch.Tensor | None = None
                 ) -> dict[str, torch.Tensor]:
    """The pictures as the model's inputs (``pixel_values``, and whatever else the image
    processor gives, such as Qwen2-VL's ``image_grid_thw``); empty for none. With the
    batch's input ``ids`` ``[B, T]``, also the token types a processor gives beside them
    (Qwen2-VL's ``mm_token_type_ids``, from which its model places the pictures' 3-D
    rotary positions)."""
    images = [image.pil for image in images]
    if not images:
        return {}
    if problem := size_problem(processor.image_processor, images):
        raise ValueError(problem)
    out = dict(processor.image_processor(images, return_tensors="pt"))
    if ids is not None and "mm_token_type_ids" in processor.model_input_names:
        out["mm_token_type_ids"] = torch.tensor(processor.create_mm_token_type_ids(ids.tolist()))
    return {name: value.to(device) for name, value in out.items()}


def size_problem(image_processor, pictures) -> str | None:
    """Why ``pictures`` do not fit an image processor that takes pictures as they are (the
    tiny policy's: no resizing, so its vision tower's learned positions fix one size), or
    None; a processor that resizes (a pretrained model's) takes any size."""
    if getattr(image_processor, "do_resize", True):
        return None
    size = getattr(image_processor, "size", None) or {}
    want = (size.get("width"), size.get("height"))
    if None in want:
        return None
    for picture in pictures:
        if tuple(picture.size) != want:
            return (f"a picture of {picture.size[0]} x {picture.size[1]} pixels reached a policy whose "
                    f"vision tower takes {want[0]} x {want[1]} (square rooms of {want[0] // PATCH} tiles, "
                    "the size it was built for): use rooms of that size, or a policy built for "
                    "these rooms (core warmstart ENV with env.options.size)")
    return None


def encode_with_images(processor, text: str, images: tuple[Image, ...]) -> list[int]:
    """Token ids of ``text`` with each ``IMAGE_MARK`` expanded to the picture's image
    tokens: the mark becomes what the model's chat template writes for a picture
    (:func:`image_placeholder`) and the processor expands it, so a pretrained model's
    processor does what it does for its own prompts."""
    marks = text.count(IMAGE_MARK)
    if marks != len(images):
        raise ValueError(f"the prompt places {marks} pictures but {len(images)} were given")
    placeholder = image_placeholder(processor)
    if placeholder != IMAGE_MARK:
        text = text.replace(IMAGE_MARK, placeholder)
    out = processor(text=[text], images=[image.pil for image in images] or None, add_special_tokens=False)
    return list(out["input_ids"][0])
