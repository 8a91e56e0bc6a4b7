"""What ``backend="auto"`` measures: a throwaway sub-env's step and reset cost in the calling
process (bounded in time), and this machine's round trip between two processes."""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

import numpy as np

from gymvec.common.cores import usable_cores
from gymvec.layout import cache
from gymvec.layout.model import Constraints, Costs, LayoutReport, choose

STEPS = 2000  # at most this many timed steps: a cheap env's costs settle well before
MIN_STEPS = 20  # a slow env still gets this many (its budget may then run over a little)
PINGS = 200
CHUNK = 16  # the step cost is the median of the means of this many steps in a row
_round_trip: float | None = None  # measured once per process


def time_sub_env(env: Any, seconds: float = 0.5) -> tuple[float, float, float, int]:
    """``(step, reset, reset_rate, obs_bytes)`` of a gymnasium ``env``, stepped with random
    actions for at most ``seconds``; the env is reset first and left open. ``obs_bytes``:
    the size of the reset's observation (its array leaves), which the buffers copy.

    Costs that drift: the step cost comes from the second half of the timed steps, so a
    slow start (first resets, caches, compilation) weighs nothing once it has passed; the
    reset cost from the resets after the first (the first one alone where no episode ended
    in the window).

    A loaded machine: the step cost is the median of the means of ``CHUNK`` steps in a
    row (the mean of them all where there are fewer than three runs), and the reset cost the
    median of the resets, so that the rare step during which another process had the core
    does not count; a cost that recurs within ``CHUNK`` steps still does."""
    space = env.action_space
    space.seed(0)
    started = time.perf_counter()
    obs, _ = env.reset(seed=0)
    first_reset = time.perf_counter() - started
    deadline = started + seconds
    steps: list[float] = []
    resets: list[float] = []
    last = 0.0  # the last step's time: no step starts that would end past the deadline
    while len(steps) < STEPS and (len(steps) < MIN_STEPS or time.perf_counter() + last < deadline):
        action = space.sample()
        t = time.perf_counter()
        _, _, terminated, truncated, _ = env.step(action)
        last = time.perf_counter() - t
        steps.append(last)
        if terminated or truncated:
            t = time.perf_counter()
            env.reset()
            resets.append(time.perf_counter() - t)
    later = steps[len(steps) // 2 :]
    chunks = [statistics.fmean(later[k : k + CHUNK]) for k in range(0, len(later), CHUNK)]
    step = statistics.median(chunks) if len(chunks) >= 3 else statistics.fmean(later)
    reset = statistics.median(resets) if resets else first_reset
    return step, reset, len(resets) / len(steps), nbytes(obs)


def nbytes(value: Any) -> int:
    """The bytes of the array leaves of an observation (dicts and tuples walked; objects that
    are not arrays count 0)."""
    if isinstance(value, dict):
        return sum(nbytes(v) for v in value.values())
    if isinstance(value, tuple):
        return sum(nbytes(v) for v in value)
    try:
        array = np.asarray(value)
    except Exception:  # (an observation numpy cannot take: it travels as an object)
        return 0
    return 0 if array.dtype == object else int(array.nbytes)


def round_trip() -> float:
    """Seconds for one byte to go to another process and back (the median of ``PINGS``):
    what waking a worker and hearing back costs at the least. Measured once per process,
    with a forked child; where fork is missing, a typical figure (50 us)."""
    global _round_trip
    if _round_trip is not None:
        return _round_trip
    if not hasattr(os, "fork"):
        _round_trip = 50e-6
        return _round_trip
    child_in, to_child = os.pipe()  # (read end, write end)
    from_child, child_out = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: echo until the parent closes its end
        try:
            os.close(to_child)
            os.close(from_child)
            while os.read(child_in, 1):
                os.write(child_out, b"x")
        finally:
            os._exit(0)
    os.close(child_in)
    os.close(child_out)
    times = []
    try:
        for _ in range(PINGS):
            t = time.perf_counter()
            os.write(to_child, b"x")
            os.read(from_child, 1)
            times.append(time.perf_counter() - t)
    finally:
        os.close(to_child)
        os.close(from_child)
        os.waitpid(pid, 0)
    _round_trip = statistics.median(times)
    return _round_trip


WATCH_S = 0.1  # the shortest window a CpuWatch tells from (/proc/stat counts 10 ms ticks)


class CpuWatch:
    """The cores other programs keep busy while it watches: all cores' busy time
    (``/proc/stat``) less this process's CPU time, over the wall time since it was made."""

    def __init__(self) -> None:
        self.start = _cpu_sample()

    def others(self) -> float | None:
        """Cores other programs kept busy since the watch began, waiting out the rest of
        ``WATCH_S`` where less has passed (a cheap env's timing is over in milliseconds);
        None where ``/proc/stat`` is missing."""
        if self.start is None:
            return None
        time.sleep(max(0.0, self.start[0] + WATCH_S - time.monotonic()))
        end = _cpu_sample()
        if end is None:
            return None
        wall, busy, ours = (b - a for a, b in zip(self.start, end))
        return max(0.0, (busy - ours) / wall)


def _cpu_sample() -> tuple[float, float, float] | None:
    """(wall time, every core's busy seconds, this process's CPU seconds), or None."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle, iowait
    busy = (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")  # (guest time is in user)
    return time.monotonic(), busy, time.process_time()


def others_load(watch: CpuWatch | None = None) -> float:
    """How many cores other programs keep busy: over ``watch``'s window where it tells (the
    timing of a throwaway), else the 1-minute load average less this process (which lags:
    a cached choice has no window), 0 where the system tells neither."""
    seen = None if watch is None else watch.others()
    if seen is not None:
        return seen
    try:
        return max(0.0, os.getloadavg()[0] - 1.0)
    except OSError:  # (no load average here)
        return 0.0


def measure(env: Any, cores: int, seconds: float = 0.5) -> Costs:
    """The costs of ``env`` and of this machine, both measured within ``seconds``."""
    started = time.perf_counter()
    trip = round_trip()
    step, reset, rate, obs = time_sub_env(env, max(seconds - (time.perf_counter() - started), 0.0))
    return Costs(step, reset, rate, trip, cores, obs)


def choose_layout(
    throwaway: Any,
    num_envs: int,
    constraints: Constraints,
    *,
    key: str | None = None,
    seconds: float = 0.5,
) -> LayoutReport:
    """The layout for ``num_envs`` copies of the env ``throwaway`` is one of (untouched: it
    is timed here unless the cache has its costs under ``key``; the caller closes it)."""
    cores = usable_cores()
    costs = None if key is None else cache.load(key)
    if costs is not None and costs.cores == cores:  # (the load is now's: the cache keeps costs)
        return choose(costs, num_envs, constraints, "cache", others_load())
    watch = CpuWatch()
    costs = measure(throwaway, cores, 0.9 * seconds)  # (a tenth left for what follows it)
    if key is not None:
        cache.store(key, costs)
    return choose(costs, num_envs, constraints, "timed", others_load(watch))
