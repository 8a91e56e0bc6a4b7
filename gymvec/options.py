"""Options of gymvec's envs, resolved in one place: worker processes, autoreset modes, and the
keyword arguments a constructor does not take.

Every constructor that starts worker processes (``ParallelEnv``, ``ParallelVectorEnv``,
``make_vec``, ``RayEnv``'s actors) resolves its process options through
:func:`process_options`, with the defaults of its side (:data:`GYMNASIUM_FACE` or
:data:`TENSORDICT_API`); docs/options.md gives each default's reason. Torch-free: worker
processes and the drop-ins import it.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import inspect
from collections.abc import Callable, Iterable
from typing import Any, ParamSpec, TypeVar

from gymnasium.vector import AutoresetMode

from gymvec.backends.processes.executor import (
    ProcessOptions,
    check_start_method,
    check_timeout,
    default_start_method,
)
from gymvec.common.cores import usable_cores

P = ParamSpec("P")
R = TypeVar("R")


@dataclasses.dataclass(frozen=True)
class Defaults:
    """The process defaults of one side of gymvec (see docs/options.md for their reasons).

    ``start_method``: None for multiprocessing's default; ``local_worker``: None to decide by
    the cores (see :func:`default_local_worker`).
    """

    daemon: bool
    start_method: str | None
    local_worker: bool | None


# gymnasium's AsyncVectorEnv defaults (daemonic workers, multiprocessing's start method);
# the calling process steps a share where that wins (see default_local_worker).
GYMNASIUM_FACE = Defaults(daemon=True, start_method=None, local_worker=None)
# torchrl's ParallelEnv defaults but for the start method: non-daemonic workers (sub-envs may
# start processes of their own); every sub-env in a worker process. multiprocessing's start
# method, as the face: spawned workers re-import the main module, and with it torch, for seconds
# (docs/benchmarks.md, "Start-up").
TENSORDICT_API = Defaults(daemon=False, start_method=None, local_worker=False)


def default_local_worker(num_workers: int, *, first_ready: bool = False) -> bool:
    """Whether the calling process should step a share of the sub-envs itself.

    With as many worker processes as cores, a parent that only waits leaves a core idle while
    its wake-ups cost latency (see the bench): stepping a share itself wins. Not with
    first-ready batches: the share stepped here holds up every receive until it is done, so
    the first sub-envs to finish elsewhere wait for it (latency-16 in the bench).
    """
    return not first_ready and num_workers >= usable_cores()


def process_options(
    defaults: Defaults,
    *,
    num_workers: int,
    start_method: str | None = None,
    daemon: bool | None = None,
    local_worker: bool | None = None,
    timeout: float | None = None,
    first_ready: bool = False,
    **more: Any,
) -> tuple[ProcessOptions, float | None]:
    """(the worker-process options, the checked ``timeout``) from what the caller gave (None:
    the side's default); ``more`` are the other ``ProcessOptions`` fields, as given.

    A ``timeout`` or first-ready batches (``first_ready``) keep every sub-env out of the
    calling process unless ``local_worker=True`` says otherwise (with a timeout, that is an
    error: nothing could cut a sub-env here short).
    """
    timeout = check_timeout(timeout, local_worker)
    if local_worker is None:
        local_worker = defaults.local_worker
    if local_worker is None:
        local_worker = timeout is None and default_local_worker(
            num_workers, first_ready=first_ready
        )
    method = start_method or defaults.start_method or default_start_method()
    options = ProcessOptions(
        factory_timeout=timeout,  # the timeout bounds the factories in the workers too
        start_method=check_start_method(method),
        daemon=defaults.daemon if daemon is None else bool(daemon),
        local_worker=bool(local_worker),
        **more,
    )
    return options, timeout


# ---- autoreset modes ---------------------------------------------------------------------------
AUTORESET_SPELLINGS = ("next_step", "same_step", "disabled")
_AUTORESET_BY_KEY = {
    "".join(ch for ch in text.lower() if ch.isalnum()): member
    for member in AutoresetMode
    for text in (member.name, member.value)
}


def parse_autoreset_mode(mode: str | AutoresetMode) -> AutoresetMode:
    """An ``AutoresetMode`` from a member, its value (``"NextStep"``), its name, or gymvec's
    spellings (``"next_step"``, ``"same-step"``...: case, ``_`` and ``-`` do not matter)."""
    if isinstance(mode, AutoresetMode):
        return mode
    if isinstance(mode, str):
        member = _AUTORESET_BY_KEY.get("".join(ch for ch in mode.lower() if ch.isalnum()))
        if member is not None:
            return member
    values = ", ".join(repr(m.value) for m in AutoresetMode)
    raise ValueError(
        f"autoreset_mode: expected one of {', '.join(map(repr, AUTORESET_SPELLINGS))} (or a "
        f"gymnasium.vector.AutoresetMode, or its value: {values}), got {mode!r}"
    )


# ---- keyword arguments -------------------------------------------------------------------------
def close_names(name: str, known: Iterable[str]) -> list[str]:
    """The names of ``known`` that ``name`` is likely a misspelling or a shortening of
    (``autoreset`` for ``autoreset_mode``), closest first."""
    known = sorted(set(known))
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.8)
    if len(name) >= 5:
        close += [k for k in known if k.startswith(name) and k not in close]
    return close[:3]


def unknown_keyword_error(where: str, name: str, known: Iterable[str]) -> TypeError:
    """Python's error for an unexpected keyword argument, with what it may have meant."""
    message = f"{where} got an unexpected keyword argument {name!r}"
    close = close_names(name, known)
    if close:
        message += ": did you mean " + " or ".join(f"`{c}`" for c in close) + "?"
    return TypeError(message)


def suggest_keywords(init: Callable[P, R]) -> Callable[P, R]:
    """``init`` (a constructor taking no ``**kwargs``), whose unknown keyword arguments raise
    a TypeError that says which of its own they may stand for ("did you mean
    `num_workers`?"), before anything is built."""
    params = list(inspect.signature(init).parameters.values())
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    accepted = frozenset(p.name for p in params if p.kind in kinds) - {"self"}
    positional = [p.name for p in params if p.kind == inspect.Parameter.POSITIONAL_OR_KEYWORD]
    keyword_only = [p.name for p in params if p.kind == inspect.Parameter.KEYWORD_ONLY]
    owner = init.__qualname__.rpartition(".")[0] or init.__qualname__

    @functools.wraps(init)
    def checked(*args: P.args, **kwargs: P.kwargs) -> R:
        if len(args) > len(positional):
            shown = ", ".join(positional[1:])  # (without self)
            raise TypeError(
                f"{owner}() takes {len(positional) - 1} positional arguments ({shown}) but "
                f"{len(args) - 1} were given: the others are keyword-only "
                f"({', '.join(f'{name}=...' for name in keyword_only[:3])}, ...)"
            )
        for name in kwargs:
            if name not in accepted:
                raise unknown_keyword_error(f"{owner}()", name, accepted)
        return init(*args, **kwargs)

    return checked
