"""The module import graph of gymvec/: no cycles, and the engine imports nothing above it.

The graph is read from the source with ``ast``: every ``import`` and ``from ... import`` counts,
at module level and inside functions alike (a function-level import that closes a cycle is
still a cycle a reader has to follow); imports under ``if TYPE_CHECKING:`` are left out, as
they never run. ``from package import name`` counts as an import of ``package.name`` where
that is a module, else of ``package``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "gymvec"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in ROOT.rglob("*.py")}


def _type_checking_only(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


def _imports(tree: ast.AST, module: str, is_package: bool, known: set[str]) -> set[str]:
    found: set[str] = set()
    package = module if is_package else module.rpartition(".")[0]

    def visit(node: ast.AST) -> None:
        if _type_checking_only(node):
            for child in node.orelse:  # type: ignore[attr-defined]
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")
                parent = parent[: len(parent) - (node.level - 1)]
                base = ".".join([*parent, base] if base else parent)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in known else base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph() -> dict[str, set[str]]:
    """gymvec's modules and the gymvec modules each imports (importing ``a.b.c`` also runs
    ``a`` and ``a.b``, but those package edges are left out: they are where a package's
    ``__init__`` re-exports its own modules, not a dependency between layers)."""
    modules = _modules()
    known = set(modules)
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        names = _imports(tree, module, path.name == "__init__.py", known)
        graph[module] = {
            name for name in names if name in known and name != module and name != "gymvec"
        }
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return components


def test_the_graph_is_read() -> None:
    graph = import_graph()
    # A few edges that must be there, so that an empty graph cannot pass.
    assert "gymvec.wire.buffers" in graph["gymvec.engine.engine"]
    assert "gymvec.engine.engine" in graph["gymvec.envs.batched"]
    assert "gymvec.wire.commands" in graph["gymvec.subenvs.drivers"]


def test_no_import_cycles() -> None:
    cycles = _cycles(import_graph())
    assert not cycles, f"import cycles in gymvec/: {cycles}"


def test_cycles_are_found() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


ABOVE_THE_ENGINE = ("gymvec.envs", "gymvec.vector", "gymvec.specs", "gymvec.spaces")


@pytest.mark.parametrize("module", sorted(m for m in _modules() if m.startswith("gymvec.engine")))
def test_the_engine_imports_nothing_above_it(module: str) -> None:
    path = _modules()[module]
    tree = ast.parse(path.read_text(), str(path))
    names = _imports(tree, module, path.name == "__init__.py", set(_modules()))
    above = sorted(
        name
        for name in names
        if name.split(".")[0] == "torch"
        or any(name == top or name.startswith(top + ".") for top in ABOVE_THE_ENGINE)
    )
    assert not above, f"{module} imports {above}, above the engine"
