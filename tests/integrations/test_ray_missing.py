"""Without Ray installed, RayEnv and make_vec(backend="ray") say how to install it."""

from __future__ import annotations

import sys

import gymnasium as gym
import pytest

from gymvec import RayEnv, make_vec


@pytest.fixture
def no_ray(monkeypatch):
    # None in sys.modules makes `import ray` raise ImportError, as on a machine without it
    for name in [name for name in sys.modules if name == "ray" or name.startswith("ray.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "ray", None)


def test_ray_env_without_ray_says_how_to_install_it(no_ray):
    with pytest.raises(ImportError, match="pip install ray"):
        RayEnv(2, lambda: gym.make("CartPole-v1"))


def test_make_vec_ray_backend_without_ray_says_how_to_install_it(no_ray):
    with pytest.raises(ImportError, match="pip install ray"):
        make_vec("CartPole-v1", 2, backend="ray", num_workers=2)
