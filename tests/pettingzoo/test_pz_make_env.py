"""gymvec.pettingzoo.make_env: PettingZoo parallel envs as a tensordict batched env in torchrl's
multi-agent layout, against each env stepped alone with the same seeds and actions."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("pettingzoo")

from _pz_envs import MixedSpacesEnv, late_env, leaving_env, simple_spread  # noqa: E402
from tensordict import TensorDict  # noqa: E402

from gymvec.pettingzoo import PettingZooEnvBlock, make_env  # noqa: E402

pytestmark = pytest.mark.timeout(120)

SEED = 5


def simple_tag():
    from mpe2 import simple_tag_v3

    return simple_tag_v3.parallel_env(max_cycles=6)


class Alone:
    """The envs stepped one by one; ``expected`` lays their last results out as make_env's
    keys (agents not alive: zeros, reward 0, flags False; env done when no agent is left)."""

    def __init__(self, env_fn, num_envs: int, groups: dict[str, list[str]]):
        self.envs = [env_fn() for _ in range(num_envs)]
        self.groups = groups
        self.last: list[dict] = [{} for _ in range(num_envs)]

    def reset(self, seed: int | None = None, which=None) -> None:
        for e, env in enumerate(self.envs):
            if which is None or which[e]:
                obs, infos = env.reset(seed=None if seed is None else seed + e)
                self.last[e] = {"obs": obs, "infos": infos, "alive": set(env.agents)}

    def step(self, actions: dict[str, np.ndarray]) -> None:
        for e, env in enumerate(self.envs):
            live = list(env.agents)
            acts = {}
            for name, agents in self.groups.items():
                for j, agent in enumerate(agents):
                    if agent in live:
                        acts[agent] = actions[name][e, j]
            obs, rewards, terms, truncs, infos = env.step(acts)
            self.last[e] = {
                "obs": obs,
                "infos": infos,
                "alive": set(live),
                "reward": rewards,
                "terminated": terms,
                "truncated": truncs,
            }

    def done(self) -> np.ndarray:
        return np.array([not env.agents for env in self.envs])

    def expected(self, name: str, key: str, space, mask_shape=None) -> np.ndarray:
        agents = self.groups[name]
        rows = []
        for last in self.last:
            row = []
            for agent in agents:
                alive = agent in last["alive"]
                if key == "observation":
                    value = last["obs"].get(agent)
                    row.append(value if value is not None else _zeros(space))
                elif key == "mask":
                    row.append(alive)
                elif key == "action_mask":
                    info = last["infos"].get(agent, {})
                    row.append(info.get("action_mask", 1) * np.ones(mask_shape) * alive)
                else:
                    row.append(last.get(key, {}).get(agent, 0))
            rows.append(row)
        if key == "observation" and isinstance(rows[0][0], dict):
            return {k: np.array([[v[k] for v in row] for row in rows]) for k in rows[0][0]}
        return np.array(rows)


def _zeros(space):
    from gymnasium import spaces

    if isinstance(space, spaces.Dict):
        return {k: np.zeros(s.shape, s.dtype) for k, s in space.spaces.items()}
    return np.zeros(space.shape, space.dtype)


def assert_matches(td, alone: Alone, env, with_reward: bool, where: str) -> None:
    """``td`` (a root or "next") holds what ``alone``'s envs last reported."""
    for name, agents in alone.groups.items():
        agent_space = alone.envs[0].observation_space(agents[0])
        got = td.get((name, "observation"))
        want = alone.expected(name, "observation", agent_space)
        if isinstance(want, dict):
            for k, value in want.items():
                np.testing.assert_array_equal(got.get(k).numpy(), value, err_msg=f"{where} {k}")
        else:
            np.testing.assert_array_equal(got.numpy(), want, err_msg=f"{where} {name} obs")
        mask = td.get((name, "mask"))
        assert mask.dtype == torch.bool and mask.shape == (len(alone.envs), len(agents))
        np.testing.assert_array_equal(mask.numpy(), alone.expected(name, "mask", None))
        for flag in ("terminated", "truncated"):
            value = td.get((name, flag))
            assert value.shape == (len(alone.envs), len(agents), 1)
            want = alone.expected(name, flag, None).astype(bool)
            np.testing.assert_array_equal(value.numpy()[..., 0], want, err_msg=f"{where} {flag}")
        if with_reward:
            reward = td.get((name, "reward"))
            assert reward.dtype == torch.float32
            want = alone.expected(name, "reward", None).astype(np.float32)
            np.testing.assert_array_equal(reward.numpy()[..., 0], want, err_msg=where)
        if (name, "action_mask") in env.observation_spec:
            got = td.get((name, "action_mask"))
            want = alone.expected(name, "action_mask", None, got.shape[2:])
            np.testing.assert_array_equal(got.numpy(), want.astype(bool), err_msg=where)


CASES = {
    # (env_fn, group_map, expected groups, steps)
    "simple_spread": (simple_spread, None, {"agent": ["agent_0", "agent_1", "agent_2"]}, 8),
    "simple_tag": (
        simple_tag,
        None,
        {"adversary": ["adversary_0", "adversary_1", "adversary_2"], "agent": ["agent_0"]},
        8,
    ),
    "leaving": (leaving_env, {"first": ["a_2", "a_0"], "second": ["a_1"]}, None, 14),
    "late": (late_env, None, {"p": ["p_0", "p_1"]}, 13),
}


@pytest.mark.parametrize(
    ("case", "backend"),
    [
        ("simple_spread", "parallel"),
        ("simple_tag", "serial"),
        ("simple_tag", "parallel"),
        ("leaving", "serial"),
        ("leaving", "parallel"),
        ("late", "serial"),
    ],
)
def test_make_env_equals_the_envs_stepped_alone(case, backend, no_leaks):
    env_fn, group_map, groups, steps = CASES[case]
    groups = groups or group_map
    num_envs = 3
    env = make_env(env_fn, num_envs, group_map=group_map, backend=backend, num_workers=2)
    alone = Alone(env_fn, num_envs, groups)
    try:
        assert env.group_map == groups and env.batch_size == (num_envs,)
        for name, agents in groups.items():
            assert env.full_action_spec[name, "action"].shape == (num_envs, len(agents))
            assert env.reward_spec[name, "reward"].shape == (num_envs, len(agents), 1)
            assert env.done_spec[name, "done"].shape == (num_envs, len(agents), 1)
        env.set_seed(SEED)
        td = env.reset()
        alone.reset(SEED)
        assert_matches(td, alone, env, False, "reset")
        torch.manual_seed(0)
        ends = 0
        for t in range(steps):
            td = env.rand_action(td)
            actions = {name: td.get((name, "action")).numpy().copy() for name in groups}
            td, root = env.step_and_maybe_reset(td)
            alone.step(actions)
            assert_matches(td.get("next"), alone, env, True, f"step {t}")
            done = alone.done()
            np.testing.assert_array_equal(td.get(("next", "done")).numpy()[:, 0], done)
            terminated = td.get(("next", "terminated")).numpy()[:, 0]
            truncated = td.get(("next", "truncated")).numpy()[:, 0]
            np.testing.assert_array_equal(terminated | truncated, done)
            ends += int(done.sum())
            alone.reset(which=done)  # the root of the envs that ended: their reset
            assert_matches(root, alone, env, False, f"root after step {t}")
            assert not root.get("done").any()
            td = root
        assert ends > 0
    finally:
        env.close()
        for e in alone.envs:
            e.close()


def test_partial_reset_resets_the_masked_envs_only(no_leaks):
    groups = {"a": ["a_0", "a_1", "a_2"]}
    env = make_env(leaving_env, 4, backend="parallel", num_workers=2)
    alone = Alone(leaving_env, 4, groups)
    try:
        env.set_seed(SEED)
        td = env.reset()
        alone.reset(SEED)
        td.set(("a", "action"), torch.ones(4, 3, dtype=torch.int64))
        env.step(td)
        alone.step({"a": np.ones((4, 3), np.int64)})
        mask = np.array([False, True, False, True])
        out = env.reset(TensorDict({"_reset": torch.as_tensor(mask)[:, None]}, [4]))
        alone.reset(which=mask)
        for e in np.flatnonzero(~mask):  # the others keep their current values (the step's)
            alone.last[e].pop("reward")
        assert_matches(out, alone, env, False, "partial reset")
    finally:
        env.close()


def test_the_block_alone_has_dict_spaces_per_group():
    block = PettingZooEnvBlock(simple_tag, 2)
    try:
        assert block.metadata["autoreset_mode"].value == "Disabled"
        space = block.single_observation_space
        assert space["adversary"]["observation"].shape == (3, 16)
        assert space["agent"]["observation"].shape == (1, 14)
        assert block.single_action_space["adversary"].shape == (3,)
        obs, _ = block.reset(seed=1)
        assert obs["adversary"]["observation"].shape == (2, 3, 16)
        with pytest.raises(ValueError, match=r"actions\['agent'\]: expected an array of shape"):
            block.step({"adversary": np.zeros((2, 3), int), "agent": np.zeros((2, 2), int)})
        with pytest.raises(ValueError, match="one entry per group"):
            block.step({"adversary": np.zeros((2, 3), int)})
    finally:
        block.close()


def test_bad_inputs_are_refused_before_any_worker_starts():
    from mpe2 import simple_spread_v3

    with pytest.raises(TypeError, match="aec_to_parallel"):
        make_env(simple_spread_v3.env, 2)
    with pytest.raises(ValueError, match=r"missing \['a_2'\]"):
        make_env(leaving_env, 2, group_map={"x": ["a_0", "a_1"]})
    with pytest.raises(ValueError, match=r"'a_1' is in two groups \('x' and 'y'\)"):
        make_env(leaving_env, 2, group_map={"x": ["a_0", "a_1"], "y": ["a_1", "a_2"]})
    with pytest.raises(ValueError, match=r"unknown \['b_0'\]"):
        make_env(leaving_env, 2, group_map={"x": ["a_0", "a_1", "a_2", "b_0"]})
    with pytest.raises(ValueError, match=r"hunter_0: .*prey_0: .*group 'all'"):
        make_env(MixedSpacesEnv, 2, group_map={"all": ["hunter_0", "prey_0"]})
    with pytest.raises(ValueError, match="backend: expected one of"):
        make_env(leaving_env, 2, backend="ray")
    with pytest.raises(ValueError, match="num_workers: expected at most one worker per"):
        make_env(leaving_env, 2, num_workers=3)


def test_a_missing_group_action_is_a_key_error_naming_it():
    env = make_env(simple_tag, 2, backend="serial")
    try:
        td = env.reset()
        td.set(("adversary", "action"), torch.zeros(2, 3, dtype=torch.int64))
        with pytest.raises(KeyError, match=r"\('agent', 'action'\)"):
            env.step(td)
    finally:
        env.close()


def test_rollout_stops_when_an_env_is_done_and_leaves_rewards_in_next():
    env = make_env(late_env, 2, backend="serial")
    try:
        env.set_seed(SEED)
        rollout = env.rollout(8)  # everyone leaves at step 5
        assert rollout.batch_size == (2, 5) and rollout.get(("next", "done"))[:, -1].all()
        assert ("p", "reward") not in rollout.keys(include_nested=True)
        assert rollout.get(("next", "p", "reward")).shape == (2, 5, 2, 1)
    finally:
        env.close()


@pytest.mark.parametrize(("env_fn", "backend"), [(simple_tag, "serial"), (leaving_env, "parallel")])
def test_to_torchrl_passes_check_env_specs(env_fn, backend):
    pytest.importorskip("torchrl")
    from torchrl.envs.utils import check_env_specs

    from gymvec.torchrl import to_torchrl

    inner = make_env(env_fn, 2, backend=backend, num_workers=2 if backend == "parallel" else 1)
    env = to_torchrl(inner)
    try:
        check_env_specs(env)
        assert set(env.reward_keys) == {(name, "reward") for name in inner.group_map}
        rollout = env.rollout(12, break_when_any_done=False)  # through envs' resets
        name, agents = next(iter(inner.group_map.items()))
        assert rollout.get(("next", name, "reward")).shape == (2, 12, len(agents), 1)
        assert rollout.get(("next", "done")).any()
    finally:
        env.close()
