"""``python -m gymvec.bench --tune <id> --num-envs <n>``: every layout of ``backend="auto"``
measured for real (``gymvec.autotune``), as a table with the one chosen and the one
``make_vec``'s default would choose."""

from __future__ import annotations

import argparse

from gymvec.layout.auto import autotune
from gymvec.layout.model import Constraints, choose

DEFAULT_NUM_ENVS = 8


def tune_main(args: argparse.Namespace) -> int:
    """Print the measured table of ``args.tune`` over ``args.num_envs`` sub-envs."""
    num_envs = args.num_envs or DEFAULT_NUM_ENVS
    seconds = args.max_seconds or None
    report = autotune(args.tune, num_envs, seconds=seconds)
    print(report.table())
    # the cost model's choice from the same measured costs
    predicted = choose(report.costs, num_envs, Constraints(), "timed").chosen
    best = report.chosen
    share = next(c.measured for c in report.candidates if c.name == predicted.name) or 0.0
    print(
        f"fastest measured: {best.name}; make_vec's default would choose {predicted.name} "
        f"({share / (best.measured or 1.0):.2f} of the fastest)"
    )
    return 0
