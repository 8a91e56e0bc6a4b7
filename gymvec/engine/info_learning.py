"""Info fields learnt from the sub-envs' first results (see ``BatchEngine.learn_info_fields``).

:class:`InfoLearner` only decides: it places the numeric entries that results reported as
extras in the info reserve of the layout and hands the places to its caller, who has every
process adopt them (``Buffers.add_info_fields``). It sends nothing itself.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gymvec.common.infos import InfoField, infer_info_fields
from gymvec.wire.buffers import BufferLayout
from gymvec.wire.calls import InfoPlaces
from gymvec.wire.commands import Extras


class InfoLearner:
    """Learns info fields until every sub-env has stepped once (``active`` until then).

    Reset infos are kept until the first step's results, and the fields are learnt from
    both at once: an entry that a reset gives as an int and a step as a float (FrozenLake's
    "prob") then gets a float field that holds the ints too (``InfoField.ints``: a per-row
    flag says which a value was), and the face types each batch as gymnasium does (after its
    first sub-env's value).
    A field learnt from the reset alone would be an int one that no step's value fits.
    """

    def __init__(self, layout: BufferLayout, num_envs: int):
        self.layout = layout
        self.num_envs = num_envs
        self.active = False
        self.unstepped = np.zeros(0, dtype=bool)  # while active: sub-envs not stepped yet
        self.pending: list[dict] = []  # reset infos seen before any step

    def start(self) -> None:
        self.active = True
        self.unstepped = np.ones(self.num_envs, dtype=bool)
        self.pending = []

    def learn(self, extras: dict[int, Extras], stepped: Any) -> InfoPlaces | None:
        """Places for the entries that results reported as extras (the same type and shape
        in every sub-env that reported them, or int and float: a float field); learning
        ends once every sub-env has stepped (``stepped``: the rows these results stepped;
        none: the results of resets, kept for the first step's)."""
        any_stepped = self.unstepped[stepped].size > 0
        self.unstepped[stepped] = False
        if not self.unstepped.any():
            self.active = False
        infos = [info for e in extras.values() for info in (e.root, e.next) if info]
        if not any_stepped and self.active:
            self.pending = (self.pending + infos)[-4 * self.num_envs :]  # (the latest suffice)
            return None
        infos, self.pending = self.pending + infos, []
        if not infos:
            return None
        fields = {**infer_info_fields(*infos), **widened_fields(infos)}
        return self.layout.place_info_fields(fields) or None


def widened_fields(infos: list[dict]) -> dict[str, InfoField]:
    """A float field that holds ints too for each entry that is a Python int in some of
    ``infos`` and a float in the others (``infer_info_fields`` gives such an entry none)."""
    kinds: dict[str, set[type]] = {}
    for info in infos:
        for name, value in info.items():
            if isinstance(name, str) and not name.startswith("_"):
                kinds.setdefault(name, set()).add(type(value))
    return {
        name: InfoField(name, float, (), np.dtype(float), ints=True)
        for name, seen in kinds.items()
        if seen == {int, float}
    }
