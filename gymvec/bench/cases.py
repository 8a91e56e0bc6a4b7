"""Named bench cases: an env, a batch size, a worker layout and the runners to compare."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from gymvec.bench.envs import BUSY_LATENCY_ID, BUSY_STEP_ID, IMAGE_OBS_ID, LATENCY_ID
from gymvec.bench.runners.atari import ATARI_BACKENDS, ATARI_ID

# Framework-free references (runners.bare): what one core, gymvec's parallel layout with nothing
# else in it, and that layout's processes not waiting for each other, reach in the same run.
BARE_RUNNERS = ("bare-loop", "bare-parallel", "bare-free")


def default_backends() -> tuple[str, ...]:
    """Every runner that can be built here (SB3's and torchrl's only when installed), then the
    bare references."""
    gym_runners = ("gym-sync", "gym-async")
    sb3 = ("sb3-subproc",) if importlib.util.find_spec("stable_baselines3") else ()
    torchrl = ("torchrl-parallel",) if importlib.util.find_spec("torchrl") else ()
    gymvec_runners = ("gymvec-serial", "gymvec-parallel", "gymvec-td")
    return gym_runners + sb3 + torchrl + gymvec_runners + BARE_RUNNERS


SB3_BACKENDS = ("gym-sync", "gym-async", "sb3-dummy", "sb3-subproc", "gymvec-sb3")
COLLECTOR_BACKENDS = ("gym-sync", "collector-torchrl", "collector-gymvec")
# Lock-step runners against first-ready batches (runners.FIRST_READY_BATCH of the sub-envs),
# with the bare references of both (what this machine gives each with nothing else in it).
FIRST_READY_BACKENDS = (
    "gym-sync",
    "gym-async",
    "gymvec-parallel",
    "gymvec-first-ready",
    "bare-parallel",
    "bare-first-ready",
)


@dataclass(frozen=True)
class Case:
    name: str
    env_id: str
    num_envs: int
    num_workers: int | None = None
    envs_per_worker: int | None = None
    # None means default_backends().
    backends: tuple[str, ...] | None = None
    # The case's gymnasium runners, the ratios' references: its SyncVectorEnv first (the
    # x sync column), then AsyncVectorEnv where it has one (x best gym: the faster of them).
    gym_runners: tuple[str, ...] = ("gym-sync", "gym-async")

    @property
    def sync_runner(self) -> str:
        return self.gym_runners[0]

    def runner_names(self) -> tuple[str, ...]:
        return self.backends if self.backends is not None else default_backends()


CASES: dict[str, Case] = {
    case.name: case
    for case in (
        Case("cartpole-8", "CartPole-v1", 8),
        Case("cartpole-32", "CartPole-v1", 32, num_workers=2),
        Case("busy-8", BUSY_STEP_ID, 8, num_workers=2),
        Case("image-32", IMAGE_OBS_ID, 32, num_workers=2),
        Case(
            "cartpole-8-serial",
            "CartPole-v1",
            8,
            backends=("gym-sync", "gymvec-serial", "bare-loop"),
        ),
        # Stable-Baselines3's VecEnv API: SB3's own vectorizers against gymvec's adapter.
        Case("sb3-32", "CartPole-v1", 32, num_workers=2, backends=SB3_BACKENDS),
        # torchrl's Collector (needs gymvec[torchrl]) over torchrl's ParallelEnv and over
        # gymvec's (to_torchrl), the same layout.
        Case("torchrl-collector-32", "CartPole-v1", 32, num_workers=2, backends=COLLECTOR_BACKENDS),
        # Steps that wait Exp(1 ms) (sleeping), one process per sub-env: lock-step waits for
        # the slowest of 16 draws, first-ready batches take whichever finish first.
        Case("latency-16", LATENCY_ID, 16, num_workers=16, backends=FIRST_READY_BACKENDS),
        # The same draws spent spinning (CPU-bound), as many processes as cores.
        Case("busy-latency-16", BUSY_LATENCY_ID, 16, num_workers=2, backends=FIRST_READY_BACKENDS),
        # Pong, 8 games, standard preprocessing (gymvec[atari]; see gymvec.bench.runners.atari).
        Case(
            "atari-8",
            ATARI_ID,
            8,
            num_workers=2,
            backends=ATARI_BACKENDS,
            gym_runners=("atari-gym-sync", "atari-gym-async"),
        ),
    )
}

# Ray (pip install 'gymvec[ray]'): RayEnv's actors against hand-written ones; run on request.
RAY_BACKENDS = ("gym-sync", "gymvec-ray", "hand-ray", "hand-ray-dag", "naive-ray")
CASES.update(
    {
        case.name: case
        for case in (
            Case("ray-busy-8", BUSY_STEP_ID, 8, num_workers=2, backends=RAY_BACKENDS),
            Case("ray-cartpole-32", "CartPole-v1", 32, num_workers=2, backends=RAY_BACKENDS),
        )
    }
)

# Blocks (a vector env per worker): CartPole's numpy vector env over 16,384 rows in 2 workers,
# against the same vector env alone in one process, the same blocks in the framework-free
# lock-step layout (bare-blocks) and stepping freely (bare-blocks-free), and envpool's CartPole
# (where installed).
BLOCKS_BACKENDS = (
    "vector-entry-point",
    "gymvec-blocks",
    "bare-blocks",
    "bare-blocks-free",
    "envpool",
)
CASES["blocks"] = Case("blocks", "CartPole-v1", 16384, num_workers=2, backends=BLOCKS_BACKENDS)

# PettingZoo agents as rows (gymvec[pettingzoo]; see bench.runners.pettingzoo): mpe2's
# simple_spread x 8 envs (3 agents), butterfly's pistonball x 4 (20 agents, images), against
# SuperSuit's concat_vec_envs_v1, gymnasium's SyncVectorEnv and the same envs in plain
# processes.
PZ_BACKENDS = ("pz-gym-sync", "pz-supersuit", "pz-plain", "pz-gymvec", "pz-block", "pz-loop")
SIMPLE_SPREAD_ID = "pettingzoo/simple_spread_v3"
PISTONBALL_ID = "pettingzoo/pistonball_v6"
for _case in (
    Case("pz-simple-spread-8", SIMPLE_SPREAD_ID, 8 * 3, 2, None, PZ_BACKENDS, ("pz-gym-sync",)),
    Case("pz-pistonball-4", PISTONBALL_ID, 4 * 20, 2, None, PZ_BACKENDS, ("pz-gym-sync",)),
):
    CASES[_case.name] = _case

# What a bare `python -m gymvec.bench` runs.
DEFAULT_CASES = ("cartpole-8", "cartpole-32")
