"""Faults that heal on the tensordict side (API section 13): SerialEnv/ParallelEnv with
``on_fault="restart"``, each against the same batch without the fault (same seeds, same
actions): every other row equal step for step; the faulted row truncated and done, not
terminated, reward 0, its last observation, ``("next", "fault")`` set; then reset like any
done row."""

from __future__ import annotations

import pytest
import torch
from _flaky_envs import flaky_fns, healthy_fns

import gymvec

FAULTED, OTHERS = 1, [0, 2]


def _pair(cls, how: str, **options):
    """(the batch whose row 1 faults every 5th step, the same batch without faults)."""
    faulty = cls(3, flaky_fns(3, FAULTED, 5, how), on_fault="restart", **options)
    return faulty, cls(3, healthy_fns(3), **options)


def _check_faulted_step(next_td, last_obs) -> None:
    assert next_td["fault"].reshape(-1).tolist() == [False, True, False]
    assert next_td["truncated"][FAULTED].item() and next_td["done"][FAULTED].item()
    assert not next_td["terminated"][FAULTED].item()
    assert next_td["reward"][FAULTED].item() == 0.0
    torch.testing.assert_close(next_td["observation"][FAULTED], last_obs)


@pytest.mark.parametrize(
    ("cls", "how", "options"),
    [
        (gymvec.SerialEnv, "raise", {}),
        (gymvec.ParallelEnv, "raise", {"mp_start_method": "fork"}),
        (gymvec.ParallelEnv, "segv", {"mp_start_method": "fork"}),
    ],
)
def test_step_and_maybe_reset_heals_a_row_and_leaves_the_others(cls, how, options, no_leaks):
    env, reference = _pair(cls, how, **options)
    try:
        assert "fault" in env.done_spec.keys() and "fault" not in reference.done_spec.keys()
        env.set_seed(3)
        reference.set_seed(3)
        td, expected = env.reset(), reference.reset()
        assert not td["fault"].any()
        faulted_steps = []
        for t in range(12):
            action = torch.tensor([t % 2, 1, (t + 1) % 2])
            td.set("action", action)
            expected.set("action", action)
            last_obs = td["observation"][FAULTED].clone()
            td, root = env.step_and_maybe_reset(td)
            expected, expected_root = reference.step_and_maybe_reset(expected)
            for key in ("observation", "reward", "done", "terminated", "truncated"):
                torch.testing.assert_close(td["next", key][OTHERS], expected["next", key][OTHERS])
            if td["next", "fault"].any():
                _check_faulted_step(td["next"], last_obs)
                assert FAULTED in env.last_faults
                faulted_steps.append(t)
            else:
                assert env.last_faults is None
            assert not root["fault"].any()  # the faulted row was reset there
            td, expected = root, expected_root
        # (a worker death faults every sub-env of its worker: in ParallelEnv(3), row 1 alone)
        assert faulted_steps == [4, 9]
        assert env.restarts.tolist() == [0, 2, 0]
        assert {fault.kind for fault in env.faults} == {"error" if how == "raise" else "death"}
    finally:
        env.close()
        reference.close()


def test_step_leaves_a_faulted_row_done_until_it_is_reset():
    env = gymvec.SerialEnv(3, flaky_fns(3, FAULTED, 3), on_fault="restart")
    try:
        env.set_seed(0)
        td = env.reset()
        for _ in range(2):
            td = env.step(td.set("action", torch.ones(3, dtype=torch.int64)))
            td = td["next"].exclude("reward")
        last_obs = td["observation"][FAULTED].clone()
        td = env.step(td.set("action", torch.ones(3, dtype=torch.int64)))
        _check_faulted_step(td["next"], last_obs)
        reset = env.reset(td["next"].select().set("_reset", td["next", "done"].clone()))
        assert not reset["fault"].any()
        # the other rows were not reset; the rebuilt row steps on from its reset
        td = env.step(reset.set("action", torch.ones(3, dtype=torch.int64)))
        assert not td["next", "fault"].any()
        assert env.restarts.tolist() == [0, 1, 0]
    finally:
        env.close()


def test_without_restart_the_specs_and_outputs_carry_no_fault_entry():
    env = gymvec.SerialEnv(2, healthy_fns(2))
    try:
        td = env.reset()
        td = env.step(td.set("action", torch.zeros(2, dtype=torch.int64)))
        assert "fault" not in td.keys() and "fault" not in td["next"].keys()
        assert env.restarts.tolist() == [0, 0] and env.faults == []
    finally:
        env.close()


@pytest.mark.parametrize(
    ("cls", "how", "options"),
    [
        (gymvec.SerialEnv, "raise", {}),
        (gymvec.ParallelEnv, "raise", {"mp_start_method": "fork"}),
        (gymvec.ParallelEnv, "segv", {"mp_start_method": "fork"}),
    ],
)
def test_first_ready_steps_flag_a_faulted_row(cls, how, options, no_leaks):
    """``async_step_recv``: the faulted row comes back flagged, truncated, reward 0, with its
    last observation (the one sent); done rows reset with ``async_reset_*``; every other row
    equal to the batch without the fault."""
    from tensordict import TensorDict

    env, reference = _pair(cls, how, **options)
    try:
        env.set_seed(3)
        reference.set_seed(3)
        td, expected = env.reset(), reference.reset()
        faulted_steps = []
        for t in range(12):
            action = torch.tensor([t % 2, 1, (t + 1) % 2])
            td.set("action", action)
            expected.set("action", action)
            env.async_step_send(td)
            out = env.async_step_recv(min_get=3)
            got = out["next"][torch.argsort(out["env_index"])]  # in sub-env order
            expected, expected_root = reference.step_and_maybe_reset(expected)
            for key in ("observation", "reward", "done", "terminated", "truncated"):
                torch.testing.assert_close(got[key][OTHERS], expected["next", key][OTHERS])
            if got["fault"].any():
                _check_faulted_step(got, td["observation"][FAULTED])
                faulted_steps.append(t)
            obs = got["observation"].clone()
            done = torch.nonzero(got["done"].reshape(-1)).reshape(-1)
            if len(done):  # reset as a first-ready loop does
                env.async_reset_send(TensorDict({"env_index": done}, batch_size=[len(done)]))
                reset = env.async_reset_recv(min_get=len(done))
                assert not reset["fault"].any()
                for k, i in enumerate(reset["env_index"].tolist()):
                    obs[i] = reset["observation"][k]
            torch.testing.assert_close(obs[OTHERS], expected_root["observation"][OTHERS])
            td, expected = TensorDict({"observation": obs}, batch_size=[3]), expected_root
        assert faulted_steps == [4, 9]
        assert env.restarts.tolist() == [0, 2, 0]
    finally:
        env.close()
        reference.close()


def test_a_whole_batch_reset_voids_the_faults_owed_since_a_first_ready_restart(no_leaks):
    """Worker 0 (rows 0 and 1) is killed while row 0 is in flight and row 1 is not: row 0
    comes back faulted, row 1 owes its fault to its next first-ready step. A reset of every
    sub-env first resets row 1's rebuilt sub-env: that step then is an ordinary one."""
    import os
    import signal

    from tensordict import TensorDict

    def step_rows(env, rows):
        index = torch.tensor(rows)
        td = TensorDict({"action": torch.ones(len(rows), dtype=torch.int64)}, [len(rows)])
        env.async_step_send(td.set("env_index", index))
        return env.async_step_recv(min_get=len(rows))

    for reset_first in (False, True):
        env = gymvec.ParallelEnv(
            2, healthy_fns(4), envs_per_worker=2, on_fault="restart", mp_start_method="fork"
        )
        try:
            env.set_seed(0)
            env.reset()
            worker = env.engine.executor.handles[0].process
            os.kill(worker.pid, signal.SIGKILL)  # (dead before the rows go out)
            worker.join(5)
            out = step_rows(env, [0, 2])
            fault = out["next", "fault"].reshape(-1).tolist()
            assert dict(zip(out["env_index"].tolist(), fault)) == {0: True, 2: False}
            if reset_first:
                env.reset()
            out = step_rows(env, [1])
            assert out["next", "fault"].reshape(-1).tolist() == [not reset_first]
        finally:
            env.close()


class FlakyCounter:
    """``CounterEnv`` (an EnvBase, driven through its tensordict API) whose every ``every``-th
    step of its life raises."""

    def __new__(cls, every: int):
        from _td_envs import CounterEnv

        class Flaky(CounterEnv):
            steps = 0

            def _step(self, td):
                self.steps += 1
                if self.steps % every == 0:
                    raise RuntimeError("flaky EnvBase: a fault on purpose")
                return super()._step(td)

        return Flaky(limit=50)


@pytest.mark.parametrize(
    ("cls", "options"),
    [(gymvec.SerialEnv, {}), (gymvec.ParallelEnv, {"mp_start_method": "fork"})],
)
def test_a_tensordict_sub_env_that_raises_heals(cls, options, no_leaks):
    """An EnvBase sub-env (TensorDictDriver) heals as a gymnasium one: its row truncated,
    done, reward 0, its last observation, ("next", "fault") set; the other rows run on."""
    import functools

    from _td_envs import CounterEnv

    fns = [functools.partial(CounterEnv, 50), functools.partial(FlakyCounter, 4)]
    env = cls(2, fns, on_fault="restart", **options)
    try:
        env.set_seed(1)
        td = env.reset()
        faulted = []
        for t in range(10):
            last = td["observation"][1].clone()
            td.set("action", torch.zeros(2, 1))
            td, root = env.step_and_maybe_reset(td)
            if td["next", "fault"].any():
                faulted.append(t)
                assert td["next", "fault"].reshape(-1).tolist() == [False, True]
                assert td["next", "truncated"][1].item() and td["next", "done"][1].item()
                assert not td["next", "terminated"][1].item()
                assert td["next", "reward"][1].item() == 0.0
                torch.testing.assert_close(td["next", "observation"][1], last)
            td = root
        assert faulted == [3, 7] and env.restarts.tolist() == [0, 2]
        assert {f.kind for f in env.faults} == {"error"}
    finally:
        env.close()
