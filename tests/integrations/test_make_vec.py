"""``gymvec.make_vec`` and gymvec's derived ids inside ``gymnasium.make_vec``."""

from __future__ import annotations

import copy

import _face_envs as fe
import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode, SyncVectorEnv

import gymvec
from gymvec import ParallelVectorEnv, SerialVectorEnv
from gymvec.layout.auto import AutoVectorEnv


def sync_reference(env_id, num_envs, **kwargs):
    return SyncVectorEnv([lambda: gym.make(env_id, **kwargs)] * num_envs)


@pytest.mark.parametrize("backend", ["serial", "parallel"])
def test_make_vec_equals_sync_vector_env(backend):
    env = gymvec.make_vec("Pendulum-v1", 2, backend=backend, max_episode_steps=4)
    assert isinstance(env, SerialVectorEnv if backend == "serial" else ParallelVectorEnv)
    assert env.spec.id == "Pendulum-v1"
    ref = sync_reference("Pendulum-v1", 2, max_episode_steps=4)
    ref.action_space.seed(1)
    fe.assert_same(env.reset(seed=1), ref.reset(seed=1), "reset")
    for t in range(6):  # the kwarg reached gym.make: episodes truncate after 4 steps
        actions = ref.action_space.sample()
        expected = ref.step(actions)
        fe.assert_same(env.step(actions), expected, f"step {t}")
        assert expected[3].tolist() == [t == 3] * 2
    env.close()
    ref.close()


def test_make_vec_options():
    env = gymvec.make_vec(
        "CartPole-v1", 2, backend="parallel", num_workers=1, autoreset_mode="same_step",
        output="torch", local_worker=False, context="fork",
    )  # fmt: skip
    assert env.metadata["autoreset_mode"] is AutoresetMode.SAME_STEP
    assert isinstance(env.reset(seed=0)[0], torch.Tensor)
    assert env.env.num_workers == 1
    env.close()
    with pytest.raises(ValueError, match="backend"):
        gymvec.make_vec("CartPole-v1", 2, backend="threads")
    with pytest.raises(ValueError, match="num_envs"):
        gymvec.make_vec("CartPole-v1", 0)
    with pytest.raises(gym.error.NameNotFound):
        gymvec.make_vec("NoSuchEnvAnywhere-v0", 1)


def test_make_vec_accepts_an_env_spec():
    spec = gym.spec("MountainCar-v0")
    env = gymvec.make_vec(spec, 2, backend="serial")
    assert env.spec == spec and env.num_envs == 2
    env.close()


@pytest.mark.parametrize("context", ["spawn", "fork"])
def test_id_registered_at_run_time_works_in_workers(context, no_leaks):
    """The id exists only in this process: the workers build the env from its EnvSpec."""
    env_id = f"GymvecRuntime/Rich-{context}-v0"
    gym.register(env_id, entry_point=fe.RichInfoEnv, max_episode_steps=3, kwargs={"tag": 1})
    try:
        env = gymvec.make_vec(env_id, 2, num_workers=2, local_worker=False, context=context)
        ref = SyncVectorEnv([lambda: gym.make(env_id)] * 2)
        fe.assert_same(env.reset(seed=4), ref.reset(seed=4), "reset")
        for t in range(6):
            actions = np.array([t % 3, 2])
            fe.assert_same(env.step(actions), ref.step(actions), f"step {t}")
        assert env.get_attr("tag") == (1, 1)
        env.close()
        ref.close()
    finally:
        del gym.registry[env_id]


# ---- gymnasium.make_vec ----------------------------------------------------------------
def test_gymnasium_make_vec_with_a_derived_id():
    before = copy.deepcopy(gym.spec("CartPole-v1"))
    env = gym.make_vec("gymvec:gymvec/CartPole-v1", num_envs=2, max_episode_steps=3)
    assert isinstance(env, AutoVectorEnv)  # make_vec's default backend, "auto"
    assert env.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP
    ref = sync_reference("CartPole-v1", 2, max_episode_steps=3)
    fe.assert_same(env.reset(seed=0), ref.reset(seed=0), "reset")
    for t in range(5):
        actions = np.array([0, 1])
        fe.assert_same(env.step(actions), ref.step(actions), f"step {t}")
    # gymnasium records the spec it was made from, which rebuilds the env
    assert env.spec.id == "gymvec/CartPole-v1"
    env.close()
    ref.close()
    rebuilt = gym.make_vec(env.spec, num_envs=2, backend="parallel")
    assert isinstance(rebuilt, ParallelVectorEnv) and rebuilt.num_envs == 2
    rebuilt.close()
    # the original id is untouched and keeps its own vector entry point
    assert gym.spec("CartPole-v1") == before
    native = gym.make_vec("CartPole-v1", num_envs=2)
    assert type(native).__name__ == "CartPoleVectorEnv"
    native.close()


def test_gymnasium_make_vec_passes_gymvec_options():
    env = gym.make_vec(
        "gymvec:gymvec/Acrobot-v1",
        num_envs=2,
        backend="serial",
        autoreset_mode="same_step",
        output="torch",
    )
    assert isinstance(env, SerialVectorEnv)
    assert env.metadata["autoreset_mode"] is AutoresetMode.SAME_STEP
    obs, _ = env.reset(seed=0)
    assert isinstance(obs, torch.Tensor) and obs.shape == (2, 6)
    env.close()
    with pytest.raises(gym.error.Error):  # gymnasium refuses vector_kwargs in this mode
        gym.make_vec("gymvec/Acrobot-v1", num_envs=2, vector_kwargs={"copy": False})


def test_register_vector_ids_covers_later_ids_and_touches_nothing_else():
    env_id = "GymvecRuntime/Late-v0"
    gymvec.register_vector_ids()  # ids other tests registered since gymvec's import
    gym.register(env_id, entry_point=fe.RichInfoEnv, max_episode_steps=2)
    snapshot = {
        key: copy.deepcopy(spec)
        for key, spec in gym.registry.items()
        if not key.startswith(("gymvec/", "gymvec-"))
    }
    try:
        added = gymvec.register_vector_ids()
        assert added == ["gymvec-GymvecRuntime/Late-v0"]
        assert gymvec.register_vector_ids() == []  # idempotent
        assert {
            key: spec
            for key, spec in gym.registry.items()
            if not key.startswith(("gymvec/", "gymvec-"))
        } == snapshot
        derived = gym.spec("gymvec-GymvecRuntime/Late-v0")
        assert derived.max_episode_steps == 2 and derived.kwargs == gym.spec(env_id).kwargs
        # its entry point builds the base's env (gymnasium.make's wrappers, the base's)
        assert isinstance(gym.make("gymvec-GymvecRuntime/Late-v0").unwrapped, fe.RichInfoEnv)
        env = gym.make_vec("gymvec-GymvecRuntime/Late-v0", num_envs=2, backend="serial")
        env.reset(seed=0)
        *_, truncations, _ = env.step(np.zeros(2, dtype=np.int64))
        *_, truncations, _ = env.step(np.zeros(2, dtype=np.int64))
        assert truncations.all()  # max_episode_steps of the base id
        env.close()
    finally:
        del gym.registry[env_id]
        gym.registry.pop("gymvec-GymvecRuntime/Late-v0", None)
