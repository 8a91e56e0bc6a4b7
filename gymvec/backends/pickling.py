"""cloudpickle for what travels to where sub-envs run, keeping the file names of code.

cloudpickle pickles functions and classes of the main script by value, and since 3.1.3 it
names their code ``"<dynamic-code>"`` (its payload is then the same wherever the script
lives). A sub-env's traceback from a worker would then read ``File "<dynamic-code>",
line 7`` with no source line. :func:`dumps` keeps each code object's real file name, so the
traceback shows the script's file and line, as gymnasium's ``AsyncVectorEnv`` does.
"""

from __future__ import annotations

import io
import types
from collections import ChainMap
from typing import Any

import cloudpickle

_base_reduce = cloudpickle.Pickler.dispatch_table.get(types.CodeType)


def _code_with_filename(make: Any, args: tuple, filename: str) -> types.CodeType:
    """The code object that ``make(*args)`` rebuilds, under its own file name again."""
    return make(*args).replace(co_filename=filename)


def _reduce_code(code: types.CodeType) -> tuple:
    make, args = _base_reduce(code)
    return _code_with_filename, (make, args, code.co_filename)


class _Pickler(cloudpickle.Pickler):
    dispatch_table = ChainMap(
        {types.CodeType: _reduce_code} if _base_reduce is not None else {},
        cloudpickle.Pickler.dispatch_table,
    )


def dumps(obj: Any) -> bytes:
    """``cloudpickle.dumps(obj)``, each code object pickled by value under its file name."""
    with io.BytesIO() as file:
        _Pickler(file, protocol=cloudpickle.DEFAULT_PROTOCOL).dump(obj)
        return file.getvalue()
