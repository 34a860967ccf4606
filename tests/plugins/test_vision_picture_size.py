"""The tiny policy's vision tower takes one picture size (issue #42): a picture of another
size (a hand-made room of another shape) is refused by name before the model sees it."""

from __future__ import annotations

import pytest
import tokenizers
from transformers import PreTrainedTokenizerFast

from mirage.envs.frozenlake import FrozenLake, FrozenLakeOptions
from mirage.envs.sokoban import Sokoban, SokobanOptions
from mirage.plugins.backend_local import vision


def _processor(pixels: int):
    model = tokenizers.models.WordLevel({"[UNK]": 0, "a": 1}, unk_token="[UNK]")
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tokenizers.Tokenizer(model))
    vision.add_image_token(tokenizer)
    return vision.build_processor(tokenizer, pixels, pixels)


IMAGE = SokobanOptions(observation="image")


def test_a_room_of_the_towers_size_gives_its_pixels():
    room = Sokoban.from_grid(["# # # #", "# P X #", "# _ O #", "# # # #"], IMAGE)
    inputs = vision.image_inputs(_processor(64), [room.render_image()], "cpu")
    assert tuple(inputs["pixel_values"].shape) == (1, 3, 64, 64)


@pytest.mark.parametrize("rows, size", [
    (["# # # # # #", "# P X O _ #", "# _ _ _ _ #", "# # # # # #"], "96 x 64"),  # not square
    (["# # # # #", "# P X O #", "# _ _ _ #", "# _ _ _ #", "# # # # #"], "80 x 80"),  # another size
])
def test_a_room_of_another_shape_is_refused_naming_both_sizes(rows, size):
    room = Sokoban.from_grid(rows, IMAGE)
    with pytest.raises(ValueError) as refused:
        vision.image_inputs(_processor(96), [room.render_image()], "cpu")
    assert f"a picture of {size} pixels" in str(refused.value)
    assert "takes 96 x 96 (square rooms of 6 tiles" in str(refused.value)


def test_a_map_of_another_size_is_refused_too():
    lake = FrozenLake.from_grid(["P _ _", "_ O _", "_ _ G"], FrozenLakeOptions(observation="image"))
    with pytest.raises(ValueError, match="a picture of 48 x 48 pixels .* takes 64 x 64"):
        vision.image_inputs(_processor(64), [lake.render_image()], "cpu")


def test_a_processor_that_resizes_takes_any_size():
    processor = _processor(96)
    processor.image_processor.do_resize = True
    room = Sokoban.from_grid(["# # # # # #", "# P X O _ #", "# _ _ _ _ #", "# # # # # #"], IMAGE)
    assert vision.size_problem(processor.image_processor, [room.render_image().pil]) is None
