"""A compact CleanRL-style PPO on Pong, over ``gymvec.atari.make_vec`` (torch on the CPU).

    python examples/atari_ppo.py                        # 20k steps: a throughput check
    python examples/atari_ppo.py --total-timesteps 10000000   # learns Pong (hours on a CPU)
    python examples/atari_ppo.py --backend envpool      # the same PPO over envpool
    python examples/atari_ppo.py --backend sync         # over gymnasium's SyncVectorEnv
    python examples/atari_ppo.py --quick                # a few rollouts (CI)

Every backend gives the same observations: 4 stacked 84x84 gray frames of the standard
preprocessing (30 noops at most, 4 frames a step, max-pooled), NEXT_STEP autoreset. It prints
env-steps per second with the learner in the loop.
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical

ENV_ID = "ALE/Pong-v5"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=("gymvec", "envpool", "sync"), default="gymvec")
    parser.add_argument("--total-timesteps", type=int, default=20_000)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--num-workers", type=int, default=2, help="processes (or threads)")
    parser.add_argument("--num-steps", type=int, default=128, help="steps per env per rollout")
    # CleanRL's Atari PPO settings
    parser.add_argument("--learning-rate", type=float, default=2.5e-4)
    parser.add_argument("--gamma", type=float, default=0.99)
    parser.add_argument("--gae-lambda", type=float, default=0.95)
    parser.add_argument("--num-minibatches", type=int, default=4)
    parser.add_argument("--update-epochs", type=int, default=4)
    parser.add_argument("--clip-coef", type=float, default=0.1)
    parser.add_argument("--ent-coef", type=float, default=0.01)
    parser.add_argument("--vf-coef", type=float, default=0.5)
    parser.add_argument("--max-grad-norm", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="two short rollouts (CI)")
    args = parser.parse_args()
    if args.quick:
        args.num_envs, args.num_steps = 4, 16
        args.total_timesteps = 2 * args.num_envs * args.num_steps
    return args


# ---- the envs ---------------------------------------------------------------------------------
class EnvpoolVectorEnv:
    """envpool's Pong as the few VectorEnv members PPO uses (envpool resets a finished env at
    its next step, as NEXT_STEP does)."""

    def __init__(self, num_envs: int, num_threads: int, seed: int) -> None:
        import envpool

        self.env = envpool.make_gymnasium(
            "Pong-v5",
            num_envs=num_envs,
            num_threads=num_threads,
            seed=seed,
            reward_clip=False,
            episodic_life=False,
            use_fire_reset=False,
            repeat_action_probability=0.25,  # v5's sticky actions
        )
        self.num_envs = num_envs
        self.single_observation_space = self.env.observation_space
        self.single_action_space = self.env.action_space

    def reset(self, seed: int | None = None) -> tuple[np.ndarray, dict]:
        return self.env.reset()

    def step(self, actions: np.ndarray) -> tuple:
        return self.env.step(actions)

    def close(self) -> None:
        self.env.close()


def make_envs(args: argparse.Namespace):
    if args.backend == "gymvec":
        from gymvec.atari import make_vec

        return make_vec(ENV_ID, args.num_envs, num_workers=args.num_workers)
    if args.backend == "envpool":
        return EnvpoolVectorEnv(args.num_envs, args.num_workers, args.seed)
    import ale_py

    gym.register_envs(ale_py)

    def make() -> gym.Env:
        env = gym.wrappers.AtariPreprocessing(gym.make(ENV_ID, frameskip=1))
        return gym.wrappers.FrameStackObservation(env, 4)

    return gym.vector.SyncVectorEnv([make] * args.num_envs)


# ---- the agent: the Nature DQN network, as CleanRL's --------------------------------------------
def layer(module: nn.Module, std: float = float(np.sqrt(2))) -> nn.Module:
    nn.init.orthogonal_(module.weight, std)
    nn.init.constant_(module.bias, 0.0)
    return module


class Agent(nn.Module):
    def __init__(self, num_actions: int) -> None:
        super().__init__()
        self.network = nn.Sequential(
            layer(nn.Conv2d(4, 32, 8, stride=4)),
            nn.ReLU(),
            layer(nn.Conv2d(32, 64, 4, stride=2)),
            nn.ReLU(),
            layer(nn.Conv2d(64, 64, 3, stride=1)),
            nn.ReLU(),
            nn.Flatten(),
            layer(nn.Linear(64 * 7 * 7, 512)),
            nn.ReLU(),
        )
        self.actor = layer(nn.Linear(512, num_actions), std=0.01)
        self.critic = layer(nn.Linear(512, 1), std=1.0)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(self.network(obs / 255.0)).squeeze(-1)

    def act(self, obs: torch.Tensor, action: torch.Tensor | None = None):
        hidden = self.network(obs / 255.0)
        dist = Categorical(logits=self.actor(hidden))
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action), dist.entropy(), self.critic(hidden).squeeze(-1)


# ---- PPO --------------------------------------------------------------------------------------
def main() -> None:
    args = parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)  # the envs have the other cores
    envs = make_envs(args)
    n, steps = args.num_envs, args.num_steps
    agent = Agent(envs.single_action_space.n)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)

    obs_buf = torch.zeros((steps, n, 4, 84, 84), dtype=torch.uint8)
    actions = torch.zeros((steps, n), dtype=torch.long)
    logprobs = torch.zeros((steps, n))
    rewards = torch.zeros((steps, n))
    dones = torch.zeros((steps, n))
    values = torch.zeros((steps, n))
    # NEXT_STEP autoreset: the step after an episode's end only resets its env; its
    # transition is not learned from
    valid = torch.ones((steps, n))

    obs, _ = envs.reset(seed=args.seed)
    next_obs = torch.as_tensor(np.asarray(obs))
    next_done = torch.zeros(n)
    resetting = np.zeros(n, dtype=bool)
    episode_return, returns = np.zeros(n), []
    iterations = max(1, args.total_timesteps // (n * steps))
    start, global_step = time.perf_counter(), 0
    env_seconds = 0.0  # time spent in envs.step: the vectorizer's share of the loop

    for iteration in range(1, iterations + 1):
        for t in range(steps):
            obs_buf[t], dones[t] = next_obs, next_done
            valid[t] = torch.as_tensor(~resetting, dtype=torch.float32)
            with torch.no_grad():
                action, logprob, _, value = agent.act(next_obs.float())
            actions[t], logprobs[t], values[t] = action, logprob, value
            stepped = time.perf_counter()
            obs, reward, terminated, truncated, _ = envs.step(action.numpy())
            env_seconds += time.perf_counter() - stepped
            global_step += n
            rewards[t] = torch.as_tensor(reward, dtype=torch.float32)
            episode_return += np.where(resetting, 0.0, reward)
            done = np.logical_or(terminated, truncated)
            returns.extend(episode_return[done & ~resetting].tolist())
            episode_return[done] = 0.0
            resetting = done
            next_obs = torch.as_tensor(np.asarray(obs))
            next_done = torch.as_tensor(done, dtype=torch.float32)

        with torch.no_grad():  # generalized advantage estimation
            next_value = agent.value(next_obs.float())
            advantages = torch.zeros_like(rewards)
            last = torch.zeros(n)
            for t in reversed(range(steps)):
                nonterminal = 1.0 - (next_done if t == steps - 1 else dones[t + 1])
                following = next_value if t == steps - 1 else values[t + 1]
                delta = rewards[t] + args.gamma * following * nonterminal - values[t]
                last = delta + args.gamma * args.gae_lambda * nonterminal * last
                advantages[t] = last
            targets = advantages + values

        b_obs, b_actions = obs_buf.reshape(-1, 4, 84, 84), actions.reshape(-1)
        b_logprobs, b_adv = logprobs.reshape(-1), advantages.reshape(-1)
        b_targets, b_valid = targets.reshape(-1), valid.reshape(-1)
        batch = n * steps
        minibatch = batch // args.num_minibatches
        for _ in range(args.update_epochs):
            order = torch.randperm(batch)
            for lo in range(0, batch, minibatch):
                idx = order[lo : lo + minibatch]
                mask = b_valid[idx]
                weight = mask.sum().clamp(min=1.0)
                _, newlogprob, entropy, newvalue = agent.act(b_obs[idx].float(), b_actions[idx])
                ratio = (newlogprob - b_logprobs[idx]).exp()
                adv = b_adv[idx]
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                clipped = torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
                pg_loss = (torch.max(-adv * ratio, -adv * clipped) * mask).sum() / weight
                v_loss = 0.5 * (((newvalue - b_targets[idx]) ** 2) * mask).sum() / weight
                ent = (entropy * mask).sum() / weight
                loss = pg_loss - args.ent_coef * ent + args.vf_coef * v_loss
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                optimizer.step()

        sps = global_step / (time.perf_counter() - start)
        recent = f"{np.mean(returns[-10:]):.1f}" if returns else "-"
        print(
            f"iteration {iteration}/{iterations} step {global_step} episodes {len(returns)} "
            f"mean return (last 10) {recent} steps/s {sps:.0f}",
            flush=True,
        )
    envs.close()
    print(
        f"backend {args.backend}: {global_step} steps, {sps:.0f} steps per second (with PPO); "
        f"envs.step alone: {global_step / env_seconds:.0f} steps per second"
    )


if __name__ == "__main__":
    main()
