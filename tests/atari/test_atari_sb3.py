"""Stable-Baselines3 over gymvec.atari.make_vec: SB3's VecEnv reads the games' render_mode
(no "render_mode is not defined" warning) and reaches the blocks' methods."""

from __future__ import annotations

import warnings

import pytest

pytest.importorskip("ale_py")  # gymvec[atari]: ale-py and opencv
pytest.importorskip("cv2")
pytest.importorskip("stable_baselines3")

from gymvec.atari import make_vec  # noqa: E402
from gymvec.sb3 import SB3VecEnv  # noqa: E402


@pytest.mark.parametrize("render_mode", [None, "rgb_array"])
def test_sb3_reads_render_mode_without_a_warning(render_mode, no_leaks):
    vector_env = make_vec(
        "ALE/Pong-v5", 2, num_workers=1, autoreset_mode="same_step", render_mode=render_mode
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        venv = SB3VecEnv(vector_env)
    try:
        assert not [w for w in caught if "render_mode" in str(w.message)]
        assert venv.render_mode == render_mode
        assert venv.get_attr("render_mode") == [render_mode] * 2
        meanings = ["NOOP", "FIRE", "RIGHT", "LEFT", "RIGHTFIRE", "LEFTFIRE"]
        assert venv.env_method("get_action_meanings") == [meanings] * 2
    finally:
        venv.close()
