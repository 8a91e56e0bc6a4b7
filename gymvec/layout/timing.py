"""What ``backend="auto"`` measures: a throwaway sub-env's step and reset cost in the calling
process (bounded in time), this machine's hand-overs between two processes and how fast two
run at once (``probe_machine``), and the cores other programs keep busy (``CpuWatch``)."""

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
WORK_REPS = 24  # ...and its pieces of Python work, alone and with the child's...
WORK_LOOP = 20_000
PROBE_SPAN_S = 0.25  # ...spread over this long (a core's speed can change within it)
_SEQ, _DONE = range(2)  # the probe's shared words
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
    ``spin_trip`` (a word in shared memory and back, both processes spinning), and
    ``pair_slowdown``: how much longer the same piece of Python work takes when this
    process and the child run it at once (the slower of the two) than this process alone,
    on average over the probe's span."""

    round_trip: float = 50e-6
    spin_trip: float = 1e-6
    pair_slowdown: float = 1.0


def _python_work() -> float:
    """Seconds for a fixed piece of pure-Python work (about half a millisecond)."""
    started = time.perf_counter()
    total = 0
    for i in range(WORK_LOOP):
        total += i
    return time.perf_counter() - started


def probe_machine() -> tuple[Machine, float]:
    """This machine's :class:`Machine` now, from one forked child over about ``PROBE_SPAN_S``
    (0.28 s in all), and the child's CPU seconds; typical figures (and 0) where fork is
    missing.

    Why an average over a span: virtual cores need not run alike. On the development VM each
    of the two ran Python at full speed or 1.8x slower, flipping within fractions of a second
    (its host core is shared), so the slower of two processes sets a pace that a single
    sample cannot tell; the work runs ``WORK_REPS`` times spread over the span."""
    if not hasattr(os, "fork"):
        return Machine(), 0.0
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
            _probe_child(child_in, child_out, words, parent)
        finally:
            os._exit(0)
    os.close(child_in)
    os.close(child_out)
    started = time.perf_counter()
    machine = Machine()
    try:
        os.write(to_child, b"s")  # the child spins on the shared words until told -1
        spin_times = [_answered(words, seq) for seq in range(1, SPIN_PINGS + 1)]
        words[_SEQ] = -1
        # (after the spinning, which has put the child on another core, as a worker would be)
        pipe_times = [_piped(to_child, from_child, b"x") for _ in range(PINGS)]
        slowdowns = []
        for rep in range(WORK_REPS + 1):  # (rep 0 warms up: the child's copied pages)
            alone = _python_work()
            os.write(to_child, b"w")  # the child runs the same work...
            mine = _python_work()  # ...while this process runs its own
            theirs = int.from_bytes(_read_exactly(from_child, 8), "little") * 1e-9
            if rep:
                slowdowns.append(min(4.0, max(mine, theirs) / alone))  # (a wild sample: noise)
            next_rep = started + PROBE_SPAN_S * (rep + 1) / WORK_REPS
            time.sleep(max(0.0, next_rep - time.perf_counter()))
        trips = statistics.median(pipe_times), statistics.median(spin_times)
        machine = Machine(*trips, statistics.fmean(slowdowns))
    except (OSError, TimeoutError):  # (the child died or had no core: typical figures)
        pass
    finally:
        words[_SEQ] = -1
        os.close(to_child)
        os.close(from_child)
        usage = os.wait4(pid, 0)[2]
    return machine, usage.ru_utime + usage.ru_stime


def _piped(to_child: int, from_child: int, command: bytes) -> float:
    """Seconds for ``command`` to reach the probe's child and its one-byte answer to return."""
    started = time.perf_counter()
    os.write(to_child, command)
    _read_exactly(from_child, 1)
    return time.perf_counter() - started


def _read_exactly(fd: int, size: int) -> bytes:
    data = os.read(fd, size)
    while len(data) < size:
        more = os.read(fd, size - len(data))
        if not more:
            raise OSError("the layout probe's child is gone")
        data += more
    return data


def _answered(words: memoryview, seq: int) -> float:
    """Seconds until the probe's child answers ``seq`` through the shared words;
    ``TimeoutError`` past ``PROBE_WAIT_S``."""
    started = time.perf_counter()
    words[_SEQ] = seq
    while words[_DONE] != seq:
        if time.perf_counter() - started > PROBE_WAIT_S:
            raise TimeoutError("the layout probe's child did not answer")
    return time.perf_counter() - started


def _probe_child(pipe_in: int, pipe_out: int, words: memoryview, parent: int) -> None:
    """The probe's child, until the pipe closes: "x" echoed; "w" the Python work, its
    nanoseconds sent back; "s" answers each new sequence word until it turns negative (or the
    parent is gone)."""
    while command := os.read(pipe_in, 1):
        if command == b"x":
            os.write(pipe_out, b"x")
        elif command == b"w":
            os.write(pipe_out, int(_python_work() * 1e9).to_bytes(8, "little"))
        else:
            _answer_words(words, parent)


def _answer_words(words: memoryview, parent: int) -> None:
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
        words[_DONE] = seq


WATCH_S = 0.1  # the shortest window a CpuWatch tells from (/proc/stat counts 10 ms ticks)


class CpuWatch:
    """The cores other programs keep busy while it watches: all cores' busy time
    (``/proc/stat``) less this process's CPU time (and ``helpers``'), over the wall time
    since it was made."""

    def __init__(self) -> None:
        self.start = _cpu_sample()
        self.helpers = 0.0  # CPU seconds of this process's own helpers (the probe's child)

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
        return max(0.0, (busy - ours - self.helpers) / wall)


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
    other programs kept busy meanwhile (``others_load``)."""
    started = time.perf_counter()
    watch = CpuWatch()
    machine, watch.helpers = probe_machine()
    step, reset, rate, obs = time_sub_env(env, max(seconds - (time.perf_counter() - started), 0.0))
    costs = Costs(
        step,
        reset,
        rate,
        machine.round_trip,
        cores,
        obs_bytes=obs,
        spin_trip=machine.spin_trip,
        pair_slowdown=machine.pair_slowdown,
    )
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
