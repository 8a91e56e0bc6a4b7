"""Which factory builds each sub-env, and how sub-envs are split among workers.

``create_env_fn`` and ``create_env_kwargs`` come as one item for all sub-envs, one per worker
(a multi-task batch) or one per sub-env (the drop-ins); :class:`SubEnvFactories` normalises
them to one per sub-env and keeps the workers' row ranges.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

from gymvec.subenvs.kinds import is_block
from gymvec.subenvs.layout import WorkerLayout, check_count


@dataclasses.dataclass(frozen=True)
class BlockFactory:
    """A factory of a block (a ``gymnasium.vector.VectorEnv`` sub-env) that says its size:
    ``BlockFactory(fn, num_envs)``. A hint, never needed: where every factory of a batch
    says its size (or one factory builds every sub-env), the engine lays the buffers out
    before the sub-envs are built where they run, which saves the round trip in which they
    report their sizes. A block of another size than declared is a ValueError.

    >>> import gymnasium as gym
    >>> from gymvec import BlockFactory, SerialVectorEnv
    >>> make_block = lambda: gym.make_vec("CartPole-v1", 3, vectorization_mode="vector_entry_point")
    >>> envs = SerialVectorEnv([BlockFactory(make_block, 3), BlockFactory(make_block, 3)])
    >>> envs.num_envs
    6
    >>> envs.close()
    """

    fn: Callable[[], Any]
    num_envs: int

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise TypeError(f"BlockFactory: fn must be callable, got {type(self.fn).__name__}")
        check_count("BlockFactory num_envs", self.num_envs)

    def __call__(self, **kwargs: Any) -> Any:
        block = self.fn(**kwargs)
        size = getattr(block, "num_envs", None) if is_block(block) else None
        if size != self.num_envs:
            built = f"a block of {size} rows" if size is not None else "no block (a single env)"
            built = f"{built} ({type(block).__module__}.{type(block).__qualname__})"
            with contextlib.suppress(Exception):  # (the error to raise is the size's)
                block.close()
            raise ValueError(
                f"BlockFactory num_envs: expected a block of {self.num_envs} rows, as "
                f"declared; its fn built {built}"
            )
        return block


def _is_kwargs(value: Any) -> bool:
    return isinstance(value, dict)


def _per_sub_env(value: Any, bounds: list[tuple[int, int]], name: str) -> list:
    """One item per sub-env from one item, one per worker, or one per sub-env."""
    is_item = _is_kwargs if name == "create_env_kwargs" else callable
    copy = dict if name == "create_env_kwargs" else (lambda v: v)
    num_workers, n = len(bounds), bounds[-1][1]
    if is_item(value):
        return [copy(value) for _ in range(n)]
    if isinstance(value, list | tuple) and all(is_item(v) for v in value):
        if len(value) == num_workers:
            return [copy(v) for v, (start, stop) in zip(value, bounds) for _ in range(stop - start)]
        if len(value) == n:
            return [copy(v) for v in value]
        raise ValueError(
            f"{name}: expected {num_workers} items (one per worker) or {n} (one per sub-env), "
            f"got {len(value)}"
        )
    raise TypeError(f"{name}: expected a callable or a list, got {type(value).__name__}")


class SubEnvFactories:
    """The factory (and its kwargs) of each sub-env, and each worker's rows.

    Args:
        num_workers: how many groups of sub-envs (processes for ParallelEnv).
        create_env_fn: a callable, or a list of them: one per worker (multi-task) or one per
            sub-env.
        create_env_kwargs: kwargs for the factories: a dict, or a list as ``create_env_fn``.
        envs_per_worker: sub-envs per worker, or a list of ``num_workers`` counts.
        tasks: whether one factory per worker makes a multi-task batch (False: the
            factories build sub-envs of one task, as gymnasium's vector envs take them).
    """

    def __init__(
        self,
        num_workers: int,
        create_env_fn: Callable[..., Any] | Sequence[Callable[..., Any]],
        create_env_kwargs: dict | Sequence[dict] | None = None,
        envs_per_worker: int | Sequence[int] = 1,
        *,
        tasks: bool = True,
    ):
        layout = WorkerLayout.plan(num_workers=num_workers, envs_per_worker=envs_per_worker)
        self.layout = layout
        self.num_workers = layout.num_workers
        self.tasks = tasks
        self.num_envs = layout.num_sub_envs  # sub-envs (a block is one; see rows())
        self.worker_bounds = list(layout.worker_sub_envs)
        self.fns = _per_sub_env(create_env_fn, self.worker_bounds, "create_env_fn")
        self.kwargs = _per_sub_env(create_env_kwargs or {}, self.worker_bounds, "create_env_kwargs")

    @classmethod
    def spread(
        cls, env_fns: Sequence[Callable[..., Any]], num_workers: int | None = None
    ) -> SubEnvFactories:
        """One factory per sub-env (one task, as gymnasium's vector envs take them), spread
        over ``num_workers`` workers (default: one per usable core)."""
        shares = WorkerLayout.plan(len(env_fns), num_workers=num_workers).sub_envs_per_worker
        return cls(len(shares), list(env_fns), None, list(shares), tasks=False)

    def rows(self, probed_rows: Sequence[int]) -> WorkerLayout:
        """The layout with each sub-env's rows: a :class:`BlockFactory`'s declared size, or
        the size of the sub-env the engine built for its task (``probed_rows[i]``)."""
        rows = [
            fn.num_envs if isinstance(fn, BlockFactory) else size
            for fn, size in zip(self.fns, probed_rows)
        ]
        return self.layout.with_rows(rows)

    def rows_known(self, multi_task: bool) -> bool:
        """Whether every sub-env's rows follow from the sub-env the engine builds first for
        its task: one factory for all, one per worker (``multi_task``), or a declared size
        for each (:class:`BlockFactory`). Else the sub-envs report theirs once built."""
        return (
            multi_task
            or self.single_factory()
            or all(isinstance(fn, BlockFactory) for fn in self.fns)
        )

    def sub_env_fn(self, i: int) -> Callable[[], Any]:
        """What builds sub-env ``i``."""
        fn, kwargs = self.fns[i], self.kwargs[i]
        return functools.partial(fn, **kwargs) if kwargs else fn

    def worker_env_fns(self, worker: int) -> list[Callable[[], Any]]:
        start, stop = self.worker_bounds[worker]
        return [self.sub_env_fn(i) for i in range(start, stop)]

    def all_env_fns(self) -> list[Callable[[], Any]]:
        return [self.sub_env_fn(i) for i in range(self.num_envs)]

    def single_factory(self) -> bool:
        """Whether every sub-env is built the same way."""
        fns, kwargs = self.fns, self.kwargs
        return all(f is fns[0] for f in fns) and all(k == kwargs[0] for k in kwargs)

    def one_per_worker(self) -> bool:
        """A multi-task batch: several factories, each shared by a whole worker."""
        fns = self.fns
        return (
            self.tasks
            and not self.single_factory()
            and all(
                fns[i] is fns[start]
                for start, stop in self.worker_bounds
                for i in range(start, stop)
            )
        )

    def distinct(self) -> list[int]:
        """For each sub-env, the first sub-env built by the same factory and kwargs."""
        first: dict[tuple, int] = {}
        return [
            first.setdefault((id(self.fns[i]), repr(sorted(self.kwargs[i].items()))), i)
            for i in range(self.num_envs)
        ]

    def update_kwargs(self, kwargs: dict | Sequence[dict]) -> None:
        """Update the kwargs of the factories (one dict for all, or per worker/sub-env)."""
        updates = _per_sub_env(kwargs, self.worker_bounds, "create_env_kwargs")
        for current, update in zip(self.kwargs, updates):
            current.update(update)
