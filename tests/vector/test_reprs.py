"""``repr`` of every gymvec env never raises, even on an env whose constructor failed partway
(Python and pytest show such a half-built ``self`` in the traceback of the failing
``__init__``), and says what the env is where its constructor finished."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import pytest

from gymvec.envs.gym_env import GymEnv
from gymvec.envs.gym_vector_wrapper import GymVectorEnvWrapper
from gymvec.envs.parallel_env import ParallelEnv
from gymvec.envs.serial_env import SerialEnv
from gymvec.vector.dropin import ParallelVectorEnv, SerialVectorEnv


def _cartpole() -> gym.Env:
    return gym.make("CartPole-v1")


def _half_built(cls: type, *args: Any, **kwargs: Any) -> Any:
    """The object that ``cls(*args, **kwargs)`` left when its constructor raised, caught by a
    subclass that keeps ``self`` before the constructor runs."""
    kept = []

    class Kept(cls):  # type: ignore[misc, valid-type]
        def __init__(self, *a: Any, **k: Any) -> None:
            kept.append(self)
            super().__init__(*a, **k)

    Kept.__name__ = cls.__name__
    with pytest.raises(Exception):  # noqa: B017 (each case's own error; the repr is tested)
        Kept(*args, **kwargs)
    return kept[0]


# (class, arguments that make its constructor raise after it has set some attributes)
FAILING: dict[str, Callable[[], tuple[type, tuple, dict]]] = {
    "SerialVectorEnv": lambda: (SerialVectorEnv, ([_cartpole],), {"batch_size": 5}),
    "ParallelVectorEnv": lambda: (ParallelVectorEnv, ([_cartpole] * 2,), {"num_workers": 3}),
    "SerialEnv": lambda: (SerialEnv, (2, _cartpole), {"envs_per_worker": 0}),
    "ParallelEnv": lambda: (ParallelEnv, (2, _cartpole), {"envs_per_worker": 0}),
    "GymEnv": lambda: (GymEnv, ("NotARegisteredId-v0",), {}),
    "GymVectorEnvWrapper": lambda: (GymVectorEnvWrapper, (object(),), {}),
}


@pytest.mark.parametrize("name", sorted(FAILING))
def test_repr_of_an_env_whose_constructor_failed(name):
    cls, args, kwargs = FAILING[name]()
    env = _half_built(cls, *args, **kwargs)
    text = repr(env)
    assert text.startswith(f"<{name} (not fully built: ") and "has no attribute" in text


def _blocks() -> dict[str, Callable[[], tuple[type, tuple, dict]]]:
    """The Atari and PettingZoo blocks, with a constructor call that fails, where installed."""
    cases: dict[str, Callable[[], tuple[type, tuple, dict]]] = {}
    if importlib.util.find_spec("ale_py") and importlib.util.find_spec("cv2"):
        from gymvec.atari import AtariVectorEnv

        cases["AtariVectorEnv"] = lambda: (AtariVectorEnv, ("ALE/Pong-v5", 1), {"mode": 99})
    if importlib.util.find_spec("pettingzoo"):
        from gymvec.pettingzoo import AgentRowsBlock, EnvRowsBlock

        def failing_env() -> Any:
            raise RuntimeError("no env")

        cases["AgentRowsBlock"] = lambda: (AgentRowsBlock, (failing_env, 2), {})
        cases["EnvRowsBlock"] = lambda: (EnvRowsBlock, (failing_env, 2), {})
    return cases


BLOCKS = _blocks()


@pytest.mark.parametrize("name", sorted(BLOCKS))
def test_repr_of_a_block_whose_constructor_failed(name):
    cls, args, kwargs = BLOCKS[name]()
    text = repr(_half_built(cls, *args, **kwargs))
    assert text.startswith(f"<{name} (not fully built: ") and "has no attribute" in text


@pytest.mark.parametrize(
    "cls", [SerialVectorEnv, ParallelVectorEnv, SerialEnv, ParallelEnv, GymEnv, GymVectorEnvWrapper]
)
def test_repr_of_an_env_never_initialised(cls):
    text = repr(object.__new__(cls))
    assert text.startswith(f"<{cls.__name__} (not fully built: ")


def test_repr_of_built_envs_is_unchanged():
    env = SerialVectorEnv([_cartpole] * 2)
    try:
        assert repr(env) == (
            "SerialVectorEnv(BatchEngine(serial, num_envs=2, num_workers=1), "
            "autoreset_mode=NextStep)"
        )
    finally:
        env.close()
    batched = SerialEnv(2, _cartpole)
    try:
        assert repr(batched) == "SerialEnv(num_workers=2, envs_per_worker=1, device=cpu)"
    finally:
        batched.close()
