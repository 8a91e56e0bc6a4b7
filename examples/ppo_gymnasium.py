"""A compact CleanRL-style PPO on CartPole, written against gymvec's gymnasium face.

    python examples/ppo_gymnasium.py            # full run: last 20 episodes average >= 195
    python examples/ppo_gymnasium.py --quick    # 2048 steps, no threshold (CI)

Everything a gymnasium ``VectorEnv`` user expects: ``gymvec.ParallelVectorEnv`` runs the envs
(worker processes, shared memory) and hands out torch tensors (``output="torch"``),
``RecordEpisodeStatistics`` on each env (as CleanRL does) reports finished episodes in the
infos, and the agent reads ``single_observation_space`` / ``single_action_space``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import deque

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical

import gymvec

THRESHOLD = 195.0  # CartPole's classic "solved" score


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env-id", default="CartPole-v1")
    # Defaults: rl-zoo's tuned CartPole-v1 PPO settings (short rollouts, many epochs).
    parser.add_argument("--timesteps", type=int, default=100_000)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--num-workers", type=int, default=2, help="worker processes")
    parser.add_argument("--num-steps", type=int, default=32, help="steps per env per rollout")
    parser.add_argument("--learning-rate", type=float, default=1e-3, help="annealed to 0")
    parser.add_argument("--gamma", type=float, default=0.98)
    parser.add_argument("--gae-lambda", type=float, default=0.8)
    parser.add_argument("--num-minibatches", type=int, default=1)
    parser.add_argument("--update-epochs", type=int, default=20)
    parser.add_argument("--clip-coef", type=float, default=0.2)
    parser.add_argument("--ent-coef", type=float, default=0.0)
    parser.add_argument("--vf-coef", type=float, default=0.5)
    parser.add_argument("--max-grad-norm", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="tiny run for CI, no threshold")
    args = parser.parse_args()
    if args.quick:
        args.timesteps = min(args.timesteps, 2048)
    return args


def layer_init(layer: nn.Linear, std: float = np.sqrt(2), bias: float = 0.0) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias)
    return layer


class Agent(nn.Module):
    """Separate actor and critic MLPs (64-64, tanh), as in CleanRL's ppo.py."""

    def __init__(self, obs_dim: int, num_actions: int):
        super().__init__()
        self.critic = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 1), std=1.0),
        )
        self.actor = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, num_actions), std=0.01),
        )

    def get_value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)

    def get_action_and_value(self, obs: torch.Tensor, action: torch.Tensor | None = None):
        dist = Categorical(logits=self.actor(obs))
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action), dist.entropy(), self.get_value(obs)


def make_env(env_id: str):
    def thunk() -> gym.Env:
        return gym.wrappers.RecordEpisodeStatistics(gym.make(env_id))

    return thunk


def main() -> int:
    args = parse_args()
    torch.set_num_threads(1)  # leave the other cores to the env workers
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)

    # SAME_STEP autoreset: a finished sub-env is reset within the step that finished it, so
    # every (obs, action, reward) triple stored below is a real transition, and `done` marks
    # where an episode ended, which is all the GAE loop needs. (Under NEXT_STEP the step
    # after an episode end would be a fake transition, reward 0, to mask out of the batch.)
    # The terminal observation of a finished sub-env is in infos["final_obs"]: needed to
    # bootstrap the value of episodes cut by the time limit.
    # output="torch": observations, rewards and flags arrive as tensors, actions go in as
    # tensors. (gymnasium's *vector* wrappers do numpy arithmetic on rewards, so episode
    # statistics come from the per-env RecordEpisodeStatistics inside each factory.)
    envs = gymvec.ParallelVectorEnv(
        [make_env(args.env_id)] * args.num_envs,
        num_workers=args.num_workers,
        autoreset_mode="same_step",
        output="torch",
    )
    obs_shape = envs.single_observation_space.shape
    agent = Agent(int(np.prod(obs_shape)), int(envs.single_action_space.n))
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)

    batch_size = args.num_envs * args.num_steps
    minibatch_size = batch_size // args.num_minibatches
    num_iterations = max(1, args.timesteps // batch_size)

    # Rollout storage, time first.
    obs = torch.zeros((args.num_steps, args.num_envs, *obs_shape))
    actions = torch.zeros((args.num_steps, args.num_envs), dtype=torch.long)
    logprobs = torch.zeros((args.num_steps, args.num_envs))
    rewards = torch.zeros((args.num_steps, args.num_envs))
    dones = torch.zeros((args.num_steps, args.num_envs))  # 1 where the step ended an episode
    values = torch.zeros((args.num_steps, args.num_envs))

    episode_returns: deque[float] = deque(maxlen=20)
    episodes = 0
    global_step = 0
    start = time.perf_counter()
    due = start + 5.0  # when progress is printed next at the latest
    print(
        f"PPO for {num_iterations} iterations of {batch_size} steps on {args.num_envs} envs",
        flush=True,
    )
    next_obs, _ = envs.reset(seed=args.seed)
    try:
        for iteration in range(1, num_iterations + 1):
            # Anneal the learning rate linearly to 0.
            frac = 1.0 - (iteration - 1.0) / num_iterations
            optimizer.param_groups[0]["lr"] = frac * args.learning_rate

            for step in range(args.num_steps):
                global_step += args.num_envs
                obs[step] = next_obs
                with torch.no_grad():
                    action, logprob, _, value = agent.get_action_and_value(next_obs)
                actions[step], logprobs[step], values[step] = action, logprob, value

                next_obs, reward, terminated, truncated, infos = envs.step(action)
                reward = reward.float()
                # Truncated, not terminated: the episode would have gone on, so its last reward
                # also earns the discounted value of the observation it was cut at.
                cut = np.flatnonzero((truncated & ~terminated).numpy())
                if cut.size:
                    final_obs = torch.as_tensor(np.stack(infos["final_obs"][cut]))
                    with torch.no_grad():
                        reward[cut] += args.gamma * agent.get_value(final_obs)
                rewards[step] = reward
                dones[step] = (terminated | truncated).float()

                # A finished env's own RecordEpisodeStatistics put "episode" in its final info.
                final_info = infos.get("final_info", {})
                if "episode" in final_info:
                    for ret in final_info["episode"]["r"][final_info["_episode"]]:
                        episode_returns.append(float(ret))
                        episodes += 1

            # Generalised advantage estimation, from the last step back.
            with torch.no_grad():
                next_value = agent.get_value(next_obs)
            advantages = torch.zeros_like(rewards)
            last_gae = torch.zeros(args.num_envs)
            for t in reversed(range(args.num_steps)):
                following = next_value if t == args.num_steps - 1 else values[t + 1]
                not_done = 1.0 - dones[t]
                delta = rewards[t] + args.gamma * following * not_done - values[t]
                last_gae = delta + args.gamma * args.gae_lambda * not_done * last_gae
                advantages[t] = last_gae
            returns = advantages + values

            # Flatten the batch and optimise the clipped PPO objective.
            b_obs = obs.reshape((-1, *obs_shape))
            b_actions, b_logprobs = actions.reshape(-1), logprobs.reshape(-1)
            b_advantages, b_returns = advantages.reshape(-1), returns.reshape(-1)
            for _ in range(args.update_epochs):
                for mb in torch.randperm(batch_size).split(minibatch_size):
                    _, new_logprob, entropy, new_value = agent.get_action_and_value(
                        b_obs[mb], b_actions[mb]
                    )
                    ratio = (new_logprob - b_logprobs[mb]).exp()
                    adv = b_advantages[mb]
                    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                    pg_loss = torch.max(
                        -adv * ratio,
                        -adv * ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef),
                    ).mean()
                    v_loss = 0.5 * ((new_value - b_returns[mb]) ** 2).mean()
                    loss = pg_loss - args.ent_coef * entropy.mean() + args.vf_coef * v_loss
                    optimizer.zero_grad()
                    loss.backward()
                    nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                    optimizer.step()

            # progress every 10 iterations, and at least every 5 s
            if iteration % 10 and iteration != num_iterations and time.perf_counter() < due:
                continue
            due = time.perf_counter() + 5.0
            mean_return = np.mean(episode_returns) if episode_returns else float("nan")
            sps = global_step / (time.perf_counter() - start)
            print(
                f"iteration {iteration}/{num_iterations} step {global_step} "
                f"episodes {episodes} mean return (last {len(episode_returns)}) "
                f"{mean_return:.1f} SPS {sps:.0f}",
                flush=True,
            )
    finally:
        envs.close()

    mean_return = np.mean(episode_returns) if episode_returns else float("nan")
    print(
        f"done: {global_step} steps in {time.perf_counter() - start:.1f}s, {episodes} episodes; "
        f"mean episodic return of the last {len(episode_returns)} episodes: {mean_return:.1f}"
    )
    if args.quick:
        print("quick run: no threshold")
        return 0
    if not mean_return >= THRESHOLD:
        print(f"FAILED: mean episodic return {mean_return:.1f} < {THRESHOLD}")
        return 1
    print(f"PASSED: mean episodic return {mean_return:.1f} >= {THRESHOLD}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
