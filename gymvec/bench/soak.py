"""``python -m gymvec.bench --soak``: long runs that watch what the process holds.

Each configuration steps ``steps`` env-steps (10^6 by default) of one API with random actions,
random partial resets and the episode ends of the env, and samples this process's resident
memory, the resident memory of its children, its open file descriptors, threads, child
processes and /dev/shm entries every tenth of the run (see ``resources``). The first sample
is the warm-up's end: a leak shows as a column that grows after it. After ``close()`` the
children and /dev/shm entries must be back where they were before the env was built.

    >>> from gymvec.bench.soak import SoakOptions, run_soak
    >>> result = run_soak("face-next-step", 800, SoakOptions(num_envs=2, num_workers=1))
    >>> [s.env_steps for s in result.samples][:3], result.error
    ([80, 160, 240], None)
    >>> result.left_after_close
    {'children': 0, 'shm': 0, 'fds': 0}
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from gymvec.bench import resources
from gymvec.bench.envs import importable_id

if TYPE_CHECKING:
    from gymvec.vector.dropin import ParallelVectorEnv

SOAK_STEPS = 10**6
SAMPLES = 10
PARTIAL_RESET_P = 0.01  # chance per vector step of a reset of random sub-envs
# What "flat" allows memory to grow after the warm-up: allocator noise, not a leak (a leak of
# even a few bytes per step grows by megabytes over 10^6 steps).
RSS_SLACK_MB = 4.0


# What a sample measures: its field, the column's title, the digits of its change in the summary.
MEASURES = (
    ("rss_mb", "rss MB", 1),
    ("children_rss_mb", "child rss MB", 1),
    ("fds", "fds", 0),
    ("threads", "threads", 0),
    ("children", "children", 0),
    ("shm", "/dev/shm", 0),
)


@dataclasses.dataclass(frozen=True)
class Sample:
    env_steps: int
    rss_mb: float | None
    children_rss_mb: float
    fds: int | None
    threads: int | None
    children: int
    shm: int


@dataclasses.dataclass
class SoakResult:
    config: str
    samples: list[Sample]
    steps_per_s: float | None = None
    left_after_close: dict | None = None  # children, shm entries, fds beyond those before
    error: str | None = None

    def growth(self) -> dict[str, float]:
        """Last sample minus the first (the warm-up's end), per column."""
        if len(self.samples) < 2:
            return {}
        first, last = self.samples[0], self.samples[-1]
        out = {}
        for field, _, _ in MEASURES:
            a, b = getattr(first, field), getattr(last, field)
            if a is not None and b is not None:
                out[field] = b - a
        return out

    def flat(self) -> bool:
        growth = self.growth()
        if self.error is not None or not growth:
            return False
        counts = all(growth.get(k, 0) <= 0 for k in ("fds", "threads", "children", "shm"))
        memory = growth.get("rss_mb", 0) <= RSS_SLACK_MB
        memory = memory and growth.get("children_rss_mb", 0) <= RSS_SLACK_MB
        left = self.left_after_close or {}
        return counts and memory and not any(left.values())


def sample(env_steps: int) -> Sample:
    children = resources.child_pids()
    return Sample(
        env_steps=env_steps,
        rss_mb=resources.rss_mb(),
        children_rss_mb=resources.children_rss_mb(children),
        fds=resources.open_fds(),
        threads=resources.status_field("self", "Threads"),
        children=len(children),
        shm=len(resources.shm_entries()),
    )


# ---- drivers: one API each --------------------------------------------------------------------
class Driver:
    """Steps one API; ``step`` does one vector step (and any reset it decides on), which
    counts ``env_steps`` env-steps."""

    num_envs: int

    @property
    def env_steps(self) -> int:
        return self.num_envs

    def step(self, rng: np.random.Generator) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


def _random_mask(rng: np.random.Generator, n: int) -> np.ndarray:
    mask = rng.random(n) < 0.5
    mask[rng.integers(n)] = True
    return mask


class FaceDriver(Driver):
    """A gymnasium face (``ParallelVectorEnv``) in one autoreset mode."""

    def __init__(self, env: gym.vector.VectorEnv, seed: int):
        self.env, self.num_envs = env, env.num_envs
        self.disabled = env.metadata["autoreset_mode"] == gym.vector.AutoresetMode.DISABLED
        env.action_space.seed(seed)
        self.actions = [env.action_space.sample() for _ in range(64)]
        env.reset(seed=seed)
        self.k = 0

    def step(self, rng: np.random.Generator) -> None:
        self.k += 1
        _, _, terminated, truncated, _ = self.env.step(self.actions[self.k % 64])
        mask = terminated | truncated if self.disabled else np.zeros(self.num_envs, dtype=bool)
        if rng.random() < PARTIAL_RESET_P:
            mask |= _random_mask(rng, self.num_envs)
        if mask.any():
            self.env.reset(options={"reset_mask": mask})

    def close(self) -> None:
        self.env.close()


class FirstReadyDriver(Driver):
    """A first-ready face (``ParallelVectorEnv(batch_size=M)``): ``recv()`` the first ``M``
    sub-envs to finish, ``send`` them actions; each sub-env autoresets (NEXT_STEP) on its own,
    and explicit resets wait for every result, so episodes end only by themselves here."""

    def __init__(self, env: ParallelVectorEnv, seed: int):
        from gymnasium.vector.utils import batch_space

        self.env, self.num_envs = env, env.num_envs
        space = batch_space(env.single_action_space, env.batch_size)
        space.seed(seed)
        self.actions = [space.sample() for _ in range(64)]
        env.async_reset(seed=seed)
        self.k = 0

    @property
    def env_steps(self) -> int:
        return self.env.batch_size

    def step(self, rng: np.random.Generator) -> None:
        self.k += 1
        *_, infos = self.env.recv()
        self.env.send(self.actions[self.k % 64], infos["env_id"])

    def close(self) -> None:
        self.env.close()


class TensorDictDriver(Driver):
    """``ParallelEnv.step_and_maybe_reset``, with ``"_reset"`` partial resets."""

    def __init__(self, env: Any, seed: int):
        import torch

        self.env, self.num_envs = env, env.batch_size[0]
        torch.manual_seed(seed)
        env.set_seed(seed)
        self.td = env.reset()
        self.actions = [env.full_action_spec.rand() for _ in range(64)]
        self.k = 0

    def step(self, rng: np.random.Generator) -> None:
        import torch

        self.k += 1
        self.td.update(self.actions[self.k % 64])
        _, self.td = self.env.step_and_maybe_reset(self.td)
        if rng.random() < PARTIAL_RESET_P:
            from tensordict import TensorDict

            mask = torch.from_numpy(_random_mask(rng, self.num_envs)).reshape(-1, 1)
            # the root of every sub-env: the reset ones' fresh, the others' as they were
            self.td = self.env.reset(TensorDict({"_reset": mask}, batch_size=self.env.batch_size))

    def close(self) -> None:
        self.env.close()


class SB3Driver(Driver):
    """gymvec's SB3 ``VecEnv`` (same-step autoreset); SB3 has no partial reset: a random full
    ``reset()`` now and then instead."""

    def __init__(self, venv: Any, seed: int):
        self.venv, self.num_envs = venv, venv.num_envs
        space = venv.action_space
        space.seed(seed)
        self.actions = [np.array([space.sample() for _ in range(venv.num_envs)]) for _ in range(64)]
        venv.seed(seed)
        venv.reset()
        self.k = 0

    def step(self, rng: np.random.Generator) -> None:
        self.k += 1
        self.venv.step(self.actions[self.k % 64])
        if rng.random() < PARTIAL_RESET_P / 10:
            self.venv.reset()

    def close(self) -> None:
        self.venv.close()


# ---- configurations ---------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class SoakOptions:
    env_id: str = "CartPole-v1"
    num_envs: int = 8
    num_workers: int | None = None
    seed: int = 0


def _env_fns(options: SoakOptions) -> list[Callable[[], gym.Env]]:
    make = functools.partial(gym.make, importable_id(options.env_id))
    return [make] * options.num_envs


def _face(mode: str, options: SoakOptions) -> Driver:
    from gymvec import ParallelVectorEnv

    env = ParallelVectorEnv(_env_fns(options), num_workers=options.num_workers, autoreset_mode=mode)
    return FaceDriver(env, options.seed)


def _first_ready(options: SoakOptions) -> Driver:
    from gymvec import ParallelVectorEnv

    env = ParallelVectorEnv(
        _env_fns(options), num_workers=options.num_workers, batch_size=max(options.num_envs // 2, 1)
    )
    return FirstReadyDriver(env, options.seed)


def _tensordict(local_worker: bool, options: SoakOptions) -> Driver:
    from gymvec import ParallelEnv
    from gymvec.subenvs.layout import WorkerLayout

    layout = WorkerLayout.plan(options.num_envs, num_workers=options.num_workers)
    counts = list(layout.sub_envs_per_worker)
    env = ParallelEnv(
        layout.num_workers,
        functools.partial(gym.make, importable_id(options.env_id)),
        envs_per_worker=counts,
        local_worker=local_worker,
        mp_start_method="spawn",  # spawn's named semaphores: /dev/shm leftovers are watched
    )
    return TensorDictDriver(env, options.seed)


def _sb3(options: SoakOptions) -> Driver:
    from gymvec import ParallelVectorEnv
    from gymvec.sb3 import SB3VecEnv

    env = ParallelVectorEnv(
        _env_fns(options), num_workers=options.num_workers, autoreset_mode="same_step"
    )
    return SB3Driver(SB3VecEnv(env), options.seed)


CONFIGS: dict[str, Callable[[SoakOptions], Driver]] = {
    "face-next-step": functools.partial(_face, "next_step"),
    "face-same-step": functools.partial(_face, "same_step"),
    "face-disabled": functools.partial(_face, "disabled"),
    "face-first-ready": _first_ready,
    "td-parallel": functools.partial(_tensordict, False),
    "td-parallel-local": functools.partial(_tensordict, True),
    "sb3": _sb3,
}


# ---- the run ----------------------------------------------------------------------------------
def run_soak(
    name: str, steps: int, options: SoakOptions, on_sample: Callable[[Sample], None] | None = None
) -> SoakResult:
    """Run configuration ``name`` for ``steps`` env-steps (rounded up to whole vector steps)."""
    result = SoakResult(name, [])
    try:  # a short cycle first: what the first env of a process sets up for good (the
        # multiprocessing heap, its resource tracker) is not what close() leaves behind
        warm = CONFIGS[name](options)
        try:
            for _ in range(4):
                warm.step(np.random.default_rng(options.seed))
        finally:
            warm.close()
        del warm
    except Exception as exc:
        result.error = f"{type(exc).__name__}: {exc}"
        return result
    gc.collect()
    children, shm, fds = resources.child_pids(), resources.shm_entries(), resources.open_fds()
    driver = None
    try:
        driver = CONFIGS[name](options)
        rng = np.random.default_rng(options.seed)
        every = max(steps // SAMPLES, driver.env_steps)
        done, next_sample, busy = 0, every, 0.0
        while done < steps:
            start = time.perf_counter()
            while done < next_sample and done < steps:
                driver.step(rng)
                done += driver.env_steps
            busy += time.perf_counter() - start
            taken = sample(done)
            result.samples.append(taken)
            if on_sample is not None:
                on_sample(taken)
            next_sample += every
        result.steps_per_s = done / busy if busy > 0 else None
    except Exception as exc:  # reported in the table; the other configurations still run
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        if driver is not None:
            driver.close()
    del driver
    gc.collect()
    fds_after = resources.open_fds()
    result.left_after_close = {
        "children": len(resources.child_pids() - children),
        "shm": len(resources.shm_entries() - shm),
        "fds": max((fds_after or 0) - (fds or 0), 0),
    }
    return result


def run_soaks(
    names: Sequence[str], steps: int, options: SoakOptions, show_progress: bool = True
) -> list[SoakResult]:
    """Run each configuration in turn; with ``show_progress``, a line on stderr per sample."""
    results = []
    for name in names:

        def progress(s: Sample, name: str = name) -> None:
            print(f"soak {name}: {s.env_steps} env-steps", file=sys.stderr, flush=True)

        results.append(run_soak(name, steps, options, progress if show_progress else None))
    return results


# ---- reports ----------------------------------------------------------------------------------
SAMPLE_COLUMNS = ("config", "env-steps", *(title for _, title, _ in MEASURES))
_CHANGES = tuple(f"d {title}" for _, title, _ in MEASURES)
SUMMARY_COLUMNS = ("config", "steps/s", *_CHANGES, "left after close", "flat")


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}" if isinstance(value, float) else str(value)


def _table(columns: Sequence[str], rows: list[list[str]]) -> str:
    widths = [max([len(c)] + [len(row[i]) for row in rows]) for i, c in enumerate(columns)]

    def line(cells: Sequence[str]) -> str:
        first = f"{cells[0]:<{widths[0]}}"
        rest = [f"{cell:>{w}}" for cell, w in zip(cells[1:], widths[1:])]
        return "  ".join([first, *rest]).rstrip()

    return "\n".join([line(columns), line(["-" * w for w in widths])] + [line(r) for r in rows])


def format_soak(results: Sequence[SoakResult]) -> str:
    """Every sample of every configuration, then one summary line per configuration."""
    rows = []
    for r in results:
        for s in r.samples:
            cells = [_cell(getattr(s, field)) for field, _, _ in MEASURES]
            rows.append([r.config, str(s.env_steps), *cells])
    summary = []
    for r in results:
        g = r.growth()
        left = r.left_after_close or {}
        left_text = ",".join(f"{k}={v}" for k, v in left.items() if v) or "nothing"
        rate = "-" if r.steps_per_s is None else f"{r.steps_per_s:.0f}"
        changes = [_signed(g.get(field), digits) for field, _, digits in MEASURES]
        verdict = "yes" if r.flat() else ("error: " + r.error if r.error else "NO")
        summary.append([r.config, rate, *changes, left_text, verdict])
    return (
        _table(SAMPLE_COLUMNS, rows)
        + "\n\nchange from the first sample (end of warm-up) to the last:\n"
        + _table(SUMMARY_COLUMNS, summary)
    )


def _signed(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "-"
    return f"{value:+.{digits}f}"


def soak_json(results: Sequence[SoakResult], steps: int, options: SoakOptions) -> dict:
    return {
        "soak": {"steps": steps, **dataclasses.asdict(options)},
        "results": [
            {
                "config": r.config,
                "steps_per_s": r.steps_per_s,
                "samples": [dataclasses.asdict(s) for s in r.samples],
                "growth": r.growth(),
                "left_after_close": r.left_after_close,
                "flat": r.flat(),
                "error": r.error,
            }
            for r in results
        ],
    }
