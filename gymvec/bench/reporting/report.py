"""The bench's outputs: a plain-text table for people, a JSON document for tools."""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from gymvec.bench.harness import CaseResult, Settings
from gymvec.bench.runners import usable_cores

COLUMNS = ("case", "runner", "steps/s", "spread", "x sync", "x best gym", "x ceiling", "error")
# Errors are cut in the table; the JSON keeps them whole.
MAX_ERROR_CHARS = 90


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def format_table(case_results: Sequence[CaseResult]) -> str:
    """One row per (case, runner): the median steps/s over repeats, the spread of the repeats,
    and ratios of those medians within the case."""
    rows = []
    for case_result in case_results:
        for r in case_result.results:
            rate = "-" if r.steps_per_s is None else f"{r.steps_per_s:.0f}"
            error = r.error or ""
            if len(error) > MAX_ERROR_CHARS:
                error = error[: MAX_ERROR_CHARS - 3] + "..."
            spread = "-" if r.spread is None else f"{r.spread:.0%}"
            rows.append(
                (case_result.case.name, r.runner, rate, spread, _ratio(r.ratio_sync),
                 _ratio(r.ratio_best_gym), _ratio(r.ratio_ceiling), error)
            )  # fmt: skip
    widths = [max([len(c)] + [len(row[i]) for row in rows]) for i, c in enumerate(COLUMNS)]
    # Text columns align left, numbers right; the error column is last and not padded.
    align = ("<", "<", ">", ">", ">", ">", ">")

    def line(cells: Sequence[str]) -> str:
        padded = [f"{cell:{a}{w}}" for cell, a, w in zip(cells, align, widths)]
        return "  ".join(padded + [cells[-1]]).rstrip()

    out = [line(COLUMNS), line(["-" * w for w in widths])]
    out += [line(row) for row in rows]
    return "\n".join(out)


def format_sweep(case_results: Sequence[CaseResult]) -> str:
    """``--sweep``: per number of sub-envs, each runner's speed and the memory it added."""
    header = f"{'num_envs':>8}  {'runner':<18} {'steps/s':>9} {'x sync':>7} {'MB':>7}"
    lines = [header, "-" * len(header)]
    for case_result in case_results:
        for r in case_result.results:
            rate = "-" if r.steps_per_s is None else f"{r.steps_per_s:.0f}"
            memory = "-" if r.memory_mb is None else f"{r.memory_mb:.0f}"
            lines.append(
                f"{case_result.case.num_envs:>8}  {r.runner:<18} {rate:>9} "
                f"{_ratio(r.ratio_sync):>7} {memory:>7}"
            )
    lines.append("MB: what building the runner added to this process and its workers (PSS)")
    return "\n".join(lines)


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str | None:
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.exists():
        return None
    for line in cpuinfo.read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return None


def machine_info() -> dict[str, Any]:
    packages = ("gymvec", "gymnasium", "numpy", "torch", "tensordict", "stable-baselines3")
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_model": _cpu_model(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "usable_cores": usable_cores(),
        "versions": {name: _version(name) for name in packages},
    }


def _command() -> str:
    program = Path(sys.argv[0]).name
    if program == "__main__.py":
        program = "python -m gymvec.bench"
    return " ".join([program, *sys.argv[1:]])


def to_json(case_results: Sequence[CaseResult], settings: Settings) -> dict[str, Any]:
    return {
        "cases": [c.to_dict() for c in case_results],
        "settings": asdict(settings),
        "machine": machine_info(),
        "command": _command(),
    }


def write_json(path: str | Path, document: dict[str, Any]) -> None:
    Path(path).write_text(json.dumps(document, indent=2) + "\n")
