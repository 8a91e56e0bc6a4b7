"""Checks gymvec's outputs on an accelerator against the same run on the CPU.

CI has no GPU, so the test suite covers ``device="cpu"`` only; run this where one is:

    python .ci/device_check.py               # device "cuda"
    python .ci/device_check.py --device cpu  # the same checks on the CPU (checks the script)

Each check prints PASS or FAIL; the exit status is the number of failures.
"""

from __future__ import annotations

import argparse
import sys
import traceback

import gymnasium as gym
import numpy as np
import torch

from gymvec import GymEnv, ParallelEnv, SerialEnv
from gymvec.vector.vector_env import GymnasiumVectorEnv

STEPS = 60  # CartPole episodes end within this many steps under random actions


def make_cartpole() -> GymEnv:
    return GymEnv("CartPole-v1")


def leaves_on(td, device: torch.device) -> None:
    for key, value in td.items(include_nested=True, leaves_only=True):
        if value.device != device:
            raise AssertionError(f"{key}: on {value.device}, expected {device}")


def same(a, b, what: str) -> None:
    if not (a.cpu() == b.cpu()).all():
        raise AssertionError(f"{what}: differs from the CPU run")


def actions(n: int) -> list[torch.Tensor]:
    rng = np.random.default_rng(0)
    return [torch.as_tensor(rng.integers(0, 2, n)) for _ in range(STEPS)]


def check_step_and_maybe_reset(device: torch.device) -> None:
    on_device = ParallelEnv(2, make_cartpole, envs_per_worker=2, device=device)
    on_cpu = SerialEnv(4, make_cartpole)
    try:
        roots = []
        for env in (on_device, on_cpu):
            env.set_seed(0)
            roots.append(env.reset())
        leaves_on(roots[0], device)
        same(roots[0], roots[1], "reset")
        ends = 0
        for t, action in enumerate(actions(4)):
            outs = []
            for k, env in enumerate((on_device, on_cpu)):
                roots[k].set("action", action.to(env.device))
                outs.append(env.step_and_maybe_reset(roots[k]))
            (td, root), (td_cpu, root_cpu) = outs
            leaves_on(td, device)
            leaves_on(root, device)
            same(td, td_cpu, f"step {t}")
            same(root, root_cpu, f"root after step {t}")
            ends += int(td_cpu["next", "done"].sum())
            roots = [root, root_cpu]
        if ends == 0:
            raise AssertionError("no episode ended: the autoreset was not exercised")
    finally:
        on_device.close()
        on_cpu.close()


def check_step_partial_reset_and_rollout(device: torch.device) -> None:
    on_device = SerialEnv(3, make_cartpole).to(device)
    on_cpu = SerialEnv(3, make_cartpole)
    try:
        roots = []
        for env in (on_device, on_cpu):
            env.set_seed(5)
            roots.append(env.reset())
        action = torch.ones(3, dtype=torch.int64)
        outs = []
        for env, root in zip((on_device, on_cpu), roots):
            root.set("action", action.to(env.device))
            outs.append(env.step(root))
        leaves_on(outs[0], device)
        same(outs[0], outs[1], "step")
        mask = torch.tensor([True, False, True]).unsqueeze(-1)
        partial = [
            env.reset(out.get("next").clone().set("_reset", mask.to(env.device)))
            for env, out in zip((on_device, on_cpu), outs)
        ]
        leaves_on(partial[0], device)
        same(partial[0].exclude("_reset"), partial[1].exclude("_reset"), "partial reset")
        rollouts = []
        for env in (on_device, on_cpu):
            env.set_seed(9)
            torch.manual_seed(0)
            rollouts.append(env.rollout(20, break_when_any_done=False))
        leaves_on(rollouts[0], device)
        same(rollouts[0], rollouts[1], "rollout")
    finally:
        on_device.close()
        on_cpu.close()


def check_gymnasium_face(device: torch.device) -> None:
    face = GymnasiumVectorEnv(
        ParallelEnv(2, make_cartpole, envs_per_worker=2, device=device), output="torch"
    )
    reference = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 4)
    try:
        obs, _ = face.reset(seed=3)
        expected, _ = reference.reset(seed=3)
        if obs.device != device or not np.array_equal(obs.cpu().numpy(), expected):
            raise AssertionError("face reset: wrong device or values")
        for t, action in enumerate(actions(4)):
            got = face.step(action.to(device))
            want = reference.step(action.numpy())
            for name, a, b in zip(("obs", "reward", "terminated", "truncated"), got, want):
                if a.device != device or not np.array_equal(a.cpu().numpy(), b):
                    raise AssertionError(f"face step {t}, {name}: wrong device or values")
    finally:
        face.close()
        reference.close()


CHECKS = [check_step_and_maybe_reset, check_step_partial_reset_and_rollout, check_gymnasium_face]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    device = torch.device(parser.parse_args(argv).device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA device here: nothing checked")
        return 1
    if device.type == "cuda":
        device = torch.device("cuda", torch.cuda.current_device())
    failures = 0
    for check in CHECKS:
        try:
            check(device)
            print(f"PASS {check.__name__} on {device}")
        except Exception:
            failures += 1
            print(f"FAIL {check.__name__} on {device}\n{traceback.format_exc()}")
    return failures


if __name__ == "__main__":
    sys.exit(main())
