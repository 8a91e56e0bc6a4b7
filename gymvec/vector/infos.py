"""gymnasium's vector infos from the engine's buffers and extras, for the gymnasium face."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from gymnasium import spaces

from gymvec.common.structure import Leaf, build_value
from gymvec.wire.buffers import Buffers, Slot
from gymvec.wire.commands import NOTHING


class FaceInfos:
    """Builds a face's infos (and SAME_STEP's final observations) as gymnasium's vector envs
    lay them out: an array per entry with its ``_name`` mask, ``final_obs``/``final_info``."""

    def __init__(
        self,
        buffers: Buffers,
        add_info: Callable[[dict, dict, int], dict],
        observation_space: spaces.Space,
        obs_leaves: list[Leaf],
        obs_leaf_discrete: list[bool],
    ):
        self.buffers = buffers
        self.num_envs = buffers.layout.num_envs
        self.fields = buffers.layout.info_fields  # (grows in place as fields are learnt)
        self.add_info = add_info  # gymnasium's VectorEnv._add_info, of the face
        self.observation_space = observation_space
        self.obs_leaves, self.obs_leaf_discrete = obs_leaves, obs_leaf_discrete

    def same_step(self, finished: np.ndarray, any_finished: bool, extras: dict) -> dict:
        # gymnasium adds, per finished sub-env, {"final_obs", "final_info"} and then its reset
        # info; the other sub-envs add their step info. The root slot holds the reset info of
        # finished sub-envs and (copied by SYNC_ROOT) the step info of the others.
        top_extras = {i: e.root if finished[i] else e.next for i, e in extras.items()}
        infos = self.infos(self.buffers.root, None, top_extras)
        if any_finished:
            final_extras = {i: e.next for i, e in extras.items() if finished[i]}
            final_obs = np.full(self.num_envs, None, dtype=object)
            for i in np.flatnonzero(finished).tolist():
                kept = extras.get(i)  # the object the sub-env returned, where it came back
                if kept is not None and kept.final_obs is not NOTHING:
                    final_obs[i] = kept.final_obs
                else:  # "next"'s own row: SAME_STEP steps take no lane here (plan.handout)
                    final_obs[i] = self.single_observation(self.buffers.next, i)
            infos["final_obs"], infos["_final_obs"] = final_obs, finished.copy()
            infos["final_info"] = self.infos(self.buffers.next, finished, final_extras)
            infos["_final_info"] = finished.copy()
        return infos

    def single_observation(self, slot: Slot, i: int) -> Any:
        # Array leaves come back as arrays (0-d ones too), Discrete leaves as numpy integers.
        arrays = [
            slot.objects[leaf.key][i]
            if leaf.is_object
            else slot.obs[leaf.key][i]
            if discrete
            else np.array(slot.obs[leaf.key][i])
            for leaf, discrete in zip(self.obs_leaves, self.obs_leaf_discrete)
        ]
        return build_value(self.observation_space, self.obs_leaves, arrays)

    def infos(self, slot: Slot, rows: np.ndarray | None, extras: dict[int, dict | None]) -> dict:
        """gymnasium's vector infos from the info fields of ``slot`` and the extras."""
        reported = {i: e for i, e in extras.items() if e and (rows is None or rows[i])}
        fields = self.fields
        if not reported and not fields:
            return {}
        infos: dict = {}
        # A field that is also an extra somewhere changed type: gymnasium types the array after
        # the first sub-env that reports the key, so such fields go sub-env by sub-env.
        mixed = {name for e in reported.values() for name in e} & fields.keys()
        per_env: dict[int, dict] = {}
        taken: set[str] = set()  # mixed entries whose extras went into their field's array
        for k, (name, field) in enumerate(fields.items()):
            present = slot.info_present[:, k]
            if rows is not None:
                present = present & rows
            flags = present.tobytes()  # (bytes tests cost less than numpy's any/all here)
            if b"\x01" not in flags:
                continue
            ints = slot.info_int[:, k] if field.ints else None  # (see InfoField.ints)
            if name in mixed:
                column = scalar_column(name, field, slot.info[name], present, reported, ints)
                if column is not None:  # ints and floats: one array, as gymnasium types it
                    infos[name], infos[f"_{name}"] = column
                    taken.add(name)
                    continue
                for i in np.flatnonzero(present).tolist():
                    as_int = ints is not None and bool(ints[i])
                    per_env.setdefault(i, {})[name] = field_value(field, slot.info[name][i], as_int)
                continue
            present = present.copy()
            whole = b"\x00" not in flags  # (the usual case: every sub-env reported it)
            # gymnasium types the array after the first sub-env's value, the others cast into it
            dtype = field.dtype
            if ints is not None and ints[0 if whole else int(np.argmax(present))]:
                dtype = np.dtype(int)
            if whole and dtype is field.dtype:
                values = slot.info[name].copy()
            else:
                values = np.zeros((self.num_envs, *field.shape), dtype=dtype)
                values[present] = slot.info[name][present]
            infos[name], infos[f"_{name}"] = values, present
        if not reported and not per_env:  # (the usual case: every entry had its field)
            return infos
        if taken:
            reported = {
                i: rest
                for i, e in reported.items()
                if (rest := {key: v for key, v in e.items() if key not in taken})
            }
        order = sorted(reported.keys() | per_env.keys())
        merged = [{**per_env.get(i, {}), **reported.get(i, {})} for i in order]
        if len(order) == self.num_envs and scalar_columns(infos, merged):
            return infos
        for i, info in zip(order, merged):
            infos = self.add_info(infos, info, i)
        return infos


_SCALARS = (int, float, bool)


def scalar_columns(infos: dict, dicts: list[dict]) -> bool:
    """The info dicts of every sub-env (in order) added to ``infos`` at once, where gymnasium's
    ``_add_info`` would give the same arrays with more work: the same keys in the same order,
    each value a Python int, float or bool. As there, each array takes the type of sub-env
    0's value and the others are cast into it (FrozenLake's "prob": int after a reset, float
    after a step). False (``infos`` untouched) otherwise."""
    keys = list(dicts[0])
    if any(len(d) != len(keys) or list(d) != keys for d in dicts[1:]):
        return False
    columns = []
    for key in keys:
        values = [d[key] for d in dicts]
        if key in infos or any(type(v) not in _SCALARS for v in values):
            return False
        columns.append((key, np.array(values, dtype=type(values[0]))))
    flags = np.ones(len(dicts), dtype=bool)
    for key, column in columns:  # (gymnasium's order: each key, then its mask)
        infos[key], infos[f"_{key}"] = column, flags.copy()
    return True


def scalar_column(
    name: str,
    field: Any,
    stored: np.ndarray,
    present: np.ndarray,
    reported: dict[int, dict],
    ints: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray] | None:
    """The array and mask of an int or float field that some sub-envs reported as extras of
    the other of the two types (an int too large for a float field that holds ints, say):
    typed, as gymnasium's ``_add_info`` does, after the first sub-env's value, the others
    cast into it (``ints``: the field's int flags, see ``InfoField.ints``). None where an
    extra is not an int or a float."""
    numbers = (int, float)
    extra = {i: e[name] for i, e in reported.items() if name in e}
    if field.kind not in numbers or any(type(v) not in numbers for v in extra.values()):
        return None
    mask = present.copy()
    mask[list(extra)] = True
    first = int(np.argmax(mask))
    if first in extra:
        kind = type(extra[first])
    else:
        kind = int if ints is not None and ints[first] else field.kind
    column = np.zeros(len(mask), dtype=kind)
    column[present] = stored[present]
    for i, value in extra.items():
        column[i] = value
    return column, mask


def field_value(field: Any, stored: np.ndarray, as_int: bool = False) -> Any:
    """A value read from an info field's buffer, back as the type the sub-env reported
    (``as_int``: its row's int flag, see ``InfoField.ints``)."""
    if field.kind is np.ndarray:
        return np.array(stored)
    return int(stored) if as_int else field.kind(stored)


def add_faults(infos: dict, faults: dict[int, str], num_envs: int, same_step: bool) -> None:
    """``infos["fault"]`` (the message per faulted row, None elsewhere) and its ``_fault``
    mask (API section 13); under SAME_STEP also in ``infos["final_info"]``, where the
    faulted episode's end is reported."""
    messages = np.full(num_envs, None, dtype=object)
    mask = np.zeros(num_envs, dtype=bool)
    for row, message in faults.items():
        messages[row], mask[row] = message, True
    targets = [infos]
    if same_step and isinstance(infos.get("final_info"), dict):
        targets.append(infos["final_info"])
    for target in targets:
        target["fault"], target["_fault"] = messages.copy(), mask.copy()
