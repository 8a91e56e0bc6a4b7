"""Options resolved in one place (gymvec/options.py): process defaults, keyword-only arguments,
"did you mean" for unknown keywords, autoreset spellings."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

import gymvec
from gymvec import options
from gymvec.options import (
    GYMNASIUM_FACE,
    TENSORDICT_API,
    parse_autoreset_mode,
    process_options,
)

pytestmark = pytest.mark.timeout(60)


def make_cartpole() -> gym.Env:
    return gym.make("CartPole-v1")


# ---- process defaults --------------------------------------------------------------------------
@pytest.mark.parametrize("cores", [1, 2, 16])
def test_first_ready_keeps_sub_envs_out_of_the_calling_process(cores, monkeypatch):
    monkeypatch.setattr(options, "usable_cores", lambda: cores)
    lock_step, _ = process_options(GYMNASIUM_FACE, num_workers=2)
    first_ready, _ = process_options(GYMNASIUM_FACE, num_workers=2, first_ready=True)
    asked, _ = process_options(GYMNASIUM_FACE, num_workers=2, first_ready=True, local_worker=True)
    assert lock_step.local_worker == (cores <= 2)  # as many workers as cores: a share here
    assert first_ready.local_worker is False
    assert asked.local_worker is True


def test_each_side_resolves_its_own_defaults(monkeypatch):
    monkeypatch.setattr(options, "usable_cores", lambda: 1)
    face, timeout = process_options(GYMNASIUM_FACE, num_workers=2)
    assert (face.daemon, face.local_worker, timeout) == (True, True, None)
    assert face.start_method == options.default_start_method()
    td, _ = process_options(TENSORDICT_API, num_workers=2)
    assert (td.daemon, td.start_method, td.local_worker) == (False, face.start_method, False)
    given, timeout = process_options(
        TENSORDICT_API, num_workers=2, start_method="fork", daemon=True, timeout=3
    )
    assert (given.daemon, given.start_method, timeout) == (True, "fork", 3.0)
    with_timeout, _ = process_options(GYMNASIUM_FACE, num_workers=2, timeout=1.0)
    assert with_timeout.local_worker is False  # nothing could cut a share here short
    with pytest.raises(ValueError, match="local_worker=True"):
        process_options(GYMNASIUM_FACE, num_workers=2, timeout=1.0, local_worker=True)
    with pytest.raises(ValueError, match="cannot find context for 'thread'"):
        process_options(GYMNASIUM_FACE, num_workers=2, start_method="thread")


def test_a_first_ready_drop_in_steps_nothing_in_the_calling_process(monkeypatch, no_leaks):
    monkeypatch.setattr(options, "usable_cores", lambda: 2)  # lock-step would keep a share
    fns = [make_cartpole] * 4
    envs = gymvec.ParallelVectorEnv(fns, num_workers=2, batch_size=2, context="fork")
    try:
        assert envs.engine.executor.local is None
        envs.async_reset(seed=0)
        *_, infos = envs.recv()
        envs.send(np.zeros(2, np.int64), infos["env_id"])
        envs.recv()
    finally:
        envs.close()
    envs = gymvec.ParallelVectorEnv(fns, num_workers=2, context="fork")
    try:
        assert envs.engine.executor.local is not None
    finally:
        envs.close()


def test_parallel_env_reports_its_resolved_options(no_leaks):
    with gymvec.ParallelEnv(1, make_cartpole, mp_start_method="fork") as env:
        assert (env.daemon, env.local_worker, env.mp_start_method) == (False, False, "fork")


# ---- keyword-only arguments --------------------------------------------------------------------
@pytest.mark.parametrize("cls", ["SerialEnv", "ParallelEnv", "RayEnv"])
def test_arguments_after_create_env_fn_are_keyword_only(cls):
    # RayEnv(2, make, 4) meant 4 sub-envs per worker, ParallelEnv(2, make, 4) create_env_kwargs=4
    with pytest.raises(TypeError, match="keyword-only") as info:
        getattr(gymvec, cls)(2, make_cartpole, 4)
    assert f"{cls}() takes 2 positional arguments (num_workers, create_env_fn)" in str(info.value)


def test_drop_ins_keep_gymnasiums_positional_parameters(no_leaks):
    # SyncVectorEnv(env_fns, copy, observation_mode, autoreset_mode), positionally
    envs = gymvec.SerialVectorEnv([make_cartpole] * 2, True, "same", "same_step")
    assert envs.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    envs.close()
    # AsyncVectorEnv(env_fns, shared_memory, copy, context, daemon, worker, observation_mode)
    envs = gymvec.ParallelVectorEnv([make_cartpole] * 2, True, True, "fork", True, None, "same")
    assert envs.context == "fork" and envs.daemon is True
    envs.close()


# ---- did you mean ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "build, typo, meant",
    [
        (lambda **kw: gymvec.ParallelEnv(2, make_cartpole, **kw), "num_worker", "num_workers"),
        (
            lambda **kw: gymvec.SerialEnv(2, make_cartpole, **kw),
            "env_per_worker",
            "envs_per_worker",
        ),
        (lambda **kw: gymvec.RayEnv(2, make_cartpole, **kw), "worker_process", "worker_processes"),
        (lambda **kw: gymvec.ParallelVectorEnv([make_cartpole], **kw), "num_worker", "num_workers"),
        (lambda **kw: gymvec.SerialVectorEnv([make_cartpole], **kw), "autoreset", "autoreset_mode"),
    ],
)
def test_constructors_suggest_their_own_options(build, typo, meant):
    with pytest.raises(TypeError) as info:
        build(**{typo: 2})
    assert f"unexpected keyword argument {typo!r}: did you mean `{meant}`?" in str(info.value)


BUILT: list[dict] = []


class KwargsEnv(gym.Env):
    """Counts its constructions; takes ``timeouts``, a name close to gymvec's ``timeout``."""

    observation_space = gym.spaces.Discrete(2)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, timeouts: int = 0, **kwargs):
        BUILT.append({"timeouts": timeouts, **kwargs})

    def reset(self, *, seed=None, options=None):
        return 0, {}

    def step(self, action):
        return 0, 0.0, False, False, {}


gym.register("GymvecTest/Kwargs-v0", entry_point=KwargsEnv)


def test_make_vec_catches_a_misspelt_option_before_the_env_sees_it():
    BUILT.clear()
    with pytest.raises(TypeError) as info:
        gymvec.make_vec("CartPole-v1", 2, backend="serial", num_worker=2)
    text = str(info.value)
    assert "did you mean `num_workers`?" in text and "'CartPole-v1'" in text
    with pytest.raises(TypeError, match="did you mean `autoreset_mode`"):
        gymvec.make_vec("GymvecTest/Kwargs-v0", 2, backend="serial", autoreset_mod="same_step")
    with pytest.raises(TypeError, match="`daemon` is an option of gymvec's env classes"):
        gymvec.make_vec("GymvecTest/Kwargs-v0", 2, backend="serial", daemon=False)
    assert BUILT == []  # refused before any env was built


def test_make_vec_passes_on_what_the_env_names_itself():
    BUILT.clear()
    envs = gymvec.make_vec("GymvecTest/Kwargs-v0", 2, backend="serial", timeouts=3, colour=1)
    envs.close()
    assert BUILT and all(built == {"timeouts": 3, "colour": 1} for built in BUILT)


# ---- autoreset spellings -----------------------------------------------------------------------
@pytest.mark.parametrize(
    "spelling, mode",
    [
        ("next_step", AutoresetMode.NEXT_STEP),
        ("same_step", AutoresetMode.SAME_STEP),
        ("same-step", AutoresetMode.SAME_STEP),
        ("disabled", AutoresetMode.DISABLED),
        ("NextStep", AutoresetMode.NEXT_STEP),  # gymnasium's values
        ("SameStep", AutoresetMode.SAME_STEP),
        ("Disabled", AutoresetMode.DISABLED),
        ("SAME_STEP", AutoresetMode.SAME_STEP),  # the members' names
        (AutoresetMode.DISABLED, AutoresetMode.DISABLED),
    ],
)
def test_autoreset_mode_spellings(spelling, mode):
    assert parse_autoreset_mode(spelling) is mode
    envs = gymvec.make_vec("CartPole-v1", 1, backend="serial", autoreset_mode=spelling)
    assert envs.metadata["autoreset_mode"] is mode
    envs.close()


@pytest.mark.parametrize("wrong", ["same", "next", 1, None])
def test_a_wrong_autoreset_mode_lists_the_spellings(wrong):
    with pytest.raises(ValueError) as info:
        gymvec.SerialVectorEnv([make_cartpole], autoreset_mode=wrong)
    text = str(info.value)
    assert "'next_step', 'same_step', 'disabled'" in text and "'NextStep'" in text
    assert f"got {wrong!r}" in text
