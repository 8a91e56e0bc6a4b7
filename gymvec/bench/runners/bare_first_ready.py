"""``bare-first-ready``: first-ready batches with nothing else in them, the reference for
gymvec's first-ready runner in the same run.

``num_workers`` processes, each holding an even share of the sub-envs (the case's layout), numpy
views of one ``RawArray`` as in ``runners.bare``, a wake-up semaphore per process and one
``ready`` semaphore that every finished sub-env posts. ``send(actions, env_ids)`` writes the
actions and a sequence number per sub-env and wakes the processes that hold them, which run
their pending sub-envs one at a time in the order sent; ``recv()`` returns the first
``batch_size`` sub-envs to finish (in index order). Like the other
bare runners it resets a finished sub-env within its step, ignores infos, checks nothing, and
does not hang when a process dies; it is a ceiling, not a vectorizer.

>>> from gymvec.bench.runners.bare_first_ready import BareFirstReady
>>> from gymvec.bench.runners import make_env_fns
>>> pool = BareFirstReady(make_env_fns("CartPole-v1", 4), batch_size=2, num_workers=2)
>>> pool.async_reset(seed=0)
>>> ids, obs, rewards, terminated, truncated = pool.recv()
>>> len(ids), obs.shape
(2, (2, 4))
>>> pool.send(np.array([0, 1]), ids)
>>> len(pool.recv()[0])
2
>>> pool.close()
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from gymvec.bench.runners.bare import (
    _BLOCK_POLL_S,
    COMMAND,
    FINISHED,
    POSTED,
    RESET,
    SEED,
    STEP,
    BatchArrays,
    WorkerPlace,
    _templates,
    fork_or_spawn,
    stop_processes,
)

CLOSE = -1


def _serve(place: WorkerPlace) -> None:
    """One process's share, rows ``[start, start + len(env_fns))``: after each wake-up it runs
    its pending sub-envs (posted, not finished), the first posted first, until none is."""
    arrays = place.arrays(len(place.templates[0]))  # words: one row per sub-env
    envs = [fn() for fn in place.env_fns]
    words, start, ready = arrays.words, place.start, place.done
    rows = range(start, start + len(envs))
    try:
        while True:
            while not place.wake.acquire(timeout=_BLOCK_POLL_S):
                if not place.parent_alive():
                    return
            while True:
                pending = [i for i in rows if words[i, FINISHED] != words[i, POSTED]]
                if not pending:
                    break
                i = min(pending, key=lambda i: words[i, POSTED])
                command, env = int(words[i, COMMAND]), envs[i - start]
                if command == CLOSE:
                    return
                if command == RESET:
                    arrays.obs[i], _ = env.reset(seed=int(words[i, SEED]))
                else:
                    obs, reward, terminated, truncated, _ = env.step(arrays.actions[i])
                    if terminated or truncated:
                        obs, _ = env.reset()
                    arrays.obs[i] = obs
                    arrays.rewards[i] = reward
                    arrays.terminated[i], arrays.truncated[i] = terminated, truncated
                words[i, FINISHED] = words[i, POSTED]
                ready.release()
    finally:
        for env in envs:
            env.close()


class BareFirstReady:
    """``num_workers`` processes (default: one per sub-env) holding the sub-envs; batches of
    the first ``batch_size`` to finish."""

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        batch_size: int,
        num_workers: int | None = None,
    ) -> None:
        n = len(env_fns)
        if not 1 <= batch_size <= n:
            raise ValueError(f"batch_size: expected 1 to {n}, got {batch_size}")
        num_workers = n if num_workers is None else num_workers
        if num_workers < 1 or n % num_workers:
            raise ValueError(
                f"num_workers: expected a divisor of the {n} sub-envs, got {num_workers}"
            )
        self.batch_size = batch_size
        probe = env_fns[0]()
        templates = _templates(probe, n)
        probe.close()
        ctx = fork_or_spawn()
        self.arrays = BatchArrays(*templates, n, lambda nbytes: ctx.RawArray("b", nbytes))
        self.ready = ctx.Semaphore(0)
        self.flying: list[int] = []  # sub-envs posted and not yet taken back
        self.seq = 0
        self.workers: list[tuple[Any, Any]] = []  # (process, wake) per worker
        self.share = n // num_workers
        buffer, ppid = self.arrays.buffer, os.getpid()
        try:
            for start in range(0, n, self.share):
                wake = ctx.Semaphore(0)
                fns = list(env_fns[start : start + self.share])
                place = WorkerPlace(fns, templates, buffer, start, wake, self.ready, ppid)
                process = ctx.Process(target=_serve, args=(place,), daemon=True)
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
        for w in sorted({i // self.share for i in ids}):  # after every row: one wake-up each
            self.workers[w][1].release()
        self.flying += ids

    def async_reset(self, seed: int) -> None:
        """Reset every sub-env (none may be in flight); ``recv`` takes them back."""
        self._post(list(range(len(self.arrays.obs))), RESET, seed)

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
            while not self.ready.acquire(timeout=_BLOCK_POLL_S):
                if not all(process.is_alive() for process, _ in self.workers):
                    raise RuntimeError("a process of a bare-first-ready runner is gone")
        ids = done[: self.batch_size]
        taken = set(ids)
        self.flying = [i for i in self.flying if i not in taken]
        a = self.arrays
        return np.array(ids), a.obs[ids], a.rewards[ids], a.terminated[ids], a.truncated[ids]

    def close(self) -> None:
        words = self.arrays.words
        for w, (process, wake) in enumerate(self.workers):
            if process.is_alive():  # (after the sub-env in hand, if any)
                i = w * self.share
                self.seq += 1
                words[i, COMMAND], words[i, POSTED] = CLOSE, self.seq
                wake.release()
        stop_processes([process for process, _ in self.workers])
        self.workers = []
