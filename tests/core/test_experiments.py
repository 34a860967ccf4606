"""registry.yaml: experiments as grids over the RunConfig (mirage/core/run/experiments.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from mirage.core.errors import ConfigError
from mirage.core.plugin_api.manager import build_plugins
from mirage.core.run.experiments import Experiment, cell_label, load_registry

REPO = Path(__file__).resolve().parents[2]
PAPER_EXPERIMENTS = {
    "stochasticity": 16, "filters": 12, "algorithms": 8, "rho": 7, "entropy_coef": 5,
    "kl_coef": 4, "quartiles": 4, "pxg": 5, "traj_vs_prompt": 3, "filter_metric": 3,
    "keep": 2, "sampling": 4,
}


@pytest.fixture(scope="module")
def plugins():
    return build_plugins()


def write_registry(tmp_path: Path, experiments: dict) -> Path:
    path = tmp_path / "registry.yaml"
    path.write_text(yaml.safe_dump({"experiments": experiments}))
    return path


def test_the_registry_has_every_paper_experiment_with_its_grid():
    found = load_registry(REPO / "registry.yaml")
    assert {n: len(found[n].cells()) for n in PAPER_EXPERIMENTS} == PAPER_EXPERIMENTS
    for name in PAPER_EXPERIMENTS:
        assert found[name].description and found[name].scale_up, name
    slips = {c.env.options["slip"] for _, c in found["stochasticity"].cells()}
    assert slips == {0.0, 0.02, 0.05, 0.1, 0.2, 0.5, 0.8, 1.0}
    assert {(c.filter.name, c.filter.rho) for _, c in found["stochasticity"].cells()} == {
        ("none", 0.9), ("top_p", 0.9)}
    # CPU-sized default from the shared block, seeds default to [0]
    assert {(c.steps, c.validation.episodes, c.seed) for _, c in found["rho"].cells()} == {(20, 64, 0)}


def test_variants_change_settings_together(plugins):
    pxg = load_registry(REPO / "registry.yaml")["pxg"]
    splits = [(c.rollout.prompts, c.rollout.group_size, c.filter.name) for _, c in pxg.cells()]
    assert splits == [(128, 1, "none"), (64, 2, "top_p"), (32, 4, "top_p"), (16, 8, "top_p"),
                      (8, 16, "top_p")]
    assert all(p * g == 128 for p, g, _ in splits)
    point, _ = pxg.cells()[0]
    assert cell_label(point) == "rollout.prompts=128 rollout.group_size=1 filter.name=none"
    pxg.check(plugins)  # 128 x 1 would fail with a variance filter; its variant has none


def test_sampling_and_quartile_experiments_use_real_options(plugins):
    found = load_registry(REPO / "registry.yaml")
    sampling = [(c.rollout.temperature, c.rollout.top_p, c.rollout.min_p) for _, c in found["sampling"].cells()]
    assert sampling == [(1.0, 1.0, 0.0), (0.7, 1.0, 0.0), (1.0, 0.9, 0.0), (1.0, 1.0, 0.2)]
    assert [c.filter.options["quartile"] for _, c in found["quartiles"].cells()] == [1, 2, 3, 4]
    for name in ("sampling", "quartiles", "stochasticity", "algorithms", "keep", "filter_metric"):
        found[name].check(plugins)


def test_unknown_axis_fails_naming_it(tmp_path):
    path = write_registry(tmp_path, {"bad": {"grid": {"filter.rhoo": [0.5]}}})
    with pytest.raises(ConfigError) as info:
        load_registry(path)
    assert "experiment 'bad'" in str(info.value) and "filter.rhoo" in str(info.value)


def test_bad_value_fails_naming_it(tmp_path):
    path = write_registry(tmp_path, {"bad": {"grid": {"filter.rho": [0.5, 1.5]}}})
    with pytest.raises(ConfigError, match=r"filter\.rho.*\(got 1\.5\)"):
        load_registry(path)


def test_unknown_field_of_an_experiment_fails(tmp_path):
    path = write_registry(tmp_path, {"bad": {"axes": {"seed": [1]}}})
    with pytest.raises(ConfigError, match="experiment 'bad'.*axes"):
        load_registry(path)


def test_unknown_component_is_listed_but_cannot_start(tmp_path, plugins):
    path = write_registry(tmp_path, {
        "ok": {"base": {"env": {"name": "frozenlake"}}},
        "later": {"grid": {"env.name": ["frozenlake", "countdown_typo"]}},
    })
    found = load_registry(path)  # listed: the structure is valid
    assert set(found) == {"ok", "later"}
    found["ok"].check(plugins)
    with pytest.raises(ConfigError) as info:
        found["later"].check(plugins)
    message = str(info.value)
    assert "env.name=countdown_typo" in message and "unknown env 'countdown_typo'" in message
    assert "valid:" in message and "frozenlake" in message and "sokoban" in message


def test_unknown_filter_names_the_valid_filters(plugins):
    experiment = Experiment(grid={"filter.name": ["top_p", "nucleus"]})
    with pytest.raises(ConfigError, match=r"unknown filter 'nucleus'; valid: .*quartile.*top_p"):
        experiment.check(plugins)


def test_overrides_replace_axes_fix_settings_and_seeds():
    base = Experiment(base={"env": {"name": "frozenlake"}},
                      grid={"env.options.slip": [0.0, 0.1, 0.2], "filter.name": ["none", "top_p"]},
                      seeds=[0, 1])
    assert len(base.cells()) == 12
    shrunk = base.overridden(grid={"env.options.slip": [0.5]}, settings={"filter.name": "top_p", "steps": 3},
                             seeds=[7])
    assert [(cell_label(p), c.filter.name, c.steps, c.seed) for p, c in shrunk.cells()] == [
        ("env.options.slip=0.5", "top_p", 3, 7)]
    assert len(base.cells()) == 12  # the original is untouched


def test_preset_goes_under_axes_and_settings_over_variants():
    experiment = Experiment(base={"steps": 20}, variants=[{"rollout": {"prompts": 4}}, {"rollout": {"prompts": 8}}])
    tiny = experiment.overridden(preset={"steps": 2, "rollout": {"prompts": 2, "group_size": 4}})
    assert [(c.steps, c.rollout.prompts, c.rollout.group_size) for _, c in tiny.cells()] == [(2, 4, 4), (2, 8, 4)]
    fixed = experiment.overridden(settings={"rollout.prompts": 3})
    assert [c.rollout.prompts for _, c in fixed.cells()] == [3]  # equal cells kept once


def test_bad_overrides_name_themselves():
    experiment = Experiment(grid={"filter.rho": [0.5]})
    with pytest.raises(ConfigError, match="grid axis 'filter.rho' needs a non-empty list"):
        experiment.overridden(grid={"filter.rho": 0.5})
    with pytest.raises(ConfigError, match="algorithm.lrr"):
        experiment.overridden(settings={"algorithm.lrr": 0.1})


def test_core_experiments_lists_what_cannot_start(tmp_path, cli):
    path = write_registry(tmp_path, {
        "fine": {"base": {"env": {"name": "sokoban"}}},
        "later": {"grid": {"env.name": ["nosuch_env"]}},
    })
    code, out, err = cli("experiments", "--registry", path)
    assert code == 0, err
    assert "fine: 1 cells" in out and "later: 1 cells" in out
    assert "cannot start: cell 'env.name=nosuch_env': unknown env 'nosuch_env'; valid:" in out


def test_core_experiments_fails_on_a_malformed_registry(tmp_path, cli):
    path = write_registry(tmp_path, {"bad": {"grid": {"nosuch.path": [1]}}})
    code, out, err = cli("experiments", "--registry", path)
    assert code == 2 and "nosuch" in err and out == ""


def test_cells_are_seed_major_so_a_stopped_sweep_holds_complete_pairs():
    experiment = Experiment(grid={"filter.name": ["none", "top_p"]}, seeds=[3, 4])
    assert [(c.seed, c.filter.name) for _, c in experiment.cells()] == [
        (3, "none"), (3, "top_p"), (4, "none"), (4, "top_p")]
