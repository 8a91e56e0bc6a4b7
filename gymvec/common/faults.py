"""Faults that heal: the ``on_fault`` option, the :class:`Fault` record and the books of
restarts (API section 13).

With ``on_fault="restart"`` (or a :class:`Restart`), a sub-env that raises in ``step`` or
``reset``, or whose worker dies or outlasts ``timeout=``, is rebuilt from its factory and the
run goes on; its faulted step reads as a truncation. :class:`FaultBook` keeps what every
layer reports of it: restarts per sub-env, the last faults, one WARNING per restart, and the
limit past which a fault raises as ``"raise"`` would.

Example:
    >>> from gymvec.common.faults import Restart, parse_on_fault, restart_seed
    >>> parse_on_fault("restart")
    Restart(limit=10, window=None)
    >>> parse_on_fault("raise") is None
    True
    >>> restart_seed(42, 1), restart_seed(42, 2), restart_seed(None, 1)
    (2654435803, 1013904268, None)
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import time
from typing import Any, Literal

import numpy as np

from gymvec.errors import rows_text

logger = logging.getLogger("gymvec")

FaultKind = Literal["error", "death", "timeout"]
FAULT_KINDS = ("error", "death", "timeout")
KEPT_FAULTS = 100  # how many of the most recent faults ``faults`` holds
ON_FAULT_CHOICES = ("raise", "restart")
_SEED_STRIDE = 0x9E3779B1  # a restart's seed steps by the golden ratio's 32 bits (odd: a
# bijection of 2**32, so the seeds of successive restarts of a row never repeat early)


@dataclasses.dataclass(frozen=True)
class Restart:
    """Rebuild a faulted sub-env, at most ``limit`` times within any ``window`` seconds (None:
    over the env's life); the next fault past that raises ``WorkerError`` as ``"raise"``
    would."""

    limit: int = 10
    window: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 0:
            raise ValueError(
                f"Restart limit: expected an int >= 0 (restarts of one sub-env), got {self.limit!r}"
            )
        if self.window is not None and (
            isinstance(self.window, bool)
            or not isinstance(self.window, int | float)
            or not self.window > 0
        ):
            raise ValueError(
                f"Restart window: expected seconds > 0, or None (the env's life), "
                f"got {self.window!r}"
            )


def parse_on_fault(on_fault: object) -> Restart | None:
    """The :class:`Restart` policy ``on_fault`` asks for, or None for ``"raise"``."""
    if isinstance(on_fault, Restart):
        return on_fault
    if on_fault == "restart" and isinstance(on_fault, str):
        return Restart()
    if on_fault == "raise" and isinstance(on_fault, str):
        return None
    raise ValueError(
        f"on_fault: expected one of {ON_FAULT_CHOICES} or a gymvec.Restart(limit, window), "
        f"got {on_fault!r}"
    )


def restart_seed(last_seed: int | None, restarts: int) -> int | None:
    """The seed of a rebuilt sub-env's first reset: a function of the row's last reset seed
    and its restart count (``(last_seed + restarts * 0x9E3779B1) mod 2**32``), so a rerun with
    the same seeds and the same faults is the same run; None (unseeded) where the row never
    was seeded."""
    if last_seed is None:
        return None
    return (int(last_seed) + restarts * _SEED_STRIDE) % 2**32


@dataclasses.dataclass(frozen=True)
class Fault:
    """One fault of one sub-env: which (``sub_env``, its ``rows``, its ``worker``), what
    (``kind``: "error", "death" or "timeout"; ``message``: the string ``infos["fault"]``
    shows; ``traceback``: where the sub-env ran, or None) and when (``time``, epoch
    seconds)."""

    sub_env: int
    rows: tuple[int, ...]
    worker: int | None
    kind: FaultKind
    message: str
    traceback: str | None = None
    time: float = dataclasses.field(default_factory=time.time)


class FaultBook:
    """The record of a batch's faults: ``restarts`` (per sub-env), ``faults`` (the last
    :data:`KEPT_FAULTS`, oldest first), one WARNING on the ``"gymvec"`` logger per restart,
    and the policy's limit."""

    def __init__(self, policy: Restart, num_sub_envs: int):
        self.policy = policy
        self.restarts = np.zeros(num_sub_envs, dtype=np.int64)
        self.faults: collections.deque[Fault] = collections.deque(maxlen=KEPT_FAULTS)
        self._times: list[collections.deque[float]] = [
            collections.deque() for _ in range(num_sub_envs)
        ]

    def allows(self, sub_env: int, now: float | None = None) -> bool:
        """Whether one more restart of ``sub_env`` stays within the policy's limit."""
        times = self._times[sub_env]
        window = self.policy.window
        if window is not None:
            now = time.monotonic() if now is None else now
            while times and now - times[0] > window:
                times.popleft()
        return len(times) < self.policy.limit

    def record(self, fault: Fault, now: float | None = None) -> None:
        """Book a restart of ``fault.sub_env`` (the caller checked :meth:`allows`)."""
        self._times[fault.sub_env].append(time.monotonic() if now is None else now)
        self.restarts[fault.sub_env] += 1
        self.faults.append(fault)
        logger.warning(
            "sub-env %d (rows %s, worker %s) restarted after a fault (%s): %s; %d restart(s)",
            fault.sub_env,
            rows_text(fault.rows),
            fault.worker,
            fault.kind,
            fault.message,
            self.restarts[fault.sub_env],
        )

    def past_limit(self, fault: Fault) -> str:
        """The words a ``WorkerError`` adds where ``fault`` is past the policy's limit."""
        window = "" if self.policy.window is None else f" within {self.policy.window} s"
        return (
            f"sub-env {fault.sub_env} faulted ({fault.kind}: {fault.message}) after "
            f"{self.restarts[fault.sub_env]} restart(s), the limit of on_fault="
            f"{self.policy!r} ({self.policy.limit}{window})"
        )


def restarts_of(book: FaultBook | None, num_sub_envs: int) -> np.ndarray:
    """``restarts`` as the classes expose it: a copy of ``book``'s, zeros under "raise"."""
    if book is None:
        return np.zeros(num_sub_envs, dtype=np.int64)
    return book.restarts.copy()


def faults_of(book: FaultBook | None) -> list[Fault]:
    """``faults`` as the classes expose it: the last faults, oldest first ([] under "raise")."""
    return [] if book is None else list(book.faults)


class FaultRecords:
    """``restarts`` and ``faults`` of a class over an engine (``self.engine.fault_book`` and
    ``num_sub_envs``): the gymnasium face and the batched envs."""

    engine: Any

    @property
    def restarts(self) -> np.ndarray:
        """Restarts per sub-env, a block counting as one (``on_fault="restart"``, API section
        13; zeros otherwise)."""
        return restarts_of(self.engine.fault_book, self.engine.num_sub_envs)

    @property
    def faults(self) -> list[Fault]:
        """The most recent faults (at most 100, oldest first), as ``gymvec.Fault`` records."""
        return faults_of(self.engine.fault_book)
