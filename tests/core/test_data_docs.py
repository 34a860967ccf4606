"""docs/plugin-data.md must match the classes it documents."""

import dataclasses
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load_generator():
    spec = importlib.util.spec_from_file_location("gen_data_docs", ROOT / "scripts" / "gen_data_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_data_docs_are_current():
    assert (ROOT / "docs" / "plugin-data.md").read_text() == load_generator().render(), (
        "docs/plugin-data.md is stale: run `python scripts/gen_data_docs.py`"
    )


def test_every_field_has_its_own_docstring():
    generator = load_generator()
    for cls in generator.CLASSES:
        documented = generator.field_docs(cls)
        missing = [f.name for f in dataclasses.fields(cls) if f.name not in documented]
        assert not missing, f"{cls.__name__}: fields without a docstring under them: {missing}"


def test_a_field_docstring_is_rendered_in_its_row():
    from mirage.core.rl.batch import Turn

    text = (ROOT / "docs" / "plugin-data.md").read_text()
    assert f"| `reasoning` | `str` | required | {load_generator().field_docs(Turn)['reasoning']} |" in text
