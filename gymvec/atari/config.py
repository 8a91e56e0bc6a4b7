"""The checked options of an Atari block: a registered ALE id, ``gym.make``'s keywords for it and
``AtariPreprocessing``'s and ``FrameStackObservation``'s, with the combinations that the block
cannot equal refused up front."""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import warnings
from typing import Any

import ale_py
import gymnasium as gym
import numpy as np
from ale_py import roms
from gymnasium.envs.registration import EnvSpec

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


def _is_int(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


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
    noop_max: int
    frame_skip: int
    screen_size: tuple[int, int]  # (width, height), as cv2.resize takes it
    terminal_on_life_loss: bool
    grayscale_obs: bool
    grayscale_newaxis: bool
    scale_obs: bool
    stack_size: int
    padding_type: str  # "reset", "zero" or "custom" (then padding_value)
    padding_value: np.ndarray | None

    @property
    def frame_shape(self) -> tuple[int, ...]:
        """One preprocessed frame's shape, as ``AtariPreprocessing.observation_space``'s."""
        width, height = self.screen_size
        if not self.grayscale_obs:
            return (height, width, 3)
        return (height, width, 1) if self.grayscale_newaxis else (height, width)

    @property
    def frame_dtype(self) -> type:
        return np.float32 if self.scale_obs else np.uint8

    @classmethod
    def build(
        cls,
        env_id: str,
        *,
        noop_max: int = 30,
        frame_skip: int = 4,
        screen_size: int | tuple[int, int] = 84,
        terminal_on_life_loss: bool = False,
        grayscale_obs: bool = True,
        grayscale_newaxis: bool = False,
        scale_obs: bool = False,
        stack_size: int = 4,
        padding_type: Any = "reset",
        **make_kwargs: Any,
    ) -> AtariConfig:
        """The config of ``FrameStackObservation(AtariPreprocessing(gym.make(env_id,
        frameskip=1, **make_kwargs), ...), stack_size, padding_type=padding_type)``.

        Raises:
            ValueError: an unknown id (with the close ones), a ROM that ale-py lacks, an invalid
                option, or a combination the block cannot equal (named, with the reason).
            TypeError: a keyword that neither ``gym.make`` nor ``AtariEnv`` takes.
        """
        spec = _ale_spec(env_id)
        kwargs = _env_kwargs(env_id, spec, make_kwargs)
        game = kwargs["game"]
        _check_int("noop_max", noop_max, minimum=0)
        _check_int("frame_skip", frame_skip, minimum=1)
        _check_int("stack_size", stack_size, minimum=1)
        if isinstance(screen_size, int | np.integer) and _is_int(screen_size) and screen_size > 0:
            size = (int(screen_size), int(screen_size))
        elif (
            isinstance(screen_size, tuple)
            and len(screen_size) == 2
            and all(_is_int(s) and s > 0 for s in screen_size)
        ):
            size = (int(screen_size[0]), int(screen_size[1]))
        else:
            raise ValueError(
                "screen_size: expected a positive int or a (width, height) tuple of positive "
                f"ints, got {screen_size!r}"
            )
        rom_path = _rom_path(env_id, game)
        _check_variation(env_id, game, rom_path, kwargs.get("mode"), kwargs.get("difficulty"))
        config = cls(
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
            noop_max=int(noop_max),
            frame_skip=int(frame_skip),
            screen_size=size,
            terminal_on_life_loss=bool(terminal_on_life_loss),
            grayscale_obs=bool(grayscale_obs),
            grayscale_newaxis=bool(grayscale_newaxis),
            scale_obs=bool(scale_obs),
            stack_size=int(stack_size),
            padding_type="reset",
            padding_value=None,
        )
        if kwargs.get("obs_type", "rgb") == "grayscale" and not grayscale_obs:
            raise ValueError(
                "obs_type='grayscale' with grayscale_obs=False: AtariPreprocessing reads RGB "
                "screens into buffers shaped by the grayscale observation space and fails"
            )
        return dataclasses.replace(config, **_padding(config, padding_type))


def _check_int(name: str, value: Any, *, minimum: int) -> None:
    if not _is_int(value) or value < minimum:
        raise ValueError(f"{name}: expected an int >= {minimum}, got {value!r}")


def _preprocessing_keys() -> list[str]:
    """``AtariPreprocessing``'s and ``FrameStackObservation``'s keywords that
    :meth:`AtariConfig.build` takes."""
    parameters = inspect.signature(AtariConfig.build).parameters.values()
    return [p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY]


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
            accepted = [*_ATARI_ENV_KEYS, *_MAKE_KEYS, *_preprocessing_keys()]
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
        if value is not None and (not _is_int(value) or value < 1):
            raise ValueError(f"{key}: expected a positive int or None, got {value!r}")
    for key in ("mode", "difficulty"):
        value = kwargs.get(key)
        if value is not None and not _is_int(value):
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


def _padding(config: AtariConfig, padding_type: Any) -> dict[str, Any]:
    """``FrameStackObservation``'s padding: "reset", "zero" or a frame of the frame space."""
    if isinstance(padding_type, str):
        if padding_type in ("reset", "zero"):
            return {"padding_type": padding_type}
        raise ValueError(
            f"padding_type: expected 'reset', 'zero' or a frame of shape {config.frame_shape}, "
            f"got {padding_type!r}"
        )
    high = 1.0 if config.scale_obs else 255
    frame_space = gym.spaces.Box(0, high, config.frame_shape, dtype=config.frame_dtype)
    if padding_type not in frame_space:
        given = (
            f"an array of shape {padding_type.shape} and dtype {padding_type.dtype}"
            if isinstance(padding_type, np.ndarray)
            else repr(padding_type)
        )
        raise ValueError(
            f"padding_type: expected 'reset', 'zero' or a frame in {frame_space}, got {given}"
        )
    value: np.ndarray = np.array(padding_type, dtype=config.frame_dtype)
    return {"padding_type": "custom", "padding_value": value}
