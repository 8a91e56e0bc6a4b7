"""Blocks of different sizes mixed with single envs, in any order, without ``BlockFactory``
(API.md section 10): the workers build their sub-envs and report each one's rows before the
buffers are laid out (a start in two phases).

Every test steps a mixed batch beside its parts alone, seeded as the contract says (a block
with ``reset(seed=<its first row's seed>)``, a single env in a ``SyncVectorEnv`` of one with
its row's seed), and compares every step.
"""

from __future__ import annotations

import functools

import _block_envs as be
import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode, SyncVectorEnv

import gymvec
from gymvec import BlockFactory, ParallelEnv, ParallelVectorEnv, SerialEnv, SerialVectorEnv

pytestmark = pytest.mark.timeout(180)

SEED = 11
STEPS = 40  # episodes end within MAX_STEPS: several resets per row
TRANSITION = ("observations", "rewards", "terminations", "truncations")
# The face's autoreset mode, and the block mode it runs exactly (see subenvs.block.HONOURS)
MODES = [
    ("next_step", AutoresetMode.NEXT_STEP),
    ("same_step", AutoresetMode.SAME_STEP),
    ("same_step", AutoresetMode.DISABLED),
    ("disabled", AutoresetMode.DISABLED),
]


def mixed_parts(block_mode: AutoresetMode) -> list[tuple[int, functools.partial | None]]:
    """(rows, block factory or None for a single CartPole), blocks of 3 and 2 around and
    between single envs; a NEXT_STEP batch also gets gymnasium's CartPoleVectorEnv."""
    parts = [(3, be.sync_block_fn(3, block_mode)), (1, None), (2, be.sync_block_fn(2, block_mode))]
    if block_mode is AutoresetMode.NEXT_STEP:
        parts.append((4, functools.partial(be.cartpole_block, 4)))
    return [*parts, (1, None)]


def factories(parts) -> list:
    return [be.cartpole if fn is None else fn for _, fn in parts]


class PartsAlone:
    """Each part of a mixed batch stepped alone: a block by itself, a single env in a
    SyncVectorEnv of one. ``mode``: the face's autoreset mode (its "same_step" over a
    DISABLED block resets the finished rows by ``reset_mask``, as the engine does)."""

    def __init__(self, parts, mode: str):
        self.mode = AutoresetMode(
            {"next_step": "NextStep", "same_step": "SameStep", "disabled": "Disabled"}[mode]
        )
        self.envs = [
            SyncVectorEnv([be.cartpole], autoreset_mode=self.mode) if fn is None else fn()
            for _, fn in parts
        ]
        bounds = np.cumsum([0] + [rows for rows, _ in parts])
        self.slices = [slice(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]
        self.num_envs = int(bounds[-1])

    def reset(self, seed: int | None = None, mask: np.ndarray | None = None) -> np.ndarray:
        obs = []
        for env, rows in zip(self.envs, self.slices):
            if mask is None:
                obs.append(env.reset(seed=seed + rows.start)[0])
            elif mask[rows].any():
                obs.append(env.reset(options={"reset_mask": mask[rows].copy()})[0])
            else:
                obs.append(self.last[rows])
        self.last = np.concatenate(obs)
        return self.last

    def step(self, actions: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
        """The concatenated transition, and each row's last observation where it finished."""
        parts, finals = [], np.zeros_like(self.last)
        for env, rows in zip(self.envs, self.slices):
            obs, reward, term, trunc, info = env.step(actions[rows])
            done = term | trunc
            if self.mode is AutoresetMode.SAME_STEP and done.any():
                if env.metadata["autoreset_mode"] is AutoresetMode.DISABLED:
                    finals[rows][done] = obs[done]
                    obs = env.reset(options={"reset_mask": done})[0]
                else:
                    finals[rows][done] = np.stack(info["final_obs"][done])
            parts.append((obs, reward, term, trunc))
        out = [np.concatenate(column) for column in zip(*parts)]
        self.last = out[0]
        return out, finals

    def close(self) -> None:
        for env in self.envs:
            env.close()


def assert_face_equals_parts(envs, parts, mode: str, steps: int = STEPS) -> int:
    """Step a gymnasium-face batch and its parts alone with the same actions; returns how
    many rows finished."""
    alone = PartsAlone(parts, mode)
    try:
        assert envs.num_envs == alone.num_envs
        obs, _ = envs.reset(seed=SEED)
        np.testing.assert_array_equal(obs, alone.reset(SEED))
        rng, finished = np.random.default_rng(2), 0
        for t in range(steps):
            a = rng.integers(0, 2, envs.num_envs)
            got = envs.step(a)
            want, finals = alone.step(a)
            for name, x, y in zip(TRANSITION, got[:4], want):
                np.testing.assert_array_equal(x, y, err_msg=f"step {t}: {name}")
            done = got[2] | got[3]
            finished += int(done.sum())
            if mode == "same_step" and done.any():
                final_obs = np.stack(got[4]["final_obs"][done])
                np.testing.assert_array_equal(final_obs, finals[done], err_msg=f"step {t}")
            if mode == "disabled" and done.any():  # explicit resets of the finished rows
                mask = done.copy()
                obs, _ = envs.reset(options={"reset_mask": mask})
                np.testing.assert_array_equal(obs, alone.reset(mask=mask), err_msg=f"step {t}")
        return finished
    finally:
        alone.close()


# ---- the gymnasium face -----------------------------------------------------------------------
@pytest.mark.parametrize(("mode", "block_mode"), MODES)
@pytest.mark.parametrize("cls", [SerialVectorEnv, ParallelVectorEnv])
def test_mixed_blocks_and_single_envs_equal_their_parts_alone(cls, mode, block_mode):
    parts = mixed_parts(block_mode)
    kwargs = {"num_workers": 2} if cls is ParallelVectorEnv else {}
    envs = cls(factories(parts), autoreset_mode=mode, **kwargs)
    try:
        sizes = tuple(rows for rows, _ in parts)
        assert envs.engine.worker_layout.rows_per_sub_env == sizes
        assert assert_face_equals_parts(envs, parts, mode) > 0
    finally:
        envs.close()


@pytest.mark.parametrize(
    "options",
    [
        {"context": "fork"},
        {"context": "forkserver"},
        {"context": "spawn", "local_worker": True},
        {"context": "spawn", "shared_memory": False},
        {"context": "spawn", "num_workers": 5},  # one sub-env per worker
    ],
)
def test_mixed_blocks_start_under_every_start_method(options):
    parts = mixed_parts(AutoresetMode.NEXT_STEP)
    envs = ParallelVectorEnv(factories(parts), **{"num_workers": 2, **options})
    try:
        assert assert_face_equals_parts(envs, parts, "next_step", steps=15) > 0
        metadata = envs.get_attr("metadata")  # per row: its sub-env's (a block's, per row)
        assert ["autoreset_mode" in m for m in metadata[:5]] == [True] * 3 + [False, True]
    finally:
        envs.close()


def test_sb3_vectorizers_take_mixed_blocks():
    pytest.importorskip("stable_baselines3")
    from gymvec.sb3 import ParallelVecEnv, SerialVecEnv

    parts = mixed_parts(AutoresetMode.DISABLED)
    for vec_env in (
        SerialVecEnv(factories(parts)),
        ParallelVecEnv(factories(parts), num_workers=2),
    ):
        alone = PartsAlone(parts, "same_step")
        try:
            assert vec_env.num_envs == alone.num_envs == 7
            vec_env.seed(SEED)
            np.testing.assert_array_equal(vec_env.reset(), alone.reset(SEED))
            rng = np.random.default_rng(3)
            for t in range(STEPS):
                a = rng.integers(0, 2, vec_env.num_envs)
                obs, rewards, dones, infos = vec_env.step(a)
                (want_obs, want_rewards, term, trunc), finals = alone.step(a)
                np.testing.assert_array_equal(obs, want_obs, err_msg=f"step {t}")
                np.testing.assert_array_equal(rewards, want_rewards, err_msg=f"step {t}")
                np.testing.assert_array_equal(dones, term | trunc, err_msg=f"step {t}")
                for k in np.flatnonzero(dones):
                    np.testing.assert_array_equal(infos[k]["terminal_observation"], finals[k])
        finally:
            vec_env.close()
            alone.close()


def test_first_ready_batches_over_blocks_of_two_sizes_are_refused_naming_the_sizes():
    with pytest.raises(ValueError, match=r"batch_size=2.*\[1, 2\] rows"):
        SerialVectorEnv([be.sync_block_fn(2), be.cartpole], batch_size=2)
    with pytest.raises(ValueError, match=r"batch_size=4.*\[2, 3\] rows"):
        ParallelVectorEnv([be.sync_block_fn(2), be.sync_block_fn(3)], batch_size=4)


# ---- the tensordict side --------------------------------------------------------------------
def assert_tensordict_equals_parts(env, parts, steps: int = STEPS) -> int:
    """Step a tensordict-side batch (``step_and_maybe_reset``) and its parts alone with the
    same actions; returns how many rows finished."""
    alone = PartsAlone(parts, "same_step")
    try:
        assert env.batch_size == torch.Size([alone.num_envs])
        env.set_seed(SEED)
        td = env.reset()
        np.testing.assert_array_equal(td["observation"].numpy(), alone.reset(SEED))
        rng, finished = np.random.default_rng(4), 0
        for t in range(steps):
            a = rng.integers(0, 2, alone.num_envs)
            td["action"] = torch.as_tensor(a)
            td, root = env.step_and_maybe_reset(td)
            (obs, rewards, terminations, truncations), finals = alone.step(a)
            np.testing.assert_array_equal(td["next", "reward"].numpy().ravel(), rewards)
            np.testing.assert_array_equal(td["next", "terminated"].numpy().ravel(), terminations)
            np.testing.assert_array_equal(td["next", "truncated"].numpy().ravel(), truncations)
            np.testing.assert_array_equal(root["observation"].numpy(), obs, err_msg=f"step {t}")
            done = terminations | truncations
            finished += int(done.sum())
            np.testing.assert_array_equal(
                td["next", "observation"].numpy()[done], finals[done], err_msg=f"step {t}"
            )
            td = root
        return finished
    finally:
        alone.close()


@pytest.mark.parametrize("cls", [SerialEnv, ParallelEnv])
def test_tensordict_side_over_mixed_blocks_equals_their_parts_alone(cls):
    parts = mixed_parts(AutoresetMode.DISABLED)  # rows 3, 1, 2, 1
    env = cls(2, factories(parts), envs_per_worker=[2, 2])
    try:
        assert env.engine.worker_layout.rows_per_sub_env == (3, 1, 2, 1)
        assert assert_tensordict_equals_parts(env, parts) > 0
    finally:
        env.close()


def test_tensordict_refusal_of_a_next_step_block_names_what_was_passed_and_what_to_build():
    def make_block():
        return gym.make_vec("CartPole-v1", 3, vectorization_mode="vector_entry_point")

    with pytest.raises(ValueError) as info:
        ParallelEnv(2, make_block)
    message = str(info.value)
    assert "'explicit'" not in message  # a mode the user never set
    assert "create_env_fn returned a gymnasium vector env (CartPoleVectorEnv of 3 rows" in message
    assert "autoreset mode NextStep" in message and "in its next step" in message
    assert "gymnasium.make_vec('CartPole-v1', 3, vectorization_mode='sync'" in message
    assert "AutoresetMode.DISABLED" in message
    assert "ParallelEnv(num_workers, lambda: gymvec.GymEnv('CartPole-v1')" in message
    # what it says to build runs
    built = gym.make_vec(
        "CartPole-v1",
        3,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": AutoresetMode.DISABLED},
    )
    built.close()
    env = SerialEnv(
        1,
        lambda: gym.make_vec(
            "CartPole-v1",
            3,
            vectorization_mode="sync",
            vector_kwargs={"autoreset_mode": AutoresetMode.DISABLED},
        ),
    )
    try:
        assert env.batch_size == torch.Size([3])
    finally:
        env.close()


def test_tensordict_refusal_of_a_same_step_block_says_it_resets_within_the_step():
    with pytest.raises(ValueError, match=r"autoreset mode SameStep.*within the same step"):
        SerialEnv(1, be.sync_block_fn(2, AutoresetMode.SAME_STEP))


# ---- BlockFactory: a hint, checked ----------------------------------------------------------
@pytest.mark.parametrize("cls", [SerialVectorEnv, ParallelVectorEnv])
def test_block_factory_of_a_wrong_size_names_expected_and_given(cls):
    fns = [BlockFactory(be.sync_block_fn(3), 2), BlockFactory(be.sync_block_fn(2), 2)]
    kwargs = {"num_workers": 2} if cls is ParallelVectorEnv else {}
    with pytest.raises(
        ValueError,
        match=r"BlockFactory num_envs: expected a block of 2 rows, as declared; its fn "
        r"built a block of 3 rows \(gymnasium.vector.sync_vector_env.SyncVectorEnv\)",
    ):
        cls(fns, **kwargs)


def test_block_factory_around_a_single_env_names_it():
    with pytest.raises(ValueError, match=r"expected a block of 2 rows.*no block \(a single env\)"):
        SerialVectorEnv([BlockFactory(be.cartpole, 2), be.sync_block_fn(2)])


def test_block_factories_lay_the_buffers_out_before_the_workers_start():
    """Declared sizes plan the rows before the workers start: they get the buffers as they
    start (an anonymous mapping), where a batch of unknown sizes hands its buffers over once
    the workers reported (a block they can map while they run)."""
    from gymvec.wire.buffers import MemmapMemory

    fns = [BlockFactory(be.sync_block_fn(3), 3), BlockFactory(be.sync_block_fn(2), 2)]
    declared = ParallelVectorEnv(fns, num_workers=2)
    reported = ParallelVectorEnv([be.sync_block_fn(3), be.sync_block_fn(2)], num_workers=2)
    try:
        assert not isinstance(declared.engine.shared.memory, MemmapMemory)
        assert isinstance(reported.engine.shared.memory, MemmapMemory)
        parts = [(3, be.sync_block_fn(3)), (2, be.sync_block_fn(2))]
        for envs in (declared, reported):
            assert assert_face_equals_parts(envs, parts, "next_step", steps=10) > 0
    finally:
        declared.close()
        reported.close()


def test_one_factory_that_changes_its_size_is_named():
    sizes = iter([2, 3])

    def shifting():
        return be.sync_block(next(sizes))

    envs = SerialVectorEnv([shifting] * 2)  # laid out from the first, built at first use
    try:
        with pytest.raises(ValueError, match=r"row 2 is a block of 3 rows.*laid out 2 row"):
            envs.reset(seed=0)
    finally:
        envs.close()


def test_a_mixed_batch_builds_no_sub_env_in_the_calling_process():
    built_here = []

    def counting_block():
        built_here.append(1)
        return be.sync_block(2)

    fns = [counting_block, be.cartpole]
    envs = ParallelVectorEnv(fns, num_workers=2, context="fork", local_worker=False)
    try:
        assert envs.num_envs == 3
        assert built_here == []  # built in the workers only (a forked list stays here)
    finally:
        envs.close()


def test_make_vec_with_single_env_fns_still_matches_sync_vector_env():
    fns = [functools.partial(be.cartpole) for _ in range(3)]  # three factories: reported
    envs = gymvec.ParallelVectorEnv(fns, num_workers=2)
    try:
        parts = [(1, None)] * 3
        assert assert_face_equals_parts(envs, parts, "next_step", steps=20) > 0
    finally:
        envs.close()
