"""The reference an Atari block must equal: gymnasium's SyncVectorEnv over the wrappers, and a
step-for-step comparison of the two."""

from __future__ import annotations

import pytest

pytest.importorskip("ale_py")  # gymvec[atari]: ale-py and opencv
pytest.importorskip("cv2")

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

from gymvec.options import parse_autoreset_mode

PREPROCESSING = (
    "noop_max",
    "frame_skip",
    "screen_size",
    "terminal_on_life_loss",
    "grayscale_obs",
    "grayscale_newaxis",
    "scale_obs",
)


def reference(env_id: str, num_envs: int, autoreset_mode: Any = "NextStep", **kwargs: Any):
    """SyncVectorEnv over FrameStackObservation(AtariPreprocessing(gym.make(...)))."""
    pre = {k: kwargs.pop(k) for k in PREPROCESSING if k in kwargs}
    stack_size = kwargs.pop("stack_size", 4)
    padding_type = kwargs.pop("padding_type", "reset")

    def make() -> gym.Env:
        env = gym.make(env_id, frameskip=1, **kwargs)
        return FrameStackObservation(
            AtariPreprocessing(env, **pre), stack_size, padding_type=padding_type
        )

    mode = parse_autoreset_mode(autoreset_mode)  # gymvec's spellings too ("same_step")
    return gym.vector.SyncVectorEnv([make] * num_envs, autoreset_mode=mode)


def assert_same(got: Any, want: Any, where: str) -> None:
    """Equal values, dtypes and (for dicts) keys, recursively."""
    if isinstance(want, tuple) and not isinstance(want[0], np.number):
        assert isinstance(got, tuple) and len(got) == len(want), f"{where}: {got!r}"
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{where}[{i}]")
    elif isinstance(want, dict):
        assert isinstance(got, dict), f"{where}: {type(got)}"
        assert set(got) == set(want), f"{where}: keys {sorted(got)} != {sorted(want)}"
        for key in want:
            assert_same(got[key], want[key], f"{where}[{key!r}]")
    elif isinstance(want, np.ndarray) and want.dtype == object:
        assert isinstance(got, np.ndarray) and got.shape == want.shape, where
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{where}[{i}]")
    elif isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray), f"{where}: {type(got)}"
        assert got.dtype == want.dtype, f"{where}: dtype {got.dtype} != {want.dtype}"
        assert got.shape == want.shape, f"{where}: shape {got.shape} != {want.shape}"
        if not np.array_equal(got, want):
            diff = np.argwhere(got != want)
            raise AssertionError(f"{where}: differ at {diff[:5].tolist()} ({len(diff)} items)")
    else:
        assert got == want, f"{where}: {got!r} != {want!r}"


def compare(
    block: gym.vector.VectorEnv,
    ref: gym.vector.VectorEnv,
    steps: int,
    *,
    seed: int | None = 0,
    action_seed: int = 0,
    reset_every: int | None = None,
) -> dict[str, int]:
    """Reset both with ``seed``, then step both ``steps`` times with the same random actions;
    everything returned must be equal. Under DISABLED, finished rows are reset with a
    reset_mask (and so are random rows every ``reset_every`` steps in any mode). Returns
    counts of what happened (episodes ended, partial resets), for the test to check that the
    comparison covered them."""
    mode = block.metadata["autoreset_mode"]
    assert_same(block.reset(seed=seed), ref.reset(seed=seed), "reset")
    rng = np.random.default_rng(action_seed)
    counts = {"terminated": 0, "truncated": 0, "partial_resets": 0}
    n = block.num_envs
    for t in range(steps):
        actions = rng.integers(0, block.single_action_space.n, size=n)
        got, want = block.step(actions), ref.step(actions)
        assert_same(got, want, f"step {t}")
        counts["terminated"] += int(want[2].sum())
        counts["truncated"] += int(want[3].sum())
        mask = None
        if mode == gym.vector.AutoresetMode.DISABLED and (want[2] | want[3]).any():
            mask = want[2] | want[3]
        if reset_every and t % reset_every == reset_every - 1:
            extra = rng.random(n) < 0.5
            extra[rng.integers(n)] = True
            mask = extra if mask is None else mask | extra
        if mask is not None:
            counts["partial_resets"] += 1
            options = {"reset_mask": mask}
            assert_same(
                block.reset(options=dict(options)), ref.reset(options=dict(options)), f"reset {t}"
            )
    return counts
