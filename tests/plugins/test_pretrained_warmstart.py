"""``core warmstart ENV --model``: a pretrained checkpoint fine-tuned on the demonstrations
in its own chat format, until a format-validity target or a step limit, saved whole with
its provenance; and a GGUF file as ``--model``. The checkpoint is a tiny one built here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from checkpoints import save_templated_checkpoint


FAST = ["--set", "threads=1", "--set", "validation.episodes=4", "--set", "rollout.max_new_tokens=24",
        "--set", "env.max_turns=2", "--demos", "8", "--batch", "4"]


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory) -> Path:
    """A tiny untrained 'pretrained' checkpoint whose tokenizer has a chat template."""
    return save_templated_checkpoint(tmp_path_factory.mktemp("pretrained") / "model")


def test_lora_warm_start_stops_at_the_step_limit_and_saves_a_merged_checkpoint(cli, pretrained, tmp_path):
    out = tmp_path / "warm"
    code, stdout, stderr = cli("warmstart", "frozenlake", "--model", str(pretrained), "--out", str(out),
                               "--max-steps", "3", "--check-every", "2", "--target-format", "1.0",
                               "--set", "model.lora.rank=4", *FAST)
    assert code == 0, stderr
    facts = json.loads((out / "warmstart.json").read_text())
    assert facts["warmstart_stopped_by"] == "step_limit" and facts["warmstart_steps"] == 3
    assert [c["step"] for c in facts["checks"]] == [2, 3]
    assert 0 <= facts["format_valid_before"] <= 1 and 0 <= facts["format_valid_after"] <= 1
    assert facts["saved"] == "merged" and facts["lora"]["lora_rank"] == 4
    assert facts["source_model"] == str(pretrained) and facts["env"] == "frozenlake"
    assert facts["provenance"]["command"].startswith("core warmstart frozenlake --model")
    assert (out / "config.json").is_file() and not (out / "adapter_config.json").exists()
    assert "stopped by the step limit after 3 steps" in stdout
    # the result is what `core run --model` takes
    code, _, stderr = cli("warmstart", "frozenlake", "--model", str(out), "--out", str(tmp_path / "again"),
                          "--max-steps", "1", "--check-every", "1", "--target-format", "0.0", *FAST)
    assert code == 0, stderr
    again = json.loads((tmp_path / "again" / "warmstart.json").read_text())
    assert again["warmstart_stopped_by"] == "target" and again["warmstart_steps"] == 0


def test_bad_input_is_one_line_exit_2(cli, pretrained, tmp_path):
    code, _, stderr = cli("warmstart", "frozenlake", "--model", str(pretrained))
    assert code == 2 and "needs --out" in stderr
    code, _, stderr = cli("warmstart", "frozenlake", "--model", str(tmp_path / "none"), "--out", str(tmp_path / "o"))
    assert code == 2 and "does not exist" in stderr and len(stderr.strip().splitlines()) == 1
    (tmp_path / "two").mkdir()
    for name in ("a.gguf", "b.gguf"):
        (tmp_path / "two" / name).write_bytes(b"GGUF")
    code, _, stderr = cli("warmstart", "frozenlake", "--model", str(tmp_path / "two"), "--out", str(tmp_path / "o"))
    assert code == 2 and "several .gguf files" in stderr
    assert not (tmp_path / "o").exists()


def test_a_gguf_file_without_its_packages_names_them(tmp_path, monkeypatch):
    from mirage.plugins.backend_local import model

    monkeypatch.setattr(model, "GGUF_PACKAGES", ("gguf", "no_such_package_for_gguf"))
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    for named in (tmp_path / "m.gguf", tmp_path):  # the file, or the directory holding it alone
        problem = model.model_source_error(str(named))
        assert "with the package(s) no_such_package_for_gguf installed" in problem  # gguf is installed
        assert "pip install 'mirage-rl[gguf]'" in problem


def test_a_broken_gguf_file_is_one_line_exit_2(cli, tmp_path):
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    code, _, stderr = cli("warmstart", "frozenlake", "--model", str(tmp_path / "m.gguf"), "--out", str(tmp_path / "o"))
    assert code == 2 and "cannot load it" in stderr and len(stderr.strip().splitlines()) == 1, stderr
    assert not (tmp_path / "o").exists()
