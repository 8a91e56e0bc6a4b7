"""``bare-first-ready``: first-ready batches with nothing else in them, the reference for
gymvec's first-ready runner in the same run.

One process per sub-env (the latency case's layout), numpy views of one ``RawArray`` as in
``bench.bare``, a wake-up semaphore per sub-env and one ``ready`` semaphore that every finished
sub-env posts. ``send(actions, env_ids)`` writes the actions and posts those sub-envs;
``recv()`` returns the first ``batch_size`` sub-envs to finish (in index order). Like the other
bare runners it resets a finished sub-env within its step, ignores infos, checks nothing, and
does not hang when a process dies; it is a ceiling, not a vectorizer.

>>> from gymvec.bench.bare_first_ready import BareFirstReady
>>> from gymvec.bench.runners import make_env_fns
>>> pool = BareFirstReady(make_env_fns("CartPole-v1", 4), batch_size=2)
>>> pool.reset(seed=0)
>>> ids, obs, rewards, terminated, truncated = pool.recv()
>>> len(ids), obs.shape
(2, (2, 4))
>>> pool.send(np.array([0, 1]), ids)
>>> len(pool.recv()[0])
2
>>> pool.close()
"""

from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from gymvec.bench.bare import COMMAND, FINISHED, POSTED, RESET, SEED, STEP, BatchArrays, _templates

CLOSE = -1
_POLL_S = 1.0  # how often a blocked wait checks that the other side is alive


def _serve(
    env_fn: Callable[[], gym.Env],
    templates: tuple[np.ndarray, np.ndarray],
    buffer: Any,
    index: int,
    wake: Any,
    ready: Any,
    parent: int,
) -> None:
    """One sub-env's process: each post of ``wake`` runs the command in its words."""
    arrays = BatchArrays(*templates, len(templates[0]), lambda nbytes: buffer)
    env = env_fn()
    words = arrays.words[index]
    while True:
        while not wake.acquire(timeout=_POLL_S):
            if os.getppid() != parent:  # the parent is gone: nobody left to serve
                env.close()
                return
        command = int(words[COMMAND])
        if command == CLOSE:
            break
        if command == RESET:
            arrays.obs[index], _ = env.reset(seed=int(words[SEED]))
        else:
            obs, reward, terminated, truncated, _ = env.step(arrays.actions[index])
            if terminated or truncated:
                obs, _ = env.reset()
            arrays.obs[index] = obs
            arrays.rewards[index] = reward
            arrays.terminated[index], arrays.truncated[index] = terminated, truncated
        words[FINISHED] = words[POSTED]
        ready.release()
    env.close()


class BareFirstReady:
    """``len(env_fns)`` processes, one sub-env each; batches of the first ``batch_size`` to
    finish."""

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]], batch_size: int) -> None:
        n = len(env_fns)
        if not 1 <= batch_size <= n:
            raise ValueError(f"batch_size: expected 1 to {n}, got {batch_size}")
        self.batch_size = batch_size
        probe = env_fns[0]()
        templates = _templates(probe, n)
        probe.close()
        ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
        self.arrays = BatchArrays(*templates, n, lambda nbytes: ctx.RawArray("b", nbytes))
        self.ready = ctx.Semaphore(0)
        self.flying: list[int] = []  # sub-envs posted and not yet taken back
        self.seq = 0
        self.workers: list[tuple[Any, Any]] = []  # (process, wake) per sub-env
        try:
            for i, fn in enumerate(env_fns):
                wake = ctx.Semaphore(0)
                args = (fn, templates, self.arrays.buffer, i, wake, self.ready, os.getpid())
                process = ctx.Process(target=_serve, args=args, daemon=True)
                process.start()
                self.workers.append((process, wake))
        except BaseException:
            self.close()
            raise

    def _post(self, ids: Sequence[int], command: int, seed: int = 0) -> None:
        words = self.arrays.words
        for i in ids:
            self.seq += 1
            words[i, COMMAND], words[i, SEED], words[i, POSTED] = command, seed + i, self.seq
            self.workers[i][1].release()
        self.flying += ids

    def reset(self, seed: int) -> None:
        """Reset every sub-env (none may be in flight); ``recv`` takes them back."""
        self._post(list(range(len(self.workers))), RESET, seed)

    def send(self, actions: np.ndarray, env_ids: np.ndarray) -> None:
        """Step the sub-envs ``env_ids`` (taken back by the last ``recv``) with ``actions``."""
        ids = env_ids.tolist()
        self.arrays.actions[ids] = actions
        self._post(ids, STEP)

    def recv(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The first ``batch_size`` sub-envs in flight to finish: their ids, observations,
        rewards and flags (copies)."""
        words = self.arrays.words
        while True:
            done = [i for i in self.flying if words[i, FINISHED] == words[i, POSTED]]
            if len(done) >= self.batch_size:
                break
            # A post is only a wake-up: the words say who finished.
            while not self.ready.acquire(timeout=_POLL_S):
                if not all(process.is_alive() for process, _ in self.workers):
                    raise RuntimeError("a process of a bare-first-ready runner is gone")
        ids = done[: self.batch_size]
        taken = set(ids)
        self.flying = [i for i in self.flying if i not in taken]
        a = self.arrays
        return np.array(ids), a.obs[ids], a.rewards[ids], a.terminated[ids], a.truncated[ids]

    def close(self) -> None:
        for i, (process, wake) in enumerate(self.workers):
            if process.is_alive():  # (after the command in hand, if any)
                self.arrays.words[i, COMMAND] = CLOSE
                wake.release()
        for process, _ in self.workers:
            process.join(timeout=2.0)
            if process.is_alive():
                process.kill()
                process.join()
        self.workers = []
