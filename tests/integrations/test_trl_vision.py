"""The TRL integration with a vision-language model (docs/integrations.md, section TRL):
a tiny LLaVA model (and a tiny Qwen2-VL one) built here from configs trains under
MirageGRPOTrainer with a filter and the MI pass on every step; the logged cross-score
matrix equals one forward per (prompt with its own image, reasoning) pair, prompts of the
same text but different images being different columns; layouts the MI pass does not cut
are refused by name."""

from __future__ import annotations

import copy
import math
from types import SimpleNamespace

import pytest
import torch
from datasets import Dataset
from PIL import Image as PILImage
from transformers import (CLIPVisionConfig, LlavaConfig, LlavaForConditionalGeneration, LlavaProcessor,
                          Qwen2Config, Qwen2VLConfig, Qwen2VLForConditionalGeneration, Qwen2VLProcessor)
from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
from trl import GRPOConfig

import mirage.integrations.trl.diagnose as diagnose
from mirage.integrations.trl import MirageGRPOTrainer, MirageOptions
from mirage.integrations.trl.images import row_images
from mirage.plugins.backend_local.tokenizer import build_word_tokenizer

WORDS = "what colour is it go left right one two three four five the a at red blue".split()
GROUP = 4
SIZE = 32  # pixels; LLaVA: 16-pixel patches, 4 image tokens
# Two prompts of the same text that only their pictures tell apart, then two more.
PROMPTS = [("what colour is it", (255, 0, 0)), ("what colour is it", (0, 0, 255)),
           ("go left", (0, 255, 0)), ("go right", (255, 255, 0))]
LLAVA_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }} :"
    "{% for part in message['content'] %}{% if part['type'] == 'image' %} <image>"
    "{% else %} {{ part['text'] }}{% endif %}{% endfor %}{{ '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}assistant :{% endif %}")
QWEN_SPECIAL = ["<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
                "<|video_pad|>"]
QWEN_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% for part in message['content'] %}{% if part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% else %}{{ part['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def llava_processor_and_model(seed: int = 0):
    tokenizer = build_word_tokenizer([" ".join(WORDS + ["user", "assistant", ":"])])
    tokenizer.add_special_tokens({"additional_special_tokens": ["<image>"]})
    image_id = tokenizer.convert_tokens_to_ids("<image>")
    size = {"height": SIZE, "width": SIZE}
    processor = LlavaProcessor(
        image_processor=CLIPImageProcessorPil(do_resize=False, do_center_crop=False, size=size, crop_size=size),
        tokenizer=tokenizer, patch_size=16, vision_feature_select_strategy="default", image_token="<image>",
        num_additional_image_tokens=1, chat_template=LLAVA_TEMPLATE)
    vision = CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                              image_size=SIZE, patch_size=16, projection_dim=32)
    text = Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                       num_attention_heads=2, num_key_value_heads=2, pad_token_id=tokenizer.pad_token_id,
                       eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id)
    config = LlavaConfig(vision_config=vision, text_config=text, image_token_index=image_id,
                         vision_feature_select_strategy="default", vision_feature_layer=-1, image_seq_length=4)
    torch.manual_seed(seed)
    return processor, LlavaForConditionalGeneration(config), [image_id]


class PicturesOnlyQwen2VLProcessor(Qwen2VLProcessor):
    """Qwen2-VL's processor without its video processor, which needs torchvision (not
    installed); pictures and text are processed as by the whole one."""

    def check_argument_for_proper_class(self, argument_name, argument):
        if argument_name == "video_processor" and argument is None:
            return None
        return super().check_argument_for_proper_class(argument_name, argument)


def qwen2_vl_processor_and_model(seed: int = 0):
    """Qwen2-VL with 8-pixel patches merged 2 x 2 (a 32 x 32 picture: 16 pixel_values rows,
    image_grid_thw (1, 4, 4), 4 image tokens), a 1-layer text model of width 32 (head dim
    16, M-RoPE sections 2 + 3 + 3) and a 1-block vision tower."""
    tokenizer = build_word_tokenizer([" ".join(WORDS + ["user", "assistant"])])
    tokenizer.add_special_tokens({"additional_special_tokens": QWEN_SPECIAL})
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in QWEN_SPECIAL}
    image_processor = Qwen2VLImageProcessorPil(patch_size=8, merge_size=2, temporal_patch_size=2,
                                               min_pixels=SIZE * SIZE, max_pixels=SIZE * SIZE)
    processor = PicturesOnlyQwen2VLProcessor(image_processor=image_processor, tokenizer=tokenizer,
                                             chat_template=QWEN_TEMPLATE)
    text = dict(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]},
                bos_token_id=None, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    vision = dict(depth=1, embed_dim=16, hidden_size=32, num_heads=2, patch_size=8, spatial_merge_size=2,
                  temporal_patch_size=2)
    config = Qwen2VLConfig(text_config=text, vision_config=vision, image_token_id=ids["<|image_pad|>"],
                           video_token_id=ids["<|video_pad|>"], vision_start_token_id=ids["<|vision_start|>"],
                           vision_end_token_id=ids["<|vision_end|>"])
    torch.manual_seed(seed)
    return processor, Qwen2VLForConditionalGeneration(config), [ids[token] for token in QWEN_SPECIAL]


def picture(colour) -> PILImage.Image:
    return PILImage.new("RGB", (SIZE, SIZE), colour)


def messages(text: str) -> list[dict]:
    return [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]


def varied_reward(completions, **kwargs):
    return [float(len(completion[0]["content"]) % 3) for completion in completions]


def whole_completion(text: str) -> str | None:
    """A random model writes no tags: take all of the completion as the reasoning."""
    return text or None


def make_trainer(processor, model, image_ids, tmp_path, mirage: MirageOptions, max_steps: int):
    torch.set_num_threads(1)
    args = GRPOConfig(output_dir=str(tmp_path), max_steps=max_steps, num_generations=GROUP,
                      per_device_train_batch_size=GROUP * len(PROMPTS), max_completion_length=8, use_cpu=True,
                      report_to=[], logging_steps=1, save_strategy="no", bf16=False, fp16=False, seed=0,
                      # a completion that writes an image token would ask for features it was not given
                      generation_kwargs={"suppress_tokens": image_ids})
    dataset = Dataset.from_dict({"prompt": [messages(text) for text, _ in PROMPTS],
                                 "image": [picture(colour) for _, colour in PROMPTS]})
    return MirageGRPOTrainer(model=model, reward_funcs=varied_reward, args=args, train_dataset=dataset,
                             processing_class=processor, mirage=mirage)


class Recorder:
    """Wraps the MI pass's ``cross_score``: keeps its arguments, its result and the
    model's weights when it ran (the optimiser step changes them after)."""

    def __init__(self, scorer):
        self.scorer, self.calls = scorer, []

    def __call__(self, model, prompts, prefixes, reasonings, pad_id, batch_size, images=None):
        scores = self.scorer(model, prompts, prefixes, reasonings, pad_id, batch_size, images)
        self.calls.append({"weights": copy.deepcopy(model.state_dict()), "prompts": prompts, "images": images,
                           "prefixes": prefixes, "reasonings": reasonings, "scores": scores})
        return scores


def encode_prompt(processor, text: str, colour) -> dict[str, torch.Tensor]:
    """A dataset prompt with its picture, encoded here by the processor (chat template,
    image tokens expanded, pixel inputs)."""
    prompt = processor.apply_chat_template([messages(text)], add_generation_prompt=True, tokenize=False)
    return dict(processor(text=prompt, images=[[picture(colour)]], return_tensors="pt"))


def direct_logprob(model, encoded: dict[str, torch.Tensor], prefix: list[int], reasoning: list[int]) -> float:
    """log p(reasoning | the encoded prompt with its picture + prefix): one forward of the
    whole sequence; per-token inputs (Qwen2-VL's mm_token_type_ids) are 0 after the prompt."""
    ids = encoded["input_ids"][0].tolist()
    sequence = torch.tensor([ids + prefix + reasoning])
    extra = len(prefix) + len(reasoning)
    inputs = {}
    for key, value in encoded.items():
        if key in ("input_ids", "attention_mask"):
            continue
        if key in ("token_type_ids", "mm_token_type_ids"):
            value = torch.cat([value, value.new_zeros((1, extra))], dim=1)
        inputs[key] = value
    with torch.no_grad():
        logits = model(input_ids=sequence, **inputs).logits[0].double()
    logprobs = torch.log_softmax(logits, dim=-1)
    start = len(ids) + len(prefix)
    return sum(float(logprobs[start + t - 1, token]) for t, token in enumerate(reasoning))


def dataset_prompt(encodings, ids: list[int], pixel_values: torch.Tensor) -> int:
    """Which dataset prompt a row's prompt is: the one whose ids and pixels it has."""
    found = [e for e, encoded in enumerate(encodings)
             if encoded["input_ids"][0].tolist() == ids and torch.equal(encoded["pixel_values"], pixel_values)]
    assert len(found) == 1, found
    return found[0]


def check_a_vision_run(processor, model, image_ids, tmp_path, monkeypatch):
    recorder = Recorder(diagnose.cross_score)
    monkeypatch.setattr(diagnose, "cross_score", recorder)
    trainer = make_trainer(processor, model, image_ids, tmp_path, MirageOptions(
        every=1, filter="top_p", rho=0.5, reasoning=whole_completion, score_batch_size=5), max_steps=2)
    outputs = []
    generate = trainer._generate_and_score_completions

    def keep_output(inputs):
        outputs.append(generate(inputs))
        return outputs[-1]

    monkeypatch.setattr(trainer, "_generate_and_score_completions", keep_output)
    trainer.train()

    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    for name in ("filter/kept_ratio", "filter/kept_groups", "mi/retrieval_acc", "mi/mi_est", "mi/h_cond",
                 "mi/h_marg", "mi/format_valid", "mi/scored_reasonings", "time/diagnose"):
        assert [entry["step"] for entry in logged if f"mirage/{name}" in entry] == [1, 2], name
    for entry in logged:
        # four columns: the two prompts of the same text are two
        assert entry["mirage/mi/retrieval_chance"] == 1 / len(PROMPTS)
        assert math.isclose(entry["mirage/mi/h_marg"], entry["mirage/mi/mi_est"] + entry["mirage/mi/h_cond"],
                            abs_tol=1e-9)

    # the filter masks whole groups (mask and advantages) and leaves the image inputs as TRL built them
    for output, entry in zip(outputs, logged):
        kept = (output["completion_mask"].sum(1) > 0).view(-1, GROUP)
        dropped = ~kept.any(1)
        assert not output["advantages"].view(-1, GROUP)[dropped].any()
        assert int((~dropped).sum()) == entry["mirage/filter/kept_groups"]
        assert output["num_images"] == [1] * (len(PROMPTS) * GROUP)
    assert any(entry["mirage/filter/kept_ratio"] < 1 for entry in logged)  # rho 0.5 dropped groups

    encodings = [encode_prompt(processor, text, colour) for text, colour in PROMPTS]
    assert encodings[0]["input_ids"].tolist() == encodings[1]["input_ids"].tolist()  # same text
    assert len({tuple(encoded["input_ids"][0].tolist()) for encoded in encodings}) == 3  # the others differ
    assert len(recorder.calls) == 2
    for call in recorder.calls:
        scores = call["scores"]
        # a model of its own: TRL patches the trainer's model's forward (add_fused_lm_head), and a
        # copy of it would still call the original's
        direct = type(model)(model.config)
        direct.load_state_dict(call["weights"])
        direct.eval()
        rows = [dataset_prompt(encodings, ids, images.pixels["pixel_values"])
                for ids, images in zip(call["prompts"], call["images"])]
        columns = list(dict.fromkeys(rows))  # first-seen order
        assert sorted(columns) == list(range(len(PROMPTS)))  # same text, different picture: two columns
        scored = [n for n, z in enumerate(call["reasonings"]) if z]
        assert scores.logprobs.shape == (len(scored), len(PROMPTS))
        assert scores.owners.tolist() == [columns.index(rows[n]) for n in scored]
        for i, n in enumerate(scored):
            for j, column in enumerate(columns):
                alone = direct_logprob(direct, encodings[column], call["prefixes"][n], call["reasonings"][n])
                assert math.isclose(float(scores.logprobs[i, j]), alone, abs_tol=1e-5), (i, j)
        # the picture matters: the two prompts of the same text score differently
        same_text = [columns.index(0), columns.index(1)]
        assert not torch.allclose(scores.logprobs[:, same_text[0]], scores.logprobs[:, same_text[1]])


def test_a_llava_run_scores_each_prompt_with_its_own_picture(tmp_path, monkeypatch):
    processor, model, image_ids = llava_processor_and_model()
    check_a_vision_run(processor, model, image_ids, tmp_path, monkeypatch)


def test_a_qwen2_vl_run_scores_each_prompt_with_its_own_picture(tmp_path, monkeypatch):
    # the processor pads on the right (TRL sets "left" only on a processor it loads itself), so
    # TRL's own mm_token_type_ids are misaligned with its left-padded prompts: the MI pass
    # rebuilds them from each prompt's ids, which the direct forwards check
    processor, model, image_ids = qwen2_vl_processor_and_model()
    check_a_vision_run(processor, model, image_ids, tmp_path, monkeypatch)


# --- the layouts ----------------------------------------------------------------------

def llava_step(rows: int = 4) -> dict:
    """A step's output as TRL builds it for LLaVA: one [C, H, W] entry per image."""
    return {"prompt_ids": torch.tensor([[0, 7, 8], [5, 7, 8]] * (rows // 2)),
            "prompt_mask": torch.tensor([[0, 1, 1], [1, 1, 1]] * (rows // 2)),
            "pixel_values": torch.arange(rows * 3 * 4 * 4, dtype=torch.float32).view(rows, 3, 4, 4),
            "num_images": [1] * rows}


def test_each_row_gets_its_own_pixels_and_equal_pictures_one_digest():
    step = llava_step()
    step["pixel_values"][2] = step["pixel_values"][0]
    found = row_images(step, processor=None)
    for row, entry in enumerate(found):
        assert torch.equal(entry.pixels["pixel_values"], step["pixel_values"][row:row + 1])
        assert entry.token_types == {}
    assert found[0].digest == found[2].digest != found[1].digest


def test_a_row_without_a_picture_and_a_step_without_pictures_have_none():
    step = llava_step()
    step["num_images"] = [1, 0, 1, 1]
    step["pixel_values"] = step["pixel_values"][:3]
    found = row_images(step, processor=None)
    assert found[1] is None and torch.equal(found[2].pixels["pixel_values"], step["pixel_values"][1:2])
    text_only = {key: step[key] for key in ("prompt_ids", "prompt_mask")}
    assert row_images(text_only, processor=None) == [None] * 4


@pytest.mark.parametrize("key, named", [("image_sizes", "LLaVA-NeXT-type"), ("num_tiles", "InternVL-type"),
                                        ("pixel_attention_mask", "Idefics/SmolVLM-type"),
                                        ("spatial_shapes", "LFM2-VL-type"), ("image_position_ids", "Gemma-4-type"),
                                        ("token_type_ids", "Gemma-3/PaliGemma-type")])
def test_an_unhandled_layout_is_refused_by_name(key, named):
    step = llava_step() | {key: torch.zeros(4, 2)}
    with pytest.raises(ValueError, match=f"cannot score this model's image inputs .*{named}.*handles LLaVA-type"):
        row_images(step, processor=None)


def test_pixels_padded_per_sample_are_refused_by_name():
    step = llava_step() | {"num_images": [2, 1, 2, 1]}  # 4 entries for 6 images: one padded entry per sample
    with pytest.raises(ValueError, match="Idefics-type"):
        row_images(step, processor=None)
    with pytest.raises(ValueError, match="pixel_values without num_images"):
        row_images({key: value for key, value in llava_step().items() if key != "num_images"}, processor=None)


def test_tools_with_pictures_are_refused_by_the_mi_pass():
    trainer = SimpleNamespace(tools=[len], processing_class=None)
    with pytest.raises(ValueError, match="does not score a vision-language model with tools"):
        MirageGRPOTrainer.diagnose(trainer, llava_step())


def test_gathered_images_keep_their_rows_and_travel_once(monkeypatch):
    """Two processes, simulated: each sends its distinct pictures once and its rows'
    digests; every row gets back its own pixels, in rank order."""
    import mirage.integrations.trl.trainer as trainer_module

    first, second = llava_step(), llava_step()
    second["pixel_values"] = second["pixel_values"] + 1000
    second["pixel_values"][3] = first["pixel_values"][0]  # a picture both processes show
    first_rows, second_rows = row_images(first, processor=None), row_images(second, processor=None)
    sent = []
    monkeypatch.setattr(trainer_module, "gather_object", lambda obj: sent.append(obj) or obj)
    trainer_module.gather_images(second_rows)  # what the second process sends
    assert len(sent[0][0]) == 4 and sent[1] == [entry.digest for entry in second_rows]
    from_second = iter(sent)
    monkeypatch.setattr(trainer_module, "gather_object", lambda obj: list(obj) + list(next(from_second)))
    gathered = trainer_module.gather_images(first_rows)
    assert len(gathered) == 8
    for entry, expected in zip(gathered, first_rows + second_rows):
        assert torch.equal(entry.pixels["pixel_values"], expected.pixels["pixel_values"])
