"""The ``atari-8`` bench case: its references' pixel work is the wrappers' own, and a quick
run of gymvec.atari beside both emulator limits ends in a verdict that names them."""

from __future__ import annotations

import subprocess
import sys

import cv2
import numpy as np
import pytest

from gymvec.bench.runners.atari import _PixelWork

pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize("num_games", [1, 3, 4, 6])
def test_the_resize_references_pixels_are_one_resize_per_game(num_games):
    rng = np.random.default_rng(num_games)
    screens = rng.integers(0, 256, (2, num_games, 210, 160), dtype=np.uint8)
    pooled = np.maximum(screens[0], screens[1])
    work = _PixelWork(screens, num_games)
    work.run()
    for i in range(num_games):
        want = cv2.resize(pooled[i], (84, 84), interpolation=cv2.INTER_AREA)
        np.testing.assert_array_equal(work.resized[i], want, err_msg=f"game {i}")


def test_quick_atari_case_reports_both_limits():
    backends = "atari-gymvec,atari-emulator,atari-emulator-resize"
    command = [sys.executable, "-m", "gymvec.bench", "--case", "atari-8", "--quick"]
    command += ["--strict", "--no-progress", "--backends", backends]
    result = subprocess.run(command, capture_output=True, text=True, timeout=280)
    assert result.returncode == 0, result.stdout + result.stderr
    verdict = " ".join(result.stdout[result.stdout.index("atari-8 verdict") :].split())
    assert "of the emulator alone" in verdict
    assert "of the emulator and the resize alone" in verdict
