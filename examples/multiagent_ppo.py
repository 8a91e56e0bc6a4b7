"""A CleanRL-style PPO with one policy shared by every agent, on PettingZoo's simple_spread.

    python examples/multiagent_ppo.py            # 100k agent-steps, prints the mean return
    python examples/multiagent_ppo.py --quick    # 2048 agent-steps (CI)

``gymvec.pettingzoo.make_vec`` lays the agents of ``--num-envs`` PettingZoo envs out as the
rows of one gymnasium vector env (row ``e * A + k`` is agent ``k`` of env ``e``), so a
single-agent PPO trains them all with one shared policy. Rows whose agent is not alive (it left
its env, or has not appeared yet) are left out of the loss through ``infos["alive"]``.
``--in-process`` runs one ``PettingZooBlock`` in this process instead (no workers).
Needs ``pip install 'gymvec[pettingzoo]' mpe2``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical

from gymvec.pettingzoo import PettingZooBlock, make_vec


def simple_spread():
    from mpe2 import simple_spread_v3

    return simple_spread_v3.parallel_env(max_cycles=25)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--timesteps", type=int, default=100_000, help="agent-steps")
    parser.add_argument("--num-envs", type=int, default=8, help="PettingZoo envs (3 agents each)")
    parser.add_argument("--num-workers", type=int, default=2, help="worker processes")
    parser.add_argument("--in-process", action="store_true", help="one block, no workers")
    parser.add_argument("--num-steps", type=int, default=64, help="steps per rollout")
    parser.add_argument("--learning-rate", type=float, default=3e-4)
    parser.add_argument("--gamma", type=float, default=0.99)
    parser.add_argument("--gae-lambda", type=float, default=0.95)
    parser.add_argument("--update-epochs", type=int, default=4)
    parser.add_argument("--clip-coef", type=float, default=0.2)
    parser.add_argument("--ent-coef", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="tiny run for CI")
    args = parser.parse_args()
    if args.quick:
        args.timesteps = min(args.timesteps, 2048)
    return args


class Agent(nn.Module):
    def __init__(self, obs_size: int, num_actions: int):
        super().__init__()
        self.critic = nn.Sequential(nn.Linear(obs_size, 64), nn.Tanh(), nn.Linear(64, 1))
        self.actor = nn.Sequential(nn.Linear(obs_size, 64), nn.Tanh(), nn.Linear(64, num_actions))

    def act(self, obs: torch.Tensor, action: torch.Tensor | None = None):
        dist = Categorical(logits=self.actor(obs))
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action), dist.entropy(), self.critic(obs).squeeze(-1)


def main() -> None:
    args = parse_args()
    torch.manual_seed(args.seed)
    if args.in_process:
        envs = PettingZooBlock(simple_spread, args.num_envs, autoreset_mode="same_step")
    else:
        envs = make_vec(
            simple_spread, args.num_envs, num_workers=args.num_workers, autoreset_mode="same_step"
        )
    rows, T = envs.num_envs, args.num_steps
    agent = Agent(envs.single_observation_space.shape[0], envs.single_action_space.n)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate)

    obs_buf = torch.zeros((T, rows, envs.single_observation_space.shape[0]))
    actions_buf = torch.zeros((T, rows), dtype=torch.long)
    logprobs, rewards, values = (torch.zeros((T, rows)) for _ in range(3))
    dones, valid = torch.zeros((T, rows)), torch.zeros((T, rows))

    obs_np, infos = envs.reset(seed=args.seed)
    obs = torch.as_tensor(obs_np)
    returns, running = [], np.zeros(rows)
    agent_steps, start = 0, time.perf_counter()
    while agent_steps < args.timesteps:
        # ---- rollout: every row acts; rows not alive are masked out of the loss below
        for t in range(T):
            with torch.no_grad():
                action, logprob, _, value = agent.act(obs)
            obs_buf[t], actions_buf[t], logprobs[t], values[t] = obs, action, logprob, value
            obs_np, reward, terminated, truncated, infos = envs.step(action.numpy())
            done = terminated | truncated
            rewards[t] = torch.as_tensor(reward, dtype=torch.float32)
            dones[t] = torch.as_tensor(done, dtype=torch.float32)
            valid[t] = torch.as_tensor(infos["alive"], dtype=torch.float32)
            running += reward
            returns += running[done].tolist()
            running[done] = 0.0
            obs = torch.as_tensor(obs_np)
            agent_steps += int(infos["alive"].sum())
        # ---- GAE (an episode's end, truncation included, ends the bootstrap: CleanRL's way)
        with torch.no_grad():
            next_value = agent.act(obs)[3]
            advantages, last = torch.zeros((T, rows)), torch.zeros(rows)
            for t in reversed(range(T)):
                following = next_value if t == T - 1 else values[t + 1]
                delta = rewards[t] + args.gamma * following * (1 - dones[t]) - values[t]
                last = delta + args.gamma * args.gae_lambda * (1 - dones[t]) * last
                advantages[t] = last
            targets = advantages + values
        # ---- PPO update over the whole rollout, rows not alive weighted 0
        b_adv = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        for _ in range(args.update_epochs):
            _, new_logprob, entropy, new_value = agent.act(obs_buf, actions_buf)
            ratio = (new_logprob - logprobs).exp()
            clipped = ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef)
            policy_loss = -torch.min(ratio * b_adv, clipped * b_adv)
            value_loss = 0.5 * (new_value - targets) ** 2
            per_row = policy_loss + 0.5 * value_loss - args.ent_coef * entropy
            loss = (per_row * valid).sum() / valid.sum().clamp(min=1)
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), 0.5)
            optimizer.step()
        recent = np.mean(returns[-30:]) if returns else float("nan")
        rate = agent_steps / (time.perf_counter() - start)
        print(
            f"agent-steps {agent_steps} return (last 30 agents) {recent:.1f} "
            f"{rate:.0f} agent-steps/s"
        )
    envs.close()
    print(f"trained {agent_steps} agent-steps on {args.num_envs} envs x 3 agents ({rows} rows)")


if __name__ == "__main__":
    main()
