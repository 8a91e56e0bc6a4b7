"""A pure-tensordict EnvBase for the tests (sub-envs that batched envs drive through their
tensordict API)."""

from __future__ import annotations

import os

import torch
from tensordict import TensorDict

from gymvec import EnvBase
from gymvec.specs import Bounded, Composite, Unbounded


class CounterEnv(EnvBase):
    """A pure-tensordict env: the observation counts up from a seeded random start.

    Terminates when the count passes ``limit``. The action (a float) is added to the reward.
    """

    def __init__(self, limit: int = 7):
        super().__init__()
        self.limit = limit
        self.observation_spec = Composite({"observation": Unbounded(shape=(2,))})
        self.action_spec = Bounded(-1.0, 1.0, shape=(1,))
        self.generator = torch.Generator().manual_seed(0)
        self.count = torch.zeros(2)

    def _set_seed(self, seed):
        self.generator.manual_seed(0 if seed is None else seed)

    def _reset(self, td):
        start = torch.randint(0, 3, (1,), generator=self.generator).float()
        self.count = torch.cat([start, -start])
        return TensorDict(
            {
                "observation": self.count.clone(),
                "done": torch.zeros(1, dtype=torch.bool),
                "terminated": torch.zeros(1, dtype=torch.bool),
                "truncated": torch.zeros(1, dtype=torch.bool),
            }
        )

    def _step(self, td):
        self.count = self.count + torch.tensor([1.0, -1.0])
        terminated = bool(self.count[0] >= self.limit)
        reward = td.get("action").sum().reshape(1) + self.count[0]
        flag = torch.tensor([terminated])
        return TensorDict(
            {
                "observation": self.count.clone(),
                "reward": reward,
                "done": flag.clone(),
                "terminated": flag,
                "truncated": torch.zeros(1, dtype=torch.bool),
            }
        )

    def state_dict(self) -> dict:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.generator.set_state(state["generator"])

    def pid(self) -> int:
        return os.getpid()


def make_counter(limit: int = 7) -> CounterEnv:
    return CounterEnv(limit)
