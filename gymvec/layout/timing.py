"""What ``backend="auto"`` measures: a throwaway sub-env's step and reset cost in the calling
process (bounded in time), and this machine's round trip between two processes."""

from __future__ import annotations

import dataclasses
import mmap
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
CHUNK = 16  # the step cost is the median of the means of this many steps in a row
PINGS = 200  # the probe's pipe round trips...
SPIN_PINGS = 500  # ...its round trips through shared words...
WORK_REPS = 5  # ...and its pieces of Python work, alone and with the child's
WORK_LOOP = 20_000
_SEQ, _DONE, _WORK, _CHILD_NS = range(4)  # the probe's shared words
PROBE_WAIT_S = 1.0  # the probe gives up on a child that does not answer in this long


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


@dataclasses.dataclass(frozen=True)
class Machine:
    """What this machine's processes cost each other, measured with a forked child:
    ``round_trip`` (a byte over a pipe and back: a wake-up through the kernel),
    ``spin_trip`` (a word in shared memory and back, both processes spinning), and how fast
    Python runs on the child's core (``other_speed``) and on this one (``own_speed``) while
    both run at once, each against this core running alone."""

    round_trip: float = 50e-6
    spin_trip: float = 1e-6
    other_speed: float = 1.0
    own_speed: float = 1.0


def _python_work() -> float:
    """Seconds for a fixed piece of pure-Python work (about half a millisecond)."""
    started = time.perf_counter()
    total = 0
    for i in range(WORK_LOOP):
        total += i
    return time.perf_counter() - started


def probe_machine() -> Machine:
    """This machine's :class:`Machine` now, from one forked child (some 20 ms); typical
    figures where fork is missing.

    Two virtual cores need not run alike: on a cloud VM one may run Python 1.5x slower than
    the other for a while (its host core is shared), and which one the calling process gets
    decides whether a share stepped by a worker gains anything."""
    if not hasattr(os, "fork"):
        return Machine()
    words_memory = mmap.mmap(-1, 64)  # (anonymous and shared: the child sees the same page)
    words = memoryview(words_memory).cast("B").cast("q")
    child_in, to_child = os.pipe()  # (read end, write end)
    from_child, child_out = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(to_child)
            os.close(from_child)
            _echo(child_in, child_out, words, parent)
        finally:
            os._exit(0)
    os.close(child_in)
    os.close(child_out)
    pipe_times: list[float] = []
    try:
        for _ in range(PINGS):
            t = time.perf_counter()
            os.write(to_child, b"x")
            os.read(from_child, 1)
            pipe_times.append(time.perf_counter() - t)
        os.write(to_child, b"s")  # on to the shared words
        spin_times = [_answered(words, seq) for seq in range(1, SPIN_PINGS + 1)]
        words[_WORK] = 1
        alone, own, other = [], [], []
        for rep in range(WORK_REPS + 1):  # (rep 0 warms up: the child's copied pages)
            alone_s = _python_work()  # the child waits
            seq = SPIN_PINGS + 1 + rep
            words[_SEQ] = seq
            own_s = _python_work()  # while the child runs its own
            _answered(words, seq)
            if rep:
                alone.append(alone_s)
                own.append(own_s)
                other.append(words[_CHILD_NS] * 1e-9)
    except (OSError, TimeoutError):  # (the child died or had no core: typical figures)
        return Machine(statistics.median(pipe_times)) if pipe_times else Machine()
    finally:
        words[_SEQ] = -1
        os.close(to_child)
        os.close(from_child)
        os.waitpid(pid, 0)
    alone_s = statistics.median(alone)
    return Machine(
        statistics.median(pipe_times),
        statistics.median(spin_times),
        _speed(alone_s, statistics.median(other)),
        _speed(alone_s, statistics.median(own)),
    )


def _answered(words: memoryview, seq: int) -> float:
    """Seconds until the probe's child answers ``seq`` (sent here, unless already sent);
    ``TimeoutError`` past ``PROBE_WAIT_S``."""
    started = time.perf_counter()
    words[_SEQ] = seq
    while words[_DONE] != seq:
        if time.perf_counter() - started > PROBE_WAIT_S:
            raise TimeoutError("the layout probe's child did not answer")
    return time.perf_counter() - started


def _speed(alone: float, measured: float) -> float:
    """A speed against running alone, kept within 4x either way (a wild sample is noise)."""
    return min(4.0, max(0.25, alone / measured)) if measured > 0 else 1.0


def _echo(pipe_in: int, pipe_out: int, words: memoryview, parent: int) -> None:
    """The probe's child: echoes bytes on the pipe until told to spin ("s"), then answers
    each new sequence word (running the Python work first when asked) until it turns
    negative or the parent is gone."""
    while (got := os.read(pipe_in, 1)) == b"x":
        os.write(pipe_out, b"x")
    if got != b"s":
        return
    seen, idle = 0, 0
    while True:
        seq = words[_SEQ]
        if seq == seen:
            idle += 1
            if idle > 1_000_000 and os.getppid() != parent:  # (an orphan stops spinning)
                return
            continue
        if seq < 0:
            return
        seen, idle = seq, 0
        if words[_WORK]:
            words[_CHILD_NS] = int(_python_work() * 1e9)
        words[_DONE] = seq


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


def measure(env: Any, cores: int, seconds: float = 0.5) -> tuple[Costs, float]:
    """The costs of ``env`` and of this machine, measured within ``seconds``, and the cores
    other programs kept busy meanwhile (``others_load``, watched after the probe's child)."""
    started = time.perf_counter()
    machine = probe_machine()
    watch = CpuWatch()
    step, reset, rate, obs = time_sub_env(env, max(seconds - (time.perf_counter() - started), 0.0))
    speeds = machine.other_speed, machine.own_speed
    costs = Costs(step, reset, rate, machine.round_trip, cores, obs, machine.spin_trip, *speeds)
    return costs, others_load(watch)


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
    costs, busy = measure(throwaway, cores, 0.9 * seconds)  # (a tenth left for what follows)
    if key is not None:
        cache.store(key, costs)
    return choose(costs, num_envs, constraints, "timed", busy)
