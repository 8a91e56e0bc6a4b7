"""What an engine learns before any sub-env runs: the layout of its buffers, from the first
sub-env (one per task of a multi-task batch), built in this process and neither reset nor
stepped; and gymnasium's seed conventions."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from gymvec.common.infos import InfoField
from gymvec.common.structure import LeafSpec
from gymvec.errors import SpaceMismatchError
from gymvec.subenvs.factories import SubEnvFactories
from gymvec.subenvs.kinds import SubEnvSummary, check_sub_env, summarize
from gymvec.subenvs.layout import WorkerLayout
from gymvec.wire.buffers import BufferLayout


def probe(
    factories: SubEnvFactories, multi_task: bool, keep_first: bool
) -> tuple[list[SubEnvSummary], Any, WorkerLayout]:
    """Summaries of sub-envs built here: the first, or one per task (multi-task), with their
    info fields; every row gets the summary of its sub-env's task (a block's rows, its
    own). With ``keep_first`` the env built for sub-env 0 is returned too (else None), to
    become sub-env 0: no env is built twice. Last, the layout with each sub-env's rows (see
    ``SubEnvFactories.rows``: where ``rows_known``)."""
    firsts = factories.distinct() if multi_task else [0] * factories.num_envs
    probed: dict[int, SubEnvSummary] = {}
    kept = None
    try:
        for first in dict.fromkeys(firsts):
            env = check_sub_env(factories.sub_env_fn(first)())
            try:
                probed[first] = summarize(env, declared_infos=True)
            except BaseException:
                env.close()
                raise
            if first == 0 and keep_first:
                kept = env
            else:
                env.close()
    except BaseException:
        if kept is not None:
            kept.close()
        raise
    layout = factories.rows([probed[first].rows for first in firsts])
    per_row = [probed[first] for first, rows in zip(firsts, layout.rows_per_sub_env)]
    return (
        [s for s, rows in zip(per_row, layout.rows_per_sub_env) for _ in range(rows)],
        kept,
        layout,
    )


class KeptEnv:
    """The env built here to learn sub-env 0's layout, kept to become sub-env 0 (see
    :func:`probe`): taken once, when the executor builds sub-env 0, or closed."""

    def __init__(self, env: Any):
        self.env = env

    def first_of(self, build: Callable[[], Any]) -> Callable[[], Any]:
        """A factory of sub-env 0 that hands the kept env over (``build``: sub-env 0's own
        factory, for when it was taken or closed already)."""

        def first() -> Any:
            env, self.env = self.env, None
            return build() if env is None else env

        return first

    def close(self) -> None:
        """Close the env if it was not taken."""
        env, self.env = self.env, None
        if env is not None:
            env.close()


def layout_of(
    summaries: list[SubEnvSummary], num_envs: int, obs_lanes: int
) -> tuple[dict[str, InfoField], BufferLayout]:
    """The info fields every task declares alike, and the buffers' layout for the keys of
    every task."""
    declared = [s.info_fields or {} for s in summaries]  # (probe asks each for its fields)
    info_fields = {
        name: field
        for name, field in declared[0].items()
        if all(fields.get(name) == field for fields in declared)
    }
    layout = BufferLayout(
        num_envs,
        _union_leaves([s.observation_leaves for s in summaries], "observation_spec"),
        _union_leaves([s.action_leaves for s in summaries], "action_spec"),
        info_fields,
        obs_lanes=obs_lanes,
        wide_actions=True,
    )
    return info_fields, layout


def heterogeneous(
    summaries: list[SubEnvSummary], multi_task: bool, layout: WorkerLayout | None = None
) -> bool:
    """Whether the sub-envs' keys, shapes or dtypes differ (``summaries``: one per row), which
    only the tasks of a multi-task batch may (else a SpaceMismatchError naming the two
    sub-envs, by their factory and rows where ``layout`` has blocks, and their spaces)."""
    first = summaries[0]
    differ = False
    for i, summary in enumerate(summaries):
        for name, a, b in (
            ("observation_spec", first.observation_leaves, summary.observation_leaves),
            ("action_spec", first.action_leaves, summary.action_leaves),
        ):
            if a == b:
                continue
            if not multi_task:
                raise SpaceMismatchError(
                    f"{_who(i, layout)}: {name} leaves {b} differ from {_who(0, layout)}'s "
                    f"{a}; a batch needs the same keys, shapes and dtypes",
                    kind=name.split("_")[0],
                )
            differ = True
    return differ


def _who(row: int, layout: WorkerLayout | None) -> str:
    """Row ``row``'s sub-env as errors name it: by its row, or in a batch with blocks, by its
    factory and its rows."""
    if layout is None or not layout.has_blocks:
        return f"sub-env {row}"
    for j, (start, stop) in enumerate(layout.sub_env_rows):
        if start <= row < stop:
            return f"factory {j} (rows {start}..{stop - 1})"
    return f"row {row}"


def _union_leaves(leaves_per_env: list[list[LeafSpec]], name: str) -> list[LeafSpec]:
    """Every leaf of every sub-env, once; a key with two shapes or dtypes is an error."""
    union: dict[tuple, LeafSpec] = {}
    for leaves in leaves_per_env:
        for leaf in leaves:
            known = union.setdefault(leaf[0], leaf)
            if known != leaf:
                raise SpaceMismatchError(
                    f"{name}: key {leaf[0]} is {known[1:]} in one task and {leaf[1:]} in another"
                )
    for key in union:
        for other in union:
            if len(other) > len(key) and other[: len(key)] == key:
                raise SpaceMismatchError(
                    f"{name}: key {key} is a value in one task and holds {other} in another"
                )
    return list(union.values())


def expand_seeds(seed: int | Sequence[int | None] | None, n: int) -> list[int | None] | None:
    """gymnasium's convention: an int ``s`` seeds sub-env ``i`` with ``s + i``; a list gives
    each sub-env its seed (or None). Seeds are non-negative integers, as gymnasium's envs
    take them: anything else raises here, before any sub-env runs (a float used to be
    truncated, a negative seed to fail inside a sub-env)."""
    if seed is None:
        return None
    if isinstance(seed, int | np.integer):
        return [_checked_seed(seed, "seed") + i for i in range(n)]
    if isinstance(seed, str | bytes) or not isinstance(seed, Sequence | np.ndarray):
        raise TypeError(
            f"seed: expected an int, a list of {n} ints or None, or None; got "
            f"{type(seed).__name__} {seed!r}"
        )
    seeds = list(seed)
    if len(seeds) != n:  # gymnasium's own words, which its users (and tests) match
        raise ValueError(
            f"If seeds are passed as a list the length must match num_envs={n} "
            f"but got length={len(seeds)}."
        )
    return [None if s is None else _checked_seed(s, f"seed[{i}]") for i, s in enumerate(seeds)]


def _checked_seed(seed: Any, where: str) -> int:
    if not isinstance(seed, int | np.integer):
        raise TypeError(
            f"{where}: expected a non-negative int or None, got {type(seed).__name__} {seed!r}"
        )
    if seed < 0:
        raise ValueError(f"{where}: expected a non-negative int, got {seed}")
    return int(seed)


def masked_seeds(
    seeds: Sequence[int | None] | None, mask: np.ndarray | None
) -> list[int | None] | None:
    """``seeds`` for the sub-envs ``mask`` marks, None for the others (a reset leaves them)."""
    if seeds is None or mask is None:
        return None if seeds is None else list(seeds)
    return [s if m else None for s, m in zip(seeds, np.asarray(mask).tolist())]
