"""gymvec's tensordict-native API: a ``ParallelEnv`` of ``GymEnv`` CartPoles.

    python examples/tensordict_rollout.py
    python examples/tensordict_rollout.py --quick

Part 1 collects a random-action ``rollout`` (finished sub-envs are reset and the rollout goes
on). Part 2 writes the same loop by hand with ``step_and_maybe_reset`` and a simple
hand-written policy, keeping per-env episode returns.
"""

from __future__ import annotations

import argparse
import sys

import torch
from tensordict import TensorDictBase

import gymvec


def make_env() -> gymvec.GymEnv:
    return gymvec.GymEnv("CartPole-v1")


def lean_policy(td: TensorDictBase) -> TensorDictBase:
    """Push the cart towards where the pole is falling (angle plus angular velocity)."""
    obs = td["observation"]  # [x, x_dot, theta, theta_dot] per env
    td["action"] = (obs[..., 2] + 0.5 * obs[..., 3] > 0).long()
    return td


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-workers", type=int, default=2, help="worker processes")
    parser.add_argument("--envs-per-worker", type=int, default=2)
    parser.add_argument("--rollout-steps", type=int, default=200)
    parser.add_argument("--loop-steps", type=int, default=2000)
    parser.add_argument(
        "--start-method",
        default="spawn",
        choices=("spawn", "fork", "forkserver"),
        help="how worker processes start",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="short run for CI")
    args = parser.parse_args()
    if args.quick:
        args.rollout_steps, args.loop_steps = 20, 600
    return args


def main() -> int:
    args = parse_args()
    env = gymvec.ParallelEnv(
        args.num_workers,
        make_env,
        envs_per_worker=args.envs_per_worker,
        mp_start_method=args.start_method,
    )
    try:
        env.set_seed(args.seed)
        torch.manual_seed(args.seed)  # rand_action draws from torch's generator
        print(f"batch size {tuple(env.batch_size)}; action spec {env.action_spec}")

        # 1. rollout: one TensorDict of shape [num_envs, steps]. Without break_when_any_done,
        # sub-envs that finish are reset and keep going; td["next"] holds each true transition.
        td = env.rollout(args.rollout_steps, break_when_any_done=False)
        rewards, dones = td["next", "reward"], td["next", "done"]
        print(f"rollout: batch {tuple(td.batch_size)}, keys {sorted(td.keys())}")
        print(
            f"rollout: observation {tuple(td['observation'].shape)}, "
            f"action {tuple(td['action'].shape)}, reward {tuple(rewards.shape)}, "
            f"done {tuple(dones.shape)}"
        )
        print(
            f"rollout: random actions, {int(dones.sum())} episodes ended, "
            f"total reward {rewards.sum().item():.0f}"
        )

        # 2. The same loop by hand. step_and_maybe_reset returns the stepped tensordict (the
        # transition in td["next"]) and the root of the next step, in which finished sub-envs
        # already hold their reset observation.
        td = env.reset()
        running = torch.zeros(env.batch_size)
        finished: list[float] = []
        for _ in range(args.loop_steps):
            td = lean_policy(td)
            td, td_next = env.step_and_maybe_reset(td)
            running += td["next", "reward"].squeeze(-1)
            done = td["next", "done"].squeeze(-1)
            finished.extend(running[done].tolist())
            running[done] = 0.0
            td = td_next
        mean = sum(finished) / len(finished) if finished else float("nan")
        print(
            f"step_and_maybe_reset: {args.loop_steps} steps x {env.batch_size[0]} envs, "
            f"lean policy: {len(finished)} episodes ended, mean return {mean:.1f} "
            "(CartPole-v1 truncates at 500)"
        )
    finally:
        env.close()
    return 0


if __name__ == "__main__":
    # Spawned workers re-import this file: everything runs from here.
    sys.exit(main())
