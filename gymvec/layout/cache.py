"""The cache of ``backend="auto"``: measured costs per (env id and kwargs, ``num_envs``, usable
cores, gymvec version), in ``$XDG_CACHE_HOME/gymvec/layouts.json`` (default
``~/.cache/gymvec/``). ``GYMVEC_CACHE=0`` turns it off; a file that cannot be read or written
is ignored with one WARNING on the ``gymvec`` logger, never an error."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

from gymvec.layout.model import Costs

logger = logging.getLogger("gymvec")
FILE_NAME = "layouts.json"
COSTS_FORM = 3  # the fields of Costs the entries hold (2: obs_bytes; 3: the probe's)
_warned: set[str] = set()  # the files warned about (once each)


def cache_dir() -> Path:
    """Where the cache lives: ``$XDG_CACHE_HOME/gymvec`` (default ``~/.cache/gymvec``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gymvec"


def enabled() -> bool:
    """False when ``GYMVEC_CACHE=0`` (or "false", "no", "off")."""
    return os.environ.get("GYMVEC_CACHE", "1").strip().lower() not in ("0", "false", "no", "off")


def cache_key(env_id: str, env_kwargs: dict[str, Any], num_envs: int, cores: int) -> str:
    """The key of one measurement: the env id and kwargs, ``num_envs``, usable cores and
    gymvec's version (kwargs by their ``repr``, sorted)."""
    from gymvec import __version__

    kwargs = ",".join(f"{k}={v!r}" for k, v in sorted(env_kwargs.items()))
    # (COSTS_FORM: entries of an older form of Costs are measured again, not misread)
    text = f"{env_id}|{kwargs}|{num_envs}|{cores}|{__version__}|{COSTS_FORM}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _warn_once(what: str, exc: BaseException) -> None:
    if what not in _warned:
        _warned.add(what)
        logger.warning("gymvec layout cache %s ignored (%s: %s)", what, type(exc).__name__, exc)


def _read(path: Path) -> dict:
    if not path.exists():
        return {}
    entries = json.loads(path.read_text())
    if not isinstance(entries, dict):
        raise ValueError("not a JSON object")
    return entries


def load(key: str) -> Costs | None:
    """The costs stored under ``key``; None when absent, off, or unreadable (one WARNING)."""
    if not enabled():
        return None
    path = cache_dir() / FILE_NAME
    try:
        entry = _read(path).get(key)
        return None if entry is None else Costs(**entry)
    except (OSError, ValueError, TypeError) as exc:
        _warn_once(f"{path}", exc)
        return None


def store(key: str, costs: Costs) -> None:
    """Remember ``costs`` under ``key`` (nothing when off; one WARNING when it fails)."""
    if not enabled():
        return
    path = cache_dir() / FILE_NAME
    try:
        try:
            entries = _read(path)
        except ValueError:  # corrupt: replaced by a sound file
            entries = {}
        entries[key] = dataclasses.asdict(costs)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps(entries, indent=1))
        os.replace(partial, path)  # readers never see half a file
    except OSError as exc:
        _warn_once(f"{path}", exc)
