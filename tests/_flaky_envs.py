"""Sub-envs that fault on a schedule, for the tests of ``on_fault`` in the outer layers (make_vec,
the trainers' drop-ins, the tensordict side) and for examples/faults.py's kin.

``FlakyCartPole(every=k, how=...)`` is CartPole that faults at each ``k``-th step of its own
life (a rebuilt one counts from zero again), and at its next step once ``armed`` is set
(``envs.set_attr("armed", [...])``, which faults chosen rows on demand): ``"raise"`` raises a
``RuntimeError``; ``"exit"`` and ``"segv"`` end its process (``os._exit(3)``, SIGSEGV), in a
worker process only (in the calling process they raise, as a fault there cannot be survived).
``"hang"`` sleeps far past any test's ``timeout=`` (in a worker; it raises elsewhere).
``every=0`` faults only when armed.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import signal
import time

import gymnasium as gym

FLAKY_ID = "GymvecTest/FlakyCartPole-v0"


class FlakyCartPole(gym.Wrapper):
    def __init__(self, every: int = 0, how: str = "raise", max_episode_steps: int = 500):
        super().__init__(gym.make("CartPole-v1", max_episode_steps=max_episode_steps))
        self.every, self.how, self.steps = every, how, 0
        self.armed = False

    def step(self, action):
        self.steps += 1
        if self.armed or (self.every and self.steps % self.every == 0):
            fault(self.how)
        return self.env.step(action)


class FlakyResetCartPole(gym.Wrapper):
    """CartPole that faults (as ``fault(how)``) in each ``every``-th reset of its own life."""

    def __init__(self, every: int = 0, how: str = "exit"):
        super().__init__(gym.make("CartPole-v1"))
        self.every, self.how, self.resets = every, how, 0

    def reset(self, **kwargs):
        self.resets += 1
        if self.every and self.resets % self.every == 0:
            fault(self.how)
        return self.env.reset(**kwargs)


def exit_now(env) -> None:
    """End the process ``env`` lives in (``envs.apply(exit_now, indices=[i])``: a worker that
    dies in a request)."""
    os._exit(3)


def fault(how: str) -> None:
    """Fault as ``how`` says (see the module's docstring)."""
    in_worker = multiprocessing.parent_process() is not None
    if how == "exit" and in_worker:
        os._exit(3)
    if how == "segv" and in_worker:
        os.kill(os.getpid(), signal.SIGSEGV)
    if how == "hang" and in_worker:
        time.sleep(3600)
    raise RuntimeError(f"flaky sub-env: {how} fault on purpose")


def flaky_fns(n: int, row: int, every: int, how: str = "raise", **kwargs) -> list:
    """``n`` factories of CartPole, the one at ``row`` faulting every ``every`` steps."""
    return [
        functools.partial(FlakyCartPole, every if i == row else 0, how, **kwargs) for i in range(n)
    ]


def healthy_fns(n: int, **kwargs) -> list:
    """The same ``n`` sub-envs, none faulting (the reference's)."""
    return [functools.partial(FlakyCartPole, 0, **kwargs) for _ in range(n)]


if FLAKY_ID not in gym.registry:
    gym.register(FLAKY_ID, entry_point=FlakyCartPole)


def flaky_spread(every: int):
    """PettingZoo's simple_spread (mpe2) whose ``every``-th step raises (a parallel env)."""
    from mpe2 import simple_spread_v3
    from pettingzoo.utils.wrappers import BaseParallelWrapper

    class FlakySpread(BaseParallelWrapper):
        steps = 0

        def step(self, actions):
            self.steps += 1
            if self.steps % every == 0:
                raise RuntimeError("flaky PettingZoo env: a fault on purpose")
            return super().step(actions)

    return FlakySpread(simple_spread_v3.parallel_env(max_cycles=100))
