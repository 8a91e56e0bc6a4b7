"""Drop-in replacements for gymnasium's ``SyncVectorEnv`` and ``AsyncVectorEnv``.

``SerialVectorEnv(env_fns, ...)`` and ``ParallelVectorEnv(env_fns, ...)`` take the same
arguments and offer the same methods as gymnasium's classes, and run on gymvec's batched envs:

    >>> import gymnasium as gym
    >>> from gymvec import ParallelVectorEnv
    >>> envs = ParallelVectorEnv([lambda: gym.make("CartPole-v1")] * 4, num_workers=2)
    >>> obs, infos = envs.reset(seed=42)
    >>> envs.step_async(envs.action_space.sample())
    >>> obs, rewards, terminations, truncations, infos = envs.step_wait()
    >>> envs.close()
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.error import AlreadyPendingCallError, NoAsyncCallError
from gymnasium.spaces import OneOf, Space, Text
from gymnasium.spaces.utils import is_space_dtype_shape_equiv
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_differing_spaces

from gymvec.common.faults import Restart, parse_on_fault
from gymvec.common.structure import observation_leaves, refuse_object_leaves, space_leaves
from gymvec.engine.engine import BatchEngine, Received, process_backend, serial_backend
from gymvec.errors import SpaceMismatchError, SubEnvTimeoutError
from gymvec.options import (
    GYMNASIUM_FACE,
    process_options,
    suggest_keywords,
)
from gymvec.subenvs.factories import SubEnvFactories
from gymvec.vector.vector_env import GymnasiumVectorEnv


def _apply_observation_mode(face: GymnasiumVectorEnv, mode: str | tuple, cls_name: str) -> None:
    """gymnasium's ``observation_mode``: "same", "different", or (batched, single) spaces."""
    obs_spaces, action_spaces = face.engine.sub_env_spaces()
    if isinstance(mode, tuple) and len(mode) == 2:
        if not isinstance(mode[0], Space) or not isinstance(mode[1], Space):
            raise TypeError(
                "Expected both elements of observation_mode to be Spaces, got "
                f"{type(mode[0])} and {type(mode[1])}"
            )
        face.observation_space, face.single_observation_space = mode
    elif mode == "different":
        face.observation_space = batch_differing_spaces(obs_spaces)
    elif mode != "same":
        raise ValueError(
            "Invalid `observation_mode`, expected: 'same' or 'different' or tuple of single and "
            f"batch observation space, actual got {mode}"
        )
    single = face.single_observation_space
    for space in obs_spaces:
        if mode == "same" and space != single:
            detail = f"single_observation_space={single}, sub-environment observation_space={space}"
            raise _space_mismatch(cls_name, mode, "observation", detail)
        if mode != "same" and not is_space_dtype_shape_equiv(space, single):
            detail = f"single_observation_space={single}, sub-environment observation space={space}"
            raise _space_mismatch(cls_name, mode, "observation", detail)
    for space in action_spaces:
        if space != face.single_action_space:
            detail = f"action_space={space}, single_action_space={face.single_action_space}"
            raise _space_mismatch(cls_name, mode, "action", detail)


_GYMNASIUM_NAMES = {"SerialVectorEnv": "SyncVectorEnv", "ParallelVectorEnv": "AsyncVectorEnv"}


def _space_mismatch(cls_name: str, mode: str | tuple, kind: str, detail: str) -> SpaceMismatchError:
    """Sub-env spaces that do not batch, in the words of gymnasium's vector envs (whose tests
    match them, with the name of the gymnasium class the drop-in stands for), then
    ``detail``."""
    gym_name = _GYMNASIUM_NAMES[cls_name]
    if kind == "action":
        text = f"Sub-environment action space doesn't make the `single_action_space`, {detail}"
    elif mode == "same":
        text = (
            f"{cls_name}, gymvec's {gym_name}: "
            f"{gym_name}(..., observation_mode='same') however the sub-environments observation "
            f"spaces are not equivalent. {detail}. If this is intentional, use "
            "`observation_mode='different'` instead."
        )
    else:
        text = (
            f"{cls_name}, gymvec's {gym_name}: "
            f"{gym_name}(..., observation_mode='different' or custom space) however the "
            f"sub-environments observation spaces do not share a common shape and dtype, {detail}"
        )
    return SpaceMismatchError(text, kind=kind)


def _engine(cls_name: str, mode: str | tuple, make: Callable[[], BatchEngine]) -> BatchEngine:
    """``make()``, its space mismatches told as gymnasium tells them."""
    try:
        return make()
    except SpaceMismatchError as exc:
        if exc.kind is None:
            raise
        raise _space_mismatch(cls_name, mode, exc.kind, str(exc)) from None


def _refuse_unshareable(engine: BatchEngine) -> None:
    """``shared_memory=True`` refuses the spaces gymnasium's ``AsyncVectorEnv`` cannot share
    (Graph, Sequence, custom spaces), as it does; their values travel pickled otherwise."""
    where = "Use shared_memory=False: the sub-envs' values of such spaces then travel pickled"
    obs_spaces, action_spaces = engine.sub_env_spaces()
    for space in obs_spaces:
        refuse_object_leaves(space, observation_leaves(space), where, allowed=(Text, OneOf))
    for space in action_spaces:
        leaves = space_leaves(space, ("action",))
        refuse_object_leaves(space, leaves, where, allowed=(Text, OneOf))


def _check_env_fns(env_fns: Sequence[Callable[[], gym.Env]]) -> list:
    env_fns = list(env_fns)
    if not env_fns or not all(callable(fn) for fn in env_fns):
        raise TypeError(f"env_fns: expected a non-empty sequence of callables, got {env_fns!r}")
    return env_fns


class SerialVectorEnv(GymnasiumVectorEnv):
    """gymnasium's ``SyncVectorEnv``, on gymvec's engine with its sub-envs in this process
    (as ``SerialEnv``).

    Args:
        env_fns: callables that each build one gymnasium env.
        copy: return copies of the observations.
        observation_mode: "same", "different", or a (batched, single) pair of spaces.
        autoreset_mode: "next_step", "same_step" or "disabled".
        output: "numpy" or "torch" (gymvec's extension).
        batch_size: first-ready batches of this many sub-envs (gymvec's extension, see
            ``GymnasiumVectorEnv``).
        on_fault: "raise" (default), "restart" or a ``gymvec.Restart(limit, window)``: a
            sub-env that raises is rebuilt here and its row reads as truncated, with
            ``infos["fault"]`` (API section 13); ``restarts`` and ``faults`` report them.
    """

    engine: BatchEngine  # (the sub-envs live in this process: ``envs`` reads them)

    @suggest_keywords
    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        copy: bool = True,
        observation_mode: str | tuple[Space, Space] = "same",
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        *,
        output: str = "numpy",
        batch_size: int | None = None,
        on_fault: str | Restart = "raise",
    ):
        self.env_fns = _check_env_fns(env_fns)
        self.observation_mode = observation_mode
        self.on_fault = policy = parse_on_fault(on_fault)
        factories = SubEnvFactories(1, self.env_fns, None, len(self.env_fns))
        engine = _engine(
            "SerialVectorEnv",
            observation_mode,
            lambda: BatchEngine(factories, serial_backend(), on_fault=policy),
        )
        try:
            super().__init__(
                engine, autoreset_mode, output=output, copy=copy, batch_size=batch_size
            )
            _apply_observation_mode(self, observation_mode, "SerialVectorEnv")
        except BaseException:
            engine.close()
            raise

    @property
    def envs(self) -> list[gym.Env]:
        """The sub-envs, as ``SyncVectorEnv.envs``."""
        return self.engine.local_envs()


class AsyncState(enum.Enum):
    DEFAULT = "default"
    WAITING_RESET = "reset"
    WAITING_STEP = "step"
    WAITING_CALL = "call"


_STATES = {
    "reset": AsyncState.WAITING_RESET,
    "step": AsyncState.WAITING_STEP,
    "request": AsyncState.WAITING_CALL,
}


class ParallelVectorEnv(GymnasiumVectorEnv):
    """gymnasium's ``AsyncVectorEnv``, on gymvec's engine with its sub-envs in worker
    processes (as ``ParallelEnv``).

    Sub-envs are spread over ``num_workers`` processes (default: one per usable core, at most
    one per sub-env) as evenly as they go, several per process; data goes
    through shared memory. With ``local_worker`` (the default when the workers fill the
    cores, unless a ``timeout`` or first-ready batches are asked for), this process steps one
    share itself, inside ``step_wait``.

    Args (gymnasium's): env_fns, shared_memory (arrays always go through shared memory; True
        refuses Graph, Sequence and custom spaces as gymnasium does, False lets their values
        travel pickled beside the shared arrays), copy,
        context (start method, default: multiprocessing's), daemon, worker (not supported:
        must be None), observation_mode, autoreset_mode, max_concurrency (at most this many
        sub-envs run a reset or step at once: each worker process, and this process's share,
        runs its sub-envs one after the other, so at most this many of them run a command at
        once).
    Args (gymvec's): num_workers (None: one per usable core; "auto": the worker layout, and
        local_worker unless given, that gymvec's cost model predicts fastest from a throwaway
        sub-env timed at construction, see ``docs/layout.md``; ``layout_report`` says why),
        local_worker (step one share of the sub-envs in this
        process: None picks by the number of cores, False with a timeout or first-ready
        batches), output ("numpy"
        or "torch"), timeout (seconds any reset, step or call may take when its wait gives
        no timeout of its own; None: as long as it takes. Past it, a ``SubEnvTimeoutError``
        names the busy sub-envs and workers, the env refuses further calls, and ``close()``
        ends the busy workers at once. No sub-env then runs in this process), batch_size
        (first-ready batches, see ``GymnasiumVectorEnv``: each worker hands back each of its
        sub-envs as soon as it is done; sub-envs that wait on something outside the CPU all
        wait at once with one worker each, ``num_workers=len(env_fns)``), on_fault ("raise",
        "restart" or a ``gymvec.Restart``: a sub-env that raises, or whose worker dies or
        outlasts ``timeout``, is rebuilt and its row reads as truncated with
        ``infos["fault"]``; API section 13).

    ``reset_wait``, ``step_wait`` and ``call_wait`` take gymnasium's ``timeout``
    (``multiprocessing.TimeoutError`` past it): a reset or step stays pending, and a later
    wait returns it; a call is given up, as gymnasium does. After any timeout, ``close()``
    ends the busy workers instead of waiting for them.
    """

    _waiter: int | None = None  # the thread waiting for the call in flight (see close_extras)

    @suggest_keywords
    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        shared_memory: bool = True,
        copy: bool = True,
        context: str | None = None,
        daemon: bool = True,
        worker: Callable | None = None,
        observation_mode: str | tuple[Space, Space] = "same",
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        max_concurrency: int | None = None,
        *,
        num_workers: int | str | None = None,
        local_worker: bool | None = None,
        output: str = "numpy",
        batch_size: int | None = None,
        timeout: float | None = None,
        on_fault: str | Restart = "raise",
    ):
        self.on_fault = policy = parse_on_fault(on_fault)
        if worker is not None:
            raise ValueError("ParallelVectorEnv does not support a custom `worker` function")
        if max_concurrency is not None and (
            not isinstance(max_concurrency, int | np.integer) or max_concurrency < 1
        ):
            raise ValueError(
                f"`max_concurrency` must be a positive integer or None, got {max_concurrency}."
            )
        self.env_fns = _check_env_fns(env_fns)
        self.shared_memory, self.context, self.daemon = shared_memory, context, daemon
        self.observation_mode = observation_mode
        self.max_concurrency = max_concurrency
        n = len(self.env_fns)
        self.layout_report = None  # with num_workers="auto": why this layout (LayoutReport)
        if num_workers == "auto":
            num_workers, local_worker, self.layout_report = _auto_workers(
                self.env_fns, local_worker, timeout, batch_size is not None and batch_size < n
            )
        elif isinstance(num_workers, str):
            raise ValueError(
                f"num_workers: expected a positive int, None or 'auto', got {num_workers!r}"
            )
        # one task: sub-env 0 alone is built here for the layout (the others' spaces are
        # checked where they are built), not one per worker's factory
        factories = SubEnvFactories.spread(self.env_fns, num_workers)
        options, self.timeout = process_options(
            GYMNASIUM_FACE,
            num_workers=factories.num_workers,
            start_method=context,
            daemon=daemon,
            local_worker=local_worker,
            timeout=timeout,
            first_ready=batch_size is not None and batch_size < n,
            max_concurrency=max_concurrency,
        )
        engine = _engine(
            "ParallelVectorEnv",
            observation_mode,
            lambda: BatchEngine(
                factories, process_backend(options), timeout=self.timeout, on_fault=policy
            ),
        )
        try:
            if shared_memory:
                _refuse_unshareable(engine)
            super().__init__(
                engine, autoreset_mode, output=output, copy=copy, batch_size=batch_size
            )
            _apply_observation_mode(self, observation_mode, "ParallelVectorEnv")
        except BaseException:
            engine.close()
            raise

    # ---- the async state machine --------------------------------------------------------------
    @property
    def _state(self) -> AsyncState:
        """gymnasium's name for the call in flight, read off the engine's."""
        engine = self.engine
        if engine.in_flight is None or engine.interrupted:
            return AsyncState.DEFAULT
        return _STATES[engine.in_flight]

    def _begin(self, call: str, end: str = "") -> None:
        """Before ``call`` (gymnasium's words end its message with ``end``): nothing pending."""
        self._check_running()
        if self._state != AsyncState.DEFAULT:
            raise AlreadyPendingCallError(
                f"Calling `{call}` while waiting for a pending call to `{self._state.value}` "
                f"to complete{end}",
                str(self._state.value),
            )

    def _check_waiting(self, call: str, state: AsyncState) -> None:
        """Before ``{call}_wait``: its ``{call}_async`` is pending."""
        self._check_running()
        if self._state != state:
            raise NoAsyncCallError(
                f"Calling `{call}_wait` without any prior call to `{call}_async`.", state.value
            )

    def receive(self, timeout: float | None = None, call: str = "step") -> Received:
        """Wait for the command in flight (a reset or ``call``: a step), in gymnasium's
        words past ``timeout``; another thread's ``close()`` meanwhile ends the workers."""
        self._waiter = threading.get_ident()
        try:
            return self.engine.recv(timeout, self._meanwhile)
        except TimeoutError as exc:
            # Still in flight: a later wait resumes it (gymnasium gives the call up instead),
            # but for the constructor's timeout, after which the env refuses further calls.
            raise _wait_timeout(call, timeout, self.timeout, exc) from None
        finally:
            self._waiter = None

    def _check_running(self) -> None:
        self._check_open()
        self.engine.check_not_stuck()

    def reset_async(
        self, seed: int | Sequence[int | None] | None = None, options: dict | None = None
    ) -> None:
        self._begin("reset_async")
        self.reset_send(seed=seed, options=options)

    def reset_wait(self, timeout: float | None = None) -> tuple[Any, dict]:
        self._check_waiting("reset", AsyncState.WAITING_RESET)
        return self.finish(self.receive(timeout, "reset"))

    def reset(
        self, *, seed: int | Sequence[int | None] | None = None, options: dict | None = None
    ) -> tuple[Any, dict]:
        self.reset_async(seed=seed, options=options)
        return self.reset_wait()

    def step_async(self, actions: Any) -> None:
        self._begin("step_async")
        self.step_send(actions)

    def step_wait(self, timeout: float | None = None) -> tuple[Any, Any, Any, Any, dict]:
        self._check_waiting("step", AsyncState.WAITING_STEP)
        return self.finish(self.receive(timeout))

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict]:
        # step_async's checks, in one test for the usual case (nothing in flight): this runs
        # every step, and the state machine's layers cost more than a cheap sub-env's step
        if self.closed or not self.engine.idle:
            self._begin("step_async")
        self.step_send(actions)
        return self._step_result(self.receive())  # (sent just now: not checked)

    def call_async(self, name: str, *args: Any, **kwargs: Any) -> None:
        self._begin("call_async")
        self.engine.request_send("call", name=name, args=args, kwargs=kwargs, gym_env=True)

    def call_wait(self, timeout: float | None = None) -> tuple[Any, ...]:
        self._check_waiting("call", AsyncState.WAITING_CALL)
        try:
            return tuple(self.engine.request_recv(timeout))
        except TimeoutError as exc:
            # gymnasium gives the call up: its answers are read and dropped by the next call
            self.engine.abandon()
            raise _wait_timeout("call", timeout, self.timeout, exc) from None

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        self.call_async(name, *args, **kwargs)
        return self.call_wait()

    def set_attr(self, name: str, values: Any) -> None:
        self._begin("set_attr", ".")
        super().set_attr(name, values)

    # (narrower than VectorEnv's **kwargs, as gymnasium's AsyncVectorEnv.close_extras is)
    def close_extras(  # type: ignore[override]
        self, timeout: float | None = None, terminate: bool = False
    ) -> None:
        if self._state != AsyncState.DEFAULT:
            gym.logger.warn(
                f"Calling `close` while waiting for a pending call to `{self._state.value}` to "
                "complete."
            )
            # (after a timeout, it may never finish; and another thread waiting for it gets
            # ClosedEnvError: close() ends the workers instead of reading its answers too)
            if not terminate and not self.engine.timed_out and self._waiter is None:
                try:  # let the call in flight finish, as AsyncVectorEnv does
                    if self.engine.in_flight == "request":
                        self.engine.request_recv(timeout)
                    else:
                        self.engine.recv(timeout)
                except Exception:
                    pass
        self.engine.close()


def _auto_workers(
    env_fns: list, local_worker: bool | None, timeout: float | None, first_ready: bool
) -> tuple[int, bool | None, Any]:
    """``num_workers="auto"``: the worker layout the cost model picks for ``env_fns`` (a
    throwaway of ``env_fns[0]`` timed here: the workers and their shares are fixed when a
    ``ParallelVectorEnv`` is built); (workers, local_worker, the report)."""
    from gymvec.layout.model import Constraints
    from gymvec.layout.timing import choose_layout

    constraints = Constraints.of(
        local_worker=local_worker, timeout=timeout, first_ready=first_ready, serial=False
    )
    throwaway = env_fns[0]()
    try:
        report = choose_layout(throwaway, len(env_fns), constraints)
    finally:
        throwaway.close()
    return report.chosen.workers, report.chosen.local, report


def _wait_timeout(
    call: str, timeout: float | None, default: float | None, exc: TimeoutError
) -> SubEnvTimeoutError:
    """gymnasium's words for a wait that timed out, then what was still busy."""
    seconds = default if timeout is None else timeout
    return SubEnvTimeoutError(
        f"The call to `{call}_wait` has timed out after {seconds} second(s): {exc}",
        getattr(exc, "busy", []),
    )
