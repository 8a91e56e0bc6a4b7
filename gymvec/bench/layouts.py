"""``python -m gymvec.bench --tune <id> --num-envs <n>``: every layout of ``backend="auto"``
measured for real (``gymvec.autotune``), as a table with the one chosen and the one
``make_vec``'s default would choose.

``python -m gymvec.bench --case layouts``: a panel of envs, each against gymnasium's Sync and
Async and every fixed gymvec layout in the same run, with the default's share of the best
runner and its ratio to the better of Sync/Async (issue 58's targets).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import os
import statistics
from collections.abc import Callable, Iterator, Sequence

import gymnasium as gym

import gymvec
from gymvec.bench.envs import BUSY_STEP_ID, IMAGE_OBS_ID
from gymvec.bench.harness import Settings, action_pool, describe_error, time_runner
from gymvec.bench.runners import VectorEnvRunner, make_env_fns, usable_cores
from gymvec.layout.auto import autotune
from gymvec.layout.model import Candidate, Constraints, candidates, choose

DEFAULT_NUM_ENVS = 8


def tune_main(args: argparse.Namespace) -> int:
    """Print the measured table of ``args.tune`` over ``args.num_envs`` sub-envs."""
    num_envs = args.num_envs or DEFAULT_NUM_ENVS
    seconds = args.max_seconds or None
    report = autotune(args.tune, num_envs, seconds=seconds)
    print(report.table())
    # the cost model's choice from the same measured costs
    predicted = choose(report.costs, num_envs, Constraints(), "timed", report.busy).chosen
    best = report.chosen
    share = next(c.measured for c in report.candidates if c.name == predicted.name) or 0.0
    print(
        f"fastest measured: {best.name}; make_vec's default would choose {predicted.name} "
        f"({share / (best.measured or 1.0):.2f} of the fastest)"
    )
    return 0


# ---- --case layouts: the panel ---------------------------------------------------------------
# Cheap to costly envs at 8 to 64 sub-envs: a run of a few minutes on 2 cores.
PANEL: tuple[tuple[str, int], ...] = (
    ("FrozenLake-v1", 8),
    ("Taxi-v4", 32),
    ("CartPole-v1", 8),
    ("CartPole-v1", 64),
    ("Acrobot-v1", 16),
    ("Pendulum-v1", 16),
    (IMAGE_OBS_ID, 32),
    (BUSY_STEP_ID, 8),
)
GYM_RUNNERS = ("gym-sync", "gym-async")
AUTO = "auto"
# --case layouts' run unless --repeats/--max-seconds say otherwise: 9 timed runs of 0.3 s (a
# VM's cores change speed within a second: many short runs give a steadier median)
LAYOUT_SETTINGS = {"repeats": 9, "max_seconds": 0.3}


@dataclasses.dataclass
class PanelResult:
    """One env of the panel: each runner's timed runs (sub-env steps/s), the layout that
    ``make_vec``'s default chose (its ``Candidate.name``), and the errors of runners that
    failed."""

    env_id: str
    num_envs: int
    rates: dict[str, list[float]]
    chosen: str = ""
    errors: dict[str, str] = dataclasses.field(default_factory=dict)
    pair_slowdown: float = 0.0  # the default's probe (timing.Machine); 0: no default ran

    def median(self, runner: str) -> float:
        return statistics.median(self.rates[runner]) if self.rates.get(runner) else 0.0

    @property
    def best(self) -> str:
        return max(self.rates, key=self.median)

    @property
    def share_of_best(self) -> float:
        """The default's median over the best runner's."""
        return self.median(AUTO) / (self.median(self.best) or 1.0)

    @property
    def choice_share(self) -> float:
        """The fixed layout the default chose, timed beside it, over the best runner's: the
        choice's worth, without the spread between two runs of one layout."""
        return self.median(self.chosen) / (self.median(self.best) or 1.0)

    @property
    def ratio_gym(self) -> float:
        """The default's median over the better of SyncVectorEnv's and AsyncVectorEnv's."""
        return self.median(AUTO) / (max(self.median(name) for name in GYM_RUNNERS) or 1.0)


def layout_runners(env_id: str, num_envs: int) -> dict[str, Callable[[], gym.vector.VectorEnv]]:
    """gymnasium's two, every fixed gymvec layout (``candidates``, this process first), and
    ``make_vec``'s default: name -> builder."""
    fns = make_env_fns(env_id, num_envs)
    built_id = env_id  # (make_vec pickles the spec, whose entry point any process imports)

    def fixed(c: Candidate) -> Callable[[], gym.vector.VectorEnv]:
        if c.backend == "serial":
            return functools.partial(gymvec.make_vec, built_id, num_envs, backend="serial")
        return functools.partial(
            gymvec.make_vec,
            built_id,
            num_envs,
            backend="parallel",
            num_workers=c.workers,
            local_worker=c.local,
        )

    runners: dict[str, Callable[[], gym.vector.VectorEnv]] = {
        "gym-sync": functools.partial(gym.vector.SyncVectorEnv, fns),
        "gym-async": functools.partial(gym.vector.AsyncVectorEnv, fns),
    }
    for c in candidates(num_envs, usable_cores(), Constraints()):
        runners[c.name] = fixed(c)
    runners[AUTO] = functools.partial(gymvec.make_vec, built_id, num_envs)
    return runners


def run_panel_env(env_id: str, num_envs: int, settings: Settings) -> PanelResult:
    """Every runner of one env built, then timed in turn ``settings.repeats`` times (all in
    this run, interleaved as the bench's cases are, the order rotated each time)."""
    result = PanelResult(env_id, num_envs, {})
    pool = action_pool(env_id, num_envs, settings)
    built: dict[str, VectorEnvRunner] = {}
    try:
        for name, build in layout_runners(env_id, num_envs).items():
            try:
                runner = VectorEnvRunner(build())
                built[name] = runner
                with _uncached(name == AUTO):  # (the default chooses as on a first run)
                    runner.reset(settings.seed)
                result.rates[name] = []
            except Exception as exc:  # a runner that cannot run here is reported, not fatal
                result.errors[name] = describe_error(exc)
        auto = built.get(AUTO)
        if auto is not None:
            report = auto.env.layout.report
            result.chosen = report.chosen.name
            result.pair_slowdown = report.costs.pair_slowdown
        for repeat in range(settings.repeats):
            order = list(built)  # (rotated each repeat: no runner always follows the same one)
            for name in order[repeat % len(order) :] + order[: repeat % len(order)]:
                runner = built[name]
                try:
                    result.rates[name].append(time_runner(runner, pool, num_envs, settings))
                except Exception as exc:
                    result.errors[name] = describe_error(exc)
                    built.pop(name).close()
    finally:
        for runner in built.values():
            runner.close()
    return result


@contextlib.contextmanager
def _uncached(uncached: bool) -> Iterator[None]:
    """``GYMVEC_CACHE=0`` within (``uncached``): a cached choice would judge the load by the
    load average, which this panel's own runners keep high."""
    if not uncached:
        yield
        return
    before = os.environ.get("GYMVEC_CACHE")
    os.environ["GYMVEC_CACHE"] = "0"
    try:
        yield
    finally:
        if before is None:
            del os.environ["GYMVEC_CACHE"]
        else:
            os.environ["GYMVEC_CACHE"] = before


def format_panel(results: list[PanelResult]) -> str:
    """Per env: the default's choice, its share of the best runner (and which), its ratio to
    the better of Sync/Async, then every runner's median steps/s."""
    names = list(dict.fromkeys(name for r in results for name in r.rates))
    head = f"{'case':<30}{'default chose':<22}{'pair':>6}{'x best':>7}{'choice':>7}  "
    head += f"{'best':<22}{'x gym':>6}"
    lines = [head + "".join(f"{n:>21}" for n in names)]
    for r in results:
        case = f"{r.env_id.split('/')[-1]} x{r.num_envs}"
        pair = f"{r.pair_slowdown:6.2f}" if r.pair_slowdown else f"{'':>6}"
        row = f"{case:<30}{r.chosen:<22}{pair}{r.share_of_best:7.2f}"
        row += f"{r.choice_share:7.2f}  {r.best:<22}"
        row += f"{r.ratio_gym:6.2f}"
        row += "".join(f"{r.median(n):21.0f}" if r.rates.get(n) else f"{'-':>21}" for n in names)
        lines.append(row)
        lines += [f"  {name}: {error}" for name, error in r.errors.items()]
    return "\n".join(lines)


def layouts_main(
    args: argparse.Namespace, settings: Settings, panel: Sequence[tuple[str, int]] = PANEL
) -> int:
    """Run the panel and print its table, with how many envs met the targets (the default at
    least 0.9 of the best runner and 0.95x the better of Sync/Async). ``LAYOUT_SETTINGS``
    stand where neither ``--quick`` nor the flag was given."""
    if not args.quick:
        kept = {k: v for k, v in LAYOUT_SETTINGS.items() if getattr(args, k, None) is None}
        settings = dataclasses.replace(settings, **kept)  # type: ignore[arg-type]
    results = [run_panel_env(env_id, n, settings) for env_id, n in panel]
    print(
        f"layouts: {len(results)} envs, {settings.repeats} timed run(s) per runner of "
        f"{settings.steps} vector steps or {settings.max_seconds} s, {usable_cores()} usable "
        "core(s); x best: the default (make_vec's backend='auto') over the best runner; choice: "
        "the fixed layout it chose, timed beside it, over the best runner; x gym: "
        "over the better of SyncVectorEnv and AsyncVectorEnv (medians, sub-env steps/s); pair: "
        "the default's probe, how much slower two processes run the same work at once than one"
    )
    print(format_panel(results))
    met = [r for r in results if r.share_of_best >= 0.9 and r.ratio_gym >= 0.95]
    print(f"targets (x best >= 0.90 and x gym >= 0.95) met in {len(met)} of {len(results)}")
    right = sum(r.choice_share >= 0.9 for r in results)
    print(f"layouts chosen within 0.90 of the best runner (timed as fixed layouts): {right}")
    return 0
