"""First-ready batches: step the sub-envs that are ready, take back whichever finish first.

    python examples/first_ready.py
    python examples/first_ready.py --quick

The env waits a random time in every step (exponentially distributed, from its own seeded
generator), as an env that waits on a simulator, a server or a robot would. A lock-step
vector env waits for the slowest sub-env every step; with ``batch_size=M`` gymvec's
``ParallelVectorEnv`` returns the first ``M`` sub-envs to finish (``recv()``, with
``infos["env_id"]``), and ``send(actions, env_id)`` steps just those (EnvPool's API).

The script collects per-sub-env trajectories both ways, prints the wall times, and replays
one sub-env alone (a plain gymnasium env, same seed, same actions) to show that first-ready
batches change only the order across sub-envs, never a trajectory.
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import numpy as np

import gymvec
from gymvec.bench.envs import LATENCY_ID


def policy(obs: np.ndarray) -> np.ndarray:
    """A fixed policy (any would do): push right when the second entry is positive."""
    return (obs[:, 1] > 0).astype(np.int64)


def first_ready(args: argparse.Namespace) -> tuple[float, dict[int, list]]:
    """``--env-steps`` env-steps in first-ready batches; per sub-env its (obs, action) pairs."""
    envs = gymvec.make_vec(
        LATENCY_ID,
        args.num_envs,
        batch_size=args.batch_size,
        num_workers=args.num_envs,  # one process per sub-env: each waits on its own
        mean_seconds=args.mean_ms / 1000,
    )
    trajectories: dict[int, list] = {i: [] for i in range(args.num_envs)}
    try:
        start = time.perf_counter()
        envs.async_reset(seed=args.seed)
        steps = 0
        while steps < args.env_steps:
            obs, rewards, terminations, truncations, infos = envs.recv()
            env_id = infos["env_id"]
            actions = policy(obs)
            for row, i in enumerate(env_id.tolist()):
                trajectories[i].append((obs[row], int(actions[row])))
            envs.send(actions, env_id)
            steps += len(env_id)
        elapsed = time.perf_counter() - start
    finally:
        envs.close()
    return elapsed, trajectories


def lock_step(args: argparse.Namespace) -> float:
    """The same number of env-steps, every sub-env stepped together."""
    envs = gymvec.make_vec(
        LATENCY_ID,
        args.num_envs,
        num_workers=args.num_envs,
        local_worker=False,
        mean_seconds=args.mean_ms / 1000,
    )
    try:
        start = time.perf_counter()
        obs, _ = envs.reset(seed=args.seed)
        for _ in range(args.env_steps // args.num_envs):
            obs, *_ = envs.step(policy(obs))
        return time.perf_counter() - start
    finally:
        envs.close()


def replay_alone(args: argparse.Namespace, i: int, trajectory: list) -> bool:
    """Sub-env ``i`` alone, with gymnasium's next-step autoreset done by hand: whether it
    returns the observations the vector env returned, action after action."""
    env = gym.make(LATENCY_ID, mean_seconds=0.0)  # the same draws, no waits
    expected, _ = env.reset(seed=args.seed + i)
    ended = False
    try:
        for seen, action in trajectory:
            if not np.array_equal(seen, expected):
                return False
            if ended:  # the step after an episode's end resets it (its action is ignored)
                expected, _ = env.reset()
                ended = False
            else:
                expected, _, terminated, truncated, _ = env.step(action)
                ended = terminated or truncated
        return True
    finally:
        env.close()


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--env-steps", type=int, default=2000)
    parser.add_argument("--mean-ms", type=float, default=2.0, help="mean wait of a step (ms)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="a short run (tests)")
    args = parser.parse_args()
    if args.quick:
        args.env_steps = 400
    return args


def main() -> None:
    args = parse_args()
    ready_s, trajectories = first_ready(args)
    lock_s = lock_step(args)
    n = args.env_steps
    print(
        f"first-ready (batch_size={args.batch_size} of {args.num_envs}): {n} env-steps in "
        f"{ready_s:.2f} s ({n / ready_s:.0f} env-steps/s)"
    )
    print(f"lock-step: {n} env-steps in {lock_s:.2f} s ({n / lock_s:.0f} env-steps/s)")
    print(f"first-ready / lock-step speed: {lock_s / ready_s:.2f}x")
    lengths = sorted(len(t) for t in trajectories.values())
    print(f"transitions per sub-env: min {lengths[0]}, max {lengths[-1]}")
    same = all(replay_alone(args, i, t) for i, t in trajectories.items())
    print(f"every sub-env replayed alone: {'identical' if same else 'DIFFERENT'}")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
