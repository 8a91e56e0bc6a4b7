"""``BatchStep`` (the fast runner of plain gymnasium sub-envs) and the general ``CommandRunner``
carry out any sequence of mode bytes alike: generated cases (hypothesis) of commands, each a
mode byte per row, run through both over two identical sets of sub-envs, and after every
command the buffers and the extras must be equal.

The modes drawn are those the engine sends (``commands.step_modes`` for each policy, resets
into the root or "next", seeded or not, root syncs) and arbitrary mixes of them per row, so
BatchStep's fast branches (every row steps; SAME_STEP; NEXT_STEP's steps and resets) and its
fallback to the general phases are all reached. Observations are large enough for observation
lanes: a command whose modes may go to a lane goes to a drawn one, as the engine would send it
(SAME_STEP's root sync then leaves the observations in the lane, and both runners must leave
the root's as they were). Runs in this process: no worker processes.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from hypothesis import given, settings
from hypothesis import strategies as st

from gymvec.subenvs.batch_step import BatchStep
from gymvec.subenvs.drivers import CommandRunner, make_driver
from gymvec.subenvs.kinds import summarize
from gymvec.wire.buffers import BufferLayout, Buffers, private_memory
from gymvec.wire.commands import (
    AUTORESET,
    KEEP_FINAL_OBS,
    LANE_MODES,
    NOTHING,
    RESET,
    RESET_INTO_NEXT,
    RESET_NEXT,
    SEED,
    STEP,
    SYNC_ROOT,
    step_modes,
)

WIDTH = 1400  # 3 * 1400 float32 per sub-env: N of them fill LANE_MIN_BYTES


def _wide(values: np.ndarray) -> np.ndarray:
    return np.repeat(values[:, None], WIDTH, axis=1)


class CountdownEnv(gym.Env):
    """Episodes of a length drawn from its seeded generator; observations and rewards follow
    the actions, and an info entry without a buffer field travels as extras at some steps.
    Each of its three values fills a row of ``WIDTH`` (large enough for observation lanes)."""

    observation_space = spaces.Box(-100.0, 100.0, (3, WIDTH), np.float32)
    action_space = spaces.Discrete(3)

    def __init__(self) -> None:
        self.left = 0
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.left = int(self.np_random.integers(1, 5))
        self.t = 0
        obs = self.np_random.uniform(-1, 1, 3).astype(np.float32)
        return _wide(obs), {"episode_length": self.left}

    def step(self, action):
        self.t += 1
        self.left -= 1
        obs = _wide(np.array([self.t, int(action), self.left], dtype=np.float32))
        info = {"t": self.t} if self.t % 2 else {}
        terminated = self.left <= 0
        truncated = self.t >= 4 and not terminated
        return obs, float(action) - 0.5, terminated, truncated, info


N = 4
LANES = 2
ROW_MODES = [
    STEP,
    STEP | SYNC_ROOT,
    STEP | AUTORESET,
    STEP | AUTORESET | KEEP_FINAL_OBS,
    STEP | AUTORESET | KEEP_FINAL_OBS | SYNC_ROOT,
    RESET,
    RESET | SEED,
    RESET_NEXT,
    RESET_NEXT | SEED,
    SYNC_ROOT,
    0,
]


@st.composite
def commands(draw: st.DrawFn) -> tuple[bytes, list[int], list[int], int]:
    """One command: mode bytes, actions, seeds, the observation lane (0: none)."""
    how = draw(st.sampled_from(["policy", "uniform", "mixed"]))
    if how == "policy":  # what the engine sends for a policy
        finished = np.array(draw(st.lists(st.booleans(), min_size=N, max_size=N)))
        modes = step_modes(
            draw(st.sampled_from(list(AutoresetMode))), finished, bool(finished.any())
        )
        modes = bytes([modes]) * N if type(modes) is int else modes
    elif how == "uniform":
        modes = bytes([draw(st.sampled_from(ROW_MODES))]) * N
    else:
        modes = bytes(draw(st.lists(st.sampled_from(ROW_MODES), min_size=N, max_size=N)))
    actions = draw(st.lists(st.integers(0, 2), min_size=N, max_size=N))
    seeds = draw(st.lists(st.integers(0, 2**31), min_size=N, max_size=N))
    # the engine sends a command into a lane only where every mode may go to one
    lane = draw(st.integers(0, LANES)) if set(modes) <= LANE_MODES else 0
    return modes, actions, seeds, lane


def _runner(general: bool):
    envs = [CountdownEnv() for _ in range(N)]
    summary = summarize(envs[0])
    layout = BufferLayout(N, summary.observation_leaves, summary.action_leaves, {}, LANES)
    assert layout.obs_lanes == LANES
    buffers = Buffers(layout, private_memory(layout.nbytes))
    drivers = [make_driver(env, i, buffers) for i, env in enumerate(envs)]
    runner = CommandRunner(drivers, buffers, 0) if general else BatchStep(drivers, buffers, 0, N)
    for i, env in enumerate(envs):  # the same start for both sets
        obs, _ = env.reset(seed=i)
        for slot_obs in (buffers.root.obs, buffers.next.obs):
            slot_obs[("observation",)][i] = obs
        drivers[i].step_value = obs
        if not general:
            runner.last_obs[i] = obs
    return runner, buffers


def _assert_same_buffers(a: Buffers, b: Buffers, lane: int, context: str) -> None:
    """The root, and "next" with its observations in observation lane ``lane``."""
    np.testing.assert_array_equal(a.obs_lanes[lane], b.obs_lanes[lane], f"{context} lane {lane}")
    for slot_a, slot_b, name in ((a.root, b.root, "root"), (a.next, b.next, "next")):
        if slot_a is a.root:
            np.testing.assert_array_equal(
                slot_a.obs[("observation",)], slot_b.obs[("observation",)], f"{context} root"
            )
        for flag in ("done", "terminated", "truncated", "info_present"):
            np.testing.assert_array_equal(
                getattr(slot_a, flag), getattr(slot_b, flag), f"{context} {name}.{flag}"
            )
    np.testing.assert_array_equal(a.next.reward, b.next.reward, f"{context} reward")


def _assert_same_extras(a: dict, b: dict, context: str) -> None:
    assert a.keys() == b.keys(), context
    for i in a:
        assert a[i].root == b[i].root and a[i].next == b[i].next, f"{context} sub-env {i}"
        if a[i].final_obs is NOTHING or b[i].final_obs is NOTHING:
            assert a[i].final_obs is b[i].final_obs, f"{context} sub-env {i} final_obs"
        else:
            np.testing.assert_array_equal(a[i].final_obs, b[i].final_obs, context)


@settings(max_examples=150, deadline=None)
@given(st.lists(commands(), min_size=1, max_size=12))
def test_batch_step_and_the_general_runner_agree(sequence) -> None:
    fast, fast_buffers = _runner(general=False)
    general, general_buffers = _runner(general=True)
    assert type(fast) is BatchStep and type(general) is CommandRunner
    for n, (modes, actions, seeds, lane) in enumerate(sequence):
        context = f"command {n} modes {list(modes)} lane {lane}"
        for buffers in (fast_buffers, general_buffers):
            buffers.action[("action",)][:] = actions
        for runner in (fast, general):
            if runner.lane != lane:  # as a sub-env group follows the control block's lane word
                runner.use_lane(lane)
        seeds_array = np.array(seeds, dtype=np.int64)
        root_before = fast_buffers.root.obs[("observation",)].copy()
        extras_fast = fast.run(modes, seeds_array, None)
        extras_general = general.run(modes, seeds_array, None)
        _assert_same_buffers(fast_buffers, general_buffers, lane, context)
        _assert_same_extras(extras_fast, extras_general, context)
        _assert_root_synced(fast_buffers, modes, lane, root_before, context)


def _assert_root_synced(
    buffers: Buffers, modes: bytes, lane: int, root_before: np.ndarray, context: str
) -> None:
    """SYNC_ROOT of a row not reset into the root: its root observation is "next"'s, or, in a
    command into a lane, stays as it was (the lane holds it)."""
    root = buffers.root.obs[("observation",)]
    for k, mode in enumerate(modes):
        reset_into_root = mode & RESET and not mode & RESET_INTO_NEXT
        autoreset = mode & STEP and mode & AUTORESET and buffers.next.done[k]
        if not mode & SYNC_ROOT or reset_into_root or autoreset:
            continue
        expected = root_before[k] if lane else buffers.obs_lanes[0][k]
        np.testing.assert_array_equal(root[k], expected, f"{context} root row {k}")
