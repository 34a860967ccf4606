"""Each prompt's own image inputs in a GRPO step of a vision-language model.

With a dataset that has an ``image``/``images`` column and a processor as
``processing_class``, TRL 1.16's ``_generate_and_score_completions`` returns, beside the
rows' ids, the image inputs of all rows flattened over images (``pixel_values``, and
``image_grid_thw`` for Qwen2-VL-type models) and ``num_images`` per row. The MI pass
scores every reasoning after every prompt, so it needs each row's own slice of them:
:func:`row_images` cuts them with TRL's own ``split_pixel_values_by_grid``, the function
TRL uses to shuffle the same batch. Qwen2-VL-type models also take ``mm_token_type_ids``
(which tokens are image tokens, for their 3-D rotary positions); they are rebuilt from
each prompt's own ids by the processor (``create_mm_token_type_ids``, what the processor
itself returns them from), not read from TRL's output, where they follow the processor's
padding side while the prompt ids are padded on the left.

Handled layouts: LLaVA-type (``pixel_values`` ``[images, C, H, W]``, one entry per image)
and Qwen2-VL-type (``pixel_values`` rows per image, counted by ``image_grid_thw``). Any
other is refused by name (:func:`refuse_unhandled`), never scored without its pixels.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import torch
from trl.trainer.utils import split_pixel_values_by_grid

# Cut per image: the sample's rows of these follow its images.
PER_IMAGE = ("pixel_values", "image_grid_thw")
# One value per prompt token, rebuilt from the prompt's ids (0 after the prompt, as TRL
# extends it over the completion).
PER_TOKEN = "mm_token_type_ids"
# Keys of layouts the MI pass does not cut, and which models write them.
UNHANDLED = {
    "image_position_ids": "image_position_ids (Gemma-4-type)",
    "spatial_shapes": "spatial_shapes with tile-indexed pixel_values (LFM2-VL-type)",
    "num_tiles": "tile-indexed pixel_values (InternVL-type)",
    "pixel_attention_mask": "pixel_attention_mask (Idefics/SmolVLM-type)",
    "image_sizes": "image_sizes (LLaVA-NeXT-type)",
    "token_type_ids": "token_type_ids beside the pixels (Gemma-3/PaliGemma-type)",
}
HANDLED = ("LLaVA-type pixel_values [images, C, H, W] and Qwen2-VL-type pixel_values rows "
           "per image_grid_thw")


@dataclass(frozen=True)
class PromptImages:
    """One prompt's image inputs, on the CPU.

    ``pixels``: its slice of each per-image input (``pixel_values``, and ``image_grid_thw``
    when the model has one); ``token_types``: ``mm_token_type_ids`` over the prompt's
    tokens (``[T]``) when the model takes them, else empty; ``digest``: a hash of both, which tells prompts
    of the same text but different images apart (and names one entry when the step's
    images are gathered across processes).
    """

    pixels: dict[str, torch.Tensor]
    token_types: dict[str, torch.Tensor]
    digest: str


def refuse_unhandled(output: dict[str, Any]) -> None:
    """Raise ValueError, naming the layout, when ``output`` carries image inputs the MI
    pass cannot cut per prompt."""
    for key, layout in UNHANDLED.items():
        if key in output:
            raise ValueError(f"MIRAGE's MI pass cannot score this model's image inputs ({layout}); "
                             f"it handles {HANDLED} only")
    if "pixel_values" in output and "num_images" not in output:
        raise ValueError("MIRAGE's MI pass cannot score this step's image inputs: pixel_values "
                         "without num_images (a rollout_func or tool images?)")


def tensor_digest(tensors: dict[str, torch.Tensor]) -> str:
    """A sha256 of the tensors' names, dtypes, shapes and bytes."""
    digest = hashlib.sha256()
    for name in sorted(tensors):
        tensor = tensors[name].detach().cpu().contiguous()
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)};".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def row_images(output: dict[str, Any], processor) -> list[PromptImages | None]:
    """Each row's :class:`PromptImages` (None for a row whose prompt shows no image, and
    for every row of a step without images); ``processor``: the trainer's processing
    class. Refuses an unhandled layout (:func:`refuse_unhandled`)."""
    rows = output["prompt_ids"].size(0)
    if "pixel_values" not in output:
        return [None] * rows
    refuse_unhandled(output)
    num_images = list(output["num_images"])
    split = split_pixel_values_by_grid({key: output[key] for key in (*PER_IMAGE, "num_images") if key in output})
    if not isinstance(split["pixel_values"], list):  # left whole: one padded entry per sample
        raise ValueError(f"MIRAGE's MI pass cannot score this model's image inputs (pixel_values of "
                         f"{split['pixel_values'].size(0)} entries for {sum(num_images)} images, one "
                         f"padded entry per sample: Idefics-type); it handles {HANDLED} only")
    prompt_mask = output["prompt_mask"].bool()
    found: list[PromptImages | None] = []
    for row in range(rows):
        if not num_images[row]:
            found.append(None)
            continue
        # cloned: a slice pickles its whole batch's storage when gathered across processes
        pixels = {key: split[key][row].detach().cpu().clone() for key in PER_IMAGE if key in split}
        token_types = {}
        if PER_TOKEN in output:
            ids = output["prompt_ids"][row][prompt_mask[row]].tolist()
            token_types[PER_TOKEN] = torch.tensor(processor.create_mm_token_type_ids([ids])[0])
        found.append(PromptImages(pixels=pixels, token_types=token_types, digest=tensor_digest(pixels | token_types)))
    return found


def pair_inputs(images: list[PromptImages | None], width: int, device) -> dict[str, torch.Tensor]:
    """The image inputs of a chunk of right-padded sequences, one per entry of ``images``
    (that sequence's prompt's inputs, or None): per-image inputs concatenated in sequence
    order, per-token fields placed over each prompt's tokens (zero elsewhere, as TRL pads
    them over the completion). Empty when no sequence shows an image."""
    shown = [entry for entry in images if entry is not None]
    if not shown:
        return {}
    inputs = {key: torch.cat([entry.pixels[key] for entry in shown]) for key in shown[0].pixels}
    for key in shown[0].token_types:
        field = torch.zeros((len(images), width), dtype=shown[0].token_types[key].dtype)
        for row, entry in enumerate(images):
            if entry is not None:
                field[row, :len(entry.token_types[key])] = entry.token_types[key]
        inputs[key] = field
    return {key: value.to(device) for key, value in inputs.items()}
