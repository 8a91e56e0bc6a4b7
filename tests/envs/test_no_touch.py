"""Building a batched env of ``GymEnv`` sub-envs resets and steps none of them: the first
reset and step are the user's, in this process and in the workers."""

from __future__ import annotations

import functools
import os

import pytest
from _counting_envs import make_counting_gym_env, read_log

from gymvec import GymEnv, ParallelEnv, SerialEnv


def _events(log: list[tuple[str, int]], event: str) -> list[int]:
    return [pid for name, pid in log if name == event]


def test_gym_env_alone_is_not_touched_until_its_first_reset(tmp_path):
    path = str(tmp_path / "log")
    env = make_counting_gym_env(path)
    assert read_log(path) == [("build", os.getpid())]
    env.reset()
    assert _events(read_log(path), "reset") == [os.getpid()]
    assert _events(read_log(path), "step") == []
    env.close()


@pytest.mark.parametrize(
    "build",
    [
        pytest.param(lambda fn: SerialEnv(4, fn), id="serial"),
        pytest.param(lambda fn: ParallelEnv(2, fn, envs_per_worker=2), id="parallel"),
        # one factory per sub-env: the workers build their sub-envs at construction
        pytest.param(lambda fn: ParallelEnv(2, [fn] * 4, envs_per_worker=2), id="parallel-each"),
    ],
)
def test_building_a_batched_env_resets_and_steps_nothing(build, tmp_path, no_leaks):
    path = str(tmp_path / "log")
    fn = functools.partial(make_counting_gym_env, path)
    env = build(fn)
    try:
        log = read_log(path)
        assert _events(log, "build")  # the sub-envs (or the layout's first) were built...
        assert _events(log, "reset") == [] and _events(log, "step") == []  # ...not touched
        env.set_seed(0)
        td = env.reset()
        log = read_log(path)
        assert len(_events(log, "reset")) == 4 and _events(log, "step") == []
        env.step(env.rand_action(td))
        log = read_log(path)
        assert len(_events(log, "reset")) == 4 and len(_events(log, "step")) == 4
        if isinstance(env, ParallelEnv):  # every sub-env ran in a worker
            assert os.getpid() not in _events(log, "reset") + _events(log, "step")
    finally:
        env.close()


def test_declared_info_fields_are_keys_of_a_batched_env():
    fn = functools.partial(GymEnv, "CartPole-v1", info_fields={"x": 0.0})
    with SerialEnv(2, fn) as env:
        assert set(env.info_spec.keys()) == {"x"}
        assert env.reset().get(("info", "x")).tolist() == [0.0, 0.0]
