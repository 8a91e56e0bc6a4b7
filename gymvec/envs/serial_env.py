"""``SerialEnv``: the tensordict API over sub-envs stepped in this process."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gymvec.common.faults import Restart, parse_on_fault
from gymvec.engine.engine import serial_backend
from gymvec.envs.batched import BatchedEnvBase
from gymvec.options import suggest_keywords
from gymvec.specs import DeviceLike
from gymvec.subenvs.factories import SubEnvFactories


class SerialEnv(BatchedEnvBase):
    """Sub-envs in this process, stepped in order, with the same batching as ParallelEnv.

    Same arguments as :class:`ParallelEnv` (without the process options; ``on_fault`` heals
    sub-envs that raise, rebuilt in this process). Useful for
    debugging, for cheap envs, and as the reference that ParallelEnv must match exactly.

    Example:
        >>> from gymvec import GymEnv, SerialEnv
        >>> env = SerialEnv(2, lambda: GymEnv("CartPole-v1"))
        >>> env.set_seed(0)
        >>> env.reset()["observation"].shape
        torch.Size([2, 4])
        >>> env.close()
    """

    @suggest_keywords
    def __init__(
        self,
        num_workers: int,
        create_env_fn: Callable[..., Any] | Sequence[Callable[..., Any]],
        *,
        create_env_kwargs: dict | Sequence[dict] | None = None,
        envs_per_worker: int | Sequence[int] = 1,
        device: DeviceLike = None,
        on_fault: str | Restart = "raise",
    ) -> None:
        policy = parse_on_fault(on_fault)
        factories = SubEnvFactories(num_workers, create_env_fn, create_env_kwargs, envs_per_worker)
        super().__init__(factories, serial_backend(), device=device, on_fault=policy)
