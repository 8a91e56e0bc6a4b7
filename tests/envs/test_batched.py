"""SerialEnv and ParallelEnv: equal to gymnasium's SyncVectorEnv, partial resets, outputs,
multi-task batches, dispatch, state, options.

Process tests use fork (cheap) except a few spawn ones, whose factories return bare gymnasium
envs so that spawned workers do not import torch.
"""

from __future__ import annotations

import functools
import glob
import os
import tempfile
import traceback
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from _envs import (
    DICT_ENV_ID,
    DictEnv,
    ResetInfoCartPole,
    getpid,
    make_cartpole,
    make_dict_env,
    make_gym_cartpole,
    make_gym_env,
    make_gym_recorded_cartpole,
    make_pendulum,
    obs_leaves,
)
from _td_envs import CounterEnv, make_counter
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from tensordict import TensorDict

from gymvec import Categorical, ParallelEnv, SerialEnv, WorkerError, step_mdp
from gymvec.envs.base import make_reward_spec

FORK = {"mp_start_method": "fork"}
SPAWN = {"mp_start_method": "spawn"}


# ---- helpers ----------------------------------------------------------------------------------
def assert_batch_obs_equal(td, leaves: dict[tuple, np.ndarray], what: str = "") -> None:
    for key, expected in leaves.items():
        got = td.get(key).numpy()
        assert got.dtype == expected.dtype, (what, key)
        np.testing.assert_array_equal(got, expected, err_msg=f"{what} {key}")


def action_entry(action, n: int):
    """A batched gymnasium action as the tensordict entry ``"action"``."""
    if isinstance(action, dict):
        return TensorDict({k: action_entry(v, n) for k, v in action.items()}, batch_size=[n])
    return torch.as_tensor(np.asarray(action))


def expected_next_leaves(obs, info, done: np.ndarray) -> dict[tuple, np.ndarray]:
    """What ``td["next"]`` holds: the step obs, or ``final_obs`` where an episode ended."""
    leaves = {key: value.copy() for key, value in obs_leaves(obs).items()}
    for i in np.flatnonzero(done):
        for key, value in obs_leaves(info["final_obs"][i]).items():
            leaves[key][i] = value
    return leaves


def compare_with_gymnasium(
    env, ref_fns, seed: int, steps: int, **ref_kwargs
) -> tuple[TensorDict, int]:
    """Steps ``env`` (step_and_maybe_reset) and a SAME_STEP SyncVectorEnv with the same seed
    and actions, asserting equal transitions; returns the stacked outputs and episode ends."""
    ref = SyncVectorEnv(ref_fns, autoreset_mode=AutoresetMode.SAME_STEP, **ref_kwargs)
    n = ref.num_envs
    assert env.batch_size == (n,)
    ref.action_space.seed(seed)
    obs, info = ref.reset(seed=seed)
    env.set_seed(seed)
    root = env.reset()
    assert_batch_obs_equal(root, obs_leaves(obs), "reset")
    info_names = list(env.info_spec.keys())
    for name in info_names:
        np.testing.assert_array_equal(root.get(("info", name)).numpy(), info[name])
    outputs, ends = [], 0
    for t in range(steps):
        action = ref.action_space.sample()
        td = root.clone().set("action", action_entry(action, n))
        td, root = env.step_and_maybe_reset(td)
        obs, reward, terminated, truncated, info = ref.step(action)
        done = terminated | truncated
        nxt = td.get("next")
        np.testing.assert_allclose(nxt.get("reward").squeeze(-1).numpy(), reward, rtol=1e-6)
        assert nxt.get("reward").dtype == torch.float32
        np.testing.assert_array_equal(nxt.get("terminated").squeeze(-1).numpy(), terminated)
        np.testing.assert_array_equal(nxt.get("truncated").squeeze(-1).numpy(), truncated)
        np.testing.assert_array_equal(nxt.get("done").squeeze(-1).numpy(), done)
        assert_batch_obs_equal(nxt, expected_next_leaves(obs, info, done), f"step {t} next")
        assert_batch_obs_equal(root, obs_leaves(obs), f"step {t} root")
        assert not root.get("done").any()
        for name in info_names:
            step_info = info[name].copy()
            if done.any():
                step_info[done] = info["final_info"][name][done]
            np.testing.assert_array_equal(nxt.get(("info", name)).numpy(), step_info)
            np.testing.assert_array_equal(root.get(("info", name)).numpy(), info[name])
        outputs.append(td.clone().set("root_after", root))
        ends += int(done.sum())
    ref.close()
    return torch.stack(outputs), ends


def make_batched(kind: str, n_workers: int, fn, envs_per_worker: int = 1, **kwargs):
    if kind == "serial":
        return SerialEnv(n_workers * envs_per_worker, fn, **kwargs)
    options = SPAWN if kind == "spawn" else FORK
    if kind == "fork-local":  # the first worker's share steps in this process
        kwargs["local_worker"] = True
    return ParallelEnv(n_workers, fn, envs_per_worker=envs_per_worker, **options, **kwargs)


# ---- equal to gymnasium -----------------------------------------------------------------------
CARTPOLE_SETUPS = [
    ("serial", 1, make_cartpole),
    ("fork", 1, make_cartpole),
    ("fork", 3, make_cartpole),
    ("fork-local", 1, make_cartpole),
    ("spawn", 1, make_gym_cartpole),
    ("spawn", 3, make_gym_cartpole),
]


@pytest.mark.parametrize("kind, envs_per_worker, fn", CARTPOLE_SETUPS)
def test_cartpole_equals_sync_vector_env(kind, envs_per_worker, fn, no_leaks):
    n_workers = 3 // envs_per_worker
    with make_batched(kind, n_workers, fn, envs_per_worker) as env:
        out, ends = compare_with_gymnasium(env, [make_gym_cartpole] * 3, seed=11, steps=150)
    assert ends >= 6
    # every setup gives the very same outputs: compare with the serial env's
    with SerialEnv(3, make_cartpole) as serial:
        ref_out, _ = compare_with_gymnasium(serial, [make_gym_cartpole] * 3, seed=11, steps=150)
    assert (out == ref_out).all()


DICT_INFO_FIELDS = {"steps": 0, "speed": 0.0, "inside": False, "vector": np.zeros(2)}
DICT_SETUPS = [
    ("serial", 1, functools.partial(make_dict_env, info_fields=DICT_INFO_FIELDS)),
    ("fork", 3, functools.partial(make_dict_env, info_fields=DICT_INFO_FIELDS)),
    ("fork", 1, make_dict_env),
    ("spawn", 1, functools.partial(make_gym_env, DICT_ENV_ID)),
]


@pytest.mark.parametrize("kind, envs_per_worker, fn", DICT_SETUPS)
def test_dict_env_equals_sync_vector_env(kind, envs_per_worker, fn, no_leaks):
    ref_fns = [functools.partial(gym.make, DICT_ENV_ID, max_steps=12)] * 3
    fn = functools.partial(fn, max_steps=12)
    with make_batched(kind, 3 // envs_per_worker, fn, envs_per_worker) as env:
        # the info keys are those the GymEnv sub-envs were given; building the batch resets
        # or steps nothing to find others: their infos reach the parent as extras
        declared = set(fn.keywords.get("info_fields", {}))
        assert set(env.info_spec.keys()) == declared
        out, ends = compare_with_gymnasium(env, ref_fns, seed=3, steps=40)
        terminated = out.get(("next", "terminated")).any()
        truncated = out.get(("next", "truncated")).any()
    assert ends >= 3 and terminated and truncated


def test_dict_env_extras_reach_the_parent():
    with ParallelEnv(2, make_dict_env, create_env_kwargs={"max_steps": 2}, **FORK) as env:
        env.set_seed(0)
        root = env.reset()
        assert env.last_extras[1].root["phase"] == "run"
        td = env.rand_action(root)
        td, root = env.step_and_maybe_reset(td)
        assert env.last_extras[0].next["detail"]["name"] == "dict-env"
        assert "bonus" not in env.last_extras[0].next
        td, root = env.step_and_maybe_reset(env.rand_action(root))
        for i in range(2):  # both truncated at step 2: the episode-end entries are there
            assert td.get(("next", "truncated"))[i].item()
            assert env.last_extras[i].next["bonus"] == 1.5
            assert env.last_extras[i].next["phase"] == "end"
            assert env.last_extras[i].root["phase"] == "run"  # the reset info


@pytest.mark.parametrize("kind", ["serial", "fork"])
def test_autoreset_infos_reach_the_parent(kind):
    # plain gymnasium sub-envs with one array observation: SAME_STEP resets them in one pass
    with make_batched(kind, 2, ResetInfoCartPole, envs_per_worker=2) as env:
        env.set_seed(0)
        root = env.reset()
        assert [env.last_extras[i].root["reset"] for i in range(4)] == ["1"] * 4
        resets = [1] * 4
        ends = 0
        for _ in range(60):
            td, root = env.step_and_maybe_reset(env.rand_action(root))
            done = td.get(("next", "done")).squeeze(-1).tolist()
            for i, finished in enumerate(done):
                extras = env.last_extras.get(i)
                root_extras = None if extras is None else extras.root
                if finished:
                    resets[i] += 1
                    assert root_extras == {"phase": "start", "reset": str(resets[i])}
                else:
                    assert root_extras is None
            ends += sum(done)
        assert ends >= 4


@pytest.mark.parametrize("kind", ["serial", "fork"])
def test_episode_statistics_reach_the_parent(kind):
    with make_batched(kind, 2, make_gym_recorded_cartpole) as env:
        env.set_seed(0)
        root = env.reset()
        lengths = torch.zeros(2, dtype=torch.long)
        seen = set()
        while len(seen) < 2:
            td, root = env.step_and_maybe_reset(env.rand_action(root))
            lengths += 1
            for i in td.get(("next", "done")).squeeze(-1).nonzero().flatten().tolist():
                if i not in seen:
                    assert env.last_extras[i].next["episode"]["l"] == lengths[i]
                    seen.add(i)
            for i in range(2):
                if i not in seen:
                    extras = env.last_extras.get(i)
                    assert extras is None or "episode" not in (extras.next or {})


def test_lambda_and_closure_factories_with_spawn(no_leaks):
    max_steps = 5  # captured by the closure, shipped by value with cloudpickle
    with ParallelEnv(2, lambda: gym.make(DICT_ENV_ID, max_steps=max_steps), **SPAWN) as env:
        assert env.max_steps == [5, 5]
        ref_fns = [functools.partial(gym.make, DICT_ENV_ID, max_steps=5)] * 2
        compare_with_gymnasium(env, ref_fns, seed=8, steps=12)


def test_pendulum_multi_task_equals_sync_vector_env(no_leaks):
    fns = [
        functools.partial(make_pendulum, max_episode_steps=4),
        functools.partial(make_pendulum, max_episode_steps=6),
    ]
    ref_fns = [
        functools.partial(gym.make, "Pendulum-v1", max_episode_steps=4),
        functools.partial(gym.make, "Pendulum-v1", max_episode_steps=6),
    ]
    with ParallelEnv(2, fns, **FORK) as env:
        out, ends = compare_with_gymnasium(env, ref_fns, seed=5, steps=12)
    truncated = out.get(("next", "truncated")).squeeze(-1)
    assert truncated[:, 0].nonzero().flatten().tolist() == [3, 7, 11]
    assert truncated[:, 1].nonzero().flatten().tolist() == [5, 11]


@pytest.mark.parametrize("kind", ["serial", "fork"])
def test_multi_task_bounds_stack(kind):
    kwargs = [{"bound": 10.0}, {"bound": 5.0}]
    ref_fns = [functools.partial(gym.make, DICT_ENV_ID, **kw) for kw in kwargs]
    with make_batched(kind, 2, make_dict_env, create_env_kwargs=kwargs) as env:
        high = env.observation_spec["position"].high
        assert high.shape == (2, 3)
        assert high[0].tolist() == [10.0] * 3 and high[1].tolist() == [5.0] * 3
        compare_with_gymnasium(env, ref_fns, seed=0, steps=20, observation_mode="different")


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_id_registered_at_run_time_works_in_workers(start, no_leaks):
    env_id = f"GymvecTest/RuntimeOnly{start}-v0"
    gym.register(env_id, entry_point=DictEnv, kwargs={"max_steps": 3})
    try:
        fn = functools.partial(make_gym_env, env_id)
        with ParallelEnv(2, fn, mp_start_method=start) as env:
            ref_fns = [functools.partial(gym.make, env_id)] * 2
            compare_with_gymnasium(env, ref_fns, seed=2, steps=4)
    finally:
        gym.registry.pop(env_id)


def test_multi_task_keys_that_cannot_share_buffers_raise():
    # ("action",) is a value for CartPole and holds ("action", "move") for the dict env
    with pytest.raises(ValueError, match="action_spec: key \\('action',\\) is a value"):
        SerialEnv(2, [make_cartpole, make_dict_env])


def test_bad_action_in_a_batched_env_raises_and_the_env_still_works():
    with ParallelEnv(2, make_dict_env, **FORK) as env:
        root = env.reset()
        td = env.rand_action(root.clone())
        td.set(("action", "move"), torch.zeros(2, 4))
        with pytest.raises(ValueError, match="move.*Bounded.*shape \\(2, 4\\)"):
            env.step(td)
        td = env.rand_action(root.clone())
        td.set(("action", "move"), torch.full((2, 3), 1.5))
        with pytest.raises(ValueError, match="move.*outside"):
            env.step_and_maybe_reset(td)
        td, _ = env.step_and_maybe_reset(env.rand_action(root.clone()))
        assert td.get(("next", "reward")).shape == (2, 1)


@pytest.mark.parametrize("kind", ["serial", "fork"])
def test_actions_that_require_grad_step_and_leave_no_graph(kind):
    """A policy's output may still require grad: its values are stepped, and the action
    buffer does not join its graph (a later plain action still writes into it)."""
    refs = [gym.make("Pendulum-v1") for _ in range(2)]
    with make_batched(kind, 2, make_pendulum) as env:
        env.set_seed(3)
        root = env.reset()
        for i, ref in enumerate(refs):
            ref.reset(seed=3 + i)
        weights = torch.tensor([[0.5], [-1.5]], requires_grad=True)
        for actions in (weights * 1.0, torch.tensor([[1.0], [0.25]])):
            td, root = env.step_and_maybe_reset(root.set("action", actions))
            for i, ref in enumerate(refs):
                obs, reward, *_ = ref.step(actions[i].detach().numpy())
                np.testing.assert_allclose(td.get(("next", "observation"))[i].numpy(), obs)
                assert td.get(("next", "reward"))[i].item() == pytest.approx(reward, rel=1e-6)
            assert not td.get(("next", "observation")).requires_grad
        assert all(not view.requires_grad for view in env._action_views)
        assert weights.grad is None


@pytest.mark.parametrize("kind", ["serial", "fork-local"])
def test_a_replaced_reward_spec_sets_the_reward_dtype_from_then_on(kind):
    with make_batched(kind, 2, make_pendulum) as env:
        root = env.reset()
        actions = torch.tensor([[0.5], [-1.0]])
        td, root = env.step_and_maybe_reset(root.set("action", actions))
        reward32 = td.get(("next", "reward"))
        assert reward32.dtype == torch.float32
        env.reward_spec = make_reward_spec(env.batch_size, torch.float64)
        td, root = env.step_and_maybe_reset(root.set("action", actions))
        reward = td.get(("next", "reward"))
        assert reward.dtype == torch.float64 and reward.shape == (2, 1)
        # the buffer's float64 values, not float32 ones widened
        np.testing.assert_array_equal(reward.numpy()[:, 0], env.buffers.next.reward)
        assert env.step(root.set("action", actions)).get(("next", "reward")).dtype == torch.float64


@pytest.mark.parametrize("kind", ["serial", "fork"])
def test_bad_discrete_action_steps_no_sub_env(kind):
    """The actions are checked as they are written to the shared buffer, before anything runs:
    after a refused step the sub-envs continue exactly as if it had never been tried."""
    refs = [gym.make("CartPole-v1") for _ in range(4)]
    with make_batched(kind, 2, make_cartpole, envs_per_worker=2) as env:
        env.set_seed(5)
        root = env.reset()
        for i, ref in enumerate(refs):
            ref.reset(seed=5 + i)
        for bad, match in (
            (torch.tensor([0, 1, 2, 0]), r'"action": values outside Categorical.*max 2'),
            (torch.tensor([0, -1, 1, 0]), "min -1"),
            (torch.tensor([0, 1, 1, 0], dtype=torch.int32), "dtype int32"),
            (torch.tensor([[0], [1], [1], [0]]), r"shape \(4, 1\)"),
        ):
            td = root.clone()
            td.set("action", bad)
            with pytest.raises(ValueError, match=match):
                env.step_and_maybe_reset(td)
            with pytest.raises(ValueError, match=match):
                env.step(td)
        actions = torch.tensor([1, 0, 1, 1])
        td, _ = env.step_and_maybe_reset(root.set("action", actions))
        for i, ref in enumerate(refs):
            obs, *_ = ref.step(int(actions[i]))
            np.testing.assert_array_equal(td.get(("next", "observation"))[i].numpy(), obs)
        # A replaced action spec is the one checked from then on.
        env.action_spec = Categorical(1, shape=(4,))
        with pytest.raises(ValueError, match=r"values outside Categorical\(n=1"):
            env.step(root.set("action", actions))


# ---- seeding ----------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["serial", "fork"])
def test_set_seed_gives_sub_env_i_seed_plus_i(kind):
    with make_batched(kind, 1, make_cartpole, envs_per_worker=3) as env:
        env.set_seed(100)
        root = env.reset()
        for i in range(3):
            obs, _ = gym.make("CartPole-v1").reset(seed=100 + i)
            np.testing.assert_array_equal(root.get("observation")[i].numpy(), obs)
        env.set_seed([7, 3, 7])
        root = env.reset()
        for i, seed in enumerate([7, 3, 7]):
            obs, _ = gym.make("CartPole-v1").reset(seed=seed)
            np.testing.assert_array_equal(root.get("observation")[i].numpy(), obs)
        with pytest.raises(ValueError, match="seed"):
            env.set_seed([1, 2])


# ---- partial resets ---------------------------------------------------------------------------
def mask_td(mask: list[bool], shape=None) -> TensorDict:
    tensor = torch.tensor(mask)
    return TensorDict({"_reset": tensor.reshape(shape or (len(mask), 1))}, batch_size=[len(mask)])


@pytest.mark.parametrize("kind, envs_per_worker", [("serial", 1), ("fork", 1), ("fork", 3)])
def test_partial_reset_resets_exactly_the_masked_sub_envs(kind, envs_per_worker):
    refs = [gym.make("CartPole-v1") for _ in range(3)]
    with make_batched(kind, 3 // envs_per_worker, make_cartpole, envs_per_worker) as env:
        env.set_seed(0)
        root = env.reset()
        ref_obs = [ref.reset(seed=i)[0] for i, ref in enumerate(refs)]
        actions = [0, 1, 1, 0]
        for a in actions:  # short: no CartPole episode ends in 4 steps
            td = env.step(root.clone().set("action", torch.full((3,), a)))
            root = step_mdp(td)
            ref_obs = [ref.step(a)[0] for ref in refs]
        out = env.reset(mask_td([True, False, True]))
        ref_obs[0], _ = refs[0].reset()
        ref_obs[2], _ = refs[2].reset()
        np.testing.assert_array_equal(out.get("observation").numpy(), np.stack(ref_obs))
        assert not out.get("done").any()

        # a step after the partial reset goes on from the right states
        td = env.step(out.clone().set("action", torch.tensor([1, 0, 1])))
        ref_obs = [ref.step(a)[0] for ref, a in zip(refs, [1, 0, 1])]
        np.testing.assert_array_equal(td.get(("next", "observation")).numpy(), np.stack(ref_obs))

        # an empty mask resets nothing; the root shows the latest "next"
        out = env.reset(mask_td([False, False, False], shape=(3,)))
        np.testing.assert_array_equal(out.get("observation").numpy(), np.stack(ref_obs))

        # seeds of a list apply to the masked sub-envs only
        env.set_seed([50, 51, 52])
        out = env.reset(mask_td([False, True, False]))
        ref_obs[1], _ = refs[1].reset(seed=51)
        np.testing.assert_array_equal(out.get("observation").numpy(), np.stack(ref_obs))


def test_partial_reset_after_step_and_maybe_reset_keeps_latest_root():
    with ParallelEnv(2, make_cartpole, **FORK) as env:
        env.set_seed(0)
        root = env.reset()
        td, root = env.step_and_maybe_reset(env.rand_action(root))
        td, root = env.step_and_maybe_reset(env.rand_action(root))
        out = env.reset(mask_td([True, False]))
        assert torch.equal(out.get("observation")[1], root.get("observation")[1])
        assert not torch.equal(out.get("observation")[0], root.get("observation")[0])


# ---- outputs never alias the buffers ----------------------------------------------------------
@pytest.mark.parametrize("kind", ["serial", "fork"])
def test_outputs_do_not_alias_buffers(kind):
    with make_batched(kind, 2, make_dict_env) as env:
        env.set_seed(0)
        root = env.reset()
        root_copy = root.clone()
        td = env.step(env.rand_action(root.clone()))
        next_copy = td.get("next").clone()
        td2, root2 = env.step_and_maybe_reset(env.rand_action(step_mdp(td)))
        root2_copy, next2_copy = root2.clone(), td2.get("next").clone()
        # later steps do not change earlier outputs
        env.step_and_maybe_reset(env.rand_action(root2.clone()))
        assert (root == root_copy).all()
        assert (td.get("next") == next_copy).all()
        assert (root2 == root2_copy).all() and (td2.get("next") == next2_copy).all()
        # mutating outputs does not change what the env reports next
        latest = env.reset(mask_td([False, False]))
        latest_copy = latest.clone()
        for out in (latest, root2, td2.get("next")):
            out.get("position").fill_(99.0)
            out.get(("sensors", "heat")).fill_(-1.0)
            out.get("done").fill_(True)
        again = env.reset(mask_td([False, False]))
        assert (again == latest_copy).all()


@pytest.mark.parametrize("kind", ["serial", "fork", "fork-local"])
def test_flat_outputs_are_fresh_and_apart(kind):
    # flat trees: "next" and the next root are filled in from the buffers in one pass
    with make_batched(kind, 2, make_cartpole, envs_per_worker=2) as env:
        env.set_seed(0)
        root = env.reset()
        outputs = []
        for _ in range(40):  # CartPole episodes end: steps with and without resets
            td, root = env.step_and_maybe_reset(env.rand_action(root.clone()))
            nxt = td.get("next")
            for key in ("observation", "done", "terminated", "truncated"):
                assert nxt.get(key).data_ptr() != root.get(key).data_ptr(), key
            outputs.append((nxt, nxt.clone(), root, root.clone()))
        for nxt, nxt_copy, out_root, root_copy in outputs:  # later steps changed none
            assert (nxt == nxt_copy).all() and (out_root == root_copy).all()
        root.get("observation").fill_(7.0)
        assert not (outputs[-1][0].get("observation") == 7.0).any()
        assert not (env.reset(mask_td([False] * 4)).get("observation") == 7.0).any()


# ---- dispatch, state, options -----------------------------------------------------------------
@pytest.mark.parametrize("kind", ["serial", "fork"])
def test_dispatch_attributes_and_methods(kind):
    with make_batched(
        kind, 2, make_dict_env, create_env_kwargs={"render_mode": "rgb_array"}
    ) as env:
        specs = env.spec
        assert [s.id for s in specs] == [DICT_ENV_ID, DICT_ENV_ID]
        assert env.max_steps == [25, 25]
        env.set_seed(0)
        env.reset()
        frames = env.render()
        assert isinstance(frames, list) and len(frames) == 2
        ref = gym.make(DICT_ENV_ID, render_mode="rgb_array")
        ref.reset(seed=1)
        np.testing.assert_array_equal(frames[1], ref.render())
        # the message says whose attribute was looked for, and what a sub-env said
        name = type(env).__name__
        with pytest.raises(
            AttributeError,
            match=f"'{name}' object has no attribute 'no_such_thing', and its sub-envs have "
            "none either \\(.*no_such_thing",
        ):
            env.no_such_thing  # noqa: B018
        assert not hasattr(env, "no_such_thing")
        pids = env.engine.request("apply", fn=getpid)
        if kind == "serial":
            assert pids == [os.getpid()] * 2
        else:
            assert os.getpid() not in pids and len(set(pids)) == 2


def test_method_raising_in_a_worker_keeps_its_type_and_traceback():
    with ParallelEnv(2, make_counter, create_env_kwargs={"limit": 5}, **FORK) as env:
        with pytest.raises(AttributeError) as info:
            env.no_such_method()
        shown = "".join(traceback.format_exception(info.value))
        assert "sub-env 0 (worker 0, pid" in shown and "no_such_method" in shown
        assert isinstance(info.value.__cause__, WorkerError)  # (the request's error)
        assert env.limit == [5, 5]  # still usable


def test_dispatch_to_tensordict_sub_envs():
    with ParallelEnv(2, make_counter, create_env_kwargs={"limit": 5}, **FORK) as env:
        assert env.limit == [5, 5]
        pids = env.pid()
        assert os.getpid() not in pids and len(set(pids)) == 2
        with pytest.raises(AttributeError):
            env.no_such_method()


@pytest.mark.parametrize(
    "kind, fn", [("serial", make_cartpole), ("fork", make_cartpole), ("fork", make_counter)]
)
def test_state_dict_restores_sub_env_randomness(kind, fn):
    with make_batched(kind, 2, fn) as env:
        env.set_seed(0)
        env.reset()
        state = env.state_dict()
        first = env.reset()
        second = env.reset()
        assert not (first.get("observation") == second.get("observation")).all()
        env.load_state_dict(state)
        assert (env.reset() == first).all()
        with pytest.raises(ValueError, match="sub_envs"):
            env.load_state_dict({"sub_envs": [state["sub_envs"][0]]})


@pytest.mark.parametrize("kind", ["serial", "fork"])
def test_update_kwargs_rebuilds_sub_envs(kind):
    with make_batched(kind, 2, make_pendulum, create_env_kwargs={"max_episode_steps": 3}) as env:
        td = env.rollout(3, break_when_any_done=False)
        assert td.get(("next", "truncated"))[:, -1].all()
        env.update_kwargs({"max_episode_steps": 5})
        assert [spec.max_episode_steps for spec in env.spec] == [5, 5]
        td = env.rollout(5, break_when_any_done=False)
        truncated = td.get(("next", "truncated")).squeeze(-1)
        assert not truncated[:, :4].any() and truncated[:, 4].all()


def test_memmap_buffers_equal_gymnasium_and_leave_no_file(no_leaks):
    pattern = os.path.join(tempfile.gettempdir(), "gymvec-*.buf")
    before = set(glob.glob(pattern))
    with ParallelEnv(2, make_gym_cartpole, memmap=True, **SPAWN) as env:
        # the buffers are a file, mapped here, and unlinked from the start
        maps = Path("/proc/self/maps").read_text()
        assert any("gymvec-" in line and "(deleted)" in line for line in maps.splitlines())
        assert set(glob.glob(pattern)) == before
        compare_with_gymnasium(env, [make_gym_cartpole] * 2, seed=1, steps=60)
    assert set(glob.glob(pattern)) == before


def test_local_worker_equals_gymnasium(no_leaks):
    with ParallelEnv(2, make_cartpole, envs_per_worker=2, local_worker=True, **FORK) as env:
        pids = env.engine.request("apply", fn=getpid)
        assert pids[:2] == [os.getpid()] * 2 and os.getpid() not in pids[2:]
        compare_with_gymnasium(env, [make_gym_cartpole] * 4, seed=9, steps=100)


@pytest.mark.parametrize("local_worker", [True, False])
def test_workers_of_different_sizes_equal_gymnasium(local_worker, no_leaks):
    with ParallelEnv(
        2, make_cartpole, envs_per_worker=[1, 3], local_worker=local_worker, **FORK
    ) as env:
        assert env.batch_size == (4,) and env.worker_bounds == [(0, 1), (1, 4)]
        pids = env.engine.request("apply", fn=getpid)
        assert len(set(pids[1:])) == 1 and pids[0] != pids[1]
        assert (pids[0] == os.getpid()) == local_worker
        _, ends = compare_with_gymnasium(env, [make_gym_cartpole] * 4, seed=3, steps=100)
    assert ends >= 4


@pytest.mark.parametrize("kind", ["serial", "fork"])
def test_per_worker_kwargs_follow_workers_of_different_sizes(kind):
    kwargs = [{"bound": 10.0}, {"bound": 5.0}]
    options = {} if kind == "serial" else FORK
    cls = SerialEnv if kind == "serial" else ParallelEnv
    with cls(2, make_dict_env, create_env_kwargs=kwargs, envs_per_worker=[1, 2], **options) as env:
        high = env.observation_spec["position"].high
        assert high[:, 0].tolist() == [10.0, 5.0, 5.0]
        ref_fns = [functools.partial(gym.make, DICT_ENV_ID, **kwargs[w]) for w in (0, 1, 1)]
        compare_with_gymnasium(env, ref_fns, seed=0, steps=10, observation_mode="different")


@pytest.mark.parametrize(
    "envs_per_worker, message",
    [
        ([2], r"envs_per_worker: expected one count per worker \(2\), got 1: \[2\]"),
        ([2, 0], r"envs_per_worker: expected a positive int, got 0"),
        ([2, 1.5], r"envs_per_worker: expected a positive int, got 1.5"),
        (0, r"envs_per_worker: expected a positive int, got 0"),
    ],
)
def test_bad_envs_per_worker_raises_naming_it(envs_per_worker, message):
    with pytest.raises(ValueError, match=message):
        SerialEnv(2, make_cartpole, envs_per_worker=envs_per_worker)
    with pytest.raises(ValueError, match=message):
        ParallelEnv(2, make_cartpole, envs_per_worker=envs_per_worker, **FORK)


def test_a_factory_returning_one_env_object_for_two_sub_envs_raises(no_leaks):
    """``lambda: env`` would have sub-envs share one state (SB3's DummyVecEnv refuses it too)."""
    shared = gym.make("CartPole-v1")
    message = r"the same env object for sub-envs 0 and 1: each sub-env needs its own instance"
    for env, error in [
        (SerialEnv(2, lambda: shared), ValueError),
        (ParallelEnv(1, lambda: shared, envs_per_worker=2, **FORK), WorkerError),  # in a worker
    ]:
        with pytest.raises(error, match=message):  # sub-envs are built at first use
            env.reset()
        env.close()
    shared.close()


def test_the_default_start_method_is_multiprocessings_as_in_the_drop_ins(no_leaks):
    # (not spawn's: spawned workers re-import the main module, and with it torch)
    import multiprocessing

    with ParallelEnv(2, make_gym_cartpole) as env:
        assert env.mp_start_method == multiprocessing.get_start_method()
        assert env.reset()["observation"].shape == (2, 4)


def test_the_default_start_method_is_read_without_fixing_it():
    import subprocess
    import sys

    script = (
        "import multiprocessing as mp\n"
        "from gymvec import ParallelEnv\n"
        "from _envs import make_gym_cartpole\n"
        "ParallelEnv(2, make_gym_cartpole).close()\n"
        "mp.set_start_method('spawn')  # the user's choice is still open\n"
    )
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.dirname(tests), tests])}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr


def test_an_unknown_start_method_raises_in_multiprocessings_words():
    message = r"mp_start_method: cannot find context for 'threads'; expected 'spawn', 'fork'"
    with pytest.raises(ValueError, match=message):
        ParallelEnv(2, make_cartpole, mp_start_method="threads")


@pytest.mark.parametrize("local_worker", [True, False])
def test_outputs_stay_as_handed_out(local_worker, no_leaks):
    # The outputs are built (with a local worker: while the worker still steps) and then
    # filled; no later step may write into what an earlier one handed out.
    with ParallelEnv(2, make_cartpole, envs_per_worker=2, local_worker=local_worker, **FORK) as env:
        env.set_seed(5)
        root = env.reset()
        handed, kept = [], []
        for t in range(60):
            action = env.rand_action(root.clone())  # the caller's td gets "action" and "next"
            if t % 3:
                td, root = env.step_and_maybe_reset(action)
            else:
                td = env.step(action)
                root = env.reset(TensorDict({"_reset": td["next", "done"]}, batch_size=[4]))
            handed.append((td, root))
            kept.append((td.clone(), root.clone()))
        assert sum(int(td["next", "done"].sum()) for td, _ in handed) >= 4  # resets happened
        for (td, root), (td_kept, root_kept) in zip(handed, kept):
            assert (td == td_kept).all() and (root == root_kept).all()


@pytest.mark.parametrize("local_worker, rows", [(True, 2), (False, 0)])
def test_meanwhile_is_called_once_with_the_rows_stepped_here(local_worker, rows, no_leaks):
    # What lets the calling process work while the workers finish (the face's early copy of
    # large observations): the executor calls it once per command, after this process's
    # share (rows [0, rows) are then done).
    with ParallelEnv(2, make_cartpole, envs_per_worker=2, local_worker=local_worker, **FORK) as env:
        env.reset()
        engine, called = env.engine, []
        engine.step_send()
        assert engine.recv(None, called.append).kind == "step"
        assert called == [rows]
        engine.reset_send()
        engine.recv(None, called.append)
        assert called == [rows, rows]


@pytest.mark.parametrize("kind", ["serial", "fork"])
def test_engine_verbs_per_sub_env(kind):
    # The engine under both front ends: partial resets with seeds, steps that leave the root
    # behind, a reset into the root that brings the others' roots up to date.
    refs = [gym.make("CartPole-v1") for _ in range(4)]
    with make_batched(kind, 2, make_gym_cartpole, envs_per_worker=2) as env:
        engine = env.engine
        engine.reset(seeds=[10, 11, 12, 13])
        for i, ref in enumerate(refs):
            ref.reset(seed=10 + i)
        obs_key = ("observation",)
        root, nxt = engine.buffers.root.obs[obs_key], engine.buffers.next.obs[obs_key]
        engine.buffers.action[("action",)][:] = [1, 0, 0, 1]
        before_root = root.copy()
        received = engine.step(AutoresetMode.DISABLED)
        assert received.kind == "step" and received.mask is None
        for i, action in enumerate([1, 0, 0, 1]):
            np.testing.assert_array_equal(nxt[i], refs[i].step(action)[0])
        np.testing.assert_array_equal(root, before_root)  # a plain step leaves the root
        assert engine.root_stale.all() and not engine.finished.any()
        before_next = nxt.copy()
        mask = np.array([False, False, False, True])
        received = engine.reset(mask, seeds=[1, 2, 3, 7])  # seeds outside the mask: ignored
        assert received.kind == "reset" and received.mask.tolist() == mask.tolist()
        np.testing.assert_array_equal(root[3], refs[3].reset(seed=7)[0])
        np.testing.assert_array_equal(root[:3], nxt[:3])  # brought up to date
        np.testing.assert_array_equal(nxt, before_next)  # a reset into the root only
        assert not engine.root_stale.any()
        engine.reset(np.array([True, False, False, False]), seeds=[5] * 4, into="next")
        np.testing.assert_array_equal(nxt[0], refs[0].reset(seed=5)[0])
        np.testing.assert_array_equal(nxt[1:], before_next[1:])
        assert engine.buffers.next.reward[0] == 0.0 and engine.root_stale.tolist() == [
            True,
            False,
            False,
            False,
        ]


@pytest.mark.parametrize("kind", ["serial", "fork"])
def test_engine_next_step_resets_the_finished_sub_envs_instead_of_stepping_them(kind):
    refs = [gym.make("CartPole-v1") for _ in range(2)]
    with make_batched(kind, 2, make_gym_cartpole) as env:
        engine = env.engine
        engine.reset(seeds=[3, 4], into="next")
        for i, ref in enumerate(refs):
            ref.reset(seed=3 + i)
        engine.buffers.action[("action",)][:] = 1
        steps = 0
        while not engine.finished.any():  # always right: CartPole falls within 30 steps
            engine.step(AutoresetMode.NEXT_STEP)
            steps += 1
            ends = [refs[i].step(1)[2] for i in range(2)]
            assert engine.finished.tolist() == ends and steps < 100
        finished = engine.finished.copy()
        engine.step(AutoresetMode.NEXT_STEP)
        for i in np.flatnonzero(finished):
            np.testing.assert_array_equal(
                engine.buffers.next.obs[("observation",)][i], refs[i].reset()[0]
            )
            assert engine.buffers.next.reward[i] == 0.0 and not engine.buffers.next.done[i]
        assert not engine.finished[finished].any()


@pytest.mark.parametrize("kind", ["serial", "fork"])
def test_engine_misuse_raises_clear_errors(kind):
    with make_batched(kind, 2, make_gym_cartpole) as env:
        engine = env.engine
        engine.reset()
        with pytest.raises(RuntimeError, match="no command in flight: call step_send"):
            engine.recv()
        with pytest.raises(ValueError, match=r"seed\[1\]: expected an int64, got 9223372036854"):
            engine.reset_send(seeds=[0, 2**63])
        with pytest.raises(ValueError, match="into: expected 'root' or 'next', got 'both'"):
            engine.reset_send(into="both")
        with pytest.raises(ValueError, match="request: expected one of"):
            engine.request("delete_everything")
        engine.step_send()
        assert engine.in_flight == "step"
        with pytest.raises(RuntimeError, match="a step is already in flight: receive it"):
            engine.step_send()
        with pytest.raises(RuntimeError, match="a step is already in flight"):
            env.spec  # noqa: B018  (attributes of the sub-envs are requests)
        engine.recv()
        assert engine.in_flight is None
        assert env.spec[1].id == "CartPole-v1"  # usable again once received


@pytest.mark.parametrize("kind", ["serial", "fork"])
def test_device_cpu(kind):
    with make_batched(kind, 2, make_cartpole, device="cpu") as env:
        assert env.device == torch.device("cpu")
        assert env.to("cpu") is env
        env.set_seed(0)
        root = env.reset()
        td, root = env.step_and_maybe_reset(env.rand_action(root))
        assert root.device == torch.device("cpu")
        assert td.get(("next", "observation")).device == torch.device("cpu")


# ---- EnvBase sub-envs (driven through their tensordict API) -----------------------------------
def counter_by_hand(seed: int, actions: torch.Tensor, n: int):
    """Observations, rewards and terminations of n CounterEnvs stepped one by one."""
    envs = [CounterEnv(limit=5) for _ in range(n)]
    roots = []
    for i, e in enumerate(envs):
        e.set_seed(seed + i)
        roots.append(e.reset())
    obs, rewards, terms = [], [], []
    for action in actions:
        nexts = [
            e.step(r.clone().set("action", a)).get("next") for e, r, a in zip(envs, roots, action)
        ]
        obs.append(torch.stack([x.get("observation") for x in nexts]))
        rewards.append(torch.stack([x.get("reward") for x in nexts]))
        terms.append(torch.stack([x.get("terminated") for x in nexts]))
        roots = [e.reset() if x.get("done").item() else x for e, x in zip(envs, nexts)]
    return torch.stack(obs), torch.stack(rewards), torch.stack(terms)


@pytest.mark.parametrize("kind", ["serial", "fork"])
def test_envbase_sub_envs(kind):
    torch.manual_seed(0)
    actions = torch.rand(20, 2, 1) * 2 - 1
    obs, rewards, terms = counter_by_hand(4, actions, 2)
    assert terms.sum() >= 4  # crossed episode ends
    with make_batched(kind, 2, make_counter, create_env_kwargs={"limit": 5}) as env:
        env.set_seed(4)
        root = env.reset()
        for t in range(20):
            td, root = env.step_and_maybe_reset(root.clone().set("action", actions[t]))
            assert torch.equal(td.get(("next", "observation")), obs[t])
            assert torch.allclose(td.get(("next", "reward")), rewards[t])
            assert torch.equal(td.get(("next", "terminated")), terms[t])
