"""The gymnasium face's plan: what its options and its engine decide, once.

:class:`FacePlan` is built when a ``GymnasiumVectorEnv`` is made and never changes: the
autoreset mode (gymnasium's ``AutoresetMode``, the one autoreset enum of gymvec: the engine
takes it as it is), the output, the slot that holds what the caller sees, and how the
observations go out (handed out from an observation lane, copied early, or copied).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode

from gymvec.common.structure import Leaf
from gymvec.engine.protocol import Engine, FirstReadyEngine
from gymvec.options import parse_autoreset_mode
from gymvec.wire.buffers import Slot
from gymvec.wire.calls import Into

# Observations of at least this size are partly copied while worker processes finish.
EARLY_COPY_BYTES = 64 * 1024


@dataclasses.dataclass(frozen=True, slots=True)
class FacePlan:
    """How a gymnasium face runs its engine (see :meth:`of`).

    ``same_step``/``disabled``: the autoreset mode, asked often. ``reset_into``: where resets
    write, which is also the slot (``slot``) that holds what the caller sees: SAME_STEP's
    reset observations sit in the root, the other modes reset into "next" so that one slot is
    always current. ``plain_obs``: the observation array of the usual case (one array leaf,
    numpy output), else None. ``copy_plain``: with ``copy`` and nothing handed out or copied
    early, ``plain_obs.copy`` (a step's observations, bound once), else None. ``handout``:
    large observations go out from a free observation lane without a copy. ``early_copy``:
    large observations that no lane takes are copied, this process's rows first, while the
    worker processes finish.
    """

    autoreset_mode: AutoresetMode
    output: str
    copy: bool
    batch_size: int
    same_step: bool
    disabled: bool
    reset_into: Into
    slot: Slot
    torch_device: Any
    plain_obs: np.ndarray | None
    copy_plain: Callable[[], np.ndarray] | None
    handout: bool
    early_copy: bool

    @classmethod
    def of(
        cls,
        env: Any,
        engine: Engine,
        obs_leaves: list[Leaf],
        autoreset_mode: str | AutoresetMode,
        output: str,
        copy: bool,
        batch_size: int | None,
    ) -> FacePlan:
        """The plan of a face over ``env`` (whose engine is ``engine``) with these options."""
        if output not in ("numpy", "torch"):
            raise ValueError(f"output: expected 'numpy' or 'torch', got {output!r}")
        mode = parse_autoreset_mode(autoreset_mode)
        same_step = mode == AutoresetMode.SAME_STEP
        buffers = engine.buffers
        slot = buffers.root if same_step else buffers.next
        one_array = [leaf.path for leaf in obs_leaves] == [()] and not obs_leaves[0].is_object
        plain_obs = slot.obs[obs_leaves[0].key] if one_array and output == "numpy" else None
        torch_device = getattr(env, "device", None)
        # Large observations go out without a copy: the sub-envs write them into a free
        # observation lane (see BufferLayout), whose array the call hands out as is (torch
        # output on the CPU: torch.from_numpy of it). A lane is free when nothing but the
        # buffers refers to its array (numpy makes every view of it refer to it,
        # torch.from_numpy too); with none free, the call copies as before. Which lane is in
        # use, the engine decides.
        on_cpu = torch_device is None or torch_device.type == "cpu"
        cpu_output = output == "numpy" or on_cpu
        handout = one_array and cpu_output and copy and not same_step
        handout = handout and engine.has_observation_lanes
        early_copy = plain_obs is not None and copy and plain_obs.nbytes >= EARLY_COPY_BYTES
        plainly_copied = plain_obs is not None and copy and not handout and not early_copy
        size = checked_batch_size(batch_size, engine, mode)
        # blocks: a ValueError for a mode or a batch size they cannot be run with exactly
        first_ready = size if size < engine.num_envs else None
        engine.check_blocks(mode.name.lower(), "the gymnasium face", first_ready)
        return cls(
            autoreset_mode=mode,
            output=output,
            copy=copy,
            batch_size=size,
            same_step=same_step,
            disabled=mode == AutoresetMode.DISABLED,
            reset_into="root" if same_step else "next",
            slot=slot,
            torch_device=torch_device,
            plain_obs=plain_obs,
            copy_plain=plain_obs.copy if plainly_copied and plain_obs is not None else None,
            handout=bool(handout),
            early_copy=bool(early_copy),
        )


def checked_batch_size(batch_size: int | None, engine: Engine, mode: AutoresetMode) -> int:
    """``batch_size`` checked (None: every sub-env): first-ready batches of fewer sub-envs take
    NEXT_STEP and an engine with first-ready commands."""
    n = engine.num_envs
    if batch_size is None:
        return n
    if isinstance(batch_size, bool) or not isinstance(batch_size, int | np.integer):
        raise TypeError(f"batch_size: expected an int from 1 to {n}, got {batch_size!r}")
    if not 1 <= batch_size <= n:
        raise ValueError(f"batch_size: expected 1 to num_envs={n}, got {batch_size}")
    if batch_size < n and mode != AutoresetMode.NEXT_STEP:
        raise ValueError(
            f"batch_size={batch_size} < num_envs={n} (first-ready batches) needs "
            f"autoreset_mode NEXT_STEP, got {mode.value}"
        )
    if batch_size < n and not isinstance(engine, FirstReadyEngine):
        raise ValueError(
            f"batch_size={batch_size} < num_envs={n}: {type(engine).__name__} has no "
            "first-ready commands (gymvec's SerialEnv and ParallelEnv have)"
        )
    return int(batch_size)
