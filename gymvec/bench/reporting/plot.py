"""``--plot PATH``: the bench's results as a chart (PNG or SVG, by the path's suffix).

matplotlib is an optional extra (``pip install -e ".[plot]"``); without it, ``--plot`` stops
before the bench runs, with :data:`MISSING` as the reason. Figures are drawn on matplotlib's
``Figure`` directly: no pyplot, no global backend.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gymvec.bench.harness import CaseResult
from gymvec.bench.reporting.verdict import no_headroom

FORMATS = (".png", ".svg")
MISSING = (
    '--plot needs matplotlib, which is not installed: pip install -e ".[plot]" from gymvec\'s '
    "checkout (or pip install matplotlib)"
)


def plot_problem(path: str) -> str | None:
    """Why ``--plot path`` cannot work here, or None."""
    if Path(path).suffix.lower() not in FORMATS:
        return f"--plot {path}: expected a file name ending in {' or '.join(FORMATS)}"
    if importlib.util.find_spec("matplotlib") is None:
        return MISSING
    return None


def _figure(rows: int, height: float) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=(9, height), layout="constrained")


def plot_cases(case_results: Sequence[CaseResult], path: str) -> None:
    """One panel per case: each runner's speed against SyncVectorEnv (x sync), as bars."""
    cases = [c for c in case_results if any(r.ratio_sync is not None for r in c.results)]
    if not cases:
        cases = list(case_results)
    heights = [max(1, len(c.results)) for c in cases]
    figure = _figure(len(cases), 1.2 + 0.35 * sum(heights) + 0.6 * len(cases))
    axes = figure.subplots(len(cases), 1, squeeze=False, height_ratios=heights)[:, 0]
    for ax, case_result in zip(axes, cases):
        runners = [r.runner for r in case_result.results]
        ratios = [r.ratio_sync or 0.0 for r in case_result.results]
        colors = [_color(name) for name in runners]
        bars = ax.barh(range(len(runners)), ratios, color=colors)
        ax.set_yticks(range(len(runners)), runners)
        ax.invert_yaxis()
        ax.axvline(1.0, color="black", linewidth=0.8)
        for bar, result in zip(bars, case_result.results):
            label = "failed" if result.error else f"{result.ratio_sync or 0:.2f}x"
            ax.annotate(
                label,
                (bar.get_width(), bar.get_y() + bar.get_height() / 2),
                xytext=(3, 0),
                textcoords="offset points",
                va="center",
                fontsize=8,
            )
        title = f"{case_result.case.name} ({case_result.case.num_envs} x {case_result.case.env_id})"
        free = no_headroom(case_result)
        if free is not None:
            title += f": no parallel headroom now (bare-free {free:.2f}x sync)"
        ax.set_title(title, fontsize=10, color="black" if free is None else "#b00000")
        ax.set_xlabel("x sync: env-steps/s against gymnasium's SyncVectorEnv, same run")
        ax.margins(x=0.15)
    figure.suptitle(
        "python -m gymvec.bench: gymnasium (orange), gymvec (blue), framework-free references "
        "(grey)",
        fontsize=10,
    )
    figure.savefig(path)


def plot_sweep(case_results: Sequence[CaseResult], path: str) -> None:
    """Throughput and memory of each runner as the number of sub-envs grows."""
    figure = _figure(2, 7)
    speed_ax, memory_ax = figure.subplots(2, 1, sharex=True)
    runners = list(dict.fromkeys(r.runner for c in case_results for r in c.results))
    for runner in runners:
        points = [
            (c.case.num_envs, r)
            for c in case_results
            for r in c.results
            if r.runner == runner and r.steps_per_s is not None
        ]
        if not points:
            continue
        sizes = [n for n, _ in points]
        speed_ax.plot(sizes, [r.steps_per_s for _, r in points], "o-", label=runner)
        memory = [(n, r.memory_mb) for n, r in points if r.memory_mb is not None]
        if memory:
            memory_ax.plot(*zip(*memory), "o-", label=runner, color=_line_color(speed_ax))
    speed_ax.set_xscale("log", base=2)
    speed_ax.set_ylabel("env-steps/s")
    speed_ax.set_title("throughput as the number of sub-envs grows", fontsize=10)
    speed_ax.legend(fontsize=8)
    memory_ax.set_ylabel("MB (this process + workers, PSS)")
    memory_ax.set_xlabel("sub-envs (num_envs)")
    memory_ax.set_title("memory each runner added when built", fontsize=10)
    sizes = sorted({c.case.num_envs for c in case_results})
    memory_ax.set_xticks(sizes, [str(n) for n in sizes])
    figure.savefig(path)


def _line_color(ax: Any) -> Any:
    return ax.get_lines()[-1].get_color()


def _color(runner: str) -> str:
    if runner.startswith("bare-"):
        return "#bbbbbb"
    if runner.startswith("gymvec"):
        return "#1f77b4"
    return "#ff7f0e"
