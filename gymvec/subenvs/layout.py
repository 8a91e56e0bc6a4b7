"""Which worker holds which sub-envs, and which buffer rows each one fills: one frozen object,
resolved once, that every constructor and every backend uses.

A sub-env fills one row, or ``num_envs`` rows when it is a block (a gymnasium vector env). A
:class:`WorkerLayout` is planned from counts first (:meth:`WorkerLayout.plan`: how many
sub-envs each worker holds), and given the sub-envs' rows once the engine knows them
(:meth:`WorkerLayout.with_rows`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from itertools import accumulate
from typing import Any

import numpy as np

from gymvec.common.cores import usable_cores


def check_count(name: str, value: Any) -> int:
    """``value`` if it is a positive int, else a ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"{name}: expected a positive int, got {value!r}")
    return int(value)


def spread(count: int, num_workers: int) -> list[int]:
    """``count`` items over ``num_workers`` workers, as even as they go; the larger shares go
    last, away from worker 0, which the calling process steps with ``local_worker`` on top
    of its own work.

    >>> spread(7, 2), spread(8, 3)
    ([3, 4], [2, 3, 3])
    """
    size, extra = divmod(count, num_workers)
    return [size + (w >= num_workers - extra) for w in range(num_workers)]


def _bounds(sizes: Sequence[int]) -> tuple[tuple[int, int], ...]:
    ends = list(accumulate(sizes))
    return tuple((end - size, end) for size, end in zip(sizes, ends))


@dataclasses.dataclass(frozen=True)
class WorkerLayout:
    """Per worker, how many sub-envs it holds (``sub_envs_per_worker``); per sub-env, in
    factory order, how many rows it fills (``rows_per_sub_env``: 1, or a block's size).

    >>> layout = WorkerLayout.plan(3, num_workers=2).with_rows([4, 4, 1])
    >>> layout.worker_rows, layout.sub_env_rows, layout.num_rows
    (((0, 4), (4, 9)), ((0, 4), (4, 8), (8, 9)), 9)
    """

    sub_envs_per_worker: tuple[int, ...]
    rows_per_sub_env: tuple[int, ...]

    @classmethod
    def plan(
        cls,
        num_sub_envs: int | None = None,
        *,
        num_workers: int | None = None,
        envs_per_worker: int | Sequence[int] | None = None,
    ) -> WorkerLayout:
        """The layout of ``num_sub_envs`` sub-envs of one row each, spread over
        ``num_workers`` workers (default: one per usable core, at most one per sub-env), or
        of ``num_workers`` workers holding ``envs_per_worker`` sub-envs each (one count for
        all, or one per worker)."""
        if envs_per_worker is not None:
            workers = check_count("num_workers", num_workers)
            if isinstance(envs_per_worker, list | tuple):
                if len(envs_per_worker) != workers:
                    raise ValueError(
                        f"envs_per_worker: expected one count per worker ({workers}), "
                        f"got {len(envs_per_worker)}: {list(envs_per_worker)!r}"
                    )
                sizes = [check_count("envs_per_worker", count) for count in envs_per_worker]
            else:
                sizes = [check_count("envs_per_worker", envs_per_worker)] * workers
        else:
            n = check_count("num_envs", num_sub_envs)
            workers = min(usable_cores(), n) if num_workers is None else num_workers
            workers = check_count("num_workers", workers)
            if workers > n:
                raise ValueError(
                    f"num_workers: expected at most one worker per sub-env ({n}), got {workers}"
                )
            sizes = spread(n, workers)
        return cls(tuple(sizes), (1,) * sum(sizes))

    def with_rows(self, rows_per_sub_env: Sequence[int]) -> WorkerLayout:
        """The same workers and sub-envs, each sub-env filling ``rows_per_sub_env`` rows."""
        rows = tuple(check_count("rows", r) for r in rows_per_sub_env)
        if len(rows) != self.num_sub_envs:
            raise ValueError(f"rows: expected {self.num_sub_envs} counts, got {len(rows)}")
        return dataclasses.replace(self, rows_per_sub_env=rows)

    def split(self, parts: int) -> WorkerLayout:
        """These sub-envs over ``parts`` workers instead (a Ray actor's processes)."""
        sizes = spread(self.num_sub_envs, min(check_count("parts", parts), self.num_sub_envs))
        return WorkerLayout(tuple(sizes), self.rows_per_sub_env)

    @property
    def num_workers(self) -> int:
        return len(self.sub_envs_per_worker)

    @property
    def num_sub_envs(self) -> int:
        return len(self.rows_per_sub_env)

    @property
    def num_rows(self) -> int:
        return sum(self.rows_per_sub_env)

    @property
    def has_blocks(self) -> bool:
        return self.num_rows != self.num_sub_envs

    @property
    def unit_size(self) -> int:
        """The rows of every sub-env where all have as many (first-ready commands send whole
        blocks), else 0."""
        sizes = set(self.rows_per_sub_env)
        return sizes.pop() if len(sizes) == 1 else 0

    @property
    def worker_sub_envs(self) -> tuple[tuple[int, int], ...]:
        """Per worker, its sub-envs ``[start, stop)`` in factory order."""
        return _bounds(self.sub_envs_per_worker)

    @property
    def sub_env_rows(self) -> tuple[tuple[int, int], ...]:
        """Per sub-env, its rows ``[start, stop)``."""
        return _bounds(self.rows_per_sub_env)

    @property
    def worker_rows(self) -> tuple[tuple[int, int], ...]:
        """Per worker, its rows ``[start, stop)``."""
        rows = self.sub_env_rows
        return tuple((rows[a][0], rows[b - 1][1]) for a, b in self.worker_sub_envs)

    def sub_env_sizes_of(self, worker: int) -> tuple[int, ...]:
        """The rows of each sub-env of ``worker``."""
        a, b = self.worker_sub_envs[worker]
        return self.rows_per_sub_env[a:b]
