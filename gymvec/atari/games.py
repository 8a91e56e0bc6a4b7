"""The emulators of an Atari block: one ``ale_py.ALEInterface`` per game, driven as
``AtariPreprocessing(gym.make(id, frameskip=1))`` drives ``ale_py.env.AtariEnv``, reading the
screen only at the frames that the wrapper reads it."""

from __future__ import annotations

from typing import Any

import ale_py
import numpy as np
from gymnasium.utils import seeding

from gymvec.atari.config import AtariConfig

# AtariEnv's info entries, read from each game's ALEInterface (see AtariGames.info)
_INFO_GETTERS = {
    "lives": ale_py.ALEInterface.lives,
    "episode_frame_number": ale_py.ALEInterface.getEpisodeFrameNumber,
    "frame_number": ale_py.ALEInterface.getFrameNumber,
}


class AtariGames:
    """``num_games`` ALE games with ``AtariEnv``'s seeding, ``TimeLimit``'s step count and
    ``AtariPreprocessing``'s noop resets, frame skipping and screen reads.

    Screens go into the arrays given to :meth:`attach` (the wrapper's ``obs_buffer[0]`` and
    ``[1]`` of every game, stacked vertically), so that the caller pools and resizes them all at
    once.
    """

    def __init__(self, config: AtariConfig, num_games: int):
        self.config = config
        self.num_games = num_games
        self.ales: list[ale_py.ALEInterface] = []
        self.np_randoms: list[np.random.Generator] = []
        self.buffers: list[tuple[np.ndarray, np.ndarray]] = []
        self.lives = np.zeros(num_games, dtype=np.int64)  # AtariPreprocessing.lives
        self.elapsed = np.zeros(num_games, dtype=np.int64)  # TimeLimit._elapsed_steps
        ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
        for _ in range(num_games):
            ale = ale_py.ALEInterface()
            ale.setFloat("repeat_action_probability", config.repeat_action_probability)
            if config.max_num_frames_per_episode is not None:
                ale.setInt("max_num_frames_per_episode", config.max_num_frames_per_episode)
            ale.setBool("sound_obs", False)
            self.ales.append(ale)
            self.np_randoms.append(self._seed(ale, None))
            self._load(ale)
        ale = self.ales[0]
        actions = ale.getLegalActionSet() if config.full_action_space else ale.getMinimalActionSet()
        self.action_set = [a.value for a in actions]
        self.action_meanings = [ale_py.Action(a).name for a in self.action_set]
        noop_max = config.preprocessing.noop_max
        if noop_max > 0 and self.action_meanings[0] != "NOOP":
            raise ValueError(
                f"noop_max: {noop_max} > 0 needs action 0 to be NOOP, but {config.env_id}'s "
                f"first action is {self.action_meanings[0]}"
            )
        self.screen_height, self.screen_width = ale.getScreenDims()

    def attach(self, screens: list[np.ndarray]) -> None:
        """Read the screens into ``screens[k]`` (``obs_buffer[k]``): every game's, one under
        the other."""
        height = self.screen_height
        self.buffers = [
            (screens[0][i * height : (i + 1) * height], screens[1][i * height : (i + 1) * height])
            for i in range(self.num_games)
        ]

    # ---- AtariEnv --------------------------------------------------------------------------
    def _seed(self, ale: ale_py.ALEInterface, seed: int | None) -> np.random.Generator:
        """``AtariEnv.seed_game``: the noop RNG and ALE's RNG (sticky actions) from one seed."""
        np_seed, ale_seed = np.random.SeedSequence(seed).generate_state(n_words=2)
        ale.setInt("random_seed", int(np.int32(ale_seed)))  # AtariEnv's wrap to int32
        return seeding.np_random(int(np_seed))[0]

    def _load(self, ale: ale_py.ALEInterface) -> None:
        """``AtariEnv.load_game``: a ROM load starts the emulator afresh from the seed."""
        try:
            ale.loadROM(self.config.rom_path)
            if self.config.mode is not None:
                ale.setMode(self.config.mode)
            if self.config.difficulty is not None:
                ale.setDifficulty(self.config.difficulty)
        except RuntimeError as error:
            raise ValueError(f"{self.config.env_id}: {error}") from error

    def _env_reset(self, i: int, seed: int | None) -> None:
        """``TimeLimit(AtariEnv).reset(seed=seed)``."""
        ale = self.ales[i]
        if seed is not None:
            self.np_randoms[i] = self._seed(ale, seed)
            self._load(ale)
        ale.reset_game()
        self.elapsed[i] = 0

    # ---- AtariPreprocessing ----------------------------------------------------------------
    def reset(self, i: int, seed: int | None) -> dict[str, Any]:
        """``AtariPreprocessing.reset`` of game ``i``: a reset, then 1 to ``noop_max`` noops
        drawn from the game's RNG; a noop that ends the game resets it with the same seed.
        Returns the info that the wrapper returns."""
        config, ale = self.config, self.ales[i]
        self._env_reset(i, seed)
        noop_max = config.preprocessing.noop_max
        noops = int(self.np_randoms[i].integers(1, noop_max + 1)) if noop_max else 0
        limit = config.max_episode_steps
        noop = self.action_set[0]
        for _ in range(noops):
            ale.act(noop)
            self.elapsed[i] += 1
            if ale.game_over(with_truncation=True) or (
                limit is not None and self.elapsed[i] >= limit
            ):
                self._env_reset(i, seed)
        self.lives[i] = ale.lives()
        buffer0, buffer1 = self.buffers[i]
        self._read(ale, buffer0)
        buffer1.fill(0)
        info: dict[str, Any] = {}
        if seed is not None:
            # AtariEnv.reset's info names the seeds it derived (the last reset's: same seed)
            info["seeds"] = tuple(np.random.SeedSequence(seed).generate_state(n_words=2))
        return info

    def _read(self, ale: ale_py.ALEInterface, out: np.ndarray) -> None:
        if self.config.preprocessing.grayscale_obs:
            ale.getScreenGrayscale(out)
        else:
            ale.getScreenRGB(out)

    def step(
        self,
        rows: list[int],
        actions: np.ndarray,
        rewards: np.ndarray,
        terminations: np.ndarray,
        truncations: np.ndarray,
    ) -> None:
        """``AtariPreprocessing.step`` of the games ``rows``: ``frame_skip`` frames of the
        action, summing rewards, stopping at the frame that ends the episode (before reading
        its screen: the wrapper's stale-buffer quirk). Writes ``rewards[i]``,
        ``terminations[i]`` and ``truncations[i]`` of each row ``i``."""
        config = self.config
        skip = config.preprocessing.frame_skip
        limit = config.max_episode_steps
        life_loss = config.preprocessing.terminal_on_life_loss
        action_set, ales, buffers = self.action_set, self.ales, self.buffers
        gray = config.preprocessing.grayscale_obs
        last, second_last = skip - 1, skip - 2
        for i in rows:
            ale = ales[i]
            act, game_over = ale.act, ale.game_over
            action = action_set[actions[i]]
            read = ale.getScreenGrayscale if gray else ale.getScreenRGB
            buffer0, buffer1 = buffers[i]
            reward = 0.0
            terminated = truncated = False
            for t in range(skip):
                reward += act(action)
                if limit is not None:
                    self.elapsed[i] += 1
                if life_loss:
                    new_lives = ale.lives()
                    lost = new_lives < self.lives[i]
                    self.lives[i] = new_lives
                else:
                    lost = False
                # one call per frame in the common case: game_over() covers both flags
                if lost or game_over() or (limit is not None and self.elapsed[i] >= limit):
                    terminated = lost or game_over(with_truncation=False)
                    truncated = ale.game_truncated() or (
                        limit is not None and bool(self.elapsed[i] >= limit)
                    )
                    if terminated or truncated:
                        break
                if t == second_last:
                    read(buffer1)
                elif t == last:
                    read(buffer0)
            rewards[i] = reward
            terminations[i] = terminated
            truncations[i] = truncated

    def info(self, key: str) -> np.ndarray:
        """``AtariEnv``'s info ``key`` ("lives", "episode_frame_number", "frame_number") of
        every game, as int64 (the dtype SyncVectorEnv gives Python ints)."""
        getter = _INFO_GETTERS[key]
        return np.fromiter((getter(ale) for ale in self.ales), dtype=np.int64, count=self.num_games)

    def screen_rgb(self, i: int) -> np.ndarray:
        return self.ales[i].getScreenRGB()
