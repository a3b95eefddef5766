"""No import cycles inside the methodlab package (issue 41, item 7).

The graph is read from the source with stdlib `ast`, nothing is imported. Its nodes are the modules under
platform/methodlab/ (a package is the module of its `__init__.py`), and module A has an edge to module B when A
imports B, by these rules:

* every import statement counts, wherever it sits: module level, inside a function, a class or a `try`. A
  function-level import only postpones a cycle, it does not remove it. Only imports under `if TYPE_CHECKING:`
  (or `if typing.TYPE_CHECKING:`) are left out, since they never run.
* `import methodlab.a.b` is an edge to `methodlab.a.b`.
* `from methodlab.a import b` is an edge to the submodule `methodlab.a.b` when `b` is a module (a `b.py` or a
  `b/__init__.py`), else to the package `methodlab.a` itself, i.e. to its `__init__.py`. A name that a package
  `__init__` re-exports is thus an edge to the package, and through it to every submodule that `__init__`
  imports: that is what Python runs, so a submodule of `methodlab.core` that writes
  `from methodlab.core import RunContext` is in a cycle with the package, and must import from the submodule that
  defines the name (`from methodlab.core.context import RunContext`).
* relative imports (`from . import x`, `from ..a import b`) are resolved against the importing module and then
  follow the rule above.
* the implicit import of parent packages (importing `methodlab.a.b` first runs `methodlab/a/__init__.py`) is not
  an edge: otherwise every package whose `__init__` imports its own submodules would be a cycle by construction.
* a module importing itself is ignored; imports of anything outside `methodlab` are ignored, and so are
  `importlib.import_module(...)` calls (the method registry loads methods by name on purpose).

The test fails listing every strongly connected component of more than one module, with the edges inside it and
the line numbers that make them, so a cycle can be broken by moving the shared function to the module that owns it.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from tests.conftest import REPO

ROOT = REPO / "platform"
PACKAGE = "methodlab"


def module_files() -> dict[str, Path]:
    """Dotted module name -> file, for every .py under platform/methodlab/."""
    out: dict[str, Path] = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST):
    """Every Import / ImportFrom node, at any depth, except those under `if TYPE_CHECKING:`."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
            continue
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)  # the `else:` branch does run
            continue
        stack.extend(ast.iter_child_nodes(node))


def _resolve_base(module: str, is_package: bool, node: ast.ImportFrom) -> str | None:
    if node.level == 0:
        return node.module
    parts = module.split(".")
    if not is_package:
        parts = parts[:-1]  # the package the module sits in
    if node.level > 1:
        parts = parts[: len(parts) - (node.level - 1)]
    if not parts:
        return None
    return ".".join(parts + ([node.module] if node.module else []))


def import_graph() -> dict[str, dict[str, list[int]]]:
    """Module -> {imported module -> line numbers}, by the rules in the module docstring."""
    files = module_files()
    graph: dict[str, dict[str, list[int]]] = {m: {} for m in files}

    def add(src: str, dst: str, line: int) -> None:
        # an unknown name (a typo, a module that is gone) falls back to its nearest known parent package
        while dst and dst not in files:
            dst = dst.rpartition(".")[0]
        if dst and dst != src:
            graph[src].setdefault(dst, []).append(line)

    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        is_package = path.name == "__init__.py"
        for node in sorted(_imports(tree), key=lambda n: n.lineno):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name == PACKAGE or alias.name.startswith(PACKAGE + "."):
                        add(module, alias.name, node.lineno)
                continue
            base = _resolve_base(module, is_package, node)
            if base is None or not (base == PACKAGE or base.startswith(PACKAGE + ".")):
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                add(module, sub if sub in files else base, node.lineno)
    return graph


def strongly_connected(graph: dict[str, dict[str, list[int]]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative; components of more than one module, each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def describe(graph: dict[str, dict[str, list[int]]], component: list[str]) -> str:
    members = set(component)
    lines = [f"cycle among {len(component)} modules:"]
    for src in component:
        for dst, where in sorted(graph[src].items()):
            if dst in members:
                lines.append(f"  {src} -> {dst}  (line {', '.join(map(str, sorted(set(where))))})")
    return "\n".join(lines)


def test_the_graph_is_read():
    graph = import_graph()
    assert len(graph) > 50
    # a module-level import, a function-level one and a relative one are all seen
    assert "methodlab.core.errors" in graph["methodlab.core"]
    assert any(graph[m] for m in graph if m.startswith("methodlab.methods."))


def test_the_rules_on_a_tiny_package(tmp_path, monkeypatch):
    pkg = tmp_path / PACKAGE
    (pkg / "a").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a" / "__init__.py").write_text("from methodlab.a.x import f\n")
    (pkg / "a" / "x.py").write_text("def f():\n    from methodlab.a import y\n")
    (pkg / "a" / "y.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from methodlab.a import z\nfrom . import x\n")
    (pkg / "a" / "z.py").write_text("from methodlab.a import f\nfrom .. import a\nimport methodlab.a.z\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    graph = import_graph()
    assert graph["methodlab.a"] == {"methodlab.a.x": [1]}
    assert graph["methodlab.a.x"] == {"methodlab.a.y": [2]}          # inside a function
    assert graph["methodlab.a.y"] == {"methodlab.a.x": [4]}          # relative; TYPE_CHECKING left out
    assert graph["methodlab.a.z"] == {"methodlab.a": [1, 2]}         # a re-exported name is the package; no self
    assert strongly_connected(graph) == [["methodlab.a.x", "methodlab.a.y"]]


def test_no_import_cycles():
    graph = import_graph()
    cycles = strongly_connected(graph)
    assert not cycles, "import cycles in platform/methodlab/ (see this test's docstring for the rules):\n" + "\n".join(
        describe(graph, c) for c in cycles)
