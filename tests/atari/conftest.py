"""Atari tests run only where ale-py and opencv are installed (``gymvec[atari]``)."""

from __future__ import annotations

import os
import sys

import pytest

pytest.importorskip("ale_py")
pytest.importorskip("cv2")

sys.path.insert(0, os.path.dirname(__file__))  # _reference
