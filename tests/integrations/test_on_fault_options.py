"""``on_fault`` through the outer layers (API section 13): make_vec (and its auto layout),
gymnasium.make_vec, gymvec.sb3, gymvec.tianshou, gymvec.atari and gymvec.pettingzoo. A bad value
is a ValueError naming the choices, before any worker starts; a good one reaches the env, which
then heals a sub-env that raises."""

from __future__ import annotations

import functools
import multiprocessing

import gymnasium as gym
import numpy as np
import pytest
from _flaky_envs import FLAKY_ID, flaky_spread

import gymvec
from gymvec.common.faults import Restart

BAD = "retry"
CHOICES = r"on_fault: expected one of \('raise', 'restart'\) or a gymvec.Restart"


def _no_new_children(build) -> None:
    """``build()`` raises the choices' ValueError and leaves no child process behind."""
    before = {p.pid for p in multiprocessing.active_children()}
    with pytest.raises(ValueError, match=CHOICES):
        build()
    assert {p.pid for p in multiprocessing.active_children()} <= before


def _cartpole() -> gym.Env:
    return gym.make("CartPole-v1")


def _pz_env():
    from pettingzoo.mpe import simple_spread_v3  # noqa: F401  (skip if missing, below)

    return simple_spread_v3.parallel_env()


BUILDERS = {
    "make_vec": lambda: gymvec.make_vec("CartPole-v1", 2, on_fault=BAD),
    "make_vec parallel": lambda: gymvec.make_vec(
        "CartPole-v1", 2, backend="parallel", on_fault=BAD
    ),
    "make_vec bool": lambda: gymvec.make_vec("CartPole-v1", 2, on_fault=True),
    "gymnasium.make_vec": lambda: gym.make_vec("gymvec:gymvec/CartPole-v1", 2, on_fault=BAD),
    "ParallelVectorEnv": lambda: gymvec.ParallelVectorEnv([_cartpole] * 2, on_fault=BAD),
    "SerialVectorEnv": lambda: gymvec.SerialVectorEnv([_cartpole] * 2, on_fault=BAD),
}


@pytest.mark.parametrize("name", list(BUILDERS))
def test_a_bad_on_fault_is_refused_before_any_worker(name):
    _no_new_children(BUILDERS[name])


def test_the_trainers_drop_ins_refuse_a_bad_on_fault():
    sb3 = pytest.importorskip("gymvec.sb3")
    _no_new_children(lambda: sb3.SerialVecEnv([_cartpole] * 2, on_fault=BAD))
    _no_new_children(lambda: sb3.ParallelVecEnv([_cartpole] * 2, "fork", on_fault=BAD))


def test_tianshou_drop_ins_refuse_a_bad_on_fault():
    tianshou = pytest.importorskip("gymvec.tianshou")
    _no_new_children(lambda: tianshou.SerialVectorEnv([_cartpole] * 2, on_fault=BAD))
    _no_new_children(lambda: tianshou.ParallelVectorEnv([_cartpole] * 2, on_fault=BAD))


def test_atari_refuses_a_bad_on_fault_before_the_game_is_looked_up():
    from gymvec.atari import make_env, make_vec

    # (no ROM is needed: the option is checked first)
    _no_new_children(lambda: make_vec("ALE/Pong-v5", 2, on_fault=BAD))
    _no_new_children(lambda: make_env("ALE/Pong-v5", 2, on_fault=BAD))


def test_pettingzoo_refuses_a_bad_on_fault_before_an_env_is_built():
    from gymvec.pettingzoo import make_env, make_vec

    def never_built():
        raise AssertionError("the env was built before on_fault was checked")

    _no_new_children(lambda: make_vec(never_built, 2, on_fault=BAD))
    _no_new_children(lambda: make_env(never_built, 2, on_fault=BAD))


# ---- a good value reaches the env ------------------------------------------------------------
def _run_through_faults(envs) -> None:
    """Fault sub-env 1 twice (on demand) and check what ``envs`` reports of it."""
    envs.reset(seed=3)
    actions = np.zeros(envs.num_envs, dtype=np.int64)
    for _ in range(2):
        envs.step(actions)
        envs.set_attr("armed", [False, True, False])
        _, reward, terminated, truncated, infos = envs.step(actions)
        assert infos["_fault"].tolist() == [False, True, False]
        assert "RuntimeError: flaky sub-env" in infos["fault"][1]
        assert (truncated[1], terminated[1], reward[1]) == (True, False, 0.0)
    assert envs.restarts.tolist() == [0, 2, 0]
    assert [(f.sub_env, f.kind) for f in envs.faults] == [(1, "error"), (1, "error")]


@pytest.mark.parametrize(
    ("backend", "on_fault"),
    [("serial", "restart"), ("parallel", Restart(limit=5)), ("auto", "restart")],
)
def test_make_vec_takes_on_fault_to_the_env(backend, on_fault):
    options = {"context": "fork", "num_workers": 2} if backend == "parallel" else {}
    envs = gymvec.make_vec(FLAKY_ID, 3, backend=backend, on_fault=on_fault, **options)
    try:
        _run_through_faults(envs)
    finally:
        envs.close()


def test_gymnasium_make_vec_takes_on_fault_to_the_env():
    derived = "gymvec:gymvec-GymvecTest/FlakyCartPole-v0"
    envs = gym.make_vec(derived, 3, backend="serial", on_fault="restart")
    try:
        _run_through_faults(envs)
    finally:
        envs.close()


def test_without_on_fault_a_fault_still_raises():
    envs = gymvec.make_vec(FLAKY_ID, 3, backend="serial")
    try:
        envs.reset(seed=3)
        envs.set_attr("armed", [False, True, False])
        with pytest.raises(gymvec.WorkerError, match="flaky sub-env"):
            envs.step(np.zeros(3, dtype=np.int64))
    finally:
        envs.close()


def test_pettingzoo_heals_a_block_on_both_sides():
    """A block is one sub-env: its fault truncates all of its rows (agents, or envs)."""
    pytest.importorskip("mpe2")
    from gymvec.pettingzoo import make_env, make_vec

    env_fn = functools.partial(flaky_spread, 4)
    envs = make_vec(env_fn, 2, backend="serial", num_workers=2, on_fault="restart")
    try:
        envs.reset(seed=0)
        for _ in range(3):
            _, _, _, truncated, infos = envs.step(envs.action_space.sample())
            assert "fault" not in infos
        _, reward, _, truncated, infos = envs.step(envs.action_space.sample())
        assert infos["_fault"].all() and truncated.all() and not reward.any()
        assert envs.restarts.tolist() == [1, 1]
    finally:
        envs.close()
    env = make_env(env_fn, 2, backend="serial", num_workers=2, on_fault="restart")
    try:
        td = env.reset()
        for t in range(4):
            td, root = env.step_and_maybe_reset(env.rand_action(td))
            assert td["next", "fault"].reshape(-1).tolist() == [t == 3] * 2
            assert td["next", "truncated"].reshape(-1).tolist() == [t == 3] * 2
            td = root
        assert env.restarts.tolist() == [1, 1]
    finally:
        env.close()


def test_make_vec_takes_on_fault_to_ray_actors():
    ray = pytest.importorskip("ray")
    from test_ray import start_local_ray

    start_local_ray(num_cpus=2)
    try:
        envs = gymvec.make_vec(FLAKY_ID, 3, backend="ray", num_workers=2, on_fault="restart")
        try:
            _run_through_faults(envs)
        finally:
            envs.close()
    finally:
        ray.shutdown()
