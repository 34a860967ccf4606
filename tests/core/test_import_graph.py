"""The layering of the package, read from the source with ``ast`` (issue #21).

Every ``import`` of a mirage module counts: at module level, under ``TYPE_CHECKING`` and
inside functions. A lazy import that exists to dodge a circle is still a circle, and a
type-only import still ties two modules together, so neither is exempt. Two rules:

* ``mirage.core`` imports nothing from ``mirage.flows``, ``mirage.report`` or
  ``mirage.app`` (their commands reach the ``core`` program as plugins, see
  ``mirage/builtins.py``);
* no import circle among mirage modules;
* core's parts (its folders, issue #34) stand on floors: each imports only the parts on
  the floors below it (:data:`CORE_FLOORS`), ``errors`` nothing of mirage's.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
UPPER_FLOORS = ("mirage.flows", "mirage.report", "mirage.app", "mirage.probe", "mirage.integrations")
# core's parts, lowest floor first; parts on one floor do not import each other
CORE_FLOORS = (("errors",), ("config", "parallel"), ("rl", "store"), ("analysis", "plugin_api"), ("run",), ("memory",),
               ("cli",))

Edges = dict[str, dict[str, str]]  # module -> {imported module: "file:line" of the first import}


def modules(root: Path, package: str = "mirage") -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is a package's __init__)."""
    found = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def import_graph(root: Path, package: str = "mirage") -> Edges:
    """Every module's imports of modules of ``package``, wherever in the file they are."""
    known = modules(root, package)

    def resolve(name: str) -> str | None:  # the module a dotted name lives in
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    graph: Edges = {}
    for name, (path, is_package) in known.items():
        edges: dict[str, str] = {}
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [resolve(alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the module's package upwards
                    anchor = name if is_package else name.rpartition(".")[0]
                    for _ in range(node.level - 1):
                        anchor = anchor.rpartition(".")[0]
                    base = f"{anchor}.{base}" if base else anchor
                # ``from a.b import c`` imports module a.b.c when there is one, else a name of a.b
                targets = [resolve(f"{base}.{alias.name}") if f"{base}.{alias.name}" in known
                           else resolve(base) for alias in node.names]
            else:
                continue
            for target in targets:
                if target and target != name and (target + ".").startswith(package + "."):
                    edges.setdefault(target, f"{path.relative_to(root)}:{node.lineno}")
        graph[name] = edges
    return graph


def upward_edges(graph: Edges) -> list[str]:
    """``mirage.core.x -> mirage.flows.y (file:line)`` for every import from core upwards."""
    return [f"{source} -> {target} ({where})"
            for source, edges in sorted(graph.items()) if _within(source, "mirage.core")
            for target, where in sorted(edges.items())
            if any(_within(target, floor) for floor in UPPER_FLOORS)]


def cycles(graph: Edges) -> list[str]:
    """One circle per strongly connected component of more than one module, written
    ``a -> b (file:line) -> a (file:line)``."""
    out = []
    for component in _strongly_connected(graph):
        start = min(component)
        path = _path_back(graph, start, component)
        steps = [f"{target} ({graph[source][target]})" for source, target in zip(path, path[1:])]
        out.append(" -> ".join([start, *steps]))
    return out


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _strongly_connected(graph: Edges) -> list[set[str]]:
    """Tarjan's algorithm, iterative; components of one module are left out."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph.get(target, {})))))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def _path_back(graph: Edges, start: str, component: set[str]) -> list[str]:
    """The shortest import path from ``start`` back to itself inside ``component``."""
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(graph[node]):
                if target == start:
                    path = [node, start]
                    while path[0] != start:
                        path.insert(0, previous[path[0]])
                    return path
                if target in component and target not in previous:
                    previous[target] = node
                    following.append(target)
        frontier = following
    raise AssertionError(f"{start} is in no circle")  # a component always holds one


# --------------------------------------------------------------------------- the package


def test_core_imports_nothing_from_flows_report_or_app():
    found = upward_edges(import_graph(ROOT))
    assert not found, ("mirage.core imports from the floors above it (add a command through "
                       "mirage_register_commands instead):\n  " + "\n  ".join(found))


def test_no_import_circle_among_mirage_modules():
    found = cycles(import_graph(ROOT))
    assert not found, ("import circles (type-only and lazy imports count; move what both "
                       "need to a module both can import):\n  " + "\n  ".join(found))


def core_part(module: str) -> str | None:
    """The part of core (``config`` for ``mirage.core.config.legacy``) a module is in."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["mirage", "core"] else None


def test_cores_parts_import_only_the_floors_below_them():
    floor = {part: level for level, parts in enumerate(CORE_FLOORS) for part in parts}
    found = {core_part(m) for m in modules(ROOT)} - {None}
    assert found == set(floor), f"core's parts are {sorted(found)}; CORE_FLOORS names {sorted(floor)}"
    wrong = [f"{source} -> {target} ({where})"
             for source, edges in sorted(import_graph(ROOT).items()) if core_part(source)
             for target, where in sorted(edges.items()) if core_part(target)
             and core_part(target) != core_part(source)
             and floor[core_part(target)] >= floor[core_part(source)]]
    assert not wrong, "imports not from a lower floor of core:\n" + "\n".join(wrong)


def test_the_graph_sees_the_imports_that_matter():
    """The reader finds the kinds of import the rules are about in the real package."""
    graph = import_graph(ROOT)
    assert "mirage.core.plugin_api.session" in graph["mirage.core.plugin_api.hookspecs"]  # under TYPE_CHECKING
    assert "mirage.core.rl.training" in graph["mirage.core.rl.backend"]  # inside a method
    assert "mirage.core.plugin_api.hookspecs" in graph["mirage.core.plugin_api.manager"]  # from mirage.core.plugin_api import hookspecs
    assert "mirage.core.cli.program" in graph["mirage.builtins"]


# --------------------------------------------------------------------------- the checks fail


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return tmp_path


def test_a_lazy_or_type_only_circle_is_reported_with_its_lines(tmp_path):
    root = _package(tmp_path, {
        "mirage/__init__.py": "",
        "mirage/core/__init__.py": "",
        "mirage/core/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from mirage.core.b import B\n",
        "mirage/core/b.py": "def f():\n    from . import c\n",
        "mirage/core/c.py": "from mirage.core import a\n",
        "mirage/core/d.py": "import mirage.core.a\n",  # into the circle, not part of it
    })
    assert cycles(import_graph(root)) == [
        "mirage.core.a -> mirage.core.b (mirage/core/a.py:3) -> mirage.core.c (mirage/core/b.py:2)"
        " -> mirage.core.a (mirage/core/c.py:1)"]


def test_an_import_from_core_upwards_is_reported_even_inside_a_function(tmp_path):
    root = _package(tmp_path, {
        "mirage/__init__.py": "",
        "mirage/core/__init__.py": "",
        "mirage/core/cli.py": "def sweep():\n    from mirage.flows.sweep import run\n",
        "mirage/flows/__init__.py": "",
        "mirage/flows/sweep.py": "from mirage.core import cli\n",
        "mirage/report/__init__.py": "from ..core import cli\n",  # upper floors may import core
    })
    graph = import_graph(root)
    assert upward_edges(graph) == ["mirage.core.cli -> mirage.flows.sweep (mirage/core/cli.py:2)"]
    assert graph["mirage.report"] == {"mirage.core.cli": "mirage/report/__init__.py:1"}
