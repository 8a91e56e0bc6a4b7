"""torchrl's PPO (``ClipPPOLoss`` + ``GAE`` + a ``Collector``) on a gymvec ``ParallelEnv``.

    python examples/torchrl_ppo.py            # at most 100k frames, a few minutes on two cores
    python examples/torchrl_ppo.py --quick    # a short run for CI, no threshold

``gymvec.torchrl.to_torchrl`` makes the gymvec env a torchrl env, so torchrl's transforms,
collector and loss take it as they take their own. Needs ``pip install -e ".[torchrl]"``.
The settings are rl-zoo's CartPole-v1 PPO (8 envs x 32 steps, 20 epochs, GAE lambda 0.8,
gamma 0.98, learning rate and clip range decayed linearly), stopping early once the last 20
episodes' mean return reaches ``--stop-at``. The full run exits 1 unless the
deterministic policy's mean return over 8 evaluation episodes is at least 400 (500 is the
most CartPole-v1 allows).
"""

from __future__ import annotations

import argparse
import functools
import sys
import time

import gymnasium as gym
import torch
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.collectors import Collector
from torchrl.data import LazyTensorStorage, ReplayBuffer, SamplerWithoutReplacement
from torchrl.envs import RewardSum, TransformedEnv
from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.modules import ProbabilisticActor, ValueOperator
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.value import GAE

import gymvec
from gymvec.torchrl import to_torchrl

THRESHOLD = 400.0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-workers", type=int, default=2, help="worker processes")
    parser.add_argument("--envs-per-worker", type=int, default=4)
    parser.add_argument("--steps-per-env", type=int, default=32, help="steps per env per batch")
    parser.add_argument("--total-frames", type=int, default=100_000)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--minibatch", type=int, default=256)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument(
        "--stop-at",
        type=float,
        default=475.0,
        help="stop training once the last 20 episodes' mean return reaches this",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--start-method", default="spawn", choices=("spawn", "fork", "forkserver"))
    parser.add_argument("--quick", action="store_true", help="short run for CI")
    args = parser.parse_args()
    if args.quick:
        args.total_frames, args.epochs = 2048, 4
    return args


def make_env(args: argparse.Namespace, num_workers: int, envs_per_worker: int):
    # Workers get gymnasium factories: they never import torch or torchrl.
    env = gymvec.ParallelEnv(
        num_workers,
        functools.partial(gym.make, "CartPole-v1"),
        envs_per_worker=envs_per_worker,
        mp_start_method=args.start_method,
    )
    return TransformedEnv(to_torchrl(env), RewardSum())


def make_modules(env) -> tuple[ProbabilisticActor, ValueOperator]:
    n_obs = env.observation_spec["observation"].shape[-1]
    n_actions = env.action_spec.n

    def mlp(out: int) -> nn.Module:
        return nn.Sequential(
            nn.Linear(n_obs, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, out)
        )

    actor = ProbabilisticActor(
        TensorDictModule(mlp(n_actions), in_keys=["observation"], out_keys=["logits"]),
        in_keys=["logits"],
        spec=env.full_action_spec["action"],
        distribution_class=torch.distributions.Categorical,
        return_log_prob=True,
    )
    critic = ValueOperator(mlp(1), in_keys=["observation"])
    return actor, critic


def evaluate(actor: ProbabilisticActor, args: argparse.Namespace, episodes: int = 8) -> float:
    """Mean return of the first episode of each of ``episodes`` sub-envs, greedy actions."""
    env = make_env(args, 2, episodes // 2)
    try:
        env.set_seed(args.seed + 1000)
        with set_exploration_type(ExplorationType.DETERMINISTIC), torch.no_grad():
            td = env.rollout(500, actor, break_when_any_done=False)
    finally:
        env.close()
    done = td["next", "done"].squeeze(-1)  # [envs, time]
    first_end = done.float().argmax(dim=1)
    returns = td["next", "episode_reward"].squeeze(-1)
    return returns[torch.arange(episodes), first_end].mean().item()


def main() -> int:
    args = parse_args()
    # Small networks: one thread each is fastest, and two processes' worth of threads
    # fighting over two cores is many times slower.
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    env = make_env(args, args.num_workers, args.envs_per_worker)
    env.set_seed(args.seed)
    actor, critic = make_modules(env)
    num_envs = env.batch_size[0]
    frames_per_batch = num_envs * args.steps_per_env
    collector = Collector(
        env, actor, frames_per_batch=frames_per_batch, total_frames=args.total_frames
    )
    buffer = ReplayBuffer(
        storage=LazyTensorStorage(frames_per_batch),
        sampler=SamplerWithoutReplacement(),
        batch_size=args.minibatch,
    )
    advantage = GAE(gamma=0.98, lmbda=0.8, value_network=critic, average_gae=True)
    loss_module = ClipPPOLoss(actor, critic, clip_epsilon=0.2, entropy_coeff=0.0)
    optimizer = torch.optim.Adam(loss_module.parameters(), lr=args.lr)
    iterations = -(-args.total_frames // frames_per_batch)
    updates_per_batch = args.epochs * max(1, frames_per_batch // args.minibatch)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda update: max(0.0, 1.0 - update / (iterations * updates_per_batch))
    )
    print(
        f"torchrl PPO on a gymvec ParallelEnv: {num_envs} envs ({args.num_workers} workers), "
        f"{frames_per_batch} frames per batch, {args.total_frames} frames",
        flush=True,
    )
    start = time.perf_counter()
    due = start + 5.0
    frames, recent = 0, []
    try:
        for i, data in enumerate(collector, start=1):
            frames += data.numel()
            done = data["next", "done"].squeeze(-1)
            recent = (recent + data["next", "episode_reward"][done].squeeze(-1).tolist())[-20:]
            progress = frames / args.total_frames
            loss_module.clip_epsilon.fill_(0.2 * max(0.05, 1.0 - progress))
            with torch.no_grad():
                advantage(data)  # once per batch, as SB3 does
            for _ in range(args.epochs):
                buffer.extend(data.reshape(-1))
                for _ in range(max(1, frames_per_batch // args.minibatch)):
                    losses = loss_module(buffer.sample())
                    loss = sum(v for k, v in losses.items() if k.startswith("loss_"))
                    optimizer.zero_grad()
                    loss.backward()
                    nn.utils.clip_grad_norm_(loss_module.parameters(), 0.5)
                    optimizer.step()
                    schedule.step()
            collector.update_policy_weights_()
            solved = len(recent) == 20 and sum(recent) / 20 >= args.stop_at
            if i % 20 == 0 or frames >= args.total_frames or solved or time.perf_counter() > due:
                due = time.perf_counter() + 5.0  # progress at least every 5 s
                mean = sum(recent) / len(recent) if recent else float("nan")
                print(
                    f"frames {frames}: mean return of the last {len(recent)} episodes "
                    f"{mean:.1f} ({time.perf_counter() - start:.0f} s)",
                    flush=True,
                )
            if solved:
                break
    finally:
        collector.shutdown()
    score = evaluate(actor, args)
    print(f"mean evaluation return over 8 episodes: {score:.1f}")
    if args.quick:
        print("quick run: no threshold")
        return 0
    if score < THRESHOLD:
        print(f"below the threshold of {THRESHOLD:.0f}")
        return 1
    return 0


# Guarded: spawned worker processes re-import the main module.
if __name__ == "__main__":
    sys.exit(main())
