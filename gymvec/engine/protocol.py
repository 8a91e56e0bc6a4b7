"""What a front end needs of an engine, written down as ``typing.Protocol`` classes.

:class:`Engine`: the whole-batch verbs, requests and the state of the call in flight;
:class:`~gymvec.engine.BatchEngine` satisfies it, and so does
``gymvec.vector.tensordict_engine.TensorDictEngine``, which drives any batched ``EnvBase``
through its tensordict API. :class:`FirstReadyEngine` adds first-ready commands
(``BatchEngine`` has them). Both are ``runtime_checkable``: the front ends test an engine
with ``isinstance``, never by probing attributes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from gymvec.common.faults import FaultBook
from gymvec.wire.buffers import BufferLayout, Buffers
from gymvec.wire.calls import Into, Ready, Received


@runtime_checkable
class Engine(Protocol):
    """A batch of ``num_envs`` sub-envs behind buffers of ``layout``, driven by verbs.

    Commands (``step_send``/``reset_send``, then ``recv``) read the actions written into
    ``buffers`` (directly, or with :meth:`write_action`) and leave their results in
    ``buffers.next`` and ``buffers.root``, as ``BatchEngine`` documents. ``finished`` marks the
    sub-envs whose episode ended since their last reset (NEXT_STEP resets them at the next
    step), ``any_finished`` whether there is one. Requests go to the sub-envs by name (see
    ``subenvs.group.REQUESTS``). ``stuck``: the timeout that ended the engine's use (then
    ``check_not_stuck`` raises); ``timed_out``: the last wait outlasted its timeout.

    Of ``buffers`` (a ``Buffers``), front ends use only the members its docstring lists for
    them (the slots, and where and how actions are written); ``has_observation_lanes``: the
    sub-envs may step into an observation lane (``handout=True``), see ``BufferLayout``.
    """

    num_envs: int
    layout: BufferLayout
    buffers: Buffers
    metadata: dict
    render_mode: str | None
    heterogeneous: bool
    finished: np.ndarray
    has_observation_lanes: bool
    fault_book: FaultBook | None  # faults that heal (``on_fault``); None: "raise"
    num_sub_envs: int  # (a block, however many rows, is one)

    def sub_env_spaces(self) -> tuple[list[spaces.Space], list[spaces.Space]]:
        """The gymnasium observation and action space of each sub-env."""

    def step_send(
        self,
        autoreset: AutoresetMode = AutoresetMode.DISABLED,
        *,
        handout: bool = False,
    ) -> None: ...

    def reset_send(
        self,
        mask: np.ndarray | None = None,
        *,
        seeds: Sequence[int | None] | None = None,
        options: dict | None = None,
        into: Into = "root",
        handout: bool = False,
    ) -> None: ...

    def recv(
        self, timeout: float | None = None, meanwhile: Callable[[int], object] | None = None
    ) -> Received:
        """The results of the command in flight. ``meanwhile(k)``: called once where this
        process runs its share ahead of the workers (rows ``[0, k)`` are then done)."""

    def write_action(self, key: tuple, values: Any) -> None:
        """Every sub-env's action of leaf ``key`` (see ``Buffers.write_action``)."""

    def write_action_rows(self, key: tuple, rows: np.ndarray, values: Any) -> None:
        """The actions of leaf ``key`` of the sub-envs at ``rows``."""

    def learn_info_fields(self) -> None:
        """Learn info fields from the sub-envs' results, where the engine can: the receive
        that learns them gives them their places, and ``layout.info_fields`` (which the
        face reads at every call) holds them from then on."""

    def check_blocks(self, requested: str, what: str, batch_size: int | None = None) -> None:
        """A ValueError where a block sub-env cannot be run as ``requested`` exactly."""

    def request_send(
        self, name: str, indices: Sequence[int] | None = None, /, **kwargs: Any
    ) -> None: ...

    def request_recv(self, timeout: float | None = None) -> list: ...

    def request(
        self, name: str, indices: Sequence[int] | None = None, /, *, timeout=None, **kwargs: Any
    ) -> list: ...

    @property
    def any_finished(self) -> bool: ...

    @property
    def in_flight(self) -> str | None: ...

    @property
    def idle(self) -> bool:
        """No call in flight and not stuck (``in_flight`` None and ``stuck`` None)."""

    @property
    def interrupted(self) -> bool: ...

    @property
    def stuck(self) -> TimeoutError | None: ...

    @property
    def timed_out(self) -> bool: ...

    def check_not_stuck(self) -> None: ...

    def abandon(self) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class FirstReadyEngine(Engine, Protocol):
    """An :class:`Engine` with first-ready commands: some sub-envs at a time, taken back as
    they finish (see ``engine.first_ready``)."""

    def async_step_send(
        self,
        indices: Sequence[int] | np.ndarray | None = None,
        autoreset: AutoresetMode = AutoresetMode.DISABLED,
        *,
        write_actions: Callable[[np.ndarray], None] | None = None,
    ) -> None: ...

    def async_reset_send(
        self,
        indices: Sequence[int] | np.ndarray | None = None,
        *,
        seeds: Sequence[int | None] | None = None,
        into: Into = "root",
    ) -> None: ...

    def async_recv(
        self,
        kind: str | None = None,
        min_get: int = 1,
        max_get: int | None = None,
        timeout: float | None = None,
    ) -> Ready: ...

    def async_rows(self, indices: Any) -> np.ndarray: ...

    @property
    def flying(self) -> np.ndarray: ...
