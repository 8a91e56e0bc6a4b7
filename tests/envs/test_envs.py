"""GymEnv against gymnasium by hand, infos, seeding, rendering and input checks."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from _envs import DICT_ENV_ID, DictEnv, MisshapenEnv, obs_leaves
from _td_envs import CounterEnv
from tensordict import TensorDict

from gymvec import ClosedEnvError, GymEnv, ParallelEnv, SerialEnv, step_mdp

ENV_IDS = ["CartPole-v1", "Pendulum-v1", DICT_ENV_ID]


# ---- helpers ----------------------------------------------------------------------------------
def assert_obs_equal(td, obs) -> None:
    leaves = obs_leaves(obs)
    for key, expected in leaves.items():
        got = td.get(key).numpy()
        assert got.dtype == expected.dtype, key
        np.testing.assert_array_equal(got, expected, err_msg=str(key))


def gym_action(env: gym.Env, action) -> object:
    """A tensordict action entry as the gymnasium env takes it."""
    space = env.action_space
    if isinstance(space, gym.spaces.Dict):
        return {name: gym_action_leaf(space[name], action.get(name)) for name in space}
    return gym_action_leaf(space, action)


def gym_action_leaf(space, value: torch.Tensor):
    if isinstance(space, gym.spaces.Discrete):
        return int(value.item())
    return value.numpy().astype(space.dtype)


# ---- rollouts equal gymnasium by hand ---------------------------------------------------------
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_rollout_matches_gymnasium_by_hand(env_id):
    kwargs = {"max_episode_steps": 60} if env_id == "Pendulum-v1" else {}
    env = GymEnv(env_id, **kwargs)
    env.set_seed(7)
    torch.manual_seed(0)
    rollout = env.rollout(500, break_when_any_done=False)
    assert rollout.batch_size == torch.Size([500])

    ref = gym.make(env_id, **kwargs)
    obs, _ = ref.reset(seed=7)
    episode_ends = 0
    for t in range(500):
        step = rollout[t]
        assert_obs_equal(step, obs)
        obs, reward, terminated, truncated, _ = ref.step(gym_action(ref, step.get("action")))
        nxt = step.get("next")
        assert_obs_equal(nxt, obs)
        assert nxt.get("reward").item() == pytest.approx(reward, rel=1e-6, abs=1e-6)
        assert nxt.get("terminated").item() == terminated
        assert nxt.get("truncated").item() == truncated
        assert nxt.get("done").item() == (terminated or truncated)
        if terminated or truncated:
            episode_ends += 1
            obs, _ = ref.reset()
    assert episode_ends >= 2  # the comparison crossed episode ends
    env.close()


def test_step_keys_shapes_and_dtypes():
    env = GymEnv(DICT_ENV_ID)
    td = env.step(env.rand_action(env.reset()))
    nxt = td.get("next")
    assert nxt.get("reward").shape == (1,) and nxt.get("reward").dtype == torch.float32
    for flag in ("done", "terminated", "truncated"):
        assert nxt.get(flag).shape == (1,) and nxt.get(flag).dtype == torch.bool
        assert td.get(flag).shape == (1,)
    assert td.device == nxt.device == torch.device("cpu")
    assert nxt.get(("sensors", "heat")).dtype == torch.float64
    assert nxt.get(("sensors", "flags")).dtype == torch.int8
    assert env.observation_spec.is_in(nxt.select(*env.observation_spec.keys()))
    root = step_mdp(td)
    assert "reward" not in root.keys()
    assert torch.equal(root.get("position"), nxt.get("position"))


@pytest.mark.parametrize("cls", [GymEnv, SerialEnv])
def test_step_sets_next_into_any_kind_of_tensordict(cls):
    """The fast set of "next" (same batch size and device) and td.set's other cases agree."""
    env = GymEnv("CartPole-v1") if cls is GymEnv else SerialEnv(2, lambda: GymEnv("CartPole-v1"))
    root = env.reset()
    kinds = {
        "same": root.clone(),
        "no device": TensorDict(root.to_dict(), batch_size=root.batch_size),
        "no batch": TensorDict(root.to_dict(), batch_size=[]),
    }
    for kind, td in kinds.items():
        td.set("action", env.action_spec.zero())
        out = env.step(td)
        assert out is td, kind
        nxt = td.get("next")
        assert nxt.batch_size == env.batch_size and nxt.device == torch.device("cpu"), kind
        assert set(nxt.keys()) >= {"observation", "reward", "done"}, kind
    locked = root.clone()
    locked.set("action", env.action_spec.zero())
    locked.lock_()
    with pytest.raises(RuntimeError, match="locked"):
        env.step(locked)
    env.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_set_seed_then_reset_equals_gymnasium_reset_seed(env_id):
    env = GymEnv(env_id)
    for seed in (0, 123):
        env.set_seed(seed)
        td = env.reset()
        obs, _ = gym.make(env_id).reset(seed=seed)
        assert_obs_equal(td, obs)
    # the seed is used once: the next reset continues the generator, as gymnasium's does
    ref = gym.make(env_id)
    ref.reset(seed=123)
    assert_obs_equal(env.reset(), ref.reset()[0])


def test_set_seed_refuses_a_list_of_seeds():
    # one env: a list is refused at set_seed (gymnasium would refuse it only at the reset)
    env = GymEnv("CartPole-v1")
    with pytest.raises(TypeError, match="one env"):
        env.set_seed([1, 2])
    env.set_seed(4)
    obs, _ = gym.make("CartPole-v1").reset(seed=4)
    assert_obs_equal(env.reset(), obs)
    env.close()


def _push_right(td):
    return td.set("action", torch.ones(td.batch_size, dtype=torch.int64))


def _balance(td):  # push towards the side the pole leans to: episodes last long
    return td.set("action", (td.get("observation")[..., 2] > 0).long())


def test_rollout_stops_at_the_first_done():
    env = SerialEnv(2, lambda: GymEnv("CartPole-v1"))
    env.set_seed(3)
    rollout = env.rollout(500, policy=_push_right)  # the pole falls within a few dozen steps
    done = rollout.get(("next", "done"))
    assert 1 < rollout.batch_size[1] < 500
    assert done[:, -1].any() and not done[:, :-1].any()
    # each step starts where the last one ended (step_mdp between steps)
    assert (rollout.get("observation")[:, 1:] == rollout.get(("next", "observation"))[:, :-1]).all()
    env.close()


def test_rollout_without_auto_reset_continues_from_the_given_tensordict():
    env = SerialEnv(2, lambda: GymEnv("CartPole-v1"))
    env.set_seed(3)
    whole = env.rollout(6, policy=_balance, break_when_any_done=False)
    env.set_seed(3)
    first = env.rollout(3, policy=_balance, break_when_any_done=False)
    assert not first.get(("next", "done")).any()
    then = env.rollout(3, _balance, False, auto_reset=False, tensordict=step_mdp(first[:, -1]))
    assert (torch.cat([first, then], dim=1) == whole).all()
    with pytest.raises(ValueError, match="auto_reset=False.*needs a tensordict"):
        env.rollout(3, auto_reset=False)
    env.close()


def test_env_instance_and_runtime_registered_id():
    env_id = "GymvecTest/RuntimeDict-v3"
    gym.register(env_id, entry_point=DictEnv, kwargs={"max_steps": 4})
    try:
        env = GymEnv(env_id)
        env.set_seed(1)
        td = env.rollout(4, break_when_any_done=False)
        assert td.get(("next", "truncated"))[-1].item()  # max_steps came from the registration
        wrapped = GymEnv(gym.make(env_id))
        wrapped.set_seed(1)
        assert_obs_equal(wrapped.reset(), gym.make(env_id).reset(seed=1)[0])
    finally:
        gym.registry.pop(env_id)


def test_make_kwargs_need_an_id():
    with pytest.raises(TypeError, match="make kwargs"):
        GymEnv(gym.make("CartPole-v1"), max_episode_steps=3)
    with pytest.raises(TypeError, match="gymnasium.Env"):
        GymEnv(object())


# ---- infos ------------------------------------------------------------------------------------
def test_numeric_infos_become_keys_and_the_rest_stays_reachable():
    env = GymEnv(DICT_ENV_ID, max_steps=5)
    assert set(env.info_spec.keys()) == set()  # learnt from the first results, not a probe
    env.set_seed(3)
    root = env.reset()
    assert set(env.info_spec.keys()) == {"steps", "speed", "inside", "vector"}
    assert root.get(("info", "steps")).item() == 0
    assert env.last_reset_info["phase"] == "run"
    ref = gym.make(DICT_ENV_ID, max_steps=5)
    ref.reset(seed=3)
    td = root
    for _ in range(5):
        td = env.rand_action(td)
        td = env.step(td)
        _, _, _, _, info = ref.step(gym_action(ref, td.get("action")))
        nxt = td.get("next")
        assert nxt.get(("info", "steps")).item() == info["steps"]
        assert nxt.get(("info", "speed")).item() == info["speed"]
        assert nxt.get(("info", "inside")).item() == info["inside"]
        np.testing.assert_array_equal(nxt.get(("info", "vector")).numpy(), info["vector"])
        # strings, nested dicts and late keys are not keys, but nothing is lost
        assert env.last_step_info["detail"] == info["detail"]
        assert env.last_step_info["phase"] == info["phase"]
        if nxt.get("done").item():
            break
        td = step_mdp(td)
    assert nxt.get("done").item()
    assert env.last_step_info["bonus"] == 1.5
    assert env.last_step_info.keys() == info.keys()


def test_record_episode_statistics_episode_info_is_reachable():
    env = GymEnv(gym.wrappers.RecordEpisodeStatistics(gym.make("CartPole-v1")))
    env.set_seed(0)
    td = env.reset()
    length = 0
    while True:
        td = env.step(env.rand_action(td))
        length += 1
        if td.get(("next", "done")).item():
            break
        td = step_mdp(td)
    episode = env.last_step_info["episode"]
    assert episode["l"] == length
    assert episode["r"] == pytest.approx(float(length))


class _StepOnlyInfo(gym.Wrapper):
    """An info entry that only steps report."""

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated, truncated, {**info, "effort": 0.5}


def test_info_fields_first_seen_at_the_first_step_stack_in_a_rollout():
    env = GymEnv(_StepOnlyInfo(gym.make("CartPole-v1")))
    env.set_seed(0)
    rollout = env.rollout(5, break_when_any_done=False)
    assert set(env.info_spec.keys()) == {"effort"}
    assert rollout.get(("info", "effort")).tolist() == [0.0, 0.5, 0.5, 0.5, 0.5]
    assert rollout.get(("next", "info", "effort")).tolist() == [0.5] * 5


def test_declared_info_fields():
    env = GymEnv(DICT_ENV_ID, probe_infos=False, info_fields={"steps": 0})
    assert set(env.info_spec.keys()) == {"steps"}
    td = env.step(env.rand_action(env.reset()))
    assert td.get(("next", "info", "steps")).item() == 1
    with pytest.raises(ValueError, match="info_fields"):
        GymEnv(DICT_ENV_ID, probe_infos=False, info_fields={"phase": "a string"})


def test_render_passthrough():
    env = GymEnv(DICT_ENV_ID, render_mode="rgb_array")
    assert env.render_mode == "rgb_array"
    env.set_seed(0)
    env.reset()
    ref = gym.make(DICT_ENV_ID, render_mode="rgb_array")
    ref.reset(seed=0)
    np.testing.assert_array_equal(env.render(), ref.render())
    assert env.render().shape == (4, 4, 3)
    assert GymEnv(DICT_ENV_ID).render_mode is None
    env.close()


# ---- bad input --------------------------------------------------------------------------------
BAD_ACTIONS = [
    ("CartPole-v1", torch.tensor([1]), "shape \\(1,\\)"),
    ("CartPole-v1", torch.tensor(1.0), "float32"),
    ("CartPole-v1", torch.tensor(1, dtype=torch.int32), "int32"),
    ("CartPole-v1", torch.tensor(2), "outside"),
    ("CartPole-v1", torch.tensor(-1), "outside"),
    ("Pendulum-v1", torch.tensor([2.5]), "outside"),
    ("Pendulum-v1", torch.tensor([1.0, 1.0]), "shape \\(2,\\)"),
    ("Pendulum-v1", torch.tensor([1.0], dtype=torch.float64), "float64"),
]


@pytest.mark.parametrize("env_id, action, given", BAD_ACTIONS)
def test_bad_action_raises_named_value_error_and_env_still_works(env_id, action, given):
    env = GymEnv(env_id)
    expected = "Categorical" if env_id == "CartPole-v1" else "Bounded"
    td = env.reset()
    td["action"] = action
    with pytest.raises(ValueError, match=f"action.*{expected}.*") as info:
        env.step(td)
    assert info.match(given)
    td = env.step(env.rand_action(env.reset()))
    assert td.get(("next", "reward")).shape == (1,)
    env.close()


def test_bad_dict_action_names_the_nested_key():
    env = GymEnv(DICT_ENV_ID)
    td = env.rand_action(env.reset())
    td.set(("action", "gear"), torch.tensor(2))  # Discrete(3, start=-1): 2 is out of range
    with pytest.raises(ValueError, match="gear.*outside Categorical.*start=-1.*got min 2"):
        env.step(td)
    td = env.rand_action(td)
    td.set(("action", "move"), torch.zeros(2))
    with pytest.raises(ValueError, match="move.*Bounded.*shape \\(2,\\)"):
        env.step(td)
    td = env.rand_action(td)
    del td["action", "gear"]
    with pytest.raises(ValueError, match="gear.*missing"):
        env.step(td)
    with pytest.raises(KeyError, match="action"):
        env.step(TensorDict())
    env.step(env.rand_action(td))  # still works


def test_closed_env_raises_closed_env_error():
    env = GymEnv("CartPole-v1")
    td = env.rand_action(env.reset())
    with env:
        pass
    assert env.is_closed
    env.close()  # twice: harmless
    with pytest.raises(ClosedEnvError):
        env.step(td)
    with pytest.raises(ClosedEnvError):
        env.reset()
    with pytest.raises(ClosedEnvError):
        env.set_seed(0)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
@pytest.mark.parametrize("cls", [SerialEnv, ParallelEnv])
def test_wrong_num_workers_raises(cls, bad):
    with pytest.raises(ValueError, match="num_workers"):
        cls(bad, CounterEnv)


@pytest.mark.parametrize(
    "mask",
    [
        torch.ones(3, 1, dtype=torch.bool),
        torch.ones(2, 2, dtype=torch.bool),
        torch.ones(2, 1, dtype=torch.int64),
    ],
)
def test_wrong_reset_mask_raises(mask):
    env = SerialEnv(2, CounterEnv)
    env.reset()
    with pytest.raises(ValueError, match="_reset.*\\(2, 1\\)"):
        env.reset(TensorDict({"_reset": mask}))
    env.reset(TensorDict({"_reset": torch.tensor([[True], [False]])}, batch_size=[2]))
    env.close()


@pytest.mark.parametrize(
    "obs_kind, expected",
    [
        (
            "plain",
            r"MisshapenEnv returned observation 'observation' of shape \(3,\); its "
            r"observation space has shape \(4,\)",
        ),
        ("dict", r"MisshapenEnv returned an observation without the entry 'b'"),
    ],
)
def test_gym_env_names_an_observation_that_does_not_fit(obs_kind, expected):
    env = GymEnv(MisshapenEnv(bad_step=2, kind=obs_kind))
    td = env.step(env.rand_action(env.reset()))
    with pytest.raises(ValueError, match=expected):
        env.step(env.rand_action(td))
