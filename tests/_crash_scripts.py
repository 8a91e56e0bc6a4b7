"""Scripts that test_crash.py runs in a process of their own: ``python _crash_scripts.py
NAME ARGS...``. Each prints one JSON line for the test to read."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _crash_envs  # noqa: E402

# gymvec is imported inside each script: spawned workers import this module again, and
# `from gymvec import ParallelEnv` would make each of them import torch (seconds).


def interrupts(start: str, rounds: int, mode: str) -> None:
    """Interrupts into steps whose replies are 20 MB; after each, reset() (or, where the
    interrupt had to stop a worker, a new env). ``mode`` "timer": SIGINT from a timer thread
    at small, varying delays (anywhere: the wait, the reading of the replies, the face's
    work); "cut": a KeyboardInterrupt raised only while a reply is being read, the case that
    used to poison the pipe."""
    from gymvec import ParallelVectorEnv, WorkerError

    def build() -> ParallelVectorEnv:
        fns = [lambda: _crash_envs.make(big_info=True)] * 2
        return ParallelVectorEnv(fns, context=start, num_workers=2, timeout=5)

    def cut_reply(signum, frame) -> None:
        while frame is not None:
            if frame.f_code.co_name in ("_recv", "_recv_bytes"):
                signal.setitimer(signal.ITIMER_REAL, 0)
                raise KeyboardInterrupt
            frame = frame.f_back

    signal.signal(signal.SIGALRM, cut_reply)
    envs = build()
    envs.reset(seed=0)
    counts = {"rounds": 0, "reset": 0, "rebuilt": 0}
    slowest = 0.0
    actions = np.zeros(2, dtype=np.int64)
    began = time.monotonic()
    for _ in range(3):
        envs.step(actions)
    step_s = (time.monotonic() - began) / 3
    for r in range(rounds):
        # from 2% to 200% of a step, in a scattered order
        delay = step_s * (1 + r * 37 % 100) / 50
        timer = threading.Timer(delay, os.kill, (os.getpid(), signal.SIGINT))
        try:
            if mode == "timer":
                timer.start()
            else:  # look every millisecond whether a reply is being read
                signal.setitimer(signal.ITIMER_REAL, 0.001, 0.001)
            while True:
                envs.step(actions)
        except KeyboardInterrupt:
            pass
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            if timer.is_alive() or mode == "timer":
                timer.join()
        began = time.monotonic()
        try:
            envs.reset(seed=r)
            counts["reset"] += 1
        except WorkerError as exc:  # the interrupt cut a reply: that worker was stopped
            if "was stopped" not in str(exc):
                raise
            stopped = True
        else:
            stopped = False
        slowest = max(slowest, time.monotonic() - began)  # the reset: done or refused
        if stopped:
            envs.close()
            envs = build()
            envs.reset(seed=r)
            counts["rebuilt"] += 1
        counts["rounds"] += 1
    began = time.monotonic()
    envs.close()
    print(json.dumps(dict(counts, slowest_s=slowest, close_s=time.monotonic() - began)))


def parent_dies(start: str, doing: str) -> None:
    """Build an env, leave its workers ``doing`` something ("idle", "write": sending a 20 MB
    reply nobody reads, "hang": in an endless step), print the pids, then wait to be
    killed."""
    from gymvec import ParallelEnv

    kwargs = {"idle": {}, "write": {"big_info": True}, "hang": {"step_s": 600.0}}[doing]
    env = ParallelEnv(
        2,
        _crash_envs.make,
        create_env_kwargs=kwargs,
        mp_start_method=start,
        memmap=True,
        daemon=doing == "idle",
    )
    env.reset()
    if doing != "idle":
        env.buffers.action[("action",)][:] = 0
        env.engine.step_send()
        time.sleep(0.5)  # the workers are in the step, or writing its reply
    pids = [handle.process.pid for handle in env.engine.executor.handles]
    server = None
    if start == "forkserver":
        server = multiprocessing.forkserver._forkserver._forkserver_pid
    paths = [memory.path for memory in env.engine.backend.memmaps]
    executor = env.engine.executor
    semaphores = [executor.ready] + [h.wake for h in executor.handles]
    semaphores += [h.done for h in executor.handles]
    # the /dev/shm entries of the named semaphores (spawn and forkserver name them)
    names = [s._semlock.name for s in semaphores if s._semlock.name is not None]
    paths += [f"/dev/shm/sem.{name.lstrip('/')}" for name in names]
    print(json.dumps({"workers": pids, "forkserver": server, "files": paths}), flush=True)
    time.sleep(600)


def raw_fork(start: str) -> None:
    """A plain os.fork() child that exits normally (atexit handlers run) must leave the
    parent's workers alone."""
    from gymvec import ParallelVectorEnv

    envs = ParallelVectorEnv(
        [_crash_envs.make] * 2, context=start, num_workers=2, daemon=True, local_worker=False
    )
    envs.reset(seed=0)
    pid = os.fork()
    if pid == 0:
        return  # the child exits through the interpreter's normal shutdown
    os.waitpid(pid, 0)
    time.sleep(0.2)
    alive = [handle.process.is_alive() for handle in envs.engine.executor.handles]
    envs.step(np.zeros(2, dtype=np.int64))
    envs.close()
    print(json.dumps({"alive": alive}))


def hanging_factory(start: str, timeout: float) -> None:
    """A factory that hangs in its worker: the drop-in's timeout bounds construction."""
    from gymvec import ParallelVectorEnv

    fns = [_crash_envs.make, lambda: _crash_envs.make(factory_s=60.0)]
    began = time.monotonic()
    try:
        ParallelVectorEnv(fns, context=start, num_workers=2, timeout=timeout).reset()
        error = None
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    print(json.dumps({"error": error, "seconds": time.monotonic() - began}))


def stopped_forkserver() -> None:
    """close() while the forkserver, which owes the parent its workers' exit codes, is
    stopped (SIGSTOP): every wait of close() is bounded all the same."""
    from gymvec import ParallelEnv

    env = ParallelEnv(2, _crash_envs.make, mp_start_method="forkserver")
    env.reset()
    server = multiprocessing.forkserver._forkserver._forkserver_pid
    pids = [handle.process.pid for handle in env.engine.executor.handles]
    os.kill(server, signal.SIGSTOP)
    try:
        seconds = _seconds(env.close)
    finally:
        os.kill(server, signal.SIGCONT)
    print(json.dumps({"seconds": seconds, "workers": pids}))


def _seconds(fn, *exceptions) -> float:
    began = time.monotonic()
    try:
        fn()
    except exceptions:
        pass
    return round(time.monotonic() - began, 2)


def _parent_death_s(start: str, doing: str) -> float:
    """Seconds from the parent's SIGKILL until its workers (and forkserver) are gone."""
    import subprocess

    parent = subprocess.Popen(
        [sys.executable, __file__, "parent_dies", start, doing], stdout=subprocess.PIPE, text=True
    )
    started = json.loads(parent.stdout.readline())
    pids = [pid for pid in started["workers"] + [started["forkserver"]] if pid]
    parent.kill()
    began = time.monotonic()
    parent.wait()
    parent.stdout.close()

    def running(pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/status") as status:
                return "\nState:\tZ" not in status.read()
        except FileNotFoundError:
            return False

    while any(running(pid) for pid in pids) and time.monotonic() - began < 30:
        time.sleep(0.01)
    for pid in [pid for pid in pids if running(pid)]:
        os.kill(pid, signal.SIGKILL)
    return round(time.monotonic() - began, 2)


def bounds(start: str) -> None:
    """The figures of docs/troubleshooting.md's table, measured (seconds)."""
    from gymvec import ParallelEnv, ParallelVectorEnv, WorkerError

    zeros = np.zeros(2, dtype=np.int64)
    figures: dict = {}

    def vector(timeout=None, **kwargs) -> ParallelVectorEnv:
        envs = ParallelVectorEnv(
            [lambda: _crash_envs.make(**kwargs)] * 2,
            context=start,
            num_workers=2,
            local_worker=False,
            timeout=timeout,
        )
        envs.reset(seed=0)
        return envs

    # Ctrl-C while the workers step: how long until reset() has recovered
    envs = vector(step_s=1.0)
    timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    figures["ctrl_c_step_raises"] = _seconds(lambda: envs.step(zeros), KeyboardInterrupt) - 0.2
    timer.join()
    figures["ctrl_c_then_reset"] = _seconds(lambda: envs.reset(seed=0))
    envs.close()
    # a worker killed while the parent waits for it
    envs = vector(step_s=1.0)
    pid = envs.engine.executor.handles[0].process.pid
    threading.Timer(0.2, os.kill, (pid, signal.SIGKILL)).start()
    figures["worker_killed_raises"] = _seconds(lambda: envs.step(zeros), WorkerError) - 0.2
    figures["worker_killed_close"] = _seconds(envs.close)
    # a sub-env that hangs in step, with timeout=1; then close()
    envs = vector(timeout=1.0, step_s=600.0)
    figures["step_hangs_raises"] = _seconds(lambda: envs.step(zeros), TimeoutError)
    figures["step_hangs_close"] = _seconds(envs.close)
    # a sub-env that hangs in close (every worker's), 2 workers
    envs = vector(close_s=600.0)
    figures["close_hangs_close"] = _seconds(envs.close)
    # a factory that hangs in its worker: drop-in timeout=2, ParallelEnv startup_timeout=2
    fns = [_crash_envs.make, lambda: _crash_envs.make(factory_s=60.0)]
    figures["factory_hangs_dropin"] = _seconds(
        lambda: ParallelVectorEnv(fns, context=start, num_workers=2, timeout=2).reset(),
        TimeoutError,
    )
    figures["factory_hangs_startup_timeout"] = _seconds(
        lambda: ParallelEnv(
            2,
            _crash_envs.make,
            create_env_kwargs={"factory_s": 600.0},
            mp_start_method=start,
            startup_timeout=2,
        ).reset(),
        TimeoutError,
    )
    for doing in ("idle", "write", "hang"):
        figures[f"parent_killed_{doing}"] = _parent_death_s(start, doing)
    print(json.dumps({"start": start, **figures}))


if __name__ == "__main__":
    name, *args = sys.argv[1:]
    scripts = {
        "interrupts": lambda: interrupts(args[0], int(args[1]), args[2]),
        "parent_dies": lambda: parent_dies(args[0], args[1]),
        "raw_fork": lambda: raw_fork(args[0]),
        "hanging_factory": lambda: hanging_factory(args[0], float(args[1])),
        "bounds": lambda: bounds(args[0]),
        "stopped_forkserver": stopped_forkserver,
    }
    scripts[name]()
