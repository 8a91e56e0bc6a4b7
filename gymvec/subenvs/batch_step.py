"""The fast runner of plain gymnasium sub-envs, and the choice of a group's runner.

:class:`BatchStep` is ``drivers.CommandRunner`` for gymnasium sub-envs with one array
observation and action: their steps go in one pass and land with one vectorised write per
field, and the hottest commands skip the phases. :func:`command_runner` picks it where it
can carry a group's commands out.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence
from operator import call
from typing import Any

import numpy as np

from gymvec.common.infos import InfoField, exact_int
from gymvec.subenvs.drivers import CommandRunner, GymDriver, take_extras, transition_error
from gymvec.subenvs.healing import continue_past_faults as past_faults
from gymvec.wire.buffers import Buffers
from gymvec.wire.commands import RESET_NEXT, SAME_STEP_MODES, STEP, Extras


class BatchStep(CommandRunner):
    """The command runner of gymnasium sub-envs with one array observation and one array
    action (the usual case), all writing the same buffers.

    Same results as :class:`CommandRunner` over their drivers, but the steps go in one pass
    and their results land with one vectorised write per field (a few numpy item writes per
    sub-env otherwise cost more than a cheap env's own step). The commands of each autoreset
    policy (``commands.step_modes``) skip the phases: every sub-env steps (and, SAME_STEP, the
    root is brought up to date and those that finished reset into it, their final
    observations kept), or (NEXT_STEP) some step and the others reset into "next", their
    reset counting as a transition with reward 0 and flags False.
    ``tests/differential/test_runners_agree.py`` checks them against the phases on generated
    commands.
    """

    def __init__(self, drivers: list[GymDriver], buffers: Buffers, start: int, stop: int):
        super().__init__(drivers, buffers, start)
        self.steps = [driver.gym.step for driver in drivers]
        self.resets = [driver.gym.reset for driver in drivers]
        rows = slice(start, stop)
        action_key = drivers[0].action_leaves[0].key
        self.narrow_actions = buffers.action[action_key][rows]
        wide = buffers.wide_action.get(action_key)
        # float64 actions (see Buffers.write_action): their rows, and this group's first flag
        self.wide_actions = None if wide is None else (wide[0][rows], wide[1][start : start + 1])
        self.wide_in_use = None if wide is None else wide[1][rows]  # per row: first-ready
        self.obs = buffers.next.obs[drivers[0].obs_keys[0]][rows]
        slot = buffers.next
        self.reward, self.done = buffers.reward[rows], slot.done[rows]
        self.terminated, self.truncated = slot.terminated[rows], slot.truncated[rows]
        self.layout = buffers.layout
        self._read_fields()
        self.wrote_extras = False  # whether the last _write left extras on a driver
        self.all_step = bytes([STEP]) * (stop - start)  # the mode bytes of a plain step
        self.all_same_step = bytes([SAME_STEP_MODES]) * (stop - start)
        self.step_or_next_reset = bytes([STEP, RESET_NEXT])
        # Observations of one or more dims land with one np.concatenate into the rows seen as
        # [n * d0, d1, ...]: a C loop, quicker than assigning the tuple or np.stack (whose
        # Python-level expand_dims per array costs more than a big copy).
        self.obs_shape = self.obs.shape[1:]
        self.first_dims = [self.obs_shape[0]] * (stop - start) if self.obs_shape else None
        self.concat_out = self.obs.reshape(-1, *self.obs_shape[1:]) if self.obs_shape else None
        # (obs, concat_out) of this group's rows in each observation lane, lane 0 first
        self.lanes = [(self.obs, self.concat_out)]
        # The observations the sub-envs returned last, as they returned them: what lane 0 is
        # given back after commands into other lanes, whose arrays callers may have changed.
        self.last_obs: list[Any] = [None] * (stop - start)
        for lane in buffers.obs_lanes[1:]:
            obs = lane[rows]
            self.lanes.append(
                (obs, obs.reshape(-1, *self.obs_shape[1:]) if self.obs_shape else None)
            )

    def fields_changed(self) -> None:
        super().fields_changed()
        self._read_fields()

    def _read_fields(self) -> None:
        """What the info fields (the layout's, learnt so far) ask of ``_write``."""
        self.with_fields = bool(self.layout.info_fields)
        self.columns = info_columns(self.layout.info_fields)
        self.column_width = {len(self.columns)}  # (every info of that many entries: columns)

    def use_lane(self, lane: int) -> None:
        """Write the observations of "next" into observation lane ``lane`` from now on (the
        vectorised writes, and the drivers' resets into "next"); back to lane 0, first write
        it the observations of the last command."""
        if lane == 0:
            obs = self.lanes[0][0]
            for k, value in enumerate(self.last_obs):
                obs[k] = value
        self.lane = lane
        self.obs, self.concat_out = self.lanes[lane]
        for driver in self.drivers:
            driver.write_obs_into(self.obs_lanes[lane])

    def run(self, modes: bytes, seeds: np.ndarray, options: dict | None) -> dict[int, Extras]:
        # (the float64 twins when the caller wrote them; list(map(call, ...)) runs the steps
        # in C: a comprehension is a call of its own)
        wide = self.wide_actions
        actions = wide[0] if wide is not None and wide[1][0] else self.narrow_actions
        if modes == self.all_step:  # the hottest case: nothing but steps
            results: list = []  # (extended: a sub-env that raises leaves the others' results)
            try:
                results.extend(map(call, self.steps, actions))
            except Exception as exc:
                past_faults(self.on_fault, results, self.steps, actions, exc, self.faulted_next)
            self._write(results, range(len(modes)))
            return take_extras(self.drivers) if self.wrote_extras else {}
        if modes == self.all_same_step:  # the root follows "next"; the finished reset into it
            drivers, root = self.drivers, self.root
            results = []
            try:
                results.extend(map(call, self.steps, actions))
            except Exception as exc:
                past_faults(self.on_fault, results, self.steps, actions, exc, self.faulted_root)
            done_rows = self._write(results, range(len(modes)))
            if self.faulted:  # the engine resets them, seeded (engine/healing.py)
                done_rows = [k for k in done_rows if k not in self.faulted]
                self.faulted.clear()
            self.sync_root(self.rows)  # then the resets overwrite their rows
            for k in done_rows:
                self.keep_final_obs(k)
                drivers[k].reset(root, None, None)
            return take_extras(drivers) if done_rows or self.wrote_extras else {}
        if not modes.translate(None, self.step_or_next_reset):  # only those two modes
            # the few sub-envs that reset swap their step for their reset, and one pass
            # calls everybody's (cheaper than testing each row's mode in the pass)
            calls = list(self.steps)
            k = modes.find(RESET_NEXT)
            while k >= 0:
                calls[k] = functools.partial(self._reset_as_step, k, options)
                k = modes.find(RESET_NEXT, k + 1)
            results = []
            try:
                results.extend(map(call, calls, actions))
            except Exception as exc:
                past_faults(self.on_fault, results, calls, actions, exc, self.faulted_next)
            self._write(results, range(len(modes)))
            return take_extras(self.drivers) if self.wrote_extras else {}
        return self.run_phases(modes, seeds, options)  # (its drivers write the lane itself)

    def step_rows(self, stepping: Sequence[int]) -> list[int]:
        steps = self.steps
        in_use, twins = self.wide_in_use, self.wide_actions
        if in_use is None or twins is None:
            narrow = self.narrow_actions
            actions = [narrow[k] for k in stepping]
        else:
            # Row by row: first-ready commands write the actions of some rows only, each row
            # into the buffer its caller's dtype asks for.
            narrow, wide = self.narrow_actions, twins[0]
            actions = [wide[k] if in_use[k] else narrow[k] for k in stepping]
        calls = [steps[k] for k in stepping]
        results: list = []
        try:
            results.extend(map(call, calls, actions))
        except Exception as exc:
            past_faults(self.on_fault, results, calls, actions, exc, self.faulted_next, stepping)
        return self._write(results, stepping)

    def replace(self, k: int, driver: GymDriver) -> None:
        super().replace(k, driver)
        self.steps[k], self.resets[k] = driver.gym.step, driver.gym.reset
        if self.lane:
            driver.write_obs_into(self.obs_lanes[self.lane])

    def faulted_next(self, k: int) -> tuple:
        """The step result of row ``k``, whose sub-env faulted: its last observation (what
        its last step or reset into "next" returned), reward 0, truncated."""
        obs = self.last_obs[k]
        return (self.obs[k].copy() if obs is None else obs), 0.0, False, True, {}

    def faulted_root(self, k: int) -> tuple:
        """As :meth:`faulted_next`, under SAME_STEP: the row's last observation is its root's
        (its previous step's, or the reset that followed it); the row is not reset here."""
        self.faulted.add(k)
        obs = self.root.obs[self.drivers[k].obs_keys[0]][self.start + k].copy()
        return obs, 0.0, False, True, {}

    def last_observation(self, k: int) -> Any:
        return self.last_obs[k]  # (its drivers' step_value is not set: _write keeps them here)

    def reset_into_next(self, k: int) -> None:
        self.last_obs[k] = self.drivers[k].next_value

    def _reset_as_step(self, k: int, options: dict | None, _action: Any = None) -> tuple:
        """Reset sub-env ``k``; its result as the transition that NEXT_STEP reports (in
        place of a step, so it takes the action it ignores)."""
        obs, info = self.resets[k](options=options)
        return obs, 0.0, False, False, info

    def _observation_error(self, observations: tuple, stepping: Sequence[int]) -> ValueError:
        for k, obs in zip(stepping, observations):
            try:
                fits = np.shape(obs) == self.obs_shape
            except ValueError:  # ragged
                fits = False
            if not fits or np.asarray(obs).dtype.kind not in "biuf":
                return self.drivers[k].observation_error(obs)
        return self.drivers[stepping[0]].observation_error(observations[0])

    def _write(self, results: list[tuple], stepping: Sequence[int]) -> list[int]:
        """Write the transitions of the sub-envs at ``stepping`` (a range of all of them, or
        a list); returns those that finished (group rows), [] when none did.

        An info entry without a field leaves an extras record on its driver (and
        ``wrote_extras`` True).
        """
        everyone = len(stepping) == len(self.steps)
        rows: Any = slice(None) if everyone else list(stepping)
        observations, rewards, terminations, truncations, infos = zip(*results)
        if everyone:
            self.last_obs = list(observations)
        else:
            for k, value in zip(stepping, observations):
                self.last_obs[k] = value
        # Concatenating into the buffer checks every dim but the first of each observation's
        # shape (a batch whose lengths only add up would be written misaligned): the first
        # dims are compared here (``len`` costs less than ``shape``; a scalar has none).
        fits = False
        if everyone and self.concat_out is not None:
            try:
                fits = list(map(len, observations)) == self.first_dims
            except TypeError:  # a scalar, say
                pass
        if fits:
            try:
                np.concatenate(observations, out=self.concat_out, casting="unsafe")
            except (ValueError, TypeError) as exc:
                raise self._observation_error(observations, stepping) from exc
        else:  # lists, say, or a shape that is off (no broadcasting, as in SyncVectorEnv)
            try:
                # Scalars (Discrete spaces) need no shape check: numpy refuses a batch of them
                # with any sequence in it (ragged, or one dim too many for the rows).
                scalar = not self.obs_shape
                if not scalar and not all(np.shape(obs) == self.obs_shape for obs in observations):
                    raise ValueError
                self.obs[rows] = observations
            except (ValueError, TypeError) as exc:
                raise self._observation_error(observations, stepping) from exc
        try:
            self.reward[rows] = rewards
            self.terminated[rows] = terminations
            self.truncated[rows] = truncations
        except (ValueError, TypeError) as exc:
            indices = [self.drivers[k].index for k in stepping]
            raise transition_error(indices, rewards, terminations, truncations) from exc
        done = self.done
        if everyone:
            np.logical_or(self.terminated, self.truncated, out=done)
        else:
            done[rows] = self.terminated[rows] | self.truncated[rows]
        self.wrote_extras = False
        columns_fit = everyone and self.columns and self._write_info_columns(infos)
        if not columns_fit and (self.with_fields or any(infos)):
            self._write_infos(infos, stepping, everyone)
        if b"\x01" not in done.tobytes():  # (any_set, inline: this runs every step)
            return []
        if everyone:  # (one C call: reading the flags one by one makes a numpy bool each)
            return np.flatnonzero(done).tolist()
        return [k for k in stepping if done[k]]

    def _write_infos(
        self, infos: tuple[dict, ...], stepping: Sequence[int], everyone: bool
    ) -> None:
        """Each sub-env's info into its row of "next" (see ``GymDriver.write_info``)."""
        cleared, slot = self.with_fields, self.next
        if cleared:  # every row's flags in one call, not one per sub-env
            start = self.start
            slot.info_present[self.rows if everyone else [start + k for k in stepping]] = False
        for k, info in zip(stepping, infos):
            driver = self.drivers[k]
            driver.write_info(slot, info, cleared)
            self.wrote_extras = self.wrote_extras or driver.extras is not None

    def _write_info_columns(self, infos: tuple[dict, ...]) -> bool:
        """Where every info holds exactly the scalar info fields, each with a value its field
        accepts (FrozenLake's ``{"prob": 1.0}``, say): one write per field for all rows, not
        one per sub-env and field. False, writing nothing, where any does not."""
        if set(map(len, infos)) != self.column_width:
            return False
        columns = []
        for name, kinds, _, _ in self.columns:
            try:
                values = list(map(operator.itemgetter(name), infos))
            except KeyError:
                return False
            found = set(map(type, values))
            if not found <= kinds or (int in found and not all(map(exact_int, values))):
                return False
            columns.append((values, int in found))
        slot, rows = self.next, self.rows
        slot.info_present[rows] = True
        for (name, _, k, ints), (values, some_int) in zip(self.columns, columns):
            slot.info[name][rows] = values
            if ints:
                slot.info_int[rows, k] = some_int and [type(value) is int for value in values]
        return True


def info_columns(fields: dict[str, InfoField]) -> list[tuple[str, set[type], int, bool]]:
    """Per info field, what :meth:`BatchStep._write_info_columns` needs (its name, the value
    types it accepts, its index, whether it flags ints); [] where a field holds arrays (each
    value's shape and dtype would need a look: the per-sub-env path does that)."""
    if any(field.shape or field.kind is np.ndarray for field in fields.values()):
        return []
    return [
        (name, {field.kind, int} if field.ints else {field.kind}, k, field.ints)
        for k, (name, field) in enumerate(fields.items())
    ]


def command_runner(drivers: list[Any], buffers: Buffers, start: int) -> CommandRunner:
    """The fastest runner that can carry the commands of ``drivers`` out."""
    layout = buffers.layout
    has_objects = bool(layout.object_obs_keys or layout.object_action_keys)
    plain = (
        drivers
        and not has_objects
        and all(isinstance(d, GymDriver) and d.plain_obs for d in drivers)
        and all(d.obs_keys == drivers[0].obs_keys for d in drivers)
        and not drivers[0].action_leaves[0].path
    )
    if plain:
        return BatchStep(drivers, buffers, start, start + len(drivers))
    return CommandRunner(drivers, buffers, start)
