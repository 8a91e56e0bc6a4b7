"""``python -m gymvec.bench`` (or ``gymvec-bench``): env-steps/s of gymvec against gymnasium/SB3.

Examples::

    python -m gymvec.bench                                 # the default CartPole cases
    python -m gymvec.bench --case busy-8 --case image-32 --json bench-cpu.json
    python -m gymvec.bench --env-id Acrobot-v1 --num-envs 16 --num-workers 2 \
        --backends gym-sync,gymvec-parallel
    python -m gymvec.bench --soak                          # 10^6 env-steps per API, leaks
    python -m gymvec.bench --soak --soak-steps 100000 --soak-config td-parallel --json soak.json
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable, Sequence
from typing import Any

from gymvec.bench.cases import CASES, DEFAULT_CASES, Case
from gymvec.bench.harness import Settings, run_cases
from gymvec.bench.reporting.plot import plot_problem
from gymvec.bench.reporting.progress import Progress
from gymvec.bench.reporting.report import format_sweep, format_table, to_json, write_json
from gymvec.bench.reporting.verdict import LEGEND, verdict_header, verdict_lines
from gymvec.bench.runners import RUNNERS, usable_cores
from gymvec.bench.soak import CONFIGS as SOAK_CONFIGS
from gymvec.bench.soak import SOAK_STEPS

STARTUP_CASE = "startup"
LAYOUTS_CASE = "layouts"  # make_vec's default against every layout (gymvec.bench.layouts)
# --sweep's runners: gym-async starts one process per sub-env, too many at 512
SWEEP_BACKENDS = ("gym-sync", "gymvec-serial", "gymvec-parallel", "bare-parallel")
FULL = Settings()
QUICK = Settings(steps=20, repeats=2, warmup=2, max_seconds=0.5)


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text}")
    return value


def _backends(text: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in RUNNERS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown runner(s) {unknown or [text]}; choose from {', '.join(RUNNERS)}"
        )
    return names


def _sweep(text: str) -> tuple[int, ...]:
    key, _, values = text.partition("=")
    if key.strip() != "num_envs" or not values:
        raise argparse.ArgumentTypeError(
            f"expected num_envs=N,N,... (e.g. num_envs=8,32), got {text}"
        )
    try:
        return tuple(_positive_int(value) for value in values.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {values}") from None


# The Settings fields a flag of their name sets (FULL's value by default): type, meaning.
_RUN_SETTINGS: dict[str, tuple[Callable[[str], Any], str]] = {
    "steps": (_positive_int, "vector steps per timed run"),
    "repeats": (_positive_int, "timed runs per runner, median kept"),
    "warmup": (_non_negative_int, "untimed vector steps before each timed run"),
    "max_seconds": (float, "cap on one timed run in seconds, 0 for none"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gymvec-bench",
        description="Env-steps/s of vectorized envs, runners interleaved within each case.",
        epilog=f"cases: {', '.join(CASES)} (default: {', '.join(DEFAULT_CASES)}); "
        f"runners: {', '.join(RUNNERS)}",
    )
    parser.add_argument(
        "--case",
        action="append",
        choices=[*CASES, STARTUP_CASE, LAYOUTS_CASE],
        help=f"a named case (repeatable); {STARTUP_CASE}: launch to first step, fresh interpreters;"
        f" {LAYOUTS_CASE}: make_vec's default layout against every layout on a panel of envs",
    )
    parser.add_argument("--env-id", help="a custom case on this gymnasium id (default CartPole-v1)")
    parser.add_argument(
        "--tune", metavar="ID", help="measure every layout of make_vec's backend='auto' on ID"
    )
    parser.add_argument(
        "--num-envs", type=_positive_int, help="sub-envs of the custom case (default 8)"
    )
    parser.add_argument(
        "--backends", type=_backends, help="comma-separated runners (default: the case's own)"
    )
    parser.add_argument("--num-workers", type=_positive_int, help="worker processes (overrides)")
    parser.add_argument(
        "--envs-per-worker", type=_positive_int, help="sub-envs per worker (overrides)"
    )
    for field, (kind, what) in _RUN_SETTINGS.items():
        flag = "--" + field.replace("_", "-")
        parser.add_argument(flag, type=kind, help=f"{what} (default {getattr(FULL, field)})")
    parser.add_argument("--seed", type=int, help="seed of the envs and the action pool")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny runs that check every runner works (CI); the figures are noise",
    )
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--strict", action="store_true", help="exit 1 if any runner failed")
    parser.add_argument(
        "--plot",
        metavar="PATH",
        help="also draw the results (PNG or SVG, by the suffix; needs matplotlib)",
    )
    parser.add_argument(
        "--sweep",
        type=_sweep,
        metavar="num_envs=N,N,...",
        help="one case per number of sub-envs (--env-id's env, default CartPole-v1; runners: "
        f"{','.join(SWEEP_BACKENDS)} unless --backends): throughput and memory as it grows",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    soak = parser.add_argument_group("soak", "long runs that sample what the process holds")
    soak.add_argument(
        "--soak",
        action="store_true",
        help="run the soak instead of the cases (--env-id, --num-envs, --num-workers, --seed, "
        "--json and --strict apply; --strict: exit 1 unless every configuration stays flat)",
    )
    soak.add_argument(
        "--soak-steps",
        type=_positive_int,
        default=SOAK_STEPS,
        help=f"env-steps per configuration (default {SOAK_STEPS})",
    )
    soak.add_argument(
        "--soak-config",
        action="append",
        choices=list(SOAK_CONFIGS),
        help="a configuration (repeatable; default: all)",
    )
    return parser


def select_cases(args: argparse.Namespace) -> list[Case]:
    if args.sweep:
        env_id = args.env_id or "CartPole-v1"
        backends = args.backends or SWEEP_BACKENDS
        return [
            Case(f"{env_id}-{n}", env_id, n, num_workers=args.num_workers, backends=backends)
            for n in args.sweep
        ]
    cases = [CASES[name] for name in args.case or [] if name != STARTUP_CASE]
    if STARTUP_CASE in (args.case or []) and not cases and args.env_id is args.num_envs is None:
        return []  # the start-up case alone
    if args.env_id is not None or args.num_envs is not None:
        env_id = args.env_id or "CartPole-v1"
        num_envs = args.num_envs or 8
        cases.append(Case(f"{env_id}-{num_envs}", env_id, num_envs))
    if not cases:
        cases = [CASES[name] for name in DEFAULT_CASES]
    overrides = {
        "backends": args.backends,
        "num_workers": args.num_workers,
        "envs_per_worker": args.envs_per_worker,
    }
    overrides = {key: value for key, value in overrides.items() if value is not None}
    return [dataclasses.replace(case, **overrides) for case in cases]


def select_settings(args: argparse.Namespace) -> Settings:
    settings = QUICK if args.quick else FULL
    given = {field: getattr(args, field) for field in ("seed", *_RUN_SETTINGS)}
    overrides = {key: value for key, value in given.items() if value is not None}
    if overrides.get("max_seconds", 1) <= 0:
        overrides["max_seconds"] = None  # no cap
    return dataclasses.replace(settings, **overrides)


def soak_main(args: argparse.Namespace) -> int:
    from gymvec.bench.soak import RSS_SLACK_MB, SoakOptions, format_soak, run_soaks, soak_json

    options = SoakOptions(
        env_id=args.env_id or "CartPole-v1",
        num_envs=args.num_envs or 8,
        num_workers=args.num_workers,
        seed=0 if args.seed is None else args.seed,
    )
    names = args.soak_config or list(SOAK_CONFIGS)
    results = run_soaks(names, args.soak_steps, options, show_progress=not args.no_progress)
    print(
        f"soak: {args.soak_steps} env-steps per configuration of {options.num_envs} "
        f"{options.env_id} sub-envs, sampled every tenth; flat: no count grew after the first "
        f"sample, memory grew by at most {RSS_SLACK_MB:g} MB, close() left no process, /dev/shm "
        "entry or file descriptor"
    )
    print(format_soak(results))
    if args.json:
        write_json(args.json, soak_json(results, args.soak_steps, options))
    return 1 if args.strict and not all(r.flat() for r in results) else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.tune:
        from gymvec.bench.layouts import tune_main

        return tune_main(args)
    if args.soak:
        return soak_main(args)
    if LAYOUTS_CASE in (args.case or []):  # the panel, on its own
        from gymvec.bench.layouts import layouts_main

        return layouts_main(args, select_settings(args))
    if args.plot:
        problem = plot_problem(args.plot)
        if problem:  # before the run: no minutes lost to find out
            parser.error(problem)
    cases = select_cases(args)
    settings = select_settings(args)
    failed_startup = False
    if STARTUP_CASE in (args.case or []):
        failed_startup = startup_main(args)
        if not cases:
            return 1 if args.strict and failed_startup else 0
    if not args.no_progress:
        print(estimate(cases, settings), file=sys.stderr, flush=True)
    case_results = run_cases(cases, settings, show_progress=not args.no_progress)
    cap = "" if settings.max_seconds is None else f" or {settings.max_seconds:g} s"
    print(
        f"{len(case_results)} case(s), {settings.repeats} timed run(s) per runner of "
        f"{settings.steps} vector steps{cap}, {usable_cores()} usable core(s)."
    )
    print(LEGEND)
    print()
    print(format_table(case_results))
    if args.sweep:
        print()
        print(format_sweep(case_results))
    print()
    print(verdict_header(settings))
    print("\n".join(verdict_lines(case_results, settings)) or "no runner was timed")
    if args.json:
        write_json(args.json, to_json(case_results, settings))
    if args.plot:
        from gymvec.bench.reporting.plot import plot_cases, plot_sweep

        (plot_sweep if args.sweep else plot_cases)(case_results, args.plot)
        print(f"chart: {args.plot}")
    failed = [r for c in case_results for r in c.results if r.error is not None]
    return 1 if args.strict and (failed or failed_startup) else 0


def estimate(cases: Sequence[Case], settings: Settings) -> str:
    """How long the run should take: each runner is built once (a few seconds) and timed
    ``repeats`` times, each run capped by ``max_seconds`` (2 s assumed without a cap)."""
    runs = sum(len(case.runner_names()) for case in cases)
    per_run = 2.0 if settings.max_seconds is None else settings.max_seconds
    seconds = runs * (3.0 + settings.repeats * per_run)
    return f"{runs} runner(s) to build and time: about {seconds / 60:.1f} min (the ETA follows)"


def startup_main(args: argparse.Namespace) -> bool:
    """Run and print the start-up case; whether a runner failed."""
    from gymvec.bench import startup

    progress = Progress(len(startup.RUNNERS) * (1 if args.quick else 3), not args.no_progress)

    def on_run(name: str, round_: int) -> None:
        progress.describe(f"startup {name} {round_ + 1}")
        if round_ or name != next(iter(startup.RUNNERS)):
            progress.update()

    try:
        results = startup.run_startup(repeats=1 if args.quick else 3, on_run=on_run)
    finally:
        progress.close()
    print(startup.STARTUP_HEADER)
    print(startup.format_startup(results))
    verdict = startup.target_verdict(results)
    if verdict:
        print(verdict)
    print()
    return any(r.error for r in results)


# Guarded: worker processes started with spawn/forkserver re-import the main module.
if __name__ == "__main__":
    sys.exit(main())
