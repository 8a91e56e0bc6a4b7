"""Sub-envs on Ray actors: a ``RayEnv`` on a cluster, or on a local Ray on 127.0.0.1.

    python examples/ray_cluster.py                  # a local Ray, loopback only
    python examples/ray_cluster.py --quick
    python examples/ray_cluster.py --address auto --num-workers 64 --envs-per-worker 32

Needs ``pip install -e ".[ray]"``. On a cluster (``ray start --head`` on one node, ``ray
start --address <head>:6379`` on the others, gymvec installed on every node), ``--address
auto`` joins it from a node of the cluster, and ``placement="spread"`` puts one actor on each
node where it can. The script prints where the actors run, then steps the batch with random
actions through the gymnasium face and reports env-steps/s.
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--address", help="a running Ray cluster ('auto'); default: local Ray")
    parser.add_argument("--num-workers", type=int, default=2, help="Ray actors")
    parser.add_argument("--envs-per-worker", type=int, default=8)
    parser.add_argument("--worker-processes", type=int, default=1, help="per actor")
    parser.add_argument("--env-id", default="CartPole-v1")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="short run for CI")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.envs_per_worker = 50, 2
    return args


def main() -> int:
    args = parse_args()
    if args.address is None:
        # A local Ray binds 127.0.0.1 only with this set before Ray is imported.
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        import ray
    except ImportError:
        print('this example needs Ray: pip install -e ".[ray]"', file=sys.stderr)
        return 1
    import gymnasium as gym
    import numpy as np

    import gymvec

    if args.address is None:
        ray.init(num_cpus=args.num_workers, include_dashboard=False, log_to_driver=False)
    else:
        ray.init(address=args.address)
    env_id = args.env_id
    env = gymvec.RayEnv(
        args.num_workers,
        lambda: gym.make(env_id),
        envs_per_worker=args.envs_per_worker,
        worker_processes=args.worker_processes,
        placement="spread",
    )
    nodes = {node["NodeID"]: node["NodeManagerAddress"] for node in ray.nodes()}
    for worker, node_id in enumerate(env.worker_nodes):
        print(f"worker {worker}: node {node_id[:12]} at {nodes.get(node_id, '?')}")
    envs = env.to_gymnasium()  # the gymnasium face; closing it closes the RayEnv
    try:
        envs.reset(seed=args.seed)
        envs.action_space.seed(args.seed)
        actions = [envs.action_space.sample() for _ in range(64)]
        episodes, start = 0, time.perf_counter()
        for t in range(args.steps):
            _, _, terminations, truncations, _ = envs.step(actions[t % 64])
            episodes += int(np.sum(terminations | truncations))
        elapsed = time.perf_counter() - start
    finally:
        envs.close()
    n = envs.num_envs
    print(f"{args.steps} steps of {n} envs on {args.num_workers} actors: {episodes} episodes")
    print(f"{args.steps * n / elapsed:.0f} env-steps/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
