"""Preallocated buffers for a batch of sub-envs, in one flat block of (shared) memory.

Every per-step value lives at a fixed place of one block: the observations and infos of the
root (what ``reset`` returns) and of ``"next"`` (what ``step`` returns), reward, done flags and
actions, each laid out ``[num_envs, *shape]`` so that a worker's sub-envs are one contiguous row
range. Processes map the same block, so actions and observations cross process boundaries
without pickling: the parent and the workers hold numpy views (fast element access) and the
parent also holds torch views of them (tensordicts without copies).

Where the block lives is the caller's choice: private memory (``SerialEnv``), an anonymous
shared mapping passed to workers at start (``multiprocessing.RawArray``, nothing left to clean
up however the processes end) or a file (``memmap=True``).
"""

from __future__ import annotations

import mmap
import os
import tempfile
from dataclasses import dataclass
from multiprocessing.sharedctypes import RawArray
from typing import Any, NamedTuple

import numpy as np

from gymvec.common.fastpath import reference_count
from gymvec.common.infos import InfoField
from gymvec.common.structure import OBJECT, LeafSpec

# This module is imported by worker processes: no torch at import time (it takes seconds to
# import, and a worker stepping gymnasium envs never needs it).

_ALIGN = 64  # a cache line: fields never share one, so workers do not false-share
# Observations smaller than this are copied out: a copy of a few kB costs less than the lanes'
# bookkeeping, and the memory of the lanes would be wasted.
LANE_MIN_BYTES = 64 * 1024
# Room per sub-env and slot for the info fields learnt from the sub-envs' first results (see
# BufferLayout.place_info_fields): 64 numbers, or fewer and small arrays.
INFO_RESERVE_BYTES = 512
LEARNED_FIELDS = 64  # at most this many learnt fields


@dataclass(frozen=True)
class Field:
    """One array of the block: ``[num_envs, *shape]`` of ``dtype`` at ``offset`` bytes."""

    shape: tuple[int, ...]
    dtype: np.dtype
    offset: int

    def nbytes(self, num_envs: int) -> int:
        return int(num_envs * np.prod(self.shape, dtype=np.int64) * self.dtype.itemsize)


class BufferLayout:
    """Where each value of a batch of ``num_envs`` sub-envs lives in the block.

    Built from the leaves of one sub-env's observation and action specs; picklable, so workers
    rebuild the same views.

    ``obs_lanes``: for one observation array of at least ``LANE_MIN_BYTES``, this many extra
    copies of the ``"next"`` observations ("lanes" 1 to ``obs_lanes``; lane 0 is ``"next"``'s
    own). A command can have the sub-envs write their observations into a lane, which the
    gymnasium face (and the tensordict API's "next") then hands out as is instead of copying
    it (see ``Buffers.handed_out_lanes``).

    ``wide_actions``: each float action leaf narrower than float64 gets a float64 twin and a
    flag per sub-env saying which of the two holds its action (see ``Buffers.write_action``).
    Leaves of dtype ``object`` (values of spaces without a fixed shape, see
    ``envs.structure``) get no place in the block: ``Buffers`` keeps them in per-process lists,
    and commands carry them between processes (``object_obs_keys``, ``object_action_keys``).

    ``info_fields`` are the fields known at construction (declared by the sub-envs); each slot
    also reserves ``INFO_RESERVE_BYTES`` per sub-env for fields learnt later from what the
    sub-envs report (:meth:`place_info_fields`, ``Buffers.add_info_fields``), so the block
    never has to be laid out again while processes map it.
    """

    def __init__(
        self,
        num_envs: int,
        obs_leaves: list[LeafSpec],
        action_leaves: list[LeafSpec],
        info_fields: dict[str, InfoField],
        obs_lanes: int = 0,
        wide_actions: bool = False,
    ):
        self.num_envs = num_envs
        self.object_obs_keys = [key for key, _, dtype in obs_leaves if dtype == OBJECT]
        self.object_action_keys = [key for key, _, dtype in action_leaves if dtype == OBJECT]
        obs_leaves = [leaf for leaf in obs_leaves if leaf[2] != OBJECT]
        action_leaves = [leaf for leaf in action_leaves if leaf[2] != OBJECT]
        self.obs_keys = [key for key, _, _ in obs_leaves]
        self.action_keys = [key for key, _, _ in action_leaves]
        self.info_fields = dict(info_fields)
        self.fields: dict[tuple, Field] = {}
        self._size = 0
        self.learned_info: dict[str, int] = {}  # learnt field -> its offset in the reserve
        self._reserve_used = 0
        flag, real = np.dtype(bool), np.dtype(np.float64)
        n_info = len(info_fields) + LEARNED_FIELDS
        for slot in ("root", "next"):
            for key, shape, dtype in obs_leaves:
                self._add((slot, "obs", key), shape, dtype)
            for name, field in info_fields.items():
                self._add((slot, "info", name), field.shape, field.dtype)
            self._add((slot, "info_reserve"), (INFO_RESERVE_BYTES,), np.dtype(np.uint8))
            self._add((slot, "info_present"), (n_info,), flag)
            self._add((slot, "info_int"), (n_info,), flag)  # (see InfoField.ints)
            for name in ("done", "terminated", "truncated"):
                self._add((slot, name), (), flag)
        # float64 like gymnasium's vector envs, so the gymnasium face returns rewards unrounded
        self._add(("next", "reward"), (), real)
        self.wide_action_keys = []
        for key, shape, dtype in action_leaves:
            self._add(("action", key), shape, dtype)
            if wide_actions and np.dtype(dtype).kind == "f" and np.dtype(dtype).itemsize < 8:
                self._add(("wide_action", key), shape, np.dtype(np.float64))
                self._add(("action_is_wide", key), (), np.dtype(bool))
                self.wide_action_keys.append(key)
        self.obs_lanes = 0
        if (
            len(obs_leaves) == 1
            and not self.object_obs_keys
            and self.fields[("next", "obs", self.obs_keys[0])].nbytes(num_envs) >= LANE_MIN_BYTES
        ):
            self.obs_lanes = obs_lanes
            _, shape, dtype = obs_leaves[0]
            for lane in range(1, obs_lanes + 1):
                self._add(("lane", lane), shape, dtype)

    def _add(self, name: tuple, shape: tuple[int, ...], dtype: np.dtype) -> None:
        field = Field(tuple(shape), np.dtype(dtype), self._size)
        self.fields[name] = field
        nbytes = field.nbytes(self.num_envs)
        self._size += -(-nbytes // _ALIGN) * _ALIGN

    @property
    def nbytes(self) -> int:
        return max(self._size, _ALIGN)

    def place_info_fields(self, fields: dict[str, InfoField]) -> dict[str, tuple[InfoField, int]]:
        """Places in the info reserve for the ``fields`` not known yet, as far as they fit:
        ``{name: (field, offset)}`` (the others stay extras). Nothing changes until
        ``Buffers.add_info_fields`` adopts the places, in every process that maps the block."""
        places: dict[str, tuple[InfoField, int]] = {}
        used = self._reserve_used
        for name, field in fields.items():
            if name in self.info_fields or len(self.learned_info) + len(places) >= LEARNED_FIELDS:
                continue
            nbytes = int(np.prod(field.shape, dtype=np.int64)) * field.dtype.itemsize
            offset = -(-used // 8) * 8  # aligned for any numeric dtype
            if offset + nbytes > INFO_RESERVE_BYTES:
                continue
            places[name] = (field, offset)
            used = offset + nbytes
        return places

    def adopt_info_places(self, places: dict[str, tuple[InfoField, int]]) -> list[str]:
        """Record ``places`` (see :meth:`place_info_fields`); returns the names new here."""
        new = [name for name in places if name not in self.info_fields]
        for name in new:
            field, offset = places[name]
            self.info_fields[name] = field  # in place: drivers and faces hold this dict
            self.learned_info[name] = offset
            nbytes = int(np.prod(field.shape, dtype=np.int64)) * field.dtype.itemsize
            self._reserve_used = max(self._reserve_used, offset + nbytes)
        return new

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, BufferLayout)
            and self.fields == other.fields
            and self.object_obs_keys == other.object_obs_keys
            and self.object_action_keys == other.object_action_keys
        )


class Slot:
    """Numpy views of one slot (``root`` or ``next``) of the buffers; rows are sub-envs.

    ``objects``: a list per object leaf, one object per sub-env, of this process only.
    """

    def __init__(self, views: dict[tuple, np.ndarray], slot: str, layout: BufferLayout):
        n = layout.num_envs
        self.objects = {key: [None] * n for key in layout.object_obs_keys}
        self.obs = {key: views[(slot, "obs", key)] for key in layout.obs_keys}
        self.info = {name: views[(slot, "info", name)] for name in layout.info_fields}
        self.info_reserve = views[(slot, "info_reserve")]
        self.info_present = views[(slot, "info_present")]
        # Per row and field: the value is a Python int (fields of ``InfoField.ints`` only;
        # their writers set it with each value, it means nothing elsewhere).
        self.info_int = views[(slot, "info_int")]
        for name in layout.learned_info:
            self.add_info(name, layout.info_fields[name], layout.learned_info[name])
        self.done = views[(slot, "done")]
        self.terminated = views[(slot, "terminated")]
        self.truncated = views[(slot, "truncated")]
        self.reward = views.get((slot, "reward"))  # "next" only (see Buffers.reward)

    def add_info(self, name: str, field: InfoField, offset: int) -> None:
        """A view of the info reserve as the array of learnt field ``name``."""
        nbytes = int(np.prod(field.shape, dtype=np.int64)) * field.dtype.itemsize
        raw = self.info_reserve[:, offset : offset + nbytes]
        # splitting the contiguous last axis of a strided view: a view, never a copy
        self.info[name] = raw.view(field.dtype).reshape(len(raw), *field.shape)

    def copy_rows(self, other: Slot, rows: Any, observations: bool = True) -> None:
        """Copy ``other``'s observations (unless ``observations`` is False), infos and flags
        at ``rows`` into this slot."""
        if observations:
            for key, array in self.obs.items():
                array[rows] = other.obs[key][rows]
            for key, objects in self.objects.items():
                source = other.objects[key]
                for i in _row_indices(rows, len(objects)):
                    objects[i] = source[i]
        for name, array in self.info.items():
            array[rows] = other.info[name][rows]
        self.info_present[rows] = other.info_present[rows]
        self.info_int[rows] = other.info_int[rows]
        self.done[rows] = other.done[rows]
        self.terminated[rows] = other.terminated[rows]
        self.truncated[rows] = other.truncated[rows]


def _row_indices(rows: Any, n: int) -> Any:
    if isinstance(rows, slice):
        return range(*rows.indices(n))
    if isinstance(rows, int | np.integer):
        return (int(rows),)
    return rows


class ActionTwin(NamedTuple):
    """The float64 twin of a narrower float action leaf (see ``Buffers.write_action``)."""

    values: np.ndarray  # [num_envs, *shape] float64
    in_use: np.ndarray  # [num_envs] bool: the twin holds the sub-env's action


class Buffers:
    """Numpy (and torch) views of a block laid out by ``layout``.

    Front ends use: ``root`` and ``next`` (the slots they read results from), ``reward``
    (the step's rewards, ``next.reward``), ``action`` with
    :meth:`direct_action` (where actions may be written directly), :meth:`write_action`,
    :meth:`write_action_rows` and :meth:`mark_actions_narrow` (every other action write),
    and ``has_lanes``. ``wide_action``, ``action_objects`` and ``obs_lanes`` are the engine's
    own: its sub-env groups and executors read them.

    ``ship_objects``: set in worker processes, whose object leaves (kept in this process's
    lists) travel back to the parent with each command's answer (see ``SubEnvGroup.run``).
    """

    def __init__(self, layout: BufferLayout, memory: Any):
        self.layout = layout
        self.memory = memory
        flat = np.frombuffer(as_buffer(memory), dtype=np.uint8, count=layout.nbytes)
        n = layout.num_envs
        self.views = {
            name: flat[f.offset : f.offset + f.nbytes(n)].view(f.dtype).reshape(n, *f.shape)
            for name, f in layout.fields.items()
        }
        self.root = Slot(self.views, "root", layout)
        self.next = Slot(self.views, "next", layout)
        self.reward: np.ndarray = self.views[("next", "reward")]  # next.reward, never None
        self.action = {key: self.views[("action", key)] for key in layout.action_keys}
        self.action_objects = {key: [None] * n for key in layout.object_action_keys}
        self.ship_objects = False
        # the float64 twins of the leaves that have one
        self.wide_action = {
            key: ActionTwin(self.views[("wide_action", key)], self.views[("action_is_wide", key)])
            for key in layout.wide_action_keys
        }
        # the observation lanes (see BufferLayout), lane 0 first; [] without lanes
        self.obs_lanes: list[np.ndarray] = []
        if layout.obs_lanes:
            first = self.next.obs[layout.obs_keys[0]]
            lanes = [self.views[("lane", lane)] for lane in range(1, layout.obs_lanes + 1)]
            self.obs_lanes = [first, *lanes]
        self._handed_out: list[np.ndarray] | None = None  # see handed_out_lanes
        self._free_refs = 0

    def add_info_fields(self, places: dict[str, tuple[InfoField, int]]) -> list[str]:
        """Adopt learnt info fields (see ``BufferLayout.place_info_fields``): their arrays
        appear in both slots, their presence flags after the known ones. Adopting places
        already adopted changes nothing. Returns the names new here."""
        new = self.layout.adopt_info_places(places)
        for name in new:
            field, offset = places[name]
            self.root.add_info(name, field, offset)
            self.next.add_info(name, field, offset)
        return new

    def store_objects(self, extras: dict[int, Any]) -> None:
        """Object observations that worker processes sent back (``Extras.objects``), into
        this process's lists; extras left empty are dropped."""
        root, next_ = self.root.objects, self.next.objects
        keys = self.layout.object_obs_keys
        for i in [i for i, e in extras.items() if e.objects is not None]:
            root_values, next_values = extras[i].objects
            extras[i].objects = None
            for key, root_value, next_value in zip(keys, root_values, next_values):
                root[key][i], next_[key][i] = root_value, next_value
            if extras[i].is_empty():
                del extras[i]

    def direct_action(self, key: tuple) -> np.ndarray | None:
        """The array that actions of leaf ``key`` may be written into by item assignment (the
        fast path), or None where they go through :meth:`write_action`: a leaf with a float64
        twin, or an object leaf."""
        if key in self.wide_action or key in self.action_objects:
            return None
        return self.action[key]

    @property
    def has_float64_twins(self) -> bool:
        """Whether some action leaf has a float64 twin (see :meth:`write_action`)."""
        return bool(self.wide_action)

    @property
    def has_lanes(self) -> bool:
        """Whether the block has observation lanes (see ``BufferLayout``)."""
        return bool(self.obs_lanes)

    def write_action(self, key: tuple, values: Any) -> None:
        """Write the actions of every sub-env for action leaf ``key``.

        float64 values of a narrower float leaf go to its float64 twin, so that the sub-envs
        step with the caller's values, as gymnasium's vector envs pass them on; any other
        values are cast to the leaf's dtype. An object leaf takes a sequence of
        ``num_envs`` values, kept in this process's list (they travel with the command).
        """
        objects = self.action_objects.get(key)
        if objects is not None:
            objects[:] = values
            return
        wide = self.wide_action.get(key)
        if wide is not None and values.dtype == np.float64:
            wide[0][...] = values
            wide[1].fill(True)  # every row: first-ready writes may have left them mixed
            return
        self.action[key][...] = values
        if wide is not None:
            wide[1].fill(False)

    def write_action_rows(self, key: tuple, rows: np.ndarray, values: Any) -> None:
        """``write_action`` for the sub-envs at ``rows`` only (one value per row)."""
        objects = self.action_objects.get(key)
        if objects is not None:
            for row, value in zip(np.asarray(rows).tolist(), values):
                objects[row] = value
            return
        wide = self.wide_action.get(key)
        if wide is not None and values.dtype == np.float64:
            wide[0][rows] = values
            wide[1][rows] = True
            return
        self.action[key][rows] = values
        if wide is not None:
            wide[1][rows] = False

    def mark_actions_narrow(self) -> None:
        """The actions were written into the leaves' own buffers (the tensordict API)."""
        for _, is_wide in self.wide_action.values():
            is_wide.fill(False)  # every row: first-ready writes may have left them mixed

    def handed_out_lanes(self) -> list[np.ndarray]:
        """The arrays over lanes 1, 2, ... that callers are handed (made on first use, then
        the same ones). Each owns its views: numpy makes every view of it point at it (and
        ``torch.from_numpy`` holds it), so its reference count tells whether anybody still
        holds it or a part of it."""
        if self._handed_out is None:
            n = self.layout.num_envs
            self._handed_out = []
            for lane in range(1, len(self.obs_lanes)):
                field = self.layout.fields[("lane", lane)]
                count = n * int(np.prod(field.shape, dtype=np.int64))
                array = np.frombuffer(as_buffer(self.memory), field.dtype, count, field.offset)
                array.shape = (n, *field.shape)  # in place: a reshape would be a view of it
                self._handed_out.append(array)
            self._free_refs = min(self._lane_refs(), default=0)
        return self._handed_out

    def free_lane(self) -> int:
        """The first observation lane whose handed-out array nobody holds (0: none)."""
        if not self.obs_lanes:
            return 0
        self.handed_out_lanes()
        for lane, refs in enumerate(self._lane_refs(), 1):
            if refs <= self._free_refs:
                return lane
        return 0

    def _lane_refs(self) -> list[int]:
        return [reference_count(array) for array in self._handed_out or ()]


# ---- where the block lives -------------------------------------------------------------------
def private_memory(nbytes: int) -> Any:
    """Memory of this process only (SerialEnv)."""
    return bytearray(nbytes)


def shared_memory(nbytes: int) -> Any:
    """An anonymous shared mapping, inherited by worker processes when they start.

    Its file is unlinked at once, so no segment outlives the processes that map it.
    """
    return RawArray("b", nbytes)


# Where a block that must reach running worker processes lives (a MemmapMemory there): the
# shared memory file system, where there is one.
SHM_DIRECTORY = "/dev/shm" if os.path.isdir("/dev/shm") else None


class MemmapMemory:
    """A block backed by a temporary file (``memmap=True``), unlinked as soon as it is made:
    however the processes end, no file is left behind. Worker processes get the open file
    itself (multiprocessing passes its descriptor to a spawned or forkserver worker; a forked
    one inherits the mapping)."""

    def __init__(self, nbytes: int, fd: Any = None, directory: str | None = None):
        self.owner = fd is None
        if fd is None:
            fd, path = tempfile.mkstemp(prefix="gymvec-", suffix=".buf", dir=directory)
            self.path: str | None = path
            os.unlink(path)
            os.ftruncate(fd, nbytes)
        else:  # in a worker: the descriptor multiprocessing passed (see __reduce__)
            fd = fd.detach() if hasattr(fd, "detach") else fd
            self.path = None
        self.nbytes = nbytes
        self.mmap = mmap.mmap(fd, nbytes)
        if self.owner:
            self.fd = fd  # kept for workers started later
        else:
            os.close(fd)  # the mapping keeps the file
            self.fd = None

    def __reduce__(self):
        from multiprocessing.reduction import DupFd

        if self.fd is None:
            raise TypeError("a MemmapMemory is passed on by the process that made it")
        return MemmapMemory, (self.nbytes, DupFd(self.fd))

    def release(self) -> None:
        """Close the file (unlinked already); the mappings stay valid until dropped."""
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)


def as_buffer(memory: Any) -> Any:
    """An object numpy's frombuffer accepts, for any of the memories above."""
    return memory.mmap if isinstance(memory, MemmapMemory) else memory


class LaneChoice:
    """Which observation lane (see ``BufferLayout``) "next"'s observations go to now, on the
    engine's side: the one place that picks a lane and writes the control block's lane word
    (``lane_word``), which the sub-env groups follow."""

    def __init__(self, buffers: Buffers, lane_word: np.ndarray):
        self.buffers = buffers
        self.lane_word = lane_word
        self.current = 0  # lane 0: "next"'s own observations
        self.previous = 0  # the lane before, where a command goes to a lane (faults that heal)

    def choose(self, into_lane: bool) -> int:
        """The lane of the next command: a free one where ``into_lane``, else lane 0."""
        lane = self.buffers.free_lane() if into_lane else 0
        self.previous = self.current
        if lane or self.current:
            # Back to lane 0, the sub-envs first give it the observations they returned last
            # (not a copy of the lane: its array is the caller's, who may have written in it).
            self.lane_word[0] = lane
            self.current = lane
        return lane

    def handed_out(self, lane: int) -> np.ndarray:
        """The array callers are handed for ``lane`` (1, 2, ...)."""
        return self.buffers.handed_out_lanes()[lane - 1]
