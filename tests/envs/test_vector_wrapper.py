"""GymVectorEnvWrapper: gymnasium vector envs of every autoreset mode as explicit-reset envs.

Every test drives the wrapper with ``step_and_maybe_reset`` (plus explicit partial resets of
running sub-envs where the vector env allows it) and checks the transitions of each sub-env
against a reference stepped by hand with the same seeds and actions: every transition must
appear exactly once, in order, with the right observation, reward, flags and next observation.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from gymnasium.envs.classic_control.cartpole import CartPoleVectorEnv
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv
from gymnasium.wrappers import TimeLimit
from tensordict import TensorDict

from gymvec.envs.base import step_mdp
from gymvec.envs.gym_vector_wrapper import GymVectorEnvWrapper

SEED = 11


class CountEnv(gym.Env):
    """Episodes of a seeded random length (2 to 5 steps); Dict observations; numeric infos."""

    observation_space = spaces.Dict(
        {"pos": spaces.Box(-10.0, 10.0, (2,), np.float32), "t": spaces.Discrete(8)}
    )
    action_space = spaces.Discrete(3)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.length = int(self.np_random.integers(2, 6))
        self.start = np.float32(self.np_random.uniform(-1, 1))
        return self._obs(), {"t": self.t, "length": self.length}

    def step(self, action):
        self.t += 1
        self.start += np.float32(action)
        reward = float(action) + 0.5 * self.t
        return self._obs(), reward, self.t >= self.length, False, {"t": self.t, "tag": "s"}

    def _obs(self):
        return {"pos": np.array([self.start, -self.start], np.float32), "t": self.t}


ENV_FNS = [CountEnv, lambda: TimeLimit(CountEnv(), max_episode_steps=3), CountEnv]


def transition(obs, action, reward, terminated, truncated, next_obs, step_t, reset_length):
    """A comparable record: observations as (pos, t) tuples, numbers as Python values."""
    return (
        tuple(np.float32(x).item() for x in obs["pos"]),
        int(obs["t"]),
        int(action),
        float(np.float32(reward)),
        bool(terminated),
        bool(truncated),
        tuple(np.float32(x).item() for x in next_obs["pos"]),
        int(next_obs["t"]),
        int(step_t),
        int(reset_length),
    )


def row_obs(td, i):
    return {"pos": td.get("pos")[i].numpy(), "t": td.get("t")[i].item()}


def record_step(records, td, action):
    """Append the transition of each sub-env in the stepped ``td`` to ``records``."""
    nxt = td.get("next")
    for i in range(len(records)):
        if "reset_pending" in td.keys() and td.get("reset_pending")[i].item():
            continue  # a deferred reset step, not a transition
        records[i].append(
            transition(
                row_obs(td, i),
                action[i],
                nxt.get("reward")[i].item(),
                nxt.get("terminated")[i].item(),
                nxt.get("truncated")[i].item(),
                row_obs(nxt, i),
                nxt.get(("info", "t"))[i].item(),
                td.get(("info", "length"))[i].item(),
            )
        )


def drive(env, actions, forced=None):
    """Run the wrapper; ``forced[k]``: sub-envs to reset explicitly before step ``k``."""
    n = env.num_envs
    forced = forced or {}
    env.set_seed(SEED)
    td = env.reset()
    records = [[] for _ in range(n)]
    for k, action in enumerate(actions):
        if k in forced:
            mask = torch.zeros(n, 1, dtype=torch.bool)
            mask[forced[k]] = True
            td.set("_reset", mask)
            td = env.reset(td)
        td.set("action", torch.as_tensor(action))
        td, root = env.step_and_maybe_reset(td)
        record_step(records, td, action)
        td = root
    return records


def reference(actions, forced=None):
    """Each sub-env stepped by hand: seed ``SEED + i`` at the first reset, none afterwards."""
    forced = forced or {}
    records = []
    for i, fn in enumerate(ENV_FNS[: actions.shape[1]]):
        env = fn()
        obs, info = env.reset(seed=SEED + i)
        length, out = info["length"], []
        for k, action in enumerate(actions):
            if i in forced.get(k, ()):
                obs, info = env.reset()
                length = info["length"]
            nxt, reward, term, trunc, step_info = env.step(action[i])
            out.append(transition(obs, action[i], reward, term, trunc, nxt, step_info["t"], length))
            if term or trunc:
                obs, info = env.reset()
                length = info["length"]
            else:
                obs, length = nxt, 0
        records.append(out)
    return records


def random_actions(steps, n=3, seed=0):
    return np.random.default_rng(seed).integers(0, 3, size=(steps, n))


def sync_env(mode):
    return GymVectorEnvWrapper(SyncVectorEnv(ENV_FNS, autoreset_mode=mode))


@pytest.mark.parametrize("mode", list(AutoresetMode))
def test_sync_every_mode_matches_per_env_reference(mode):
    actions = random_actions(25)
    env = sync_env(mode)
    assert env.autoreset_mode == mode and not env.deferred_resets
    records = drive(env, actions)
    assert records == reference(actions)
    assert sum(r[4] or r[5] for r in records[0]) >= 4  # several episode ends
    assert any(r[5] for r in records[1])  # truncations too
    env.close()
    assert env.vector_env.closed


@pytest.mark.parametrize("mode", list(AutoresetMode))
def test_sync_partial_resets_of_running_envs(mode):
    actions = random_actions(20, seed=1)
    forced = {3: [0], 7: [1, 2], 12: [0, 2]}
    env = sync_env(mode)
    records = drive(env, actions, forced)
    assert records == reference(actions, forced)
    env.close()


@pytest.mark.parametrize("mode", list(AutoresetMode))
def test_reset_of_finished_and_running_sub_envs_together(mode):
    actions = random_actions(24, seed=5)
    env = sync_env(mode)
    env.set_seed(SEED)
    td = env.reset()
    records, forced, mixed = [[], [], []], {}, 0
    for k, action in enumerate(actions):
        td.set("action", torch.as_tensor(action))
        td = env.step(td)
        record_step(records, td, action)
        root = step_mdp(td)
        done = root.get("done").reshape(-1)
        mask = done.clone()
        if k % 3 == 1 and not done[0]:
            mask[0] = True  # sub-env 0 is running: reset it along with the finished ones
            forced[k + 1] = [0]
        if mask.any():
            root = env.reset(root.set("_reset", mask.unsqueeze(-1)))
            assert env.last_reset_info["_length"].tolist() == mask.tolist()
            assert env.last_reset_info["length"][mask.numpy()].tolist() == (
                root.get(("info", "length"))[mask].tolist()
            )
            mixed += bool(done.any() and (mask & ~done).any() and not mask.all())
        td = root
    assert records == reference(actions, forced)
    assert mixed >= 1
    env.close()


def test_same_step_returns_the_stash_without_resetting_the_vector_env():
    env = sync_env(AutoresetMode.SAME_STEP)
    calls = []
    original_reset = env.vector_env.reset

    def counting_reset(**kwargs):
        calls.append(kwargs)
        return original_reset(**kwargs)

    env.vector_env.reset = counting_reset
    actions = random_actions(15, seed=2)
    assert drive(env, actions) == reference(actions)
    assert len(calls) == 1  # the first reset only: every later one came from the stash
    # the last reset info holds only the sub-envs that were reset, with their reset info
    td = env.reset()
    env.set_seed(None)
    while True:
        td, root = env.step_and_maybe_reset(env.rand_action(td))
        done = td.get(("next", "done")).reshape(-1).numpy()
        if done.any() and not done.all():
            break
        td = root
    info = env.last_reset_info
    assert "final_obs" not in info
    np.testing.assert_array_equal(info["_length"], done)
    np.testing.assert_array_equal(info["length"][done], root.get(("info", "length"))[done])
    env.close()


def test_async_same_step():
    actions = random_actions(12, n=2, seed=3)
    env = GymVectorEnvWrapper(AsyncVectorEnv(ENV_FNS[:2], autoreset_mode=AutoresetMode.SAME_STEP))
    try:
        records = drive(env, actions, {5: [0]})
        expected = reference(actions, {5: [0]})
    finally:
        env.close()
    assert records == expected
    assert env.vector_env.closed


def test_infos_become_keys_and_whole_dicts_stay_reachable():
    env = sync_env(AutoresetMode.NEXT_STEP)
    assert len(env.info_spec.keys()) == 0  # found at the first reset
    env.set_seed(SEED)
    td = env.reset()
    assert set(env.info_spec.keys()) == {"t", "length"}
    assert env.info_spec["length"].shape == (3,)
    lengths = [fn().reset(seed=SEED + i)[1]["length"] for i, fn in enumerate(ENV_FNS)]
    assert td.get(("info", "length")).tolist() == lengths
    td = env.step(env.rand_action(td))
    assert td.get(("next", "info", "t")).tolist() == [1, 1, 1]
    assert td.get(("next", "info", "length")).tolist() == [0, 0, 0]  # not in step infos
    assert list(env.last_step_info["tag"]) == ["s", "s", "s"]  # an extra: only in the dict
    assert env.last_reset_info["length"].tolist() == lengths
    env.close()


# ---- native NEXT_STEP vector env: deferred resets ---------------------------------------------


def cartpole_vec(n=3):
    return gym.make_vec("CartPole-v1", n, vectorization_mode="vector_entry_point")


def cartpole_reference(actions, n=3):
    """The raw vector env, same seed and actions, read with NEXT_STEP semantics: a step in
    which a sub-env resets is not one of its transitions. When every sub-env finishes at once,
    the wrapper resets them all (a real reset), so the reference does too."""
    raw = cartpole_vec(n)
    obs, _ = raw.reset(seed=SEED)
    resetting = np.zeros(n, dtype=bool)
    records = [[] for _ in range(n)]
    for action in actions:
        nxt, reward, term, trunc, _ = raw.step(action)
        for i in range(n):
            if not resetting[i]:
                records[i].append(
                    cartpole_record(obs[i], action[i], reward[i], term[i], trunc[i], nxt[i])
                )
        resetting = term | trunc
        obs = nxt
        if resetting.all():
            obs, _ = raw.reset()
            resetting[:] = False
    return records


def cartpole_record(obs, action, reward, term, trunc, nxt):
    return (
        tuple(np.float32(obs).tolist()),
        int(action),
        float(reward),
        bool(term),
        bool(trunc),
        tuple(np.float32(nxt).tolist()),
    )


def test_native_next_step_defers_resets_without_losing_transitions():
    n, steps = 3, 120
    actions = random_actions(steps, n=n, seed=4) % 2
    env = GymVectorEnvWrapper(cartpole_vec(n))
    assert env.deferred_resets and env.autoreset_mode == AutoresetMode.NEXT_STEP
    env.set_seed(SEED)
    td = env.reset()
    assert not td.get("reset_pending").any()
    records = [[] for _ in range(n)]
    skipped = 0
    for k, action in enumerate(actions):
        td.set("action", torch.as_tensor(action))
        if k % 2:
            td, root = env.step_and_maybe_reset(td)
        else:  # the same by hand: the whole root returned by reset is checked below
            td = env.step(td)
            root = step_mdp(td)
            done = root.get("done")
            if done.any():
                previous = root.clone()
                root = env.reset(root.set("_reset", done.clone()))
                kept = ~done.reshape(-1)
                assert torch.equal(root.get("observation")[kept], previous.get("observation")[kept])
        nxt = td.get("next")
        pending = td.get("reset_pending").reshape(-1)
        # a deferred reset step: reward 0, flags False, and the next root is real
        assert not nxt.get("reset_pending").any()
        assert (nxt.get("reward")[pending] == 0).all() and not nxt.get("done")[pending].any()
        for i in range(n):
            if pending[i]:
                skipped += 1
                continue
            records[i].append(
                cartpole_record(
                    td.get("observation")[i].numpy(),
                    action[i],
                    nxt.get("reward")[i].item(),
                    nxt.get("terminated")[i].item(),
                    nxt.get("truncated")[i].item(),
                    nxt.get("observation")[i].numpy(),
                )
            )
        # finished sub-envs are pending in the next root (all of it), the others are not
        np.testing.assert_array_equal(
            root.get("reset_pending").reshape(-1).numpy(),
            nxt.get("done").reshape(-1).numpy() & ~nxt.get("done").all().item(),
        )
        td = root
    expected = cartpole_reference(actions, n)
    assert records == expected
    assert skipped >= 4  # several deferred resets happened
    assert sum(len(r) for r in records) + skipped == n * steps
    env.close()


def test_native_next_step_refuses_what_it_cannot_do():
    env = GymVectorEnvWrapper(cartpole_vec(2))
    env.set_seed(SEED)
    td = env.reset()
    mask = torch.tensor([[True], [False]])
    with pytest.raises(RuntimeError, match="running"):
        env.reset(td.clone().set("_reset", mask))
    while True:  # until exactly one sub-env finishes
        td = env.step(env.rand_action(td))
        done = td.get(("next", "done"))
        if done.any():
            break
        td = td.get("next").exclude("reward")
    root = td.get("next").exclude("reward")
    if done.all():
        pytest.fail("both sub-envs finished at once with this seed; pick another")
    with pytest.raises(RuntimeError, match="were not reset"):
        env.step(env.rand_action(root.clone()))
    env.set_seed(3)
    with pytest.raises(RuntimeError, match="seed"):
        env.reset(root.clone().set("_reset", done.clone()))
    env.set_seed(None)
    # still usable: the same reset without a seed is deferred, then the env steps on
    root = env.reset(root.set("_reset", done.clone()))
    assert root.get("reset_pending").tolist() == done.tolist()
    td = env.step(env.rand_action(root))
    assert not td.get(("next", "done"))[done].any()
    env.close()


def test_full_reset_of_native_env_and_reseeding():
    env = GymVectorEnvWrapper(cartpole_vec(2))
    env.set_seed(5)
    first = env.reset().get("observation")
    env.rollout(10, break_when_any_done=False)
    env.set_seed(5)
    again = env.reset().get("observation")
    raw = cartpole_vec(2)
    expected = torch.as_tensor(raw.reset(seed=5)[0])
    assert torch.equal(first, expected) and torch.equal(again, expected)
    env.close()


# ---- errors and small contracts ---------------------------------------------------------------


def test_wrapper_refuses_a_single_env_and_a_step_before_reset():
    with pytest.raises(TypeError, match="expects a gymnasium.vector.VectorEnv, got .*TimeLimit"):
        GymVectorEnvWrapper(gym.make("CartPole-v1"))
    env = GymVectorEnvWrapper(SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2))
    td = TensorDict({"action": torch.zeros(2, dtype=torch.int64)}, batch_size=[2])
    with pytest.raises(RuntimeError, match="call reset\\(\\) before step\\(\\)"):
        env.step(td)
    env.reset()
    assert env.step(td).get(("next", "reward")).tolist() == [[1.0], [1.0]]
    env.close()


def test_bad_reset_mask_shape_raises_and_env_stays_usable():
    env = sync_env(AutoresetMode.DISABLED)
    td = env.reset()
    bad_masks = (
        torch.ones(2, 1, dtype=torch.bool),
        torch.ones(3, 2, dtype=torch.bool),
        torch.ones(3, 1),  # not bool
    )
    for bad in bad_masks:
        with pytest.raises(ValueError, match="_reset"):
            env.reset(TensorDict({"_reset": bad}, batch_size=[]))
    td = env.step(env.rand_action(td))
    assert td.get(("next", "observation")) is None  # Dict observations: own keys
    assert td.get(("next", "pos")).shape == (3, 2)
    env.close()


def test_stepping_a_finished_sub_env_without_reset_raises():
    env = sync_env(AutoresetMode.DISABLED)
    env.set_seed(SEED)
    td = env.reset()
    for _ in range(6):
        td = env.step(env.rand_action(td))
        if td.get(("next", "done")).any():
            break
    root = td.get("next").exclude("reward")
    with pytest.raises(RuntimeError, match="not reset"):
        env.step(env.rand_action(root.clone()))
    root = env.reset(root.set("_reset", td.get(("next", "done")).clone()))
    env.step(env.rand_action(root))  # fine once reset
    env.close()


def test_empty_mask_is_a_no_op_and_others_keep_their_values():
    env = sync_env(AutoresetMode.NEXT_STEP)
    td = env.reset()
    td = env.step(env.rand_action(td))
    root = td.get("next").exclude("reward")
    same = env.reset(root.clone().set("_reset", torch.zeros(3, 1, dtype=torch.bool)))
    assert torch.equal(same.get("pos"), root.get("pos"))
    mask = torch.tensor([True, False, False])
    out = env.reset(root.clone().set("_reset", mask))
    assert torch.equal(out.get("pos")[1:], root.get("pos")[1:])
    assert out.get("t")[0].item() == 0 and out.get("t")[1:].tolist() == [1, 1]
    env.close()


def test_specs_and_missing_autoreset_mode():
    env = GymVectorEnvWrapper(cartpole_vec(4))
    assert env.batch_size == (4,)
    assert env.observation_spec["observation"].shape == (4, 4)
    assert env.action_spec.shape == (4,)
    assert env.reward_spec.shape == (4, 1) and env.reward_spec.dtype == torch.float32
    assert env.done_spec["terminated"].shape == (4, 1)
    env.close()

    class NoMode(CartPoleVectorEnv):
        metadata = {"render_modes": ["rgb_array"]}

    with pytest.warns(UserWarning, match="autoreset_mode"):
        env = GymVectorEnvWrapper(NoMode(num_envs=2))
    assert env.autoreset_mode == AutoresetMode.NEXT_STEP
    env.close()
