"""The package's import graph has no cycles (docs/architecture.md, "Layers").

Every `import` / `from ... import` anywhere in a module counts, including the ones inside functions:
a deferred import hides a cycle from Python at import time, not from the design.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = "bertzoo"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE
# The package has well over this many modules; fewer means the walk below found nothing to check.
MIN_MODULES = 80


def module_names(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> file, with `pkg/__init__.py` named `pkg`."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _resolve(module: str, is_package: bool, level: int, target: str | None) -> str:
    """The absolute name `from <level dots><target> import ...` refers to inside `module`."""
    if level == 0:
        return target or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]  # a plain module's relative imports start at its package
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join([*base, target] if target else base)


def imports_of(module: str, path: Path, known: set[str]) -> set[str]:
    """The package-internal modules that `module` imports, anywhere in its source."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    found: set[str] = set()

    def add(name: str) -> None:
        # `import bertzoo.a.b` names bertzoo.a.b; an attribute path falls back to its longest module prefix.
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name:
            found.add(name)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == PACKAGE or alias.name.startswith(PACKAGE + "."):
                    add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            source = _resolve(module, is_package, node.level, node.module)
            if source != PACKAGE and not source.startswith(PACKAGE + "."):
                continue
            # `from bertzoo.x import y` runs bertzoo/x/__init__.py whatever y is, so it imports the
            # package bertzoo.x too (and, with y a submodule, bertzoo.x.y). A package __init__ that
            # imports its own modules then closes a cycle with any of them written this way: write
            # `import bertzoo.x.y as y` instead.
            add(source)
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                if sub in known:
                    add(sub)
    found.discard(module)
    return found


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    modules = module_names(root)
    known = set(modules)
    return {name: imports_of(name, path, known) for name, path in modules.items()}


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm (iterative): the strongly connected components with more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
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
                    components.append(sorted(component))
    return components


def a_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """One concrete import cycle inside a strongly connected component, for the failure message."""
    members = set(component)
    start = component[0]
    # Breadth-first from start's successors back to start, staying inside the component.
    parent: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for node in frontier:
            for child in sorted(graph[node] & members):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return [*reversed(path), start]
                if child not in parent:
                    parent[child] = node
                    nxt.append(child)
        frontier = nxt
    return component


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph()


def test_the_walk_sees_the_whole_package(graph) -> None:
    assert len(graph) >= MIN_MODULES, f"only {len(graph)} modules found under {ROOT}"
    assert "bertzoo.models.encoder" in graph and "bertzoo.nn" in graph  # package __init__ counts as the package
    assert any(graph.values()), "no internal imports found: the parser is broken"


def test_the_import_graph_has_no_cycles(graph) -> None:
    components = strongly_connected(graph)
    message = "\n".join(
        f"{len(c)} modules import each other: {', '.join(c)}\n  e.g. {' -> '.join(a_cycle(graph, c))}"
        for c in components
    )
    assert not components, "import cycles:\n" + message


# The layers of docs/architecture.md, bottom up (module name prefixes). A module may import its own
# layer and the ones below; every module of the package is in exactly one layer.
LAYERS = (
    ("bertzoo.errors", "bertzoo.config", "bertzoo.batch", "bertzoo.precision"),
    ("bertzoo.nn", "bertzoo.models", "bertzoo.metrics"),
    ("bertzoo.objectives",),
    ("bertzoo.io", "bertzoo.interop.hf_keys", "bertzoo.data", "bertzoo.knowledge"),
    ("bertzoo.tasks", "bertzoo.interop.onnx"),
    ("bertzoo.variants", "bertzoo.interop"),
    ("bertzoo.loading", "bertzoo.hub", "bertzoo.visualize"),
    ("bertzoo.engine",),
    ("bertzoo.train",),
    ("bertzoo.serve",),
    ("bertzoo.cli", "bertzoo.__main__"),
)


def layer_of(module: str) -> int | None:
    for number, prefixes in enumerate(LAYERS, 1):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return number
    return None


def test_no_layer_imports_a_layer_above_it(graph) -> None:
    upward = [
        f"{a} (layer {layer_of(a)}) imports {b} (layer {layer_of(b)})"
        for a in sorted(graph)
        for b in sorted(graph[a])
        if layer_of(a) is not None and layer_of(b) is not None and layer_of(b) > layer_of(a)
    ]
    assert not upward, "imports against the layering:\n" + "\n".join(upward)


def test_every_module_has_a_layer(graph) -> None:
    """A new module must be placed: otherwise it could import anything without the test noticing."""
    unplaced = sorted(m for m in graph if m != PACKAGE and layer_of(m) is None)
    assert not unplaced, f"add these modules to LAYERS (and to docs/architecture.md): {unplaced}"


def test_layer_of_follows_the_prefixes() -> None:
    modules = ("bertzoo.models.encoder", "bertzoo.nn.attention", "bertzoo.io", "bertzoo.data.text.corpus")
    assert [layer_of(m) for m in modules] == [2, 2, 4, 4]
    assert [layer_of(m) for m in ("bertzoo.engine.loop", "bertzoo.train.pretrain", "bertzoo.cli")] == [8, 9, 11]
    assert layer_of("bertzoo.interop.hf_keys") == 4 and layer_of("bertzoo.interop.convert") == 6
    assert layer_of("bertzoo.iox") is None  # a prefix matches whole name parts only


# --- the checker itself, on small made-up packages ---------------------------------------------


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / PACKAGE
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def test_imports_inside_functions_and_relative_ones_count(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "def f():\n    from bertzoo.b import g\n",
            "b.py": "from .sub import leaf\n",
            "sub/__init__.py": "",
            "sub/leaf.py": "from .. import a\nimport bertzoo.sub\n",
        },
    )
    graph = import_graph(root)
    assert graph["bertzoo.a"] == {"bertzoo.b"}
    # A submodule named in `from ... import` counts, and so does the package whose __init__ it runs.
    assert graph["bertzoo.b"] == {"bertzoo.sub", "bertzoo.sub.leaf"}
    assert graph["bertzoo.sub.leaf"] == {"bertzoo", "bertzoo.a", "bertzoo.sub"}
    assert strongly_connected(graph) == [["bertzoo.a", "bertzoo.b", "bertzoo.sub.leaf"]]


def test_a_package_init_and_a_from_import_of_its_own_module_make_a_cycle(tmp_path: Path) -> None:
    """pkg/__init__.py imports pkg.m, and pkg.n does `from pkg import m`: importing pkg.n runs
    pkg/__init__ again mid-import. `import pkg.m as m` names the module alone and is no cycle."""
    files = {"__init__.py": "", "pkg/__init__.py": "from bertzoo.pkg import n\n", "pkg/m.py": ""}
    cyclic = _package(tmp_path / "a", {**files, "pkg/n.py": "from bertzoo.pkg import m\n"})
    assert strongly_connected(import_graph(cyclic)) == [["bertzoo.pkg", "bertzoo.pkg.n"]]
    plain = _package(tmp_path / "b", {**files, "pkg/n.py": "import bertzoo.pkg.m as m\n"})
    assert strongly_connected(import_graph(plain)) == []


def test_an_acyclic_package_passes_and_a_cycle_is_named(tmp_path: Path) -> None:
    root = _package(tmp_path, {"__init__.py": "", "x.py": "import bertzoo.y\n", "y.py": "import os\n"})
    assert strongly_connected(import_graph(root)) == []
    (root / "y.py").write_text("def late():\n    from bertzoo import x\n", encoding="utf-8")
    graph = import_graph(root)
    (component,) = strongly_connected(graph)
    assert component == ["bertzoo.x", "bertzoo.y"]
    assert a_cycle(graph, component) == ["bertzoo.x", "bertzoo.y", "bertzoo.x"]


if __name__ == "__main__":  # print the components, for working on the layering
    for comp in strongly_connected(import_graph()):
        print(len(comp), comp)
    pytest.main([__file__, "-q"])
