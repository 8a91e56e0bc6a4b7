"""Exceptions raised by gymvec."""

from __future__ import annotations

from gymnasium.error import ClosedEnvironmentError


class WorkerError(RuntimeError):
    """A worker process failed: it raised, died, or did not answer in time.

    ``worker_traceback`` holds the traceback text from inside the worker when there is one
    (the worker raised); it is ``None`` when the worker died without a word (killed,
    segfault) or timed out.
    """

    def __init__(self, message: str, *, worker_index: int | None = None, worker_traceback=None):
        if worker_traceback:
            message = f"{message}\n\n--- traceback in the worker ---\n{worker_traceback}"
        super().__init__(message)
        self.worker_index = worker_index
        self.worker_traceback = worker_traceback


class ClosedEnvError(ClosedEnvironmentError):
    """The environment was used after ``close()``."""


class SpaceMismatchError(ValueError, RuntimeError):
    """Sub-envs of one batch whose observations or actions differ in keys, shapes or dtypes.

    A ``ValueError`` for gymvec's batched envs, and the ``RuntimeError`` that gymnasium's
    vector envs raise for mismatched sub-env spaces. ``kind`` says which: "observation" or
    "action" (None when not known).
    """

    def __init__(self, message: str, *, kind: str | None = None):
        super().__init__(message)
        self.kind = kind


class UnsupportedSpaceError(TypeError, ValueError):
    """A space whose values have no fixed shape and dtype (Text, Graph, Sequence, OneOf and
    custom spaces): gymvec's fixed buffers cannot hold them.

    A ``TypeError`` in the words that gymnasium's ``AsyncVectorEnv(shared_memory=True)`` uses
    for such spaces (code that tells the case by them keeps working), and the ``ValueError``
    that the same class raises for custom spaces.
    """
