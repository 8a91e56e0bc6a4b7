"""tianshou's vector-env contract (``tianshou.env.BaseVectorEnv``) on gymvec's engine.

tianshou's ``Collector`` steps and resets any subset of the sub-envs (``step(action, id)``,
``reset(env_id)``) and resets finished ones itself. Those are the engine's first-ready
commands: each call sends its sub-envs one command each and takes all of them back. A step of
every sub-env in order (the collector's steps by ``n_step``) is one whole-batch step instead,
which costs less. gymvec's drop-in runs with autoreset disabled: no sub-env is reset behind
tianshou's back.

The collector example is in docs/integrations.md, section tianshou (the tests run it).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, cast

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import concatenate, create_empty_array
from tianshou.env import BaseVectorEnv

from gymvec.common.faults import Fault, Restart
from gymvec.common.reprs import never_raises
from gymvec.engine.engine import BatchEngine, Received
from gymvec.errors import ClosedEnvError
from gymvec.integrations import sub_env_ops, tianshou_ops
from gymvec.vector import dropin
from gymvec.vector.infos import field_value

# gymvec drop-in options these classes fix themselves: tianshou resets sub-envs itself, takes
# numpy arrays, and steps each call's sub-envs to the end.
_FIXED_OPTIONS = {
    "autoreset_mode": "tianshou resets finished sub-envs itself (autoreset is disabled)",
    "output": "tianshou takes numpy arrays",
    "batch_size": "each call takes back every sub-env it stepped",
    "wait_num": "tianshou's asynchronous mode (AsyncCollector) is not supported",
}


class TianshouVectorEnv(BaseVectorEnv):
    """A tianshou vector env over a gymvec drop-in vector env (``gymvec.SerialVectorEnv`` or
    ``gymvec.ParallelVectorEnv``) built with ``autoreset_mode="disabled"``, which it owns.

    As tianshou's ``BaseVectorEnv``: ``len()``; ``action_space``, ``observation_space``,
    ``metadata``, ``spec`` and ``reward_range`` as one entry per sub-env (``get_env_attr``);
    ``reset(env_id=None, seed=..., options=...)`` -> ``(obs, infos)``; ``step(action, id=None)``
    -> ``(obs, rew, terminated, truncated, infos)`` for the sub-envs ``id`` names, in that
    order, each info with its ``"env_id"``; infos as object arrays of dicts; ``seed``;
    ``render``; ``close``. Deviations: a finished sub-env must be reset before it is stepped
    again (a ValueError names it); ``close()`` may be called twice; using a closed env raises
    ``gymvec.ClosedEnvError``.
    """

    def __init__(self, vector_env: dropin.SerialVectorEnv | dropin.ParallelVectorEnv) -> None:
        # BaseVectorEnv.__init__ builds tianshou's workers: this class has none, and sets the
        # attributes tianshou's collectors read of a synchronous vector env.
        engine = vector_env.engine
        if not isinstance(engine, BatchEngine):  # first-ready commands are BatchEngine's
            raise TypeError(f"vector_env: expected a gymvec drop-in, got {vector_env!r}")
        self.vector_env: dropin.SerialVectorEnv | dropin.ParallelVectorEnv = vector_env
        self.engine: BatchEngine = engine
        self.env_num: int = vector_env.num_envs
        self.wait_num = self.env_num
        self.timeout = None  # tianshou's asynchronous timeout (gymvec's is the drop-in's)
        self.is_async = False
        self.waiting_id: list[int] = []
        self.ready_id = list(range(self.env_num))
        self.is_closed: bool = False

    @property
    def restarts(self) -> np.ndarray:
        """Restarts per sub-env (``on_fault="restart"``; see ``docs/faults.md``)."""
        return self.vector_env.restarts

    @property
    def faults(self) -> list[Fault]:
        """The most recent faults, oldest first (``gymvec.Fault`` records)."""
        return self.vector_env.faults

    def _assert_is_not_closed(self) -> None:
        if self.is_closed:
            raise ClosedEnvError(f"{type(self).__name__} is closed: create a new one to go on")

    # ---- sub-env attributes -------------------------------------------------------------------
    def get_env_attr(self, key: str, id: Any = None) -> list[Any]:
        """Attribute ``key`` of the sub-envs ``id`` names (all if None), one per id (copies,
        for sub-envs in worker processes)."""
        self._assert_is_not_closed()
        rows = self._env_ids(id)
        return list(self.vector_env.apply(sub_env_ops.get_attr, key, indices=rows.tolist()))

    def set_env_attr(self, key: str, value: Any, id: Any = None) -> None:
        """Set attribute ``key`` to ``value`` on the sub-envs ``id`` names (all if None)."""
        self._assert_is_not_closed()
        rows = self._env_ids(id)
        self.vector_env.apply(sub_env_ops.set_attr, key, value, indices=rows.tolist())

    # ---- reset and step -----------------------------------------------------------------------
    def reset(self, env_id: Any = None, **kwargs: Any) -> tuple[np.ndarray, np.ndarray]:
        """Reset the sub-envs ``env_id`` names (all if None); their first observations and
        infos, in that order. ``seed``: an int or None for each of them (as tianshou passes
        its keywords to every sub-env), or one per sub-env; ``options``: gymnasium's."""
        self._assert_is_not_closed()
        unknown = sorted(kwargs.keys() - {"seed", "options"})
        if unknown:
            raise TypeError(f"reset: unexpected keyword(s) {unknown}; expected seed, options")
        rows = self._env_ids(env_id)
        seeds = _row_seeds(kwargs.get("seed"), len(rows))
        self._settle()
        if seeds is not None:
            self._seed_action_spaces(rows, seeds)
        options = kwargs.get("options")
        if options is None:
            self.engine.async_reset_send(rows, seeds=seeds, into="next")
            extras, _ = self._take_back("reset", len(rows))
        else:
            extras = self._masked_reset(rows, seeds, options)
        return self._observations(rows), _object_array(self._row_infos(rows, extras))

    def _masked_reset(
        self, rows: np.ndarray, seeds: list[int | None] | None, options: dict
    ) -> dict[int, Any]:
        """Resets with options, which first-ready resets do not carry: the drop-in's masked
        reset of those sub-envs (with autoreset disabled, it resets into "next" too)."""
        mask = np.zeros(self.env_num, dtype=np.bool_)
        mask[rows] = True
        all_seeds: list[int | None] | None = None
        if seeds is not None:
            all_seeds = [None] * self.env_num
            for row, seed in zip(rows.tolist(), seeds):
                all_seeds[row] = seed
        self.vector_env.reset_send(seed=all_seeds, options={**options, "reset_mask": mask})
        received = self.vector_env.receive()
        return {row: extras.next for row, extras in received.extras.items()}

    def step(self, action: Any, id: Any = None) -> tuple[Any, Any, Any, Any, Any]:
        """Step the sub-envs ``id`` names (all if None) with ``action`` (one row per id):
        ``(obs, rew, terminated, truncated, infos)`` in the order of ``id``."""
        self._assert_is_not_closed()
        rows = self._env_ids(id)
        if action is None:
            raise ValueError("action must be not-None for non-async")
        if len(action) != len(rows):
            raise ValueError(
                f"action: expected one row per sub-env id ({len(rows)}), got {len(action)}"
            )
        self._settle()
        finished = rows[self.engine.finished[rows]]
        if finished.size:
            raise ValueError(
                f"sub-envs {finished.tolist()} finished their episodes: reset them "
                "(reset(env_id=...)) before stepping them again"
            )
        if len(rows) == self.env_num and (id is None or (np.diff(rows) > 0).all()):
            # every sub-env in order (the collector's steps by n_step): one whole-batch step
            # (autoreset disabled) costs less than a first-ready command per sub-env
            self.vector_env.step_send(self._batched(action))
            received = self.vector_env.receive()
            extras = {row: extras.next for row, extras in received.extras.items()}
            faults = received.faults
        else:
            write = functools.partial(self.vector_env._write_action_rows, self._batched(action))
            self.engine.async_step_send(rows, AutoresetMode.DISABLED, write_actions=write)
            (extras, faults), received = self._take_back("step", len(rows)), None
        slot = self.engine.buffers.next
        infos = self._row_infos(rows, extras)
        if faults:  # faults that heal: the row is truncated, and its info says why
            for row, info in zip(rows.tolist(), infos):
                if row in faults:
                    info["fault"] = faults[row]
        # each info's "env_id" is the element of ``id`` that named it, as tianshou's
        for env_id, info in zip(self._wrap_id(id), infos):
            info["env_id"] = env_id
        return (
            self._observations(rows, received),
            cast(np.ndarray, slot.reward)[rows],  # ("next" has rewards, the root none)
            slot.terminated[rows],
            slot.truncated[rows],
            _object_array(infos),
        )

    def _take_back(self, kind: str, count: int) -> tuple[dict[int, Any], dict[int, str] | None]:
        """Wait for all ``count`` first-ready commands of ``kind`` just sent; what each
        sub-env reported beside the buffers, and the faults that healed (by sub-env). After a
        sub-env's error, the others are taken back too (and dropped); after an interrupt, the
        next call takes them back."""
        try:
            ready = self.engine.async_recv(kind, min_get=count, max_get=count)
        except TimeoutError:
            raise  # they stay in flight (past the engine's timeout, only close() is left)
        except Exception:
            self._settle()
            raise
        return {row: extras.next for row, extras in ready.extras.items()}, ready.faults

    def _settle(self) -> None:
        """Take back and drop the commands an interrupt or an error left in flight."""
        flying = self.engine.flying.size
        while flying:
            try:
                self.engine.async_recv(None, min_get=flying)
            except TimeoutError:
                raise
            except Exception:
                # that sub-env is out of flight and needs a reset (the engine enforces it);
                # an error that takes none out of flight would repeat: give up on it
                if self.engine.flying.size == flying:
                    raise
            flying = self.engine.flying.size

    def _batched(self, action: Any) -> Any:
        """Actions of a composite space (Dict, Tuple) given as tianshou passes them, one value
        per sub-env (an object array or a list), in gymnasium's batched layout."""
        space = self.vector_env.single_action_space
        per_env = isinstance(action, list | tuple) or (
            isinstance(action, np.ndarray) and action.dtype == object
        )
        if not per_env or not isinstance(space, spaces.Dict | spaces.Tuple):
            return action
        out: Any = create_empty_array(space, len(action))
        return concatenate(space, list(action), out)

    def _observations(self, rows: np.ndarray, received: Received | None = None) -> np.ndarray:
        """The observations of the sub-envs at ``rows`` (all of them, in order, after the
        whole-batch command ``received``): an array, or as tianshou stacks values that are
        not arrays (Dict spaces), an object array of one value per sub-env."""
        face = self.vector_env
        if face.plan.plain_obs is None:
            slot = self.engine.buffers.next
            return _object_array(
                [face._face_infos.single_observation(slot, row) for row in rows.tolist()]
            )
        if received is not None:  # (from an observation lane it may have handed out)
            return face._observations(received)
        return face._row_observations(rows)

    def _row_infos(self, rows: np.ndarray, extras: dict[int, Any]) -> list[dict]:
        """The info dict of each sub-env at ``rows``, from the info fields of "next" (values
        of the type the sub-env reported) and its extras."""
        slot = self.engine.buffers.next
        fields = list(self.engine.layout.info_fields.items())  # (it grows as they are learnt)
        infos = []
        for row in rows.tolist():
            info: dict = {}
            if fields:
                present = slot.info_present[row]
                for k, (name, field) in enumerate(fields):
                    if present[k]:
                        as_int = field.ints and bool(slot.info_int[row, k])
                        info[name] = field_value(field, slot.info[name][row], as_int)
            extra = extras.get(row)
            if extra:
                info.update(extra)
            infos.append(info)
        return infos

    # ---- seeds, render, close -----------------------------------------------------------------
    def seed(self, seed: int | Sequence[int | None] | None = None) -> list[list[int] | None]:
        """Seed every sub-env as tianshou does: an int ``s`` gives sub-env ``i`` seed
        ``s + i``; each sub-env's action space is seeded and the sub-env reset with its seed.
        Returns ``[[seed]]`` per sub-env."""
        self._assert_is_not_closed()
        if seed is None or isinstance(seed, int | np.integer):
            seeds = [None if seed is None else int(seed) + i for i in range(self.env_num)]
        else:
            seeds = list(seed)
            if len(seeds) != self.env_num:
                raise ValueError(f"seed: expected {self.env_num} seeds, got {len(seeds)}")
        rows = np.arange(self.env_num, dtype=np.int64)
        self._settle()
        self._seed_action_spaces(rows, seeds)
        self.engine.async_reset_send(rows, seeds=seeds, into="next")
        self._take_back("reset", self.env_num)
        used: list = [[s] for s in seeds]  # ([None] for None, as tianshou's workers)
        return used

    def _seed_action_spaces(self, rows: np.ndarray, seeds: list[int | None]) -> None:
        """Seed each sub-env's action space (as tianshou's workers do with a seed)."""
        for row, seed in zip(rows.tolist(), seeds):
            if seed is not None:
                self.vector_env.apply(tianshou_ops.seed_action_space, seed, indices=[row])

    def render(self, **kwargs: Any) -> list[Any]:
        self._assert_is_not_closed()
        return list(self.vector_env.call("render", **kwargs))

    def close(self) -> None:
        """Close the sub-envs and end the worker processes (a second call does nothing)."""
        if self.is_closed:
            return
        self.is_closed = True
        self.vector_env.close()

    # ---- helpers ------------------------------------------------------------------------------
    def _env_ids(self, id: Any) -> np.ndarray:
        """``id`` (None: all; an int; a sequence of ints) as checked int64 sub-env indices."""
        n = self.env_num
        if id is None:
            return np.arange(n, dtype=np.int64)
        rows = np.atleast_1d(np.asarray(id))
        if rows.ndim != 1 or rows.dtype.kind not in "iu" or not rows.size:
            raise ValueError(
                f"env_id: expected sub-env indices (an int or a non-empty 1-d sequence of "
                f"ints in [0, {n})), got {id!r}"
            )
        outside = rows[(rows < 0) | (rows >= n)]
        if outside.size:
            raise IndexError(f"env_id: sub-env indices {outside.tolist()} out of range [0, {n})")
        if len(np.unique(rows)) != len(rows):
            raise ValueError(f"env_id: each sub-env at most once, got {rows.tolist()}")
        return rows.astype(np.int64, copy=False)

    @never_raises
    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.env_num} sub-envs, {self.vector_env!r})"


class SerialVectorEnv(TianshouVectorEnv):
    """tianshou's ``DummyVectorEnv`` on gymvec: the sub-envs in this process.

    Args:
        env_fns: callables that each build one gymnasium env.
        on_fault: "raise" (default), "restart" or a ``gymvec.Restart``: a sub-env that raises
            is rebuilt, its step truncated with ``info["fault"]`` (see ``docs/faults.md``).
    """

    def __init__(
        self, env_fns: Sequence[Callable[[], gym.Env]], *, on_fault: str | Restart = "raise"
    ) -> None:
        super().__init__(
            dropin.SerialVectorEnv(env_fns, autoreset_mode="disabled", on_fault=on_fault)
        )


class ParallelVectorEnv(TianshouVectorEnv):
    """tianshou's ``SubprocVectorEnv``/``ShmemVectorEnv`` on gymvec: the sub-envs spread over
    worker processes, several per process, data through shared memory.

    Args:
        env_fns: callables that each build one gymnasium env.
        **options: ``gymvec.ParallelVectorEnv``'s (``num_workers``, ``context``,
            ``timeout``: seconds a command may take, past which ``SubEnvTimeoutError``...;
            ``on_fault="restart"``: a faulted sub-env is rebuilt, its step truncated with
            ``info["fault"]``, see ``docs/faults.md``),
            but ``autoreset_mode``, ``output`` and ``batch_size``, which this class fixes.
    """

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]], **options: Any) -> None:
        for name, why in _FIXED_OPTIONS.items():
            if name in options:
                raise TypeError(f"ParallelVectorEnv: option {name!r} is not taken here: {why}")
        super().__init__(dropin.ParallelVectorEnv(env_fns, autoreset_mode="disabled", **options))


def _row_seeds(seed: Any, count: int) -> list[int | None] | None:
    """A reset's ``seed`` keyword as one seed per sub-env reset."""
    if seed is None:
        return None
    if isinstance(seed, int | np.integer):
        return [int(seed)] * count
    seeds = list(seed)
    if len(seeds) != count:
        raise ValueError(f"seed: expected an int or {count} seeds (one per env_id), got {seed!r}")
    return seeds


def _object_array(values: list) -> np.ndarray:
    """``values`` as a 1-d object array (numpy would unpack dicts of sequences otherwise)."""
    out = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        out[i] = value
    return out
