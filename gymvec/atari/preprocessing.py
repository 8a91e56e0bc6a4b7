"""``Preprocessing``: the options of ``AtariPreprocessing`` and ``FrameStackObservation`` that an
Atari block takes, each with gymnasium's default, written here once for every entry point
(``make_vec``, ``make_env``, ``AtariVectorEnv`` and ``AtariConfig.build`` take them as
keywords)."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import gymnasium as gym
import numpy as np

_CASTS = {"int": int, "bool": bool}
F = TypeVar("F", bound=Callable[..., Any])
KEYWORD_ONLY = inspect.Parameter.KEYWORD_ONLY


def is_int(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


@dataclasses.dataclass(frozen=True)
class Preprocessing:
    """``AtariPreprocessing``'s options and ``FrameStackObservation``'s ``stack_size`` and
    ``padding_type``, with gymnasium's defaults (``stack_size``: the Atari papers' 4)."""

    noop_max: int = 30
    frame_skip: int = 4
    screen_size: int | tuple[int, int] = 84  # or (width, height), as cv2.resize takes it
    terminal_on_life_loss: bool = False
    grayscale_obs: bool = True
    grayscale_newaxis: bool = False
    scale_obs: bool = False
    stack_size: int = 4
    padding_type: Any = "reset"  # "reset", "zero" or a frame (checked: of the frame dtype)

    @classmethod
    def names(cls) -> list[str]:
        """The keywords, in order."""
        return [field.name for field in dataclasses.fields(cls)]

    @classmethod
    def in_signature(cls, fn: F) -> F:
        """``fn`` (which takes these options in its ``**options``) with the options named in
        its signature, defaults included, for ``help()`` and ``inspect.signature``."""
        signature = inspect.signature(fn)
        params = list(signature.parameters.values())
        extra = next(i for i, p in enumerate(params) if p.kind is p.VAR_KEYWORD)
        named = [
            inspect.Parameter(f.name, KEYWORD_ONLY, default=f.default, annotation=f.type)
            for f in dataclasses.fields(cls)
        ]
        fn.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[*params[:extra], *named, *params[extra:]]
        )
        return fn

    @classmethod
    def split(cls, options: Mapping[str, Any]) -> tuple[Preprocessing, dict[str, Any]]:
        """The preprocessing keywords of ``options``, checked, and the others (``gym.make``'s,
        checked by the caller)."""
        names = cls.names()
        ours = {key: value for key, value in options.items() if key in names}
        rest = {key: value for key, value in options.items() if key not in names}
        return cls(**ours).checked(), rest

    def checked(self) -> Preprocessing:
        """These options, checked; a custom padding frame is cast to the frame dtype.

        Raises:
            ValueError: an option out of range or of the wrong type, named with what was given.
        """
        for name, minimum in (("noop_max", 0), ("frame_skip", 1), ("stack_size", 1)):
            value = getattr(self, name)
            if not is_int(value) or value < minimum:
                raise ValueError(f"{name}: expected an int >= {minimum}, got {value!r}")
        size = self.screen_size
        sides = size if isinstance(size, tuple) else (size, size)
        if len(sides) != 2 or not all(is_int(side) and side > 0 for side in sides):
            raise ValueError(
                "screen_size: expected a positive int or a (width, height) tuple of positive "
                f"ints, got {size!r}"
            )
        # the ints and flags as Python's own (a numpy int or a truthy value given)
        cast: dict[str, Any] = {
            field.name: _CASTS[str(field.type)](getattr(self, field.name))
            for field in dataclasses.fields(self)
            if str(field.type) in _CASTS
        }
        checked = dataclasses.replace(self, **cast)
        return dataclasses.replace(checked, padding_type=checked._padding())

    @property
    def size(self) -> tuple[int, int]:
        """``screen_size`` as ``(width, height)``."""
        size = self.screen_size
        return (int(size[0]), int(size[1])) if isinstance(size, tuple) else (int(size), int(size))

    @property
    def frame_shape(self) -> tuple[int, ...]:
        """One preprocessed frame's shape, as ``AtariPreprocessing.observation_space``'s."""
        width, height = self.size
        if not self.grayscale_obs:
            return (height, width, 3)
        return (height, width, 1) if self.grayscale_newaxis else (height, width)

    @property
    def frame_dtype(self) -> type:
        return np.float32 if self.scale_obs else np.uint8

    @property
    def frame_space(self) -> gym.spaces.Box:
        """One preprocessed frame's space, as ``AtariPreprocessing.observation_space``."""
        return gym.spaces.Box(
            0, 1.0 if self.scale_obs else 255, self.frame_shape, dtype=self.frame_dtype
        )

    def _padding(self) -> Any:
        """``FrameStackObservation``'s padding: "reset", "zero" or a frame of the frame space."""
        padding = self.padding_type
        if isinstance(padding, str):
            if padding in ("reset", "zero"):
                return padding
            raise ValueError(
                f"padding_type: expected 'reset', 'zero' or a frame of shape {self.frame_shape}, "
                f"got {padding!r}"
            )
        space = self.frame_space
        if padding not in space:
            given = (
                f"an array of shape {padding.shape} and dtype {padding.dtype}"
                if isinstance(padding, np.ndarray)
                else repr(padding)
            )
            raise ValueError(
                f"padding_type: expected 'reset', 'zero' or a frame in {space}, got {given}"
            )
        return np.array(padding, dtype=self.frame_dtype)
