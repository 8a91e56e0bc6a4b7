"""The batching logic shared by ``SerialEnv`` and ``ParallelEnv``.

A batched env owns the buffers (one preallocated block, see ``buffers.py``), the control block
(one mode byte and one seed per sub-env) and an *executor* that makes the sub-envs carry out
the mode bytes: in this process for ``SerialEnv``, in worker processes for ``ParallelEnv``.
Everything else (specs, reset masks, seeding, outputs, attribute dispatch) lives here, once.

Two levels of API:

* the tensordict API of :class:`EnvBase` (``reset``, ``step``, ``step_and_maybe_reset``...),
  whose outputs are fresh tensors that never alias the buffers;
* a low-level, numpy-level API for faces built on top (``send(modes)``, ``recv()``, and the
  numpy views in ``buffers``), which costs one round trip and no TensorDict per step.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from tensordict import LazyStackedTensorDict, TensorDict, TensorDictBase

from gymvec.arrays import any_set
from gymvec.batched.buffers import BufferLayout, Buffers, LeafSpec
from gymvec.batched.driver import Control, Mode, describe_sub_env
from gymvec.envs.base import DONE_KEYS, EnvBase, make_done_spec, make_reward_spec, set_next
from gymvec.envs.gym_env import GymEnv, observation_spec_from_space
from gymvec.envs.infos import InfoField
from gymvec.errors import SpaceMismatchError, WorkerError
from gymvec.spaces import spec_from_space
from gymvec.specs import (
    Composite,
    DeviceLike,
    Unbounded,
    non_tensor,
    non_tensor_values,
    numpy_to_torch_dtype,
    stack_specs,
    torch_to_numpy_dtype,
)

_INT64 = np.iinfo(np.int64)
_CPU = torch.device("cpu")
_STEP = np.uint8(Mode.STEP)
_STEP_AND_RESET = np.uint8(Mode.STEP | Mode.AUTORESET)
# The modes a command into an observation lane may hold: each writes its sub-env's "next"
# observation (so the lane holds the whole batch after it) and nothing else reads "next".
_LANE_MODES = frozenset(
    (int(Mode.STEP), int(Mode.STEP | Mode.AUTORESET), int(Mode.RESET | Mode.RESET_INTO_NEXT))
)
OBS_LANES = 3  # observation lanes of a batch of large observations (see BufferLayout)


@dataclass
class SubEnvDescription:
    """What the parent learns from building one sub-env of a factory."""

    observation_spec: Composite  # unbatched
    full_action_spec: Composite  # unbatched, {"action": ...}
    reward_dtype: torch.dtype
    info_fields: dict[str, InfoField]
    observation_space: spaces.Space | None  # gymnasium spaces when the sub-env is a GymEnv
    action_space: spaces.Space | None
    metadata: dict
    render_mode: str | None
    env_spec: Any

    @classmethod
    def of(cls, env: EnvBase) -> SubEnvDescription:
        """Describe a sub-env built in this process."""
        if env.batch_size != torch.Size([]):
            raise ValueError(
                f"create_env_fn: sub-envs must have batch_size (), got {tuple(env.batch_size)}"
            )
        gym_env = env.env if isinstance(env, GymEnv) else None
        info_fields = env.info_fields if isinstance(env, GymEnv) else _fields_of(env.info_spec)
        summary = describe_sub_env(env)
        summary.setdefault("reward_dtype", env.reward_spec.dtype)
        if gym_env is None:
            summary.update(
                observation_spec=env.observation_spec, full_action_spec=env.full_action_spec
            )
        return cls.from_summary(summary, info_fields)

    @classmethod
    def from_summary(cls, summary: dict, info_fields: dict[str, InfoField]) -> SubEnvDescription:
        """From ``driver.describe_sub_env``'s summary (made in this process or a worker)."""
        obs_space = summary.get("observation_space")
        action_space = summary.get("action_space")
        if obs_space is not None:
            observation_spec = observation_spec_from_space(obs_space)
            action_spec = spec_from_space(action_space, "action_space", objects=True)
            full_action_spec = Composite({"action": action_spec})
        else:
            observation_spec = summary["observation_spec"].clone()
            full_action_spec = summary["full_action_spec"].clone()
        return cls(
            observation_spec=observation_spec,
            full_action_spec=full_action_spec,
            reward_dtype=summary.get("reward_dtype", torch.float32),
            info_fields=info_fields,
            observation_space=obs_space,
            action_space=action_space,
            metadata=summary.get("metadata", {}),
            render_mode=summary.get("render_mode"),
            env_spec=summary.get("env_spec"),
        )


def as_env(env: Any) -> EnvBase:
    """A sub-env as an EnvBase: gymnasium envs are wrapped in GymEnv."""
    if isinstance(env, EnvBase):
        return env
    if isinstance(env, gym.Env):
        return GymEnv(env)
    raise TypeError(
        f"create_env_fn must return a gymvec EnvBase or a gymnasium.Env, got {type(env)!r}"
    )


def spec_leaves(spec: Composite) -> list[LeafSpec]:
    """(key, shape, numpy dtype) of each leaf of an unbatched Composite spec."""
    leaves = []
    for key in spec.keys(include_nested=True, leaves_only=True):
        key = key if isinstance(key, tuple) else (key,)
        leaf = spec[key]
        leaves.append((key, tuple(leaf.shape), leaf.numpy_dtype))
    return leaves


def _fields_of(info_spec: Composite) -> dict[str, InfoField]:
    return {
        name: InfoField(name, np.ndarray, tuple(spec.shape), torch_to_numpy_dtype(spec.dtype))
        for name, spec in info_spec.items()
    }


class BatchedEnvBase(EnvBase):
    """Common base of :class:`SerialEnv` and :class:`ParallelEnv`.

    Args:
        num_workers: how many groups of sub-envs (processes for ParallelEnv).
        create_env_fn: a callable returning an EnvBase (or a gymnasium.Env, wrapped in
            GymEnv), or a list of them, one per worker (multi-task).
        create_env_kwargs: kwargs for create_env_fn (a dict, or a list of dicts per worker).
        envs_per_worker: sub-envs per worker, or a list of ``num_workers`` counts (workers may
            hold different numbers); the batch size is their total.
        device: where outputs live (sub-envs run on CPU).
    """

    def __init__(
        self,
        num_workers: int,
        create_env_fn: Callable[..., Any] | Sequence[Callable[..., Any]],
        create_env_kwargs: dict | Sequence[dict] | None = None,
        *,
        envs_per_worker: int | Sequence[int] = 1,
        device: DeviceLike = None,
    ) -> None:
        _check_count("num_workers", num_workers)
        self.num_workers = num_workers
        self.envs_per_worker = envs_per_worker
        sizes = worker_sizes(num_workers, envs_per_worker)
        self.num_envs = sum(sizes)
        # the rows of each worker's sub-envs
        ends = np.cumsum(sizes).tolist()
        self.worker_bounds = [(end - size, end) for size, end in zip(sizes, ends)]
        super().__init__(batch_size=(self.num_envs,), device=device)
        self._create_env_fns = _per_sub_env(create_env_fn, self.worker_bounds)
        self._create_env_kwargs = _per_sub_env(
            create_env_kwargs or {}, self.worker_bounds, is_item=_is_kwargs
        )
        self._executor = None
        self._pending_seeds: list[int | None] | None = None
        self._in_flight = False
        # An interrupt (Ctrl-C) during a wait leaves the command running: see recv()
        self._interrupted = False
        self._reset_required = False
        self.heterogeneous = False  # multi-task with different keys: see _set_specs
        self._multi_task = self._one_factory_per_worker()
        if self._multi_task:
            # The tasks may differ in their keys, which the buffers must hold all of: describe
            # each task here, before the buffers are laid out.
            descriptions = self._describe_each_factory()
            first = descriptions[0]
            self._allocate(first, descriptions)
        else:
            first = self._describe_first()
            self._allocate(first, [first])
        try:
            if self._single_factory():
                descriptions = [first] * self.num_envs
            elif not self._multi_task:
                # one factory per sub-env (the drop-ins): ask the sub-envs themselves
                descriptions = [
                    SubEnvDescription.from_summary(summary, first.info_fields)
                    for summary in self.executor.describe()
                ]
            self._set_specs(descriptions)
        except BaseException:
            self.close()
            raise

    # ---- construction -------------------------------------------------------------------------
    def _single_factory(self) -> bool:
        fns, kwargs = self._create_env_fns, self._create_env_kwargs
        return all(f is fns[0] for f in fns) and all(k == kwargs[0] for k in kwargs)

    def _one_factory_per_worker(self) -> bool:
        """A multi-task batch: several factories, each shared by a whole worker."""
        fns = self._create_env_fns
        return not self._single_factory() and all(
            fns[i] is fns[start] for start, stop in self.worker_bounds for i in range(start, stop)
        )

    def _describe_each_factory(self) -> list[SubEnvDescription]:
        """Describe each distinct (factory, kwargs) once, in this process."""
        described: dict[tuple, SubEnvDescription] = {}
        descriptions = []
        for i in range(self.num_envs):
            kwargs = self._create_env_kwargs[i]
            key = (id(self._create_env_fns[i]), repr(sorted(kwargs.items())))
            if key not in described:
                env = as_env(self._sub_env_fn(i)())
                try:
                    described[key] = SubEnvDescription.of(env)
                finally:
                    env.close()
            descriptions.append(described[key])
        return descriptions

    def _describe_first(self) -> SubEnvDescription:
        """Build sub-env 0 in this process, describe it, close it (workers build their own)."""
        env = as_env(self._sub_env_fn(0)())
        try:
            return SubEnvDescription.of(env)
        finally:
            env.close()

    def _set_specs(self, descriptions: list[SubEnvDescription]) -> None:
        first = descriptions[0]
        for i, description in enumerate(descriptions):
            for name, a, b in (
                ("observation_spec", first.observation_spec, description.observation_spec),
                ("action_spec", first.full_action_spec, description.full_action_spec),
            ):
                if spec_leaves(a) == spec_leaves(b):
                    continue
                if not self._multi_task:
                    raise SpaceMismatchError(
                        f"sub-env {i}: {name} leaves {spec_leaves(b)} differ from sub-env 0's "
                        f"{spec_leaves(a)}; a batch needs the same keys, shapes and dtypes",
                        kind=name.split("_")[0],
                    )
                self.heterogeneous = True
        self.sub_env_descriptions = descriptions
        n = self.num_envs
        if self.heterogeneous:
            # Specs list every key of every task; each sub-env's own are in its description,
            # and outputs are lazy stacks in which each sub-env shows only its own keys.
            self.observation_spec = _union_spec([d.observation_spec for d in descriptions], n)
            self.full_action_spec = _union_spec([d.full_action_spec for d in descriptions], n)
            self._sub_env_keys = [_keys_of(d) for d in descriptions]
        else:
            obs_specs = [d.observation_spec for d in descriptions]
            self.observation_spec = _batch_spec(obs_specs, n, "observation")
            self.full_action_spec = _batch_spec(
                [d.full_action_spec for d in descriptions], n, "action"
            )
        self.reward_spec = make_reward_spec(self.batch_size, first.reward_dtype)
        self.done_spec = make_done_spec(self.batch_size)
        self.info_spec = Composite(_info_specs(self.info_fields)).expand(n)
        self.metadata = first.metadata
        self.render_mode = first.render_mode

    def _allocate(self, first: SubEnvDescription, all_: list[SubEnvDescription]) -> None:
        """Lay the buffers out for the keys of every description (of every task)."""
        self.info_fields = {
            name: field
            for name, field in first.info_fields.items()
            if all(d.info_fields.get(name) == field for d in all_)
        }
        self.layout = BufferLayout(
            self.num_envs,
            _union_leaves([spec_leaves(d.observation_spec) for d in all_], "observation_spec"),
            _union_leaves([spec_leaves(d.full_action_spec) for d in all_], "action_spec"),
            self.info_fields,
            obs_lanes=OBS_LANES,
            wide_actions=True,
        )
        self._memory = self._new_memory(self.layout.nbytes)
        self._control_memory = self._new_memory(Control.nbytes(self.num_envs))
        self.buffers = Buffers(self.layout, self._memory)
        self.control = Control(self.num_envs, self._control_memory)
        self._uniform_mode: int | None = None  # the mode every byte holds, when known
        self._lane = 0  # the observation lane that holds "next"'s observations now
        self._shared_td = self.buffers.tensordict()
        # Views the outputs are copied from, split once here: each step only clones them.
        self._root_view = self._shared_td.exclude("next", "action")
        self._next_view = self._shared_td.get("next").exclude("reward")
        self._reward_view = self._shared_td.get(("next", "reward"))
        self._action_views = [self._shared_td.get(key) for key in self.layout.action_keys]
        # The same views in numpy: a numpy copy wrapped by from_numpy costs less than a clone.
        self._root_arrays = _numpy_tree(self._root_view)
        self._next_arrays = _numpy_tree(self._next_view)
        self._reward_array = self._reward_view.numpy()
        self._action_keys = [("action", *key[1:]) for key in self.layout.action_keys]
        # (tensordict key, this process's list) of each object action leaf
        self._action_object_stores = [
            (("action", *key[1:]), self.buffers.action_objects[key])
            for key in self.layout.object_action_keys
        ]
        self._action_arrays = [view.numpy() for view in self._action_views]
        self._action_slots_of: Composite | None = None  # see _action_slots
        self._action_slot_list: list[tuple] = []
        # rows whose root is older than "next" (they stepped since their last reset)
        self._root_stale = np.zeros(self.num_envs, dtype=bool)
        # The output key of "next"'s observations when they can come from an observation
        # lane (one top-level observation array); None otherwise.
        keys = self.layout.obs_keys
        self._lane_key = keys[0][0] if self.buffers.obs_lanes and len(keys[0]) == 1 else None

    def _sub_env_fn(self, i: int) -> Callable[[], Any]:
        fn, kwargs = self._create_env_fns[i], self._create_env_kwargs[i]
        return functools.partial(fn, **kwargs) if kwargs else fn

    def _worker_env_fns(self, worker: int) -> list[Callable[[], Any]]:
        start, stop = self.worker_bounds[worker]
        return [self._sub_env_fn(i) for i in range(start, stop)]

    # ---- to implement by SerialEnv / ParallelEnv ----------------------------------------------
    def _new_memory(self, nbytes: int) -> Any:
        raise NotImplementedError

    def _make_executor(self):
        raise NotImplementedError

    @property
    def executor(self):
        """The running executor; sub-envs are built on first use."""
        self._check_open()
        if self._executor is None:
            self._executor = self._make_executor()
        return self._executor

    # ---- the low-level API (one round trip) ---------------------------------------------------
    def send(
        self,
        modes: np.ndarray | int,
        seeds: Sequence[int | None] | None = None,
        options: dict | None = None,
        lane: int = 0,
    ) -> None:
        """Start a command: sub-env ``i`` carries out ``modes[i]`` (a :class:`Mode` combination).

        ``seeds[i]`` (when given and not None) seeds sub-env ``i``'s reset; ``options`` goes to
        every reset of this command. Actions are read from ``buffers.action``.

        ``lane`` (``1 <= lane < len(buffers.obs_lanes)``): the sub-envs write "next"'s
        observations into ``buffers.obs_lanes[lane]`` instead of "next"'s own buffer; every
        mode must then be STEP, STEP | AUTORESET or RESET | RESET_INTO_NEXT. A later command
        without a lane has the sub-envs first write "next"'s own buffer again.
        """
        executor = self.executor
        if self._interrupted:
            self._abandon()
        if self._in_flight:
            raise RuntimeError("a command is already in flight: call recv() first")
        if self._reset_required:
            self._check_resets_all(modes)
        # Step after step the same mode goes to every sub-env: the bytes already hold it.
        uniform = int(modes) if isinstance(modes, int | np.integer) else None
        if uniform is None or uniform != self._uniform_mode:
            self.control.mode[:] = modes
        self._uniform_mode = uniform
        if seeds is not None:
            for i, seed in enumerate(seeds):
                if seed is not None:
                    if not _INT64.min <= seed <= _INT64.max:
                        raise ValueError(f"seed[{i}]: expected an int64, got {seed}")
                    self.control.seed[i] = seed
                    self.control.mode[i] |= int(Mode.SEED)
                    self._uniform_mode = None
        if lane or self._lane:  # last: a refused command must leave the lanes as they were
            self._set_lane(lane, modes)
        try:
            if self.layout.object_action_keys:
                executor.send(options, self.buffers.action_objects)
            else:
                executor.send(options)
        except BaseException as exc:
            if not isinstance(exc, Exception):  # interrupted while posting: some workers run
                self._in_flight = self._interrupted = True
            raise
        self._in_flight = True

    def _set_lane(self, lane: int, modes: np.ndarray | int) -> None:
        lanes = self.buffers.obs_lanes
        if lane:
            if isinstance(lane, bool) or not 0 < lane < len(lanes):
                expected = f"0 to {len(lanes) - 1}" if lanes else "0 (no observation lanes here)"
                raise ValueError(f"lane: expected {expected}, got {lane!r}")
            if isinstance(modes, int | np.integer):
                used = {int(modes)}
            else:
                used = set(np.asarray(modes, dtype=np.uint8).tobytes())
            if not used <= _LANE_MODES:
                raise ValueError(
                    f"modes: a command into an observation lane takes only STEP, "
                    f"STEP | AUTORESET and RESET | RESET_INTO_NEXT, got {modes!r}"
                )
        # Back to lane 0, the sub-envs first give it the observations they returned last (not
        # a copy of the lane: its array is the caller's, who may have written into it).
        self.control.lane[0] = lane
        self._lane = lane

    def recv(
        self, timeout: float | None = None, on_local_done: Callable[[int], None] | None = None
    ) -> dict[int, dict]:
        """Wait for the command sent last; returns the extras by sub-env index.

        Object observations (see ``BufferLayout``) are in ``buffers.root.objects`` and
        ``buffers.next.objects`` by then. Extras are the info entries without a buffer slot:
        ``{i: {"root": info, "next": info}}``
        for the sub-envs that had any (``"root"``: the reset info of a reset into the root,
        ``"next"``: a step info, or a reset info written into ``"next"``), and with
        ``Mode.KEEP_FINAL_OBS`` the last observation of a sub-env autoreset, as it returned
        it, under ``"final_obs"``.

        ``on_local_done(k)``, when given, runs as soon as the sub-envs stepped in this process
        (rows ``[0, k)``, ``ParallelEnv(local_worker=True)``; ``k == 0`` without a local
        worker) are done and worker processes still run: their rows of the buffers are final,
        so a caller can start reading them. ``SerialEnv`` never calls it.
        """
        if not self._in_flight:
            raise RuntimeError("no command in flight: call send() first")
        if self._interrupted:  # its results are gone with the interrupted wait
            self._abandon(timeout)
            raise RuntimeError(
                "the command in flight was interrupted: its results are lost, and every "
                "sub-env must be reset before the next step"
            )
        try:
            extras = self.executor.wait(timeout, on_local_done)
        except TimeoutError:
            raise  # still in flight: a later recv() resumes the wait
        except Exception:
            # A sub-env raised (or a worker died): every worker has answered or is gone, so
            # the command is over, and the env takes the next one.
            self._in_flight = False
            raise
        except BaseException:
            # An interrupt (KeyboardInterrupt): the worker processes run on, and a sub-env of
            # this process may have stopped mid-step. The next command first waits the
            # workers out; the sub-envs' states are then unknown, so it must reset them all.
            self._interrupted = True
            raise
        self._in_flight = False
        if self.layout.object_obs_keys:
            self._store_objects(extras)
        return extras

    def _store_objects(self, extras: dict[int, dict]) -> None:
        """Object observations that worker processes sent back, into this process's lists."""
        root, next_ = self.buffers.root.objects, self.buffers.next.objects
        keys = self.layout.object_obs_keys
        for i in [i for i, e in extras.items() if "objects" in e]:
            root_values, next_values = extras[i].pop("objects")
            for key, root_value, next_value in zip(keys, root_values, next_values):
                root[key][i], next_[key][i] = root_value, next_value
            if not extras[i]:
                del extras[i]

    def _abandon(self, timeout: float | None = None) -> None:
        """End an interrupted command: wait for the worker processes' answers and drop them
        (a dead worker still raises WorkerError); the next command must reset every sub-env.

        Interrupted again, or past ``timeout``, the command stays in flight.
        """
        self._reset_required = True
        try:
            self.executor.drain(timeout)
        except WorkerError:  # a worker died: the command is over all the same
            self._interrupted = self._in_flight = False
            raise
        self._interrupted = self._in_flight = False

    def _check_resets_all(self, modes: np.ndarray | int) -> None:
        resets = np.bitwise_and(np.asarray(modes, dtype=np.uint8), np.uint8(Mode.RESET))
        if not resets.all():
            raise RuntimeError(
                f"{type(self).__name__}: a call was interrupted while its sub-envs ran, so "
                "their states are unknown: reset every sub-env (reset() without a mask) "
                "before anything else"
            )
        self._reset_required = False

    def run(
        self,
        modes: np.ndarray | int,
        seeds: Sequence[int | None] | None = None,
        options: dict | None = None,
        lane: int = 0,
    ) -> dict[int, dict]:
        """``send`` then ``recv``."""
        self.send(modes, seeds, options, lane)
        return self.recv()

    def _take_seeds(self, mask: np.ndarray | None = None) -> list[int | None] | None:
        seeds, self._pending_seeds = self._pending_seeds, None
        if seeds is not None and mask is not None:
            seeds = [s if m else None for s, m in zip(seeds, mask)]
        return seeds

    # ---- EnvBase ------------------------------------------------------------------------------
    def _set_seed(self, seed: int | Sequence[int | None] | None) -> None:
        self._pending_seeds = expand_seeds(seed, self.num_envs)

    def _reset(self, td: TensorDictBase | None) -> TensorDictBase:
        mask = None
        if td is not None and "_reset" in td.keys():
            mask = td.get("_reset").reshape(self.num_envs).cpu().numpy()
        reset_mode = np.uint8(Mode.RESET)
        if mask is None:
            modes = reset_mode
        else:
            modes = np.where(mask, reset_mode, np.where(self._root_stale, Mode.SYNC_ROOT, 0))
        self.last_extras = self.run(modes.astype(np.uint8), self._take_seeds(mask))
        self._root_stale[:] = False
        return self._root_output()

    def _check_action(self, td: TensorDictBase) -> None:
        """Check ``td``'s actions and write them into the shared action buffer, in one pass.

        Nothing runs until the command is sent, so a bad action leaves every sub-env as it was.
        """
        self.buffers.mark_actions_narrow()
        if self.heterogeneous:
            self._stage_task_actions(td)
            return
        for key, spec, view, array, values_in in self._action_slots():
            action = td.get(key, None)
            if not (
                isinstance(action, torch.Tensor)
                and action.shape == spec.shape
                and action.dtype == spec.dtype
            ):
                super()._check_action(td)  # raises the error that names the key
            if action.is_cpu and not action.requires_grad:  # numpy's copy costs less than copy_
                array[...] = action.numpy()
            else:
                view.copy_(action)
            # Checked where they landed: the array is at hand there, the tensor costs a wrap.
            if values_in is not None and not values_in(array):
                spec.validate(view, key)  # raises, with the smallest and largest value
        for key, store in self._action_object_stores:
            action = td.get(key, None)
            self.full_action_spec[key].validate(action, key)
            store[:] = non_tensor_values(action)

    def _action_slots(self) -> list[tuple]:
        """(key, leaf spec, buffer view, its numpy array, the spec's array check) per action
        leaf; rebuilt when the action spec is replaced."""
        if self._action_slots_of is not self.full_action_spec:
            self._action_slot_list = []
            views = zip(self._action_keys, self._action_views, self._action_arrays)
            for key, view, array in views:
                spec = self.full_action_spec[key]
                self._action_slot_list.append((key, spec, view, array, spec.array_check()))
            self._action_slots_of = self.full_action_spec
        return self._action_slot_list

    def _stage_task_actions(self, td: TensorDictBase) -> None:
        """Multi-task ``_check_action``: each sub-env's row against its own action spec."""
        tasks = zip(self.sub_env_descriptions, self._sub_env_keys)
        for i, (description, keys) in enumerate(tasks):
            row = td[i]
            if "action" not in row.keys():
                raise KeyError(f"step() needs an 'action' entry for sub-env {i}")
            description.full_action_spec["action"].validate(row.get("action"), f"action[{i}]")
            for key, view in zip(self._action_keys, self._action_views):
                if key in keys["action"]:
                    view[i].copy_(row.get(key))
            for key, store in self._action_object_stores:
                if key in keys["action"]:
                    store[i] = non_tensor_values(row.get(key))[0]

    def _step(self, td: TensorDictBase) -> TensorDictBase:
        # EnvBase.step called _check_action, which wrote the actions.
        lane = self._run_into_lane(_STEP)
        self._root_stale[:] = True
        return self._next_output(lane)

    def step_and_maybe_reset(self, td: TensorDictBase) -> tuple[TensorDictBase, TensorDictBase]:
        """Step, and reset the finished sub-envs in the same round trip."""
        self._check_open()
        self._check_action(td)  # and writes the actions
        # No SYNC_ROOT: the root output is built here from "next" and the reset rows, which
        # spares the sub-envs a copy of every observation into the root buffer.
        lane = self._run_into_lane(_STEP_AND_RESET)
        done = self.buffers.next.done
        np.logical_not(done, out=self._root_stale)
        next_out = self._next_output(lane)
        set_next(td, next_out)
        if any_set(done):
            root = self._merged_root(lane, done)
            return td, self._per_task(root if self.device.type == "cpu" else root.to(self.device))
        # Nobody was reset: the next root holds the same values as "next", so it may share
        # its tensors (as step_mdp would), which saves copying every observation twice.
        if self.heterogeneous:  # a lazy stack
            return td, next_out.exclude("reward")
        entries = {key: value for key, value in next_out.items() if key != "reward"}
        root = TensorDict._new_unsafe(entries, batch_size=self.batch_size, device=next_out.device)
        return td, root

    def _run_into_lane(self, modes: np.uint8) -> int:
        """``run(modes)``; large observations go to a free observation lane, whose array
        "next" then holds as is (see ``Buffers.handed_out_lanes``). Returns the lane (0: none).

        CPU outputs of a uniform batch only: the others are copies anyway.
        """
        lane = 0
        if self._lane_key is not None and self.device.type == "cpu" and not self.heterogeneous:
            lane = self.buffers.free_lane()
        self.last_extras = self.run(modes, lane=lane)
        return lane

    def _root_output(self) -> TensorDictBase:
        """A copy of the root (observations, infos, flags) on ``self.device``."""
        # Outputs never alias the buffers, which the next command overwrites.
        if self.device.type != "cpu":
            out = self._root_view.to(self.device)
        else:
            out = _fresh_tree(self._root_arrays, self.batch_size)
        return self._per_task(self._with_objects(out, self.buffers.root.objects))

    def _with_objects(
        self, out: TensorDictBase, objects: dict[tuple, list], reset: np.ndarray | None = None
    ) -> TensorDictBase:
        """``out`` with the object observations (NonTensorStacks); the rows ``reset`` marks
        from the root's instead."""
        for key, values in objects.items():
            if reset is not None:
                root = self.buffers.root.objects[key]
                values = [root[i] if r else v for i, (v, r) in enumerate(zip(values, reset))]
            out.set(key, non_tensor(values, self.batch_size))
        return out

    def _next_output(self, lane: int = 0) -> TensorDictBase:
        """A copy of ``"next"``, the reward cast to the reward spec's dtype; its observations
        the array of ``lane`` itself when not 0."""
        if self.device.type != "cpu":
            out = self._next_view.to(self.device)
            reward = self._reward_view.to(self.device, self.reward_spec.dtype, copy=True)
            out.set("reward", reward)
        else:
            reward = self._reward_array.astype(torch_to_numpy_dtype(self.reward_spec.dtype))
            made = {"reward": torch.from_numpy(reward)}
            if lane:
                made[self._lane_key] = torch.from_numpy(self.buffers.handed_out_lanes()[lane - 1])
            out = _fresh_tree(self._next_arrays, self.batch_size, made=made)
        return self._per_task(self._with_objects(out, self.buffers.next.objects))

    def _merged_root(self, lane: int, reset: np.ndarray) -> TensorDict:
        """The root after an autoreset, on the CPU: "next" (its observations from ``lane``
        when not 0), but the rows ``reset`` marks from the root buffer. Its done flags are all
        False (a sub-env either was reset or did not finish), so they are made, not copied."""
        flags = np.zeros((len(DONE_KEYS), *self._next_arrays["done"].shape), dtype=bool)
        made = {key: torch.from_numpy(flags[k]) for k, key in enumerate(DONE_KEYS)}
        arrays = self._next_arrays
        if lane:
            arrays = {**arrays, self._lane_key: self.buffers.obs_lanes[lane]}
        out = _fresh_tree(arrays, self.batch_size, made, self._root_arrays, reset)
        return self._with_objects(out, self.buffers.next.objects, reset)

    def _per_task(self, out: TensorDictBase) -> TensorDictBase:
        """In a heterogeneous batch, a lazy stack where each sub-env keeps only its keys."""
        if not self.heterogeneous:
            return out
        rows = []
        obs_keys = self.layout.obs_keys + self.layout.object_obs_keys
        for i, keys in enumerate(self._sub_env_keys):
            unused = [key for key in obs_keys if key not in keys["obs"]]
            rows.append(out[i].exclude(*unused) if unused else out[i])
        return LazyStackedTensorDict(*rows, stack_dim=0)

    def to(self, device: DeviceLike) -> BatchedEnvBase:
        """Move where outputs live (sub-envs and buffers stay on the CPU)."""
        self.device = torch.device(device)
        return self

    # ---- dispatch -----------------------------------------------------------------------------
    def request(
        self, name: str, indices: Sequence[int] | None, *args: Any, values: Sequence | None = None
    ) -> list:
        """Run a slow-path request (see ``driver.REQUESTS``) on the sub-envs at ``indices``."""
        indices = list(range(self.num_envs)) if indices is None else [int(i) for i in indices]
        for i in indices:
            if not 0 <= i < self.num_envs:
                raise IndexError(f"sub-env index {i} out of range for {self.num_envs} sub-envs")
        if self._interrupted:
            self._abandon()
        if self._in_flight:
            raise RuntimeError("a command is in flight: call recv() first")
        return self.executor.request(name, indices, args, values)

    def __getattr__(self, name: str) -> Any:
        # Reached only for names the batched env does not have itself: they belong to the
        # sub-envs. Attributes come back as a list; methods as a callable returning a list.
        if name.startswith("_") or "_create_env_fns" not in self.__dict__:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        try:
            is_callable = self.request("is_callable", None, name)
        except AttributeError as exc:  # say whose attribute was looked for, not only a wrapper's
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise AttributeError(
                f"{type(self).__name__!r} object has no attribute {name!r}, and its sub-envs "
                f"have none either ({reason})"
            ) from exc
        if all(is_callable):
            return SubEnvMethod(self, name)
        return self.request("get_attr", None, name)

    def state_dict(self) -> dict:
        """The state of every sub-env (their random generators), by index."""
        return {"sub_envs": self.request("state_dict", None)}

    def load_state_dict(self, state_dict: dict) -> None:
        states = state_dict.get("sub_envs")
        if not isinstance(states, list) or len(states) != self.num_envs:
            raise ValueError(
                f'state_dict["sub_envs"]: expected a list of {self.num_envs} sub-env states, '
                f"got {type(states).__name__}"
            )
        self.request("load_state_dict", None, values=states)

    def update_kwargs(self, kwargs: dict | Sequence[dict]) -> None:
        """Update ``create_env_kwargs``; sub-envs are rebuilt with them at the next use."""
        updates = _per_sub_env(kwargs, self.worker_bounds, is_item=_is_kwargs)
        for current, update in zip(self._create_env_kwargs, updates):
            current.update(update)
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.close()

    def _close(self) -> None:
        executor, self._executor = self._executor, None
        try:
            if executor is not None:
                executor.close()  # a sub-env's close may raise: the memory goes all the same
        finally:
            self._release_memory()

    def _release_memory(self) -> None:
        pass

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_workers={self.num_workers}, "
            f"envs_per_worker={self.envs_per_worker}, device={self.device})"
        )


class SubEnvMethod:
    """A method of the sub-envs: calling it calls it on every sub-env and returns a list."""

    def __init__(self, env: BatchedEnvBase, name: str):
        self.env, self.name = env, name

    def __call__(self, *args: Any, **kwargs: Any) -> list:
        return self.env.request("call", None, self.name, args, kwargs)

    def __repr__(self) -> str:
        return f"<method {self.name!r} of the sub-envs of {self.env!r}>"


def _numpy_tree(td: TensorDictBase) -> dict:
    """The numpy arrays behind a TensorDict of CPU tensors, nested like it."""
    return {
        key: _numpy_tree(value) if isinstance(value, TensorDictBase) else value.numpy()
        for key, value in td.items()
    }


def _fresh_tree(
    arrays: dict,
    batch_size: torch.Size,
    made: dict[str, torch.Tensor] | None = None,
    source: dict | None = None,
    mask: np.ndarray | None = None,
) -> TensorDict:
    """A CPU TensorDict of fresh copies of ``arrays`` (a tree of numpy arrays, see
    ``_numpy_tree``), the rows ``mask`` marks (bools over the batch) taken from ``source``
    (nested like ``arrays``) instead; ``made`` tensors are taken as they are.

    A numpy copy wrapped by ``torch.from_numpy`` costs less than the generic ``clone()``.
    """
    entries = {}
    for key, value in arrays.items():
        if made is not None and key in made:
            entries[key] = made[key]
        elif type(value) is dict:
            below = None if source is None else source[key]
            entries[key] = _fresh_tree(value, batch_size, None, below, mask)
        else:
            fresh = value.copy()
            if mask is not None:  # a masked copy costs half of an indexed one
                where = mask.reshape(mask.shape + (1,) * (fresh.ndim - 1))
                np.copyto(fresh, source[key], where=where)
            entries[key] = torch.from_numpy(fresh)
    if made is not None:
        for key, value in made.items():
            entries.setdefault(key, value)
    return TensorDict._new_unsafe(entries, batch_size=batch_size, device=_CPU)


def expand_seeds(seed: int | Sequence[int | None] | None, n: int) -> list[int | None] | None:
    """gymnasium's convention: an int ``s`` seeds sub-env ``i`` with ``s + i``."""
    if seed is None:
        return None
    if isinstance(seed, int | np.integer):
        return [int(seed) + i for i in range(n)]
    seeds = list(seed)
    if len(seeds) != n:  # gymnasium's own words, which its users (and tests) match
        raise ValueError(
            f"If seeds are passed as a list the length must match num_envs={n} "
            f"but got length={len(seeds)}."
        )
    return [None if s is None else int(s) for s in seeds]


def group_indices(indices: Sequence[int], bounds: Sequence[tuple[int, int]]) -> list:
    """Split ``indices`` by group: ``[(group, [positions in indices])]``, groups in order."""
    by_group: dict[int, list[int]] = {}
    for position, index in enumerate(indices):
        for group, (start, stop) in enumerate(bounds):
            if start <= index < stop:
                by_group.setdefault(group, []).append(position)
                break
    return sorted(by_group.items())


def _check_count(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"{name}: expected a positive int, got {value!r}")


def _is_kwargs(value: Any) -> bool:
    return isinstance(value, dict)


def worker_sizes(num_workers: int, envs_per_worker: int | Sequence[int]) -> list[int]:
    """How many sub-envs each worker holds: ``envs_per_worker`` is one count for all or a list
    of ``num_workers`` counts."""
    if isinstance(envs_per_worker, list | tuple):
        if len(envs_per_worker) != num_workers:
            raise ValueError(
                f"envs_per_worker: expected one count per worker ({num_workers}), "
                f"got {len(envs_per_worker)}: {list(envs_per_worker)!r}"
            )
        for count in envs_per_worker:
            _check_count("envs_per_worker", count)
        return [int(count) for count in envs_per_worker]
    _check_count("envs_per_worker", envs_per_worker)
    return [int(envs_per_worker)] * num_workers


def _per_sub_env(
    value: Any, worker_bounds: list[tuple[int, int]], is_item: Callable[[Any], bool] = callable
) -> list:
    """One item per sub-env from one item, one per worker, or one per sub-env."""
    name = "create_env_kwargs" if is_item is _is_kwargs else "create_env_fn"
    num_workers, n = len(worker_bounds), worker_bounds[-1][1]
    copy = (lambda v: dict(v)) if is_item is _is_kwargs else (lambda v: v)
    if is_item(value):
        return [copy(value) for _ in range(n)]
    if isinstance(value, list | tuple) and all(is_item(v) for v in value):
        if len(value) == num_workers:
            return [
                copy(v)
                for v, (start, stop) in zip(value, worker_bounds)
                for _ in range(stop - start)
            ]
        if len(value) == n:
            return [copy(v) for v in value]
        raise ValueError(
            f"{name}: expected {num_workers} items (one per worker) or {n} (one per sub-env), "
            f"got {len(value)}"
        )
    raise TypeError(f"{name}: expected a callable or a list, got {type(value).__name__}")


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


def _union_spec(specs: list[Composite], n: int) -> Composite:
    union = Composite()
    for spec in specs:
        for key in spec.keys(include_nested=True, leaves_only=True):
            if key not in union:
                union[key] = spec[key].clone()
    return union.expand(n)


def _keys_of(description: SubEnvDescription) -> dict[str, set]:
    obs = {
        k if isinstance(k, tuple) else (k,) for k in description.observation_spec.keys(True, True)
    }
    action = {
        k if isinstance(k, tuple) else (k,) for k in description.full_action_spec.keys(True, True)
    }
    return {"obs": obs, "action": action}


def _batch_spec(specs: list[Composite], n: int, kind: str) -> Composite:
    first = specs[0]
    if all(spec == first for spec in specs):
        return first.expand(n)
    try:
        return stack_specs(specs)
    except ValueError as exc:  # e.g. Categorical specs of different n
        raise SpaceMismatchError(f"sub-envs cannot be batched: {exc}", kind=kind) from exc


def _info_specs(fields: dict[str, InfoField]) -> dict:
    return {
        name: Unbounded(shape=field.shape, dtype=numpy_to_torch_dtype(field.dtype))
        for name, field in fields.items()
    }
