"""The tensordict API over the batch engine: :class:`BatchedEnvBase`, under ``SerialEnv``
(``serial_env.py``) and ``ParallelEnv`` (``parallel_env.py``).

:class:`BatchedEnvBase` turns ``EnvBase``'s calls into the engine's verbs (``engine.py``) and
the engine's buffers into fresh tensors: ``reset`` -> ``reset_send(mask, into="root")``,
``step`` -> ``step_send(AutoresetMode.DISABLED)``, ``step_and_maybe_reset`` ->
``step_send(AutoresetMode.SAME_STEP)``; first-ready batches (``async_step_send`` and the like,
torchrl's ``AsyncEnvPool`` names) -> the engine's ``async_*`` verbs, their rows named by
``"env_index"``. Specs are derived here from what the engine learnt of the sub-envs (their
gymnasium spaces, or their own specs), with the tasks of a multi-task batch.
``SerialEnv`` and ``ParallelEnv`` differ only in the engine's backend.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from itertools import starmap
from typing import Any, NamedTuple

import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from tensordict import LazyStackedTensorDict, TensorDict, TensorDictBase

from gymvec.common.arrays import any_set
from gymvec.common.fastpath import get_str, tensordict_maker, tensordict_unchecked
from gymvec.common.faults import FaultRecords, Restart
from gymvec.common.reprs import never_raises
from gymvec.engine.engine import Backend, BatchEngine, expand_seeds
from gymvec.envs.base import EnvBase, make_done_spec, make_reward_spec, set_next
from gymvec.envs.batch_specs import BatchSpecs
from gymvec.envs.faulted_rows import FaultedRows
from gymvec.envs.first_ready_batches import ENV_INDEX, FirstReadyBatches  # noqa: F401
from gymvec.envs.sub_env_kind import buffer_tensordict
from gymvec.specs import (
    Composite,
    DeviceLike,
    TensorSpec,
    info_spec_of,
    non_tensor,
    object_values,
)
from gymvec.subenvs.factories import SubEnvFactories
from gymvec.subenvs.group import SubEnvSummary
from gymvec.wire.buffers import Buffers
from gymvec.wire.commands import Extras

_CPU = torch.device("cpu")


class ActionSlot(NamedTuple):
    """Where one action leaf of a tensordict goes: its key and spec, the buffer as a tensor
    and as an array, and the spec's check of an array (None: nothing to check), or its masks
    (``TensorSpec.array_words``: the check applied inline)."""

    key: str | tuple
    spec: TensorSpec
    view: torch.Tensor
    array: np.ndarray
    values_in: Callable[[np.ndarray], bool] | None
    words: tuple[int, int] | None


def action_slot(key: tuple, spec: TensorSpec, view: torch.Tensor, array: np.ndarray) -> ActionSlot:
    """The ``ActionSlot`` of the action leaf at ``key`` (a top-level key as a string:
    tensordict looks strings up faster)."""
    td_key = key[0] if len(key) == 1 else key
    return ActionSlot(td_key, spec, view, array, spec.array_check(), spec.array_words())


class FlatPlan(NamedTuple):
    """How the outputs of ``step_and_maybe_reset`` are made for flat trees (no nesting, no
    objects, one uniform batch), laid out once: "next"'s keys, the dtypes and shapes of its
    fresh arrays and the buffer arrays copied into them (the reward last, cast to the reward
    spec's dtype); the same for the next root (the root buffer: SAME_STEP brings it up to
    date)."""

    next_keys: tuple[str, ...]
    next_made: list[tuple[tuple[int, ...], np.dtype]]
    next_sources: list[np.ndarray]
    root_keys: tuple[str, ...]
    root_made: list[tuple[tuple[int, ...], np.dtype]]
    root_sources: list[np.ndarray]
    reward_spec: TensorSpec  # the spec the reward's dtype was taken from
    make: Callable[[dict], TensorDict]  # a TensorDict of the batch from flat entries, unchecked


class FlatOutputs(NamedTuple):
    """The outputs of one ``step_and_maybe_reset`` of flat trees, made before the buffers
    hold the step's results (see :class:`FlatPlan`): "next" and the next root as TensorDicts
    of fresh arrays, and those arrays (in ``plan.next_keys`` and ``plan.root_keys`` order),
    still to fill."""

    next: TensorDict
    root: TensorDict
    next_arrays: list[np.ndarray]
    root_arrays: list[np.ndarray]
    plan: FlatPlan


class BatchedEnvBase(FaultRecords, FaultedRows, FirstReadyBatches, EnvBase):
    """Common base of :class:`SerialEnv` and :class:`ParallelEnv`: a batch of sub-envs with
    the tensordict API, over a :class:`~gymvec.engine.BatchEngine`.

    Args:
        factories: the sub-envs' factories and workers, as the subclasses' arguments
            (``num_workers``, ``create_env_fn``, ``create_env_kwargs``, ``envs_per_worker``)
            give them.
        backend: where the sub-envs run (see ``engine.Backend``).
        device: where outputs live (sub-envs run on CPU).
        timeout: seconds a reset, step or call may take (see ``BatchEngine``).
        on_fault: None ("raise") or a ``gymvec.Restart`` policy (faults that heal, API
            section 13; see ``BatchEngine``): ``restarts`` and ``faults`` report them.
    """

    def __init__(
        self,
        factories: SubEnvFactories,
        backend: Backend,
        *,
        device: DeviceLike = None,
        timeout: float | None = None,
        on_fault: Restart | None = None,
    ) -> None:
        engine = BatchEngine(factories, backend, timeout=timeout, on_fault=on_fault)
        self.num_workers = factories.num_workers
        counts = factories.layout.sub_envs_per_worker
        # one count where every worker holds as many, as it is usually given
        self.envs_per_worker: int | list[int] = counts[0] if len(set(counts)) == 1 else list(counts)
        self.num_envs = engine.num_envs  # rows: a block sub-env fills several
        self.worker_bounds = engine.worker_bounds
        try:
            super().__init__(batch_size=(self.num_envs,), device=device)
            self._pending_seeds: list[int | None] | None = None
            self.last_extras: dict[int, Extras] = {}
            self._sent: dict[int, TensorDictBase] = {}  # first-ready steps: each row as sent
            self._row_specs: dict[tuple | str, TensorSpec] = {}  # see FirstReadyBatches
            self.engine = engine
            engine.check_blocks("explicit", type(self).__name__)
            self._set_specs(engine.summaries)
            self._make_views()
        except BaseException:
            engine.close()
            raise

    # ---- construction -------------------------------------------------------------------------
    def _set_specs(self, summaries: list[SubEnvSummary]) -> None:
        n = self.num_envs
        self.heterogeneous = self.engine.heterogeneous
        specs = BatchSpecs.of(summaries, n, self.heterogeneous)
        self.observation_spec, self.full_action_spec = specs.observation, specs.action
        # a multi-task batch's: each sub-env's keys, and each task's action spec
        self._sub_env_keys, self._task_action_specs = specs.sub_env_keys, specs.task_actions
        self.reward_spec = make_reward_spec(self.batch_size, specs.reward_dtype)
        self.done_spec = make_done_spec(self.batch_size)
        self._fault_specs()  # (with on_fault restarting: see faulted_rows.py)
        self.info_fields = self.engine.info_fields
        self.info_spec = info_spec_of(self.info_fields).expand(n)
        self.metadata = self.engine.metadata
        self.render_mode = self.engine.render_mode

    def _make_views(self) -> None:
        """Torch and numpy views of the engine's buffers, split once: each step copies them."""
        buffers = self.buffers
        shared = buffer_tensordict(buffers)
        self._root_view = shared.exclude("next", "action")
        self._next_view = shared.get("next").exclude("reward")
        self._reward_view = shared.get(("next", "reward"))
        layout = self.engine.layout
        self._action_views = [shared.get(key) for key in layout.action_keys]
        # The same views in numpy: a numpy copy wrapped by from_numpy costs less than a clone.
        self._root_arrays = _numpy_tree(self._root_view)
        self._next_arrays = _numpy_tree(self._next_view)
        self._reward_array = self._reward_view.numpy()
        self._action_keys = [("action", *key[1:]) for key in layout.action_keys]
        # (tensordict key, buffer key) of each object action leaf
        self._object_action_keys = [
            (("action", *key[1:]), key) for key in layout.object_action_keys
        ]
        self._action_arrays = [view.numpy() for view in self._action_views]
        self._wide_actions = buffers.has_float64_twins  # to mark unused
        self._action_slots_of: Composite | None = None  # see _action_slots
        self._action_slot_list: list[ActionSlot] = []
        # The output key of "next"'s observations when they can come from an observation
        # lane (one top-level observation array); None otherwise.
        keys = layout.obs_keys
        single = self.engine.has_observation_lanes and len(keys[0]) == 1
        self._lane_key = keys[0][0] if single else None
        # The usual case, flat trees without object leaves in one uniform batch: the step's
        # outputs are built in one pass (see _prepare_outputs and _flat_next).
        flat = not self.heterogeneous and not layout.object_obs_keys
        flat = flat and all(type(value) is not dict for value in self._next_arrays.values())
        flat = flat and all(type(value) is not dict for value in self._root_arrays.values())
        self._flat = flat
        self._flat_plan_made: FlatPlan | None = None  # see _flat_plan
        self._prepared: FlatOutputs | None = None  # see _prepare_outputs

    @property
    def buffers(self) -> Buffers:
        """The engine's buffers (numpy views; the next command overwrites them)."""
        return self.engine.buffers

    # ---- EnvBase ------------------------------------------------------------------------------
    def _set_seed(self, seed: int | Sequence[int | None] | None) -> None:
        self._pending_seeds = expand_seeds(seed, self.num_envs)

    def _reset(self, td: TensorDictBase | None) -> TensorDictBase:
        mask = None
        if td is not None and "_reset" in td.keys():
            mask = td.get("_reset").reshape(self.num_envs).cpu().numpy()
        seeds, self._pending_seeds = self._pending_seeds, None
        received = self.engine.reset(mask, seeds=seeds, into="root")
        self.last_extras = received.extras
        return self._reset_root(self._root_output(), mask)

    def _check_action(self, td: TensorDictBase) -> None:
        """Check ``td``'s actions and write them into the shared action buffer, in one pass.

        Nothing runs until the command is sent, so a bad action leaves every sub-env as it was.
        """
        if self._wide_actions:
            self.engine.buffers.mark_actions_narrow()
        if self.heterogeneous:
            self._stage_task_actions(td)
            return
        slots = self._action_slot_list  # (laid out again once the action spec is replaced)
        if self._action_slots_of is not self.full_action_spec:
            slots = self._action_slots()
        for key, spec, view, array, values_in, words in slots:
            action = get_str(td, key) if type(key) is str else td.get(key, None)
            if not (
                isinstance(action, torch.Tensor)
                and action.shape == spec.shape
                and action.dtype == spec.dtype
            ):
                super()._check_action(td)  # raises the error that names the key
            if action.requires_grad:  # the buffer must not join the graph
                action = action.detach()
            view[...] = action  # (torch's item assignment costs less than copy_ or numpy's)
            # Checked where they landed: the array is at hand there, the tensor costs a wrap.
            if words is not None:  # all_below's two big-int operations inline: every step
                x = int.from_bytes(array.tobytes(), sys.byteorder)
                if x & words[0] or (x + words[1]) & words[0]:
                    spec.validate(view, key)  # raises, with the smallest and largest value
            elif values_in is not None and not values_in(array):
                spec.validate(view, key)
        for key, buffer_key in self._object_action_keys:
            action = td.get(key, None)
            self.full_action_spec[key].validate(action, key)
            self.engine.write_action(buffer_key, object_values(action))

    def _action_slots(self) -> list[ActionSlot]:
        """Each action leaf's ``ActionSlot``, laid out again once the action spec is replaced."""
        if self._action_slots_of is not self.full_action_spec:
            views = zip(self._action_keys, self._action_views, self._action_arrays)
            spec = self.full_action_spec
            self._action_slot_list = [action_slot(k, spec[k], v, a) for k, v, a in views]
            self._action_slots_of = self.full_action_spec
        return self._action_slot_list

    def _stage_task_actions(self, td: TensorDictBase) -> None:
        """Multi-task ``_check_action``: each sub-env's row against its own action spec."""
        tasks = zip(self._task_action_specs, self._sub_env_keys)
        for i, (action_spec, keys) in enumerate(tasks):
            row = td[i]
            if "action" not in row.keys():
                raise KeyError(f"step() needs an 'action' entry for sub-env {i}")
            action_spec["action"].validate(row.get("action"), f"action[{i}]")
            for key, view in zip(self._action_keys, self._action_views):
                if key in keys["action"]:
                    view[i].copy_(row.get(key))
            for key, buffer_key in self._object_action_keys:
                if key in keys["action"]:
                    values = object_values(row.get(key))
                    self.engine.write_action_rows(buffer_key, np.array([i]), values)

    def _handout(self) -> bool:
        """Whether "next"'s observations may come from an observation lane (CPU outputs of a
        uniform batch: the others are copies anyway)."""
        return self._lane_key is not None and self.device.type == "cpu"

    def _step(self, td: TensorDictBase) -> TensorDictBase:
        # EnvBase.step called _check_action, which wrote the actions.
        received = self.engine.step(AutoresetMode.DISABLED, handout=self._handout())
        self.last_extras = received.extras
        return self._step_next(self._next_output(received.observations), received)

    def step_and_maybe_reset(self, td: TensorDictBase) -> tuple[TensorDictBase, TensorDictBase]:
        """Step, and reset the finished sub-envs in the same round trip (with ``on_fault``
        restarting, ``FaultedRows`` also gives faulted rows their last observation)."""
        if self._closed:
            self._check_open()  # raises
        self._check_action(td)  # and writes the actions
        # SAME_STEP leaves the root buffer current: the next root is a copy of it.
        engine = self.engine
        handout = self._handout()
        engine.step_send(AutoresetMode.SAME_STEP, handout=handout)
        on_cpu = self.device.type == "cpu"
        flat = on_cpu and self._flat
        self._prepared = None
        # While worker processes run their rows, this process makes the outputs to copy them
        # into (after its own rows: off the critical path whenever the workers are the
        # slower); a command into an observation lane needs none (the engine then does not
        # call it), and without worker processes _fill_outputs makes them.
        received = engine.recv(None, self._prepare_outputs if flat else None)
        self.last_extras, self.last_faults = received.extras, received.faults
        lane = received.observations
        done = engine.buffers.next.done
        if flat and lane is None:
            return td, self._fill_outputs(td)
        next_out = self._next_output(lane)
        set_next(td, next_out)
        if any_set(done):
            return td, self._root_output(lane)
        # Nobody was reset: the next root holds the same values as "next", so it may share
        # its tensors (as step_mdp would), which saves copying every observation twice.
        if self.heterogeneous:  # a lazy stack
            return td, next_out.exclude("reward")
        entries = {key: value for key, value in next_out.items() if key != "reward"}
        return td, tensordict_unchecked(entries, self.batch_size, next_out.device)

    def _flat_plan(self) -> FlatPlan:
        """The :class:`FlatPlan` of flat trees, laid out again when the reward spec changed."""
        plan = self._flat_plan_made
        if plan is not None and plan.reward_spec is self.reward_spec:
            return plan
        reward_dtype = self.reward_spec.numpy_dtype
        sources = [*self._next_arrays.values(), self._reward_array]
        made = [(array.shape, array.dtype) for array in sources[:-1]]
        made.append((self._reward_array.shape, reward_dtype))
        root_sources = list(self._root_arrays.values())
        root_made = [(array.shape, array.dtype) for array in root_sources]
        plan = FlatPlan(
            (*self._next_arrays, "reward"),
            made,
            sources,
            tuple(self._root_arrays),
            root_made,
            root_sources,
            self.reward_spec,
            tensordict_maker(self.batch_size, _CPU),
        )
        self._flat_plan_made = plan
        return plan

    def _prepare_outputs(self, _done_rows: int = 0) -> FlatOutputs:
        """Make the :class:`FlatOutputs` of the step in flight (``_done_rows``: as the
        engine's ``meanwhile`` calls it)."""
        plan = self._flat_plan_made
        if plan is None or plan.reward_spec is not self.reward_spec:
            plan = self._flat_plan()
        empty, from_numpy = np.empty, torch.from_numpy
        # (starmap, map, dict(zip(...)) and the bound maker run in C: this runs every step)
        next_arrays = list(starmap(empty, plan.next_made))
        root_arrays = list(starmap(empty, plan.root_made))
        next_entries = dict(zip(plan.next_keys, map(from_numpy, next_arrays)))
        root_entries = dict(zip(plan.root_keys, map(from_numpy, root_arrays)))
        self._prepared = outputs = FlatOutputs(
            plan.make(next_entries),
            plan.make(root_entries),
            next_arrays,
            root_arrays,
            plan,
        )
        return outputs

    def _fill_outputs(self, td: TensorDictBase) -> TensorDict:
        """Copy the step's results into its :class:`FlatOutputs`; sets ``td["next"]`` and
        returns the next root."""
        outputs, self._prepared = self._prepared, None
        if outputs is None:  # nothing ran in parallel (no worker processes)
            outputs = self._prepare_outputs()
        plan = outputs.plan
        # (item assignment: numpy's copyto costs three times as much on small arrays; it
        # casts the reward as astype would)
        for fresh, source in zip(outputs.next_arrays, plan.next_sources):
            fresh[...] = source
        for fresh, source in zip(outputs.root_arrays, plan.root_sources):
            fresh[...] = source
        set_next(td, outputs.next)
        return outputs.root

    def _root_output(self, lane: np.ndarray | None = None) -> TensorDictBase:
        """A copy of the root (observations, infos, flags) on ``self.device``. ``lane``: the
        observation lane a SAME_STEP step wrote, which holds the root's observations of the
        sub-envs it did not reset (see ``BatchEngine.step_send``)."""
        # Outputs never alias the buffers, which the next command overwrites.
        if self.device.type != "cpu":
            out = self._root_view.to(self.device)
        elif lane is not None and self._lane_key is not None:
            observations = lane.copy()
            reset = np.flatnonzero(self.buffers.next.done)
            observations[reset] = self._root_arrays[self._lane_key][reset]
            made = {self._lane_key: torch.from_numpy(observations)}
            out = _fresh_tree(self._root_arrays, self.batch_size, made)
        else:
            out = _fresh_tree(self._root_arrays, self.batch_size)
        return self._per_task(self._with_objects(out, self.buffers.root.objects))

    def _with_objects(self, out: TensorDictBase, objects: dict[tuple, list]) -> TensorDictBase:
        """``out`` with the object observations (NonTensorStacks)."""
        for key, values in objects.items():
            out.set(key, non_tensor(values, self.batch_size))
        return out

    def _next_output(self, lane: np.ndarray | None = None) -> TensorDictBase:
        """A copy of ``"next"``, the reward cast to the reward spec's dtype; its observations
        the array ``lane`` itself when given."""
        if self._flat and lane is None and self.device.type == "cpu":
            return self._flat_next()
        if self.device.type != "cpu":
            out = self._next_view.to(self.device)
            reward = self._reward_view.to(self.device, self.reward_spec.dtype, copy=True)
            out.set("reward", reward)
        else:
            reward = self._reward_array.astype(self.reward_spec.numpy_dtype)
            made = {"reward": torch.from_numpy(reward)}
            lane_key = self._lane_key
            if lane is not None and lane_key is not None:
                made[lane_key] = torch.from_numpy(lane)
            out = _fresh_tree(self._next_arrays, self.batch_size, made=made)
        return self._per_task(self._with_objects(out, self.buffers.next.objects))

    def _flat_next(self) -> TensorDict:
        """``_next_output`` of flat trees on the CPU, without lanes."""
        from_numpy = torch.from_numpy
        entries = {key: from_numpy(array.copy()) for key, array in self._next_arrays.items()}
        reward = self._reward_array.astype(self.reward_spec.numpy_dtype)
        entries["reward"] = from_numpy(reward)
        return tensordict_unchecked(entries, self.batch_size, _CPU, flat=True)

    def _per_task(self, out: TensorDictBase) -> TensorDictBase:
        """In a heterogeneous batch, a lazy stack where each sub-env keeps only its keys."""
        if not self.heterogeneous:
            return out
        rows = []
        obs_keys = self.engine.layout.obs_keys + self.engine.layout.object_obs_keys
        for i, keys in enumerate(self._sub_env_keys):
            unused = [key for key in obs_keys if key not in keys["obs"]]
            rows.append(out[i].exclude(*unused) if unused else out[i])
        return LazyStackedTensorDict(*rows, stack_dim=0)

    def to(self, device: DeviceLike) -> BatchedEnvBase:
        """Move where outputs live (sub-envs and buffers stay on the CPU)."""
        if device is None:
            raise TypeError("to(device): expected a device, got None")
        self.device = torch.device(device)
        return self

    # ---- dispatch -----------------------------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        # Reached only for names the batched env does not have itself: they belong to the
        # sub-envs. Attributes come back as a list; methods as a callable returning a list.
        if name.startswith("_") or "engine" not in self.__dict__:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        self._check_open()
        try:
            is_callable = self.engine.request("is_callable", name=name)
        except AttributeError as exc:  # say whose attribute was looked for, not only a wrapper's
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise AttributeError(
                f"{type(self).__name__!r} object has no attribute {name!r}, and its sub-envs "
                f"have none either ({reason})"
            ) from exc
        if all(is_callable):
            return SubEnvMethod(self, name)
        return self.engine.request("get_attr", name=name)

    def state_dict(self) -> dict:
        """The state of every sub-env (their random generators), by index."""
        self._check_open()
        return {"sub_envs": self.engine.request("state_dict")}

    def load_state_dict(self, state_dict: dict) -> None:
        self._check_open()
        states = state_dict.get("sub_envs")
        if not isinstance(states, list) or len(states) != self.num_envs:
            raise ValueError(
                f'state_dict["sub_envs"]: expected a list of {self.num_envs} sub-env states, '
                f"got {type(states).__name__}"
            )
        self.engine.request("load_state_dict", values=states)

    def update_kwargs(self, kwargs: dict | Sequence[dict]) -> None:
        """Update ``create_env_kwargs``; sub-envs are rebuilt with them at the next use."""
        self.engine.factories.update_kwargs(kwargs)
        self.engine.restart()

    def _close(self) -> None:
        self.engine.close()

    @never_raises
    def __repr__(self) -> str:
        fields = f"num_workers={self.num_workers}, envs_per_worker={self.envs_per_worker}"
        return f"{type(self).__name__}({fields}, device={self.device})"


class SubEnvMethod:
    """A method of the sub-envs: calling it calls it on every sub-env and returns a list."""

    def __init__(self, env: BatchedEnvBase, name: str):
        self.env, self.name = env, name

    def __call__(self, *args: Any, **kwargs: Any) -> list:
        self.env._check_open()
        return self.env.engine.request("call", name=self.name, args=args, kwargs=kwargs)

    def __repr__(self) -> str:
        return f"<method {self.name!r} of the sub-envs of {self.env!r}>"


def _numpy_tree(td: TensorDictBase) -> dict:
    """The numpy arrays behind a TensorDict of CPU tensors, nested like it."""
    return {
        key: _numpy_tree(value) if isinstance(value, TensorDictBase) else value.numpy()
        for key, value in td.items()
    }


def _fresh_tree(
    arrays: dict, batch_size: torch.Size, made: dict[str, torch.Tensor] | None = None
) -> TensorDict:
    """A CPU TensorDict of fresh copies of ``arrays`` (a tree of numpy arrays, see
    ``_numpy_tree``); ``made`` tensors are taken as they are.

    A numpy copy wrapped by ``torch.from_numpy`` costs less than the generic ``clone()``.
    """
    entries = {}
    for key, value in arrays.items():
        if made is not None and key in made:
            entries[key] = made[key]
        elif type(value) is dict:
            entries[key] = _fresh_tree(value, batch_size)
        else:
            entries[key] = torch.from_numpy(value.copy())
    if made is not None:
        for key, value in made.items():
            entries.setdefault(key, value)
    return tensordict_unchecked(entries, batch_size, _CPU)
