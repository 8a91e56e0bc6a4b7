"""rl-zoo3 and sb3-contrib with gymvec's SB3 vectorizers (``pip install -e ".[rl-zoo3]"``).

The reference is each trainer's own run over SB3's DummyVecEnv with the same seed: the same
Monitor episodes (and for rl-zoo3, the same saved policy).

rl_zoo3 patches gymnasium when imported (its TimeLimit adds ``info["TimeLimit.truncated"]`` to
every env made afterwards), so each test that imports it or sb3-contrib runs in a fresh
interpreter (the fresh_interpreter marker, tests/conftest.py), and this module imports neither.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import zipfile
from importlib.util import find_spec
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from conftest import FRESH_INTERPRETER
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import DummyVecEnv

from gymvec.integrations import rl_zoo3 as gymvec_rl_zoo3
from gymvec.sb3 import ParallelVecEnv, SerialVecEnv

pytestmark = pytest.mark.skipif(
    find_spec("rl_zoo3") is None or find_spec("sb3_contrib") is None,
    reason='rl-zoo3 and sb3-contrib are an optional integration (pip install -e ".[rl-zoo3]")',
)
fresh_interpreter = pytest.mark.fresh_interpreter

ROOT = Path(__file__).resolve().parents[2]
ZOO_ARGS = ["--algo", "ppo", "--env", "CartPole-v1", "-n", "1024", "--seed", "3"]
ZOO_ARGS += ["--device", "cpu", "--eval-freq", "-1", "--num-threads", "1"]


def _monitor_episodes(run_dir: Path) -> dict[str, list[tuple[str, str]]]:
    """(reward, length) of each episode in each of rl-zoo3's Monitor files (times differ)."""
    episodes = {}
    for path in sorted(run_dir.glob("*.monitor.csv")):
        with path.open() as file:
            rows = list(csv.reader(file))[2:]  # a JSON header, then the column names
        episodes[path.name] = [(row[0], row[1]) for row in rows]
    return episodes


def _zoo_run(log_folder: Path, *extra: str) -> tuple[dict, bytes]:
    gymvec_rl_zoo3.main(["train", *ZOO_ARGS, "--log-folder", str(log_folder), *extra])
    (run_dir,) = (log_folder / "ppo").iterdir()
    with zipfile.ZipFile(run_dir / "CartPole-v1.zip") as saved:
        policy = saved.read("policy.pth")
    return _monitor_episodes(run_dir), policy


def test_this_process_never_imports_rl_zoo3():
    """Collecting this module, and its tests (each in a pytest of its own), import no rl_zoo3
    here: gymnasium's TimeLimit is still gymnasium's."""
    assert "rl_zoo3" not in sys.modules
    assert "sb3_contrib" not in sys.modules
    assert gym.wrappers.TimeLimit.__module__ == "gymnasium.wrappers.common"


@fresh_interpreter
def test_fresh_interpreter_runs_the_test_in_a_pytest_of_its_own():
    assert os.environ.get(FRESH_INTERPRETER) == "1"


@fresh_interpreter
def test_rl_zoo3_train_with_gymvec_equals_dummy(tmp_path):
    from rl_zoo3.exp_manager import ExperimentManager

    expected_episodes, expected_policy = _zoo_run(tmp_path / "dummy", "--vec-env", "dummy")
    episodes, policy = _zoo_run(
        tmp_path / "gymvec",
        *("--vec-env", "gymvec", "--gymvec-workers", "2", "--gymvec-start-method", "fork"),
    )
    assert len(expected_episodes) == 8  # rl-zoo3's CartPole PPO: 8 envs
    assert sum(len(per_env) for per_env in expected_episodes.values()) > 20
    assert episodes == expected_episodes
    assert policy == expected_policy
    assert ExperimentManager.default_vec_env_cls is None  # main() left rl-zoo3 as it was


@fresh_interpreter
def test_rl_zoo3_command_line_with_gymvec_serial(tmp_path):
    """The documented command, as typed: rl-zoo3's vectorizer is gymvec's (its log says so)."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    command = [sys.executable, "-m", "gymvec.integrations.rl_zoo3", "train", *ZOO_ARGS]
    command += ["--log-folder", str(tmp_path), "--vec-env", "gymvec-serial", "-n", "256"]
    command += ["--verbose", "1"]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = (tmp_path / "ppo").iterdir()
    assert sum(len(e) for e in _monitor_episodes(run_dir).values()) > 0


@fresh_interpreter
def test_rl_zoo3_entry_refuses_gymvec_options_without_gymvec():
    with pytest.raises(SystemExit):
        gymvec_rl_zoo3.main(["train", *ZOO_ARGS, "--vec-env", "dummy", "--gymvec-workers", "2"])
    with pytest.raises(ValueError, match="gymvec-serial"):
        gymvec_rl_zoo3.vec_env_cls("gymvec-serial", num_workers=2)


class MaskedTargetEnv(gym.Env):
    """Pick the shown target among the allowed actions; a masked action raises. The masks come
    from the env's own seeded generator (sb3-contrib's InvalidActionEnv* draw them from numpy's
    global one, which differs between processes)."""

    def __init__(self, n: int = 8, length: int = 12):
        self.observation_space = gym.spaces.Box(0.0, 1.0, (2 * n,))
        self.action_space = gym.spaces.Discrete(n)
        self.n, self.length = n, length

    def _draw(self) -> np.ndarray:
        self.target = int(self.np_random.integers(self.n))
        self.mask = self.np_random.random(self.n) < 0.5
        self.mask[self.target] = True
        return np.concatenate([np.eye(self.n)[self.target], self.mask]).astype(np.float32)

    def action_masks(self) -> np.ndarray:
        return self.mask.copy()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._draw(), {}

    def step(self, action):
        if not self.mask[action]:
            raise ValueError(f"action {action} is masked out: {self.mask}")
        reward = float(action == self.target)
        self.t += 1
        return self._draw(), reward, False, self.t >= self.length, {}


def _masked_episodes(vec_env_cls, vec_env_kwargs) -> tuple[list, list]:
    from sb3_contrib import MaskablePPO

    envs = make_vec_env(
        MaskedTargetEnv,
        4,
        seed=5,
        vec_env_cls=vec_env_cls,
        vec_env_kwargs=vec_env_kwargs,
    )
    try:
        envs.reset()  # the masks are drawn at reset, from the seeded sub-envs
        masks = envs.env_method("action_masks")  # MaskablePPO's way to the masks
        model = MaskablePPO("MlpPolicy", envs, n_steps=32, batch_size=64, n_epochs=1, seed=5)
        model.learn(256)
        return masks, envs.env_method("get_episode_rewards")
    finally:
        envs.close()


@fresh_interpreter
@pytest.mark.parametrize(
    ("cls", "kwargs"),
    [(SerialVecEnv, {}), (ParallelVecEnv, {"start_method": "fork", "num_workers": 2})],
)
def test_maskable_ppo_masks_through_env_method_as_over_dummy(cls, kwargs):
    expected_masks, expected_episodes = _masked_episodes(DummyVecEnv, {})
    masks, episodes = _masked_episodes(cls, kwargs)
    np.testing.assert_array_equal(np.stack(masks), np.stack(expected_masks))
    assert not np.stack(masks).all()  # some actions really are masked
    assert sum(len(per_env) for per_env in episodes) >= 4 * 5  # 256 steps, 12 per episode
    assert episodes == expected_episodes


@fresh_interpreter
@pytest.mark.timeout(480)  # two LSTM trainings: 16 s alone, minutes on a busy machine
def test_recurrent_ppo_learns_the_same_episodes_as_over_dummy():
    from sb3_contrib import RecurrentPPO

    def learn(vec_env_cls, vec_env_kwargs):
        envs = make_vec_env(
            "CartPole-v1", 2, seed=1, vec_env_cls=vec_env_cls, vec_env_kwargs=vec_env_kwargs
        )
        try:
            model = RecurrentPPO("MlpLstmPolicy", envs, n_steps=64, batch_size=64, seed=1)
            model.learn(256)
            return envs.env_method("get_episode_rewards")
        finally:
            envs.close()

    expected = learn(DummyVecEnv, {})
    assert learn(ParallelVecEnv, {"start_method": "fork", "num_workers": 2}) == expected
    assert sum(len(per_env) for per_env in expected) > 5
