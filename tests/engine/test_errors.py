"""One shape for a sub-env's exception, wherever the sub-env ran and whatever raised it; one
exception for use after close(); tracebacks that point at the user's file and line."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import types
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import gymvec
from gymvec import ClosedEnvError, WorkerError
from gymvec.backends import pickling
from gymvec.errors import ErrorDetail, sub_env_error

pytestmark = pytest.mark.timeout(60)


class FinalError(Exception):
    """An exception class that refuses subclasses: no typed WorkerError can be made of it."""

    def __init_subclass__(cls, **kwargs):
        raise TypeError("FinalError takes no subclasses")


class FailingEnv(gym.Env):
    """Raises ``error`` from ``step``, ``reset`` (after the first) or ``poke`` when ``bad``."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, bad: bool = False, error: str = "value"):
        self.bad, self.error, self.resets = bad, error, 0

    def fail(self, where: str) -> None:
        if self.error == "final":
            raise FinalError("the robot's link went down")
        raise ValueError(f"failing on purpose in {where}")  # the line the traceback shows

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.resets += 1
        if self.bad and self.resets > 1:
            self.fail("reset")
        return np.zeros(2, np.float32), {}

    def step(self, action):
        if self.bad:
            self.fail("step")
        return np.zeros(2, np.float32), 0.0, False, False, {}

    def poke(self) -> int:
        if self.bad:
            self.fail("poke")
        return 1


def env_fns(bad: int, n: int = 4, error: str = "value") -> list:
    return [lambda i=i: FailingEnv(bad=i == bad, error=error) for i in range(n)]


# (how the sub-envs run, the sub-env that fails, the worker expected in the error)
PLACES = {
    "serial": (lambda fns: gymvec.SerialVectorEnv(fns), 2, None, "in the calling process"),
    "local share": (
        lambda fns: gymvec.ParallelVectorEnv(fns, num_workers=2, local_worker=True, context="fork"),
        1,
        0,
        "in the calling process",
    ),
    "worker process": (
        lambda fns: gymvec.ParallelVectorEnv(
            fns, num_workers=2, local_worker=False, context="fork"
        ),
        3,
        1,
        "pid ",
    ),
}
CALLS = {
    "step": lambda envs: envs.step(np.zeros(4, np.int64)),
    "reset": lambda envs: envs.reset(),
    "call": lambda envs: envs.call("poke"),
}


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize("place", PLACES)
def test_a_sub_env_error_has_one_shape_wherever_it_ran(place, call, no_leaks):
    make, bad, worker, where = PLACES[place]
    envs = make(env_fns(bad))
    try:
        envs.reset(seed=0)
        with pytest.raises(ValueError) as info:  # the sub-env's own class still catches it
            CALLS[call](envs)
        error = info.value
        assert isinstance(error, WorkerError)
        assert error.sub_env_index == bad and error.worker_index == worker
        first = str(error).splitlines()[0]
        worker_named = "" if worker is None else f"worker {worker}, "
        assert first.startswith(f"sub-env {bad} ({worker_named}") and where in first
        assert "raised ValueError: failing on purpose in" in first
        # the original traceback, down to the sub-env's own line
        assert 'raise ValueError(f"failing on purpose in {where}")' in str(error)
        assert "test_errors.py" in error.worker_traceback
    finally:
        envs.close()


def test_a_first_ready_error_names_its_sub_env(no_leaks):
    envs = gymvec.ParallelVectorEnv(env_fns(bad=2), num_workers=2, batch_size=2, context="fork")
    try:
        envs.async_reset(seed=0)
        deadline = time.monotonic() + 30.0
        with pytest.raises(ValueError) as info:
            # Not within a fixed number of batches: the worker formats the error's traceback
            # (a millisecond or more) while sub-envs 0 and 1 may cycle dozens of times.
            while time.monotonic() < deadline:
                *_, infos = envs.recv(timeout=30.0)
                envs.send(np.zeros(2, np.int64), infos["env_id"])
        assert isinstance(info.value, WorkerError) and info.value.sub_env_index == 2
        assert str(info.value).startswith("sub-env 2 (worker 1, pid ")
    finally:
        envs.close()


@pytest.mark.parametrize("kind", ["serial", "fork"])
def test_tensordict_envs_raise_the_same_shape(kind, no_leaks):
    if kind == "serial":
        env = gymvec.SerialEnv(2, env_fns(bad=3), envs_per_worker=2)
    else:
        env = gymvec.ParallelEnv(2, env_fns(bad=3), envs_per_worker=2, mp_start_method="fork")
    try:
        env.reset()
        with pytest.raises(ValueError) as info:
            env.step(env.rand_action())
        assert isinstance(info.value, WorkerError) and info.value.sub_env_index == 3
        if kind == "serial":  # one group of sub-envs in this process: no worker to name
            assert str(info.value).startswith("sub-env 3 (in the calling process) raised")
        else:
            assert info.value.worker_index == 1
            assert str(info.value).startswith("sub-env 3 (worker 1, pid ")
    finally:
        env.close()


def test_a_factory_error_names_its_sub_env(no_leaks):
    def make(i: int) -> gym.Env:
        if i == 1:
            raise KeyError("no such robot")
        return FailingEnv()

    fns = [lambda i=i: make(i) for i in range(2)]
    with pytest.raises(KeyError) as info:
        gymvec.ParallelVectorEnv(fns, num_workers=2, local_worker=False, context="fork")
    assert isinstance(info.value, WorkerError) and info.value.sub_env_index == 1
    assert "sub-env 1 (worker 1, pid " in str(info.value)
    assert "create_env_fn raised KeyError: 'no such robot'" in str(info.value)


def test_typed_classes_are_made_once_per_class():
    detail = ErrorDetail("ValueError: x", "tb", ("builtins", "ValueError"), 0)
    first = sub_env_error(detail, worker_index=0, where="here")
    second = sub_env_error(detail._replace(sub_env=1), worker_index=0, where="here")
    assert type(first) is type(second)
    assert isinstance(first, ValueError) and isinstance(first, WorkerError)


def test_a_class_that_cannot_be_combined_gives_a_plain_worker_error():
    envs = gymvec.SerialVectorEnv(env_fns(bad=1, error="final"))
    try:
        envs.reset(seed=0)
        with pytest.raises(WorkerError) as info:
            envs.step(np.zeros(4, np.int64))
        assert type(info.value) is WorkerError and info.value.sub_env_index == 1
        first = str(info.value).splitlines()[0]
        assert first.endswith("raised test_errors.FinalError: the robot's link went down")
    finally:
        envs.close()


# ---- use after close() -----------------------------------------------------------------------
CLOSED_ENVS = {
    "SerialVectorEnv": lambda: gymvec.SerialVectorEnv(env_fns(bad=-1, n=2)),
    "ParallelVectorEnv": lambda: gymvec.ParallelVectorEnv(
        env_fns(bad=-1, n=2), num_workers=1, context="fork"
    ),
    "make_vec": lambda: gymvec.make_vec("CartPole-v1", 2, backend="serial"),
}


@pytest.mark.parametrize("kind", CLOSED_ENVS)
def test_use_after_close_raises_one_exception_everywhere(kind, no_leaks):
    envs = CLOSED_ENVS[kind]()
    envs.reset(seed=0)
    envs.close()
    for use in (
        lambda: envs.step(np.zeros(2, np.int64)),
        lambda: envs.reset(),
        lambda: envs.call("reset"),
    ):
        with pytest.raises(ClosedEnvError) as info:
            use()
        assert isinstance(info.value, gym.error.ClosedEnvironmentError)


@pytest.mark.parametrize("cls", ["SerialEnv", "ParallelEnv"])
def test_tensordict_envs_raise_closed_env_error(cls, no_leaks):
    options = {"mp_start_method": "fork"} if cls == "ParallelEnv" else {}
    env = getattr(gymvec, cls)(1, env_fns(bad=-1, n=1), **options)
    env.close()
    with pytest.raises(gym.error.ClosedEnvironmentError) as info:
        env.reset()
    assert isinstance(info.value, ClosedEnvError)


# ---- frames of the main script ---------------------------------------------------------------
SCRIPT = """
import gymnasium as gym
import numpy as np

import gymvec


class ScriptEnv(gym.Env):
    observation_space = gym.spaces.Discrete(2)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        return 0, {}

    def step(self, action):
        raise ValueError("raised in the main script")


if __name__ == "__main__":
    envs = gymvec.ParallelVectorEnv([ScriptEnv] * 2, num_workers=2, local_worker=False,
                                    context="spawn")
    envs.reset(seed=0)
    try:
        envs.step(np.zeros(2, np.int64))
    except ValueError as exc:
        print(exc)
    finally:
        envs.close()
"""


def test_frames_of_the_main_script_keep_their_file_and_line(tmp_path):
    script = tmp_path / "user_script.py"
    script.write_text(textwrap.dedent(SCRIPT))
    here = str(Path(gymvec.__file__).parents[1])  # this gymvec, not another one installed
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([here, os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env=env,
    ).stdout
    line = SCRIPT.splitlines().index('        raise ValueError("raised in the main script")') + 1
    assert f'File "{script}", line {line}, in step' in out, out
    assert 'raise ValueError("raised in the main script")' in out  # the source line
    assert "<dynamic-code>" not in out


def test_pickled_code_keeps_its_file_name_where_cloudpickle_drops_it(monkeypatch):
    # cloudpickle >= 3.1.3 names code pickled by value "<dynamic-code>": do so here whatever
    # the installed version, and check that gymvec's pickling undoes it.
    base = pickling._base_reduce

    def anonymous(code: types.CodeType) -> tuple:
        make, args = base(code)
        return make, tuple("<dynamic-code>" if a == code.co_filename else a for a in args)

    monkeypatch.setattr(pickling, "_base_reduce", anonymous)
    namespace: dict = {}
    exec(compile("def f():\n    return 1 / 0\n", "/some/user/script.py", "exec"), namespace)
    function = types.FunctionType(namespace["f"].__code__, {"__name__": "__main__"}, "f")
    function.__module__ = "__main__"  # pickled by value, as a main script's function is
    import cloudpickle

    rebuilt = cloudpickle.loads(pickling.dumps(function))
    assert rebuilt.__code__.co_filename == "/some/user/script.py"
    assert cloudpickle.loads(pickling.dumps(function)).__code__.co_filename != "<dynamic-code>"
