"""Sizes a reader can take in: no module of gymvec/ over 600 lines, no class over 400, no folder
with more than 12 modules (``.py`` files other than ``__init__.py``).

``python tests/test_sizes.py`` prints the largest module, class and folder.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "gymvec"
MAX_MODULE_LINES = 600
MAX_CLASS_LINES = 400
MAX_FOLDER_MODULES = 12


def _modules() -> list[Path]:
    return sorted(ROOT.rglob("*.py"))


def _name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def module_lines() -> dict[str, int]:
    return {_name(path): len(path.read_text().splitlines()) for path in _modules()}


def class_lines() -> dict[str, int]:
    """Every class, nested ones included, from its ``class`` line to its last."""
    sizes = {}
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                end = node.end_lineno or node.lineno
                sizes[f"{_name(path)}:{node.name}"] = end - node.lineno + 1
    return sizes


def folder_modules() -> dict[str, int]:
    counts = Counter(_name(path.parent) for path in _modules() if path.name != "__init__.py")
    return {folder if folder != "." else "gymvec": n for folder, n in counts.items()}


def _over(sizes: dict[str, int], limit: int) -> dict[str, int]:
    return {name: size for name, size in sizes.items() if size > limit}


def _check(sizes: dict[str, int], limit: int, what: str) -> None:
    over = _over(sizes, limit)
    assert not over, f"{what} over {limit}: {over}"


def test_no_module_over_600_lines() -> None:
    _check(module_lines(), MAX_MODULE_LINES, "modules (lines)")


def test_no_class_over_400_lines() -> None:
    _check(class_lines(), MAX_CLASS_LINES, "classes (lines)")


def test_no_folder_over_12_modules() -> None:
    over = _over(folder_modules(), MAX_FOLDER_MODULES)
    assert not over, f"folders over {MAX_FOLDER_MODULES} modules: {over}"


def test_an_oversized_entry_is_caught() -> None:
    with pytest.raises(AssertionError, match="big.py"):
        _check({"big.py": MAX_MODULE_LINES + 1}, MAX_MODULE_LINES, "modules (lines)")


if __name__ == "__main__":
    for what, sizes in (
        ("module (lines)", module_lines()),
        ("class (lines)", class_lines()),
        ("folder (modules)", folder_modules()),
    ):
        ranked = sorted(sizes.items(), key=lambda item: -item[1])
        top = ", ".join(name for name, size in ranked if size == ranked[0][1])
        print(f"largest {what}: {ranked[0][1]} {top}")
