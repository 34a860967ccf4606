"""Image observations (issue #42): Sokoban and FrozenLake drawn as pictures of 16-pixel
tiles, chosen by ``env.options.observation``; the picture is the whole state (the prompt's
text carries the instructions and the answer format only) and flows through the turn
beside the text, one picture per ``IMAGE_MARK``."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest
from checkpoints import save_text_checkpoint

from mirage.core.config.run_config import EnvConfig
from mirage.core.rl.demos import collect_demonstrations
from mirage.core.rl.episode import ANSWER_FORMAT, apply_response, build_context, context_images, format_response, start_episode
from mirage.core.rl.image import IMAGE_MARK, Image, count_marks
from mirage.core.run.validate import build_config
from mirage.envs.frozenlake import FrozenLake, FrozenLakeOptions
from mirage.envs.sokoban import Sokoban, SokobanOptions
from mirage.envs.sprites import FROZENLAKE_TILES, SOKOBAN_TILES, TILE, read_grid

ENVS = [(Sokoban, SokobanOptions, SOKOBAN_TILES), (FrozenLake, FrozenLakeOptions, FROZENLAKE_TILES)]
IDS = ["sokoban", "frozenlake"]


def state_of(env) -> tuple:
    """Everything an episode's future depends on (but the slip noise)."""
    if isinstance(env, Sokoban):
        return env.player, env.boxes, env.targets, env.walls, env.done
    return env.player, env.goal, env.holes, env.done


def from_pixels(cls, tiles, image: Image):
    """An environment rebuilt from a picture's pixels alone."""
    return cls.from_grid([" ".join(row) for row in read_grid(image, tiles)])


@pytest.mark.parametrize(("cls", "options_cls", "tiles"), ENVS, ids=IDS)
def test_the_state_is_recovered_from_the_pixels_alone(cls, options_cls, tiles):
    """1,000 random rooms each, and every state a random walk of up to 6 moves reaches
    from them while the episode goes on (a finished episode shows no further turn; its
    player may stand on the hole or goal that ended it): the room rebuilt from the
    picture is the room."""
    rng = random.Random(0)
    env = cls(options_cls(observation="image"))
    for seed in range(1000):
        env.reset(seed)
        for _ in range(rng.randrange(7)):
            image = env.render_image()
            assert image.size == (env.width * TILE, env.height * TILE)
            rebuilt = from_pixels(cls, tiles, image)
            assert state_of(rebuilt) == state_of(env), seed
            env.step(rng.choice(env.action_names))
            if env.done:
                break


@pytest.mark.parametrize(("cls", "options_cls", "tiles"), ENVS, ids=IDS)
def test_a_picture_is_a_fixed_function_of_the_state(cls, options_cls, tiles):
    one, two = cls(options_cls(observation="image")), cls(options_cls(observation="image"))
    one.reset(7), two.reset(7)
    assert one.render_image() == two.render_image() and one.render_image().png == two.render_image().png
    pictures = set()
    for seed in range(50):
        one.reset(seed)
        pictures.add(one.render_image())
    assert len(pictures) == len({tuple(map(tuple, cls.from_grid([" ".join(r) for r in read_grid(p, tiles)])
                                           .symbol_grid())) for p in pictures})


def test_an_image_round_trips_exactly_through_png():
    pixels = np.random.default_rng(0).integers(0, 256, (32, 48, 3), dtype=np.uint8)
    image = Image.from_array(pixels)
    assert np.array_equal(image.array(), pixels) and image.size == (48, 32)
    assert Image(image.png) == image and hash(Image(image.png)) == hash(image)
    with pytest.raises(ValueError, match="uint8"):
        Image.from_array(pixels.astype(np.float32))


@pytest.mark.parametrize(("cls", "options_cls", "tiles"), ENVS, ids=IDS)
def test_text_mode_shows_no_picture(cls, options_cls, tiles):
    env = cls()
    text = env.reset(3)
    assert env.render_image() is None and IMAGE_MARK not in text
    assert cls(options_cls(observation="text")).reset(3) == text


@pytest.mark.parametrize(("cls", "options_cls", "tiles"), ENVS, ids=IDS)
@pytest.mark.parametrize("history_turns", [0, 1, -1])
def test_in_image_mode_the_prompt_text_holds_no_state_and_one_mark_per_picture(cls, options_cls, tiles,
                                                                              history_turns):
    """Every prompt of demonstrated episodes: each state the text shows is a mark and
    nothing else (no map, coordinate or neighbour line), the instruction names no cell;
    one picture per mark, the current state's last."""
    config = EnvConfig(name=cls.name, show_instruction=True, history_turns=history_turns)
    rng = random.Random(1)
    for seed in range(20):
        env = cls(options_cls(observation="image"))
        state = start_episode(env, seed, config)
        demonstrator = env.demonstrator(rng)
        while not state.done:
            context = build_context(state, config)
            pictures = context_images(state, config)
            lines = context.split("\n")
            assert lines[0] == (f"{env.instruction} Answer as {ANSWER_FORMAT} with at most "
                                f"{config.max_actions_per_turn} actions .")
            assert not re.search(r"\d|row|col", env.instruction)
            shown = [lines[i + 1] for i, line in enumerate(lines) if line == "State :"]
            assert shown and all(line == IMAGE_MARK for line in shown), context  # the picture only
            assert count_marks(context) == len(pictures) >= 1
            assert pictures[-1] == env.render_image()
            turn = demonstrator()
            apply_response(state, format_response(turn.reasoning, turn.actions), config)


@pytest.mark.parametrize(("cls", "options_cls", "tiles"), ENVS, ids=IDS)
def test_the_demonstrated_reasoning_reads_the_picture(cls, options_cls, tiles):
    """The demonstrations' reasoning first reads the turn's picture out, one word per tile
    (Sokoban: inside its outer ring of wall), then plans; boilerplate reasoning
    (``generic_share``) reads nothing. Every response fits the default 40 new tokens."""
    from mirage.core.config.run_config import RolloutConfig
    from mirage.envs.phrasing import grid_words
    from mirage.plugins.backend_local.tokenizer import build_word_tokenizer

    words = __import__(cls.__module__, fromlist=["PICTURE_WORDS"]).PICTURE_WORDS
    demos = collect_demonstrations(cls, options_cls(observation="image", generic_share=0.0),
                                   EnvConfig(name=cls.name, show_instruction=True), 10, 0)
    assert demos.pairs
    for (context, response), pictures in zip(demos.pairs, demos.images):
        grid = read_grid(pictures[-1], tiles)
        if cls is Sokoban:
            assert all(s == "#" for s in grid[0] + grid[-1] + [r[0] for r in grid] + [r[-1] for r in grid])
            grid = [row[1:-1] for row in grid[1:-1]]
        assert response.startswith(grid_words(grid, words) + " "), response
        assert count_marks(context) == len(pictures)
    tokenizer = build_word_tokenizer(r for _, r in demos.pairs)
    assert max(len(tokenizer.encode(r)) + 1 for _, r in demos.pairs) <= RolloutConfig().max_new_tokens
    boilerplate = collect_demonstrations(cls, options_cls(observation="image", generic_share=1.0),
                                         EnvConfig(name=cls.name), 5, 0)
    assert not any(r.startswith(tuple(words.values())) for _, r in boilerplate.pairs)


def test_the_observation_option_is_part_of_the_config_identity():
    text = build_config({"env": {"name": "sokoban"}})
    image = build_config({"env": {"name": "sokoban", "options": {"observation": "image"}}})
    assert text.run_hash() != image.run_hash()
    assert build_config({"env": {"name": "frozenlake"}}).run_hash() == build_config(
        {"env": {"name": "frozenlake", "options": {}}}).run_hash()


def test_image_observations_are_refused_where_nothing_can_see_them(cli, make_config_file, tmp_path):
    db = tmp_path / "runs.duckdb"
    text_only = save_text_checkpoint(tmp_path / "text-model")
    for env, model, message in [
        ("countdown", {}, "error: env 'countdown' has no image observations (env.options.observation); "
                          "environments that show pictures: frozenlake, sokoban"),
        ("sokoban", {"path": str(text_only)}, f"error: --model '{text_only}' reads text only (its config.json "
                                              "has no vision_config): image observations need an "
                                              "image-text-to-text checkpoint"),
    ]:
        config = make_config_file(f"{env}.yaml", env={"name": env, "options": {"observation": "image"}},
                                  model=model)
        code, out, err = cli("run", "--config", config, "--db", db, "--quiet")
        assert code == 2 and err.startswith(message) and len(err.strip().splitlines()) == 1, err
    config = make_config_file("bad.yaml", env={"name": "frozenlake", "options": {"observation": "pixels"}})
    code, out, err = cli("run", "--config", config, "--db", db, "--quiet")
    assert code == 2 and "observation" in err and "'text'" in err and "'image'" in err, err
    assert not db.exists()
