"""AtariVectorEnv equals SyncVectorEnv over FrameStackObservation(AtariPreprocessing(gym.make(id,
frameskip=1))), step for step, with the same seeds and random actions."""

from __future__ import annotations

import pytest

pytest.importorskip("ale_py")  # gymvec[atari]: ale-py and opencv
pytest.importorskip("cv2")

import cv2
import gymnasium as gym
import numpy as np
from _reference import compare, reference

from gymvec.atari import AtariVectorEnv

STEPS = 150


def _pair(env_id: str, num_envs: int = 3, **kwargs):
    return AtariVectorEnv(env_id, num_envs, **kwargs), reference(env_id, num_envs, **kwargs)


def test_pong_sticky_actions_defaults():
    # v5's sticky actions (0.25, drawn by ALE's own RNG), noop_max=30, frame_skip=4, stack 4
    block, ref = _pair("ALE/Pong-v5", max_num_frames_per_episode=240)
    counts = compare(block, ref, STEPS, seed=3, reset_every=40)
    assert counts["truncated"] > 0 and counts["partial_resets"] > 0


def test_breakout_life_loss_next_step():
    block, ref = _pair("ALE/Breakout-v5", terminal_on_life_loss=True, repeat_action_probability=0.0)
    counts = compare(block, ref, STEPS, seed=0)
    assert counts["terminated"] > 0  # lives lost: episodes end (often mid-skip)


def test_breakout_life_loss_same_step():
    block, ref = _pair("ALE/Breakout-v5", terminal_on_life_loss=True, autoreset_mode="SameStep")
    counts = compare(block, ref, STEPS, seed=1, reset_every=60)
    assert counts["terminated"] > 0


def test_rgb_frames():
    block, ref = _pair(
        "ALE/Breakout-v5", grayscale_obs=False, stack_size=2, max_num_frames_per_episode=200
    )
    assert block.single_observation_space.shape == (2, 84, 84, 3)
    counts = compare(block, ref, 100, seed=2)
    assert counts["truncated"] > 0


def test_stack_1_frame_skip_1_no_noops_time_limit():
    block, ref = _pair("ALE/Pong-v5", stack_size=1, frame_skip=1, noop_max=0, max_episode_steps=120)
    counts = compare(block, ref, STEPS, seed=4)
    assert counts["truncated"] > 0


def test_scale_newaxis_zero_padding_width_height():
    block, ref = _pair(
        "ALE/Pong-v5",
        scale_obs=True,
        grayscale_newaxis=True,
        padding_type="zero",
        screen_size=(64, 48),
        max_num_frames_per_episode=300,
    )
    assert block.single_observation_space == ref.single_observation_space
    assert block.single_observation_space.dtype == np.float32
    compare(block, ref, 100, seed=5, reset_every=30)


def test_custom_padding_odd_frame_skip_and_size():
    pad = np.full((100, 100), 7, np.uint8)
    block, ref = _pair("ALE/Pong-v5", padding_type=pad, frame_skip=3, screen_size=100)
    compare(block, ref, 60, seed=6, reset_every=20)


def test_disabled_mode_partial_resets():
    block, ref = _pair(
        "ALE/Breakout-v5", frame_skip=2, max_episode_steps=41, autoreset_mode="Disabled"
    )
    assert block.metadata["autoreset_mode"] == gym.vector.AutoresetMode.DISABLED
    counts = compare(block, ref, 120, seed=7)
    assert counts["truncated"] > 0 and counts["partial_resets"] > 0


def test_v4_id_full_action_space_same_step():
    block, ref = _pair(
        "PongNoFrameskip-v4",
        full_action_space=True,
        max_num_frames_per_episode=250,
        autoreset_mode="same_step",
    )
    assert block.single_action_space.n == 18
    counts = compare(block, ref, 100, seed=8)
    assert counts["truncated"] > 0


def test_noop_that_ends_the_game_resets_with_the_same_seed():
    # a 3-frame time limit under up to 30 noops: most resets end the game during the noops
    block, ref = _pair("ALE/Pong-v5", 2, frame_skip=1, max_episode_steps=3, noop_max=30)
    counts = compare(block, ref, 12, seed=9)
    assert counts["truncated"] > 0


def test_seed_lists_and_mode_spellings():
    block, ref = _pair("ALE/Pong-v5", 2, autoreset_mode="next_step")
    assert block.metadata["autoreset_mode"] == gym.vector.AutoresetMode.NEXT_STEP
    got, want = block.reset(seed=[11, 5]), ref.reset(seed=[11, 5])
    np.testing.assert_array_equal(got[0], want[0])
    assert [tuple(s) for s in got[1]["seeds"]] == [tuple(s) for s in want[1]["seeds"]]


def test_unseeded_reset():
    block = AtariVectorEnv("ALE/Pong-v5", 2, max_num_frames_per_episode=100)
    obs, infos = block.reset()
    assert obs.shape == (2, 4, 84, 84) and "seeds" not in infos
    assert infos["_lives"].all()
    for _ in range(30):
        obs, *_ = block.step(np.zeros(2, dtype=np.int64))
    assert obs.shape == (2, 4, 84, 84)


def test_copy_false_hands_out_arrays_it_never_writes_again():
    block = AtariVectorEnv("ALE/Pong-v5", 2, copy=False)
    obs, _ = block.reset(seed=0)
    kept = obs.copy()
    block.step(np.ones(2, dtype=np.int64))
    np.testing.assert_array_equal(obs, kept)


@pytest.mark.parametrize("size", [84, (84, 84), (64, 48), (100, 130), (160, 210), (7, 13)])
@pytest.mark.parametrize("channels", [(), (3,)])
def test_stacked_resize_is_pixel_identical(size, channels):
    """Where the block resizes its games in one tall image, the pixels are those of one
    cv2.resize per game (random screens; INTER_AREA)."""
    block = AtariVectorEnv("ALE/Pong-v5", 5, screen_size=size, grayscale_obs=not channels)
    frames = block.frames
    rng = np.random.default_rng(0)
    frames.screens[0][:] = rng.integers(0, 256, frames.screens[0].shape, dtype=np.uint8)
    frames.screens[1][:] = rng.integers(0, 256, frames.screens[1].shape, dtype=np.uint8)
    pooled = np.maximum(frames.screens[0], frames.screens[1])
    got = frames.frames()
    width, height = (size, size) if isinstance(size, int) else size
    for i in range(5):
        alone = cv2.resize(
            pooled[i * 210 : (i + 1) * 210], (width, height), interpolation=cv2.INTER_AREA
        )
        np.testing.assert_array_equal(got[i], alone)


def test_per_game_resize_when_the_tall_one_differs():
    block, ref = _pair("ALE/Pong-v5", 2, screen_size=(50, 70))
    block.frames.tall_resize = False  # the fallback: one resize per game
    compare(block, ref, 20, seed=10)
