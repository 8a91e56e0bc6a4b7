"""``SerialVectorEnv`` and ``ParallelVectorEnv`` as drop-ins for gymnasium's Sync/AsyncVectorEnv.

One test (or a few) per behaviour that gymnasium's own ``tests/vector`` suite checks on its
classes and that applies to ours, written for gymvec: spaces, observation modes, attribute
access, rendering, seeding, metadata, autoreset modes, the async API with its errors and
timeouts, and closing. gymnasium's classes serve as the reference wherever they can.
"""

from __future__ import annotations

import functools
import multiprocessing
import re

import _envs
import _face_envs as fe
import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import AlreadyPendingCallError, ClosedEnvironmentError, NoAsyncCallError
from gymnasium.spaces import (
    Box,
    Dict,
    Discrete,
    MultiBinary,
    MultiDiscrete,
    Tuple,
)
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorWrapper
from gymnasium.vector.utils import batch_differing_spaces

from gymvec import ParallelVectorEnv, SerialVectorEnv, SpaceMismatchError

CLASSES = {
    "serial": SerialVectorEnv,
    "parallel": functools.partial(ParallelVectorEnv, context="fork"),
}
# gymnasium's tests build their envs with factories that seed the env and its action space
CARTPOLE_FNS = [functools.partial(fe.make_seeded, "CartPole-v1", i) for i in range(4)]


@pytest.fixture(params=list(CLASSES))
def vector_cls(request):
    return CLASSES[request.param]


# ---- spaces, reset and step outputs -------------------------------------------------------
@pytest.mark.parametrize(
    "env_id", ["CartPole-v1", "FrozenLake-v1", "Pendulum-v1", _envs.DICT_ENV_ID, "Taxi-v4"]
)
def test_spaces_equal_sync_and_outputs_have_their_types(vector_cls, env_id):
    fns = fe.env_fns(env_id, 2)
    ref, env = SyncVectorEnv(fns), vector_cls(fns)
    assert env.num_envs == 2
    assert env.single_observation_space == ref.single_observation_space
    assert env.observation_space == ref.observation_space
    assert env.single_action_space == ref.single_action_space
    assert env.action_space == ref.action_space
    obs, infos = env.reset(seed=0)
    assert isinstance(infos, dict)
    assert obs in env.observation_space
    if isinstance(env.observation_space, Box | MultiDiscrete):
        assert isinstance(obs, np.ndarray) and obs.dtype == env.observation_space.dtype
        assert obs.shape == env.observation_space.shape == (2, *env.single_observation_space.shape)
    actions = env.action_space.sample()
    if not isinstance(env.single_action_space, Dict):
        # a list of single actions works as well as a batched action
        actions = [env.single_action_space.sample() for _ in range(2)]
    obs, rewards, terminations, truncations, _ = env.step(actions)
    assert obs in env.observation_space
    assert rewards.shape == (2,) and rewards.dtype == np.float64
    assert terminations.shape == truncations.shape == (2,)
    assert terminations.dtype == truncations.dtype == np.bool_
    env.step(env.action_space.sample())
    env.close()
    ref.close()


SPACES = {
    "box-scalar": Box(-1.0, 1.0, shape=(), dtype=np.float64),
    "box-image": Box(0, 255, shape=(4, 4, 3), dtype=np.uint8),
    "box-float16": Box(-1.0, 1.0, shape=(3,), dtype=np.float16),
    "discrete-start": Discrete(5, start=-2),
    "multi-discrete": MultiDiscrete([3, 5, 7]),
    "multi-binary": MultiBinary(6),
    "tuple": Tuple((Discrete(3), Box(0.0, 1.0, shape=(2,), dtype=np.float64))),
    "nested-dict": Dict(
        {
            "position": Dict({"x": Discrete(29), "y": Discrete(31)}),
            "velocity": Tuple((Discrete(37), Box(0, 255, shape=(), dtype=np.uint8))),
        }
    ),
}


@pytest.mark.filterwarnings("ignore:.*Casting input x:UserWarning")  # SyncVectorEnv's, Box(())
@pytest.mark.parametrize("backend", ["serial", "parallel"])
@pytest.mark.parametrize("mode", list(AutoresetMode), ids=[m.value for m in AutoresetMode])
@pytest.mark.parametrize("space", list(SPACES.values()), ids=list(SPACES))
def test_observation_and_action_spaces_of_every_kind(space, mode, backend):
    """Observations and actions of each space type, equal to SyncVectorEnv's (SAME_STEP's
    final observations included), in every autoreset mode."""
    fns = [functools.partial(fe.make_spaces_env, space, space, length) for length in (2, 3)]
    make = CLASSES[backend]
    env = make(fns)
    assert env.observation_space == env.action_space == SyncVectorEnv(fns).action_space
    env.close()
    ends = fe.run_against_sync(make, fns, mode, steps=8)
    assert (ends >= 2).all()


# the final observations are the sub-envs' own, whose Box(shape=()) leaves are numpy scalars:
# gymnasium's Box.contains warns about those, for SyncVectorEnv's final_obs as well
@pytest.mark.filterwarnings("ignore:.*Casting input x to numpy array")
def test_same_step_final_obs_are_in_the_single_space(vector_cls):
    fns = [
        functools.partial(fe.make_spaces_env, space, Discrete(2), 2)
        for space in [SPACES["nested-dict"]] * 2
    ]
    env = vector_cls(fns, autoreset_mode=AutoresetMode.SAME_STEP)
    env.reset(seed=0)
    env.step(np.zeros(2, dtype=np.int64))
    *_, infos = env.step(np.zeros(2, dtype=np.int64))
    assert infos["_final_obs"].tolist() == [True, True]
    for final_obs in infos["final_obs"]:
        assert final_obs in env.single_observation_space
    env.close()


@pytest.mark.parametrize("loose", [False, True], ids=["float32-obs", "float64-obs"])
def test_same_step_final_obs_as_the_sub_envs_returned_them(vector_cls, loose):
    """An observation its buffer row holds exactly is read back from it; one it does not (a
    float64 array for a float32 space) travels as the object returned: either way
    ``final_obs`` equals SyncVectorEnv's, dtype included."""
    fns = [functools.partial(fe.make_loose_dtype, loose, length) for length in (2, 3, 2)]
    ends = fe.run_against_sync(vector_cls, fns, AutoresetMode.SAME_STEP, steps=7)
    assert (ends >= 2).all()
    env = vector_cls(fns, autoreset_mode=AutoresetMode.SAME_STEP)
    env.reset(seed=0)
    env.step(np.zeros(3, dtype=np.int64))
    *_, infos = env.step(np.zeros(3, dtype=np.int64))
    assert infos["_final_obs"].tolist() == [True, False, True]
    expected = np.float64 if loose else np.float32
    assert [obs.dtype for obs in infos["final_obs"][[0, 2]]] == [expected, expected]
    np.testing.assert_array_equal(infos["final_obs"][0], np.full(3, 2.1, expected))
    env.close()


# ---- observation_mode ---------------------------------------------------------------------
def bounds_fns(highs, sizes=(3, 3, 3)):
    return [functools.partial(fe.make_bounds, h, s) for h, s in zip(highs, sizes)]


def test_invalid_observation_mode(vector_cls):
    message = "Invalid `observation_mode`, expected: 'same' or 'different' or tuple of single"
    with pytest.raises(ValueError, match=re.escape(message)):
        vector_cls(bounds_fns([1, 1, 1]), observation_mode="invalid")


def test_same_mode_with_different_bounds_raises(vector_cls):
    with pytest.raises(RuntimeError, match="observation spaces are not equivalent. .*'different'"):
        vector_cls(bounds_fns([1, 2, 3]), observation_mode="same")


def test_different_mode_batches_differing_spaces(vector_cls):
    fns = bounds_fns([1, 2, 3])
    ref = SyncVectorEnv(fns, observation_mode="different")
    env = vector_cls(fns, observation_mode="different")
    assert env.observation_space == ref.observation_space
    assert env.observation_space == batch_differing_spaces([f().observation_space for f in fns])
    assert env.single_observation_space == Box(-1, 1, shape=(3,), dtype=np.float32)
    fe.assert_same(env.reset(seed=0), ref.reset(seed=0), "reset")
    actions = env.action_space.sample()
    fe.assert_same(env.step(actions), ref.step(actions), "step")
    env.close()
    ref.close()


def test_custom_observation_spaces(vector_cls):
    batched = Box(0.0, np.repeat(np.arange(1, 4), 3).reshape(3, 3), dtype=np.float32)
    single = Box(0.0, 1.0, shape=(3,), dtype=np.float32)
    env = vector_cls(bounds_fns([1, 2, 3]), observation_mode=(batched, single))
    assert env.observation_space is batched and env.single_observation_space is single
    obs, _ = env.reset(seed=0)
    assert obs.shape == (3, 3)
    env.step(env.action_space.sample())
    env.close()
    with pytest.raises(TypeError, match="to be Spaces"):
        vector_cls(bounds_fns([1, 1, 1]), observation_mode=(batched, "single"))


@pytest.mark.parametrize("mode", ["same", "different", "custom"])
def test_mismatched_shapes_or_space_types_raise_runtime_error(vector_cls, mode):
    custom = (Box(0, 4, shape=(3, 3)), Box(0, 4, shape=(3,)))
    observation_mode = custom if mode == "custom" else mode
    with pytest.raises(RuntimeError):
        vector_cls(bounds_fns([1, 1, 1], sizes=(1, 2, 3)), observation_mode=observation_mode)
    mixed = [fe.env_fns(env_id, 1)[0] for env_id in ("CartPole-v1", "FrozenLake-v1")]
    with pytest.raises(RuntimeError):
        vector_cls(mixed, observation_mode=observation_mode)


def test_mismatched_action_spaces_raise_runtime_error(vector_cls):
    fns = [functools.partial(fe.make_spaces_env, Discrete(3), Discrete(n)) for n in (2, 3)]
    with pytest.raises(RuntimeError) as info:
        vector_cls(fns)
    assert isinstance(info.value, SpaceMismatchError)


# ---- metadata and autoreset modes ---------------------------------------------------------
@pytest.mark.parametrize("mode", list(AutoresetMode), ids=[m.value for m in AutoresetMode])
def test_metadata_autoreset_mode_is_a_member_per_instance(vector_cls, mode):
    for given in (mode, mode.value, mode.name.lower()):
        env = vector_cls(fe.env_fns("CartPole-v1", 2), autoreset_mode=given)
        assert env.metadata["autoreset_mode"] is mode
        assert env.metadata["render_fps"] == 50  # the sub-envs' metadata, copied
        env.close()
    assert "autoreset_mode" not in gym.make("CartPole-v1").metadata
    with pytest.raises(ValueError, match="autoreset_mode"):
        vector_cls(fe.env_fns("CartPole-v1", 2), autoreset_mode="sometimes")


def test_metadata_not_shared_between_instances(vector_cls):
    first = vector_cls(fe.env_fns("CartPole-v1", 2), autoreset_mode=AutoresetMode.NEXT_STEP)
    second = vector_cls(fe.env_fns("CartPole-v1", 2), autoreset_mode=AutoresetMode.SAME_STEP)
    assert first.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
    assert second.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    first.close()
    second.close()


def count_env(vector_cls, mode):
    env = vector_cls([fe.make_count] * 3, autoreset_mode=mode)
    env.set_attr("max_count", [2, 3, 3])
    obs, infos = env.reset()
    assert obs.tolist() == [0, 0, 0] and infos == {}
    return env


def check_step(env, actions, obs, rewards, terminations):
    out = env.step(np.array(actions))
    assert out[0].tolist() == obs
    assert out[1].tolist() == rewards
    assert out[2].tolist() == terminations
    assert out[3].tolist() == [False] * 3
    return out[4]


def test_next_step_autoreset_by_hand(vector_cls):
    env = count_env(vector_cls, AutoresetMode.NEXT_STEP)
    assert check_step(env, [1, 2, 3], [1, 1, 1], [1, 2, 3], [False] * 3) == {}
    check_step(env, [1, 2, 3], [2, 2, 2], [1, 2, 3], [True, False, False])
    check_step(env, [1, 2, 3], [0, 3, 3], [0, 2, 3], [False, True, True])
    check_step(env, [1, 2, 3], [1, 0, 0], [1, 0, 0], [False] * 3)
    env.close()


def test_same_step_autoreset_by_hand(vector_cls):
    env = count_env(vector_cls, AutoresetMode.SAME_STEP)
    check_step(env, [1, 2, 3], [1, 1, 1], [1, 2, 3], [False] * 3)
    infos = check_step(env, [1, 2, 3], [0, 2, 2], [1, 2, 3], [True, False, False])
    assert infos["final_obs"].tolist() == [2, None, None]
    assert infos["_final_obs"].tolist() == infos["_final_info"].tolist() == [True, False, False]
    assert infos["final_info"] == {}
    infos = check_step(env, [1, 2, 3], [1, 0, 0], [1, 2, 3], [False, True, True])
    assert infos["final_obs"].tolist() == [None, 3, 3]
    env.close()


def test_next_step_ignores_the_actions_of_the_sub_envs_it_resets(vector_cls):
    """gymnasium passes a resetting sub-env's action nowhere, so its value cannot be wrong."""
    env = count_env(vector_cls, AutoresetMode.NEXT_STEP)
    check_step(env, [1, 2, 3], [1, 1, 1], [1, 2, 3], [False] * 3)
    check_step(env, [1, 2, 3], [2, 2, 2], [1, 2, 3], [True, False, False])
    check_step(env, [-1, 2, 3], [0, 3, 3], [0, 2, 3], [False, True, True])  # 0 resets
    with pytest.raises(ValueError, match=r"expected values in Discrete\(5\), got min 7 max 7"):
        env.step(np.array([7, 1, 1]))  # sub-env 0 steps: its action counts
    check_step(env, [1, 9, -4], [1, 0, 0], [1, 0, 0], [False] * 3)  # 1 and 2 reset
    env.close()


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_sub_envs_that_step_only_after_set_attr_equal_sync(vector_cls, mode):
    """gymvec probes a sub-env's infos at construction; a sub-env that cannot step yet is
    probed no further, and every output (final observations as the sub-envs returned them,
    Python ints here) still equals SyncVectorEnv's."""
    fns = [fe.make_unready] * 3
    ref, env = SyncVectorEnv(fns, autoreset_mode=mode), vector_cls(fns, autoreset_mode=mode)
    for vector_env in (ref, env):
        vector_env.set_attr("limit", [2, 3, 4])
    fe.assert_same(env.reset(seed=0), ref.reset(seed=0), "reset")
    for t in range(9):
        actions = np.array([t % 4, 1, 3])
        fe.assert_same(env.step(actions), ref.step(actions), f"step {t}")
    env.close()
    ref.close()


def test_sub_envs_that_reset_only_with_options_are_built(vector_cls):
    fns = [functools.partial(fe.make_unready, needs_options=True)] * 2
    ref, env = SyncVectorEnv(fns), vector_cls(fns)
    options = {"level": 1}
    fe.assert_same(env.reset(seed=3, options=options), ref.reset(seed=3, options=options))
    env.close()
    ref.close()


@pytest.mark.parametrize(
    "action_space",
    [
        Box(-2.0, 2.0, shape=(1,), dtype=np.float32),
        Box(-2.0, 2.0, shape=(), dtype=np.float32),
        Dict({"a": Box(-2.0, 2.0, shape=(2,), dtype=np.float32), "b": Discrete(3)}),
    ],
    ids=["box", "box-scalar", "dict"],
)
def test_float64_actions_reach_the_sub_envs_as_float64_like_sync(vector_cls, action_space):
    """gymnasium hands the caller's array items on: float64 actions of a float32 Box step the
    sub-envs unrounded (Pendulum's rewards differ otherwise). float32 ones stay float32."""
    fns = [functools.partial(fe.make_action_echo, action_space)] * 3
    ref, env = SyncVectorEnv(fns), vector_cls(fns)
    fe.assert_same(env.reset(seed=0), ref.reset(seed=0))
    rng = np.random.default_rng(0)
    for t in range(6):
        actions = rng.uniform(-2.0, 2.0, size=(3, 2) if isinstance(action_space, Dict) else (3,))
        dtype = np.float64 if t % 3 else np.float32  # float32 in between: back and forth
        if isinstance(action_space, Dict):
            actions = {"a": actions.astype(dtype), "b": np.array([0, 1, 2])}
        else:
            actions = actions.reshape(3, *action_space.shape).astype(dtype)
        fe.assert_same(env.step(actions), ref.step(actions), f"step {t}")
    env.close()
    ref.close()


def test_float64_actions_step_pendulum_exactly_as_sync(vector_cls):
    fns = fe.env_fns("Pendulum-v1", 3)
    ref, env = SyncVectorEnv(fns), vector_cls(fns)
    fe.assert_same(env.reset(seed=5), ref.reset(seed=5))
    rng = np.random.default_rng(1)
    for t in range(20):
        actions = rng.uniform(-2.0, 2.0, size=(3, 1))
        fe.assert_same(env.step(actions), ref.step(actions), f"step {t}")
    env.close()
    ref.close()


def test_a_scalar_action_is_a_type_error_and_a_wrong_count_a_value_error(vector_cls):
    env = vector_cls(fe.env_fns("CartPole-v1", 2))
    env.reset(seed=0)
    with pytest.raises(TypeError, match=r"actions: expected shape \(2,\) .* got shape \(\)"):
        env.step(0)
    with pytest.raises(ValueError, match=r"actions: expected shape \(2,\) .* got shape \(3,\)"):
        env.step(np.zeros(3, dtype=np.int64))
    env.step(np.zeros(2, dtype=np.int64))
    env.close()


def _spaces_fn(observation_space, action_space):
    return functools.partial(fe.make_spaces_env, observation_space, action_space)


BOX2 = Box(-1.0, 1.0, shape=(2,), dtype=np.float32)


SAME_WORDS = (
    "(..., observation_mode='same') however the sub-environments observation spaces are not "
    "equivalent."
)
ACTION_WORDS = "Sub-environment action space doesn't make the `single_action_space`"
PLAIN = _spaces_fn(BOX2, Discrete(2))


@pytest.mark.parametrize(
    "first, other, observation_mode, words",
    [
        (fe.env_fns("CartPole-v1", 1)[0], fe.env_fns("FrozenLake-v1", 1)[0], "same", SAME_WORDS),
        (PLAIN, _spaces_fn(Dict({"a": BOX2}), Discrete(2)), "same", SAME_WORDS),
        (
            PLAIN,
            _spaces_fn(Box(-1.0, 1.0, shape=(3,), dtype=np.float32), Discrete(2)),
            "different",
            "(..., observation_mode='different' or custom space) however the sub-environments "
            "observation spaces do not share a common shape and dtype",
        ),
        (PLAIN, _spaces_fn(BOX2, BOX2), "same", ACTION_WORDS),
        (PLAIN, _spaces_fn(BOX2, Discrete(3)), "same", ACTION_WORDS),  # same shape and dtype
    ],
    ids=["obs-shape", "obs-keys", "different-shapes", "action-shape", "action-range"],
)
def test_mismatched_sub_env_spaces_raise_in_gymnasiums_words(
    vector_cls, first, other, observation_mode, words, no_leaks
):
    """gymnasium raises a RuntimeError with these words (its tests match them, with its class
    name); gymvec's SpaceMismatchError is one, and a ValueError."""
    with pytest.raises(SpaceMismatchError, match=re.escape(words)) as caught:
        vector_cls([first, other, first], observation_mode=observation_mode)
    assert isinstance(caught.value, RuntimeError)
    if words != ACTION_WORDS:
        cls = getattr(vector_cls, "func", vector_cls)  # the parallel one is a partial
        name = {SerialVectorEnv: "SyncVectorEnv", ParallelVectorEnv: "AsyncVectorEnv"}[cls]
        assert f"{cls.__name__}, gymvec's {name}: {name}{words}" in str(caught.value)


def test_disabled_autoreset_by_hand(vector_cls):
    env = count_env(vector_cls, AutoresetMode.DISABLED)
    check_step(env, [1, 2, 3], [1, 1, 1], [1, 2, 3], [False] * 3)
    check_step(env, [1, 2, 3], [2, 2, 2], [1, 2, 3], [True, False, False])
    obs, infos = env.reset(options={"reset_mask": np.array([True, False, False])})
    assert obs.tolist() == [0, 2, 2] and infos == {}
    check_step(env, [1, 2, 3], [1, 3, 3], [1, 2, 3], [False, True, True])
    obs, _ = env.reset(seed=[9, 4, 5], options={"reset_mask": np.array([False, True, True])})
    assert obs.tolist() == [1, 4, 5]  # seeds reach only the masked sub-envs
    env.close()


# ---- attributes, calls, rendering ---------------------------------------------------------
def test_call_get_attr_set_attr(vector_cls):
    env = vector_cls(fe.env_fns(_envs.DICT_ENV_ID, 4, render_mode="rgb_array_list"))
    env.reset(seed=0)
    images = env.call("render")
    assert isinstance(images, tuple) and len(images) == 4
    assert all(len(frames) == 1 and isinstance(frames[0], np.ndarray) for frames in images)
    env.close()
    env = vector_cls(fe.env_fns("CartPole-v1", 4))
    gravity = env.call("gravity")
    assert gravity == (9.8,) * 4 and all(isinstance(g, float) for g in gravity)
    env.set_attr("gravity", [9.81, 3.72, 8.87, 1.62])
    assert env.get_attr("gravity") == (9.81, 3.72, 8.87, 1.62)
    env.set_attr("gravity", (1.0, 2.0, 3.0, 4.0))
    assert env.get_attr("gravity") == (1.0, 2.0, 3.0, 4.0)
    env.set_attr("gravity", 5.0)  # one value for every sub-env
    assert env.get_attr("gravity") == (5.0,) * 4
    with pytest.raises(ValueError, match=re.escape("Got `3` values for 4 environments.")):
        env.set_attr("gravity", [1.0, 2.0, 3.0])
    assert env.call("get_wrapper_attr", "length") == (0.5,) * 4  # methods with arguments
    env.close()


def test_serial_envs_are_the_sub_envs():
    fns = fe.env_fns("CartPole-v1", 2)
    env = SerialVectorEnv(fns)
    assert len(env.envs) == 2 and all(isinstance(sub, gym.Env) for sub in env.envs)
    env.envs[1].unwrapped.gravity = 3.0
    assert env.get_attr("gravity") == (9.8, 3.0)
    assert env.env_fns == fns and env.copy is True and env.observation_mode == "same"
    env.close()


def test_call_of_a_missing_attribute_raises_and_env_stays_usable(vector_cls):
    env = vector_cls(fe.env_fns("CartPole-v1", 2))
    env.reset(seed=0)
    with pytest.raises(AttributeError, match="no_such_attribute"):
        env.call("no_such_attribute")
    with pytest.raises(AttributeError, match="no_such_attribute"):
        env.get_attr("no_such_attribute")
    assert env.get_attr("gravity") == (9.8, 9.8)
    env.step(np.zeros(2, dtype=np.int64))
    env.close()


def test_set_attr_reaches_wrapped_attributes_like_sync(vector_cls):
    """``set_attr`` sets the attribute where gymnasium's ``set_wrapper_attr`` puts it."""
    fns = fe.env_fns("CartPole-v1", 2)
    ref, env = SyncVectorEnv(fns), vector_cls(fns)
    for target in (ref, env):
        target.set_attr("gravity", [1.5, 2.5])
        target.set_attr("_max_episode_steps", 3)
        target.reset(seed=0)
        assert target.step(np.zeros(2, dtype=np.int64))[3].tolist() == [False, False]
        target.step(np.zeros(2, dtype=np.int64))
        assert target.step(np.zeros(2, dtype=np.int64))[3].tolist() == [True, True]
    assert env.get_attr("gravity") == ref.get_attr("gravity") == (1.5, 2.5)
    env.close()
    ref.close()


def test_render_rgb_array(vector_cls):
    env = vector_cls(fe.env_fns(_envs.DICT_ENV_ID, 3, render_mode="rgb_array"))
    assert env.render_mode == "rgb_array"
    env.reset(seed=0)
    frames = env.render()
    assert isinstance(frames, tuple) and len(frames) == 3
    assert all(isinstance(frame, np.ndarray) and frame.shape == (4, 4, 3) for frame in frames)
    env.close()
    env = vector_cls(fe.env_fns(_envs.DICT_ENV_ID, 3))
    assert env.render_mode is None
    env.close()


def test_vector_wrapper_forwards_to_the_env(vector_cls):
    env = vector_cls(fe.env_fns("CartPole-v1", 2))
    wrapped = VectorWrapper(env)
    assert wrapped.metadata == env.metadata
    assert wrapped.observation_space == env.observation_space
    wrapped.env.set_attr("gravity", [20.0, 20.0])
    assert wrapped.env.get_attr("gravity") == (20.0, 20.0)
    assert wrapped.unwrapped is env
    wrapped.reset(seed=0)
    wrapped.close()
    assert env.closed


# ---- seeding ------------------------------------------------------------------------------
def test_np_random_seed_tuple(vector_cls):
    ref, env = SyncVectorEnv(CARTPOLE_FNS), vector_cls(CARTPOLE_FNS)
    assert env.np_random_seed == ref.np_random_seed == (0, 1, 2, 3)  # seeded by the factories
    for seed in (42, None, [7, None, 9, 10], None):
        expected_obs, _ = ref.reset(seed=seed)
        obs, _ = env.reset(seed=seed)
        np.testing.assert_array_equal(obs, expected_obs)
        assert isinstance(env.np_random_seed, tuple)
        assert env.np_random_seed == ref.np_random_seed, seed
    assert env.np_random_seed == (7, 43, 9, 10)
    assert isinstance(env.np_random, tuple) and len(env.np_random) == 4
    assert all(isinstance(rng, np.random.Generator) for rng in env.np_random)
    assert [rng.bit_generator.state for rng in env.np_random] == [
        rng.bit_generator.state for rng in ref.np_random
    ]
    env.close()
    ref.close()


def test_seeded_runs_repeat_and_action_space_seeding_matches_sync(vector_cls):
    runs = []
    for _ in range(2):
        env = vector_cls(CARTPOLE_FNS)
        env.action_space.seed(5)
        trace = [env.reset(seed=3)[0]]
        for _ in range(10):
            trace.append(env.step(env.action_space.sample())[0])
        runs.append(np.stack(trace))
        env.close()
    np.testing.assert_array_equal(runs[0], runs[1])
    ref = SyncVectorEnv(CARTPOLE_FNS)
    ref.action_space.seed(5)
    env = vector_cls(CARTPOLE_FNS)
    env.action_space.seed(5)
    for _ in range(5):
        np.testing.assert_array_equal(env.action_space.sample(), ref.action_space.sample())
    env.close()
    ref.close()


# ---- the async API (ParallelVectorEnv) ----------------------------------------------------
def parallel(env_fns, **kwargs):
    return ParallelVectorEnv(env_fns, context="fork", **kwargs)


def test_async_calls_equal_their_blocking_versions():
    ref = SyncVectorEnv(CARTPOLE_FNS)
    env = parallel(CARTPOLE_FNS, num_workers=2)
    env.reset_async(seed=1)
    fe.assert_same(env.reset_wait(), ref.reset(seed=1), "reset")
    env.reset_async(1, {"unused": True})  # gymnasium's positional order: seed, options
    fe.assert_same(env.reset_wait(timeout=10), ref.reset(seed=1, options={"unused": True}), "r")
    for t in range(5):
        actions = np.array([t % 2, 1, 0, 1])
        env.step_async(actions)
        fe.assert_same(env.step_wait(timeout=10), ref.step(actions), f"step {t}")
    env.call_async("gravity")
    assert env.call_wait(timeout=10) == (9.8,) * 4
    env.call_async("get_wrapper_attr", "length")
    assert env.call_wait() == (0.5,) * 4
    env.close()
    ref.close()


def test_wait_without_a_call_raises_no_async_call_error():
    env = parallel(CARTPOLE_FNS, num_workers=2)
    for call in ("reset", "step", "call"):
        message = f"Calling `{call}_wait` without any prior call to `{call}_async`."
        with pytest.raises(NoAsyncCallError, match=re.escape(message)):
            getattr(env, f"{call}_wait")()
    env.reset()
    with pytest.raises(NoAsyncCallError):
        env.step_wait()
    env.close()


@pytest.mark.parametrize("pending", ["reset", "step", "call"])
def test_a_second_call_while_one_is_pending_raises_already_pending(pending):
    env = parallel(CARTPOLE_FNS, num_workers=2)
    env.reset(seed=0)
    start = {
        "reset": lambda: env.reset_async(),
        "step": lambda: env.step_async(np.zeros(4, dtype=np.int64)),
        "call": lambda: env.call_async("gravity"),
    }
    start[pending]()
    for other in ("reset", "step", "call"):
        message = f"Calling `{other}_async` while waiting for a pending call to `{pending}`"
        with pytest.raises(AlreadyPendingCallError, match=re.escape(message)):
            start[other]()
    with pytest.raises(AlreadyPendingCallError):
        env.reset()
    with pytest.raises(AlreadyPendingCallError):
        env.set_attr("gravity", 1.0)
    getattr(env, f"{pending}_wait")()  # the pending call still completes
    env.step(np.zeros(4, dtype=np.int64))
    env.close()


def test_step_wait_timeout_then_a_further_wait_succeeds(no_leaks):
    env = parallel([fe.make_slow] * 2, num_workers=2, local_worker=False)
    env.reset()
    env.step_async(np.array([0.5, 0.0], dtype=np.float32))
    with pytest.raises(multiprocessing.TimeoutError, match="`step_wait` has timed out"):
        env.step_wait(timeout=0.05)
    obs, rewards, *_ = env.step_wait(timeout=30)  # the same step, now finished
    np.testing.assert_array_equal(obs, np.full((2, 1), 0.01, dtype=np.float32))
    assert rewards.tolist() == [1.0, 1.0]
    env.step(np.zeros(2, dtype=np.float32))
    env.close()


def test_the_local_share_counts_against_the_timeout_and_the_wait_resumes(no_leaks):
    """With ``local_worker`` this process steps a share inside the wait, which cannot be cut
    short; a wait that outlasts its timeout still raises, and the next wait finishes the call."""
    env = parallel([functools.partial(fe.make_slow, 0.3)] * 2, num_workers=2, local_worker=True)
    env.reset_async(seed=0)
    with pytest.raises(multiprocessing.TimeoutError, match="`reset_wait` has timed out"):
        env.reset_wait(timeout=0.05)
    obs, _ = env.reset_wait(timeout=30)
    np.testing.assert_array_equal(obs, np.zeros((2, 1), dtype=np.float32))
    env.step_async(np.array([0.3, 0.0], dtype=np.float32))  # sub-env 0 is the local share
    with pytest.raises(multiprocessing.TimeoutError, match="`step_wait` has timed out"):
        env.step_wait(timeout=0.05)
    obs, rewards, *_ = env.step_wait()
    np.testing.assert_array_equal(obs, np.full((2, 1), 0.01, dtype=np.float32))
    env.step_async(np.zeros(2, dtype=np.float32))
    assert env.step_wait(timeout=30)[1].tolist() == [1.0, 1.0]  # a quick step: no timeout
    env.close()


def test_reset_wait_timeout_then_close_terminate(no_leaks):
    env = parallel([functools.partial(fe.make_slow, 0.5)] * 2, num_workers=2, local_worker=False)
    env.reset_async()
    with pytest.raises(multiprocessing.TimeoutError, match="`reset_wait` has timed out"):
        env.reset_wait(timeout=0.05)
    with pytest.warns(UserWarning, match=re.escape("pending call to `reset` to complete.")):
        env.close(terminate=True)
    assert env.closed


def test_close_while_a_step_is_pending_waits_for_it(no_leaks):
    env = parallel(CARTPOLE_FNS, num_workers=2, local_worker=False)
    env.reset()
    env.step_async(np.zeros(4, dtype=np.int64))
    with pytest.warns(UserWarning, match=re.escape("pending call to `step` to complete.")):
        env.close()
    assert env.closed
    env.close()  # closing twice is harmless


def test_closed_env_raises_closed_environment_error(vector_cls):
    env = vector_cls(fe.env_fns("CartPole-v1", 2))
    env.reset()
    env.close()
    with pytest.raises(ClosedEnvironmentError):
        env.reset()
    with pytest.raises(ClosedEnvironmentError):
        env.step(np.zeros(2, dtype=np.int64))
    with pytest.raises(ClosedEnvironmentError):
        env.call("gravity")
    if isinstance(env, ParallelVectorEnv):
        with pytest.raises(ClosedEnvironmentError):
            env.step_async(np.zeros(2, dtype=np.int64))
        with pytest.raises(ClosedEnvironmentError):
            env.step_wait()


def test_default_num_workers_fits_any_number_of_sub_envs(no_leaks):
    env = parallel(fe.env_fns("CartPole-v1", 3))
    assert env.num_envs == 3
    obs, _ = env.reset(seed=0)
    assert obs.shape == (3, 4)
    env.close()
    with pytest.raises(ValueError, match=r"num_workers: expected at most one worker per sub-env"):
        parallel(fe.env_fns("CartPole-v1", 3), num_workers=4)


@pytest.mark.parametrize("local_worker", [True, False])
def test_sub_envs_that_do_not_divide_evenly_spread_over_every_worker(local_worker, no_leaks):
    # 5 sub-envs on 2 workers: 2 in worker 0, 3 in worker 1 (no longer one worker for all)
    fns = [functools.partial(fe.make_seeded, "CartPole-v1", i) for i in range(5)]
    env = parallel(fns, num_workers=2, local_worker=local_worker)
    assert env.env.worker_bounds == [(0, 2), (2, 5)]
    pids = env.engine.request("apply", fn=_envs.getpid)
    assert len(set(pids[:2])) == 1 and len(set(pids[2:])) == 1 and pids[0] != pids[2]
    ref = SyncVectorEnv(fns)
    ref.action_space.seed(1)
    np.testing.assert_array_equal(env.reset(seed=4)[0], ref.reset(seed=4)[0])
    ends = 0
    for _ in range(60):
        action = ref.action_space.sample()
        expected = ref.step(action)
        fe.assert_same(env.step(action), expected, "step", fe.EPISODE_TIME)
        ends += int(expected[2].sum() + expected[3].sum())
    assert ends >= 2
    env.close()
    ref.close()


@pytest.mark.parametrize("bad", [0, -1, 2.5, "2"])
def test_bad_max_concurrency_raises(bad):
    with pytest.raises(ValueError, match="max_concurrency"):
        parallel(fe.env_fns("CartPole-v1", 2), max_concurrency=bad)


@pytest.mark.parametrize(
    "make, error, message",
    [
        (lambda: SerialVectorEnv([]), TypeError, "env_fns: expected a non-empty sequence"),
        (lambda: ParallelVectorEnv([1, 2]), TypeError, "env_fns: expected a non-empty sequence"),
        (
            lambda: ParallelVectorEnv(fe.env_fns("CartPole-v1", 2), num_workers=0),
            ValueError,
            "num_workers: expected a positive int, got 0",
        ),
        (
            lambda: SerialVectorEnv(fe.env_fns("CartPole-v1", 2), output="jax"),
            ValueError,
            "output: expected 'numpy' or 'torch', got 'jax'",
        ),
    ],
)
def test_bad_constructor_arguments_raise_named_errors(make, error, message, no_leaks):
    with pytest.raises(error, match=message):
        make()


def test_gymnasium_constructor_arguments_are_accepted(no_leaks):
    env = ParallelVectorEnv(
        fe.env_fns("CartPole-v1", 2),
        shared_memory=True,
        copy=False,
        context="spawn",
        daemon=True,
        worker=None,
        observation_mode="same",
        autoreset_mode="SameStep",
        max_concurrency=1,
    )
    obs, _ = env.reset(seed=0)
    assert obs.shape == (2, 4)
    env.close()
    with pytest.raises(ValueError, match="worker"):
        parallel(fe.env_fns("CartPole-v1", 2), worker=lambda *args: None)


@pytest.mark.parametrize("make", [SerialVectorEnv, ParallelVectorEnv])
def test_reset_options_that_are_not_a_dict_are_refused_by_name(make, no_leaks):
    envs = make([lambda: gym.make("CartPole-v1")] * 2)
    try:
        with pytest.raises(TypeError, match=r"options: expected a dict or None, got 'notadict'"):
            envs.reset(options="notadict")
        obs, _ = envs.reset(seed=0)  # nothing was sent: the env goes on
        assert obs.shape == (2, 4)
    finally:
        envs.close()
