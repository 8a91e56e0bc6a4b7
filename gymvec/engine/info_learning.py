"""Info fields learnt from the sub-envs' first results (see ``BatchEngine.learn_info_fields``).

:class:`InfoLearner` only decides: it places the numeric entries that results reported as
extras in the info reserve of the layout and hands the places to its caller, who has every
process adopt them (``Buffers.add_info_fields``). It sends nothing itself.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gymvec.common.infos import infer_info_fields
from gymvec.wire.buffers import BufferLayout
from gymvec.wire.calls import InfoPlaces
from gymvec.wire.commands import Extras


class InfoLearner:
    """Learns info fields until every sub-env has stepped once (``active`` until then)."""

    def __init__(self, layout: BufferLayout, num_envs: int):
        self.layout = layout
        self.num_envs = num_envs
        self.active = False
        self.unstepped = np.zeros(0, dtype=bool)  # while active: sub-envs not stepped yet

    def start(self) -> None:
        self.active = True
        self.unstepped = np.ones(self.num_envs, dtype=bool)

    def learn(self, extras: dict[int, Extras], stepped: Any) -> InfoPlaces | None:
        """Places for the entries that results reported as extras (the same type and shape
        in every sub-env that reported them); learning ends once every sub-env has stepped
        (``stepped``: the rows these results stepped)."""
        self.unstepped[stepped] = False
        if not self.unstepped.any():
            self.active = False
        infos = [info for e in extras.values() for info in (e.root, e.next) if info]
        if not infos:
            return None
        return self.layout.place_info_fields(infer_info_fields(*infos)) or None
