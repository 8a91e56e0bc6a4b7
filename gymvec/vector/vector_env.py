"""``GymnasiumVectorEnv``: any batched gymvec env as a ``gymnasium.vector.VectorEnv``.

The face speaks gymnasium's vector API (numpy arrays, float64 rewards, bool flags, infos as
arrays with ``_key`` masks) and implements gymnasium's three autoreset modes on top of the
explicit-reset batched envs, each in one round trip to the workers per call:

=============  ==========================================================================
NEXT_STEP      the step after a sub-env finished resets it: its action is ignored, it
               returns its reset observation and reset info, reward 0 and flags False.
SAME_STEP      a finished sub-env is reset within the step: it returns its reset
               observation, ``infos["final_obs"]``/``infos["final_info"]`` (with masks)
               hold the terminal observation and info.
DISABLED       finished sub-envs stay finished until ``reset(options={"reset_mask": m})``.
=============  ==========================================================================

First-ready batches (EnvPool's conventions): with ``batch_size=M``, ``async_reset()`` resets
every sub-env, ``recv()`` returns the first ``M`` sub-envs to finish (``infos["env_id"]``
names them) and ``send(actions, env_id)`` steps those, each sub-env under NEXT_STEP autoreset.

Example:
    >>> import gymnasium as gym
    >>> from gymvec import GymnasiumVectorEnv, SerialEnv
    >>> env = GymnasiumVectorEnv(SerialEnv(2, lambda: gym.make("CartPole-v1")))
    >>> obs, infos = env.reset(seed=0)
    >>> obs.shape
    (2, 4)
    >>> obs, rewards, terminations, truncations, infos = env.step(env.action_space.sample())
    >>> rewards.dtype, terminations.dtype
    (dtype('float64'), dtype('bool'))
    >>> env.close()
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_differing_spaces, batch_space

from gymvec.common.arrays import any_set
from gymvec.common.faults import FaultRecords
from gymvec.common.reprs import never_raises
from gymvec.common.structure import Leaf, build_value, get_leaf, observation_leaves, space_leaves
from gymvec.common.vector_reset import check_reset_mask
from gymvec.engine.protocol import Engine, FirstReadyEngine
from gymvec.errors import ClosedEnvError
from gymvec.subenvs.probe import expand_seeds
from gymvec.vector.actions import ActionWriter
from gymvec.vector.infos import FaceInfos, add_faults
from gymvec.vector.plan import FacePlan
from gymvec.wire.calls import Received


class GymnasiumVectorEnv(FaultRecords, gym.vector.VectorEnv):
    """A batched gymvec env (``SerialEnv``, ``ParallelEnv``, or any batched ``EnvBase``) or a
    batch engine (anything that satisfies ``gymvec.engine.protocol.Engine``) as a gymnasium
    ``VectorEnv``.

    Args:
        env: the batched env or engine; the face owns it and closes it on ``close()``.
        autoreset_mode: "next_step" (gymnasium's default), "same_step" or "disabled".
        output: "numpy", or "torch" for observations, rewards and flags as torch tensors on
            the env's device (actions may then be tensors too; infos stay numpy).
        copy: observations the caller keeps never change (large ones are handed out from a
            free observation lane of the buffers, others copied); False: views of the buffers
            that the next call overwrites.
        batch_size: how many sub-envs ``recv()`` returns (``1 <= batch_size <= num_envs``,
            default all of them); with fewer than ``num_envs``, step with ``send``/``recv``
            (``step()`` refuses). First-ready batches take NEXT_STEP autoreset.
    """

    def __init__(
        self,
        env: Any,
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        output: str = "numpy",
        copy: bool = True,
        *,
        batch_size: int | None = None,
    ):
        self.env = env
        self.engine: Engine = engine_of(env)
        engine = self.engine
        if engine.heterogeneous:
            raise ValueError(
                "the gymnasium face needs sub-envs with the same keys; this multi-task batch "
                "has tasks with different keys (use its tensordict API)"
            )
        self.num_envs = engine.num_envs
        self._set_spaces()
        self.plan = plan = FacePlan.of(
            env, engine, self._obs_leaves, autoreset_mode, output, copy, batch_size
        )
        # (gymnasium's and the caller's names for the plan's options)
        self.autoreset_mode, self.output, self.copy = plan.autoreset_mode, output, copy
        self.batch_size = plan.batch_size
        self.metadata = dict(engine.metadata)
        self.metadata["autoreset_mode"] = self.autoreset_mode
        self.render_mode = engine.render_mode
        self.buffers = engine.buffers
        # The info fields: the engine learns more from the sub-envs' first results (this
        # dict grows in place), and infos are built from it at every call.
        engine.learn_info_fields()
        self._info_fields = engine.layout.info_fields
        self._face_infos = FaceInfos(
            engine.buffers,
            self._add_info,
            self.single_observation_space,
            self._obs_leaves,
            self._obs_leaf_discrete,
        )
        # Actions: checked and written by one object, looked up once (every step writes them)
        writer = ActionWriter(
            engine, self.single_action_space, self.action_space, self._action_leaves,
            self.autoreset_mode,
        )  # fmt: skip
        self._write_actions = writer.write
        self._write_action_rows = writer.write_rows
        # the state of calls: large observations copied early (see _copy_local_rows, which
        # the engine calls once this process has run its rows), and the engine once checked
        # for first-ready commands (see _first_ready)
        self._early_obs: tuple[np.ndarray, int] | None = None
        self._meanwhile = self._copy_local_rows if plan.early_copy else None
        self._first_ready_engine: FirstReadyEngine | None = None

    def _set_spaces(self) -> None:
        single_obs, single_act = self.engine.sub_env_spaces()
        self.single_observation_space = single_obs[0]
        self.single_action_space = single_act[0]
        if all(space == single_obs[0] for space in single_obs):
            self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        else:
            self.observation_space = batch_differing_spaces(single_obs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._obs_leaves: list[Leaf] = observation_leaves(self.single_observation_space)
        self._obs_leaf_discrete = [
            isinstance(get_leaf(self.single_observation_space, leaf.path), spaces.Discrete)
            for leaf in self._obs_leaves
        ]
        self._action_leaves: list[Leaf] = space_leaves(self.single_action_space, ("action",))

    # ---- reset --------------------------------------------------------------------------------
    def reset(
        self, *, seed: int | Sequence[int | None] | None = None, options: dict | None = None
    ) -> tuple[Any, dict]:
        """Reset all sub-envs, or those of ``options["reset_mask"]``; see gymnasium."""
        self.reset_send(seed=seed, options=options)
        return self.finish(self.receive())

    def reset_send(
        self, *, seed: int | Sequence[int | None] | None = None, options: dict | None = None
    ) -> None:
        self._early_obs = None  # left by a call that raised
        seeds = expand_seeds(seed, self.num_envs)
        if options is not None and not isinstance(options, Mapping):
            raise TypeError(f"options: expected a dict or None, got {options!r}")
        options = dict(options) if options is not None else None  # never mutate the caller's
        mask = None
        if options is not None and "reset_mask" in options:
            mask = check_reset_mask(options.pop("reset_mask"), self.num_envs)
        if seed is not None:
            super().reset(seed=seed if isinstance(seed, int) else None)
        # Only a reset of every sub-env into "next" fills a whole lane.
        handout = self.plan.handout and mask is None
        self.engine.reset_send(
            mask, seeds=seeds, options=options, into=self.plan.reset_into, handout=handout
        )

    def _reset_result(self, received: Received) -> tuple[Any, dict]:
        rows = np.ones(self.num_envs, dtype=bool) if received.mask is None else received.mask
        plan = self.plan
        extras = {i: getattr(e, plan.reset_into) for i, e in received.extras.items()}
        infos = self._face_infos.infos(plan.slot, rows, extras)
        if received.faults is not None:  # (retried on the rebuilt sub-envs)
            add_faults(infos, received.faults, self.num_envs, False)
        return self._observations(received), infos

    # ---- step ---------------------------------------------------------------------------------
    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict]:
        """Step every sub-env (or reset it, under NEXT_STEP, if it finished last step)."""
        self.step_send(actions)
        return self._step_result(self.receive())

    def step_send(self, actions: Any) -> None:
        self._early_obs = None  # left by a call that raised
        plan = self.plan
        if plan.batch_size < self.num_envs:
            raise RuntimeError(
                f"step() steps every sub-env, but batch_size={self.batch_size} < num_envs="
                f"{self.num_envs}: step first-ready batches with send(actions, env_id) and "
                "recv() (after async_reset())"
            )
        self._write_actions(actions)
        if plan.disabled and self.engine.any_finished:
            finished = np.flatnonzero(self.engine.finished).tolist()
            raise ValueError(
                f"sub-envs {finished} finished and autoreset_mode is DISABLED: reset them "
                "with reset(options={'reset_mask': mask}) before stepping"
            )
        self.engine.step_send(plan.autoreset_mode, handout=plan.handout)

    def _step_result(self, received: Received) -> tuple[Any, Any, Any, Any, dict]:
        step_slot = self.buffers.next
        terminations = step_slot.terminated.copy()
        truncations = step_slot.truncated.copy()
        rewards = self.buffers.reward.copy()
        plan = self.plan
        if plan.same_step:
            finished = terminations | truncations
            infos = self._face_infos.same_step(finished, any_set(finished), received.extras)
        elif received.extras or self._info_fields:
            extras = {i: e.next for i, e in received.extras.items()}
            infos = self._face_infos.infos(step_slot, None, extras)
        else:
            infos = {}
        # (the usual case's copy, bound once: no call of _observations)
        copy_plain = plan.copy_plain
        obs = copy_plain() if copy_plain is not None else self._observations(received)
        if received.faults is not None:  # (faults that heal: API section 13)
            add_faults(infos, received.faults, self.num_envs, plan.same_step)
        if plan.output == "torch":
            return self._handed_out(obs, rewards, terminations, truncations, infos)
        return obs, rewards, terminations, truncations, infos

    def _handed_out(
        self, obs: Any, rewards: Any, terminations: Any, truncations: Any, infos: dict
    ) -> tuple[Any, Any, Any, Any, dict]:
        """A step's results as the caller gets them: rewards and flags as torch tensors
        under ``output="torch"`` (the observations are converted already)."""
        if self.plan.output == "torch":
            import torch

            device = self.plan.torch_device
            as_tensor = lambda a: torch.as_tensor(a, device=device)  # noqa: E731
            return obs, as_tensor(rewards), as_tensor(terminations), as_tensor(truncations), infos
        return obs, rewards, terminations, truncations, infos

    def receive(self, timeout: float | None = None) -> Received:
        """Wait for the whole-batch call in flight (see ``BatchEngine.recv``)."""
        return self.engine.recv(timeout, self._meanwhile)

    # ---- first-ready batches (EnvPool's conventions) ------------------------------------------
    def async_reset(
        self, seed: int | Sequence[int | None] | None = None, options: dict | None = None
    ) -> None:
        """Reset every sub-env (seeded as ``reset(seed=...)`` would) and return at once:
        ``recv()`` returns the first ``batch_size`` of them to finish.

        Example:
            >>> import gymnasium as gym
            >>> from gymvec import SerialVectorEnv
            >>> envs = SerialVectorEnv([lambda: gym.make("CartPole-v1")] * 3, batch_size=2)
            >>> envs.async_reset(seed=0)
            >>> obs, rewards, terminations, truncations, infos = envs.recv()
            >>> obs.shape, infos["env_id"].tolist()
            ((2, 4), [0, 1])
            >>> envs.send(envs.action_space.sample()[:2], infos["env_id"])
            >>> envs.recv()[-1]["env_id"].tolist()
            [2, 0]
            >>> envs.close()
        """
        if options is not None:
            raise ValueError("async_reset: options are not supported by first-ready resets")
        engine = self._first_ready()
        seeds = expand_seeds(seed, self.num_envs)
        if seed is not None:
            super().reset(seed=seed if isinstance(seed, int) else None)
        engine.async_reset_send(None, seeds=seeds, into="next")

    def send(self, actions: Any, env_id: Any = None) -> None:
        """Step the sub-envs ``env_id`` names (as ``recv`` returned it; None: all of them)
        with ``actions`` (one row per sub-env); returns at once. A sub-env whose episode
        ended at its previous step is reset instead (NEXT_STEP)."""
        self._first_ready().async_step_send(
            env_id,
            AutoresetMode.NEXT_STEP,
            write_actions=functools.partial(self._write_action_rows, actions),
        )

    def recv(self, timeout: float | None = None) -> tuple[Any, Any, Any, Any, dict]:
        """The first ``batch_size`` sub-envs to finish what was sent them (steps or resets):
        ``(obs, rewards, terminations, truncations, infos)``, row by row as
        ``infos["env_id"]`` (int32) names them. Past ``timeout``, ``TimeoutError``: nothing is
        lost, the results come with a later call."""
        engine = self._first_ready()
        m = self.batch_size
        ready = engine.async_recv(None, min_get=m, max_get=m, timeout=timeout)
        rows = ready.indices
        slot = self.buffers.next
        rewards, terminations = self.buffers.reward[rows], slot.terminated[rows]
        truncations = slot.truncated[rows]
        mask = np.zeros(self.num_envs, dtype=bool)
        mask[rows] = True
        extras = {i: e.next for i, e in ready.extras.items()}
        infos = self._face_infos.infos(slot, mask, extras)
        if ready.faults is not None:  # (faults that heal: API section 13)
            add_faults(infos, ready.faults, self.num_envs, False)
        infos = _take_rows(infos, rows)
        infos["env_id"] = rows.astype(np.int32)
        obs = self._row_observations(rows)
        return self._handed_out(obs, rewards, terminations, truncations, infos)

    def _first_ready(self) -> FirstReadyEngine:
        """The engine, checked for first-ready commands (open, NEXT_STEP, the verbs)."""
        self._check_open()
        if self._first_ready_engine is not None:
            return self._first_ready_engine
        if self.plan.autoreset_mode != AutoresetMode.NEXT_STEP:
            raise RuntimeError(
                "first-ready batches (async_reset, send, recv) take autoreset_mode NEXT_STEP, "
                f"this env has {self.autoreset_mode.value}"
            )
        if not isinstance(self.engine, FirstReadyEngine):
            raise RuntimeError(
                f"{type(self.engine).__name__} has no first-ready commands (gymvec's "
                "SerialEnv and ParallelEnv have)"
            )
        self._first_ready_engine = self.engine  # neither can change: checked once
        return self.engine

    def _check_open(self) -> None:
        if self.closed:
            raise ClosedEnvError.after_close(self)

    def _row_observations(self, rows: np.ndarray) -> Any:
        """The observations in "next" of the sub-envs at ``rows`` (copies), in that order."""
        slot = self.buffers.next
        plan = self.plan
        if plan.plain_obs is not None:  # numpy output
            return plan.plain_obs[rows]
        arrays = [None if leaf.is_object else slot.obs[leaf.key][rows] for leaf in self._obs_leaves]
        if plan.output == "torch":
            import torch

            device = plan.torch_device
            arrays = [a if a is None else torch.tensor(a, device=device) for a in arrays]
        # object leaves: a tuple of those sub-envs' objects, as gymnasium batches them
        for k, leaf in enumerate(self._obs_leaves):
            if leaf.is_object:
                objects = slot.objects[leaf.key]
                arrays[k] = tuple(objects[i] for i in rows.tolist())
        return build_value(self.single_observation_space, self._obs_leaves, arrays)

    def _copy_local_rows(self, stop: int) -> None:
        # Large observations: the rows stepped in this process are copied while the worker
        # processes finish theirs, which takes that copy off the critical path.
        plain = self.plan.plain_obs
        if plain is None:  # (early_copy: never)
            return
        out = np.empty_like(plain)
        out[:stop] = plain[:stop]
        self._early_obs = (out, stop)

    def finish(self, received: Received) -> Any:
        """Assemble the result of the call ``received`` ends from the buffers and extras."""
        if received.kind == "step":
            return self._step_result(received)
        return self._reset_result(received)

    # ---- buffers -> gymnasium values ----------------------------------------------------------
    def _observations(self, received: Received) -> Any:
        array = received.observations
        plan = self.plan
        if array is not None:  # a handed-out observation lane
            if plan.output == "torch":
                import torch

                return torch.from_numpy(array)  # which holds the array: the lane stays taken
            return array
        plain = plan.plain_obs
        if plain is not None:
            if self._early_obs is not None:
                (out, stop), self._early_obs = self._early_obs, None
                out[stop:] = plain[stop:]
                return out
            return plain.copy() if plan.copy else plain
        slot = plan.slot
        arrays: list[Any] = [slot.obs.get(leaf.key) for leaf in self._obs_leaves]
        if plan.output == "torch":
            import torch

            to_tensor = functools.partial(torch.tensor, device=plan.torch_device)
            arrays = [a if a is None else to_tensor(a) for a in arrays]
        elif plan.copy:
            arrays = [a if a is None else a.copy() for a in arrays]
        # object leaves: a tuple of the sub-envs' objects, as gymnasium batches them
        for k, leaf in enumerate(self._obs_leaves):
            if leaf.is_object:
                arrays[k] = tuple(slot.objects[leaf.key])
        return build_value(self.single_observation_space, self._obs_leaves, arrays)

    # ---- sub-env access -----------------------------------------------------------------------
    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call (or get, if not callable) ``name`` on every sub-env; returns a tuple."""
        return tuple(self.engine.request("call", name=name, args=args, kwargs=kwargs, gym_env=True))

    def get_attr(self, name: str) -> tuple[Any, ...]:
        return self.call(name)

    def set_attr(self, name: str, values: Any) -> None:
        """Set ``name`` on each sub-env: one value per sub-env (list/tuple), or one for all."""
        if not isinstance(values, list | tuple):
            values = [values] * self.num_envs
        if len(values) != self.num_envs:
            raise ValueError(
                "Values must be a list or tuple with length equal to the number of environments. "
                f"Got `{len(values)}` values for {self.num_envs} environments."
            )
        self.engine.request("set_attr", name=name, values=list(values), gym_env=True)

    def apply(
        self, fn: Callable, *args: Any, indices: Sequence[int] | None = None, **kwargs: Any
    ) -> tuple[Any, ...]:
        """``fn(sub_env, *args, **kwargs)`` for the gymnasium sub-envs at ``indices`` (all if
        None), run where they live; returns the results as a tuple (``fn`` travels with
        cloudpickle)."""
        return tuple(self.engine.request("apply", indices, fn=fn, args=args, kwargs=kwargs))

    def render(self) -> tuple[Any, ...] | None:
        return self.call("render")

    # One per sub-env, as gymnasium's SyncVectorEnv and AsyncVectorEnv return them (VectorEnv's
    # own annotations say one for the vector env).
    @property
    def np_random_seed(self) -> tuple[int, ...]:  # type: ignore[override]
        return self.get_attr("np_random_seed")

    @property  # type: ignore[misc]
    def np_random(self) -> tuple[np.random.Generator, ...]:  # type: ignore[override]
        """The sub-envs' random generators (copies, for sub-envs in worker processes)."""
        return self.get_attr("np_random")

    def close_extras(self, **kwargs: Any) -> None:
        self.env.close()  # the batched env or the engine given: it closes the engine

    @never_raises
    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.env!r}, autoreset_mode={self.autoreset_mode.value})"


# ---- helpers ---------------------------------------------------------------------------------
def engine_of(env: Any) -> Engine:
    """The engine under ``env``: a batched gymvec env's own, an engine as it is, or any other
    batched ``EnvBase`` driven through its tensordict API (``TensorDictEngine``); a torchrl env
    through ``gymvec.torchrl.from_torchrl`` (reached only when torchrl is imported already)."""
    torchrl_envs = sys.modules.get("torchrl.envs")
    if torchrl_envs is not None and isinstance(env, torchrl_envs.EnvBase):
        from gymvec.torchrl import from_torchrl

        env = from_torchrl(env)
    engine = getattr(env, "engine", None)
    if engine is not None:
        return engine
    if isinstance(env, Engine):
        return env
    from gymvec.vector.tensordict_engine import TensorDictEngine

    return TensorDictEngine(env)


def _take_rows(infos: dict, rows: np.ndarray) -> dict:
    """gymnasium's vector infos (arrays over every sub-env) cut down to ``rows``, in order."""
    return {
        key: _take_rows(value, rows) if isinstance(value, dict) else value[rows]
        for key, value in infos.items()
    }
