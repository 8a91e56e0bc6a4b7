"""gymvec in gymnasium's registry: the derived ids ``gymvec/<id>`` for ``gymnasium.make_vec``, and
what gymvec says when a call would not reach it.

``gymnasium.make_vec("gymvec:gymvec/CartPole-v1", n)`` imports gymvec (the ``gymvec:`` prefix),
then looks ``gymvec/CartPole-v1`` up: a copy of ``CartPole-v1``'s spec whose
``vector_entry_point`` builds gymvec's ``ParallelVectorEnv`` (``gymvec-<namespace>/<name>`` for
a namespaced id). Existing ids are never modified. The ways past gymvec that it can see:

* ``vectorization_mode="sync"``/``"async"``: gymnasium builds its own ``SyncVectorEnv`` /
  ``AsyncVectorEnv`` over the derived spec and never calls a vector entry point. The derived
  spec's ``entry_point`` (which builds each single env for them) warns once, saying how to get
  gymvec's env.
* ``gymvec:CartPole-v1`` (no ``gymvec/``): the prefix only imports gymvec; gymvec warns once,
  naming the derived id.
* A derived id whose base is registered after gymvec was imported, or not at all (a namespace
  whose package is not imported yet, such as ``ALE`` before ``ale_py``): the derived id is
  registered on demand, when ``gymnasium.make_vec`` looks it up; its base is resolved when
  the env is built, and a missing base raises gymnasium's own error with the import it needs
  in the message.
* ``gymvec/ALE/Pong-v5``: the message names ``gymvec-ALE/Pong-v5``.
* RLlib (its env runners call ``gymnasium.make_vec(config.env, ...)``): an ``autoreset_mode``
  other than next-step raises (RLlib assumes next-step), and an id without the ``gymvec:``
  prefix warns (remote runners do not import gymvec).

gymnasium gives no hook for any of this: the first call, whose own lookup imports gymvec, is
seen from the stack (gymnasium's ``make_vec`` and ``_find_spec`` frames, read only);
``gymnasium.make_vec`` is wrapped for the calls after it.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import sys
import warnings
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec, parse_env_id

__all__ = [
    "VectorizationWarning",
    "base_id",
    "derived_id",
    "ensure_derived_id",
    "install",
    "register_vector_ids",
]

_REGISTRATION = "gymnasium.envs.registration"
# Modules between the user's call and gymvec's warnings (skipped for the warning's location).
_LIBRARIES = ("gymnasium", "gymvec", "importlib", "ray.rllib")
# Packages that register a namespace when imported, for the hints (others: "its package").
_NAMESPACE_PACKAGES = {
    "ALE": "ale_py (then gymnasium.register_envs(ale_py))",
    "MiniGrid": "minigrid",
    "BabyAI": "minigrid",
}
# Derived ids registered on demand for a base that was not registered then.
_PENDING: set[str] = set()
# Warnings already given, by (kind, id, mode): each once per process.
_WARNED: set[tuple[str, str, str]] = set()


class VectorizationWarning(UserWarning):
    """A ``gymnasium.make_vec`` call with a gymvec id that does not build gymvec's env."""


def derived_id(env_id: str) -> str:
    """``gymvec/<id>``, or ``gymvec-<namespace>/<name>`` for a namespaced id."""
    namespace, _, name = env_id.rpartition("/")
    return f"gymvec-{namespace}/{name}" if namespace else f"gymvec/{name}"


def is_derived(env_id: str) -> bool:
    return env_id.startswith(("gymvec/", "gymvec-"))


def base_id(derived: str) -> str:
    """The id a derived id stands for: ``gymvec/<id>`` -> ``<id>``, ``gymvec-<ns>/<name>`` ->
    ``<ns>/<name>`` (the inverse of :func:`derived_id`)."""
    if derived.startswith("gymvec/"):
        return derived[len("gymvec/") :]
    return derived[len("gymvec-") :]


def _entry_points(base: str) -> dict[str, Any]:
    """A derived id's entry points: both resolve ``base`` when called."""
    from gymvec.integrations.make_vec import vector_entry_point

    return {
        "entry_point": SingleEnvEntryPoint(base),
        "vector_entry_point": functools.partial(
            _checked_vector_entry_point, vector_entry_point, base
        ),
    }


def _derived_spec(env_id: str, spec: EnvSpec) -> EnvSpec:
    return dataclasses.replace(spec, id=derived_id(env_id), **_entry_points(env_id))


def register_vector_ids() -> list[str]:
    """Register ``gymvec/<id>`` for every registered id that has none yet; returns the new ids.

    Derived ids share the base id's entry point, kwargs and ``max_episode_steps``; their
    ``vector_entry_point`` builds a gymvec ``ParallelVectorEnv``. ``gymnasium.make_vec``
    registers a derived id on demand too (for ids registered after gymvec's import).
    """
    added = []
    for env_id, spec in list(gym.registry.items()):
        if is_derived(env_id):
            continue
        new_id = derived_id(env_id)
        if new_id in gym.registry and new_id not in _PENDING:
            continue
        gym.registry[new_id] = _derived_spec(env_id, spec)
        _PENDING.discard(new_id)
        added.append(new_id)
    return added


def ensure_derived_id(name: str) -> None:
    """Register the derived id ``name`` if it is missing (or still waits for its base).

    A base registered now gives the full derived spec; a base not registered (yet) gives a
    spec that resolves it when the env is built and raises gymnasium's error, with what to
    import, if it is still missing then. Malformed ids are left to gymnasium's lookup.
    """
    if not is_derived(name) or (name in gym.registry and name not in _PENDING):
        return
    try:
        parse_env_id(name)
    except gym.error.Error:
        return
    base = base_id(name)
    if base in gym.registry:
        gym.registry[name] = _derived_spec(base, gym.registry[base])
        _PENDING.discard(name)
    elif name not in gym.registry:
        gym.registry[name] = EnvSpec(id=name, **_entry_points(base))
        _PENDING.add(name)


def _namespace_hint(namespace: str | None) -> str:
    package = _NAMESPACE_PACKAGES.get(namespace or "", "the package that registers them")
    return f"import {package} first: gymvec then finds the '{namespace}/...' ids"


def missing_base_hint(derived: str) -> str:
    """What to do about a derived id whose base id is not registered."""
    base = base_id(derived)
    namespace = base.rpartition("/")[0] or None
    known = {spec.namespace for spec in gym.registry.values()}
    if namespace is not None and namespace not in known:
        return (
            f"gymvec: {derived!r} stands for {base!r}, and no package has registered "
            f"namespace {namespace!r}: {_namespace_hint(namespace)}."
        )
    return (
        f"gymvec: {derived!r} stands for {base!r}, which is not registered: import the "
        "package that registers it first."
    )


def malformed_hint(name: str) -> str | None:
    """The right id for a guess such as ``gymvec/ALE/Pong-v5``; None if ``name`` is fine."""
    if not name.startswith("gymvec/") or "/" not in base_id(name):
        return None
    base = base_id(name)
    right = derived_id(base)
    namespace = base.rpartition("/")[0]
    hint = (
        f"gymvec: {name!r} is not an id: gymvec's id for {base!r} is {right!r} "
        f"(gymvec-<namespace>/<name>)"
    )
    if namespace not in {spec.namespace for spec in gym.registry.values()}:
        hint += f"; {_namespace_hint(namespace)}"
    return hint + "."


def _with_hint(error: BaseException, hint: str) -> BaseException:
    """``error`` with ``hint`` added to its message (``str(error)``, logs), same type."""
    message = str(error.args[0]) if error.args else ""
    error.args = (f"{message}\n{hint}" if message else hint, *error.args[1:])
    return error


def _resolve_base(base: str) -> EnvSpec:
    try:
        return gym.spec(base)
    except gym.error.Error as error:
        raise _with_hint(error, missing_base_hint(derived_id(base))) from None


class SingleEnvEntryPoint:
    """The ``entry_point`` of a derived id: builds one env of the base id, with the base's own
    creator (``gymnasium.make`` adds the wrappers of the derived spec, the base's).

    gymnasium calls it for ``make(derived_id)`` and for ``make_vec`` in "sync"/"async" mode,
    where it wraps the envs in its own ``SyncVectorEnv``/``AsyncVectorEnv``: that is the case
    it warns about (once), saying how to get gymvec's env.
    """

    def __init__(self, base: str) -> None:
        self.base = base

    def _creator(self) -> Callable[..., gym.Env]:
        entry_point = _resolve_base(self.base).entry_point
        if entry_point is None:
            raise gym.error.Error(f"{self.base} registered but entry_point is not specified")
        if callable(entry_point):
            return entry_point
        module, _, attr = entry_point.partition(":")
        return getattr(importlib.import_module(module), attr)

    @property
    def metadata(self) -> dict[str, Any]:
        """The base creator's (``gymnasium.make`` reads its render modes)."""
        return dict(getattr(self._creator(), "metadata", {}))

    def __call__(self, **kwargs: Any) -> gym.Env:
        call = _make_vec_call()
        if call is not None and call[1] in ("sync", "async"):
            _warn_vectorization_mode(call[0] or derived_id(self.base), call[1])
        return self._creator()(**kwargs)

    def __repr__(self) -> str:
        return f"gymvec.SingleEnvEntryPoint({self.base!r})"


def _checked_vector_entry_point(entry_point: Callable, base: str, **kwargs: Any) -> Any:
    """The derived id's ``vector_entry_point``, after the checks a call from RLlib needs."""
    _resolve_base(base)
    if _called_from_rllib():
        _check_rllib_call(base, kwargs)
    return entry_point(base, **kwargs)


# ---- what the caller did, from the stack ---------------------------------------------------------
def _frames() -> Iterator[FrameType]:
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        yield frame
        frame = frame.f_back


def _gymnasium_frame(function: str) -> FrameType | None:
    for frame in _frames():
        if frame.f_code.co_name == function and frame.f_globals.get("__name__") == _REGISTRATION:
            return frame
    return None


def _make_vec_call() -> tuple[str, str | None] | None:
    """(id, vectorization mode) of the ``gymnasium.make_vec`` call on the stack, if any."""
    frame = _gymnasium_frame("make_vec")
    if frame is None:
        return None
    env_id = frame.f_locals.get("id")
    mode = frame.f_locals.get("vectorization_mode")
    mode = getattr(mode, "value", mode)
    return (env_id if isinstance(env_id, str) else "", mode if isinstance(mode, str) else None)


def _called_from_rllib() -> bool:
    return any(
        str(frame.f_globals.get("__name__", "")).startswith("ray.rllib.") for frame in _frames()
    )


# ---- the warnings and errors ---------------------------------------------------------------------
def _warn_once(kind: str, env_id: str, mode: str, message: str) -> None:
    if (kind, env_id, mode) in _WARNED:
        return
    _WARNED.add((kind, env_id, mode))
    # The user's call is above gymnasium's frames: point at the first frame outside them.
    frame, level = sys._getframe(1), 2  # stacklevel 2: who called this function
    while frame.f_back is not None and str(frame.f_globals.get("__name__")).startswith(_LIBRARIES):
        frame = frame.f_back
        # warnings.warn does not count importlib's bootstrap frames (the import of gymvec)
        code = frame.f_code.co_filename
        level += not ("importlib" in code and "_bootstrap" in code)
    warnings.warn(message, VectorizationWarning, stacklevel=level)


def _warn_vectorization_mode(env_id: str, mode: str) -> None:
    """``env_id``: as given to ``gymnasium.make_vec`` (with any ``gymvec:`` prefix)."""
    built = {"sync": "SyncVectorEnv", "async": "AsyncVectorEnv"}[mode]
    gymvec_env = {"sync": "SerialVectorEnv", "async": "ParallelVectorEnv"}[mode]
    backend = ", backend='serial'" if mode == "sync" else ""
    prefixed = f"gymvec:{env_id.rpartition(':')[2]}"
    message = (
        f"gymnasium.make_vec({env_id!r}, vectorization_mode={mode!r}) builds gymnasium's own "
        f"{built}: gymvec takes part only in mode 'vector_entry_point' (make_vec's default for "
        f"this id). For gymvec's {gymvec_env}: gymnasium.make_vec({prefixed!r}, n, "
        f"vectorization_mode='vector_entry_point'{backend})."
    )
    if _called_from_rllib():
        message += " Under RLlib: config.env_runners(gym_env_vectorize_mode='vector_entry_point')"
        message += ", with env_config={'backend': 'serial'}." if mode == "sync" else "."
    _warn_once("mode", env_id.rpartition(":")[2], mode, message)


def _warn_prefix_without_derived_id(name: str) -> None:
    message = (
        f"gymnasium.make_vec('gymvec:{name}') builds {name!r} as gymnasium does: the 'gymvec:' "
        "prefix only imports gymvec. gymvec's id for it is "
        f"{derived_id(name)!r}: gymnasium.make_vec('gymvec:{derived_id(name)}', n)."
    )
    _warn_once("prefix", name, "", message)


def _is_next_step(mode: Any) -> bool:
    spelling = str(getattr(mode, "value", mode)).lower().replace("_", "").replace("-", "")
    return spelling == "nextstep"


def _check_rllib_call(base: str, kwargs: dict[str, Any]) -> None:
    mode = kwargs.get("autoreset_mode")
    if mode is not None and not _is_next_step(mode):
        raise ValueError(
            f"autoreset_mode={mode!r} under RLlib: RLlib's env runners assume next-step "
            "autoreset (they take the observation after an episode's end for the next "
            "episode's start; same-step would record every terminal observation as a reset, "
            "'disabled' stops at the first episode end). Leave autoreset_mode out of "
            "env_config."
        )
    call = _make_vec_call()
    if call is not None and not call[0].startswith("gymvec:"):
        message = (
            f"RLlib builds {call[0]!r} without the 'gymvec:' prefix: this process imported "
            "gymvec, but remote env runners do not, and fail to find the id "
            f"(NamespaceNotFound). Use config.environment('gymvec:{derived_id(base)}')."
        )
        _warn_once("rllib-prefix", call[0], "", message)


# ---- installing: at gymvec's import --------------------------------------------------------------
def _check_importing_call() -> None:
    """The ``gymnasium.make_vec`` call whose ``gymvec:`` prefix imports gymvec now (it called
    the function before the wrapper below existed): the same checks as the wrapper's."""
    if _gymnasium_frame("_find_spec") is None:  # imported by a lookup, not by the user
        return
    call = _make_vec_call()
    if call is None:
        return
    name = call[0].rpartition(":")[2]
    hint = malformed_hint(name)
    if hint is not None:
        # gymnasium's lookup refuses it next, before anything of gymvec's runs: a warning is
        # what reaches the user on this call (later calls get it in the error, by the wrapper).
        _warn_once("malformed", name, "", hint)
    _check_id(call[0])


def _check_id(env_id: str) -> None:
    """Before gymnasium looks ``env_id`` (``[module:]name``) up."""
    prefix, _, name = env_id.rpartition(":")
    if malformed_hint(name) is not None:
        return  # gymnasium refuses it; the hint goes with its error or, first, a warning
    if is_derived(name):
        ensure_derived_id(name)
    elif prefix == "gymvec":
        _warn_prefix_without_derived_id(name)


def with_gymvec_checks(make_vec_fn: Callable) -> Callable:
    """``gymnasium.make_vec`` with gymvec's checks of the id (see the module's docstring);
    nothing else changes."""
    if getattr(make_vec_fn, "gymvec_checks", False):
        return make_vec_fn

    @functools.wraps(make_vec_fn)
    def make_vec(id: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: A002
        name = id.rpartition(":")[2] if isinstance(id, str) else ""
        if name:
            _check_id(id)
        try:
            return make_vec_fn(id, *args, **kwargs)
        except gym.error.Error as error:
            if name in _PENDING and base_id(name) not in gym.registry:
                # a typo must not stay in the registry; a later call registers it again
                gym.registry.pop(name, None)
                _PENDING.discard(name)
            hint = malformed_hint(name) if name else None
            if hint is not None and hint not in str(error):
                raise _with_hint(error, hint) from None
            raise

    make_vec.gymvec_checks = True  # type: ignore[attr-defined]
    return make_vec


def install() -> None:
    """At gymvec's import: register the derived ids, check the call that imported gymvec, if
    any, and wrap ``gymnasium.make_vec`` for the calls to come."""
    register_vector_ids()
    _check_importing_call()
    gym.make_vec = with_gymvec_checks(gym.make_vec)
