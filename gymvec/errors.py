"""Exceptions raised by gymvec."""

from __future__ import annotations

import functools
import importlib
import multiprocessing
import sys
import traceback
from collections.abc import Sequence
from typing import Any, NamedTuple, TypeVar

from gymnasium.error import ClosedEnvironmentError


class ErrorDetail(NamedTuple):
    """What one process tells another of an exception raised where its sub-envs run: the
    exception's one-line summary (``"ValueError: boom"``), its traceback text, where its class
    lives (module, qualified name; None for what is not an ``Exception``), and the index of
    the sub-env that raised it (None when no sub-env is to blame: a worker's own failure)."""

    summary: str
    traceback: str
    type_name: tuple[str, str] | None
    sub_env: int | None = None


def error_detail(exc: BaseException, sub_env: int | None = None) -> ErrorDetail:
    """The :class:`ErrorDetail` of ``exc``; a ``WorkerError`` passes its own on (the traceback
    of the process its sub-env ran in), with ``sub_env`` where it names none."""
    if isinstance(exc, WorkerError) and exc.detail is not None:
        detail = exc.detail
        return detail if detail.sub_env is not None else detail._replace(sub_env=sub_env)
    lines = traceback.format_exception_only(type(exc), exc)
    summary = lines[-1].strip() if lines else type(exc).__name__
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return ErrorDetail(summary, text, exception_type_name(exc), sub_env)


class WorkerError(RuntimeError):
    """A sub-env raised, or a worker failed: it died, or did not answer in time.

    The one shape of a sub-env's exception, wherever the sub-env ran (the calling process, a
    worker process, a Ray actor) and whatever raised it (a step, a reset, a request such as
    ``call``/``get_attr``): the error is also an instance of the sub-env's exception class
    where Python allows such a class (see :func:`worker_error`), so ``except ValueError``
    catches a sub-env's ValueError, as it does with gymnasium's vector envs. ``str(error)``
    names the sub-env and the worker, then gives the original traceback.

    Attributes: ``sub_env_index`` (the sub-env that raised; None when none is to blame),
    ``worker_index``, ``worker_traceback`` (the traceback text from where the sub-env ran;
    None when the worker died without a word, or timed out), ``detail`` (an
    :class:`ErrorDetail`, or None).
    """

    _type_name: tuple[str, str] | None = None  # the sub-env's exception class (typed ones)

    def __init__(
        self,
        message: str,
        *,
        worker_index: int | None = None,
        worker_traceback: str | None = None,
        sub_env_index: int | None = None,
        detail: ErrorDetail | None = None,
    ):
        self._unformatted = message  # what __reduce__ rebuilds the error from
        if worker_traceback:
            message = f"{message}\n\n--- traceback where the sub-env ran ---\n{worker_traceback}"
        super().__init__(message)
        self.message = message
        self.worker_index = worker_index
        self.worker_traceback = worker_traceback
        self.sub_env_index = sub_env_index
        self.detail = detail

    def __str__(self) -> str:
        # the message, also where the worker's exception class formats itself otherwise
        # (KeyError quotes it, UnicodeDecodeError and SyntaxError read attributes it lacks)
        return self.message

    def __reduce__(self) -> tuple[Any, tuple]:
        # typed classes are made at run time: rebuild them by the name of the sub-env's class
        parts = (self._unformatted, self.worker_index, self.worker_traceback)
        return _rebuild, (*parts, self._type_name, self.sub_env_index, self.detail)


def _rebuild(
    message: str,
    worker_index: int | None,
    worker_traceback: str | None,
    type_name: tuple[str, str] | None,
    sub_env_index: int | None = None,
    detail: ErrorDetail | None = None,
) -> WorkerError:
    return worker_error(
        message,
        worker_index=worker_index,
        worker_traceback=worker_traceback,
        type_name=type_name,
        sub_env_index=sub_env_index,
        detail=detail,
    )


def exception_type_name(exc: BaseException) -> tuple[str, str] | None:
    """Where ``exc``'s class lives (module, qualified name), for ``worker_error`` in another
    process; None for what is not an ``Exception`` (an exit, an interrupt)."""
    if not isinstance(exc, Exception):
        return None
    return type(exc).__module__, type(exc).__qualname__


def worker_error(
    message: str,
    *,
    worker_index: int | None,
    worker_traceback: str | None,
    type_name: tuple[str, str] | None = None,
    sub_env_index: int | None = None,
    detail: ErrorDetail | None = None,
    exc_type: type | None = None,
) -> WorkerError:
    """A WorkerError that is also an instance of ``exc_type`` (or of the class ``type_name``
    names: the exception raised where the sub-env ran), or a plain one where no such class can
    be made (the class is not importable here, or its instance layout or constructor does not
    allow it)."""
    kwargs: dict[str, Any] = {
        "worker_index": worker_index,
        "worker_traceback": worker_traceback,
        "sub_env_index": sub_env_index,
        "detail": detail,
    }
    if exc_type is None and type_name is not None:
        exc_type = _find_class(type_name)
    cls = _typed_worker_error(exc_type)
    try:
        error = cls(message, **kwargs)
    except Exception:  # e.g. an exception class whose __new__ wants other arguments
        return WorkerError(message, **kwargs)
    if cls is not WorkerError and exc_type is not None:
        error._type_name = (exc_type.__module__, exc_type.__qualname__)
    return error


def sub_env_error(
    detail: ErrorDetail,
    *,
    worker_index: int | None,
    where: str,
    what: str = "",
    exc_type: type | None = None,
) -> WorkerError:
    """The error for an exception raised where sub-envs run, as the caller sees it: it names
    the sub-env and the worker (``where``: "worker 1, pid 4242", say; ``what``: the call that
    raised, where it is not the usual one: "create_env_fn"), then the summary and traceback of
    the original. ``exc_type``: the original's class, where it is at hand (else it is found
    by ``detail.type_name``)."""
    who = f"sub-env {detail.sub_env} ({where})" if detail.sub_env is not None else where
    return worker_error(
        f"{who}: {what} raised {detail.summary}" if what else f"{who} raised {detail.summary}",
        worker_index=worker_index,
        worker_traceback=detail.traceback,
        type_name=detail.type_name,
        sub_env_index=detail.sub_env,
        detail=detail,
        exc_type=exc_type,
    )


def local_sub_env_error(
    exc: Exception, sub_env: int | None, *, worker_index: int | None, where: str, what: str = ""
) -> WorkerError:
    """:func:`sub_env_error` for an exception raised in this process, whose class is at hand
    (also one that no import reaches: a class defined in a function, say)."""
    exc_type = None if isinstance(exc, WorkerError) else type(exc)
    return sub_env_error(
        error_detail(exc, sub_env),
        worker_index=worker_index,
        where=where,
        what=what,
        exc_type=exc_type,
    )


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
    """The WorkerError class that is also an ``exc_type`` (one per class: made once)."""
    if exc_type is None or issubclass(exc_type, WorkerError) or not issubclass(exc_type, Exception):
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

    def __init__(self, message: str, busy: Sequence[tuple[int, int | None, list[int]]] = ()):
        super().__init__(message)
        self.busy = list(busy)


class MainModuleError(WorkerError):
    """Worker processes could not start because the script that builds the env runs it at
    import: spawned workers import the main module again (see ``ProcessExecutor``)."""


class ClosedEnvError(ClosedEnvironmentError):
    """The environment was used after ``close()``: raised by every gymvec env, and also the
    ``gymnasium.error.ClosedEnvironmentError`` that gymnasium's vector envs raise."""

    @classmethod
    def after_close(cls, env: object) -> ClosedEnvError:
        """The error of a call on the vector env ``env`` after its ``close()``, in the words of
        gymnasium's vector envs."""
        return cls(f"Trying to operate on `{type(env).__name__}`, after a call to `close()`.")


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


_T = TypeVar("_T")


def expect_set(value: _T | None, what: str) -> _T:
    """``value``, which an earlier step of the same call has set (``what`` says which); a
    RuntimeError naming it if not: a gymvec bug, never the caller's."""
    if value is None:
        raise RuntimeError(f"gymvec internal error: {what} is not set")
    return value


def rows_text(rows: Sequence[int]) -> str:
    """Sub-env indices for a message, a run of more than two as ``a-b``."""
    rows = list(rows)
    if len(rows) > 2 and rows == list(range(rows[0], rows[-1] + 1)):
        return f"{rows[0]}-{rows[-1]}"
    return ", ".join(map(str, rows))
