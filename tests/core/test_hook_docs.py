"""docs/hooks.md must match the hook specifications it documents."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_hook_docs_are_current():
    spec = importlib.util.spec_from_file_location("gen_hook_docs", ROOT / "scripts" / "gen_hook_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert (ROOT / "docs" / "hooks.md").read_text() == module.render(), (
        "docs/hooks.md is stale: run `python scripts/gen_hook_docs.py`"
    )


def test_every_hook_is_documented_with_its_signature():
    import inspect

    from mirage.core.plugin_api import hookspecs

    text = (ROOT / "docs" / "hooks.md").read_text()
    names = [n for n in vars(hookspecs) if n.startswith("mirage_")]
    assert len(names) == 17
    for name in names:
        signature = str(inspect.signature(getattr(hookspecs, name))).replace("'", "")
        assert f"`{name}{signature}`" in text
