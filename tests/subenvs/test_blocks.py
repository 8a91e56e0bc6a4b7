"""Blocks: a gymnasium vector env as one sub-env of ``num_envs`` rows (API.md section 10).

Each test steps a batch of blocks and, beside it, the same blocks (or gymnasium's
SyncVectorEnv over the same envs) alone with the contract's seeds: a block gets
``reset(seed=<its first row's seed>)``, rows are seeded ``seed + row``.
"""

from __future__ import annotations

import functools
import time

import _block_envs as be
import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from tensordict import TensorDict

import gymvec
from gymvec import BlockFactory, ParallelEnv, ParallelVectorEnv, SerialEnv, SerialVectorEnv

pytestmark = pytest.mark.timeout(120)

SEED = 7
STEPS = 40  # episodes end within MAX_STEPS: several resets per row
TRANSITION = ("observations", "rewards", "terminations", "truncations")


def actions(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.integers(0, 2, n)


def flat_reference(n: int, mode: AutoresetMode = AutoresetMode.NEXT_STEP) -> SyncVectorEnv:
    """gymnasium's SyncVectorEnv over ``n`` CartPoles: what blocks of the same envs equal."""
    return SyncVectorEnv([be.cartpole] * n, autoreset_mode=mode)


def assert_same_transitions(envs, reference, steps: int = STEPS) -> int:
    """Step both with the same random actions; returns how many rows finished."""
    obs, _ = envs.reset(seed=SEED)
    ref_obs, _ = reference.reset(seed=SEED)
    np.testing.assert_array_equal(obs, ref_obs)
    rng, finished = np.random.default_rng(0), 0
    for t in range(steps):
        a = actions(rng, envs.num_envs)
        got, want = envs.step(a), reference.step(a)
        for name, x, y in zip(TRANSITION, got[:4], want[:4]):
            np.testing.assert_array_equal(x, y, err_msg=f"step {t}: {name}")
        finished += int(np.sum(got[2] | got[3]))
    return finished


# ---- the gymnasium face ---------------------------------------------------------------------
@pytest.mark.parametrize("cls", [SerialVectorEnv, ParallelVectorEnv])
@pytest.mark.parametrize("rows", [3, 2500])  # 5,000 rows: the planner's numpy path as well
def test_blocks_in_workers_equal_the_blocks_stepped_alone(cls, rows):
    kwargs = {"num_workers": 2} if cls is ParallelVectorEnv else {}
    envs = cls([functools.partial(be.cartpole_block, rows)] * 2, **kwargs)
    alone = [be.cartpole_block(rows), be.cartpole_block(rows)]
    try:
        assert envs.num_envs == 2 * rows
        assert envs.single_observation_space == alone[0].single_observation_space
        obs, _ = envs.reset(seed=SEED)
        # block 1's first row is row `rows`: it is reset with seed SEED + rows
        want = [alone[0].reset(seed=SEED)[0], alone[1].reset(seed=SEED + rows)[0]]
        np.testing.assert_array_equal(obs, np.concatenate(want))
        rng, finished = np.random.default_rng(1), 0
        for t in range(STEPS):
            a = actions(rng, 2 * rows)
            got = envs.step(a)
            parts = [alone[0].step(a[:rows]), alone[1].step(a[rows:])]
            for k, name in enumerate(TRANSITION):
                want_k = np.concatenate([parts[0][k], parts[1][k]])
                np.testing.assert_array_equal(got[k], want_k, err_msg=f"step {t}: {name}")
            assert got[1].dtype == np.float64 and got[2].dtype == np.bool_
            finished += int(np.sum(got[2] | got[3]))
        assert finished >= 6  # NEXT_STEP resets happened in every row
    finally:
        envs.close()


@pytest.mark.parametrize("cls", [SerialVectorEnv, ParallelVectorEnv])
def test_blocks_mixed_with_single_envs_in_factory_order(cls):
    fns = [
        BlockFactory(be.sync_block_fn(3), 3),
        be.cartpole,
        BlockFactory(be.sync_block_fn(2), 2),
        be.cartpole,
    ]
    kwargs = {"num_workers": 2} if cls is ParallelVectorEnv else {}
    envs = cls(fns, **kwargs)
    try:
        assert envs.num_envs == 7
        assert assert_same_transitions(envs, flat_reference(7)) > 0
    finally:
        envs.close()


def test_next_step_blocks_alone_step_every_row_and_single_envs_get_resets_planned():
    """A NEXT_STEP block resets its finished rows in its own step: a batch of such blocks
    alone gets one STEP mode for every row, finished or not; a single env among them still
    gets RESET_NEXT for a finished row (and both equal their references)."""
    from gymvec.wire.commands import RESET_NEXT, STEP

    blocks = SerialVectorEnv([be.sync_block_fn(3), be.sync_block_fn(3)])
    mixed = SerialVectorEnv([BlockFactory(be.sync_block_fn(3), 3), be.cartpole])
    try:
        for envs in (blocks, mixed):
            reference = flat_reference(envs.num_envs)
            reference.reset(seed=SEED)
            obs, _ = envs.reset(seed=SEED)
            rng, seen = np.random.default_rng(3), set()
            for t in range(STEPS):
                finished = envs.engine.finished.copy()
                a = actions(rng, envs.num_envs)
                got, want = envs.step(a), reference.step(a)
                for name, x, y in zip(TRANSITION, got[:4], want[:4]):
                    np.testing.assert_array_equal(x, y, err_msg=f"step {t}: {name}")
                modes = envs.engine.control.mode
                if envs is blocks:
                    assert set(modes.tolist()) == {STEP}, f"step {t}: {modes}"
                elif finished[-1]:  # the single env finished last step: reset, not stepped
                    assert modes[-1] == RESET_NEXT
                    seen.add(t)
            assert envs is blocks or seen, "the single env never finished"
    finally:
        blocks.close()
        mixed.close()


@pytest.mark.parametrize("block_mode", [AutoresetMode.SAME_STEP, AutoresetMode.DISABLED])
def test_same_step_over_blocks_equals_sync_vector_env(block_mode):
    envs = ParallelVectorEnv(
        [be.sync_block_fn(3, block_mode)] * 2, num_workers=2, autoreset_mode="same_step"
    )
    reference = flat_reference(6, AutoresetMode.SAME_STEP)
    try:
        obs, _ = envs.reset(seed=SEED)
        np.testing.assert_array_equal(obs, reference.reset(seed=SEED)[0])
        rng, finals = np.random.default_rng(2), 0
        for t in range(STEPS):
            a = actions(rng, 6)
            got, want = envs.step(a), reference.step(a)
            for name, x, y in zip(TRANSITION, got[:4], want[:4]):
                np.testing.assert_array_equal(x, y, err_msg=f"step {t}: {name}")
            info, ref_info = got[4], want[4]
            assert ("final_obs" in info) == ("final_obs" in ref_info)
            if "final_obs" in ref_info:
                finals += 1
                np.testing.assert_array_equal(info["_final_obs"], ref_info["_final_obs"])
                for k in np.flatnonzero(ref_info["_final_obs"]):
                    np.testing.assert_array_equal(info["final_obs"][k], ref_info["final_obs"][k])
        assert finals > 0
    finally:
        envs.close()


def test_disabled_mode_partial_resets_reach_the_blocks_as_reset_masks():
    mode = AutoresetMode.DISABLED
    envs = ParallelVectorEnv([be.sync_block_fn(3, mode)] * 2, num_workers=2, autoreset_mode=mode)
    reference = flat_reference(6, mode)
    try:
        envs.reset(seed=SEED)
        reference.reset(seed=SEED)
        rng = np.random.default_rng(3)
        resets = 0
        for t in range(STEPS):
            a = actions(rng, 6)
            got, want = envs.step(a), reference.step(a)
            for name, x, y in zip(TRANSITION, got[:4], want[:4]):
                np.testing.assert_array_equal(x, y, err_msg=f"step {t}: {name}")
            done = got[2] | got[3]
            if done.any():  # rows of one block, or of both, never all of a block's
                resets += 1
                mask = done.copy()
                obs, _ = envs.reset(options={"reset_mask": mask})
                ref_obs, _ = reference.reset(options={"reset_mask": mask.copy()})
                np.testing.assert_array_equal(obs, ref_obs)
        assert resets > 0
    finally:
        envs.close()


@pytest.mark.parametrize("cls", [SerialVectorEnv, ParallelVectorEnv])
@pytest.mark.parametrize("mode", [AutoresetMode.DISABLED, AutoresetMode.NEXT_STEP])
def test_large_observations_of_blocks_go_out_through_lanes_and_stay_right(mode, cls):
    # Steps into observation lanes, then commands that read lane 0 ("next"'s own rows): a
    # reset of one row (the other block skips it), a step into lane 0 once every lane is
    # held, a reset of everything into "next".
    kwargs = {"num_workers": 2} if cls is ParallelVectorEnv else {}
    envs = cls([functools.partial(be.wide_block, 3, mode)] * 2, autoreset_mode=mode, **kwargs)
    reference = SyncVectorEnv([be.wide_cartpole] * 6, autoreset_mode=mode)
    assert envs.observation_space.shape == (6, 4 * be.WIDE)  # 96 kB: lanes
    try:
        np.testing.assert_array_equal(envs.reset(seed=SEED)[0], reference.reset(seed=SEED)[0])
        rng, held, resets = np.random.default_rng(4), [], 0
        for t in range(STEPS):
            a = actions(rng, 6)
            got, want = envs.step(a), reference.step(a)
            for name, x, y in zip(TRANSITION, got[:4], want[:4]):
                np.testing.assert_array_equal(x, y, err_msg=f"step {t}: {name}")
            if t < 5:  # hold some: every lane taken, the steps go to lane 0
                held.append((got[0], want[0].copy()))
            if t == 5:  # handed out: never written again; let go, the lanes are free again
                for k, (array, value) in enumerate(held):
                    np.testing.assert_array_equal(array, value, err_msg=f"held observation {k}")
                held = []
            done = got[2] | got[3]
            if t % 7 == 3 and not done.any():  # a reset of one row: the other block skips it
                one = np.arange(6) == t % 6
                obs, _ = envs.reset(options={"reset_mask": one})
                ref_obs, _ = reference.reset(options={"reset_mask": one.copy()})
                np.testing.assert_array_equal(obs, ref_obs, err_msg=f"reset after step {t}")
            if mode is AutoresetMode.DISABLED and done.any():
                resets += 1
                obs, _ = envs.reset(options={"reset_mask": done.copy()})
                ref_obs, _ = reference.reset(options={"reset_mask": done.copy()})
                np.testing.assert_array_equal(obs, ref_obs, err_msg=f"reset after step {t}")
            if t == STEPS // 2:  # a reset of everything into a lane, then of one row
                obs, _ = envs.reset(seed=SEED + 1)
                np.testing.assert_array_equal(obs, reference.reset(seed=SEED + 1)[0])
                one = np.arange(6) == 4
                obs, _ = envs.reset(options={"reset_mask": one})
                np.testing.assert_array_equal(obs, reference.reset(options={"reset_mask": one})[0])
        assert resets > 0 or mode is AutoresetMode.NEXT_STEP
    finally:
        envs.close()


def test_a_block_that_cannot_honour_the_mode_is_refused_naming_both():
    with pytest.raises(ValueError, match=r"NextStep.*'same_step'.*SameStep or Disabled"):
        SerialVectorEnv([lambda: be.cartpole_block(2)], autoreset_mode="same_step")
    with pytest.raises(ValueError, match=r"SameStep.*'next_step'"):
        SerialVectorEnv([be.sync_block_fn(2, AutoresetMode.SAME_STEP)])


@pytest.mark.parametrize("cls", [SerialVectorEnv, ParallelVectorEnv])
def test_call_and_get_attr_run_once_per_block(cls):
    envs = cls([lambda: be.CountingBlock(2)] * 2)
    try:
        assert envs.call("ping") == (1, 1, 1, 1)  # one call per block, its result per row
        assert envs.call("ping") == (2, 2, 2, 2)
        assert envs.get_attr("pings") == (2, 2, 2, 2)
        envs.set_attr("pings", [10, 10, 20, 20])
        assert envs.get_attr("pings") == (10, 10, 20, 20)
    finally:
        envs.close()


# ---- the tensordict side --------------------------------------------------------------------
@pytest.mark.parametrize("cls", [SerialEnv, ParallelEnv])
def test_tensordict_side_over_disabled_blocks_equals_same_step_sync(cls):
    env = cls(2, be.sync_block_fn(3, AutoresetMode.DISABLED))
    reference = flat_reference(6, AutoresetMode.SAME_STEP)
    try:
        assert env.batch_size == torch.Size([6])
        env.set_seed(SEED)
        td = env.reset()
        np.testing.assert_array_equal(td["observation"].numpy(), reference.reset(seed=SEED)[0])
        rng, finals = np.random.default_rng(4), 0
        for t in range(STEPS):
            a = actions(rng, 6)
            td["action"] = torch.as_tensor(a)
            td, root = env.step_and_maybe_reset(td)
            obs, rewards, terminations, truncations, info = reference.step(a)
            done = terminations | truncations
            np.testing.assert_array_equal(td["next", "reward"].numpy().ravel(), rewards)
            np.testing.assert_array_equal(td["next", "terminated"].numpy().ravel(), terminations)
            np.testing.assert_array_equal(td["next", "truncated"].numpy().ravel(), truncations)
            np.testing.assert_array_equal(root["observation"].numpy(), obs, err_msg=f"step {t}")
            for k in np.flatnonzero(done):  # "next" holds the last observation
                finals += 1
                np.testing.assert_array_equal(
                    td["next", "observation"][k].numpy(), info["final_obs"][k]
                )
            td = root
        assert finals > 0
    finally:
        env.close()


def test_tensordict_partial_reset_of_a_block_resets_its_masked_rows_only():
    mode = AutoresetMode.DISABLED
    env = ParallelEnv(2, be.sync_block_fn(3, mode))
    reference = flat_reference(6, mode)
    try:
        env.set_seed(SEED)
        td = env.reset()
        reference.reset(seed=SEED)
        a = np.ones(6, dtype=np.int64)
        td["action"] = torch.as_tensor(a)
        td = env.step(td)
        ref_obs = reference.step(a)[0]
        np.testing.assert_array_equal(td["next", "observation"].numpy(), ref_obs)
        mask = np.array([False, True, False, True, True, False])
        out = env.reset(TensorDict({"_reset": torch.as_tensor(mask)[:, None]}, [6]))
        ref_obs, _ = reference.reset(options={"reset_mask": mask.copy()})
        np.testing.assert_array_equal(out["observation"].numpy(), ref_obs)
    finally:
        env.close()


def test_tensordict_side_refuses_a_next_step_block():
    with pytest.raises(ValueError, match=r"NextStep.*in its next step.*AutoresetMode.DISABLED"):
        SerialEnv(1, lambda: be.cartpole_block(2))


# ---- make_vec ---------------------------------------------------------------------------------
def test_make_vec_vector_entry_point_builds_one_block_per_worker():
    envs = gymvec.make_vec(
        "CartPole-v1", 10, vectorization_mode="vector_entry_point", num_workers=2
    )
    alone = [
        gym.make_vec("CartPole-v1", 5, vectorization_mode="vector_entry_point") for _ in range(2)
    ]
    try:
        assert envs.num_envs == 10
        assert envs.get_attr("num_envs") == (5,) * 10  # each row asks its block
        obs, _ = envs.reset(seed=SEED)
        want = np.concatenate([alone[0].reset(seed=SEED)[0], alone[1].reset(seed=SEED + 5)[0]])
        np.testing.assert_array_equal(obs, want)
        rng = np.random.default_rng(5)
        for _ in range(30):
            a = actions(rng, 10)
            got = envs.step(a)[0]
            want = np.concatenate([alone[0].step(a[:5])[0], alone[1].step(a[5:])[0]])
            np.testing.assert_array_equal(got, want)
    finally:
        envs.close()


def test_gymnasium_make_vec_takes_the_same_mode_for_gymvec_ids():
    envs = gym.make_vec(
        "gymvec:gymvec/CartPole-v1",
        6,
        vectorization_mode="vector_entry_point",
        gymvec_vectorization_mode="vector_entry_point",
        num_workers=2,
    )
    try:
        assert isinstance(envs, ParallelVectorEnv) and envs.num_envs == 6
        assert envs.get_attr("num_envs") == (3,) * 6
    finally:
        envs.close()


def test_an_id_without_a_vector_entry_point_says_so():
    with pytest.raises(
        ValueError, match=r"Pendulum-v1.*vector entry point.*vectorization_mode=None"
    ):
        gymvec.make_vec("Pendulum-v1", 2, vectorization_mode="vector_entry_point")


# ---- bad input ----------------------------------------------------------------------------------
def test_a_factory_of_neither_env_nor_vector_env_is_a_type_error():
    with pytest.raises(
        TypeError,
        match=r"gymnasium.Env, a gymnasium.vector.VectorEnv.*EnvBase.*"
        r"numpy.ndarray",
    ):
        SerialVectorEnv([be.not_an_env])


def test_blocks_whose_spaces_differ_are_a_value_error():
    fns = [BlockFactory(be.sync_block_fn(2), 2), BlockFactory(lambda: be.pendulum_block(2), 2)]
    expected = (
        r"factory 1 \(rows 2..3\): observation_spec.*\(3,\).*factory 0 \(rows 0..1\)'s.*\(4,\)"
    )
    with pytest.raises(ValueError, match=expected):
        SerialVectorEnv(fns)


def test_a_block_that_raises_is_a_worker_error_naming_its_rows_and_worker():
    envs = ParallelVectorEnv([lambda: be.RaisingBlock(2, fail_at=2)] * 2, num_workers=2)
    try:
        envs.reset(seed=0)
        envs.step(np.zeros(4, dtype=np.int64))
        with pytest.raises(gymvec.WorkerError) as info:
            envs.step(np.zeros(4, dtype=np.int64))
        assert isinstance(info.value, RuntimeError)
        assert "the block broke" in str(info.value)
        assert "rows 0..1" in str(info.value) or "rows 2..3" in str(info.value)
        assert "worker" in str(info.value)
    finally:
        envs.close()


def test_a_block_returning_the_wrong_length_names_the_shapes():
    envs = SerialVectorEnv([lambda: be.ShortBlock(3)])
    try:
        envs.reset(seed=0)
        with pytest.raises(
            ValueError, match=r"ShortBlock.*rewards of shape \(2,\); expected \(3,\)"
        ):
            envs.step(np.zeros(3, dtype=np.int64))
    finally:
        envs.close()


# ---- first-ready batches ------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [SerialVectorEnv, ParallelVectorEnv])
def test_first_ready_batches_return_whole_blocks_each_as_stepped_alone(cls):
    kwargs = {"num_workers": 2} if cls is ParallelVectorEnv else {}
    envs = cls([be.sync_block_fn(2)] * 4, batch_size=4, **kwargs)
    alone = [be.sync_block(2) for _ in range(4)]
    try:
        envs.async_reset(seed=SEED)
        # what each block shows next: first its reset, then the step it was sent
        expected = {k: block.reset(seed=SEED + 2 * k)[0] for k, block in enumerate(alone)}
        rng, counts = np.random.default_rng(6), np.zeros(8, dtype=int)
        for _ in range(STEPS):
            obs, _, _, _, info = envs.recv()
            ids = info["env_id"]
            blocks = np.unique(ids // 2)
            assert len(ids) == 4 and all(np.sum(ids // 2 == b) == 2 for b in blocks), ids
            a = actions(rng, 4)
            for b in blocks.tolist():
                pos = np.flatnonzero(ids // 2 == b)
                np.testing.assert_array_equal(obs[pos], expected[b][ids[pos] % 2])
                block_actions = np.empty(2, dtype=np.int64)
                block_actions[ids[pos] % 2] = a[pos]
                expected[b] = alone[b].step(block_actions)[0]
            envs.send(a, ids)
            counts[ids] += 1
        assert counts.min() > 0
        envs.recv()
        with pytest.raises(ValueError, match=r"rows 0..1 form one block.*1 of its 2 rows"):
            envs.send(np.zeros(1, dtype=np.int64), np.array([0]))
    finally:
        envs.close()


def test_first_ready_batch_size_must_be_a_multiple_of_the_block_size():
    with pytest.raises(ValueError, match=r"multiple of it; got batch_size=3.*\[2\] rows"):
        SerialVectorEnv([be.sync_block_fn(2)] * 4, batch_size=3)
    with pytest.raises(ValueError, match=r"batch_size=2.*\[1, 2\] rows"):
        SerialVectorEnv([BlockFactory(be.sync_block_fn(2), 2), be.cartpole], batch_size=2)


# ---- timeouts and close -------------------------------------------------------------------------
def test_a_hung_block_times_out_naming_its_rows_and_close_ends_it(no_leaks):
    envs = ParallelVectorEnv(
        [lambda: be.HangingBlock(2), lambda: be.cartpole_block(2)], num_workers=2, timeout=1.0
    )
    try:
        envs.reset(seed=0)
        envs.step(np.zeros(4, dtype=np.int64))
        started = time.monotonic()
        with pytest.raises(TimeoutError, match=r"still busy: sub-envs 0, 1 \(worker 0"):
            envs.step(np.zeros(4, dtype=np.int64))
        assert time.monotonic() - started < 10
        with pytest.raises(RuntimeError):  # the env refuses further steps, saying why
            envs.step(np.zeros(4, dtype=np.int64))
    finally:
        started = time.monotonic()
        envs.close()
        assert time.monotonic() - started < 20
