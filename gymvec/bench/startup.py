"""``--case startup``: how long a script takes from launch to its first step, per runner.

Each run is a fresh interpreter started on a script file (as a user runs one: spawned workers
re-import it), which imports what it needs, builds 8 CartPole sub-envs on 2 workers, resets,
steps once and closes. The times are seconds since the interpreter was launched; the runs of
the runners are interleaved, and the median of each column is kept.

This module imports nothing of gymvec, so that it can time another checkout too::

    PYTHONPATH=/path/to/other/checkout python gymvec/bench/startup.py
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence

ENV_ID = "CartPole-v1"
NUM_ENVS = 8
NUM_WORKERS = 2

# The script every run shares: ``{imports}`` then ``{build}`` (which binds ``env``), timed.
_SCRIPT = """\
import sys, time
LAUNCHED = float(sys.argv[1])
{imports}
IMPORTED = time.time()


def main():
{build}
    built = time.time()
    {first_step}
    stepped = time.time()
    {close}
    closed = time.time()
    print("STARTUP", IMPORTED - LAUNCHED, built - LAUNCHED, stepped - LAUNCHED, closed - LAUNCHED)


if __name__ == "__main__":
    main()
"""

_GYM_STEP = "env.reset(seed=0); env.step(env.action_space.sample())"
_TD_STEP = "td = env.reset(); env.step(env.rand_action(td))"
_FNS = f"[lambda: gym.make({ENV_ID!r})] * {NUM_ENVS}"
# A factory per sub-env: the workers build their sub-envs and report their sizes before the
# buffers are laid out (a start in two phases), as for blocks mixed with single envs.
_EACH_FNS = f"[lambda: gym.make({ENV_ID!r}) for _ in range({NUM_ENVS})]"
_BLOCK = f"lambda: gym.make_vec({ENV_ID!r}, {{}}, vectorization_mode='vector_entry_point')"
_MIXED_FNS = f"[{_BLOCK.format(3)}, lambda: gym.make({ENV_ID!r}), {_BLOCK.format(4)}]"


@dataclasses.dataclass(frozen=True)
class StartupRunner:
    name: str
    what: str  # the class, in words
    imports: str
    build: str
    first_step: str = _GYM_STEP
    close: str = "env.close()"

    def script(self) -> str:
        return _SCRIPT.format(
            imports=self.imports,
            build=f"    env = {self.build}" if self.build else "    env = None",
            first_step=self.first_step,
            close=self.close,
        )


RUNNERS: dict[str, StartupRunner] = {
    runner.name: runner
    for runner in (
        StartupRunner(
            "gym-async",
            "gymnasium AsyncVectorEnv",
            "import gymnasium as gym",
            f"gym.vector.AsyncVectorEnv({_FNS})",
        ),
        StartupRunner(
            "gymvec-parallel",
            "gymvec ParallelVectorEnv",
            "import gymnasium as gym\nimport gymvec",
            f"gymvec.ParallelVectorEnv({_FNS}, num_workers={NUM_WORKERS})",
        ),
        StartupRunner(
            "gymvec-fns",
            "ParallelVectorEnv, a factory per sub-env",
            "import gymnasium as gym\nimport gymvec",
            f"gymvec.ParallelVectorEnv({_EACH_FNS}, num_workers={NUM_WORKERS})",
        ),
        StartupRunner(
            "gymvec-mixed",
            "ParallelVectorEnv, blocks of 3 and 4 around a single env",
            "import gymnasium as gym\nimport gymvec",
            f"gymvec.ParallelVectorEnv({_MIXED_FNS}, num_workers={NUM_WORKERS})",
        ),
        # The README's form: the tensordict classes imported at the script's top.
        StartupRunner(
            "gymvec-td",
            "gymvec ParallelEnv of GymEnv",
            "from gymvec import GymEnv, ParallelEnv",
            f"ParallelEnv({NUM_WORKERS}, lambda: GymEnv({ENV_ID!r}), "
            f"envs_per_worker={NUM_ENVS // NUM_WORKERS})",
            first_step=_TD_STEP,
        ),
        # The parent's own share of gymvec-td: importing torch and tensordict.
        StartupRunner(
            "torch-import",
            "import torch and tensordict alone",
            "import torch\nimport tensordict",
            "",
            first_step="pass",
            close="pass",
        ),
    )
}


@dataclasses.dataclass
class StartupResult:
    name: str
    imported_s: float | None = None
    built_s: float | None = None
    first_step_s: float | None = None
    closed_s: float | None = None
    error: str | None = None


def run_once(runner: StartupRunner, directory: str, timeout: float = 300.0) -> list[float]:
    """(imported, built, first step, closed), seconds since launch, of one fresh interpreter."""
    path = os.path.join(directory, f"startup_{runner.name.replace('-', '_')}.py")
    with open(path, "w") as f:
        f.write(runner.script())
    launched = time.time()
    done = subprocess.run(
        [sys.executable, path, repr(launched)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=directory,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("STARTUP ")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"{runner.name} exited with {done.returncode}: {tail}")
    return [float(x) for x in lines[-1].split()[1:]]


def run_startup(
    names: Sequence[str] = tuple(RUNNERS),
    repeats: int = 3,
    on_run: Callable[[str, int], None] | None = None,
) -> list[StartupResult]:
    """Median times of ``repeats`` interleaved runs of each runner."""
    times: dict[str, list[list[float]]] = {name: [] for name in names}
    errors: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="gymvec-startup-") as directory:
        for round_ in range(repeats):
            for name in names:
                if name in errors:
                    continue
                if on_run is not None:
                    on_run(name, round_)
                try:
                    times[name].append(run_once(RUNNERS[name], directory))
                except (RuntimeError, subprocess.TimeoutExpired) as exc:
                    errors[name] = str(exc)
    results = []
    for name in names:
        if name in errors:
            results.append(StartupResult(name, error=errors[name]))
            continue
        medians = [statistics.median(column) for column in zip(*times[name])]
        results.append(StartupResult(name, *medians))
    return results


def target_verdict(results: Sequence[StartupResult]) -> str | None:
    """Whether ParallelEnv's first step comes within 1.5x of ParallelVectorEnv's plus the
    parent's own torch import (the goal of issue 38), in words."""
    by_name = {r.name: r for r in results if r.error is None}
    try:
        td, face, torch_ = by_name["gymvec-td"], by_name["gymvec-parallel"], by_name["torch-import"]
    except KeyError:
        return None
    if td.first_step_s is None or face.first_step_s is None or torch_.imported_s is None:
        return None
    bound = 1.5 * (face.first_step_s + torch_.imported_s)
    within = "within" if td.first_step_s <= bound else "NOT within"
    return (
        f"ParallelEnv's first step at {td.first_step_s:.2f} s: {within} 1.5 x "
        f"(ParallelVectorEnv's {face.first_step_s:.2f} s + torch's import "
        f"{torch_.imported_s:.2f} s) = {bound:.2f} s"
    )


def format_startup(results: Sequence[StartupResult]) -> str:
    header = f"{'runner':<16} {'imported':>9} {'built':>7} {'1st step':>9} {'closed':>7}  what"
    lines = [header, "-" * len(header)]
    for r in results:
        if r.error is not None:
            lines.append(f"{r.name:<16} failed: {r.error}")
            continue
        what = RUNNERS[r.name].what
        lines.append(
            f"{r.name:<16} {r.imported_s:>9.2f} {r.built_s:>7.2f} {r.first_step_s:>9.2f} "
            f"{r.closed_s:>7.2f}  {what}"
        )
    return "\n".join(lines)


STARTUP_HEADER = (
    f"start-up: seconds from launching a fresh interpreter on a script to the end of its "
    f"imports, the env built ({NUM_ENVS} {ENV_ID} sub-envs, {NUM_WORKERS} workers), its "
    "first reset + step, and close() (medians of interleaved runs; each runner's default "
    "start method)"
)


def startup_json(results: Sequence[StartupResult]) -> list[dict]:
    return [dataclasses.asdict(r) for r in results]


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=STARTUP_HEADER)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)
    results = run_startup(repeats=args.repeats)
    print(STARTUP_HEADER)
    print(format_startup(results))
    verdict = target_verdict(results)
    if verdict:
        print(verdict)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(startup_json(results), f, indent=2)
    return 1 if any(r.error for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
