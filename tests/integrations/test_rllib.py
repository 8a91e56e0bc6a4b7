"""RLlib's new API stack trains PPO on gymvec through ``gymnasium.make_vec`` (``pip install
"ray[rllib]"``; .ci/run runs this file in a venv of its own, where RLlib pins its gymnasium).

The recipe: ``config.environment("gymvec:gymvec/CartPole-v1").env_runners(
gym_env_vectorize_mode="vector_entry_point", num_envs_per_env_runner=N)``. The reference is
RLlib's own "sync" vectorization of ``CartPole-v1`` with the same seed. Ray runs locally, bound
to 127.0.0.1.
"""

from __future__ import annotations

import os
from pathlib import Path

# Before Ray is imported: every Ray process then binds 127.0.0.1, never the machine's address.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import pytest  # noqa: E402
from conftest import import_error  # noqa: E402

# ray.rllib ships with every ray, but imports only with ray[rllib]'s dependencies: tried in a
# fresh interpreter first, so that a failed import leaves nothing half-imported here.
if (_RLLIB_ERROR := import_error("ray.rllib")) is not None:
    pytest.skip(
        f"RLlib is an optional integration (ray[rllib]): {_RLLIB_ERROR}", allow_module_level=True
    )

import ray  # noqa: E402
from ray.rllib.algorithms.ppo import PPOConfig  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    ray.init(
        address="local",
        _node_ip_address="127.0.0.1",
        num_cpus=2,
        include_dashboard=False,
        object_store_memory=150 * 2**20,
        # the env runners import this checkout's gymvec (the "gymvec:" prefix imports it)
        runtime_env={"env_vars": {"PYTHONPATH": str(REPO)}},
        log_to_driver=False,
    )
    assert [node["NodeManagerAddress"] for node in ray.nodes()] == ["127.0.0.1"]
    yield
    ray.shutdown()


def _train(env: str, mode: str, remote_runners: int, env_config: dict | None = None):
    """Two PPO iterations; returns the metrics that depend on the data, and the env's type."""
    config = (
        PPOConfig()
        .environment(env, env_config=env_config or {})
        .env_runners(
            num_env_runners=remote_runners,
            num_envs_per_env_runner=2,
            gym_env_vectorize_mode=mode,
            rollout_fragment_length=64,
        )
        .training(train_batch_size_per_learner=128, minibatch_size=64, num_epochs=1)
        .debugging(seed=0)
    )
    algo = config.build_algo()
    try:
        results = [algo.train() for _ in range(2)]
        if remote_runners:
            (env_type,) = algo.env_runner_group.foreach_env_runner(
                lambda runner: type(runner.env.unwrapped).__name__, local_env_runner=False
            )
        else:
            env_type = type(algo.env_runner.env.unwrapped).__name__
    finally:
        algo.stop()
    metrics = [
        (
            r["env_runners"]["num_episodes"],
            r["env_runners"]["episode_return_mean"],
            r["env_runners"]["num_env_steps_sampled"],
            r["learners"]["default_policy"]["total_loss"],
        )
        for r in results
    ]
    return metrics, env_type


@pytest.mark.parametrize("remote_runners", [0, 1], ids=["local", "remote"])
def test_ppo_on_gymvec_equals_rllibs_sync_vectorization(remote_runners):
    expected, reference_type = _train("CartPole-v1", "sync", remote_runners)
    got, env_type = _train(
        "gymvec:gymvec/CartPole-v1",
        "vector_entry_point",
        remote_runners,
        {"backend": "parallel", "num_workers": 1},
    )
    assert reference_type == "SyncVectorEnv" and env_type == "ParallelVectorEnv"
    assert expected[0][0] > 0  # episodes ended: the autoreset path was compared
    assert got == expected


def test_ppo_on_gymvecs_serial_backend_through_env_config():
    _, env_type = _train(
        "gymvec:gymvec/CartPole-v1", "vector_entry_point", 0, {"backend": "serial"}
    )
    assert env_type == "SerialVectorEnv"


def test_same_step_autoreset_under_rllib_is_refused_at_build():
    with pytest.raises(Exception, match="RLlib's env runners assume next-step"):
        _train(
            "gymvec:gymvec/CartPole-v1",
            "vector_entry_point",
            0,
            {"autoreset_mode": "same_step", "backend": "serial"},
        )
