"""``AtariVectorEnv``: ``num_envs`` Atari games as one gymnasium ``VectorEnv``, equal step for
step to ``SyncVectorEnv`` over ``FrameStackObservation(AtariPreprocessing(gym.make(id,
frameskip=1)))``, driving ale-py's ``ALEInterface`` directly."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from gymvec.atari.config import AtariConfig
from gymvec.atari.frames import FrameStacks
from gymvec.atari.games import AtariGames
from gymvec.atari.preprocessing import Preprocessing
from gymvec.common.reprs import never_raises
from gymvec.common.vector_reset import check_reset_mask
from gymvec.errors import ClosedEnvError
from gymvec.options import parse_autoreset_mode
from gymvec.subenvs.probe import expand_seeds

INFO_KEYS = ("lives", "episode_frame_number", "frame_number")


class AtariVectorEnv(gym.vector.VectorEnv):
    """``num_envs`` ALE games, preprocessed and frame-stacked, as a gymnasium ``VectorEnv``.

    With the same seeds it equals ``SyncVectorEnv([lambda: FrameStackObservation(
    AtariPreprocessing(gym.make(env_id, frameskip=1, **make_kwargs), noop_max=...,
    frame_skip=..., ...), stack_size, padding_type=padding_type)] * num_envs,
    autoreset_mode=autoreset_mode)``: observations, rewards, terminations, truncations and the
    infos ``lives``, ``episode_frame_number``, ``frame_number`` (and ``seeds`` after a seeded
    reset), in all three autoreset modes. ``reset(seed=s)`` seeds game ``i`` with ``s + i``.

    It reads the screen only at the two frames of a step that the wrapper reads, pools and
    resizes every game's frame in one call each, and shifts the frame stacks of all games at
    once: the only per-game Python work left is the emulator's ``act`` loop.

    Args:
        env_id: a registered ALE id (``"ALE/Pong-v5"``, ``"PongNoFrameskip-v4"``...).
        num_envs: the number of games.
        autoreset_mode: a gymnasium ``AutoresetMode``, its value, or "next_step",
            "same_step", "disabled".
        copy: return observations that the env never writes again (as ``SyncVectorEnv``'s
            ``copy``); False returns the env's own stack array, valid until the next call.
        **options: :class:`~gymvec.atari.preprocessing.Preprocessing`'s keywords (``noop_max``,
            ``frame_skip``, ``screen_size``, ``terminal_on_life_loss``, ``grayscale_obs``,
            ``grayscale_newaxis``, ``scale_obs`` as ``AtariPreprocessing``'s; ``stack_size``,
            ``padding_type`` as ``FrameStackObservation``'s; gymnasium's defaults) and
            ``gym.make``'s for the id (``repeat_action_probability``, ``full_action_space``,
            ``mode``, ``difficulty``, ``max_num_frames_per_episode``, ``max_episode_steps``,
            ``obs_type``, ``render_mode="rgb_array"``).

    Raises:
        ValueError: an unknown id (naming close ones), a ROM ale-py lacks, an invalid option or
            one the block cannot equal (``frameskip``, ``continuous``, ``sound_obs``,
            ``obs_type="ram"``, ``render_mode="human"``), each named.
    """

    @Preprocessing.in_signature
    def __init__(
        self,
        env_id: str,
        num_envs: int = 1,
        *,
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        copy: bool = True,
        **options: Any,
    ):
        if isinstance(num_envs, bool) or not isinstance(num_envs, int | np.integer) or num_envs < 1:
            raise ValueError(f"num_envs: expected a positive int, got {num_envs!r}")
        self.autoreset_mode = parse_autoreset_mode(autoreset_mode)
        self.config = AtariConfig.build(env_id, **options)
        self.num_envs = n = int(num_envs)
        self.copy = copy
        self.render_mode = self.config.render_mode
        self.metadata = {
            "render_modes": ["rgb_array"],
            "render_fps": 30,
            "autoreset_mode": self.autoreset_mode,
        }
        self.games = AtariGames(self.config, n)
        self.frames = FrameStacks(self.config, n, self.games.screen_height, self.games.screen_width)
        self.games.attach(self.frames.screens)

        preprocessing = self.config.preprocessing
        self.single_observation_space = batch_space(
            preprocessing.frame_space, preprocessing.stack_size
        )
        self.num_actions = len(self.games.action_set)
        self.single_action_space = gym.spaces.Discrete(self.num_actions)
        self.observation_space = batch_space(self.single_observation_space, n)
        self.action_space = batch_space(self.single_action_space, n)

        self._rewards = np.zeros(n, dtype=np.float64)
        self._terminations = np.zeros(n, dtype=np.bool_)
        self._truncations = np.zeros(n, dtype=np.bool_)
        self._autoreset = np.zeros(n, dtype=np.bool_)  # finished at the last step

    # ---- reset ------------------------------------------------------------------------------
    def reset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset every game, or those of ``options["reset_mask"]``; game ``i`` is seeded
        ``seed + i`` (or ``seed[i]``), as ``SyncVectorEnv`` seeds its sub-envs."""
        self._check_open()
        n = self.num_envs
        seeds = expand_seeds(seed, n) or [None] * n
        if options is not None and not isinstance(options, Mapping):
            raise TypeError(f"options: expected a dict or None, got {options!r}")
        if isinstance(seed, int):
            super().reset(seed=seed)
        mask = None
        if options is not None and "reset_mask" in options:
            mask = check_reset_mask(options["reset_mask"], n)
        rows = np.arange(n) if mask is None else np.flatnonzero(mask)
        if mask is None:
            self._terminations[:] = False
            self._truncations[:] = False
            self._autoreset[:] = False
        else:
            self._terminations[mask] = False
            self._truncations[mask] = False
            self._autoreset[mask] = False
        seeds_info = [self.games.reset(int(i), seeds[i]) for i in rows]
        reset = np.zeros(n, dtype=np.bool_)
        reset[rows] = True
        frames = self.frames.frames()
        self.frames.push(frames, reset, stepped=np.zeros(n, dtype=np.bool_))
        infos = self._infos(reset)
        if any(seeds_info):
            values = np.full(n, None, dtype=object)
            has = np.zeros(n, dtype=np.bool_)
            for i, info in zip(rows, seeds_info):
                if info:
                    values[i], has[i] = info["seeds"], True
            infos["seeds"], infos["_seeds"] = values, has
        return self._observations(), infos

    # ---- step -------------------------------------------------------------------------------
    def step(
        self, actions: Any
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every game (under NEXT_STEP, reset the games that finished at the last step;
        under SAME_STEP, reset those that finish now, their last observation and info in
        ``final_obs`` and ``final_info``)."""
        self._check_open()
        n = self.num_envs
        actions = np.asarray(actions)
        if actions.shape != (n,) or not np.issubdtype(actions.dtype, np.integer):
            raise ValueError(
                f"actions: expected {n} integer actions (shape ({n},)), got {actions!r}"
            )
        if actions.min() < 0 or actions.max() >= self.num_actions:
            raise ValueError(f"actions: expected values in [0, {self.num_actions}), got {actions}")
        mode = self.autoreset_mode
        reset = self._autoreset.copy() if mode == AutoresetMode.NEXT_STEP else None
        if mode == AutoresetMode.DISABLED and self._autoreset.any():
            raise ValueError(
                f"games {np.flatnonzero(self._autoreset).tolist()} finished and autoreset_mode "
                "is DISABLED: reset them with reset(options={'reset_mask': mask}) before stepping"
            )
        if reset is not None and reset.any():
            stepped_rows = np.flatnonzero(~reset).tolist()
            for i in np.flatnonzero(reset):
                self.games.reset(int(i), None)
            self._rewards[reset] = 0.0
            self._terminations[reset] = False
            self._truncations[reset] = False
            stepped: np.ndarray | None = ~reset
        else:
            stepped_rows = list(range(n))
            stepped = None
        self.games.step(stepped_rows, actions, self._rewards, self._terminations, self._truncations)
        frames = self.frames.frames()
        self.frames.push(frames, reset, stepped)
        done = self._terminations | self._truncations
        infos: dict[str, Any] = {}
        if mode == AutoresetMode.SAME_STEP and done.any():
            infos = self._final(done)
            for i in np.flatnonzero(done):
                self.games.reset(int(i), None)
            frames = self.frames.frames()
            self.frames.push(frames, done, stepped=np.zeros(n, dtype=np.bool_))
        infos.update(self._infos(np.ones(n, dtype=np.bool_)))
        self._autoreset = done
        return (
            self._observations(),
            self._rewards.copy(),
            self._terminations.copy(),
            self._truncations.copy(),
            infos,
        )

    def _final(self, done: np.ndarray) -> dict[str, Any]:
        """SAME_STEP's ``final_obs`` and ``final_info`` of the games ``done``."""
        n = self.num_envs
        final_obs = np.full(n, None, dtype=object)
        for i in np.flatnonzero(done):
            final_obs[i] = self.frames.stacks[i].copy()
        return {
            "final_obs": final_obs,
            "_final_obs": done.copy(),
            "final_info": self._infos(done),
            "_final_info": done.copy(),
        }

    def _infos(self, rows: np.ndarray) -> dict[str, Any]:
        """The infos of the games ``rows`` (zeros elsewhere, masked out), as SyncVectorEnv
        lays them out."""
        infos: dict[str, Any] = {}
        every = rows.all()
        for key in INFO_KEYS:
            values = self.games.info(key)
            if not every:
                values[~rows] = 0
            infos[key], infos[f"_{key}"] = values, rows.copy()
        return infos

    def _observations(self) -> np.ndarray:
        stacks = self.frames.stacks
        return stacks.copy() if self.copy else stacks

    # ---- the rest of the VectorEnv ----------------------------------------------------------
    def render(self) -> tuple[np.ndarray, ...] | None:
        """Every game's RGB screen, as ``SyncVectorEnv.render`` with ``render_mode="rgb_array"``."""
        self._check_open()
        if self.render_mode != "rgb_array":
            return None
        return tuple(self.games.screen_rgb(i) for i in range(self.num_envs))

    def get_action_meanings(self) -> list[str]:
        """The meaning of each action, as ``AtariEnv.get_action_meanings``."""
        return list(self.games.action_meanings)

    def close_extras(self, **kwargs: Any) -> None:
        self.games.ales.clear()

    def _check_open(self) -> None:
        if self.closed:
            raise ClosedEnvError.after_close(self)

    @never_raises
    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config.env_id!r}, num_envs={self.num_envs})"
