"""Stable-Baselines3 PPO on CartPole, with the envs stepped by a gymvec ``ParallelEnv``.

    python examples/sb3_ppo_cartpole.py            # full run: mean evaluation return >= 195
    python examples/sb3_ppo_cartpole.py --quick    # a few thousand steps, no threshold (CI)

``SB3VecEnv`` turns the batched env into an SB3 ``VecEnv`` (same-step autoreset, with
``terminal_observation`` in the infos, so PPO bootstraps truncated episodes correctly);
``VecMonitor`` records episode returns on top. The hyperparameters are the rl-zoo ones for
CartPole-v1.
"""

from __future__ import annotations

import argparse
import sys
import time

import gymnasium as gym

ENV_ID = "CartPole-v1"
THRESHOLD = 195.0  # CartPole's classic "solved" score


def make_cartpole() -> gym.Env:
    return gym.make(ENV_ID)


def linear(start: float):
    """A schedule that decays linearly from ``start`` to 0 over training."""
    return lambda progress_remaining: progress_remaining * start


def progress_callback(total: int, every_s: float = 5.0):
    """An SB3 callback that prints the steps done, the recent return and the speed every
    ``every_s`` seconds: a long run is never silent."""
    from stable_baselines3.common.callbacks import BaseCallback

    class Progress(BaseCallback):
        def _on_training_start(self) -> None:
            self.start = self.last = time.perf_counter()

        def _on_step(self) -> bool:
            now = time.perf_counter()
            if now - self.last >= every_s:
                self.last = now
                episodes = [info["r"] for info in self.model.ep_info_buffer]
                recent = sum(episodes) / len(episodes) if episodes else float("nan")
                steps = self.model.num_timesteps
                print(
                    f"step {steps}/{total}: mean training return {recent:.1f}, "
                    f"{steps / (now - self.start):.0f} steps/s",
                    flush=True,
                )
            return True

    return Progress()


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--timesteps", type=int, default=100_000)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--num-workers", type=int, default=2, help="worker processes")
    parser.add_argument(
        "--start-method",
        default="spawn",
        choices=("spawn", "fork", "forkserver"),
        help="how worker processes start",
    )
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="tiny run for CI, no threshold")
    args = parser.parse_args()
    if args.num_envs % args.num_workers:
        parser.error(f"--num-envs {args.num_envs} must be a multiple of --num-workers")
    if args.quick:
        args.timesteps, args.eval_episodes = min(args.timesteps, 2048), min(args.eval_episodes, 2)
    return args


def main() -> int:
    # Imported here, not at the top: spawned workers re-import this file, and only need
    # gymnasium to build their CartPoles, not torch or SB3.
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.logger import Logger
    from stable_baselines3.common.vec_env import VecMonitor

    import gymvec
    from gymvec.sb3 import SB3VecEnv

    args = parse_args()
    torch.set_num_threads(1)  # the workers need the other cores

    # num_workers processes, each stepping num_envs / num_workers CartPoles.
    train_env = gymvec.ParallelEnv(
        args.num_workers,
        make_cartpole,
        envs_per_worker=args.num_envs // args.num_workers,
        mp_start_method=args.start_method,
    )
    venv = VecMonitor(SB3VecEnv(train_env))  # PPO(seed=...) seeds it through venv.seed()
    # A separate single env for evaluation, stepped in this process.
    eval_env = VecMonitor(SB3VecEnv(gymvec.SerialEnv(1, make_cartpole)))
    eval_env.seed(args.seed + 1000)

    try:
        model = PPO(
            "MlpPolicy",
            venv,
            n_steps=32,
            batch_size=256,
            gae_lambda=0.8,
            gamma=0.98,
            n_epochs=20,
            ent_coef=0.0,
            learning_rate=linear(1e-3),
            clip_range=linear(0.2),
            seed=args.seed,
            device="cpu",
            verbose=0,
        )
        # A silent logger: SB3's default one makes a folder in the temp dir on every learn()
        model.set_logger(Logger(folder=None, output_formats=[]))
        print(
            f"training PPO for {args.timesteps} steps on {args.num_envs} envs "
            f"({args.num_workers} workers); progress every 5 s",
            flush=True,
        )
        start = time.perf_counter()
        model.learn(total_timesteps=args.timesteps, callback=progress_callback(args.timesteps))
        train_s = time.perf_counter() - start
        episodes = [info["r"] for info in model.ep_info_buffer]
        recent = sum(episodes) / len(episodes) if episodes else float("nan")
        print(
            f"trained {model.num_timesteps} steps on {args.num_envs} envs "
            f"({args.num_workers} workers) in {train_s:.1f}s; "
            f"mean training return (last {len(episodes)} episodes): {recent:.1f}"
        )
        mean_return, std_return = evaluate_policy(
            model, eval_env, n_eval_episodes=args.eval_episodes, deterministic=True
        )
        print(
            f"mean evaluation return over {args.eval_episodes} episodes: "
            f"{mean_return:.1f} +/- {std_return:.1f}"
        )
    finally:
        venv.close()
        eval_env.close()

    if args.quick:
        print("quick run: no threshold")
        return 0
    if mean_return < THRESHOLD:
        print(f"FAILED: mean evaluation return {mean_return:.1f} < {THRESHOLD}")
        return 1
    print(f"PASSED: mean evaluation return {mean_return:.1f} >= {THRESHOLD}")
    return 0


if __name__ == "__main__":
    # Everything runs from here: worker processes are spawned, and re-import this module.
    sys.exit(main())
