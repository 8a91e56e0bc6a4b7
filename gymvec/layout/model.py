"""The cost model of ``backend="auto"``: each candidate layout's predicted time per vector step,
from a sub-env's measured costs and this machine's (terms in ``docs/layout.md``).

One vector step of ``N`` sub-envs, each costing ``c = step + reset_rate * reset`` seconds, its
row written into the buffers for ``r = ROW + BYTE * obs_bytes``, the batch copied out for
``N * BYTE * obs_bytes``:

* this process alone: ``T = CALL + N * (c + r) + N * BYTE * obs_bytes``;
* ``W`` shares over worker processes (``local``: the calling process steps share 0 itself,
  ``children`` processes step the others): ``T = CALL + max(trip + slowest child share,
  local share) + N * (COPY + BYTE * obs_bytes)``, a share of ``k`` sub-envs costing
  ``k * (c + r) * max(1, W / cores) * pair_slowdown`` (shares beyond the usable cores slow
  each other down; ``pair_slowdown``: measured, processes running at once each go as fast
  as their core, the slower one setting the pace). ``trip`` is a command to the children and
  their answers: where every process (the children and this one) has a core of its own they
  spin on shared words, ``SPIN_BASE + spin_trip``; otherwise a wake-up goes through the
  kernel, ``TRIP_SCALE * round_trip + TRIP_BASE``; plus ``WAKE`` for each child beyond the
  first. This process's share runs while the children run theirs.
  "Usable cores" are the cores less those other programs keep busy (``busy``, their load
  when the choice is made): a process that spins waits for one that other programs hold.

The candidate predicted fastest wins; worker processes must beat this process alone by
``MARGIN`` (a wrong choice of workers loses more to a cheap env than the reverse).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from gymvec.subenvs.layout import spread

# Seconds, from gymvec's own paths on a 2-core machine (the layouts panel and steps of a no-op
# env, see docs/layout.md): what a vector step costs beyond the sub-envs' own work.
CALL = 10e-6  # one call through the face and the engine, whatever the layout
ROW = 1.0e-6  # the buffers' share of one sub-env's step (writes, flags), per sub-env
BYTE = 0.035e-9  # one observation byte copied (into the buffers, or out of them)
# A command and its answers, every process on a core of its own: this, plus the probe's
# measured round trip through shared words (gymvec's own work: mode bytes, replies, flags)
SPIN_BASE = 8e-6
TRIP_SCALE = 3.0  # otherwise a command and its answers cost this many bare pipe round trips...
TRIP_BASE = 40e-6  # ...plus this (semaphores, mode bytes, the parent's own wait)
WAKE = 10e-6  # each child process woken, beyond the first
COPY = 0.2e-6  # per sub-env: the parent reads shared rows the workers wrote
MARGIN = 1.1  # workers are chosen only when predicted this much faster than this process


@dataclasses.dataclass(frozen=True)
class Costs:
    """What the choice is made from: one sub-env's ``step`` and ``reset`` (seconds), how
    often a step ends an episode (``reset_rate``), the size of one observation
    (``obs_bytes``), and this machine's: ``round_trip`` (through the kernel) and
    ``spin_trip`` (through shared words) between two processes, its usable ``cores``, and
    how much longer two processes take to run the same work at once than one alone
    (``pair_slowdown``, see ``timing.probe_machine``)."""

    step: float
    reset: float
    reset_rate: float
    round_trip: float
    cores: int
    obs_bytes: int = 0  # one observation's array bytes (the buffers copy them)
    spin_trip: float = 1e-6  # a word through shared memory and back, both sides spinning
    pair_slowdown: float = 1.0  # two processes' work at once (the slower) against one alone

    @property
    def per_step(self) -> float:
        """A sub-env's cost per step, its resets' share included."""
        return self.step + self.reset_rate * self.reset


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One layout: ``backend`` "serial" (this process) or "parallel"; ``workers`` shares
    (``sub_envs_per_worker``), share 0 stepped by the calling process when ``local``."""

    backend: str
    workers: int
    sub_envs_per_worker: tuple[int, ...]
    local: bool
    predicted: float = 0.0  # sub-env steps per second, as the cost model predicts
    measured: float | None = None  # as ``autotune`` measured them

    @property
    def local_share(self) -> int:
        """How many sub-envs the calling process steps."""
        if self.backend == "serial":
            return sum(self.sub_envs_per_worker)
        return self.sub_envs_per_worker[0] if self.local else 0

    @property
    def name(self) -> str:
        if self.backend == "serial":
            return "serial"
        return f"parallel w={self.workers}" + (" +local" if self.local else "")


@dataclasses.dataclass(frozen=True)
class LayoutReport:
    """Why a layout was chosen: the costs, every candidate (with its predicted and, from
    ``autotune``, measured sub-env steps per second) and the one chosen."""

    costs: Costs
    num_envs: int
    candidates: tuple[Candidate, ...]
    chosen: Candidate
    source: str  # "timed", "cache", "measured" (autotune) or "given" (options fixed it)
    busy: float = 0.0  # other programs' load when it was chosen (see predict)

    def table(self) -> str:
        """The candidates as a text table, the chosen one marked."""
        c = self.costs
        lines = [
            f"{self.num_envs} sub-envs; step {c.step * 1e6:.1f} us, reset {c.reset * 1e6:.1f} "
            f"us every {1 / c.reset_rate if c.reset_rate else float('inf'):.0f} steps; round "
            f"trip {c.round_trip * 1e6:.1f} us (spinning {c.spin_trip * 1e6:.1f} us); "
            f"{c.cores} cores, two at once {c.pair_slowdown:.2f}x as slow; "
            f"other programs' load "
            f"{self.busy:.1f} ({self.source})",
            f"{'layout':<22}{'shares':<18}{'predicted/s':>13}{'measured/s':>13}",
        ]
        for cand in self.candidates:
            measured = "" if cand.measured is None else f"{cand.measured:13.0f}"
            mark = "  <- chosen" if cand == self.chosen else ""
            shares = ",".join(map(str, cand.sub_envs_per_worker))
            lines.append(f"{cand.name:<22}{shares:<18}{cand.predicted:13.0f}{measured:>13}{mark}")
        return "\n".join(lines)


@dataclasses.dataclass(frozen=True)
class Layout:
    """What ``backend="auto"`` chose (``envs.layout``): ``backend`` ("serial" or
    "parallel"), ``workers``, ``sub_envs_per_worker``, ``local_share`` (sub-envs the calling
    process steps) and ``report`` (why)."""

    backend: str
    workers: int
    sub_envs_per_worker: tuple[int, ...]
    local_share: int
    report: LayoutReport | None = dataclasses.field(default=None, compare=False, repr=False)

    @classmethod
    def of(cls, candidate: Candidate, report: LayoutReport | None = None) -> Layout:
        return cls(
            candidate.backend,
            candidate.workers,
            candidate.sub_envs_per_worker,
            candidate.local_share,
            report,
        )


@dataclasses.dataclass(frozen=True)
class Constraints:
    """What the caller's options leave open: ``serial`` (this process alone allowed),
    ``workers`` (the worker counts allowed; empty: none) and ``local`` (the values of
    ``local_worker`` allowed)."""

    serial: bool = True
    workers: tuple[int, ...] | None = None  # None: 1 .. min(cores, num_envs)
    local: tuple[bool, ...] = (False, True)

    @classmethod
    def of(
        cls,
        *,
        num_workers: int | None = None,
        local_worker: bool | None = None,
        timeout: float | None = None,
        first_ready: bool = False,
        context: str | None = None,
        serial: bool = True,
    ) -> Constraints:
        """The choice the options leave: ``num_workers``, ``local_worker`` or ``context``
        ask for worker processes; a ``timeout`` rules this process out (nothing could cut a
        sub-env here short); first-ready batches keep workers' shares out of the calling
        process unless ``local_worker=True`` (as ``ParallelVectorEnv`` does)."""
        wants_workers = num_workers is not None or local_worker is not None or context is not None
        allow_serial = serial and not wants_workers and timeout is None
        if local_worker is not None:
            local: tuple[bool, ...] = (bool(local_worker),)
        elif timeout is not None or first_ready:
            local = (False,)
        else:
            local = (False, True)
        workers = None if num_workers is None else (num_workers,)
        return cls(allow_serial, workers, local)


def candidates(num_envs: int, cores: int, constraints: Constraints) -> list[Candidate]:
    """Every layout the constraints allow, this process alone first."""
    found = []
    if constraints.serial:
        found.append(Candidate("serial", 1, (num_envs,), False))
    counts: Sequence[int] = constraints.workers or range(1, min(cores, num_envs) + 1)
    for w in counts:
        for local in constraints.local:
            if local and w == 1:  # one share, stepped here: this process alone
                continue
            found.append(Candidate("parallel", w, tuple(spread(num_envs, w)), local))
    return found


def free_cores(cores: int, busy: float) -> int:
    """The cores left to gymvec when other programs keep ``busy`` of them busy (their load,
    rounded), one at the least."""
    return max(1, cores - int(busy + 0.5))


def predict(candidate: Candidate, costs: Costs, busy: float = 0.0) -> float:
    """The candidate's sub-env steps per second under the cost model (module docstring),
    other programs keeping ``busy`` cores busy."""
    shares = candidate.sub_envs_per_worker
    n = sum(shares)
    copied = BYTE * costs.obs_bytes
    per_env = costs.per_step + ROW + copied
    if candidate.backend == "serial":
        return n / (CALL + n * (per_env + copied))
    w = candidate.workers
    cores = free_cores(costs.cores, busy)
    contention = max(1.0, w / cores)
    children = shares[1:] if candidate.local else shares
    if len(children) + 1 <= cores:  # every process spins on a core of its own
        trip = SPIN_BASE + costs.spin_trip
    else:
        trip = TRIP_SCALE * costs.round_trip + TRIP_BASE
    trip += WAKE * (len(children) - 1)
    # (per_env was timed here alone; shares run at once, as fast as the slower core allows)
    pace = contention * costs.pair_slowdown
    slowest = max(children) * per_env * pace
    local = shares[0] * per_env * pace if candidate.local else 0.0
    seconds = CALL + max(trip + slowest, local) + n * (COPY + copied)
    return n / seconds


def choose(
    costs: Costs, num_envs: int, constraints: Constraints, source: str, busy: float = 0.0
) -> LayoutReport:
    """Every candidate with its prediction (other programs keeping ``busy`` cores busy), and
    the fastest (workers by ``MARGIN``)."""
    found = [
        dataclasses.replace(c, predicted=predict(c, costs, busy))
        for c in candidates(num_envs, costs.cores, constraints)
    ]
    if not found:  # (constraints always leave one: num_workers is checked before)
        raise ValueError("no layout fits these options")
    best = max(found, key=lambda c: c.predicted)
    serial = next((c for c in found if c.backend == "serial"), None)
    if serial is not None and best.predicted < serial.predicted * MARGIN:
        best = serial
    return LayoutReport(costs, num_envs, tuple(found), best, source, busy)
