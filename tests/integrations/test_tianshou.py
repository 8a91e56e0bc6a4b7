"""gymvec.tianshou: tianshou's vector-env contract, checked against tianshou's DummyVectorEnv.

Needs tianshou 2.x (``pip install -e ".[tianshou]"``; .ci/run's full-extras venv has it): the tests
that use it are skipped without it, but for the ImportError test, which runs anyway.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import _envs
import gymnasium as gym
import numpy as np
import pytest

from gymvec.bench.resources import child_pids

# tianshou's replay buffers compile numba functions at first use (half a minute and more here);
# the tests' small collections run as fast without: set before tianshou imports numba.
os.environ.setdefault("NUMBA_DISABLE_JIT", "1")
needs_tianshou = pytest.mark.skipif(
    importlib.util.find_spec("tianshou") is None,
    reason="tianshou is not installed (pip install gymvec[tianshou])",
)
DOCS = Path(__file__).resolve().parents[2] / "docs" / "integrations.md"
BUFFER_KEYS = ("obs", "act", "rew", "terminated", "truncated", "obs_next")


def test_import_error_says_how_to_install():
    """Without tianshou, importing gymvec.tianshou says what to install (run in a fresh
    interpreter where tianshou cannot be imported, whether it is installed or not)."""
    code = (
        "import sys; sys.modules['tianshou'] = None\n"
        "try:\n"
        "    import gymvec.tianshou\n"
        "except ImportError as e:\n"
        "    print('ImportError:', e)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    assert out.returncode == 0, out.stderr
    assert "ImportError:" in out.stdout
    assert "pip install gymvec[tianshou]" in out.stdout


def cartpoles(n: int) -> list:
    return [_envs.make_gym_cartpole] * n


def heuristic(obs: np.ndarray) -> np.ndarray:
    """CartPole's push-toward-the-lean policy: actions that depend on each observation."""
    return (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int64)


def make_policy(action_space: gym.Space, kind: str):
    from tianshou.algorithm.algorithm_base import Policy, RandomActionPolicy
    from tianshou.data import Batch

    if kind == "random":
        return RandomActionPolicy(action_space)

    class Heuristic(Policy):
        def forward(self, batch, state=None, **kwargs):
            return Batch(act=heuristic(np.asarray(batch.obs)), state=state)

    return Heuristic(action_space=action_space)


def collect(venv, kind: str, seed: int, size: int = 4000, **how):
    """A fresh collector over ``venv`` after ``venv.seed(seed)``: its buffer and stats."""
    from tianshou.data import Collector, VectorReplayBuffer

    venv.seed(seed)
    buffer = VectorReplayBuffer(size, len(venv))
    collector = Collector(make_policy(venv.action_space[0], kind), venv, buffer)
    collector.reset()
    stats = collector.collect(random=kind == "random", **how)
    return buffer, stats


def gymvec_venv(cls_name: str, env_fns: list):
    from gymvec import tianshou as gymvec_tianshou

    if cls_name == "serial":
        return gymvec_tianshou.SerialVectorEnv(env_fns)
    return gymvec_tianshou.ParallelVectorEnv(env_fns, num_workers=2)


@needs_tianshou
@pytest.mark.parametrize("cls_name", ["serial", "parallel"])
@pytest.mark.parametrize("policy", ["random", "heuristic"])
def test_collector_fills_the_same_buffer_as_dummy(cls_name, policy, no_leaks):
    """With the same seeds, a Collector over gymvec's vector env fills the same buffer as over
    tianshou's DummyVectorEnv, by steps (several calls) and by episodes (the collector then
    steps shrinking subsets of the sub-envs and resets finished ones)."""
    from tianshou.env import DummyVectorEnv

    ref, ours = DummyVectorEnv(cartpoles(4)), gymvec_venv(cls_name, cartpoles(4))
    try:
        for seed, how in ((3, {"n_step": 240}), (5, {"n_episode": 7})):
            ref_buffer, ref_stats = collect(ref, policy, seed, **how)
            buffer, stats = collect(ours, policy, seed, **how)
            assert len(buffer) == len(ref_buffer) > 100
            for key in BUFFER_KEYS:
                ours_key, ref_key = getattr(buffer, key), getattr(ref_buffer, key)
                np.testing.assert_array_equal(ours_key, ref_key, err_msg=key)
            np.testing.assert_array_equal(buffer.info.env_id, ref_buffer.info.env_id)
            assert stats.n_collected_episodes == ref_stats.n_collected_episodes
            assert stats.returns.tolist() == ref_stats.returns.tolist()
        assert ref_stats.n_collected_episodes == 7
    finally:
        ours.close()


@needs_tianshou
def test_subsets_step_and_reset_as_dummy(no_leaks):
    """Any subset, in any order, stepped and reset with every seed form, gives the same
    observations, rewards, flags and infos (their types too) as DummyVectorEnv; Dict spaces
    come as tianshou stacks them (object arrays of per-env dicts)."""
    from tianshou.env import DummyVectorEnv

    env_fns = [functools.partial(gym.make, _envs.DICT_ENV_ID)] * 3
    ref, ours = DummyVectorEnv(env_fns), gymvec_venv("parallel", env_fns)
    rng = np.random.default_rng(0)
    try:
        assert ours.seed(11) == ref.seed(11) == [[11], [12], [13]]
        assert_same(ref.reset(), ours.reset())
        assert_same(ref.reset(env_id=[2, 0], seed=4), ours.reset(env_id=[2, 0], seed=4))
        assert_same(ref.reset(env_id=1), ours.reset(env_id=1))
        finished = set()
        action_space = ref.action_space[0]
        for t in range(60):
            ids = [i for i in rng.permutation(3)[: rng.integers(1, 4)] if i not in finished]
            if not ids:
                resets = sorted(finished)
                assert_same(ref.reset(env_id=resets), ours.reset(env_id=resets))
                finished.clear()
                continue
            action = np.empty(len(ids), dtype=object)
            action[:] = [action_space.sample() for _ in ids]
            ids = np.array(ids) if t % 2 else ids
            ref_out, out = ref.step(action, ids), ours.step(action, ids)
            assert_same(ref_out, out)
            assert [info["env_id"] for info in out[-1]] == list(ids)
            finished |= {int(i) for i, done in zip(ids, out[2] | out[3]) if done}
        assert_same(ref.reset(seed=7), ours.reset(seed=7))
    finally:
        ours.close()


def assert_same(ref_result: tuple, result: tuple) -> None:
    for ref_value, value in zip(ref_result, result):
        assert type(value) is np.ndarray and value.shape == ref_value.shape
        if ref_value.dtype != object:
            np.testing.assert_array_equal(value, ref_value)
            continue
        for ref_item, item in zip(ref_value, value):
            assert_same_tree(ref_item, item)


def assert_same_tree(ref_value, value) -> None:
    if isinstance(ref_value, dict):
        assert isinstance(value, dict) and value.keys() == ref_value.keys(), (ref_value, value)
        for key in ref_value:
            assert_same_tree(ref_value[key], value[key])
        return
    assert type(value) is type(ref_value), (ref_value, value)
    np.testing.assert_array_equal(value, ref_value)


@needs_tianshou
def test_reset_options_and_large_observations_as_dummy(no_leaks):
    """Resets with gymnasium options reach the sub-envs they name; Atari-sized observations
    (which whole-batch steps hand out from observation lanes) fill the same buffer."""
    from tianshou.env import DummyVectorEnv

    from gymvec.bench.envs import IMAGE_OBS_ID

    ref, ours = DummyVectorEnv(cartpoles(3)), gymvec_venv("parallel", cartpoles(3))
    try:
        ref.seed(1), ours.seed(1)
        bounds = {"low": 0.2, "high": 0.2}
        ref_out = ref.reset(env_id=[2, 1], options=bounds, seed=4)
        out = ours.reset(env_id=[2, 1], options=bounds, seed=4)
        assert_same(ref_out, out)
        assert (out[0] == np.float32(0.2)).all()
        # one seed per sub-env (gymvec's extension): as separate resets with each seed
        out = ours.reset(env_id=[2, 0], seed=[6, 7])
        ref_obs = np.concatenate([ref.reset(env_id=2, seed=6)[0], ref.reset(env_id=0, seed=7)[0]])
        np.testing.assert_array_equal(out[0], ref_obs)
        action = np.array([1, 0, 1])
        assert_same(ref.step(action), ours.step(action))
    finally:
        ours.close()
    images = [functools.partial(gym.make, IMAGE_OBS_ID, episode_steps=7)] * 4
    ref, ours = DummyVectorEnv(images), gymvec_venv("parallel", images)
    try:
        for seed, how in ((3, {"n_step": 40}), (5, {"n_episode": 6})):
            ref_buffer, _ = collect(ref, "random", seed, size=120, **how)
            buffer, _ = collect(ours, "random", seed, size=120, **how)
            assert len(buffer) == len(ref_buffer) >= 40
            for key in BUFFER_KEYS:
                ours_key, ref_key = getattr(buffer, key), getattr(ref_buffer, key)
                np.testing.assert_array_equal(ours_key, ref_key, err_msg=key)
    finally:
        ours.close()


@needs_tianshou
def test_results_come_in_the_order_of_id_not_of_finishing(no_leaks):
    """Sub-envs that finish in the reverse order come back in the order ``id`` names them."""
    from gymvec.tianshou import ParallelVectorEnv

    delays = [0.09, 0.03, 0.0]
    env_fns = [functools.partial(_envs.TimedEnv, delay) for delay in delays]
    envs = ParallelVectorEnv(env_fns, num_workers=3, local_worker=False)
    try:
        envs.reset()
        *_, infos = envs.step(np.array([1, 0, 1]), id=[0, 1, 2])
        assert [info["env_id"] for info in infos] == [0, 1, 2]
        ends = [info["end"] for info in infos]
        assert ends[2] < ends[1] < ends[0]  # they finished in reverse order
        *_, infos = envs.step(np.array([0, 1]), id=[2, 0])
        assert [info["env_id"] for info in infos] == [2, 0]
    finally:
        envs.close()


@needs_tianshou
def test_contract_attributes_and_errors(no_leaks):
    from tianshou.env import BaseVectorEnv

    from gymvec import ClosedEnvError
    from gymvec.tianshou import ParallelVectorEnv

    envs = ParallelVectorEnv(cartpoles(3), num_workers=2)
    try:
        assert isinstance(envs, BaseVectorEnv) and len(envs) == 3 and not envs.is_async
        assert envs.action_space == [gym.spaces.Discrete(2)] * 3
        assert len(envs.observation_space) == 3
        assert envs.get_env_attr("spec", [2])[0].id == "CartPole-v1"
        envs.set_env_attr("gravity", 5.0, id=[0, 2])
        assert envs.get_env_attr("gravity") == [5.0, 9.8, 5.0]
        obs, infos = envs.reset()
        assert obs.shape == (3, 4) and infos.dtype == object and infos.tolist() == [{}] * 3
        with pytest.raises(IndexError, match=r"env_id: sub-env indices \[3\] out of range"):
            envs.step(np.array([0]), id=[3])
        with pytest.raises(IndexError, match=r"\[-1\]"):
            envs.reset(env_id=-1)
        with pytest.raises(ValueError, match="at most once"):
            envs.step(np.array([0, 1]), id=[1, 1])
        with pytest.raises(ValueError, match="env_id: expected sub-env indices"):
            envs.step(np.array([0]), id=[0.5])
        with pytest.raises(ValueError, match="env_id: expected sub-env indices"):
            envs.reset(env_id=[])
        with pytest.raises(ValueError, match=r"one row per sub-env id \(2\), got 3"):
            envs.step(np.array([0, 1, 0]), id=[0, 1])
        with pytest.raises(ValueError, match=r"expected values in Discrete\(2\)"):
            envs.step(np.array([0, 7]), id=[0, 1])
        with pytest.raises(TypeError, match="unexpected keyword"):
            envs.reset(env_id=[0], colour="red")
        with pytest.raises(TypeError, match="'autoreset_mode' is not taken here"):
            ParallelVectorEnv(cartpoles(2), autoreset_mode="next_step")
        # the env still works after refusing all that
        obs, rew, terminated, truncated, infos = envs.step(np.array([1, 1]), id=[2, 0])
        assert obs.shape == (2, 4) and rew.tolist() == [1.0, 1.0]
        # a finished sub-env must be reset before it steps again
        while not terminated[0]:
            obs, rew, terminated, truncated, infos = envs.step(np.array([1]), id=[1])
        with pytest.raises(ValueError, match=re.escape("sub-envs [1] finished")):
            envs.step(np.array([0, 0]), id=[0, 1])
        envs.reset(env_id=[1])
        envs.step(np.array([0, 0]), id=[0, 1])
    finally:
        envs.close()
    envs.close()  # a second close does nothing
    with pytest.raises(ClosedEnvError):
        envs.reset()


@needs_tianshou
def test_worker_error_then_reset_and_close(no_leaks):
    """A sub-env that raises in a worker: WorkerError, the other sub-envs stay usable, and
    close() ends every process."""
    from gymvec import WorkerError
    from gymvec.tianshou import ParallelVectorEnv

    env_fns = [_envs.make_gym_failing, functools.partial(_envs.make_gym_failing, fail_step=2)]
    before = child_pids()
    envs = ParallelVectorEnv(env_fns, num_workers=2, local_worker=False)
    workers = child_pids() - before
    assert len(workers) == 2
    envs.reset()
    envs.step(np.array([0, 0]))
    with pytest.raises(WorkerError, match="failed on purpose"):
        envs.step(np.array([0, 0]), id=[1, 0])  # (a subset's order: first-ready commands)
    obs, _ = envs.reset(env_id=[0])
    obs, rew, *_ = envs.step(np.array([1]), id=[0])
    assert obs.shape == (1, 2) and rew.tolist() == [0.0]
    envs.close()
    assert not workers & child_pids()


@needs_tianshou
def test_interrupted_step_then_the_next_call_works(no_leaks):
    """A Ctrl-C while a partial step waits: the next call takes the interrupted step's results
    back (and drops them) and goes on."""
    import signal

    from gymvec.tianshou import ParallelVectorEnv

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    env_fns = [functools.partial(_envs.TimedEnv, delay) for delay in (0.0, 0.5)]
    envs = ParallelVectorEnv(env_fns, num_workers=2, local_worker=False)
    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        envs.reset()
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        with pytest.raises(KeyboardInterrupt):
            envs.step(np.array([0, 1]), id=[1, 0])
        *_, infos = envs.step(np.array([1, 0]), id=[1, 0])
        assert [info["env_id"] for info in infos] == [1, 0]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        envs.close()


@needs_tianshou
def test_timeout_on_a_subset_then_close(no_leaks):
    """A sub-env that hangs in a partial step: the drop-in's ``timeout`` raises, and close()
    ends its worker (which ignores SIGTERM) in bounded time."""
    import time

    from gymvec.errors import SubEnvTimeoutError
    from gymvec.tianshou import ParallelVectorEnv

    env_fns = [_envs.make_gym_failing, _envs.make_gym_hanging]
    envs = ParallelVectorEnv(env_fns, num_workers=2, timeout=1.0)
    envs.reset()
    envs.step(np.array([0]), id=[0])
    start = time.monotonic()
    with pytest.raises(SubEnvTimeoutError):
        envs.step(np.array([0]), id=[1])
    envs.close()
    assert time.monotonic() - start < 30


@needs_tianshou
def test_docs_block_runs(no_leaks):
    """The python block of the tianshou section of the docs runs as written."""
    section = re.split(r"^## ", DOCS.read_text(), flags=re.M)
    (text,) = [part for part in section if part.startswith("tianshou\n")]
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) == 1
    exec(compile(blocks[0], str(DOCS), "exec"), {"__name__": "docs_tianshou"})


def test_bench_runners_without_tianshou_say_how_to_install(monkeypatch):
    from gymvec.bench.runners import RUNNERS, RunnerOptions

    # None in sys.modules makes the import fail, whether or not tianshou is installed
    monkeypatch.setitem(sys.modules, "tianshou", None)
    monkeypatch.setitem(sys.modules, "tianshou.env", None)
    for name in ("tianshou-shmem", "tianshou-subproc", "gymvec-tianshou"):
        with pytest.raises(ImportError, match=r"pip install gymvec\[tianshou\]"):
            RUNNERS[name]("CartPole-v1", 4, RunnerOptions(num_workers=2))


@needs_tianshou
def test_bench_runs_the_tianshou_runners():
    """``python -m gymvec.bench`` with the three tianshou runners, briefly: each reports a
    speed and no error (--strict fails otherwise)."""
    backends = "gym-sync,tianshou-shmem,tianshou-subproc,gymvec-tianshou"
    cmd = [sys.executable, "-m", "gymvec.bench", "--quick", "--strict", "--no-progress"]
    cmd += ["--num-envs", "4", "--num-workers", "2", "--backends", backends]
    root = str(Path(__file__).resolve().parents[2])
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])),
    }
    out = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=240, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    rows = [line.split() for line in out.stdout.splitlines() if line.startswith("CartPole-v1-4 ")]
    assert [row[1] for row in rows] == backends.split(",")
    assert all(float(row[2]) > 0 for row in rows)
