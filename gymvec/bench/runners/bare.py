"""Framework-free references: how fast this machine steps the sub-envs with nothing between.

* ``bare-loop``: the calling process steps every sub-env in a Python loop and batches the
  results, the way a vectorizer must.
* ``bare-parallel``: the layout gymvec's parallel envs follow, with nothing else in it: the
  calling process steps the first share of the sub-envs, one process
  per other worker steps the rest; numpy views of one ``RawArray``, a semaphore pair per
  worker, and gymvec's own waits (``backends.processes.signals.wait_for``: they spin briefly
  before they block, and stop spinning while spins keep failing, as on a loaded machine), so
  the reference and gymvec wait alike.
* ``bare-free``: ``bare-parallel`` where the calling process waits only for the workers to be
  within ``FREE_LAG`` steps of it. No vectorizer can do that (a step must return that step's
  batch), so it bounds every lock-step layout: what this machine gives the split at all.

All reset a finished sub-env within the step (same-step autoreset), ignore infos, check
nothing and hand out fresh copies of the batch. They are ceilings to read gymvec's figures
against in the same run, not vectorizers: no spaces beyond arrays, no errors beyond not hanging
when a worker dies.

>>> from gymvec.bench.runners.bare import BareLoop
>>> from gymvec.bench.runners import make_env_fns
>>> loop = BareLoop(make_env_fns("CartPole-v1", 4))
>>> loop.reset(seed=0)
>>> obs, rewards, terminated, truncated = loop.step(np.array([0, 1, 0, 1]))
>>> obs.shape, rewards.tolist()
((4, 4), [1.0, 1.0, 1.0, 1.0])
>>> loop.close()
"""

from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Callable, Sequence
from multiprocessing.context import ForkContext, SpawnContext
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import batch_space

from gymvec.backends.processes.executor import ProcessOptions
from gymvec.backends.processes.signals import PeerDied, Spin, wait_for
from gymvec.common.arrays import copy_batch, settle_allocator

FREE_LAG = 8  # bare-free: steps a worker may trail; a timed run of 2000 steps counts <0.5% more
# A worker's words: the last command posted and its argument, the last one finished.
POSTED, COMMAND, SEED, FINISHED = range(4)
STEP, RESET, CLOSE = range(3)
_BLOCK_POLL_S = 1.0  # how often a blocked wait checks that the other side is alive


def fork_or_spawn() -> ForkContext | SpawnContext:
    """The multiprocessing context of the bare references: fork where the platform has it."""
    if "fork" in mp.get_all_start_methods():
        return mp.get_context("fork")
    return mp.get_context("spawn")


class BatchArrays:
    """Named numpy views of one buffer: the batch of observations, actions, rewards and flags,
    and ``num_workers`` rows of int64 words. ``new_buffer(nbytes)`` provides the buffer."""

    # Set in __init__ by name, one view per field.
    words: np.ndarray
    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray

    def __init__(
        self,
        obs: np.ndarray,
        action: np.ndarray,
        num_workers: int,
        new_buffer: Callable[[int], Any] = bytearray,
    ) -> None:
        n = len(obs)
        fields = [
            ("words", np.dtype(np.int64), (num_workers, 4)),
            ("obs", obs.dtype, obs.shape),
            ("actions", action.dtype, action.shape),
            ("rewards", np.dtype(np.float64), (n,)),
            ("terminated", np.dtype(np.bool_), (n,)),
            ("truncated", np.dtype(np.bool_), (n,)),
        ]
        # Each field starts on an 8-byte boundary, so the int64 and float64 views are aligned.
        offsets, nbytes = [], 0
        for _, dtype, shape in fields:
            offsets.append(nbytes)
            nbytes += -(-dtype.itemsize * int(np.prod(shape)) // 8) * 8
        self.buffer = new_buffer(nbytes)
        for (name, dtype, shape), offset in zip(fields, offsets):
            count = int(np.prod(shape))
            view = np.frombuffer(self.buffer, dtype, count, offset).reshape(shape)
            setattr(self, name, view)

    def batch(self, copy: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The last step's observations, rewards and flags: fresh copies (or the views)."""
        if not copy:
            return self.obs, self.rewards, self.terminated, self.truncated
        return self.obs.copy(), self.rewards.copy(), self.terminated.copy(), self.truncated.copy()


class Share:
    """Sub-envs stepping rows ``[start, start + len(envs))`` of the arrays."""

    def __init__(self, envs: Sequence[gym.Env], arrays: BatchArrays, start: int) -> None:
        self.envs = list(envs)
        self.start = start
        self.steps = [env.step for env in envs]
        rows = slice(start, start + len(envs))
        self.actions, self.obs = arrays.actions[rows], arrays.obs[rows]
        self.rewards = arrays.rewards[rows]
        self.terminated, self.truncated = arrays.terminated[rows], arrays.truncated[rows]
        # One np.concatenate into the rows seen as [n * d0, d1, ...] is the quickest way to
        # batch observations of one or more dims.
        self.flat_obs = self.obs.reshape(-1, *self.obs.shape[2:]) if self.obs.ndim > 1 else None

    def reset(self, seed: int) -> None:
        for k, env in enumerate(self.envs):
            self.obs[k], _ = env.reset(seed=seed + self.start + k)

    def step(self) -> None:
        results = [step(action) for step, action in zip(self.steps, self.actions)]
        observations, rewards, terminated, truncated, _ = zip(*results)
        if self.flat_obs is not None:
            np.concatenate(observations, out=self.flat_obs, casting="unsafe")
        else:
            self.obs[:] = observations
        self.rewards[:] = rewards
        self.terminated[:] = terminated
        self.truncated[:] = truncated
        for k in np.flatnonzero(self.terminated | self.truncated):
            self.obs[k], _ = self.envs[k].reset()

    def close(self) -> None:
        for env in self.envs:
            env.close()


class BlockShare:
    """One vector env (a block) stepping rows ``[start, start + num_envs)`` of the arrays in one
    call; it resets its finished rows itself (its own autoreset)."""

    def __init__(self, block: gym.vector.VectorEnv, arrays: BatchArrays, start: int) -> None:
        self.block, self.start = block, start
        rows = slice(start, start + block.num_envs)
        self.actions, self.obs = arrays.actions[rows], arrays.obs[rows]
        self.rewards = arrays.rewards[rows]
        self.terminated, self.truncated = arrays.terminated[rows], arrays.truncated[rows]

    def reset(self, seed: int) -> None:
        self.obs[...], _ = self.block.reset(seed=seed + self.start)

    def step(self) -> None:
        obs, rewards, terminated, truncated, _ = self.block.step(self.actions)
        copy_batch(self.obs, obs)  # (gymvec's own copy: a reference as quick as it can be)
        self.rewards[...] = rewards
        self.terminated[...], self.truncated[...] = terminated, truncated

    def close(self) -> None:
        self.block.close()


def make_share(envs: Sequence[Any], arrays: BatchArrays, start: int) -> Share | BlockShare:
    """The share of ``envs``: single envs, or one block (in a process whose allocator is
    settled, as gymvec's sub-env groups settle theirs: a forked process may not be)."""
    settle_allocator()
    if len(envs) == 1 and isinstance(envs[0], gym.vector.VectorEnv):
        return BlockShare(envs[0], arrays, start)
    return Share(envs, arrays, start)


def _templates(env: Any, num_envs: int) -> tuple[np.ndarray, np.ndarray]:
    """Arrays shaped like a batch of ``env``'s observations and of its actions (a block's:
    of its single spaces)."""
    if isinstance(env, gym.vector.VectorEnv):
        spaces = (env.single_observation_space, env.single_action_space)
    else:
        spaces = (env.observation_space, env.action_space)
    templates = []
    for name, space in zip(("observation", "action"), spaces):
        sample = batch_space(space, num_envs).sample()
        if not isinstance(sample, np.ndarray):
            raise ValueError(
                f"bare runners need array {name}s: expected a Box, Discrete, MultiDiscrete or "
                f"MultiBinary {name} space, got {space}"
            )
        templates.append(sample)
    return templates[0], templates[1]


class WorkerPlace(NamedTuple):
    """What a reference's worker process is given: the factories of its sub-envs, the batch's
    templates, the shared buffer, its first row, the semaphore that wakes it, the one it posts
    its finishes on, and the parent's pid (once that is gone, nobody is left to serve)."""

    env_fns: list[Callable[[], Any]]
    templates: tuple[np.ndarray, np.ndarray]
    buffer: Any
    start: int
    wake: Any
    done: Any
    parent: int

    def arrays(self, word_rows: int) -> BatchArrays:
        """The batch's arrays over the shared buffer, with ``word_rows`` rows of words."""
        return BatchArrays(*self.templates, word_rows, lambda nbytes: self.buffer)

    def parent_alive(self) -> bool:
        return os.getppid() == self.parent


def stop_processes(processes: Sequence[Any]) -> None:
    """Join each process, killing the ones still alive after two seconds."""
    for process in processes:
        process.join(timeout=2.0)
        if process.is_alive():
            process.kill()
            process.join()


def _worker(place: WorkerPlace, num_workers: int, index: int, spin_s: float) -> None:
    arrays = place.arrays(num_workers)
    share = make_share([fn() for fn in place.env_fns], arrays, place.start)
    words = arrays.words[index]
    spin, wake, done = Spin(spin_s), place.wake, place.done
    seq = 0
    while True:
        seq += 1
        try:
            wait_for(words, POSTED, seq, wake, spin, place.parent_alive)
        except PeerDied:  # the parent is gone: nobody left to serve
            break
        command = words[COMMAND]
        if command == CLOSE:
            break
        if command == RESET:
            share.reset(int(words[SEED]))
        else:
            share.step()
        words[FINISHED] = seq
        done.release()
    share.close()


class BareLoop:
    """Every sub-env stepped in one Python loop in the calling process."""

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]]) -> None:
        envs = [fn() for fn in env_fns]
        self.arrays = BatchArrays(*_templates(envs[0], len(envs)), num_workers=0)
        self.share = make_share(envs, self.arrays, 0)

    def reset(self, seed: int) -> None:
        self.share.reset(seed)

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        self.arrays.actions[...] = actions
        self.share.step()
        return self.arrays.batch()

    def close(self) -> None:
        self.share.close()


class BareParallel:
    """The calling process steps the first ``len(env_fns) // num_workers`` sub-envs, each of
    ``num_workers - 1`` processes the next as many.

    With ``lag > 0`` the calling process waits only for the workers to be within ``lag`` steps
    of it, not for the step it posted: each side steps its own sub-envs at its own pace (the
    workers with whatever actions the buffer holds when they get there), so the batch a step
    returns mixes rows of different steps. That is no vectorizer; it measures what the two
    halves give when nothing makes them wait for each other (``bare-free``). With
    ``copy_out=False`` a step returns views of the batch, not copies (the blocks' references:
    gymvec hands their large observations out of a lane, copied in the processes that step
    them).
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], Any]],
        num_workers: int,
        lag: int = 0,
        block_rows: int = 1,
        copy_out: bool = True,
    ) -> None:
        # (with block_rows > 1, each factory builds a vector env of that many rows: one a worker)
        if num_workers < 1 or len(env_fns) % num_workers:
            raise ValueError(
                f"num_workers: expected a divisor of the {len(env_fns)} sub-envs, got {num_workers}"
            )
        per_worker = len(env_fns) // num_workers
        local_envs = [fn() for fn in env_fns[:per_worker]]
        templates = _templates(local_envs[0], len(env_fns) * block_rows)
        ctx = fork_or_spawn()
        self.arrays = BatchArrays(*templates, num_workers, lambda nbytes: ctx.RawArray("b", nbytes))
        self.share = make_share(local_envs, self.arrays, 0)
        self.lag, self.copy_out = lag, copy_out
        self.seq = 0
        self.waited = 0  # the last command whose finish the calling process took
        # gymvec's spins, where gymvec spins: a process a core, on x86 (ProcessOptions)
        worker_spin_s, parent_spin_s = ProcessOptions(local_worker=True).spin_seconds(num_workers)
        self.spin = Spin(parent_spin_s)
        self.workers: list[tuple[Any, Any, Any]] = []  # (process, wake, done)
        ppid = os.getpid()
        try:
            for w in range(1, num_workers):
                wake, done = ctx.Semaphore(0), ctx.Semaphore(0)
                first = w * per_worker
                fns = list(env_fns[first : first + per_worker])
                start = first * block_rows
                place = WorkerPlace(fns, templates, self.arrays.buffer, start, wake, done, ppid)
                args = (place, num_workers, w, worker_spin_s)
                process = ctx.Process(target=_worker, args=args, daemon=True)
                process.start()
                self.workers.append((process, wake, done))
        except BaseException:
            self.close()
            raise

    def _post(self, command: int, seed: int = 0) -> None:
        self.seq += 1
        for w, (_, wake, _) in enumerate(self.workers, start=1):
            words = self.arrays.words[w]
            words[COMMAND], words[SEED], words[POSTED] = command, seed, self.seq
            wake.release()

    def _wait(self, seq: int) -> None:
        """Take the workers' finishes of every command up to ``seq``, waiting for them."""
        for waited in range(self.waited + 1, seq + 1):
            for w, (process, _, done) in enumerate(self.workers, start=1):
                words = self.arrays.words[w]
                try:
                    wait_for(words, FINISHED, waited, done, self.spin, process.is_alive)
                except PeerDied:
                    raise RuntimeError("a worker of a bare-parallel runner is gone") from None
            self.waited = waited

    def reset(self, seed: int) -> None:
        self._wait(self.seq)  # a command word is rewritten only once every step is done
        self._post(RESET, seed)
        self.share.reset(seed)
        self._wait(self.seq)

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        self.arrays.actions[...] = actions
        self._post(STEP)
        self.share.step()
        self._wait(self.seq - self.lag)
        return self.arrays.batch(self.copy_out)

    def _stop_workers(self) -> None:
        # Lagging workers finish their steps before they read CLOSE; with one already gone
        # the wait would only sit out a liveness poll, so the others are stopped below.
        if all(process.is_alive() for process, _, _ in self.workers):
            try:
                self._wait(self.seq)
            except RuntimeError:  # one died meanwhile
                pass
        if any(process.is_alive() for process, _, _ in self.workers):
            self._post(CLOSE)
        stop_processes([process for process, _, _ in self.workers])
        self.workers = []

    def close(self) -> None:
        self._stop_workers()
        self.share.close()
