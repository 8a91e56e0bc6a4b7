"""The module import graph of gymvec/: no cycles, and no package imports one above it.

The graph is read from the source with ``ast``: every ``import`` and ``from ... import`` counts,
at module level, inside functions and under ``if TYPE_CHECKING:`` alike (a function-level or
type-only import that closes a cycle is still a cycle a reader has to follow). ``from package
import name`` counts as an import of ``package.name`` where that is a module, else of
``package``.

The layers, bottom up (:data:`LAYERS`): ``gymvec.errors`` and ``gymvec.common``, then
``gymvec.wire`` (the shared memory, the mode bytes, the call records), ``gymvec.subenvs``,
``gymvec.backends``, ``gymvec.engine``, and the front ends (``gymvec.vector``, ``gymvec.envs``
with ``gymvec.specs`` and ``gymvec.spaces``). A module imports only modules of its own layer or
of those below it, and below the front ends nothing imports torch.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "gymvec"


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules(root: Path = ROOT) -> dict[str, Path]:
    return {_module_name(path, root): path for path in root.rglob("*.py")}


def _imports(tree: ast.AST, module: str, is_package: bool, known: set[str]) -> set[str]:
    found: set[str] = set()
    package = module if is_package else module.rpartition(".")[0]

    def visit(node: ast.AST) -> None:
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


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """The package ``root``'s modules (gymvec's by default) and the modules of it each imports
    (importing ``a.b.c`` also runs ``a`` and ``a.b``, but those package edges are left out:
    they are where a package's ``__init__`` re-exports its own modules, not a dependency
    between layers)."""
    modules = _modules(root)
    known = set(modules)
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        names = _imports(tree, module, path.name == "__init__.py", known)
        graph[module] = {
            name for name in names if name in known and name != module and name != root.name
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


def test_a_planted_type_only_cycle_is_found(tmp_path: Path) -> None:
    # Two modules that import each other, one of them only for its annotations.
    package = tmp_path / "planted"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from planted.b import B\n\nclass A: ...\n")
    (package / "b.py").write_text(
        "from __future__ import annotations\n\n"
        "from typing import TYPE_CHECKING\n\n"
        "if TYPE_CHECKING:\n"
        "    from planted import a\n\n"
        "class B:\n"
        "    def owner(self) -> a.A: ...\n"
    )
    graph = import_graph(package)
    assert graph["planted.b"] == {"planted.a"}
    assert _cycles(graph) == [["planted.a", "planted.b"]]


# The layers, bottom up: a module imports only modules of its own layer or of lower ones.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("gymvec.errors", "gymvec.common"),
    ("gymvec.wire",),
    ("gymvec.subenvs",),
    ("gymvec.backends",),
    ("gymvec.engine",),
    ("gymvec.vector", "gymvec.envs", "gymvec.specs", "gymvec.spaces", "gymvec.options"),
)
FRONT_ENDS = len(LAYERS) - 1


def layer_of(module: str) -> int | None:
    """The layer of ``module`` (None: above them all, as ``gymvec.integrations``)."""
    for rank, packages in enumerate(LAYERS):
        if any(module == top or module.startswith(top + ".") for top in packages):
            return rank
    return None


LAYERED = sorted(m for m in _modules() if layer_of(m) in range(FRONT_ENDS))


@pytest.mark.parametrize("module", LAYERED)
def test_no_layer_imports_one_above_it(module: str) -> None:
    path = _modules()[module]
    tree = ast.parse(path.read_text(), str(path))
    rank = layer_of(module)
    names = _imports(tree, module, path.name == "__init__.py", set(_modules()))
    above = sorted(
        name
        for name in names
        if name.split(".")[0] == "torch"
        or (name.startswith("gymvec.") and (layer_of(name) is None or layer_of(name) > rank))
    )
    assert not above, f"{module} (layer {LAYERS[rank]}) imports {above}, above it"


def test_the_layers_are_read() -> None:
    # Every layer below the front ends holds modules, so that a renamed package cannot pass.
    for rank, packages in enumerate(LAYERS[:FRONT_ENDS]):
        assert any(layer_of(m) == rank for m in LAYERED), packages
    assert layer_of("gymvec.subenvs.drivers") == 2
    assert layer_of("gymvec.integrations.make_vec") is None
