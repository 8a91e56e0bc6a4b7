"""The sub-envs one process holds: building them, running commands, answering requests.

A :class:`SubEnvGroup` is what runs where sub-envs live: in the calling process
(``LocalExecutor``) or in a worker process (``worker.py``). It carries out commands through
its drivers (``drivers.py``) and answers the slow-path requests (:data:`REQUESTS`: attribute
access, method calls, state dicts) by name with keyword arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, cast

import numpy as np

from gymvec.common.arrays import settle_allocator
from gymvec.errors import SpaceMismatchError, WorkerError, local_sub_env_error
from gymvec.subenvs.batch_step import command_runner
from gymvec.subenvs.block import BlockRunner
from gymvec.subenvs.drivers import CommandRunner, make_driver
from gymvec.subenvs.healing import GroupHealer
from gymvec.subenvs.kinds import (  # noqa: F401 (re-exported)
    SubEnvSummary,
    check_sub_env,
    gym_env_of,
    is_block,
    spaces_of_summary,
    summarize,
)
from gymvec.wire.buffers import Buffers
from gymvec.wire.commands import Control, Extras


class Runner(Protocol):
    """What carries a command's mode bytes out on some of a group's rows: a
    ``drivers.CommandRunner`` (or its ``BatchStep``) over single envs, a ``block.BlockRunner``
    over a block, a :class:`PartsRunner` over a mix of them."""

    rows: slice  # the buffer rows whose mode bytes it carries out
    lane: int  # the observation lane "next"'s observations go to

    def use_lane(self, lane: int) -> None: ...

    def fields_changed(self) -> None: ...

    def run(self, modes: bytes, seeds: np.ndarray, options: dict | None) -> dict[int, Extras]:
        """Carry out ``modes`` (one byte per row of ``rows``); the extras by sub-env index."""
        ...


class SubEnvGroup:
    """The sub-envs one process steps: rows ``[start, stop)`` of the buffers, one per single
    env and ``num_envs`` per block (a gymnasium vector env).

    ``rows``: the rows planned for each sub-env (default one each); a sub-env built with
    another size is an error that says how to declare it. An exception raised while the
    group builds its sub-envs, runs a command or answers a request comes out as a
    :class:`~gymvec.errors.WorkerError` that names the sub-env (a block: its rows) to blame
    and ``where`` the group runs (worker ``worker_index``), whatever process it runs in.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], Any]],
        first: int,
        *,
        rows: Sequence[int] | None = None,
        worker_index: int | None = None,
        where: str = "in the calling process",
    ):
        """Build the sub-envs (``first``: the row of the first one, or, where ``rows`` is
        None and blocks may be among them, its index among the batch's sub-envs); the group
        steps nothing until :meth:`attach` gives it its rows of the buffers."""
        settle_allocator()  # before the sub-envs: each step's temporaries cost no page faults
        self.start = first
        self.env_fns = env_fns  # (kept to rebuild a sub-env that faults: see heal)
        self.healer: GroupHealer | None = None
        self.worker_index, self.where = worker_index, where
        self.cursor: int | None = None  # the row a request is at (see targets)
        self.stop = first  # (see attach)
        self.envs: list[Any] = []
        self.sizes: list[int] = []  # each sub-env's rows (a block's num_envs)
        self.firsts: list[int] = []  # each sub-env's first row (see attach)
        self.env_of_row: list[int] = []  # each row's sub-env (position in envs)
        try:
            built: dict[int, int] = {}  # id of each env -> its place
            for j, fn in enumerate(env_fns):
                self.cursor = place = first + (j if rows is None else sum(rows[:j]))
                env = check_sub_env(fn())
                if id(env) in built:  # e.g. `lambda: env`: the sub-envs would share one state
                    raise ValueError(
                        f"create_env_fn returned the same env object for sub-envs "
                        f"{built[id(env)]} and {place}: each sub-env needs its own instance"
                    )
                built[id(env)] = place
                self.envs.append(env)
                self.sizes.append(int(env.num_envs) if is_block(env) else 1)
                if rows is not None:
                    _check_rows(env, rows[j], place)
            self.cursor = None
        except BaseException as exc:
            self.close()
            if not isinstance(exc, Exception):
                raise
            raise self.error(exc, self.cursor, what="create_env_fn") from None
        self.stop = first + sum(self.sizes)

    def attach(self, start: int, buffers: Buffers, control: Control) -> SubEnvGroup:
        """Give the group its rows ``[start, start + sum(sizes))`` of the buffers and the
        control block (a start's second phase, once every sub-env's size is known)."""
        self.start = start
        self.stop = start + sum(self.sizes)
        self.buffers = buffers
        self.modes = control.mode[start : self.stop]  # this group's rows, sliced once
        self.seeds = control.seed[start : self.stop]
        self.lane_word = control.lane
        self.obs_lanes = buffers.obs_lanes
        self.action_objects = buffers.action_objects
        self.firsts = [start + sum(self.sizes[:j]) for j in range(len(self.sizes))]
        self.env_of_row = [j for j, size in enumerate(self.sizes) for _ in range(size)]
        try:
            self.runner = self._runner(buffers)
        except BaseException as exc:
            self.close()
            if not isinstance(exc, Exception):
                raise
            raise self.error(exc, None, what="create_env_fn") from None
        # Object observations of a worker process go back to the parent with each answer.
        self.shipped_objects = None
        keys = buffers.layout.object_obs_keys
        if buffers.ship_objects and keys:
            self.shipped_objects = (
                [buffers.root.objects[key] for key in keys],
                [buffers.next.objects[key] for key in keys],
            )
        return self

    def _runner(self, buffers: Buffers) -> Runner:
        """One runner over the single envs, or, with blocks, one per block and one per run of
        single envs between them, in row order (a block alone: its own runner)."""
        self.drivers = [
            None if is_block(env) else make_driver(env, first, buffers)
            for env, first in zip(self.envs, self.firsts)
        ]
        if not any(is_block(env) for env in self.envs):
            return command_runner(self.drivers, buffers, self.start)
        parts: list[Runner] = []
        singles: list[Any] = []
        for env, first, driver in zip(self.envs, self.firsts, self.drivers):
            if driver is not None:
                singles.append(driver)
                continue
            if singles:
                parts.append(command_runner(singles, buffers, singles[0].index))
                singles = []
            parts.append(BlockRunner(env, first, buffers))
        if singles:
            parts.append(command_runner(singles, buffers, singles[0].index))
        if len(parts) == 1:  # one block, the usual group of blocks: its modes are all its own
            return parts[0]
        return PartsRunner(parts, self.start)

    def summaries(self) -> list[SubEnvSummary]:
        """One summary per row (a block's, once for each of its rows)."""
        per_env = [summarize(env) for env in self.envs]
        return [summary for summary, size in zip(per_env, self.sizes) for _ in range(size)]

    def sub_env_summaries(self) -> list[SubEnvSummary]:
        """One summary per sub-env, with the info fields it declares: what a start's first
        phase reports, to lay the buffers out from."""
        return [summarize(env, declared_infos=True) for env in self.envs]

    def error(self, exc: Exception, sub_env: int | None, what: str = "") -> Exception:
        """What the group raises for ``exc``: a WorkerError naming ``sub_env`` and where the
        group runs (``what``: the call that raised, where not the usual one); gymvec's errors
        of a batch's make-up, and a WorkerError that names its sub-env, as they are."""
        if isinstance(exc, SpaceMismatchError):
            return exc
        if isinstance(exc, WorkerError) and exc.sub_env_index is not None:
            return exc
        where, index = self.where, self.worker_index
        built = self.start + len(self.env_of_row)  # (all rows, once the group is built)
        if sub_env is not None and self.start <= sub_env < built:
            j = self.env_of_row[sub_env - self.start]
            env = self.envs[j]
            if is_block(env):
                first = sub_env = self.firsts[j]
                rows = f"the block at rows {first}..{first + env.num_envs - 1}"
                what = f"{what}, {rows}" if what else rows
        return local_sub_env_error(exc, sub_env, worker_index=index, where=where, what=what)

    def sub_env_of(self, exc: BaseException) -> int | None:
        """The sub-env whose code raised ``exc``: the outermost frame of its traceback that
        belongs to one of this group's sub-envs (an env, the gymnasium env inside it, or its
        driver). Walked only once something raised: the steps pay nothing for it."""
        owners: dict[int, int] = {}
        for env, first in zip(self.envs, self.firsts):
            owners[id(env)] = owners[id(gym_env_of(env))] = first
        for driver, first in zip(getattr(self, "drivers", ()), self.firsts):
            if driver is not None:
                owners[id(driver)] = first
        tb = exc.__traceback__
        while tb is not None:
            owner = tb.tb_frame.f_locals.get("self")
            if owner is not None and id(owner) in owners:
                return owners[id(owner)]
            tb = tb.tb_next
        return None

    def unit_of(self, row: int) -> range:
        """The rows that run together with ``row`` in a first-ready command: its block's, or
        ``row`` alone."""
        j = self.env_of_row[row - self.start]
        first = self.firsts[j]
        return range(first, first + (self.envs[j].num_envs if is_block(self.envs[j]) else 1))

    def run(self, options: dict | None, only: int | None = None) -> dict[int, Extras]:
        """Carry out the mode bytes of this group's rows (with ``only``: of the rows of
        ``only``'s unit alone, a first-ready command: see :meth:`unit_of`); returns the
        extras by row."""
        modes = self.modes.tobytes()  # bytes index as ints
        if only is not None:  # a zero byte does nothing: the other rows are left alone
            unit = self.unit_of(only)
            a, b = unit.start - self.start, unit.stop - self.start
            modes = bytes(a) + modes[a:b] + bytes(len(modes) - b)
        runner = self.runner
        if self.obs_lanes and runner.lane != self.lane_word[0]:
            runner.use_lane(int(self.lane_word[0]))  # the lane this command writes
        try:
            extras = runner.run(modes, self.seeds, options)
        except Exception as exc:
            raise self.error(exc, only if only is not None else self.sub_env_of(exc)) from None
        if self.healer is not None and self.healer.faulted:
            extras = self.healer.take(extras)
        if self.shipped_objects is not None:
            root, next_ = self.shipped_objects
            for k, mode in enumerate(modes):
                if mode:
                    i = self.start + k
                    row = ([objects[i] for objects in root], [objects[i] for objects in next_])
                    extras.setdefault(i, Extras()).objects = row
        return extras

    def heal(self, rebuilt: bool = False) -> None:
        """Rebuild a sub-env (a single env or a block) that raises in a whole-batch command,
        from its factory, and go on (``on_fault="restart"``: see ``subenvs/healing.py``).
        ``rebuilt``: the group was built again (a worker process started again where one
        died): its blocks are reset before they step, as a rebuilt block is."""
        runner = self.runner
        parts = runner.parts if isinstance(runner, PartsRunner) else [runner]
        if rebuilt:
            for part in parts:
                if isinstance(part, BlockRunner):
                    part.unreset = True
        self.healer = healer = GroupHealer(self, self.env_fns)
        for part in parts:
            if isinstance(part, BlockRunner):
                part.on_fault = healer.on_block_fault
            else:  # (single envs: the group's sub-envs from the one at its first row on)
                first = self.env_of_row[part.rows.start - self.start]
                cast("CommandRunner", part).on_fault = healer.for_singles(part, first)

    def add_info_fields(self, places: dict) -> None:
        """Adopt info fields the engine learnt (see ``Buffers.add_info_fields``)."""
        self.buffers.add_info_fields(places)
        self.runner.fields_changed()

    def set_action_objects(self, values: dict[tuple, list]) -> None:
        """Store the object actions of this group's rows (``values[key]``: one per row)."""
        for key, objects in values.items():
            self.action_objects[key][self.start : self.stop] = objects

    def targets(self, indices: Sequence[int], gym_env: bool = False) -> Iterator[Any]:
        """The sub-envs at ``indices`` (global), one by one (``cursor`` says which one is
        out); with ``gym_env``, the gymnasium env inside each (a GymEnv's), for the face's
        calls."""
        for i in indices:
            self.cursor = i
            env = self.envs[self.env_of_row[i - self.start]]
            yield (gym_env_of(env) or env) if gym_env else env
        self.cursor = None

    def close(self) -> None:
        envs, self.envs = self.envs, []
        close_each(envs)


class PartsRunner:
    """The runner of a group with blocks (a :class:`Runner`): its parts (block runners, and
    runners of the single envs between them) each carry out their own rows' mode bytes."""

    def __init__(self, parts: list[Runner], start: int):
        self.parts = parts
        self.lane = 0
        self.rows = slice(parts[0].rows.start, parts[-1].rows.stop)
        self.spans = [(part.rows.start - start, part.rows.stop - start, part) for part in parts]

    def use_lane(self, lane: int) -> None:
        self.lane = lane
        for part in self.parts:
            part.use_lane(lane)

    def fields_changed(self) -> None:
        for part in self.parts:
            part.fields_changed()

    def run(self, modes: bytes, seeds: Any, options: dict | None) -> dict[int, Extras]:
        extras: dict[int, Extras] = {}
        for a, b, part in self.spans:
            part_modes = modes[a:b]
            if part_modes.count(0) != b - a:
                extras.update(part.run(part_modes, seeds[a:b], options))
        return extras


def _check_rows(env: Any, planned: int, row: int) -> None:
    """A ValueError where a sub-env's size differs from the rows planned for it."""
    size = int(env.num_envs) if is_block(env) else 1
    if size != planned:
        what = f"a block of {size} rows ({type(env).__name__})" if size > 1 else "a single env"
        raise ValueError(
            f"sub-env at row {row} is {what}, but the batch laid out {planned} row(s) for "
            "it from the sub-env its factory built first (or before update_kwargs): a "
            "factory shared by several sub-envs must build sub-envs of one size"
        )


def close_each(items: Sequence[Any]) -> None:
    """Close every item, even after one of them raised; then raise the first error."""
    error = None
    for item in items:
        try:
            item.close()
        except Exception as exc:
            error = error or exc
    if error is not None:
        raise error


# ---- slow-path requests: each takes the group, global sub-env indices and keyword arguments,
# and returns one result per index; ``values`` (where a request takes it) holds one per index.
def _attribute(target: Any, name: str) -> Any:
    if hasattr(target, "get_wrapper_attr"):
        return target.get_wrapper_attr(name)
    return getattr(target, name)


def _once_per_sub_env(
    group: SubEnvGroup, indices: Sequence[int], gym_env: bool, fn: Callable[[Any, int], Any]
) -> list:
    """``fn(target, position)`` once per sub-env among ``indices`` (a block's rows share one
    call: the first of its rows asked), its result repeated for each of its rows."""
    done: dict[int, Any] = {}
    results = []
    for position, target in enumerate(group.targets(indices, gym_env)):
        if id(target) not in done:
            done[id(target)] = fn(target, position)
        results.append(done[id(target)])
    return results


def get_attr(group: SubEnvGroup, indices: Sequence[int], *, name: str, gym_env=False) -> list:
    return _once_per_sub_env(group, indices, gym_env, lambda target, _: _attribute(target, name))


def is_callable(group: SubEnvGroup, indices: Sequence[int], *, name: str, gym_env=False) -> list:
    return [callable(_attribute(target, name)) for target in group.targets(indices, gym_env)]


def call(
    group: SubEnvGroup,
    indices: Sequence[int],
    *,
    name: str,
    args: tuple = (),
    kwargs: dict | None = None,
    gym_env: bool = False,
) -> list:
    """Call method ``name`` of each sub-env (or read it, if it is not callable)."""

    def call_one(target: Any, _: int) -> Any:
        value = _attribute(target, name)
        return value(*args, **(kwargs or {})) if callable(value) else value

    return _once_per_sub_env(group, indices, gym_env, call_one)


def set_attr(
    group: SubEnvGroup, indices: Sequence[int], *, name: str, values: Sequence, gym_env=False
) -> list:
    def set_one(target: Any, position: int) -> None:
        if hasattr(target, "set_wrapper_attr"):
            target.set_wrapper_attr(name, values[position])
        else:
            setattr(target, name, values[position])

    _once_per_sub_env(group, indices, gym_env, set_one)
    return [None] * len(indices)


def apply(
    group: SubEnvGroup,
    indices: Sequence[int],
    *,
    fn: Callable,
    args: tuple = (),
    kwargs: dict | None = None,
) -> list:
    """``fn(gymnasium sub-env, *args, **kwargs)`` for each sub-env, where it lives."""
    return _once_per_sub_env(
        group, indices, True, lambda target, _: fn(target, *args, **(kwargs or {}))
    )


def heal_faults(group: SubEnvGroup, indices: Sequence[int], *, rebuilt: bool = False) -> list:
    group.heal(rebuilt)
    return [None] * len(indices)


def add_info_fields(group: SubEnvGroup, indices: Sequence[int], *, places: dict) -> list:
    group.add_info_fields(places)
    return [None] * len(indices)


def state_dict(group: SubEnvGroup, indices: Sequence[int]) -> list:
    return _once_per_sub_env(group, indices, False, lambda env, _: env_state(env))


def load_state_dict(group: SubEnvGroup, indices: Sequence[int], *, values: Sequence) -> list:
    _once_per_sub_env(group, indices, False, lambda env, k: load_env_state(env, values[k]))
    return [None] * len(indices)


def env_state(env: Any) -> dict:
    """What restores a sub-env's randomness: its gymnasium RNG state, or its own state_dict."""
    gym_env = gym_env_of(env)
    if gym_env is not None:
        return {"np_random": gym_env.unwrapped.np_random.bit_generator.state}
    method = getattr(env, "state_dict", None)
    return method() if callable(method) else {}


def load_env_state(env: Any, state: dict) -> None:
    gym_env = gym_env_of(env)
    if gym_env is not None:
        gym_env.unwrapped.np_random.bit_generator.state = state["np_random"]
        return
    load = getattr(env, "load_state_dict", None)
    if callable(load):
        load(state)


# The requests a group answers, by name. ``values`` is split per index by the executors.
REQUESTS: dict[str, Callable[..., list]] = {
    "get_attr": get_attr,
    "is_callable": is_callable,
    "call": call,
    "set_attr": set_attr,
    "apply": apply,
    "state_dict": state_dict,
    "load_state_dict": load_state_dict,
    "add_info_fields": add_info_fields,
    "heal_faults": heal_faults,
}


def run_request(group: SubEnvGroup, name: str, indices: Sequence[int], kwargs: dict) -> list:
    """Answer request ``name`` for the sub-envs at ``indices`` of ``group``; an exception
    comes out as the group's WorkerError, naming the sub-env it came from."""
    group.cursor = None
    try:
        return REQUESTS[name](group, indices, **kwargs)
    except Exception as exc:
        raise group.error(exc, group.cursor) from None
