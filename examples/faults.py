"""Faults that heal: a run that goes on through injected crashes (``on_fault="restart"``).

    python examples/faults.py
    python examples/faults.py --quick
    python examples/faults.py --costs    # what one restart costs, by kind and start method
    python examples/faults.py --paired 12  # no fault: on_fault="restart" against "raise"

The sub-env is CartPole that, in each step, faults with probability ``--fault-rate``, drawing
from its own seeded generator: it raises a ``RuntimeError``, exits its worker process
(``os._exit``) or segfaults it (SIGSEGV); with ``--hangs`` it may also hang past ``timeout=``.
gymvec rebuilds what faulted (the sub-env where it raised, the worker process where it died:
every sub-env that worker held) and the run goes on; the faulted steps read as truncations
with ``infos["fault"]``. The script runs the same seeds twice and checks that both runs give
the same trajectories (a rebuilt sub-env's first reset is seeded from the row's last seed and
its restart count), then prints the restarts.

See docs/faults.md.
"""

from __future__ import annotations

import argparse
import collections
import functools
import os
import signal
import time

import gymnasium as gym
import numpy as np

import gymvec
from gymvec.common.faults import FAULT_KINDS

KINDS = ("raise", "exit", "segv")


class CrashyCartPole(gym.Wrapper):
    """CartPole that faults in a step with probability ``rate`` (see the module docstring);
    its generator is seeded by each seeded reset, so a rerun faults at the same steps."""

    def __init__(self, rate: float, kinds: tuple[str, ...], hang_s: float = 0.0):
        super().__init__(gym.make("CartPole-v1"))
        self.rate, self.kinds, self.hang_s = rate, kinds, hang_s
        self.faults = np.random.default_rng()
        self.armed: str | None = None  # a fault for the next step (see arm)

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self.faults = np.random.default_rng(seed)
        return self.env.reset(seed=seed, options=options)

    def step(self, action):
        if self.armed is not None:
            how, self.armed = self.armed, None
            fault(how, self.hang_s)
        if self.rate and self.faults.random() < self.rate:
            fault(str(self.faults.choice(self.kinds)), self.hang_s)
        return self.env.step(action)


def arm(env: CrashyCartPole, how: str) -> None:
    """Make ``env``'s next step fault as ``how`` says (run where the sub-env lives)."""
    env.armed = how


def fault(kind: str, hang_s: float = 0.0) -> None:
    """Fault as ``kind`` says: "raise", "exit", "segv" or "hang" (for ``hang_s`` seconds)."""
    if kind == "exit":
        os._exit(3)
    if kind == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    if kind == "hang":
        time.sleep(hang_s)
        return
    raise RuntimeError("CrashyCartPole: an injected fault")


def policy(obs: np.ndarray) -> np.ndarray:
    """A fixed policy (any would do): push the way the pole falls."""
    return (obs[:, 2] > 0).astype(np.int64)


def run(args: argparse.Namespace, kinds: tuple[str, ...]) -> tuple[list, np.ndarray, list]:
    """``--steps`` steps through faults: per step (observations, rewards, done flags, faulted
    rows); the restarts per sub-env and the faults."""
    make = functools.partial(CrashyCartPole, args.fault_rate, kinds, 2 * args.timeout)
    envs = gymvec.ParallelVectorEnv(
        [make] * args.num_envs,
        num_workers=args.num_workers,
        context=args.context,
        timeout=args.timeout if "hang" in kinds else None,
        local_worker=False,  # a crash in this process could not heal
        on_fault=gymvec.Restart(limit=1000),
    )
    record = []
    try:
        obs, _ = envs.reset(seed=args.seed)
        for _ in range(args.steps):
            obs, reward, terminated, truncated, infos = envs.step(policy(obs))
            faulted = infos["_fault"].copy() if "fault" in infos else np.zeros(args.num_envs, bool)
            if (faulted & ~truncated).any() or (faulted & terminated).any():
                raise SystemExit("a faulted row did not read as a truncation")
            record.append((obs.copy(), reward.copy(), terminated | truncated, faulted))
        return record, envs.restarts, envs.faults
    finally:
        envs.close()


def same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(
        all(np.array_equal(x, y) for x, y in zip(step_a, step_b)) for step_a, step_b in zip(a, b)
    )


def costs(args: argparse.Namespace) -> None:
    """What one restart costs, by kind and start method: the wall time of the step in which
    sub-env 0 faults and of the step after it (where the rebuilt sub-env resets), less that of
    two steps without a fault (medians of ``--rounds``)."""
    print(
        f"one restart, {args.num_envs} CartPole sub-envs in {args.num_workers} workers "
        f"(ms; medians of {args.rounds}; timeout={args.timeout} s):"
    )
    print(f"{'start method':<12} {'2 steps':>9} {'raise':>9} {'death':>9} {'timeout':>9}")
    for context in ("fork", "spawn", "forkserver"):
        times: dict[str, list[float]] = collections.defaultdict(list)
        envs = gymvec.ParallelVectorEnv(
            [functools.partial(CrashyCartPole, 0.0, KINDS, 10 * args.timeout)] * args.num_envs,
            num_workers=args.num_workers,
            context=context,
            timeout=args.timeout,
            local_worker=False,  # a crash in this process could not heal
            on_fault=gymvec.Restart(limit=10_000),
        )
        try:
            envs.reset(seed=args.seed)
            actions = np.zeros(args.num_envs, dtype=np.int64)
            for _ in range(args.rounds):
                for kind, how in (("none", None), ("raise", "raise"), ("death", "segv")):
                    times[kind].append(_two_steps(envs, actions, how))
                times["timeout"].append(_two_steps(envs, actions, "hang"))
        finally:
            envs.close()
        base = float(np.median(times["none"]))
        extra = [float(np.median(times[k])) - base for k in ("raise", "death", "timeout")]
        cells = " ".join(f"{1000 * t:9.1f}" for t in [base, *extra])
        print(f"{context:<12} {cells}")


def _two_steps(envs: gymvec.ParallelVectorEnv, actions: np.ndarray, how: str | None) -> float:
    """The wall time of two steps, sub-env 0 faulting in the first as ``how`` says (None:
    none)."""
    envs.step(actions)  # (the rows of an earlier fault reset here, untimed)
    if how is not None:
        envs.apply(arm, how, indices=[0])
    start = time.perf_counter()
    envs.step(actions)
    envs.step(actions)
    return time.perf_counter() - start


def paired(rounds: int) -> None:
    """Without a fault, ``on_fault="restart"`` against ``"raise"``: both envs alive at once
    (the bench's cartpole-32 and busy-8, 2 workers), chunks of steps alternating between
    them, the order flipped each round; per round the ratio of their steps/s."""
    import gymvec.bench  # noqa: F401  (registers GymvecBench/BusyStep-v0)

    for case, env_id, n, steps in (
        ("cartpole-32", "CartPole-v1", 32, 1000),
        ("busy-8", "GymvecBench/BusyStep-v0", 8, 150),
    ):
        make = functools.partial(gym.make, env_id)
        kinds = ("raise", "restart")
        envs = {k: gymvec.ParallelVectorEnv([make] * n, num_workers=2, on_fault=k) for k in kinds}
        actions = np.random.default_rng(0).integers(0, 2, size=(64, n))
        try:
            for env in envs.values():
                env.reset(seed=0)
                _steps_per_s(env, actions, 50)
            ratios = []
            for r in range(rounds):
                order = kinds if r % 2 == 0 else kinds[::-1]
                got = {k: _steps_per_s(envs[k], actions, steps) for k in order}
                ratios.append(got["restart"] / got["raise"])
                print(
                    f"{case} round {r}: raise {n * got['raise']:,.0f}, restart "
                    f"{n * got['restart']:,.0f} env-steps/s, ratio {ratios[-1]:.3f}"
                )
        finally:
            for env in envs.values():
                env.close()
        print(
            f"{case}: restart/raise median {np.median(ratios):.3f} over {rounds} rounds "
            f"(min {min(ratios):.3f}, max {max(ratios):.3f})"
        )


def _steps_per_s(envs: gymvec.ParallelVectorEnv, actions: np.ndarray, steps: int) -> float:
    start = time.perf_counter()
    for t in range(steps):
        envs.step(actions[t % len(actions)])
    return steps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--num-workers", type=int, default=4)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--fault-rate", type=float, default=0.002, help="per sub-env and step")
    parser.add_argument("--hangs", action="store_true", help="faults may hang past timeout=")
    parser.add_argument("--timeout", type=float, default=1.0)
    parser.add_argument("--context", default=None, help="fork, spawn or forkserver")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--costs", action="store_true", help="time one restart of each kind")
    parser.add_argument("--rounds", type=int, default=5, help="--costs: rounds per kind")
    parser.add_argument("--paired", type=int, metavar="ROUNDS", help="no-fault cost, paired")
    parser.add_argument("--quick", action="store_true", help="a short run (the tests' form)")
    args = parser.parse_args()
    if args.quick:
        args.num_envs, args.num_workers, args.steps, args.fault_rate = 4, 2, 400, 0.01
        args.context = args.context or "fork"
        args.rounds = 2
    if args.costs:
        costs(args)
        return
    if args.paired:
        paired(args.paired)
        return
    kinds = (*KINDS, "hang") if args.hangs else KINDS
    start = time.perf_counter()
    first, restarts, faults = run(args, kinds)
    elapsed = time.perf_counter() - start
    second, _, _ = run(args, kinds)
    faulted_rows = int(sum(step[3].sum() for step in first))
    print(f"{args.steps} steps of {args.num_envs} sub-envs in {elapsed:.1f} s")
    print(f"restarts per sub-env: {restarts.tolist()} ({int(restarts.sum())} in all)")
    seen = collections.Counter(fault.kind for fault in faults)
    print("faults by kind: " + ", ".join(f"{kind} {seen[kind]}" for kind in FAULT_KINDS))
    print(f"faulted steps, each read as a truncation: {faulted_rows}")
    if faults:
        last = faults[-1]
        print(f"last fault: sub-env {last.sub_env}, worker {last.worker}: {last.message}")
    print(f"a rerun with the same seeds: {'identical' if same(first, second) else 'DIFFERS'}")
    if faulted_rows != int(restarts.sum()) or not same(first, second):
        raise SystemExit(1)


if __name__ == "__main__":  # guarded: spawned workers re-import the main module
    main()
