"""Faults that heal on the gymnasium face (API section 13): a sub-env that raises in a step is
rebuilt (in a worker process, or in this one), its row reads as truncated with
``infos["fault"]``, and every other row equals gymnasium's SyncVectorEnv over the same envs
without the fault, step for step, in each autoreset mode."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

import gymvec
from gymvec.errors import WorkerError
from tests import _heal
from tests._flaky_envs import FlakyCartPole, flaky_fns, healthy_fns

N, ROW, EVERY, STEPS = 4, 1, 9, 40
MODES = ["next_step", "same_step", "disabled"]


def healing(backend: str, fns: list, mode: str, **kwargs) -> gymvec.GymnasiumVectorEnv:
    if backend == "serial":
        return gymvec.SerialVectorEnv(fns, autoreset_mode=mode, **kwargs)
    return gymvec.ParallelVectorEnv(
        fns, autoreset_mode=mode, num_workers=2, local_worker=False, **kwargs
    )


def actions(t: int) -> np.ndarray:
    return np.array([(t + i) % 2 for i in range(N)])


def run(envs, mode: str, steps: int = STEPS) -> list:
    """(obs, rewards, terminations, truncations, fault mask) per step; DISABLED resets the
    finished rows after each step."""
    out = []
    obs, _ = envs.reset(seed=7)
    out.append((obs, None, None, None, None))
    for t in range(steps):
        obs, rew, term, trunc, infos = envs.step(actions(t))
        out.append((obs, rew, term, trunc, infos.get("_fault", np.zeros(N, bool))))
        if mode == "disabled":  # (an entry each step: the two runs' entries stay aligned)
            if (term | trunc).any():
                obs, _ = envs.reset(options={"reset_mask": term | trunc})
            out.append((obs, None, None, None, None))
    return out


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", ["serial", "processes"])
@pytest.mark.parametrize("mode", MODES)
def test_a_raising_sub_env_heals_and_the_others_run_as_without_it(backend, mode) -> None:
    envs = healing(backend, flaky_fns(N, ROW, EVERY), mode, on_fault="restart")
    reference = SyncVectorEnv(healthy_fns(N), autoreset_mode=AutoresetMode[mode.upper()])
    try:
        got, want = run(envs, mode), run(reference, mode)
        faults = envs.faults
        restarts = envs.restarts
    finally:
        envs.close()
        reference.close()
    # the faulted row's steps: truncated, reward 0, the fault named; the faults rebuilt it
    assert restarts.tolist() == [0, len(faults), 0, 0] and len(faults) >= 3
    assert {f.kind for f in faults} == {"error"} and all(f.sub_env == ROW for f in faults)
    assert "RuntimeError: flaky sub-env" in faults[0].message
    assert _heal.check_masked_run(got, want, [ROW]) == len(faults)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", MODES)
def test_the_faulted_row_reads_its_last_observation_then_the_rebuilt_reset(mode) -> None:
    envs = healing("processes", flaky_fns(N, ROW, 3), mode, on_fault="restart")
    try:
        obs, _ = envs.reset(seed=3)
        last = obs[ROW].copy()
        for t in range(2):
            last = envs.step(actions(t))[0][ROW].copy()
        obs, rew, term, trunc, infos = envs.step(actions(2))  # the 3rd step faults
        assert infos["_fault"].tolist() == [False, True, False, False]
        assert infos["fault"][ROW].startswith("RuntimeError: flaky sub-env")
        assert (rew[ROW], term[ROW], trunc[ROW]) == (0.0, False, True)
        if mode == "same_step":  # the rebuilt sub-env's reset now, the last obs as final
            np.testing.assert_array_equal(infos["final_obs"][ROW], last)
            assert infos["final_info"]["_fault"][ROW]
            assert not np.array_equal(obs[ROW], last)
        else:
            np.testing.assert_array_equal(obs[ROW], last)
        if mode == "next_step":  # the next step resets it: reward 0, flags False
            obs, rew, term, trunc, infos = envs.step(actions(3))
            assert (rew[ROW], term[ROW], trunc[ROW]) == (0.0, False, False)
            assert "_fault" not in infos
        if mode == "disabled":
            with pytest.raises(ValueError, match="finished"):
                envs.step(actions(3))
            mask = np.zeros(N, bool)
            mask[ROW] = True
            envs.reset(options={"reset_mask": mask})
            envs.step(actions(3))
    finally:
        envs.close()


def test_a_rerun_with_the_same_faults_gives_the_same_trajectories() -> None:
    runs = []
    for _ in range(2):
        envs = healing("processes", flaky_fns(N, ROW, 5), "next_step", on_fault="restart")
        try:
            runs.append(run(envs, "next_step", 30))
        finally:
            envs.close()
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a[0], b[0])


def test_past_the_limit_a_fault_raises_naming_the_sub_env_and_its_restarts() -> None:
    envs = healing("processes", flaky_fns(N, ROW, 2), "next_step", on_fault=gymvec.Restart(2))
    try:
        envs.reset(seed=0)
        with pytest.raises(WorkerError, match=r"sub-env 1 faulted .* after 2 restart\(s\)"):
            for t in range(20):
                envs.step(actions(t))
        assert envs.restarts.tolist() == [0, 2, 0, 0]
    finally:
        envs.close()


def test_raise_stays_the_default() -> None:
    envs = healing("processes", flaky_fns(N, ROW, 2), "next_step")
    try:
        envs.reset(seed=0)
        envs.step(actions(0))
        with pytest.raises(RuntimeError, match="flaky sub-env"):
            envs.step(actions(1))
        assert envs.restarts.tolist() == [0] * N and envs.faults == []
    finally:
        envs.close()


class ResetFlaky(FlakyCartPole):
    """Raises in its second reset of its life (a rebuilt one counts from zero again)."""

    def __init__(self) -> None:
        super().__init__()
        self.resets = 0

    def reset(self, **kwargs):
        self.resets += 1
        if self.resets == 2:
            raise RuntimeError("flaky sub-env: reset fault on purpose")
        return self.env.reset(**kwargs)


@pytest.mark.parametrize("backend", ["serial", "processes"])
def test_a_fault_in_a_reset_is_retried_on_a_rebuilt_sub_env(backend) -> None:
    fns = healthy_fns(N)
    fns[ROW] = ResetFlaky
    envs = healing(backend, fns, "next_step", on_fault="restart")
    reference = SyncVectorEnv(healthy_fns(N))
    try:
        envs.reset(seed=5)
        reference.reset(seed=5)
        obs, infos = envs.reset(seed=6)  # the flaky one's second reset raises: retried
        want, _ = reference.reset(seed=6)
        assert infos["_fault"].tolist() == [False, True, False, False]
        assert envs.restarts.tolist() == [0, 1, 0, 0]
        others = [i for i in range(N) if i != ROW]
        np.testing.assert_array_equal(obs[others], want[others])
        assert envs.observation_space.contains(obs)
    finally:
        envs.close()
        reference.close()


@pytest.mark.parametrize("backend", ["serial", "processes"])
def test_the_rebuilt_sub_env_first_reset_is_seeded_by_restart_seed(backend) -> None:
    import gymnasium as gym

    from gymvec.common.faults import restart_seed

    envs = healing(backend, flaky_fns(N, ROW, 3), "next_step", on_fault="restart")
    try:
        envs.reset(seed=11)
        for t in range(3):  # the 3rd faults
            envs.step(actions(t))
        obs = envs.step(actions(3))[0]  # the rebuilt sub-env's first reset
    finally:
        envs.close()
    want, _ = gym.make("CartPole-v1").reset(seed=restart_seed(11 + ROW, 1))
    np.testing.assert_array_equal(obs[ROW], want)


class DictCartPole(FlakyCartPole):
    """FlakyCartPole whose observations are a Dict: its sub-envs go through the per-driver
    runner (``CommandRunner``), not ``BatchStep``."""

    def __init__(self, every: int = 0):
        import gymnasium as gym

        super().__init__(every)
        box = self.env.observation_space
        self.observation_space = gym.spaces.Dict(
            {
                "pos": gym.spaces.Box(box.low[:2], box.high[:2]),
                "vel": gym.spaces.Box(box.low[2:], box.high[2:]),
            }
        )

    def reset(self, **kwargs):
        obs, info = super().reset(**kwargs)
        return {"pos": obs[:2], "vel": obs[2:]}, info

    def step(self, action):
        obs, *rest = super().step(action)
        return {"pos": obs[:2], "vel": obs[2:]}, *rest


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", ["serial", "processes"])
@pytest.mark.parametrize("mode", MODES)
def test_a_sub_env_of_dict_observations_heals_and_the_others_run_as_without_it(
    backend, mode
) -> None:
    """The per-driver runner heals as BatchStep does: the faulted row truncated, reward 0, its
    last observation, ``infos["fault"]``; every other row as SyncVectorEnv's."""
    import functools

    fns = [functools.partial(DictCartPole, EVERY if i == ROW else 0) for i in range(N)]
    envs = healing(backend, fns, mode, on_fault="restart")
    ref_fns = [DictCartPole] * N
    reference = SyncVectorEnv(ref_fns, autoreset_mode=AutoresetMode[mode.upper()])
    try:
        got = run(envs, mode)
        want = run(reference, mode)
        restarts = envs.restarts
    finally:
        envs.close()
        reference.close()
    others = [i for i in range(N) if i != ROW]
    faulted = 0
    for k, ((obs, rew, term, trunc, fault), w) in enumerate(zip(got, want)):
        for key in ("pos", "vel"):
            np.testing.assert_array_equal(obs[key][others], w[0][key][others])
        if rew is None:
            continue
        for g, e in zip((rew, term, trunc), w[1:4]):
            np.testing.assert_array_equal(g[others], e[others])
        if fault[ROW]:
            faulted += 1
            assert (rew[ROW], term[ROW], trunc[ROW]) == (0.0, False, True)
            if mode != "same_step":  # (there: the rebuilt sub-env's reset, final_obs the last)
                previous = next(o for o, *_ in reversed(got[:k]))
                for key in ("pos", "vel"):
                    np.testing.assert_array_equal(obs[key][ROW], previous[key][ROW])
    assert faulted >= 3 and restarts.tolist() == [0, faulted, 0, 0]
