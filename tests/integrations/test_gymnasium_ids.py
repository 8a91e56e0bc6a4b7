"""gymnasium.make_vec with gymvec's ids: the modes that bypass gymvec warn once, saying how to get
gymvec's env; namespaced and malformed ids name the right id and the import they need, in
``str(e)``; derived ids of late ids are registered on demand; RLlib's wrong turns are caught.

The first call of a script imports gymvec through the ``gymvec:`` prefix while it runs, before
gymvec's wrapper of ``gymnasium.make_vec`` exists: those cases run in fresh interpreters.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import types
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AsyncVectorEnv, SyncVectorEnv

import gymvec
from gymvec.integrations import gymnasium_ids
from gymvec.integrations.gymnasium_ids import VectorizationWarning

ROOT = Path(__file__).resolve().parents[2]
ALE_REGISTERED = any(spec.namespace == "ALE" for spec in gym.registry.values())


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    """Each test sees gymvec's warn-once warnings anew."""
    monkeypatch.setattr(gymnasium_ids, "_WARNED", set())


# ---- modes -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("mode", "built", "gymvec_env"),
    [("sync", SyncVectorEnv, "SerialVectorEnv"), ("async", AsyncVectorEnv, "ParallelVectorEnv")],
)
def test_sync_and_async_modes_warn_once_how_to_get_gymvecs_env(mode, built, gymvec_env):
    kwargs = {"vector_kwargs": {"context": "fork"}} if mode == "async" else {}
    with pytest.warns(VectorizationWarning) as record:
        envs = gym.make_vec("gymvec:gymvec/CartPole-v1", 2, vectorization_mode=mode, **kwargs)
    envs.close()
    assert type(envs) is built  # gymnasium's own class, as asked
    (warning,) = [w for w in record if w.category is VectorizationWarning]
    message = str(warning.message)
    assert f"vectorization_mode={mode!r}" in message and gymvec_env in message
    assert "vectorization_mode='vector_entry_point'" in message
    assert warning.filename == __file__  # points at the call, not at gymnasium
    with warnings.catch_warnings():
        warnings.simplefilter("error", VectorizationWarning)
        gym.make_vec("gymvec/CartPole-v1", 2, vectorization_mode=mode, **kwargs).close()  # once


def test_the_advice_of_the_warning_builds_gymvecs_env():
    with warnings.catch_warnings():
        warnings.simplefilter("error", VectorizationWarning)
        envs = gym.make_vec(
            "gymvec:gymvec/CartPole-v1",
            2,
            vectorization_mode="vector_entry_point",
            backend="serial",
        )
        assert isinstance(envs, gymvec.SerialVectorEnv)
        envs.close()
        single = gym.make("gymvec/CartPole-v1")  # a single env from a derived id: no warning
        assert single.spec.max_episode_steps == 500 and single.unwrapped.spec.id.startswith(
            "gymvec/"
        )
        single.close()


def test_sync_mode_over_a_derived_id_equals_the_base_ids():
    with pytest.warns(VectorizationWarning):
        envs = gym.make_vec("gymvec/CartPole-v1", 2, vectorization_mode="sync")
    reference = gym.make_vec("CartPole-v1", 2, vectorization_mode="sync")
    np.testing.assert_array_equal(envs.reset(seed=3)[0], reference.reset(seed=3)[0])
    for _ in range(30):
        got, expected = envs.step(np.array([1, 0])), reference.step(np.array([1, 0]))
        for a, b in zip(got[:4], expected[:4]):
            np.testing.assert_array_equal(a, b)
    envs.close()
    reference.close()


def test_prefix_without_derived_id_names_the_derived_id():
    with pytest.warns(VectorizationWarning, match=r"'gymvec:gymvec/Acrobot-v1'") as record:
        envs = gym.make_vec("gymvec:Acrobot-v1", 2)
    envs.close()
    assert "only imports gymvec" in str(record[0].message)
    gym.make_vec("Acrobot-v1", 2).close()  # without the prefix: gymnasium's business, no warning


# ---- ids ---------------------------------------------------------------------------------------
@pytest.mark.skipif(ALE_REGISTERED, reason="ale_py is imported: the ALE namespace exists")
def test_namespaced_id_before_its_package_names_the_import_in_the_message():
    with pytest.raises(gym.error.NamespaceNotFound) as info:
        gym.make_vec("gymvec:gymvec-ALE/Pong-v5", 2)
    message = str(info.value)
    assert "import ale_py" in message and "'ALE/Pong-v5'" in message
    assert "register_vector_ids" not in message  # it would not help


def test_malformed_derived_id_names_the_right_one_in_the_message():
    with pytest.raises(gym.error.Error) as info:
        gym.make_vec("gymvec:gymvec/ALE/Pong-v5", 2)
    message = str(info.value)
    assert "'gymvec-ALE/Pong-v5'" in message
    assert "register_vector_ids" not in message
    if not ALE_REGISTERED:
        assert "import ale_py" in message


def test_derived_id_of_an_unknown_id_says_so_and_works_once_registered():
    derived = "gymvec-GymvecLater/Count-v0"
    try:
        with pytest.raises(gym.error.NamespaceNotFound, match="namespace 'GymvecLater'"):
            gym.make_vec(derived, 2)
        with pytest.raises(gym.error.NamespaceNotFound, match="namespace 'GymvecLater'"):
            gym.make_vec(derived, 2, vectorization_mode="sync")
        assert derived not in gym.registry  # what failed left no id behind
        gym.register(
            "GymvecLater/Count-v0",
            entry_point="gymnasium.envs.classic_control:CartPoleEnv",
            max_episode_steps=4,
        )
        envs = gym.make_vec(derived, 2, backend="serial")
        envs.reset(seed=0)
        for _ in range(4):
            *_, truncated, _ = envs.step(np.zeros(2, dtype=np.int64))
        assert truncated.all()  # the base's max_episode_steps
        envs.close()
        assert gym.spec(derived).max_episode_steps == 4  # the full derived spec now
    finally:
        gym.registry.pop("GymvecLater/Count-v0", None)
        gym.registry.pop(derived, None)
        gymnasium_ids._PENDING.discard(derived)


# ---- RLlib ---------------------------------------------------------------------------------------
def _as_rllib(code: str) -> dict:
    """Run ``code`` in a module named like one of RLlib's: gymvec sees RLlib calling."""
    module = types.ModuleType("ray.rllib.env.gymvec_test_runner")
    exec(textwrap.dedent(code), module.__dict__)  # noqa: S102
    return module.__dict__


@pytest.mark.parametrize("mode", ["same_step", "SameStep", "disabled"])
def test_rllib_with_an_autoreset_mode_other_than_next_step_raises(mode):
    with pytest.raises(ValueError, match="RLlib's env runners assume next-step"):
        _as_rllib(
            f"""
            import gymnasium as gym
            gym.make_vec("gymvec:gymvec/CartPole-v1", 2, vectorization_mode="vector_entry_point",
                         backend="serial", autoreset_mode={mode!r})
            """
        )


def test_rllib_without_the_prefix_warns_about_remote_runners():
    with pytest.warns(VectorizationWarning, match="config.environment\\('gymvec:gymvec/"):
        scope = _as_rllib(
            """
            import gymnasium as gym
            envs = gym.make_vec("gymvec/CartPole-v1", 2, vectorization_mode="vector_entry_point",
                                backend="serial", autoreset_mode="next_step")
            """
        )
    scope["envs"].close()


def test_rllib_sync_mode_warning_names_rllibs_setting():
    with pytest.warns(VectorizationWarning, match="gym_env_vectorize_mode='vector_entry_point'"):
        scope = _as_rllib(
            """
            import gymnasium as gym
            envs = gym.make_vec("gymvec:gymvec/CartPole-v1", 2, vectorization_mode="sync")
            """
        )
    scope["envs"].close()


# ---- the call that imports gymvec ----------------------------------------------------------------
def _fresh(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    script = "import gymnasium as gym\nimport sys\nassert 'gymvec' not in sys.modules\n"
    return subprocess.run(
        [sys.executable, "-c", script + textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.skipif(ALE_REGISTERED, reason="ale_py is imported: the ALE namespace exists")
def test_first_call_namespaced_id_has_the_hint_in_the_message():
    result = _fresh(
        """
        try:
            gym.make_vec("gymvec:gymvec-ALE/Pong-v5", 2)
        except gym.error.NamespaceNotFound as error:
            print("ERROR", error)
        """
    )
    assert "ERROR" in result.stdout and "import ale_py" in result.stdout, result.stderr


def test_first_call_malformed_id_warns_with_the_right_id():
    result = _fresh(
        """
        try:
            gym.make_vec("gymvec:gymvec/ALE/Pong-v5", 2)
        except gym.error.Error as error:
            print("ERROR", type(error).__name__)
        """
    )
    assert "ERROR Error" in result.stdout, result.stderr
    assert "VectorizationWarning" in result.stderr and "'gymvec-ALE/Pong-v5'" in result.stderr


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        ('gym.make_vec("gymvec:Acrobot-v1", 2)', "'gymvec:gymvec/Acrobot-v1'"),
        (
            'gym.make_vec("gymvec:gymvec/CartPole-v1", 2, vectorization_mode="sync")',
            "builds gymnasium's own SyncVectorEnv",
        ),
    ],
)
def test_first_call_warns_as_later_calls_do(call, expected):
    result = _fresh(f"envs = {call}\nprint(type(envs).__name__)\nenvs.close()\n")
    assert result.returncode == 0, result.stderr
    assert "VectorizationWarning" in result.stderr and expected in result.stderr
    assert result.stderr.count("VectorizationWarning") == 1
    assert "<string>:4" in result.stderr  # the user's line
