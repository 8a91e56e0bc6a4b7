"""gymvec.atari.make_vec and make_env: one AtariVectorEnv block per worker, equal to
SyncVectorEnv over the wrappers, run as blocks inside gymvec's batched envs."""

from __future__ import annotations

import pytest

pytest.importorskip("ale_py")  # gymvec[atari]: ale-py and opencv
pytest.importorskip("cv2")

import numpy as np
from _reference import compare, reference
from gymnasium.vector import AutoresetMode

from gymvec.atari import AtariVectorEnv
from gymvec.atari.make import block_factories
from gymvec.subenvs.layout import spread


def test_factories_build_each_workers_share():
    factories = block_factories(
        "ALE/Pong-v5", 7, 2, AutoresetMode.SAME_STEP, {"frame_skip": 2, "mode": 0}
    )
    assert len(factories) == 2
    blocks = [f() for f in factories]
    assert [b.num_envs for b in blocks] == spread(7, 2) == [3, 4]
    for block in blocks:
        assert isinstance(block, AtariVectorEnv)
        assert block.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
        assert block.config.preprocessing.frame_skip == 2 and block.config.mode == 0
        assert block.copy is False  # the engine copies into shared memory


def test_blocks_seeded_from_their_first_row_equal_one_block():
    """The engine resets a block with its first row's seed: rows seeded ``seed + row``
    across blocks, as one block of every row."""
    whole = AtariVectorEnv("ALE/Pong-v5", 5)
    parts = [f() for f in block_factories("ALE/Pong-v5", 5, 2, AutoresetMode.NEXT_STEP, {})]
    obs, _ = whole.reset(seed=10)
    got = np.concatenate([parts[0].reset(seed=10)[0], parts[1].reset(seed=12)[0]])
    np.testing.assert_array_equal(got, obs)
    rng = np.random.default_rng(0)
    for _ in range(20):
        actions = rng.integers(0, 6, size=5)
        want = whole.step(actions)
        got_parts = [parts[0].step(actions[:2]), parts[1].step(actions[2:])]
        for k in range(4):
            np.testing.assert_array_equal(np.concatenate([g[k] for g in got_parts]), want[k])


@pytest.mark.parametrize("mode", ["next_step", "same_step", "disabled"])
def test_make_vec_serial_equals_the_wrappers(mode):
    envs = make_vec_("serial", mode)
    ref = reference("ALE/Pong-v5", 3, autoreset_mode=mode, max_num_frames_per_episode=200)
    try:
        compare(envs, ref, 60, seed=0, reset_every=25)
    finally:
        envs.close()


@pytest.mark.timeout(60)
def test_make_vec_parallel_equals_the_wrappers():
    envs = make_vec_("parallel", "next_step")
    ref = reference("ALE/Pong-v5", 3, max_num_frames_per_episode=200)
    try:
        compare(envs, ref, 60, seed=0)
    finally:
        envs.close()


@pytest.mark.timeout(60)
def test_make_env_tensordict_batch():
    from gymvec.atari import make_env

    env = make_env("ALE/Pong-v5", 3, num_workers=2)
    try:
        env.set_seed(0)
        td = env.reset()
        assert tuple(td["observation"].shape) == (3, 4, 84, 84)
        ref_obs, _ = reference("ALE/Pong-v5", 3).reset(seed=0)
        np.testing.assert_array_equal(td["observation"].numpy(), ref_obs)
    finally:
        env.close()


def make_vec_(backend: str, mode: str):
    from gymvec.atari import make_vec

    return make_vec(
        "ALE/Pong-v5",
        3,
        backend=backend,
        num_workers=2,
        autoreset_mode=mode,
        max_num_frames_per_episode=200,
    )


def test_the_preprocessing_defaults_are_gymnasiums():
    # Preprocessing holds the wrappers' options once, for every entry point: its defaults stay
    # gymnasium's AtariPreprocessing's and FrameStackObservation's.
    import dataclasses
    import inspect

    from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

    from gymvec.atari.preprocessing import Preprocessing

    def defaults(fn) -> dict:
        return {
            name: p.default
            for name, p in inspect.signature(fn).parameters.items()
            if p.default is not inspect.Parameter.empty
        }

    wrapper = defaults(AtariPreprocessing.__init__)
    wrapper["padding_type"] = defaults(FrameStackObservation.__init__)["padding_type"]
    wrapper["stack_size"] = 4  # (FrameStackObservation has none: the Atari papers' 4)
    ours = {field.name: field.default for field in dataclasses.fields(Preprocessing)}
    assert ours == wrapper


@pytest.mark.parametrize("name", ["make_vec", "make_env", "AtariVectorEnv"])
def test_the_entry_points_signatures_name_the_preprocessing_keywords(name):
    # help() and inspect show each keyword with its default, though Preprocessing writes them
    import dataclasses
    import inspect

    import gymvec.atari
    from gymvec.atari.preprocessing import Preprocessing

    params = inspect.signature(getattr(gymvec.atari, name)).parameters
    for field in dataclasses.fields(Preprocessing):
        assert params[field.name].kind is inspect.Parameter.KEYWORD_ONLY
        assert params[field.name].default == field.default
    assert list(params.values())[-1].kind is inspect.Parameter.VAR_KEYWORD


def test_every_entry_point_takes_the_preprocessing_keywords():
    # Each keyword, none at its default, reaches the blocks' config by AtariConfig.build,
    # AtariVectorEnv and make_vec's and make_env's factories alike (a keyword dropped on the
    # way would leave the default).
    from gymvec.atari import make_vec
    from gymvec.atari.config import AtariConfig
    from gymvec.atari.preprocessing import Preprocessing

    padding = np.full((42, 40, 3), 0.5, dtype=np.float32)
    given = dict(
        noop_max=3,
        frame_skip=2,
        screen_size=(40, 42),
        terminal_on_life_loss=True,
        grayscale_obs=False,
        grayscale_newaxis=True,
        scale_obs=True,
        stack_size=2,
        padding_type=padding,
    )
    assert set(given) == set(Preprocessing.names())
    for name, value in given.items():
        assert not np.array_equal(getattr(Preprocessing(), name), value), name
    block = AtariVectorEnv("ALE/Pong-v5", 1, **given)
    blocks = block_factories("ALE/Pong-v5", 2, 2, AutoresetMode.DISABLED, given)
    configs = [AtariConfig.build("ALE/Pong-v5", **given), block.config]
    configs += [factory().config for factory in blocks]
    for config in configs:
        for name, value in given.items():
            assert np.array_equal(getattr(config.preprocessing, name), value), name
    obs, _ = block.reset(seed=0)
    assert obs.shape == (1, 2, 42, 40, 3) and obs.dtype == np.float32
    assert np.array_equal(obs[0, 0], padding)  # the first reset's padding frame
    block.close()
    envs = make_vec("ALE/Pong-v5", 2, backend="serial", **given)
    assert envs.single_observation_space == block.single_observation_space
    envs.close()
