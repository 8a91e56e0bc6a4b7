"""Observation lanes: large observations handed out by the gymnasium face without a copy.

The sub-envs write "next"'s observations into a lane that nothing outside the face refers to;
the face hands that lane's array out and takes another one for the next call. What must hold:
the results equal SyncVectorEnv's, an observation (or a view, or a tensor of it) that the caller
keeps is never written again, and with every lane kept the face falls back to copies.
"""

from __future__ import annotations

import functools

import _face_envs as fe
import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv

import gymvec.bench.envs  # noqa: F401  (registers GymvecBench/ImageObs-v0)
from gymvec import (
    GymnasiumVectorEnv,
    GymVectorEnvWrapper,
    ParallelEnv,
    SerialEnv,
    step_mdp,
)
from gymvec.engine.engine import OBS_LANES
from gymvec.vector.tensordict_engine import TensorDictEngine

IMAGE_ID = "GymvecBench/ImageObs-v0"
LENGTHS = (3, 4, 5, 6)  # sub-envs finish at different steps
FORK = {"mp_start_method": "fork"}


def image_fns() -> list:
    return fe.env_fns(IMAGE_ID, 4, lengths=LENGTHS, num_frames=3)


def dict_action_fns() -> list:
    """Large Box observations with a Dict action: sub-envs the group steps one by one."""
    obs_space = spaces.Box(0, 255, (4, 84, 84), np.uint8)
    action_space = spaces.Dict({"a": spaces.Discrete(2)})
    return [functools.partial(fe.make_spaces_env, obs_space, action_space, n) for n in LENGTHS]


BATCHES = {
    "serial": lambda fns: SerialEnv(1, fns, envs_per_worker=len(fns)),
    "parallel": lambda fns: ParallelEnv(2, fns, envs_per_worker=2, **FORK),
    "local": lambda fns: ParallelEnv(2, fns, envs_per_worker=2, local_worker=True, **FORK),
}


def snapshot(held) -> np.ndarray:
    """The values of an array or a tensor, copied."""
    return torch.as_tensor(held).numpy().copy()


def in_lane(obs: np.ndarray) -> bool:
    """Whether ``obs`` is a lane's array (the face's copies own their memory)."""
    return not obs.flags.owndata


@pytest.mark.parametrize("fns", [image_fns, dict_action_fns], ids=["image", "dict-action"])
@pytest.mark.parametrize("kind", list(BATCHES))
def test_lanes_equal_sync_and_kept_observations_stay_as_handed_out(kind, fns, no_leaks):
    env = GymnasiumVectorEnv(BATCHES[kind](fns()))
    ref = SyncVectorEnv(fns())
    ref.action_space.seed(3)
    obs, _ = env.reset(seed=7)
    np.testing.assert_array_equal(obs, ref.reset(seed=7)[0])
    assert in_lane(obs)
    kept: list[tuple] = []  # (what the caller kept, a copy of it then)
    del obs

    def step(t: int) -> tuple:
        action = ref.action_space.sample()
        got = env.step(action)
        fe.assert_same(got, ref.step(action), f"step {t}", fe.EPISODE_TIME)
        return got

    # Nothing kept: every step goes out in a lane.
    for t in range(8):
        assert in_lane(step(t)[0])
    # Keep one observation per lane, whole, as a slice and as a tensor...
    forms = [lambda o: o, lambda o: o[1:3], torch.from_numpy]
    for t, form in enumerate(forms):
        obs = step(10 + t)[0]
        assert in_lane(obs)
        held = form(obs)
        kept.append((held, snapshot(held)))
        del obs
    # ...then no lane is free: the face copies, and what was kept stays as it was.
    for t in range(12):
        obs = step(20 + t)[0]
        assert not in_lane(obs)
        obs[...] = 0  # the caller owns it: nothing of the env's may change
    for held, then in kept:
        np.testing.assert_array_equal(snapshot(held), then)
    # Released, the lanes serve again.
    kept.clear()
    for t in range(6):
        assert in_lane(step(40 + t)[0])
    env.close()
    ref.close()


def test_a_partial_reset_after_lanes_shows_the_envs_observations_not_the_callers_writes(
    no_leaks,
):
    # DISABLED: steps go into lanes, the masked resets into "next"'s own buffer; the sub-envs
    # not reset must show their latest observation as their env returned it, as
    # SyncVectorEnv's do, whatever the caller wrote into the arrays it was handed.
    mode = {"autoreset_mode": AutoresetMode.DISABLED}
    env = GymnasiumVectorEnv(BATCHES["local"](image_fns()), **mode)
    ref = SyncVectorEnv(image_fns(), **mode)
    ref.action_space.seed(0)
    np.testing.assert_array_equal(env.reset(seed=2)[0], ref.reset(seed=2)[0])
    resets = 0
    for t in range(20):
        action = ref.action_space.sample()
        got, expected = env.step(action), ref.step(action)
        fe.assert_same(got, expected, f"step {t}", fe.EPISODE_TIME)
        assert in_lane(got[0])
        got[0][...] = 0  # the caller's array: what the env returns next must not show it
        finished = expected[2] | expected[3]
        if finished.any():
            options = {"reset_mask": finished}
            obs, _ = env.reset(options=options)
            np.testing.assert_array_equal(obs, ref.reset(options=options)[0])
            assert not in_lane(obs)  # a partial reset is copied out
            resets += 1
    assert resets >= 4
    env.close()
    ref.close()


def test_small_observations_and_same_step_use_no_lanes(no_leaks):
    with SerialEnv(4, lambda: gym.make("CartPole-v1")) as batch:
        assert batch.buffers.obs_lanes == []
        batch.engine.reset(into="next", handout=True)
        assert batch.engine.step(handout=True).observations is None
    # a face over a batch without buffers of its own (here a gymnasium vector env) neither
    engine = TensorDictEngine(GymVectorEnvWrapper(SyncVectorEnv(image_fns())))
    assert engine.buffers.obs_lanes == []
    engine.reset_send(into="next", handout=True)
    assert engine.recv().observations is None
    engine.close()
    env = GymnasiumVectorEnv(BATCHES["serial"](image_fns()), autoreset_mode="same_step")
    obs, _ = env.reset(seed=0)
    assert not in_lane(obs) and not in_lane(env.step(env.action_space.sample())[0])
    env.close()


def test_the_engine_hands_a_lane_out_only_for_commands_that_fill_it():
    with SerialEnv(1, image_fns(), envs_per_worker=4) as batch:
        engine = batch.engine
        assert len(batch.buffers.obs_lanes) == OBS_LANES + 1
        # into the root, or a part of the batch: no lane
        assert engine.reset(seeds=[0, 1, 2, 3], handout=True).observations is None
        mask = np.array([True, False, True, False])
        assert engine.reset(mask, into="next", handout=True).observations is None
        assert engine.step(handout=False).observations is None
        # every sub-env into "next": a lane, which the next command without one gives back
        lane = engine.reset(seeds=[0, 1, 2, 3], into="next", handout=True).observations
        assert lane is not None and any(lane is a for a in batch.buffers.handed_out_lanes())
        in_lane = lane.copy()
        lane[...] = 0  # the caller's array now
        engine.reset(mask, seeds=[0, 1, 2, 3])  # no lane: "next" gets its values back first
        np.testing.assert_array_equal(batch.buffers.obs_lanes[0], in_lane)
        np.testing.assert_array_equal(
            batch.buffers.root.obs[("observation",)][[1, 3]], in_lane[[1, 3]]
        )
        del lane
        held = [engine.step(AutoresetMode.SAME_STEP, handout=True).observations for _ in range(3)]
        assert all(a is not None for a in held)  # one lane each while the caller holds them
        assert engine.step(handout=True).observations is None  # none left: copies


def test_two_faces_over_one_batch_never_write_a_lane_the_other_handed_out():
    batch = BATCHES["serial"](image_fns())
    first, second = GymnasiumVectorEnv(batch), GymnasiumVectorEnv(batch)
    kept, _ = first.reset(seed=0)
    then = kept.copy()
    second.reset(seed=1)
    for _ in range(6):
        assert in_lane(second.step(second.action_space.sample())[0])
    np.testing.assert_array_equal(kept, then)
    batch.close()


def in_lane_tensor(tensor: torch.Tensor, batch) -> bool:
    """Whether ``tensor`` holds a lane's memory as it is (not a copy of it)."""
    return any(tensor.data_ptr() == a.ctypes.data for a in batch.buffers.handed_out_lanes())


def same_step_pair(kind: str, seed: int, action_seed: int) -> tuple:
    """A batch of ``kind`` and a SAME_STEP SyncVectorEnv on the image envs, both reset with
    ``seed`` (the reference's action space seeded with ``action_seed``), and the batch's root."""
    batch = BATCHES[kind](image_fns())
    ref = SyncVectorEnv(image_fns(), autoreset_mode=AutoresetMode.SAME_STEP)
    ref.action_space.seed(action_seed)
    obs, _ = ref.reset(seed=seed)
    batch.set_seed(seed)
    root = batch.reset()
    np.testing.assert_array_equal(root["observation"].numpy(), obs)
    return batch, ref, root


@pytest.mark.parametrize("kind", list(BATCHES))
def test_tensordict_outputs_take_lanes_and_what_is_kept_stays(kind, no_leaks):
    # step_and_maybe_reset: "next"'s observations come from a lane, the root shares them (or,
    # after resets, copies them with the reset rows); equal to SAME_STEP SyncVectorEnv.
    batch, ref, root = same_step_pair(kind, seed=4, action_seed=5)
    kept, from_lanes, ends = [], 0, 0
    for t in range(40):
        action = ref.action_space.sample()
        td, root = batch.step_and_maybe_reset(root.set("action", torch.as_tensor(action)))
        obs, _, terminated, truncated, info = ref.step(action)
        done = terminated | truncated
        expected_next = obs.copy()
        for i in np.flatnonzero(done):
            expected_next[i] = info["final_obs"][i]
        next_obs = td["next", "observation"]
        np.testing.assert_array_equal(next_obs.numpy(), expected_next, err_msg=f"step {t}")
        np.testing.assert_array_equal(root["observation"].numpy(), obs, err_msg=f"step {t}")
        ends += int(done.sum())
        if t < 20:
            from_lanes += in_lane_tensor(next_obs, batch)
        elif t in (20, 21):  # keep a whole step's output and a slice of the next one's
            held = next_obs if t == 20 else next_obs[1:3]
            kept += [(held, snapshot(held)), (root["observation"], snapshot(root["observation"]))]
    assert from_lanes >= 15 and ends >= 10
    for held, then in kept:
        np.testing.assert_array_equal(snapshot(held), then)
    batch.close()
    ref.close()


@pytest.mark.parametrize("kind", ["serial", "local"])
def test_tensordict_partial_resets_after_lanes_ignore_what_callers_wrote(kind, no_leaks):
    # step() hands out "next" from a lane; the caller writes into it; a partial reset then
    # returns the root of every sub-env: those not reset must show what their env returned.
    mode = {"autoreset_mode": AutoresetMode.DISABLED}
    batch = BATCHES[kind](image_fns())
    ref = SyncVectorEnv(image_fns(), **mode)
    ref.action_space.seed(2)
    obs, _ = ref.reset(seed=6)
    batch.set_seed(6)
    td = batch.reset()
    resets = 0
    for t in range(16):
        action = ref.action_space.sample()
        td = batch.step(td.set("action", torch.as_tensor(action)))
        obs, _, terminated, truncated, _ = ref.step(action)
        np.testing.assert_array_equal(td["next", "observation"].numpy(), obs)
        assert in_lane_tensor(td["next", "observation"], batch)
        td = step_mdp(td)
        td["observation"].zero_()  # the caller's tensor
        finished = terminated | truncated
        if finished.any():
            td.set("_reset", torch.as_tensor(finished).unsqueeze(-1))
            td = batch.reset(td)
            obs, _ = ref.reset(options={"reset_mask": finished})
            np.testing.assert_array_equal(td["observation"].numpy(), obs, err_msg=f"step {t}")
            resets += 1
    assert resets >= 4
    batch.close()
    ref.close()


def test_torch_output_takes_lanes_too(no_leaks):
    batch = BATCHES["local"](image_fns())
    env = GymnasiumVectorEnv(batch, output="torch")
    ref = SyncVectorEnv(image_fns())
    ref.action_space.seed(1)
    obs, _ = env.reset(seed=3)
    np.testing.assert_array_equal(obs.numpy(), ref.reset(seed=3)[0])
    kept = []
    for t in range(12):
        action = ref.action_space.sample()
        obs = env.step(action)[0]
        np.testing.assert_array_equal(obs.numpy(), ref.step(action)[0], err_msg=f"step {t}")
        assert in_lane_tensor(obs, batch) == (t < 9)  # from step 9 on, the kept hold every lane
        if t in (6, 7, 8):
            kept.append((obs, snapshot(obs)))
    for held, then in kept:
        np.testing.assert_array_equal(held.numpy(), then)
    env.close()
    ref.close()


@pytest.mark.parametrize("kind", list(BATCHES))
def test_tensordict_partial_resets_after_same_step_lanes_show_every_root(kind, no_leaks):
    # step_and_maybe_reset leaves the root's observations of the sub-envs it did not reset in
    # the lane it hands out as "next"; the caller writes into it; a partial reset then returns
    # the root of every sub-env: those not reset must show what their env returned last.
    batch, ref, root = same_step_pair(kind, seed=8, action_seed=3)
    from_lanes = 0
    for t in range(18):
        action = ref.action_space.sample()
        td, root = batch.step_and_maybe_reset(root.set("action", torch.as_tensor(action)))
        obs = ref.step(action)[0]
        np.testing.assert_array_equal(root["observation"].numpy(), obs, err_msg=f"step {t}")
        from_lanes += in_lane_tensor(td["next", "observation"], batch)
        td["next", "observation"].zero_()  # the caller's tensor (and the root may share it)
        if t % 3 == 2:
            mask = np.arange(4) == t % 4
            root = batch.reset(root.set("_reset", torch.as_tensor(mask).unsqueeze(-1)))
            obs, _ = ref.reset(options={"reset_mask": mask})
            np.testing.assert_array_equal(root["observation"].numpy(), obs, err_msg=f"reset {t}")
    assert from_lanes >= 12
    batch.close()
    ref.close()
