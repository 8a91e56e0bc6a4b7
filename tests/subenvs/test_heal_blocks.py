"""Blocks heal (API section 13): a gymnasium ``SyncVectorEnv`` block, mixed with single envs,
whose step or reset raises is rebuilt from its factory where it lives; all of its rows read as
truncated with ``infos["fault"]`` and their last observation, the mode's follow-up runs, and
the single envs beside it equal gymnasium's SyncVectorEnv over the same envs without the fault,
step for step, in each autoreset mode the block runs exactly."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from _flaky_envs import FlakyCartPole, FlakyResetCartPole
from gymnasium.vector import AutoresetMode, SyncVectorEnv

import gymvec
from tests import _heal

pytestmark = pytest.mark.timeout(180)

EVERY, STEPS, SEED = 7, 30, 5
BLOCK = [1, 2, 3]  # the block's rows; rows 0 and 4 are single envs
SINGLES = [0, 4]
N = 5
# The face's autoreset mode, and the block mode it runs exactly (see subenvs.block.HONOURS)
MODES = [
    ("next_step", AutoresetMode.NEXT_STEP),
    ("same_step", AutoresetMode.SAME_STEP),
    ("same_step", AutoresetMode.DISABLED),
    ("disabled", AutoresetMode.DISABLED),
]


def block_fn(block_mode: AutoresetMode, every: int = EVERY) -> functools.partial:
    """A SyncVectorEnv of 3 CartPoles whose middle one raises every ``every`` steps."""
    fns = [functools.partial(FlakyCartPole, every if k == 1 else 0) for k in range(3)]
    return functools.partial(SyncVectorEnv, fns, autoreset_mode=block_mode)


def mixed(backend: str, block: functools.partial, mode: str) -> gymvec.GymnasiumVectorEnv:
    fns = [FlakyCartPole, block, FlakyCartPole]
    if backend == "serial":
        return gymvec.SerialVectorEnv(fns, autoreset_mode=mode, on_fault="restart")
    return gymvec.ParallelVectorEnv(
        fns, autoreset_mode=mode, num_workers=2, local_worker=False, on_fault="restart"
    )


def actions(t: int) -> np.ndarray:
    return np.array([(t * 3 + i) % 2 for i in range(N)])


def run(envs, mode: str) -> list:
    """(obs, rewards, terminations, truncations, fault mask) per step; under "disabled" the
    finished rows are reset after each step (an entry each step, the runs stay aligned)."""
    obs, _ = envs.reset(seed=SEED)
    out = [(obs, None, None, None, None)]
    for t in range(STEPS):
        obs, rew, term, trunc, infos = envs.step(actions(t))
        out.append((obs, rew, term, trunc, infos.get("_fault", np.zeros(N, bool))))
        if mode == "disabled":
            if (term | trunc).any():
                obs, _ = envs.reset(options={"reset_mask": term | trunc})
            out.append((obs, None, None, None, None))
    return out


@pytest.mark.parametrize("backend", ["serial", "processes"])
@pytest.mark.parametrize(("mode", "block_mode"), MODES)
def test_a_raising_block_heals_and_the_single_envs_run_as_without_it(
    backend, mode, block_mode
) -> None:
    envs = mixed(backend, block_fn(block_mode), mode)
    reference = SyncVectorEnv([FlakyCartPole] * N, autoreset_mode=AutoresetMode[mode.upper()])
    try:
        got, want = run(envs, mode), run(reference, mode)
        restarts, faults = envs.restarts, envs.faults
    finally:
        envs.close()
        reference.close()
    # one restart per fault of the block (one sub-env of three rows), none of the others
    assert restarts.tolist() == [0, len(faults), 0] and len(faults) >= 3
    assert all(f.sub_env == 1 and f.rows == tuple(BLOCK) for f in faults)
    assert all(f.kind == "error" and "flaky sub-env" in f.message for f in faults)
    assert _heal.check_masked_run(got, want, BLOCK) == len(faults)


@pytest.mark.parametrize(("mode", "block_mode"), MODES[:2])
def test_the_faulted_block_reads_its_last_observations_then_the_rebuilt_reset(
    mode, block_mode
) -> None:
    envs = mixed("processes", block_fn(block_mode, every=3), mode)
    try:
        obs, _ = envs.reset(seed=SEED)
        for t in range(2):
            last = envs.step(actions(t))[0][BLOCK].copy()
        obs, rew, _, trunc, infos = envs.step(actions(2))  # the block's 3rd step raises
        assert infos["_fault"].tolist() == [False, True, True, True, False]
        assert all(m.startswith("RuntimeError: flaky sub-env") for m in infos["fault"][BLOCK])
        if mode == "same_step":  # the rebuilt block's reset now, the last obs as final
            np.testing.assert_array_equal(np.stack(infos["final_obs"][BLOCK]), last)
            assert not np.array_equal(obs[BLOCK], last)
            return
        np.testing.assert_array_equal(obs[BLOCK], last)
        obs, rew, term, trunc, infos = envs.step(actions(3))  # NEXT_STEP: the reset
        assert not rew[BLOCK].any() and not term[BLOCK].any() and not trunc[BLOCK].any()
        assert "_fault" not in infos
        assert not np.array_equal(obs[BLOCK], last)
        envs.step(actions(4))  # and the rebuilt block steps on
    finally:
        envs.close()


@pytest.mark.parametrize("backend", ["serial", "processes"])
def test_a_block_that_raises_in_a_reset_is_reset_again_rebuilt(backend) -> None:
    """Its second reset raises: the rebuilt block is reset again, counted as a restart."""
    fns = [functools.partial(FlakyResetCartPole, 2 if k == 1 else 0, "raise") for k in range(3)]
    block = functools.partial(SyncVectorEnv, fns, autoreset_mode=AutoresetMode.NEXT_STEP)
    envs = mixed(backend, block, "next_step")
    reference = SyncVectorEnv([FlakyCartPole] * N)
    try:
        envs.reset(seed=SEED)
        reference.reset(seed=SEED)
        obs, infos = envs.reset(seed=SEED + 1)
        want, _ = reference.reset(seed=SEED + 1)
        np.testing.assert_array_equal(obs[SINGLES], want[SINGLES])
        assert envs.restarts.tolist() == [0, 1, 0]
        for t in range(5):
            got, want = envs.step(actions(t))[0], reference.step(actions(t))[0]
            np.testing.assert_array_equal(got[SINGLES], want[SINGLES])
    finally:
        envs.close()
        reference.close()


@pytest.mark.parametrize("on_fault", ["raise", "restart"])
def test_restarts_has_one_count_per_sub_env_whatever_on_fault(on_fault) -> None:
    """A block is one sub-env in ``restarts`` (rows 1-3 here), under "raise" (zeros) as under
    "restart"; the tensordict side counts the same way."""
    fns = [FlakyCartPole, block_fn(AutoresetMode.NEXT_STEP), FlakyCartPole]
    envs = gymvec.SerialVectorEnv(fns, on_fault=on_fault)
    # (the tensordict side resets by mask: its blocks leave resets to the caller)
    fns[1] = block_fn(AutoresetMode.DISABLED)
    batched = gymvec.SerialEnv(3, fns, on_fault=on_fault)
    try:
        envs.reset(seed=0)
        assert envs.num_envs == N and envs.restarts.tolist() == [0, 0, 0]
        assert batched.restarts.tolist() == [0, 0, 0]
    finally:
        envs.close()
        batched.close()
