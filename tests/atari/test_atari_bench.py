"""The ``atari-8`` bench case: its references' pixel work is the wrappers' own, and a quick
run of gymvec.atari beside SyncVectorEnv and both emulator limits fills the x sync column and
ends in a verdict that names them."""

from __future__ import annotations

import subprocess
import sys

import cv2
import numpy as np
import pytest

from gymvec.bench.runners.atari import SCREEN, reference_frames

pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize("num_games", [1, 3, 4, 6])
def test_the_resize_references_pixels_are_one_resize_per_game(num_games):
    rng = np.random.default_rng(num_games)
    pixels = reference_frames(num_games)
    for screens in pixels.screens:
        screens[...] = rng.integers(0, 256, screens.shape, dtype=np.uint8)
    h = SCREEN[0]
    pooled = np.maximum(pixels.screens[0], pixels.screens[1])
    frames = pixels.frames()
    assert frames.shape == (num_games, 84, 84)
    for i in range(num_games):
        want = cv2.resize(pooled[i * h : (i + 1) * h], (84, 84), interpolation=cv2.INTER_AREA)
        np.testing.assert_array_equal(frames[i], want, err_msg=f"game {i}")


def test_quick_atari_case_reports_sync_and_both_limits():
    backends = "atari-gym-sync,atari-gymvec,atari-emulator,atari-emulator-resize"
    command = [sys.executable, "-m", "gymvec.bench", "--case", "atari-8", "--quick"]
    command += ["--strict", "--no-progress", "--backends", backends]
    result = subprocess.run(command, capture_output=True, text=True, timeout=280)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = [line.split() for line in result.stdout.splitlines() if line.startswith("atari-8 ")]
    assert [row[1] for row in rows] == backends.split(",")
    assert all(float(row[4]) > 0 for row in rows)  # the x sync column, filled
    verdict = " ".join(result.stdout.split("compare):")[1].split())
    assert verdict.startswith("atari-8, gymvec.atari (atari-gymvec, ")
    assert "x SyncVectorEnv (atari-gym-sync); " in verdict
    assert "x the emulator driven from Python (atari-emulator)" in verdict
    assert "x the emulator and the resize driven from Python (atari-emulator-resize)" in verdict
