"""The checked options of an Atari block: a registered ALE id, ``gym.make``'s keywords for it and
``AtariPreprocessing``'s and ``FrameStackObservation``'s, with the combinations that the block
cannot equal refused up front."""

from __future__ import annotations

import dataclasses
import difflib
import warnings
from typing import Any

import ale_py
import gymnasium as gym
import numpy as np
from ale_py import roms
from gymnasium.envs.registration import EnvSpec

from gymvec.atari.preprocessing import Preprocessing, is_int

ALE_ENTRY_POINT = "ale_py.env:AtariEnv"

# ``ale_py.env.AtariEnv.__init__``'s keywords and ``gymnasium.make``'s own.
_ATARI_ENV_KEYS = (
    "game",
    "mode",
    "difficulty",
    "obs_type",
    "frameskip",
    "repeat_action_probability",
    "full_action_space",
    "continuous",
    "continuous_action_threshold",
    "max_num_frames_per_episode",
    "render_mode",
    "sound_obs",
)
_MAKE_KEYS = ("max_episode_steps", "disable_env_checker")


@dataclasses.dataclass(frozen=True)
class AtariConfig:
    """What an Atari block emulates and how it preprocesses, checked (see :meth:`build`)."""

    env_id: str
    game: str
    rom_path: str
    mode: int | None
    difficulty: int | None
    repeat_action_probability: float
    full_action_space: bool
    max_num_frames_per_episode: int | None
    max_episode_steps: int | None
    render_mode: str | None
    preprocessing: Preprocessing

    @classmethod
    def build(cls, env_id: str, **options: Any) -> AtariConfig:
        """The config of ``FrameStackObservation(AtariPreprocessing(gym.make(env_id,
        frameskip=1, **make_kwargs), ...), stack_size, padding_type=padding_type)``:
        ``options`` are :class:`Preprocessing`'s keywords (gymnasium's defaults where left
        out) and ``make_kwargs``.

        Raises:
            ValueError: an unknown id (with the close ones), a ROM that ale-py lacks, an invalid
                option, or a combination the block cannot equal (named, with the reason).
            TypeError: a keyword that neither ``gym.make`` nor ``AtariEnv`` takes.
        """
        spec = _ale_spec(env_id)
        preprocessing, make_kwargs = Preprocessing.split(options)
        kwargs = _env_kwargs(env_id, spec, make_kwargs)
        game = kwargs["game"]
        if kwargs.get("obs_type", "rgb") == "grayscale" and not preprocessing.grayscale_obs:
            raise ValueError(
                "obs_type='grayscale' with grayscale_obs=False: AtariPreprocessing reads RGB "
                "screens into buffers shaped by the grayscale observation space and fails"
            )
        rom_path = _rom_path(env_id, game)
        _check_variation(env_id, game, rom_path, kwargs.get("mode"), kwargs.get("difficulty"))
        return cls(
            env_id=env_id,
            game=game,
            rom_path=rom_path,
            mode=kwargs.get("mode"),
            difficulty=kwargs.get("difficulty"),
            repeat_action_probability=float(kwargs.get("repeat_action_probability", 0.25)),
            full_action_space=bool(kwargs.get("full_action_space", False)),
            max_num_frames_per_episode=kwargs.get("max_num_frames_per_episode"),
            max_episode_steps=kwargs.get("max_episode_steps"),
            render_mode=kwargs.get("render_mode"),
            preprocessing=preprocessing,
        )


def ale_ids() -> list[str]:
    """Every registered id whose entry point is ale-py's ``AtariEnv``."""
    return sorted(k for k, s in gym.registry.items() if s.entry_point == ALE_ENTRY_POINT)


def _ale_spec(env_id: Any) -> EnvSpec:
    if not isinstance(env_id, str):
        raise TypeError(f"env_id: expected a registered ALE id (a str), got {env_id!r}")
    spec = gym.registry.get(env_id)
    if spec is None:
        close = difflib.get_close_matches(env_id, ale_ids(), n=3, cutoff=0.6)
        hint = f"; close ids: {', '.join(close)}" if close else " (ALE ids look like 'ALE/Pong-v5')"
        raise ValueError(f"env_id: {env_id!r} is not a registered ALE id{hint}")
    if spec.entry_point != ALE_ENTRY_POINT:
        raise ValueError(
            f"env_id: {env_id!r} is registered with entry point {spec.entry_point!r}, not "
            f"ale-py's {ALE_ENTRY_POINT!r}: the Atari block emulates ALE games only"
        )
    return spec


def _env_kwargs(env_id: str, spec: EnvSpec, make_kwargs: dict[str, Any]) -> dict[str, Any]:
    """``gym.make(env_id, frameskip=1, **make_kwargs)``'s keywords for ``AtariEnv``, plus
    ``max_episode_steps``; refuses what the block cannot equal."""
    for key in make_kwargs:
        if key not in _ATARI_ENV_KEYS and key not in _MAKE_KEYS:
            # a misspelt preprocessing keyword lands here too: suggest among those as well
            accepted = [*_ATARI_ENV_KEYS, *_MAKE_KEYS, *Preprocessing.names()]
            close = difflib.get_close_matches(key, accepted, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise TypeError(
                f"{key}: not a preprocessing keyword, nor one of gym.make or ale_py's AtariEnv "
                f"for {env_id!r}{hint}"
            )
    if "frameskip" in make_kwargs:
        raise ValueError(
            "frameskip: the block equals gym.make(env_id, frameskip=1) under AtariPreprocessing; "
            f"skip frames with frame_skip=, got frameskip={make_kwargs['frameskip']!r}"
        )
    kwargs = {**spec.kwargs, **make_kwargs}
    kwargs.setdefault("max_episode_steps", spec.max_episode_steps)
    refused = {
        "obs_type": (
            kwargs.get("obs_type", "rgb") not in ("rgb", "grayscale"),
            "AtariPreprocessing needs screen observations ('rgb' or 'grayscale')",
        ),
        "continuous": (
            bool(kwargs.get("continuous", False)),
            "the block takes discrete actions only",
        ),
        "sound_obs": (
            bool(kwargs.get("sound_obs", False)),
            "AtariPreprocessing refuses dict (image and sound) observations",
        ),
        "render_mode": (
            kwargs.get("render_mode") not in (None, "rgb_array"),
            "the block renders 'rgb_array' frames only (no window)",
        ),
    }
    for key, (bad, why) in refused.items():
        if bad:
            raise ValueError(f"{key}: {kwargs[key]!r} is not supported: {why}")
    for key in ("max_num_frames_per_episode", "max_episode_steps"):
        value = kwargs.get(key)
        if value is not None and (not is_int(value) or value < 1):
            raise ValueError(f"{key}: expected a positive int or None, got {value!r}")
    for key in ("mode", "difficulty"):
        value = kwargs.get(key)
        if value is not None and not is_int(value):
            raise ValueError(f"{key}: expected an int or None, got {value!r}")
    rap = kwargs.get("repeat_action_probability", 0.25)
    if not isinstance(rap, int | float | np.floating) or not 0.0 <= rap <= 1.0:
        raise ValueError(f"repeat_action_probability: expected a float in [0, 1], got {rap!r}")
    return kwargs


def _rom_path(env_id: str, game: str) -> str:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        path = roms.get_rom_path(game)
    if path is None:
        said = "; ".join(str(w.message) for w in caught) or f"no ROM for {game!r}"
        raise ValueError(f"{env_id}: ale-py cannot load game {game!r}: {said}")
    return str(path)


def _check_variation(
    env_id: str, game: str, rom_path: str, mode: int | None, difficulty: int | None
) -> None:
    """A ``mode`` and ``difficulty`` that the ROM has (ale-py says only "Invalid game mode
    requested"), checked here so that make_vec raises it in the caller's process."""
    if mode is None and difficulty is None:
        return
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
    ale = ale_py.ALEInterface()
    ale.loadROM(rom_path)
    for name, plural, value, available in (
        ("mode", "modes", mode, ale.getAvailableModes()),
        ("difficulty", "difficulties", difficulty, ale.getAvailableDifficulties()),
    ):
        if value is not None and value not in available:
            raise ValueError(
                f"{name}: {env_id} (game {game!r}) has no {name} {value}; its {plural} are "
                f"{list(available)}"
            )
