"""RayEnv across nodes, simulated on this machine (loopback only) by ray.cluster_utils.Cluster:
a head and two added nodes of one CPU each. Spread placement and the loss of a node."""

from __future__ import annotations

import os
import time
from pathlib import Path

# Before Ray is imported: every Ray process then binds 127.0.0.1, never the machine's address.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import gymnasium as gym  # noqa: E402
import pytest  # noqa: E402

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

from gymvec import RayEnv, WorkerError  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(400)


@pytest.fixture(scope="module")
def cluster():
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "include_dashboard": False},
    )
    nodes = [cluster.add_node(num_cpus=1) for _ in range(2)]
    cluster.wait_for_nodes()
    path = os.pathsep.join([str(REPO), str(REPO / "tests"), str(REPO / "tests" / "integrations")])
    ray.init(
        address=cluster.address,
        runtime_env={"env_vars": {"PYTHONPATH": path}},
        log_to_driver=False,
    )
    yield cluster, nodes
    ray.shutdown()
    cluster.shutdown()


def make_cartpole():
    return gym.make("CartPole-v1")


def test_spread_placement_then_a_lost_node_raises_worker_error_naming_it(cluster):
    cluster, nodes = cluster
    assert {node["NodeManagerAddress"] for node in ray.nodes()} == {"127.0.0.1"}
    env = RayEnv(3, make_cartpole, envs_per_worker=2, placement="strict_spread")
    placement_group = env.engine.executor.placement_group
    try:
        alive = {node["NodeID"] for node in ray.nodes() if node["Alive"]}
        assert len(set(env.worker_nodes)) == 3 and set(env.worker_nodes) == alive
        env.set_seed(0)
        env.reset()
        env.step(env.rand_action())
        lost = nodes[1]
        worker = env.worker_nodes.index(lost.node_id)
        cluster.remove_node(lost)
        began = time.monotonic()
        with pytest.raises(WorkerError) as info:
            for _ in range(100):
                env.step(env.rand_action())
        assert time.monotonic() - began < 20
        assert info.value.worker_index == worker
        assert f"worker {worker}" in str(info.value) and lost.node_id in str(info.value)
    finally:
        began = time.monotonic()
        env.close()
        assert time.monotonic() - began < 20
    assert ray.util.placement_group_table(placement_group)["state"] == "REMOVED"
