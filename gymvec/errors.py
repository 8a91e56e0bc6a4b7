"""Exceptions raised by gymvec."""

from __future__ import annotations

import functools
import importlib
import multiprocessing
import sys

from gymnasium.error import ClosedEnvironmentError


class WorkerError(RuntimeError):
    """A worker process failed: it raised, died, or did not answer in time.

    ``worker_traceback`` holds the traceback text from inside the worker when there is one
    (the worker raised); it is ``None`` when the worker died without a word (killed,
    segfault) or timed out. When a sub-env (or its factory) raised, the error is also an
    instance of that exception's class where Python allows such a class (see
    ``worker_error``): ``except ValueError`` catches a sub-env's ValueError, as it does with
    gymnasium's ``AsyncVectorEnv``.
    """

    _type_name: tuple[str, str] | None = None  # the worker's exception class (typed ones)

    def __init__(self, message: str, *, worker_index: int | None = None, worker_traceback=None):
        self._unformatted = message  # what __reduce__ rebuilds the error from
        if worker_traceback:
            message = f"{message}\n\n--- traceback in the worker ---\n{worker_traceback}"
        super().__init__(message)
        self.message = message
        self.worker_index = worker_index
        self.worker_traceback = worker_traceback

    def __str__(self) -> str:
        # the message, also where the worker's exception class formats itself otherwise
        # (KeyError quotes it, UnicodeDecodeError and SyntaxError read attributes it lacks)
        return self.message

    def __reduce__(self):
        # typed classes are made at run time: rebuild them by the name of the worker's class
        parts = (self._unformatted, self.worker_index, self.worker_traceback)
        return _rebuild, (*parts, self._type_name)


def _rebuild(message, worker_index, worker_traceback, type_name) -> WorkerError:
    kwargs = {"worker_index": worker_index, "worker_traceback": worker_traceback}
    if type_name is None:
        return WorkerError(message, **kwargs)
    return worker_error(message, type_name=type_name, **kwargs)


def exception_type_name(exc: BaseException) -> tuple[str, str] | None:
    """Where ``exc``'s class lives (module, qualified name), for ``worker_error`` in another
    process; None for what is not an ``Exception`` (an exit, an interrupt)."""
    if not isinstance(exc, Exception):
        return None
    return type(exc).__module__, type(exc).__qualname__


def worker_error(
    message: str,
    *,
    worker_index: int,
    worker_traceback: str | None,
    type_name: tuple[str, str] | None = None,
) -> WorkerError:
    """A WorkerError that is also an instance of the class ``type_name`` names (the
    exception raised in the worker), or a plain one where no such class can be made (the class
    is not importable here, or its instance layout or constructor does not allow it)."""
    kwargs = {"worker_index": worker_index, "worker_traceback": worker_traceback}
    cls = _typed_worker_error(_find_class(type_name)) if type_name else WorkerError
    try:
        error = cls(message, **kwargs)
    except Exception:  # e.g. an exception class whose __new__ wants other arguments
        return WorkerError(message, **kwargs)
    if cls is not WorkerError:
        error._type_name = type_name
    return error


def _find_class(type_name: tuple[str, str]) -> type | None:
    module_name, qualname = type_name
    value: object = sys.modules.get(module_name)
    if value is None:
        try:
            value = importlib.import_module(module_name)
        except Exception:
            return None
    for part in qualname.split("."):
        value = getattr(value, part, None)
    return value if isinstance(value, type) and issubclass(value, Exception) else None


@functools.lru_cache(maxsize=128)
def _typed_worker_error(exc_type: type | None) -> type[WorkerError]:
    if exc_type is None or issubclass(exc_type, WorkerError):
        return WorkerError
    try:
        return type(f"Worker{exc_type.__name__}", (WorkerError, exc_type), {"__module__": __name__})
    except TypeError:  # e.g. OSError's instance layout differs from RuntimeError's
        return WorkerError


class SubEnvTimeoutError(multiprocessing.TimeoutError, TimeoutError):
    """A step, reset or request outlasted its timeout; ``busy`` names what still ran then:
    ``[(worker index, pid, sub-env indices)]``.

    A ``TimeoutError``, and the ``multiprocessing.TimeoutError`` that gymnasium's
    ``AsyncVectorEnv`` raises from its waits.
    """

    def __init__(self, message: str, busy: list[tuple[int, int | None, list[int]]] = ()):
        super().__init__(message)
        self.busy = list(busy)


class MainModuleError(WorkerError):
    """Worker processes could not start because the script that builds the env runs it at
    import: spawned workers import the main module again (see ``ProcessExecutor``)."""


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
