"""``SerialEnv``: a batch of sub-envs stepped one after the other in this process."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gymvec.batched.base import BatchedEnvBase, group_indices
from gymvec.batched.buffers import Buffers, private_memory
from gymvec.batched.driver import REQUESTS, Control, SubEnvGroup, close_each


class LocalExecutor:
    """Runs groups of sub-envs in the calling process (SerialEnv, and ParallelEnv's own share)."""

    def __init__(self, groups: list[SubEnvGroup]):
        self.groups = groups
        self.bounds = [(g.start, g.stop) for g in groups]
        self._options: dict | None = None

    @classmethod
    def build(
        cls, env_fns_per_group: list[list], starts: list[int], buffers: Buffers, control: Control
    ) -> LocalExecutor:
        groups: list[SubEnvGroup] = []
        try:
            for fns, start in zip(env_fns_per_group, starts):
                groups.append(SubEnvGroup(fns, start, buffers, control))
        except BaseException:
            for group in groups:
                group.close()
            raise
        return cls(groups)

    def describe(self) -> list[dict]:
        return [summary for group in self.groups for summary in group.describe()]

    def send(self, options: dict | None, action_objects: dict | None = None) -> None:
        # Object actions are already where these groups read them: this process's buffers.
        self._options = options

    def wait(
        self, timeout: float | None = None, on_local_done: Callable[[int], None] | None = None
    ) -> dict[int, dict]:
        # Everything runs in this process: ``on_local_done`` has no workers to overlap with.
        extras: dict[int, dict] = {}
        for group in self.groups:
            extras.update(group.run(self._options))
        return extras

    def drain(self, timeout: float | None = None) -> None:
        """End an interrupted command: nothing runs elsewhere, so nothing is left to wait for."""

    def request(self, name: str, indices: list[int], args: tuple, values: Sequence | None):
        results: list[Any] = [None] * len(indices)
        for group, positions in group_indices(indices, self.bounds):
            sub_indices = [indices[p] for p in positions]
            extra = () if values is None else ([values[p] for p in positions],)
            answers = REQUESTS[name](self.groups[group], sub_indices, *args, *extra)
            for p, answer in zip(positions, answers):
                results[p] = answer
        return results

    def close(self) -> None:
        groups, self.groups = self.groups, []
        close_each(groups)


class SerialEnv(BatchedEnvBase):
    """Sub-envs in this process, stepped in order, with the same batching as ParallelEnv.

    Same arguments as :class:`ParallelEnv` (without the process options). Useful for
    debugging, for cheap envs, and as the reference that ParallelEnv must match exactly.

    Example:
        >>> from gymvec import GymEnv, SerialEnv
        >>> env = SerialEnv(2, lambda: GymEnv("CartPole-v1"))
        >>> env.set_seed(0)
        >>> env.reset()["observation"].shape
        torch.Size([2, 4])
        >>> env.close()
    """

    def _new_memory(self, nbytes: int) -> Any:
        return private_memory(nbytes)

    def _make_executor(self) -> LocalExecutor:
        # One group for all sub-envs: in one process, workers would only add loop overhead.
        fns = [fn for w in range(self.num_workers) for fn in self._worker_env_fns(w)]
        return LocalExecutor.build([fns], [0], self.buffers, self.control)
