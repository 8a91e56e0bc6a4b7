"""A griffe extension for the API reference (mkdocs.yml): gymvec's docstrings head their
doctests ``Example:``, which griffe's Google parser takes for an admonition (the ``>>>`` lines
then render as nested quotes); this reads the heading as ``Examples:``, so that they render as
code."""

from __future__ import annotations

import re
from typing import Any

from griffe import Extension, Object

_EXAMPLE = re.compile(r"^(\s*)Example:[ \t]*$", re.MULTILINE)


class ExampleSections(Extension):
    def on_instance(self, *, obj: Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _EXAMPLE.sub(r"\1Examples:", obj.docstring.value)
