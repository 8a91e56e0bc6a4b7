"""``subenvs/drivers.py``: a gymnasium sub-env driven on its buffer row (``GymDriver``), and
what KEEP_FINAL_OBS sends back (``final_obs_to_keep``). The runners themselves are checked
against each other on generated commands in ``tests/differential/test_runners_agree.py``."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from gymvec.subenvs.drivers import GymDriver, final_obs_to_keep, make_driver
from gymvec.subenvs.kinds import summarize
from gymvec.wire.buffers import BufferLayout, Buffers, private_memory
from gymvec.wire.commands import NOTHING

FORM = (np.dtype(np.float32), (4,))


def test_an_observation_the_row_holds_exactly_stays_in_the_buffers() -> None:
    assert final_obs_to_keep(np.ones(4, np.float32), FORM) is NOTHING


@pytest.mark.parametrize(
    "value",
    [np.ones(4, np.float64), np.ones((1, 4), np.float32), [1.0, 2.0, 3.0, 4.0], np.float32(1)],
    ids=["wider-dtype", "other-shape", "list", "scalar"],
)
def test_an_observation_the_row_changes_travels_as_returned(value) -> None:
    assert final_obs_to_keep(value, FORM) is value


def test_an_observation_of_a_tree_travels_as_returned() -> None:
    value = np.ones(4, np.float32)
    assert final_obs_to_keep(value, None) is value  # not one observation array


class ShapeShifter(gym.Env):
    """CartPole-like spaces; the observation's shape is set from outside."""

    observation_space = spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self) -> None:
        self.shape: tuple[int, ...] = (4,)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(self.shape, np.float32), {}

    def step(self, action):
        return np.full(self.shape, 0.5, np.float32), 2.0, True, False, {}


def _drivers(envs: list[gym.Env]) -> tuple[Buffers, list[GymDriver]]:
    summary = summarize(envs[0])
    layout = BufferLayout(len(envs), summary.observation_leaves, summary.action_leaves, {})
    buffers = Buffers(layout, private_memory(layout.nbytes))
    return buffers, [make_driver(env, i, buffers) for i, env in enumerate(envs)]


def test_a_step_lands_in_its_own_row_of_next() -> None:
    buffers, drivers = _drivers([ShapeShifter(), ShapeShifter()])
    assert drivers[1].obs_form == FORM
    drivers[1].reset(buffers.root, 0, None)
    assert drivers[1].step() is True  # it finished
    obs = buffers.next.obs[buffers.layout.obs_keys[0]]
    assert obs[1].tolist() == [0.5] * 4 and obs[0].tolist() == [0.0] * 4
    assert buffers.reward.tolist() == [0.0, 2.0]
    assert buffers.next.terminated.tolist() == [False, True]
    assert buffers.next.done.tolist() == [False, True]


def test_an_observation_of_another_shape_is_refused_naming_the_sub_env() -> None:
    envs = [ShapeShifter(), ShapeShifter()]
    buffers, drivers = _drivers(envs)
    envs[1].shape = (5,)
    with pytest.raises(ValueError, match=r"sub-env 1 .*shape \(5,\).*shape \(4,\)"):
        drivers[1].step()


def test_observations_of_several_leaves_have_no_single_form() -> None:
    env = gym.make("Blackjack-v1")  # a Tuple of Discretes
    _, drivers = _drivers([env])
    assert drivers[0].obs_form is None
