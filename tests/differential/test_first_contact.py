"""First contact: building touches no sub-env, hangs end in TimeoutError, close() is quick
after them, a script without the main guard gets one clear error, the README runs as
scripts, workers print no registry warnings, and gymnasium.make_vec hints at
register_vector_ids."""

from __future__ import annotations

import ast
import functools
import importlib.util
import multiprocessing
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import _contact_envs
import gymnasium as gym
import numpy as np
import pytest
from _contact_envs import HangingEnv, LoggingEnv, read_log
from gymnasium.vector import AutoresetMode, SyncVectorEnv

import gymvec
from gymvec import ParallelEnv, ParallelVectorEnv, SerialEnv, SerialVectorEnv, SubEnvTimeoutError

REPO = Path(__file__).resolve().parents[2]
TESTS = Path(__file__).resolve().parents[1]
FORK = {"context": "fork"}


def script_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(TESTS), env.get("PYTHONPATH", "")])
    return env


def run_script(path: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(path)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=script_env(),
        cwd=path.parent,
    )


# ---- 1. building resets and steps nothing -------------------------------------------------------
def _builders(log: str):
    fns = [functools.partial(LoggingEnv, log) for _ in range(4)]
    return {
        "SerialVectorEnv": lambda: SerialVectorEnv(fns),
        "ParallelVectorEnv": lambda: ParallelVectorEnv(fns, num_workers=2, **FORK),
        "ParallelVectorEnv-one-per-worker": lambda: ParallelVectorEnv(
            fns, num_workers=4, local_worker=False, **FORK
        ),
        "ParallelVectorEnv-spawn": lambda: ParallelVectorEnv(
            [functools.partial(LoggingEnv, log)] * 4, num_workers=2, context="spawn"
        ),
        "make_vec": lambda: gymvec.make_vec(
            _contact_envs.LOGGING_ID,
            4,
            backend="parallel",
            num_workers=2,
            context="fork",
            log=log,
        ),  # fmt: skip
        "SerialEnv": lambda: SerialEnv(4, functools.partial(LoggingEnv, log)),
        "ParallelEnv": lambda: ParallelEnv(
            2, functools.partial(LoggingEnv, log), envs_per_worker=2, mp_start_method="fork"
        ),
    }


@pytest.mark.parametrize("builder", list(_builders("")))
def test_building_resets_and_steps_no_sub_env(builder, tmp_path, no_leaks):
    log = str(tmp_path / "calls.log")
    envs = _builders(log)[builder]()
    try:
        assert envs.engine.executor is not None  # every sub-env built (it starts on first use)
        calls = read_log(log)
        inits = [pid for what, pid in calls if what == "init"]
        assert [what for what, _ in calls if what != "init"] == []  # no reset, no step
        assert 4 <= len(inits) <= 5  # each sub-env once, plus one for the spaces at most
    finally:
        envs.close()


@pytest.mark.parametrize("mode", list(AutoresetMode))
@pytest.mark.parametrize("parallel", [False, True])
def test_infos_learnt_from_the_first_results_equal_sync_vector_env(mode, parallel, tmp_path):
    """Info fields come from the sub-envs' own first reset and step; before and after, the
    infos are gymnasium's, in every autoreset mode."""
    log = str(tmp_path / "log")
    fns = [functools.partial(LoggingEnv, log, episode_steps=3 + i % 2) for i in range(3)]
    ref = SyncVectorEnv(fns, autoreset_mode=mode)
    if parallel:
        envs = ParallelVectorEnv(fns, num_workers=2, autoreset_mode=mode, **FORK)
    else:
        envs = SerialVectorEnv(fns, autoreset_mode=mode)
    try:
        assert list(envs.engine.layout.info_fields) == []
        _assert_infos_equal(envs.reset(seed=3)[1], ref.reset(seed=3)[1])
        for t in range(12):
            actions = np.array([t % 2, 1, 0])
            got, want = envs.step(actions), ref.step(actions)
            np.testing.assert_array_equal(got[0], want[0])
            _assert_infos_equal(got[4], want[4])
            done = want[2] | want[3]
            if mode == AutoresetMode.DISABLED and done.any():
                options = {"reset_mask": done}
                _assert_infos_equal(envs.reset(options=options)[1], ref.reset(options=options)[1])
        # the numeric entries got fields (no pickling per step), the string stays an extra
        assert set(envs.engine.layout.info_fields) == {"steps", "energy"}
        if mode != AutoresetMode.DISABLED:
            envs.step_send(np.ones(3, dtype=np.int64))
            received = envs.receive()
            assert {key for e in received.extras.values() for key in e.next} == {"phase"}
            envs.finish(received)
    finally:
        envs.close()
        ref.close()


def _assert_infos_equal(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for key, value in want.items():
        if isinstance(value, dict):
            _assert_infos_equal(got[key], value)
            continue
        assert got[key].dtype == value.dtype, key
        if value.dtype == object:
            for a, b in zip(got[key], value):
                if isinstance(b, dict):
                    _assert_infos_equal(a, b)
                elif isinstance(b, np.ndarray):
                    np.testing.assert_array_equal(a, b)
                else:
                    assert a == b, key
        else:
            np.testing.assert_array_equal(got[key], value, err_msg=key)


# ---- 2, 3. hangs end in TimeoutError, close() is quick after them -------------------------------
TIMEOUT = 2.0
SLACK = 3.0  # a loaded 2-core machine


def _hanging_fns(index: int, hang: str = "step") -> list:
    return [functools.partial(HangingEnv, hang if i == index else None) for i in range(4)]


def _assert_closes_quickly(envs, **kwargs) -> None:
    """``envs.close(**kwargs)`` returns within SLACK s (run in a thread: a close that hangs
    fails the test instead of hanging it)."""
    closer = threading.Thread(target=envs.close, kwargs=kwargs, daemon=True)
    start = time.monotonic()
    closer.start()
    closer.join(SLACK + 5)
    assert not closer.is_alive(), "close() hangs"
    assert time.monotonic() - start < SLACK


@pytest.mark.parametrize("index, worker", [(0, 0), (3, 1)])
def test_face_step_hang_times_out(index, worker, no_leaks):
    envs = ParallelVectorEnv(_hanging_fns(index), num_workers=2, timeout=TIMEOUT, **FORK)
    try:
        assert envs.engine.local_envs() == []  # with a timeout, no sub-env runs here
        envs.reset(seed=0)
        start = time.monotonic()
        with pytest.raises(TimeoutError) as info:
            envs.step(np.zeros(4, dtype=np.int64))
        assert TIMEOUT <= time.monotonic() - start < TIMEOUT + SLACK
        rows = "0, 1" if worker == 0 else "2, 3"
        assert f"sub-envs {rows} (worker {worker}, pid" in str(info.value)
        assert isinstance(info.value, multiprocessing.TimeoutError)  # gymnasium's class too
        assert [busy[0] for busy in info.value.busy] == [worker]
        with pytest.raises(RuntimeError, match="timed out.*close"):
            envs.step(np.zeros(4, dtype=np.int64))
    finally:
        _assert_closes_quickly(envs)


def test_face_reset_hang_times_out_through_make_vec(no_leaks):
    gym.register("GymvecContact/HangReset-v0", entry_point=HangingEnv, kwargs={"hang": "reset"})
    try:
        envs = gymvec.make_vec("GymvecContact/HangReset-v0", 2, timeout=TIMEOUT, context="fork")
        start = time.monotonic()
        with pytest.raises(SubEnvTimeoutError, match=r"reset .*sub-envs 0 \(worker 0"):
            envs.reset()
        assert time.monotonic() - start < TIMEOUT + SLACK
        _assert_closes_quickly(envs)
    finally:
        del gym.registry["GymvecContact/HangReset-v0"]


@pytest.mark.parametrize("index, worker", [(0, 0), (3, 1)])
def test_tensordict_step_hang_times_out(index, worker, no_leaks):
    fns = _hanging_fns(index)
    env = ParallelEnv(2, fns, envs_per_worker=2, timeout=TIMEOUT, mp_start_method="fork")
    try:
        td = env.reset()
        start = time.monotonic()
        with pytest.raises(TimeoutError, match=f"step did not finish .*worker {worker}, pid"):
            env.step_and_maybe_reset(env.rand_action(td))
        assert time.monotonic() - start < TIMEOUT + SLACK
        with pytest.raises(RuntimeError, match="timed out"):
            env.reset()
    finally:
        _assert_closes_quickly(env)


def test_a_timeout_rules_out_local_worker():
    with pytest.raises(ValueError, match="local_worker"):
        ParallelVectorEnv(_hanging_fns(-1), num_workers=2, local_worker=True, timeout=1.0)
    with pytest.raises(ValueError, match="timeout"):
        ParallelVectorEnv(_hanging_fns(-1), num_workers=2, timeout=-1)


@pytest.mark.parametrize("how", ["close", "terminate", "timeout"])
def test_close_after_a_wait_timed_out_is_quick(how, no_leaks):
    """gymnasium's own timeouts (step_wait(timeout)), then close() in its three ways."""
    envs = ParallelVectorEnv(_hanging_fns(3), num_workers=2, local_worker=False, **FORK)
    envs.reset(seed=0)
    envs.step_async(np.zeros(4, dtype=np.int64))
    with pytest.raises(multiprocessing.TimeoutError):
        envs.step_wait(timeout=0.5)
    kwargs = {"close": {}, "terminate": {"terminate": True}, "timeout": {"timeout": 1}}[how]
    _assert_closes_quickly(envs, **kwargs)


def test_close_with_a_hung_call_in_flight_is_quick(no_leaks):
    envs = ParallelVectorEnv(_hanging_fns(1), num_workers=2, local_worker=False, **FORK)
    envs.reset(seed=0)
    envs.step_async(np.zeros(4, dtype=np.int64))
    time.sleep(0.2)
    _assert_closes_quickly(envs, terminate=True)


# ---- 4. a script without the main guard ---------------------------------------------------------
def test_script_without_main_guard_gets_one_clear_error(tmp_path):
    script = tmp_path / "no_guard.py"
    script.write_text(
        textwrap.dedent(
            """
            import gymnasium as gym
            import gymvec

            envs = gymvec.ParallelVectorEnv(
                [lambda: gym.make("CartPole-v1")] * 2, num_workers=2, context="spawn"
            )
            envs.reset(seed=0)
            envs.close()
            """
        )
    )
    result = run_script(script)
    assert result.returncode != 0
    err = result.stderr
    assert "MainModuleError" in err
    assert 'if __name__ == "__main__":' in err
    assert str(script) in err
    assert "bootstrapping phase" not in err  # no multiprocessing traceback from the workers
    assert len(err.splitlines()) < 40, err


# ---- the README's snippets, as scripts -----------------------------------------------------------
def _readme_blocks() -> list[str]:
    text = (REPO / "README.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


@pytest.fixture(scope="module")
def readme_runs(tmp_path_factory) -> list[subprocess.Popen]:
    """Every README python block, written to a file and started as a script, all at once
    (most of their time goes to imports, which overlap where there are cores)."""
    folder = tmp_path_factory.mktemp("readme")
    runs = []
    for k, block in enumerate(_readme_blocks()):
        script = folder / f"readme_{k}.py"
        script.write_text(block)
        runs.append(
            subprocess.Popen(
                [sys.executable, str(script)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                env=script_env(),
                cwd=folder,
            )
        )
    yield runs
    for run in runs:
        if run.poll() is None:
            run.kill()
            run.wait()


def test_readme_has_python_blocks():
    assert len(_readme_blocks()) >= 3


OPTIONAL_EXTRAS = ("torchrl", "stable_baselines3", "ray")  # gymvec's extras, not its needs


def _missing_extras(block: str) -> list[str]:
    """The optional extras a block imports that are not installed here."""
    modules = set()
    for node in ast.walk(ast.parse(block)):
        if isinstance(node, ast.Import):
            modules.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module.split(".")[0])
    return [m for m in OPTIONAL_EXTRAS if m in modules and importlib.util.find_spec(m) is None]


@pytest.mark.parametrize("k", range(len(_readme_blocks())))
def test_readme_block_runs_as_a_script(k, readme_runs):
    missing = _missing_extras(_readme_blocks()[k])
    if missing:
        readme_runs[k].kill()
        readme_runs[k].wait()
        pytest.skip(f"the block needs the optional extra(s) {missing}, not installed here")
    try:
        _, err = readme_runs[k].communicate(timeout=400)
    except subprocess.TimeoutExpired:
        readme_runs[k].kill()
        raise
    assert readme_runs[k].returncode == 0, err[-3000:]


# ---- 5. no registry warnings from workers ------------------------------------------------------
def test_workers_print_no_registry_warnings(tmp_path):
    """The package registers its id at import; the script imports it inside main() (a run
    time registration here), and spawned workers import it again through the entry point."""
    script = tmp_path / "register_in_main.py"
    script.write_text(
        textwrap.dedent(
            """
            import gymnasium as gym
            import gymvec


            def main():
                import _contact_pkg  # registers GymvecContact/Pkg-v0 now, in the parent

                envs = gymvec.make_vec("GymvecContact/Pkg-v0", 2, num_workers=2, context="spawn")
                obs, _ = envs.reset(seed=0)
                assert obs.shape == (2, 2)
                envs.step(envs.action_space.sample())
                print("workers:", envs.call("origin"))
                envs.close()


            if __name__ == "__main__":
                main()
            """
        )
    )
    result = run_script(script)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "already in registry" not in result.stderr, result.stderr
    # the result is as before: the package's own registration, done in each worker
    assert "workers: ('import', 'import')" in result.stdout


# ---- 6. gymnasium.make_vec for an id registered after gymvec ------------------------------------
def test_gymnasium_make_vec_finds_an_id_registered_after_gymvec():
    gym.register("GymvecLate/Late-v0", entry_point=HangingEnv, kwargs={"after": 5})
    try:
        # no register_vector_ids() needed: the derived id is registered when looked up
        envs = gym.make_vec("gymvec:gymvec-GymvecLate/Late-v0", num_envs=2, backend="serial")
        assert envs.reset(seed=0)[0].shape == (2, 2)
        envs.close()
        assert gym.spec("gymvec-GymvecLate/Late-v0").kwargs == {"after": 5}
    finally:
        for env_id in ("GymvecLate/Late-v0", "gymvec-GymvecLate/Late-v0"):
            gym.registry.pop(env_id, None)
