"""The ``atari-8`` bench case's runners: Pong, 8 games, standard preprocessing (noops, 4 frames
a step, max-pooled, 84x84 gray, 4 stacked), sticky actions off, 2 workers or threads.

``atari-gymvec`` (``gymvec.atari.make_vec``, one block per worker) against gymnasium's vector
envs and gymvec's ``ParallelVectorEnv`` over gymnasium's wrappers, ALE's own C++ vector env,
envpool (where installed), and references with no vectorizer around them: the block in
two plain processes (``atari-block-procs``) and the emulator driven from Python
(``atari-emulator``: four games a process, ``act`` four times and two gray screens a step
through ale-py's Python calls, no resize, no stack), the limit of any vectorizer that drives
ALE from Python as gymvec.atari does; ``atari-emulator-resize`` adds the max-pool and resize
that no pipeline equal to gymnasium's wrappers skips. They bound neither ALE's own vector env
nor envpool, whose C++ threads step the emulators with no Python call a frame. ale-py, opencv
and envpool are imported only when their runner is built.
"""

from __future__ import annotations

import functools
import multiprocessing
from multiprocessing.connection import Connection
from typing import Any

import gymnasium as gym
import numpy as np

from gymvec.bench.runners import (
    Runner,
    RunnerOptions,
    VectorEnvRunner,
    register_runner,
    usable_cores,
)

ATARI_ID = "ale_py:ALE/Pong-v5"  # "ale_py:" makes gym.make import ale-py, which registers it
GAME = "pong"
SCREEN = (210, 160)  # ALE's screen: rows, columns
NUM_WORKERS = 2
# sticky actions off: ALE's vector env and envpool are compared with their defaults' rules
MAKE_KWARGS: dict[str, Any] = {"repeat_action_probability": 0.0}
ATARI_BACKENDS = (
    "atari-gym-sync",
    "atari-gym-async",
    "atari-gymvec-wrappers",
    "atari-gymvec",
    "atari-ale-vector",
    "atari-envpool",
    "atari-block-procs",
    "atari-emulator",
    "atari-emulator-resize",
)


def _env_id(env_id: str) -> str:
    return env_id.split(":", 1)[1] if ":" in env_id else env_id


def _workers(num_envs: int, options: RunnerOptions) -> int:
    return options.num_workers or min(num_envs, usable_cores(), NUM_WORKERS)


def make_wrapped(env_id: str) -> gym.Env:
    """``FrameStackObservation(AtariPreprocessing(gym.make(id, frameskip=1)), 4)``: what
    ``gymvec.atari`` equals (module level: worker processes unpickle it)."""
    import ale_py

    gym.register_envs(ale_py)
    env = gym.make(_env_id(env_id), frameskip=1, **MAKE_KWARGS)
    return gym.wrappers.FrameStackObservation(gym.wrappers.AtariPreprocessing(env), 4)


def _wrapped_fns(env_id: str, num_envs: int) -> list[Any]:
    return [functools.partial(make_wrapped, env_id)] * num_envs


@register_runner("atari-gym-sync")
def _gym_sync(env_id: str, num_envs: int, options: RunnerOptions) -> Runner:
    return VectorEnvRunner(gym.vector.SyncVectorEnv(_wrapped_fns(env_id, num_envs)))


@register_runner("atari-gym-async")
def _gym_async(env_id: str, num_envs: int, options: RunnerOptions) -> Runner:
    return VectorEnvRunner(gym.vector.AsyncVectorEnv(_wrapped_fns(env_id, num_envs)))


@register_runner("atari-gymvec-wrappers")
def _gymvec_wrappers(env_id: str, num_envs: int, options: RunnerOptions) -> Runner:
    from gymvec.vector.dropin import ParallelVectorEnv

    fns = _wrapped_fns(env_id, num_envs)
    return VectorEnvRunner(ParallelVectorEnv(fns, num_workers=_workers(num_envs, options)))


@register_runner("atari-gymvec")
def _gymvec_atari(env_id: str, num_envs: int, options: RunnerOptions) -> Runner:
    from gymvec.atari import make_vec

    envs = make_vec(
        _env_id(env_id), num_envs, num_workers=_workers(num_envs, options), **MAKE_KWARGS
    )
    return VectorEnvRunner(envs)


@register_runner("atari-ale-vector")
def _ale_vector(env_id: str, num_envs: int, options: RunnerOptions) -> Runner:
    from ale_py.vector_env import AtariVectorEnv

    # gymnasium's AtariPreprocessing's rules: no reward clipping, no FIRE at reset
    envs = AtariVectorEnv(
        GAME,
        num_envs,
        num_threads=_workers(num_envs, options),
        repeat_action_probability=0.0,
        reward_clipping=False,
        use_fire_reset=False,
        episodic_life=False,
        noop_max=30,
    )
    return VectorEnvRunner(envs)


class EnvpoolRunner(Runner):
    """An envpool gymnasium env (seeded when made; its API is gymnasium-like)."""

    def __init__(self, num_envs: int, num_threads: int) -> None:
        self.num_envs, self.num_threads = num_envs, num_threads
        self.env: Any = None

    def reset(self, seed: int) -> None:
        import envpool

        if self.env is None:
            self.env = envpool.make_gymnasium(
                "Pong-v5",
                num_envs=self.num_envs,
                num_threads=self.num_threads,
                seed=seed,
                repeat_action_probability=0.0,
                reward_clip=False,
                episodic_life=False,
                use_fire_reset=False,
                noop_max=30,
            )
        self.env.reset()

    def step(self, actions: Any) -> None:
        self.env.step(actions)

    def close(self) -> None:
        if self.env is not None:
            self.env.close()


@register_runner("atari-envpool")
def _envpool(env_id: str, num_envs: int, options: RunnerOptions) -> Runner:
    import envpool  # noqa: F401  (fails here, at build, where it is not installed)

    return EnvpoolRunner(num_envs, _workers(num_envs, options))


# ---- references in plain processes ------------------------------------------------------------
def _emulator_loop(conn: Connection, num_games: int, seed: int, resize: bool = False) -> None:
    """Four (``num_games``) Pong emulators: per step ``act`` four times and two gray screens
    each, a reset when a game ends; nothing else. With ``resize``, then the pixel work no
    gymnasium-equal pipeline skips, done by ``gymvec.atari``'s own frames (the fastest exact
    way known): the two screens max-pooled and one ``INTER_AREA`` resize to 84x84 per game,
    four games at a time as the channels of one image (see :func:`reference_frames`)."""
    import ale_py

    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
    ales = []
    for i in range(num_games):
        ale = ale_py.ALEInterface()
        ale.setFloat("repeat_action_probability", 0.0)
        ale.setInt("random_seed", seed + i)
        ale.loadROM(str(ale_py.roms.get_rom_path(GAME)))
        ale.reset_game()
        ales.append(ale)
    action_set = [a.value for a in ales[0].getMinimalActionSet()]
    pixels = reference_frames(num_games) if resize else None
    if pixels is not None:
        screens = pixels.screens  # every game's two screens, one under the other
    else:
        screens = [np.empty((num_games * SCREEN[0], SCREEN[1]), dtype=np.uint8) for _ in "ab"]
    h = SCREEN[0]
    last = [screens[0][i * h : (i + 1) * h] for i in range(num_games)]
    second_last = [screens[1][i * h : (i + 1) * h] for i in range(num_games)]
    conn.send(None)
    while True:
        actions = conn.recv()
        if actions is None:
            break
        for i, (ale, a) in enumerate(zip(ales, actions)):
            action = action_set[a]
            for _ in range(3):
                ale.act(action)
                ale.game_over()
            ale.getScreenGrayscale(second_last[i])
            ale.act(action)
            ale.getScreenGrayscale(last[i])
            if ale.game_over():
                ale.reset_game()
        if pixels is not None:
            pixels.frames()
        conn.send(None)
    conn.close()


def reference_frames(num_games: int) -> Any:
    """The ``FrameStacks`` of ``atari-emulator-resize`` (``gymvec.atari``'s, for the case's
    preprocessing): write each game's screens into its rows of ``screens``, then ``frames()``
    pools and resizes them all."""
    from gymvec.atari.config import AtariConfig
    from gymvec.atari.frames import FrameStacks

    config = AtariConfig.build(_env_id(ATARI_ID), **MAKE_KWARGS)
    return FrameStacks(config, num_games, *SCREEN)


def _block_loop(conn: Connection, num_games: int, seed: int) -> None:
    """A ``gymvec.atari`` block of ``num_games`` games, stepped on command (its observations
    stay here: this is the block's own speed, without the engine's shared memory)."""
    from gymvec.atari import AtariVectorEnv

    env = AtariVectorEnv(_env_id(ATARI_ID), num_games, copy=False, **MAKE_KWARGS)
    env.reset(seed=seed)
    conn.send(None)
    while True:
        actions = conn.recv()
        if actions is None:
            break
        env.step(actions)
        conn.send(None)
    env.close()
    conn.close()


class ProcessesRunner(Runner):
    """``target`` in ``num_workers`` spawned processes, each with its share of the games,
    stepped in lock-step over pipes (a few bytes each way)."""

    def __init__(self, target: Any, num_envs: int, num_workers: int) -> None:
        self.target = target
        self.num_envs, self.num_workers = num_envs, num_workers
        self.conns: list[Connection] = []
        self.processes: list[Any] = []
        self.bounds: list[tuple[int, int]] = []

    def reset(self, seed: int) -> None:
        if self.processes:
            return  # the processes keep stepping: their games autoreset
        from gymvec.subenvs.layout import spread

        ctx = multiprocessing.get_context("spawn")
        start = 0
        for share in spread(self.num_envs, self.num_workers):
            parent, child = ctx.Pipe()
            process = ctx.Process(target=self.target, args=(child, share, seed + start))
            process.start()
            self.conns.append(parent)
            self.processes.append(process)
            self.bounds.append((start, start + share))
            start += share
        for conn in self.conns:
            conn.recv()

    def step(self, actions: Any) -> None:
        for conn, (lo, hi) in zip(self.conns, self.bounds):
            conn.send(actions[lo:hi])
        for conn in self.conns:
            conn.recv()

    def close(self) -> None:
        for conn in self.conns:
            conn.send(None)
        for process in self.processes:
            process.join(timeout=10)


@register_runner("atari-emulator")
def _emulator(env_id: str, num_envs: int, options: RunnerOptions) -> Runner:
    return ProcessesRunner(_emulator_loop, num_envs, _workers(num_envs, options))


@register_runner("atari-emulator-resize")
def _emulator_resize(env_id: str, num_envs: int, options: RunnerOptions) -> Runner:
    loop = functools.partial(_emulator_loop, resize=True)
    return ProcessesRunner(loop, num_envs, _workers(num_envs, options))


@register_runner("atari-block-procs")
def _block_procs(env_id: str, num_envs: int, options: RunnerOptions) -> Runner:
    return ProcessesRunner(_block_loop, num_envs, _workers(num_envs, options))
