"""gymvec.pettingzoo.make_vec: one PettingZooBlock per worker under gymvec's vector envs, equal
to a single block over all the envs (itself checked against the envs stepped alone)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pettingzoo")

from _pz_envs import MixedSpacesEnv, crashing_env, leaving_env, simple_spread  # noqa: E402

import gymvec  # noqa: E402
from gymvec.pettingzoo import PettingZooBlock, make_vec  # noqa: E402


def test_make_vec_refuses_envs_before_any_worker_starts():
    from mpe2 import simple_spread_v3

    with pytest.raises(TypeError, match="aec_to_parallel"):
        make_vec(simple_spread_v3.env, 2)
    with pytest.raises(ValueError, match="hunter_0: .*prey_0: .*make_env"):
        make_vec(MixedSpacesEnv, 2)
    with pytest.raises(ValueError, match="backend: expected one of"):
        make_vec(leaving_env, 2, backend="ray")
    with pytest.raises(ValueError, match="num_workers: expected"):
        make_vec(leaving_env, 2, num_workers=3)


def _assert_same(a, b, rows=slice(None)) -> None:
    """The same results; ``infos["alive"]`` compared on ``rows`` (a partial reset's infos are
    those of the rows it reset, as gymnasium's vector envs give them)."""
    for x, y in zip(a, b):
        if isinstance(x, dict):
            np.testing.assert_array_equal(x["alive"][rows], y["alive"][rows])
        else:
            np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("backend", ["serial", "parallel"])
@pytest.mark.parametrize("mode", ["next_step", "same_step"])
def test_make_vec_equals_one_block(backend, mode, no_leaks):
    envs = make_vec(leaving_env, 5, backend=backend, num_workers=2, autoreset_mode=mode)
    block = PettingZooBlock(leaving_env, 5, autoreset_mode=mode)
    try:
        assert envs.num_envs == 15 and envs.rows == block.rows
        assert envs.rows[3] == (1, "a_0")
        _assert_same(envs.reset(seed=4), block.reset(seed=4))
        rng = np.random.default_rng(0)
        for _ in range(12):
            actions = rng.integers(0, 3, 15)
            _assert_same(envs.step(actions), block.step(actions))
    finally:
        envs.close()
        block.close()


def test_make_vec_disabled_resets_whole_envs(no_leaks):
    envs = make_vec(simple_spread, 4, num_workers=2, autoreset_mode="disabled")
    block = PettingZooBlock(simple_spread, 4, autoreset_mode="disabled")
    try:
        _assert_same(envs.reset(seed=1), block.reset(seed=1))
        actions = np.ones(12, np.int64)
        for _ in range(6):  # max_cycles=6: every env truncates
            _assert_same(envs.step(actions), block.step(actions))
        mask = np.zeros(12, bool)
        mask[3:9] = True  # envs 1 and 2, one in each worker
        _assert_same(
            envs.reset(options={"reset_mask": mask}),
            block.reset(options={"reset_mask": mask}),
            mask,
        )
        with pytest.raises(ValueError, match="whole envs"):
            envs.reset(options={"reset_mask": np.eye(12, dtype=bool)[4]})
    finally:
        envs.close()
        block.close()


def test_make_vec_worker_error(no_leaks):
    envs = make_vec(crashing_env, 2, num_workers=2, local_worker=False)
    try:
        envs.reset(seed=0)
        envs.step(np.zeros(6, np.int64))
        with pytest.raises(gymvec.WorkerError, match="CrashingEnv: boom"):
            envs.step(np.zeros(6, np.int64))
    finally:
        envs.close()
