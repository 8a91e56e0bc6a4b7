"""What the gymnasium face needs of an engine, written down as a ``typing.Protocol``.

:class:`~gymvec.engine.BatchEngine` satisfies it, and so does
``gymvec.vector.tensordict_engine.TensorDictEngine``, which drives any batched ``EnvBase``
through its tensordict API; anything else that does can stand under the face.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
from gymnasium import spaces

from gymvec.engine.buffers import BufferLayout, Buffers
from gymvec.engine.commands import Autoreset
from gymvec.engine.engine import Received
from gymvec.engine.executor import OnLocalDone


@runtime_checkable
class Engine(Protocol):
    """A batch of ``num_envs`` sub-envs behind buffers of ``layout``, driven by verbs.

    Commands (``step_send``/``reset_send``, then ``recv``) read the actions from
    ``buffers.action`` (and ``buffers.action_objects``) and leave their results in
    ``buffers.next`` and ``buffers.root``, as ``BatchEngine`` documents. ``finished`` marks the
    sub-envs whose episode ended since their last reset (NEXT_STEP resets them at the next
    step), ``any_finished`` whether there is one. Requests go to the sub-envs by name (see
    ``engine.subenvs.REQUESTS``).
    """

    num_envs: int
    layout: BufferLayout
    buffers: Buffers
    metadata: dict
    render_mode: str | None
    heterogeneous: bool
    finished: np.ndarray
    any_finished: bool

    def sub_env_spaces(self) -> tuple[list[spaces.Space], list[spaces.Space]]:
        """The gymnasium observation and action space of each sub-env."""

    def step_send(
        self,
        autoreset: Autoreset = Autoreset.NONE,
        *,
        keep_final_obs: bool = False,
        current_root: bool = False,
        handout: bool = False,
    ) -> None: ...

    def reset_send(
        self,
        mask: np.ndarray | None = None,
        *,
        seeds: Sequence[int | None] | None = None,
        options: dict | None = None,
        into: str = "root",
        handout: bool = False,
    ) -> None: ...

    def recv(
        self, timeout: float | None = None, on_local_done: OnLocalDone | None = None
    ) -> Received: ...

    def write_action(self, key: tuple, values: np.ndarray) -> None: ...

    def learn_info_fields(self) -> None:
        """Let ``layout.info_fields`` grow (in place) with the entries the sub-envs report,
        where the engine can; the face reads it at every call."""

    def request_send(
        self, name: str, indices: Sequence[int] | None = None, **kwargs: Any
    ) -> None: ...

    def request_recv(self, timeout: float | None = None) -> list: ...

    def request(
        self, name: str, indices: Sequence[int] | None = None, /, *, timeout=None, **kwargs: Any
    ) -> list: ...

    @property
    def in_flight(self) -> str | None: ...

    @property
    def interrupted(self) -> bool: ...

    def abandon(self) -> None: ...

    def close(self) -> None: ...
