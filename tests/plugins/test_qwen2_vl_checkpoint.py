"""``--model DIR`` on Qwen2-VL and Qwen2.5-VL checkpoints (issue #42, point 4), built and
saved by the tests (tests/qwen2_vl_checkpoint.py: no hub): the checkpoint loads with its
processor and chat template, its prompts carry the family's own image tokens, the
backend's log-probs are the model's own on the processor's encoding (3-D rotary positions
included), cross-scoring that reuses each prompt's cache equals scoring every pair in
full, a run in image mode trains, and a checkpoint that cannot read pictures is refused
in one line."""

from __future__ import annotations

import json

import numpy
import pytest
import torch
import transformers
from checkpoints import save_text_checkpoint
from qwen2_vl_checkpoint import MERGE, PATCH, save_checkpoint

from mirage.core.errors import ConfigError
from mirage.core.plugin_api.manager import build_plugins
from mirage.core.rl.image import IMAGE_MARK
from mirage.core.run.loop import measure_step, open_session
from mirage.core.run.validate import build_config, validate_config
from mirage.plugins.backend_local import chat_template
from mirage.plugins.diagnostics.cross_scoring import assign_columns, first_turns
from mirage.probe.measure import probe_config

FAMILIES = {"qwen2_vl": ("Qwen2VLForConditionalGeneration", "Qwen2VLProcessor"),
            "qwen2_5_vl": ("Qwen2_5_VLForConditionalGeneration", "Qwen2_5_VLProcessor")}
PROMPTS, GROUP = 4, 2
DATA = {"env": {"name": "frozenlake", "options": {"observation": "image"}},
        "rollout": {"prompts": PROMPTS, "group_size": GROUP, "max_new_tokens": 12}, "threads": 1}
IMAGE_TOKENS = (64 // PATCH // MERGE) ** 2  # a 64 x 64 picture: 8 x 8 patches merged 2 x 2


@pytest.fixture(scope="module", params=list(FAMILIES))
def checkpoint(request, tmp_path_factory):
    return request.param, save_checkpoint(tmp_path_factory.mktemp(request.param), request.param)


@pytest.fixture(scope="module")
def measured(checkpoint, tmp_path_factory):
    """A session on the checkpoint and the batch of its first step."""
    family, path = checkpoint
    config = probe_config(DATA, str(path))
    plugins = build_plugins()
    session = open_session(config, plugins, validate_config(config, plugins))
    facts = session.backend.prepare(session.env_cls, tmp_path_factory.mktemp("cache"), progress=False)
    _, _, batch = measure_step(session, 0)
    return family, session, facts, batch


def special(backend, token: str) -> int:
    return backend.tokenizer.convert_tokens_to_ids(token)


def test_the_checkpoint_loads_with_its_processor_and_its_chat_template(measured):
    family, session, facts, batch = measured
    backend = session.backend
    model_class, processor_class = FAMILIES[family]
    assert type(backend.model).__name__ == model_class
    assert isinstance(backend.processor, getattr(transformers, processor_class))
    assert backend.processor.tokenizer is backend.tokenizer
    assert facts["chat_template"] is True and facts["model_source"] == str(session.config.model.path)
    image = special(backend, "<|image_pad|>")
    for turn in first_turns(batch):
        ids = turn.context_ids
        # the chat template's conversation, with the picture where the family puts one
        assert ids[0] == special(backend, "<|im_start|>") and IMAGE_MARK in turn.context
        first = ids.index(image)
        assert ids.count(image) == IMAGE_TOKENS and ids[first : first + IMAGE_TOKENS] == [image] * IMAGE_TOKENS
        assert ids[first - 1] == special(backend, "<|vision_start|>")
        assert ids[first + IMAGE_TOKENS] == special(backend, "<|vision_end|>")
        assert not set(turn.response_ids) & {image, special(backend, "<|video_pad|>"),
                                             special(backend, "<|vision_start|>")}


def own_forward(backend, turn) -> torch.Tensor:
    """Log-probs of ``turn``'s response tokens under the model's own forward on the
    processor's encoding of its prompt (the family's own placeholder, expanded by the
    processor; the model computes its 3-D rotary positions itself)."""
    text = chat_template.render(backend.tokenizer, turn.context)
    text = text.replace(IMAGE_MARK, "<|vision_start|><|image_pad|><|vision_end|>")
    encoded = backend.processor(text=[text], images=[image.pil for image in turn.images], add_special_tokens=False)
    encoded = {name: torch.as_tensor(numpy.asarray(value)) for name, value in encoded.items()}
    assert encoded["input_ids"][0].tolist() == turn.context_ids  # the backend encodes as the processor does
    response = torch.tensor([turn.response_ids])
    ids = torch.cat([encoded["input_ids"], response], dim=1)
    kinds = torch.cat([encoded["mm_token_type_ids"], torch.zeros_like(response)], dim=1)
    with torch.no_grad():
        logits = backend.model(input_ids=ids, attention_mask=torch.ones_like(ids), mm_token_type_ids=kinds,
                               pixel_values=encoded["pixel_values"],
                               image_grid_thw=encoded["image_grid_thw"]).logits[0].float()
    start = len(turn.context_ids)
    predicted = torch.log_softmax(logits[start - 1 : -1], dim=-1)
    return predicted.gather(1, response[0][:, None]).squeeze(1)


def test_the_backends_log_probs_are_the_models_own_on_the_processors_encoding(measured):
    _, session, _, batch = measured
    turns = first_turns(batch)
    scored = session.backend.score([t.prompt for t in turns], [t.response_ids for t in turns])  # one padded batch
    for row, turn in enumerate(turns):
        n = len(turn.response_ids)
        assert torch.allclose(scored.logprobs[row, :n], own_forward(session.backend, turn), atol=1e-5)
        assert torch.allclose(torch.tensor(turn.old_logprobs), scored.logprobs[row, :n], atol=1e-5)


def test_cross_scoring_that_reuses_each_prompts_cache_equals_scoring_each_pair_in_full(measured):
    _, session, _, batch = measured
    turns = first_turns(batch)
    columns, _ = assign_columns([t.prompt for t in turns])
    responses = [t.response_ids for t in turns]
    reused = session.backend.cross_score(columns, responses)
    full = session.backend.cross_score(columns, responses, reuse_prefix=False)
    assert reused.logprobs.shape == (len(responses), PROMPTS)
    assert torch.allclose(reused.logprobs, full.logprobs, atol=1e-5)
    assert torch.allclose(reused.entropy, full.entropy, atol=1e-5)
    # the same words, different pictures: the same response scores differently per room
    assert reused.logprobs.std(dim=1).min() > 0


def test_fine_tuning_a_copy_on_pictured_pairs_reads_the_pictures(measured):
    """The KL reference's fine-tuning (warmstart._supervised, as reference.py calls it) on
    (prompt with picture, response) pairs: the model gets the token types its 3-D
    positions need, and one step lowers the loss on the pairs it trained on."""
    import copy

    from mirage.plugins.backend_local import warmstart
    from mirage.plugins.backend_local.options import LocalOptions

    _, session, _, batch = measured
    data = [(t.context_ids, t.response_ids, tuple(t.images)) for t in first_turns(batch)[:2]]
    pixels = warmstart.picture_inputs(session.backend.processor)
    recipe = LocalOptions(warmstart_steps=1, warmstart_batch=2, warmstart_lr=1e-2)
    model = copy.deepcopy(session.backend.model)
    first = warmstart._supervised(model, data, recipe, 0, False, pixels)
    second = warmstart._supervised(model, data, recipe, 0, False, pixels)
    assert 0 < second < first


@pytest.mark.slow  # two runs of the command, one with PPO's critic (about 15 s)
@pytest.mark.parametrize("family, algorithm", [("qwen2_vl", "grpo"), ("qwen2_5_vl", "ppo")])
def test_a_run_in_image_mode_trains_a_step_and_stores_its_metrics(family, algorithm, cli, tmp_path):
    from mirage.core.store.run_store import RunStore

    path = save_checkpoint(tmp_path / family, family)
    db = tmp_path / "runs.duckdb"
    code, out, err = cli("run", "--env", "frozenlake", "--set", "env.options.observation=image", "--model", path,
                         "--steps", "1", "--prompts", "2", "--group-size", "2", "--val-episodes", "2",
                         "--set", f"algorithm.name={algorithm}", "--set", "filter.name=none", "--db", db, "--quiet")
    assert code == 0, err
    store = RunStore(db)
    (run,) = store.list_runs()
    assert run["status"] == "finished"
    norms = store.metrics(run["run_id"], "update/grad_norm")
    assert [step for step, _, _ in norms] == [1] and norms[0][2] > 0
    if algorithm == "ppo":
        assert store.metrics(run["run_id"], "update/critic_grad_norm")[0][2] > 0


def broken(checkpoint, target, how: str):
    """A copy of the checkpoint made unreadable for pictures in one way."""
    import shutil

    shutil.copytree(checkpoint[1], target)
    if how == "corrupt processor":
        (target / "preprocessor_config.json").write_text("{not json")
    elif how == "no processor":
        (target / "preprocessor_config.json").unlink()
    elif how == "not image-text-to-text":
        config = json.loads((target / "config.json").read_text())
        (target / "config.json").write_text(json.dumps({**config, "model_type": "clip"}))
    return target


REFUSALS = {
    "text only": "reads text only (its config.json has no vision_config): image observations need an "
                 "image-text-to-text checkpoint (LLaVA or Qwen2-VL family), or env.options.observation 'text'",
    "corrupt processor": "its processor cannot load (",
    "no processor": "no saved processor beside its config.json (one of processor_config.json, "
                    "preprocessor_config.json)",
    "not image-text-to-text": "is a 'clip' model, not image-text-to-text (what AutoModelForImageTextToText "
                              "loads): image observations need an image-text-to-text checkpoint",
}


@pytest.mark.parametrize("how", list(REFUSALS))
def test_a_checkpoint_that_cannot_read_the_pictures_is_refused_before_the_run(how, checkpoint, tmp_path):
    target = save_text_checkpoint(tmp_path / "model") if how == "text only" else broken(checkpoint, tmp_path / "model", how)
    config = build_config({**DATA, "model": {"path": str(target)}})
    with pytest.raises(ConfigError) as refused:
        validate_config(config, build_plugins())
    message = str(refused.value)
    assert message.startswith(f"--model {str(target)!r}") and REFUSALS[how] in message
    assert "\n" not in message


def test_the_command_refuses_an_unloadable_processor_in_one_line_and_writes_nothing(checkpoint, cli, tmp_path):
    target = broken(checkpoint, tmp_path / "model", "corrupt processor")
    db = tmp_path / "runs.duckdb"
    code, out, err = cli("run", "--env", "frozenlake", "--set", "env.options.observation=image", "--model", target,
                         "--steps", "1", "--db", db, "--quiet")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"error: --model {str(target)!r}: its processor cannot load ("), err
    assert "preprocessor_config.json" in err and not db.exists()
