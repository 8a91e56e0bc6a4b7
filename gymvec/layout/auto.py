"""``AutoVectorEnv``: the vector env of ``make_vec(..., backend="auto")``, which picks its layout
at the first reset; and ``autotune``, which measures every layout for real."""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
from gymnasium.error import AlreadyPendingCallError, NoAsyncCallError
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from gymvec.common.faults import Fault
from gymvec.errors import ClosedEnvError
from gymvec.layout.model import Candidate, Constraints, Layout, LayoutReport, choose
from gymvec.layout.timing import choose_layout, measure

if TYPE_CHECKING:
    from gymvec.vector.vector_env import GymnasiumVectorEnv

Build = Callable[[Candidate], "GymnasiumVectorEnv"]


class AutoVectorEnv(gym.vector.VectorEnv):
    """A gymnasium ``VectorEnv`` that builds its layout at the first reset (or first use).

    Building it builds one throwaway sub-env, which gives the spaces and is neither reset
    nor stepped. At the first reset it is timed in this process (unless the cache has its
    costs), the layout the cost model predicts fastest among those the options allow is
    built with fresh sub-envs (so trajectories equal ``SyncVectorEnv``'s), and every call
    goes to that vector env (``inner``). ``layout`` tells what was chosen and why.

    A throwaway that raises while it is built or timed raises that error, as the sub-envs of
    ``SerialVectorEnv`` would (at construction, or at the first reset).
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        build: Build,
        constraints: Constraints,
        autoreset_mode: AutoresetMode,
        *,
        key: str | None = None,
        seconds: float = 0.5,
    ):
        self.env_fns = list(env_fns)
        self.num_envs = len(self.env_fns)
        self._build, self._constraints = build, constraints
        self._key, self._seconds = key, seconds
        self.inner: GymnasiumVectorEnv | None = None
        self._layout: Layout | None = None
        self._pending: tuple[str, tuple, dict] | None = None  # an async call, in this process
        self._throwaway: gym.Env | None = self.env_fns[0]()
        env = self._throwaway
        self.single_observation_space = env.observation_space
        self.single_action_space = env.action_space
        self.observation_space = batch_space(env.observation_space, self.num_envs)
        self.action_space = batch_space(env.action_space, self.num_envs)
        self.metadata = {**env.metadata, "autoreset_mode": autoreset_mode}
        self.autoreset_mode = autoreset_mode
        self.render_mode = env.render_mode

    # ---- the choice ---------------------------------------------------------------------------
    def _ensure(self) -> GymnasiumVectorEnv:
        """The chosen vector env, built now on first use."""
        if self.inner is not None:
            return self.inner
        if self.closed:
            raise ClosedEnvError(f"Trying to operate on `{type(self).__name__}`, after `close()`.")
        # (a fresh one where an earlier try used it up and raised)
        throwaway = self._throwaway if self._throwaway is not None else self.env_fns[0]()
        try:  # an error of the throwaway's is the one SerialVectorEnv would raise at reset
            report = choose_layout(
                throwaway, self.num_envs, self._constraints, key=self._key, seconds=self._seconds
            )
        finally:
            self._throwaway = None
            throwaway.close()
        chosen = report.chosen
        self.inner = inner = self._build(chosen)
        self._layout = Layout.of(chosen, report)
        self.observation_space, self.action_space = inner.observation_space, inner.action_space
        return inner

    @property
    def layout(self) -> Layout:
        """What was chosen (backend, workers, sub-envs per worker, local share) and why
        (``layout.report``); asking chooses now if no reset did yet."""
        self._ensure()
        return self._layout  # type: ignore[return-value]  # (set with inner)

    @property
    def batch_size(self) -> int:
        """As ``GymnasiumVectorEnv.batch_size`` (first-ready batches)."""
        return self._ensure().batch_size

    @property
    def engine(self) -> Any:
        """The chosen vector env's engine (gymvec's integrations read it)."""
        return self._ensure().engine

    @property
    def restarts(self) -> np.ndarray:
        """Restarts per sub-env (``on_fault="restart"``; see ``docs/faults.md``)."""
        return self._ensure().restarts

    @property
    def faults(self) -> list[Fault]:
        """The most recent faults, oldest first (``gymvec.Fault`` records)."""
        return self._ensure().faults

    @property
    def envs(self) -> list[gym.Env]:
        """The sub-envs, where the calling process holds them all (``SyncVectorEnv.envs``)."""
        inner = self._ensure()
        if not hasattr(inner, "envs"):
            raise AttributeError(
                f"envs: the sub-envs live in worker processes (layout {self.layout.backend}, "
                f"{self.layout.workers} workers); use call/get_attr"
            )
        return inner.envs

    # ---- gymnasium's VectorEnv ----------------------------------------------------------------
    def reset(
        self, *, seed: int | Sequence[int | None] | None = None, options: dict | None = None
    ) -> tuple[Any, dict]:
        inner = self._ensure()
        if self._pending is not None:
            raise self._already_pending("reset")
        return inner.reset(seed=seed, options=options)

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict]:
        inner = self.inner if self.inner is not None else self._ensure()
        if self._pending is not None:
            raise self._already_pending("step")
        return inner.step(actions)

    # ---- AsyncVectorEnv's pairs: ParallelVectorEnv's own; in this process, the call runs at
    # its *_wait (nothing could overlap with it here), with gymnasium's errors for misuse
    def reset_async(
        self, seed: int | Sequence[int | None] | None = None, options: dict | None = None
    ) -> None:
        self._send_async("reset", seed=seed, options=options)

    def reset_wait(self, timeout: float | None = None) -> tuple[Any, dict]:
        return self._wait("reset", timeout)

    def step_async(self, actions: Any) -> None:
        self._send_async("step", actions)

    def step_wait(self, timeout: float | None = None) -> tuple[Any, Any, Any, Any, dict]:
        return self._wait("step", timeout)

    def call_async(self, name: str, *args: Any, **kwargs: Any) -> None:
        self._send_async("call", name, *args, **kwargs)

    def call_wait(self, timeout: float | None = None) -> tuple[Any, ...]:
        return self._wait("call", timeout)

    def _send_async(self, call: str, *args: Any, **kwargs: Any) -> None:
        inner = self._ensure()
        if _has_async_pairs(inner):
            getattr(inner, f"{call}_async")(*args, **kwargs)
            return
        if self._pending is not None:
            raise self._already_pending(f"{call}_async")
        self._pending = (call, args, kwargs)

    def _wait(self, call: str, timeout: float | None) -> Any:
        inner = self._ensure()
        if _has_async_pairs(inner):
            return getattr(inner, f"{call}_wait")(timeout)
        if self._pending is None or self._pending[0] != call:
            raise NoAsyncCallError(
                f"Calling `{call}_wait` without any prior call to `{call}_async`.", call
            )
        _, args, kwargs = self._pending
        self._pending = None
        return getattr(inner, call)(*args, **kwargs)

    def _already_pending(self, call: str) -> AlreadyPendingCallError:
        pending = self._pending[0] if self._pending else ""
        return AlreadyPendingCallError(
            f"Calling `{call}` while waiting for a pending call to `{pending}` to complete",
            pending,
        )

    def render(self) -> Any:
        return self._ensure().render()

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        inner = self._ensure()
        if self._pending is not None:
            raise self._already_pending("call")
        return inner.call(name, *args, **kwargs)

    def get_attr(self, name: str) -> tuple[Any, ...]:
        return self._ensure().get_attr(name)

    def set_attr(self, name: str, values: Any) -> None:
        self._ensure().set_attr(name, values)

    def apply(self, fn: Callable, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """As ``GymnasiumVectorEnv.apply``."""
        return self._ensure().apply(fn, *args, **kwargs)

    def async_reset(self, seed: Any = None, options: dict | None = None) -> None:
        """First-ready batches: as ``GymnasiumVectorEnv.async_reset``."""
        self._ensure().async_reset(seed, options)

    def send(self, actions: Any, env_id: Any = None) -> None:
        self._ensure().send(actions, env_id)

    def recv(self, timeout: float | None = None) -> tuple[Any, Any, Any, Any, dict]:
        return self._ensure().recv(timeout)

    @property
    def np_random_seed(self) -> tuple[int, ...]:  # type: ignore[override]
        return self._ensure().np_random_seed

    @property  # type: ignore[misc]
    def np_random(self) -> tuple[np.random.Generator, ...]:  # type: ignore[override]
        return self._ensure().np_random

    def close_extras(self, **kwargs: Any) -> None:
        self._pending = None
        if self._throwaway is not None:
            self._throwaway.close()
            self._throwaway = None
        if self.inner is not None:
            self.inner.close(**kwargs)

    def __repr__(self) -> str:
        if self.inner is None:
            return f"{type(self).__name__}(num_envs={self.num_envs}, layout not chosen yet)"
        return f"{type(self).__name__}({self.inner!r})"


def _has_async_pairs(envs: Any) -> bool:
    """Whether ``envs`` has AsyncVectorEnv's ``*_async``/``*_wait`` pairs of its own."""
    from gymvec.vector.dropin import ParallelVectorEnv

    return isinstance(envs, ParallelVectorEnv)


def _cores() -> int:
    from gymvec.common.cores import usable_cores

    return usable_cores()


def autotune(
    env_fn_or_id: str | Callable[[], gym.Env],
    num_envs: int,
    *,
    seconds: float | None = None,
    **env_kwargs: Any,
) -> LayoutReport:
    """Every layout of ``num_envs`` sub-envs measured for real: each candidate's predicted
    and measured sub-env steps per second, the fastest measured chosen.

    Args:
        env_fn_or_id: a registered gymnasium id, or a callable that builds one env.
        num_envs: number of sub-envs.
        seconds: the whole measurement's budget (default: 0.5 s for the costs, then 0.5 s
            per candidate); each candidate gets an equal share of what is left.
        **env_kwargs: for an id, passed to ``gymnasium.make``.
    """
    env_fn: Callable[[], gym.Env]
    if isinstance(env_fn_or_id, str):
        env_fn = functools.partial(gym.make, env_fn_or_id, **env_kwargs)
    else:
        env_fn = env_fn_or_id
    build = _factory_builder([env_fn] * num_envs)
    cores = _cores()
    throwaway = env_fn()
    try:
        costs, busy = measure(throwaway, cores, 0.5 if seconds is None else min(0.5, seconds / 4))
    finally:
        throwaway.close()
    predicted = choose(costs, num_envs, Constraints(), "measured", busy).candidates
    per_candidate = 0.5 if seconds is None else max(seconds * 0.75 / len(predicted), 0.01)
    measured = tuple(
        Candidate(
            c.backend,
            c.workers,
            c.sub_envs_per_worker,
            c.local,
            c.predicted,
            _run(build(c), per_candidate),
        )  # fmt: skip
        for c in predicted
    )
    best = max(measured, key=lambda c: c.measured or 0.0)
    return LayoutReport(costs, num_envs, measured, best, "measured", busy)


def _factory_builder(env_fns: list) -> Build:
    from gymvec.vector.dropin import ParallelVectorEnv, SerialVectorEnv

    def build(c: Candidate) -> GymnasiumVectorEnv:
        if c.backend == "serial":
            return SerialVectorEnv(env_fns)
        return ParallelVectorEnv(env_fns, num_workers=c.workers, local_worker=c.local)

    return build


def _run(envs: gym.vector.VectorEnv, seconds: float) -> float:
    """Sub-env steps per second of ``envs`` over about ``seconds`` (after a warm-up)."""
    try:
        envs.reset(seed=0)
        envs.action_space.seed(0)
        actions = [envs.action_space.sample() for _ in range(16)]
        for a in actions[:4]:
            envs.step(a)
        steps, started = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - started) < seconds or steps < 4:
            envs.step(actions[steps % len(actions)])
            steps += 1
        return steps * envs.num_envs / elapsed if elapsed > 0 else math.inf
    finally:
        envs.close()
