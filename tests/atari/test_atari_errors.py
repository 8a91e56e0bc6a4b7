"""Bad input to the Atari block: each error names the option, what was expected and given."""

from __future__ import annotations

import pytest

pytest.importorskip("ale_py")  # gymvec[atari]: ale-py and opencv
pytest.importorskip("cv2")

import subprocess
import sys

import numpy as np

from gymvec import ClosedEnvError
from gymvec.atari import AtariVectorEnv, make_env, make_vec


def test_unknown_id_names_close_ids():
    with pytest.raises(ValueError, match=r"'ALE/Pongg-v5' is not a registered ALE id.*ALE/Pong-v5"):
        AtariVectorEnv("ALE/Pongg-v5", 1)


def test_non_ale_id():
    with pytest.raises(ValueError, match="CartPole-v1.*not ale-py's"):
        AtariVectorEnv("CartPole-v1", 1)


def test_rom_ale_py_lacks():
    with pytest.raises(
        ValueError,
        match=r"ALE/Pong-v5: ale-py cannot load game 'not_a_rom'.*"
        r"Rom not_a_rom not supported",
    ):
        AtariVectorEnv("ALE/Pong-v5", 1, game="not_a_rom")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"frame_skip": 0}, "frame_skip: expected an int >= 1, got 0"),
        ({"frame_skip": 2.0}, "frame_skip: expected an int >= 1, got 2.0"),
        ({"screen_size": -1}, "screen_size: expected a positive int.*got -1"),
        ({"screen_size": (84,)}, r"screen_size: .*got \(84,\)"),
        ({"screen_size": [84, 84]}, r"screen_size: .*got \[84, 84\]"),
        ({"stack_size": 0}, "stack_size: expected an int >= 1, got 0"),
        ({"noop_max": -1}, "noop_max: expected an int >= 0, got -1"),
        ({"padding_type": "zeros"}, "padding_type: expected 'reset', 'zero'.*got 'zeros'"),
        ({"padding_type": np.zeros((4, 4), np.uint8)}, r"padding_type: .*shape \(4, 4\)"),
        ({"frameskip": 4}, "frameskip: .*frame_skip="),
        ({"obs_type": "ram"}, "obs_type: 'ram' is not supported"),
        ({"obs_type": "grayscale", "grayscale_obs": False}, "obs_type='grayscale' with"),
        ({"continuous": True}, "continuous: True is not supported"),
        ({"sound_obs": True}, "sound_obs: True is not supported"),
        ({"render_mode": "human"}, "render_mode: 'human' is not supported"),
        ({"max_num_frames_per_episode": 0}, "max_num_frames_per_episode: expected a positive"),
        ({"max_episode_steps": -5}, "max_episode_steps: expected a positive"),
        ({"repeat_action_probability": 1.5}, r"repeat_action_probability: .*\[0, 1\], got 1.5"),
        ({"mode": "hard"}, "mode: expected an int or None, got 'hard'"),
        ({"autoreset_mode": "sometimes"}, "autoreset_mode: expected one of"),
    ],
)
def test_invalid_options(kwargs, match):
    with pytest.raises(ValueError, match=match):
        AtariVectorEnv("ALE/Pong-v5", 1, **kwargs)


def test_num_envs():
    with pytest.raises(ValueError, match="num_envs: expected a positive int, got 0"):
        AtariVectorEnv("ALE/Pong-v5", 0)


def test_unknown_keyword_names_the_close_one():
    with pytest.raises(
        TypeError, match="repeat_action_prob: .*did you mean 'repeat_action_probability'"
    ):
        AtariVectorEnv("ALE/Pong-v5", 1, repeat_action_prob=0.0)


def test_make_vec_names_a_misspelt_preprocessing_keyword():
    with pytest.raises(TypeError, match="noop_maxx: .*did you mean 'noop_max'"):
        make_vec("ALE/Pong-v5", 2, noop_maxx=30)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"mode": 99}, r"mode: ALE/Pong-v5 \(game 'pong'\) has no mode 99; its modes are \[0, 1\]"),
        (
            {"difficulty": 7},
            r"difficulty: ALE/Pong-v5 \(game 'pong'\) has no difficulty 7; its difficulties "
            r"are \[0, 1, 2, 3\]",
        ),
    ],
)
def test_invalid_game_mode_names_the_game_and_its_modes(kwargs, match):
    with pytest.raises(ValueError, match=match):
        AtariVectorEnv("ALE/Pong-v5", 1, **kwargs)
    with pytest.raises(ValueError, match=match):  # in the caller's process, before any worker
        make_vec("ALE/Pong-v5", 2, **kwargs)


def test_a_valid_game_mode_is_taken():
    env = AtariVectorEnv("ALE/Pong-v5", 1, mode=1, difficulty=3)
    env.close()


def test_calls_after_close_raise_closed_env_error():
    env = AtariVectorEnv("ALE/Pong-v5", 2, render_mode="rgb_array")
    env.reset(seed=0)
    env.close()
    message = r"Trying to operate on `AtariVectorEnv`, after a call to `close\(\)`"
    for call in (
        lambda: env.step(np.zeros(2, dtype=np.int64)),
        lambda: env.reset(seed=0),
        env.render,
    ):
        with pytest.raises(ClosedEnvError, match=message):
            call()
    env.close()  # a second close does nothing, as gymnasium's


def test_make_vec_after_close_raises_the_same_error_class():
    envs = make_vec("ALE/Pong-v5", 2, backend="serial")
    envs.close()
    with pytest.raises(ClosedEnvError, match="closed"):
        envs.step(np.zeros(2, dtype=np.int64))


def test_repr():
    env = AtariVectorEnv("ALE/Pong-v5", 2)
    assert repr(env) == "AtariVectorEnv('ALE/Pong-v5', num_envs=2)"
    env.close()


def test_bad_calls():
    env = AtariVectorEnv("ALE/Pong-v5", 2, autoreset_mode="disabled", max_episode_steps=4)
    with pytest.raises(ValueError, match=r"must match num_envs=2 but got length=3"):
        env.reset(seed=[1, 2, 3])
    with pytest.raises(ValueError, match=r"seed\[1\]: expected a non-negative int, got -1"):
        env.reset(seed=[1, -1])
    with pytest.raises(TypeError, match="reset_mask.*numpy array"):
        env.reset(options={"reset_mask": [True, False]})
    with pytest.raises(ValueError, match="reset_mask.*at least one True"):
        env.reset(options={"reset_mask": np.zeros(2, dtype=bool)})
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"actions: expected values in \[0, 6\)"):
        env.step(np.array([0, 6]))
    with pytest.raises(ValueError, match=r"actions: expected 2 integer actions"):
        env.step(np.array([0.5, 1.0]))
    while not env.step(np.zeros(2, dtype=np.int64))[3].any():
        pass
    with pytest.raises(ValueError, match=r"games \[0, 1\] finished and autoreset_mode is DISABLED"):
        env.step(np.zeros(2, dtype=np.int64))
    options = {"reset_mask": np.array([True, True])}
    env.reset(options=options)
    assert "reset_mask" in options  # the caller's options are left as they were
    env.step(np.zeros(2, dtype=np.int64))


def test_make_vec_and_make_env_check_in_the_caller():
    with pytest.raises(ValueError, match="backend: expected one of"):
        make_vec("ALE/Pong-v5", 2, backend="threads")
    with pytest.raises(ValueError, match="num_workers: expected at most one worker per sub-env"):
        make_vec("ALE/Pong-v5", 2, num_workers=3)
    with pytest.raises(ValueError, match="frame_skip: expected an int >= 1"):
        make_env("ALE/Pong-v5", 2, frame_skip=0)


@pytest.mark.parametrize("missing", ["ale_py", "cv2"])
def test_import_without_the_extra_names_it(missing):
    code = (
        f"import sys; sys.modules[{missing!r}] = None\n"
        "try:\n    import gymvec.atari\nexcept ImportError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert 'pip install "gymvec[atari]"' in out.stdout and missing in out.stdout
