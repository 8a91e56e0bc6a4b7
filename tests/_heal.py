"""What the heal tests share: a run of a vector env with the same actions every time, the
reference run over healthy envs, and the check of a run with faults against it (API section 13:
every other row as the reference's; each faulted row truncated, reward 0, its last
observation)."""

from __future__ import annotations

import numpy as np
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from tests._flaky_envs import healthy_fns


def actions(t: int, n: int) -> np.ndarray:
    return np.array([(t + i) % 2 for i in range(n)])


def run(envs, mode: str, steps: int, before_step=None) -> list:
    """(obs, rewards, terminations, truncations, infos) per step, the reset's first;
    DISABLED resets the finished rows after each step (an entry each step)."""
    obs, infos = envs.reset(seed=11)
    out = [(obs, None, None, None, infos)]
    for t in range(steps):
        if before_step is not None:
            before_step(t)
        out.append(envs.step(actions(t, envs.num_envs)))
        if mode == "disabled":
            finished = out[-1][2] | out[-1][3]
            if finished.any():
                obs, infos = envs.reset(options={"reset_mask": finished})
                out.append((obs, None, None, None, infos))
            else:
                out.append((out[-1][0], None, None, None, {}))
    return out


def reference(mode: str, n: int, steps: int) -> list:
    """The same run over ``n`` healthy envs in gymnasium's SyncVectorEnv."""
    envs = SyncVectorEnv(healthy_fns(n), autoreset_mode=AutoresetMode[mode.upper()])
    try:
        return run(envs, mode, steps)
    finally:
        envs.close()


def check_faulted_run(
    got: list, want: list, mode: str, faulted_rows: list[int], message: str
) -> int:
    """Every row but ``faulted_rows`` as ``want``'s; each faulted step as API section 13 says.
    Returns how many steps faulted."""
    others = [row for row in range(len(got[0][0])) if row not in faulted_rows]
    faulted, last_obs = 0, got[0][0]
    for g, w in zip(got, want):
        obs, rew, term, trunc, infos = g
        np.testing.assert_array_equal(obs[others], w[0][others])
        if rew is not None:
            for k in (1, 2, 3):
                np.testing.assert_array_equal(g[k][others], w[k][others])
        fault = (infos or {}).get("_fault")
        if rew is not None and fault is not None:
            assert np.flatnonzero(fault).tolist() == faulted_rows
            assert all(message in m for m in infos["fault"][faulted_rows])
            assert rew[faulted_rows].tolist() == [0.0] * len(faulted_rows)
            assert not term[faulted_rows].any() and trunc[faulted_rows].all()
            # the row's last observation: in the step's, or SAME_STEP's final_obs
            if mode == "same_step":
                final = np.stack(infos["final_obs"][faulted_rows])
            else:
                final = obs[faulted_rows]
            np.testing.assert_array_equal(final, last_obs[faulted_rows])
            faulted += 1
        last_obs = obs
    return faulted


def check_masked_run(got: list, want: list, faulted_rows: list[int]) -> int:
    """For runs of (obs, rewards, terminations, truncations, fault mask) per step (None for a
    reset's): every row but ``faulted_rows`` as ``want``'s and never faulted; a step that
    faults faults all of ``faulted_rows`` (a block's rows together), truncated, not
    terminated, reward 0. Returns how many steps faulted."""
    others = [row for row in range(len(got[0][0])) if row not in faulted_rows]
    faulted = 0
    for (obs, rew, term, trunc, fault), (w_obs, w_rew, w_term, w_trunc, _) in zip(got, want):
        np.testing.assert_array_equal(obs[others], w_obs[others])
        if rew is None:
            continue
        for g, w in ((rew, w_rew), (term, w_term), (trunc, w_trunc)):
            np.testing.assert_array_equal(g[others], w[others])
        assert not fault[others].any()
        if fault[faulted_rows].any():
            faulted += 1
            assert fault[faulted_rows].all() and trunc[faulted_rows].all()
            assert not term[faulted_rows].any() and not rew[faulted_rows].any()
    return faulted
