"""The frames of an Atari block: every game's two screen buffers stacked vertically, max-pooled
and resized together, and the frame stacks kept in ``FrameStackObservation``'s order."""

from __future__ import annotations

import cv2
import numpy as np

from gymvec.atari.config import AtariConfig
from gymvec.atari.preprocessing import Preprocessing

RESIZE_CHANNELS = 4  # the most channels OpenCV's INTER_AREA resize takes in one call


class FrameStacks:
    """``AtariPreprocessing._get_obs`` and ``FrameStackObservation`` for ``num_games`` games.

    ``screens[k]`` holds every game's ``obs_buffer[k]``, one under the other. One
    ``np.maximum`` pools them all. Gray frames are resized four games at a time, as the
    channels of one image (``cv2.merge``, one ``cv2.resize(..., INTER_AREA)``, ``cv2.split``:
    about 30 us a frame against 40 for one frame alone); RGB frames with one resize of the
    tall image. Each way is taken where it gives the pixels of one resize per game (checked
    once, at construction: INTER_AREA weighs each channel alike, and in the tall image its
    source windows start at each game's first row, as for 210 rows to 84, an exact 2.5).
    """

    def __init__(self, config: AtariConfig, num_games: int, screen_height: int, screen_width: int):
        self.config = config
        self.preprocessing = p = config.preprocessing
        self.num_games = num_games
        self.screen_height = screen_height
        channels = () if p.grayscale_obs else (3,)
        tall = (num_games * screen_height, screen_width, *channels)
        self.screens = [np.zeros(tall, dtype=np.uint8), np.zeros(tall, dtype=np.uint8)]
        width, height = p.size
        self.resized_shape = (num_games, height, width, *channels)
        # gray frames: the games in groups of up to RESIZE_CHANNELS, each group's screens the
        # channels of one image, split back into the games' rows of ``resized``
        self.groups: list[tuple[list[np.ndarray], np.ndarray, np.ndarray, list[np.ndarray]]] = []
        if (
            not channels
            and num_games > 1
            and _channel_resize_is_exact(p, screen_height, screen_width)
        ):
            self.resized = np.empty(self.resized_shape, dtype=np.uint8)
            screens0 = self.screens[0]
            for a in range(0, num_games, RESIZE_CHANNELS):
                b = min(a + RESIZE_CHANNELS, num_games)
                games = [screens0[i * screen_height : (i + 1) * screen_height] for i in range(a, b)]
                merged = np.empty((screen_height, screen_width, b - a), dtype=np.uint8)
                out = np.empty((height, width, b - a), dtype=np.uint8)
                self.groups.append((games, merged, out, [self.resized[i] for i in range(a, b)]))
        # (asked only where the groups do not resize them all)
        self.tall_resize = not self.groups and _tall_resize_is_exact(p, num_games, tall)
        self.stacks: np.ndarray = np.zeros(
            (num_games, p.stack_size, *p.frame_shape), dtype=p.frame_dtype
        )

    def frames(self) -> np.ndarray:
        """Every game's preprocessed frame, from its screen buffers (pooled in place, as the
        wrapper does: a step that reads no screen returns the same frame again)."""
        p = self.preprocessing
        screens0 = self.screens[0]
        if p.frame_skip > 1:
            np.maximum(screens0, self.screens[1], out=screens0)
        width, height = p.size
        if self.groups:
            for games, merged, out, into in self.groups:
                if len(games) == 1:
                    cv2.resize(games[0], (width, height), into[0], interpolation=cv2.INTER_AREA)
                    continue
                cv2.merge(games, merged)
                cv2.resize(merged, (width, height), out, interpolation=cv2.INTER_AREA)
                cv2.split(out, into)
            resized = self.resized
        elif self.tall_resize:
            resized = cv2.resize(
                screens0, (width, height * self.num_games), interpolation=cv2.INTER_AREA
            ).reshape(self.resized_shape)
        else:
            rows = self.screen_height
            resized = np.stack(
                [
                    cv2.resize(
                        screens0[i * rows : (i + 1) * rows],
                        (width, height),
                        interpolation=cv2.INTER_AREA,
                    )
                    for i in range(self.num_games)
                ]
            ).reshape(self.resized_shape)
        if p.scale_obs:
            resized = resized.astype(np.float32) / 255.0
        return resized.reshape(self.num_games, *p.frame_shape)

    def push(
        self, frames: np.ndarray, reset: np.ndarray | None, stepped: np.ndarray | None
    ) -> None:
        """A new stack array: the games of ``stepped`` (all if None) drop their oldest frame and
        add their new one, the games of ``reset`` start from the padding and their new frame,
        the others keep theirs. A new array each time, so that an array handed out earlier is
        never written again."""
        old = self.stacks
        new = np.empty_like(old)
        if stepped is None:
            new[:, :-1] = old[:, 1:]
            new[:, -1] = frames
        else:
            new[:] = old
            new[stepped, :-1] = old[stepped, 1:]
            new[stepped, -1] = frames[stepped]
        if reset is not None and reset.any():
            padding = self.preprocessing.padding_type  # "reset", "zero" or a frame
            if isinstance(padding, np.ndarray):
                new[reset, :-1] = padding
            elif padding == "reset":
                new[reset, :-1] = frames[reset][:, None]
            else:
                new[reset, :-1] = 0
            new[reset, -1] = frames[reset]
        self.stacks = new


def _channel_resize_is_exact(
    preprocessing: Preprocessing, screen_height: int, screen_width: int
) -> bool:
    """Whether the resize of up to RESIZE_CHANNELS gray screens as the channels of one image
    gives, pixel for pixel, one resize per screen (checked on random screens; an OpenCV
    that refuses so many channels: no)."""
    width, height = preprocessing.size
    rng = np.random.default_rng(0)
    shape = (screen_height, screen_width)
    for channels in range(2, RESIZE_CHANNELS + 1):
        screens = rng.integers(0, 256, size=(channels, *shape), dtype=np.uint8)
        try:
            together = cv2.resize(
                cv2.merge(list(screens)), (width, height), interpolation=cv2.INTER_AREA
            )
        except cv2.error:
            return False
        for k in range(channels):
            alone = cv2.resize(screens[k], (width, height), interpolation=cv2.INTER_AREA)
            if not np.array_equal(together[..., k], alone):
                return False
    return True


def _tall_resize_is_exact(
    preprocessing: Preprocessing, num_games: int, tall: tuple[int, ...]
) -> bool:
    """Whether one resize of the stacked screens gives, pixel for pixel, one resize per game
    (checked on random screens, whose pixels make any difference in INTER_AREA's weights
    show)."""
    if num_games == 1:
        return True
    width, height = preprocessing.size
    screen_height = tall[0] // num_games
    screens = np.random.default_rng(0).integers(0, 256, size=tall, dtype=np.uint8)
    together = cv2.resize(screens, (width, height * num_games), interpolation=cv2.INTER_AREA)
    for i in range(num_games):
        alone = cv2.resize(
            screens[i * screen_height : (i + 1) * screen_height],
            (width, height),
            interpolation=cv2.INTER_AREA,
        )
        if not np.array_equal(together[i * height : (i + 1) * height], alone):
            return False
    return True
