"""Blocks of different sizes mixed with single envs on Ray actors (a start in two phases:
each actor reports its sub-envs' rows before the driver lays the buffers out), one actor
process or several per actor; each part compared with itself stepped alone."""

from __future__ import annotations

import os

# Before Ray is imported: every Ray process then binds 127.0.0.1, never the machine's address.
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import pytest  # noqa: E402
from gymnasium.vector import AutoresetMode  # noqa: E402
from test_blocks_mixed import assert_tensordict_equals_parts, factories, mixed_parts  # noqa: E402

ray = pytest.importorskip("ray")

from gymvec import RayEnv  # noqa: E402

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(os.path.dirname(here))
    path = os.pathsep.join([repo, os.path.join(repo, "tests"), here])
    ray.init(
        num_cpus=2,
        object_store_memory=150 * 2**20,
        include_dashboard=False,
        runtime_env={"env_vars": {"PYTHONPATH": path}},
        log_to_driver=False,
    )
    yield
    ray.shutdown()


@pytest.mark.parametrize("worker_processes", [1, 2])
def test_ray_env_over_mixed_blocks_equals_their_parts_alone(worker_processes):
    parts = mixed_parts(AutoresetMode.DISABLED)  # rows 3, 1, 2, 1
    env = RayEnv(
        2,
        factories(parts),
        envs_per_worker=[2, 2],
        worker_processes=worker_processes,
        placement=None,
    )
    try:
        assert env.engine.worker_layout.rows_per_sub_env == (3, 1, 2, 1)
        assert assert_tensordict_equals_parts(env, parts, steps=30) > 0
    finally:
        env.close()
