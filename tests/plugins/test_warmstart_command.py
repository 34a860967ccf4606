"""``core warmstart ENV``: says where a warm start comes from; ``--rebuild`` trains it
anew and records it with its provenance and measured quality."""

from __future__ import annotations

import json

from mirage.plugins.backend_local import shipped

TINY_SETTINGS = ["--set", "model.options.hidden=32", "--set", "model.options.layers=1",
                 "--set", "model.options.heads=2", "--set", "model.options.warmstart_episodes=40",
                 "--set", "model.options.warmstart_steps=15", "--set", "model.options.warmstart_batch=16",
                 "--set", "threads=1"]


def test_rebuild_records_the_policy_with_its_provenance_and_quality(cli, tmp_path):
    out = tmp_path / "policy"
    code, stdout, stderr = cli("warmstart", "frozenlake", *TINY_SETTINGS, "--rebuild", "--out",
                               str(out), "--episodes", "8", "--batches", "1")
    assert code == 0, stderr
    record = json.loads((out / "warmstart.json").read_text())
    provenance = record["provenance"]
    assert provenance["command"].startswith("core warmstart frozenlake --set model.options.hidden=32")
    assert provenance["settings"]["model_options"]["warmstart_steps"] == 15
    assert provenance["settings"]["warmstart_seed"] == 0
    quality = provenance["quality"]
    assert quality["validation_episodes"] == 8 and quality["retrieval_chance"] == 1 / 8
    assert 0 <= quality["validation_success"] <= 1 and 0 <= quality["first_turn_retrieval"] <= 1
    assert {"model.safetensors", "config.json", "tokenizer.json"} <= {p.name for p in out.iterdir()}
    assert f"recorded in {out}" in stdout and record["warmstart_key"] in stdout


def test_without_rebuild_it_names_the_shipped_policy_at_the_defaults(cli):
    code, stdout, stderr = cli("warmstart", "sokoban")
    assert code == 0, stderr
    assert f"sokoban: warm start {shipped.record('sokoban')['warmstart_key']} from the shipped" in stdout
    assert '"command": "core warmstart sokoban' in stdout


def test_an_unknown_environment_or_a_checkpoint_is_refused_in_one_line(cli):
    code, _, stderr = cli("warmstart", "chess")
    assert code == 2 and "chess" in stderr and "sokoban" in stderr and "Traceback" not in stderr
    code, _, stderr = cli("warmstart", "sokoban", "--set", "model.backend=vllm")
    assert code == 2 and "model.backend must be local" in stderr
