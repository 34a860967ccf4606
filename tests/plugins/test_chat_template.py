"""``env.chat_template``: prompts rendered through the tokenizer's chat template.

The templated tokenizer is built here (a word tokenizer given chat markers and a small
Qwen-like Jinja template, saved beside a tiny untrained model): no downloads.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from checkpoints import save_templated_checkpoint

from mirage.core.config.run_config import RunConfig
from mirage.core.plugin_api.manager import build_plugins
from mirage.core.rl.batch import make_batch
from mirage.core.rl.episode import THINK
from mirage.core.run.loop import open_session
from mirage.core.run.validate import build_config, validate_config
from mirage.plugins.backend_local import chat_template
from mirage.plugins.rollout import mirage_rollout


@pytest.fixture(scope="module")
def templated_model(tmp_path_factory) -> Path:
    return save_templated_checkpoint(tmp_path_factory.mktemp("templated") / "model")


def prepared(data: dict, cache: Path):
    """A run session for ``data`` whose backend is prepared; and the backend's facts."""
    config = build_config(data)
    plugins = build_plugins()
    run = open_session(config, plugins, validate_config(config, plugins))
    return run, run.backend.prepare(run.env_cls, cache, progress=False)


def with_model(tiny_config, path: Path, **env) -> dict:
    data = tiny_config()
    data["model"]["path"] = str(path)
    data["env"].update(env)
    return data


def test_the_default_follows_the_model_source():
    assert RunConfig().env.chat_template is False  # the tiny policy: off, so old hashes stand
    assert RunConfig(model={"path": "some/model"}).env.chat_template is True
    assert RunConfig(env={"chat_template": False}, model={"path": "some/model"}).env.chat_template is False


def test_render_opens_the_assistant_turn_with_think(templated_model):
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast.from_pretrained(templated_model)
    assert chat_template.render(tokenizer, "State :\nG F\n<think>") == (
        "<|im_start|>user\nState :\nG F<|im_end|>\n<|im_start|>assistant\n<think>")
    assert chat_template.render(tokenizer, "no think") == "<|im_start|>user\nno think<|im_end|>\n<|im_start|>assistant\n"


def test_rollout_prompts_go_through_the_template(templated_model, tiny_config, tmp_path):
    run, facts = prepared(with_model(tiny_config, templated_model), tmp_path)
    assert facts["chat_template"] is True
    batch = make_batch(0, [3, 4], 2, temperature=1.0)
    mirage_rollout(run=run, batch=batch)
    tokenizer = run.backend.tokenizer
    for turn in (turn for t in batch.trajectories for turn in t.turns):
        tokens = tokenizer.convert_ids_to_tokens(turn.context_ids)
        assert tokens[:2] == ["<|im_start|>", "user"]
        assert tokens[-4:] == ["<|im_end|>", "<|im_start|>", "assistant", THINK]
        assert turn.context_ids == run.backend.encode(chat_template.render(tokenizer, turn.context))


def test_switched_off_a_templated_tokenizer_encodes_plainly(templated_model, tiny_config, tmp_path):
    run, facts = prepared(with_model(tiny_config, templated_model, chat_template=False), tmp_path)
    assert facts["chat_template"] is False and "chat_template_missing" not in facts
    assert run.backend.encode_prompt("State :\n<think>") == run.backend.encode("State :\n<think>")


def test_the_tiny_policy_has_no_template_to_apply(tiny_config, tmp_path):
    data = tiny_config()
    data["env"]["chat_template"] = True
    run, facts = prepared(data, tmp_path)
    assert facts["chat_template"] is False
    assert "no chat template" in facts["chat_template_missing"]
    assert run.backend.encode_prompt("State :\n<think>") == run.backend.encode("State :\n<think>")
