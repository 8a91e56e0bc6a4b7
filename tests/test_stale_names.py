"""Every file, module and ``file.py:function`` that docs/ and gymvec's own text name exists.

A reader follows these names from the docs into the code; a file moved or a function renamed
leaves a pointer to nothing. Three forms are checked, in docs/*.md, README.md and every module
of gymvec (comments and docstrings alike):

- ``path/to/file.py`` or ``file.py``: a file of this checkout whose path ends so;
- ``file.py:Name`` or ``file.py:Class.method``: that file, and that name defined in it;
- ```module.Name``` (in backticks), where ``module`` is one of gymvec's modules or packages
  (``gymvec.`` may stand before it): that module, and the name in it or in one of its classes.

Files that belong to other projects (gymnasium's and SB3's tests, CleanRL's scripts) are named
in ``UPSTREAM`` with whose they are.
"""

from __future__ import annotations

import ast
import functools
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "gymvec"

# Files named in gymvec's text that live in other projects: name -> whose.
UPSTREAM = {
    "test_sync_vector_env.py": "gymnasium's tests",
    "test_vector_env.py": "gymnasium's tests",
    "test_vector_env_info.py": "gymnasium's tests",
    "test_autoreset_mode.py": "gymnasium's tests",
    "test_vec_envs.py": "SB3's tests",
    "test_vec_check_nan.py": "SB3's tests",
    "test_vec_extract_dict_obs.py": "SB3's tests",
    "test_vec_normalize.py": "SB3's tests",
    "test_vec_stacked_obs.py": "SB3's tests",
    "ppo.py": "CleanRL's script",
    "setup.py": "a package's build script",
}

FILE_REF = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w-]+\.py)(?!\w)(?::([A-Za-z_][\w.]*\w))?")
# First parts that name another library (gymvec's subpackages share their names) or, in
# gymvec's text, a variable rather than the module of that name.
NOT_MODULES = {"ray", "torchrl", "pettingzoo", "tianshou", "envs", "env", "vector_env", "config"}
DOTTED_REF = re.compile(r"`{1,2}((?:gymvec\.)?[a-z_]\w*(?:\.[A-Za-z_]\w*)+)(?:\(|`)")


def _texts() -> list[pathlib.Path]:
    docs = sorted((ROOT / "docs").glob("*.md"))
    return [ROOT / "README.md", *docs, *sorted(PACKAGE.rglob("*.py"))]


@functools.cache
def _files() -> tuple[str, ...]:
    skip = {".git", ".venv", "site", "__pycache__", "node_modules"}
    return tuple(
        path.relative_to(ROOT).as_posix()
        for path in ROOT.rglob("*.py")
        if not skip.intersection(path.relative_to(ROOT).parts)
    )


def _find_file(ref: str) -> str | None:
    matches = [path for path in _files() if path == ref or path.endswith("/" + ref)]
    return matches[0] if matches else None


@functools.cache
def _definitions(path: str) -> dict[str, set[str]]:
    """Top-level names of a module, each with the names defined in its body (a class's)."""
    tree = ast.parse((ROOT / path).read_text())
    names: dict[str, set[str]] = {}
    for node in tree.body:
        for name, body in _defined(node):
            names.setdefault(name, set()).update(body)
    return names


def _defined(node: ast.stmt) -> list[tuple[str, set[str]]]:
    if isinstance(node, ast.ClassDef):
        members = {name for child in node.body for name, _ in _defined(child)}
        # attributes set in methods (self.x = ...) are members too
        members.update(
            target.attr
            for child in ast.walk(node)
            if isinstance(child, (ast.Assign, ast.AnnAssign))
            for target in (child.targets if isinstance(child, ast.Assign) else [child.target])
            if isinstance(target, ast.Attribute)
        )
        return [(node.name, members)]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return [(node.name, set())]
    if isinstance(node, ast.Assign):
        return [(t.id, set()) for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [(node.target.id, set())]
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [((alias.asname or alias.name).split(".")[0], set()) for alias in node.names]
    if isinstance(node, (ast.If, ast.Try)):
        return [item for child in node.body for item in _defined(child)]
    return []


def _has_name(path: str, qualname: str) -> bool:
    first, *rest = qualname.split(".")
    names = _definitions(path)
    if first not in names:
        return False
    return not rest or rest[0] in names[first] or not names[first]


@functools.cache
def _modules() -> dict[str, list[str]]:
    """Each dotted tail of gymvec's module paths ("calls", "wire.calls") and each full name
    ("gymvec.wire.calls", "gymvec") -> the files it names."""
    modules: dict[str, list[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        for start in range(len(parts)):
            key = ".".join(parts[start:])
            modules.setdefault(key, []).append(path.relative_to(ROOT).as_posix())
        modules.setdefault(".".join(("gymvec", *parts)), []).append(
            path.relative_to(ROOT).as_posix()
        )
    return modules


def _package_files(module_file: str) -> list[str]:
    if not module_file.endswith("__init__.py"):
        return [module_file]
    folder = module_file.rsplit("/", 1)[0]
    return [path for path in _files() if path.startswith(folder + "/")]


def stale_dotted(ref: str) -> str | None:
    """Why a backticked ``module.Name`` points nowhere, or None when it resolves."""
    modules = _modules()
    parts = ref.split(".")
    if parts[0] == "gymvec":
        if ref in modules:
            return None
        for cut in range(len(parts) - 1, 0, -1):
            if ".".join(parts[:cut]) in modules:
                return _stale_attribute(modules[".".join(parts[:cut])], parts[cut:])
        return f"gymvec has no module {parts[1]!r}"
    if parts[0] in NOT_MODULES or parts[0] not in modules:
        return None  # a variable's attribute, or another library's name
    for cut in range(len(parts), 0, -1):
        files = modules.get(".".join(parts[:cut]))
        if files is not None:
            rest = parts[cut:]
            # "module.attribute" in lower case is as often an attribute of an object
            if len(rest) == 1 and not rest[0][0].isupper():
                return None
            return _stale_attribute(files, rest)
    return None


def _stale_attribute(files: list[str], rest: list[str]) -> str | None:
    if not rest:
        return None
    # "engine.recv" may name a method of an engine class: any class of the module counts.
    for file in (f for module in files for f in _package_files(module)):
        names = _definitions(file)
        if rest[0] in names or any(rest[0] in body for body in names.values()):
            return None
    return f"no {'.'.join(rest)!r} in {', '.join(files)}"


def stale_file(ref: str, name: str | None) -> str | None:
    """Why ``file.py`` (or ``file.py:name``) points nowhere, or None when it resolves."""
    path = _find_file(ref)
    if path is None:
        return None if ref.rsplit("/", 1)[-1] in UPSTREAM else "no such file in the checkout"
    if name is not None and not _has_name(path, name):
        return f"{path} defines no {name!r}"
    return None


def stale_names(text: str) -> list[str]:
    """The stale names in one text, each with why."""
    found = []
    for match in FILE_REF.finditer(text):
        why = stale_file(match[1], match[2])
        if why:
            found.append(f"{match[0]}: {why}")
    for match in DOTTED_REF.finditer(text):
        if match[1].endswith(".py") or re.search(r"\.(md|toml|cfg|txt)$", match[1]):
            continue
        why = stale_dotted(match[1])
        if why:
            found.append(f"{match[1]}: {why}")
    return found


@pytest.mark.parametrize("path", _texts(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_names_point_to_what_exists(path):
    stale = stale_names(path.read_text())
    assert not stale, f"{path.relative_to(ROOT)} names what does not exist:\n" + "\n".join(stale)


@pytest.mark.parametrize(
    "planted",
    [
        "see ``process_rows.py``",
        "`backends/processes/executor.py:ProcessExecutor.no_such_method`",
        "`engine/engine.py:NoSuchEngine`",
        "``engine.ray_executor.RayExecutor``",
        "`gymvec.wire.no_such_module`",
        "`calls.NoSuchRecord`",
    ],
)
def test_a_planted_stale_name_is_caught(planted):
    assert stale_names(planted), planted


@pytest.mark.parametrize(
    "live",
    [
        "`backends/processes/executor.py:ProcessExecutor.send`",
        "``subenvs.layout.WorkerLayout``",
        "`gymvec.engine`",
        "`calls.Command`",
        "gymnasium's `test_sync_vector_env.py`",
    ],
)
def test_a_live_name_passes(live):
    assert not stale_names(live), live
