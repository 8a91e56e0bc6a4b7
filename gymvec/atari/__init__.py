"""gymvec.atari: Atari games as gymvec blocks (extra ``gymvec[atari]``: ale-py, opencv).

``AtariVectorEnv`` drives ale-py's emulators directly and equals, step for step, gymnasium's
``SyncVectorEnv`` over ``FrameStackObservation(AtariPreprocessing(gym.make(id, frameskip=1)))``;
``make_vec`` and ``make_env`` run one such block per worker process.
"""

from __future__ import annotations

try:
    import ale_py  # noqa: F401
    import cv2  # noqa: F401
except ImportError as error:  # say which extra brings them
    raise ImportError(
        f"gymvec.atari needs ale-py and opencv ({error.name} is missing): "
        'pip install "gymvec[atari]"'
    ) from error

from gymvec.atari.make import make_env, make_vec
from gymvec.atari.vector_env import AtariVectorEnv

__all__ = ["AtariVectorEnv", "make_env", "make_vec"]
