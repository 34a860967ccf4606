"""Every hook specification is exercised by a test (as datasette checks its hooks): some
test module implements it (``def <hook>``) or calls it (``.<hook>(``, e.g.
``run.hook.mirage_score(...)``). Naming it in a string (an assertion on a plugin's hook
list) does not count. The hooks come from mirage/core/plugin_api/hookspecs.py, so a new hookspec
needs a test before this passes; tests/core/test_hook_docs.py checks each is documented
with its signature in docs/hooks.md."""

from __future__ import annotations

import ast
from pathlib import Path

from mirage.core.plugin_api import hookspecs

TESTS = Path(__file__).resolve().parents[1]


def hook_names() -> list[str]:
    """The hookspecs: functions pluggy marked ``mirage_spec``."""
    return [name for name, value in vars(hookspecs).items()
            if callable(value) and hasattr(value, f"{hookspecs.PROJECT}_spec")]


def exercised(source: str, hooks: set[str]) -> set[str]:
    """The hooks ``source`` implements (a function of that name) or reaches as an
    attribute (a call through ``hook.``, a plugin's method)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in hooks:
            found.add(node.name)
        elif isinstance(node, ast.Attribute) and node.attr in hooks:
            found.add(node.attr)
    return found


def test_the_hook_list_comes_from_the_hookspecs():
    names = hook_names()
    assert {"mirage_register_envs", "mirage_rollout", "mirage_diagnose", "mirage_run_end"} <= set(names)
    assert all(name.startswith("mirage_") for name in names)


def test_the_scan_counts_implementations_and_calls_not_strings():
    hooks = {"mirage_score", "mirage_filter", "mirage_update", "mirage_rollout"}
    source = '''
class Plugin:
    @hookimpl
    def mirage_filter(self, run, batch): ...

scores = run.hook.mirage_score(run=run, contexts=[], responses=[])
assert info.hooks == ["mirage_update"]
'''
    assert exercised(source, hooks) == {"mirage_filter", "mirage_score"}


def test_every_hook_is_exercised_by_a_test():
    hooks = set(hook_names())
    seen: set[str] = set()
    for path in sorted(TESTS.rglob("*.py")):
        seen |= exercised(path.read_text(), hooks)
    missing = sorted(hooks - seen)
    assert not missing, (
        f"hooks no test implements (def <hook>) or calls (.<hook>(): {', '.join(missing)}; "
        "register a throwaway plugin that implements each (tests/core/test_registration_hooks.py)")
