"""SB3's PPO over PettingZoo agents as rows (SuperSuit's concat_vec_envs_v1 idiom, in gymvec):
a short run, and the VecEnv contract on its way."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("pettingzoo")
pytest.importorskip("stable_baselines3")

from _pz_envs import simple_spread  # noqa: E402
from stable_baselines3 import PPO  # noqa: E402

from gymvec.pettingzoo import PettingZooBlock, make_vec  # noqa: E402
from gymvec.sb3 import SB3VecEnv  # noqa: E402


def _check_contract_and_train(venv: SB3VecEnv) -> None:
    rows = venv.num_envs
    venv.seed(0)
    obs = venv.reset()
    assert obs.shape == (rows, 18) and obs.dtype == np.float32
    ends = 0
    for _ in range(6):  # max_cycles=6: every agent truncates on the sixth step
        obs, rewards, dones, infos = venv.step(np.zeros(rows, np.int64))
        assert rewards.shape == dones.shape == (rows,) and len(infos) == rows
        ends += int(dones.sum())
    assert ends == rows
    for info in infos:
        assert info["TimeLimit.truncated"] and info["terminal_observation"].shape == (18,)
    model = PPO("MlpPolicy", venv, n_steps=32, batch_size=64, n_epochs=1, seed=0, device="cpu")
    model.learn(total_timesteps=rows * 32 * 2)
    assert model.num_timesteps >= rows * 32 * 2


def test_sb3_ppo_trains_on_a_block():
    venv = SB3VecEnv(PettingZooBlock(simple_spread, 2, autoreset_mode="same_step"))
    try:
        _check_contract_and_train(venv)
    finally:
        venv.close()


def test_sb3_ppo_trains_on_make_vec(no_leaks):
    venv = SB3VecEnv(make_vec(simple_spread, 4, num_workers=2, autoreset_mode="same_step"))
    try:
        _check_contract_and_train(venv)
    finally:
        venv.close()


@pytest.mark.parametrize("build", ["block", "make_vec"])
def test_sb3_reads_render_mode_without_a_warning(build, no_leaks):
    if build == "block":
        vector_env = PettingZooBlock(simple_spread, 2, autoreset_mode="same_step")
    else:
        vector_env = make_vec(simple_spread, 2, num_workers=1, autoreset_mode="same_step")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        venv = SB3VecEnv(vector_env)
    try:
        assert not [w for w in caught if "render_mode" in str(w.message)]
        assert venv.render_mode is None
        assert venv.get_attr("render_mode") == [None] * venv.num_envs
    finally:
        venv.close()
