"""First-ready batches of the tensordict API (torchrl's ``AsyncEnvPool`` names):
``async_step_send``/``async_step_recv`` and ``async_reset_send``/``async_reset_recv``, their
rows named by ``"env_index"``, over the engine's ``async_*`` verbs.

:class:`FirstReadyBatches` is that half of ``batched.BatchedEnvBase`` (a base class of it):
it uses the batched env's engine, buffers, views and specs, which ``BatchedEnvBase`` sets up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from tensordict import TensorDict, TensorDictBase

from gymvec.common.fastpath import tensordict_unchecked
from gymvec.specs import non_tensor, object_values

if TYPE_CHECKING:
    from collections.abc import Callable

    from gymvec.engine.engine import BatchEngine
    from gymvec.specs import Composite, TensorSpec
    from gymvec.wire.buffers import Buffers
    from gymvec.wire.commands import Extras

_CPU = torch.device("cpu")
ENV_INDEX = "env_index"  # the first-ready rows' sub-env indices (int64 [K])


class FirstReadyBatches:
    """The first-ready verbs of a batched env (see the module)."""

    if TYPE_CHECKING:  # what the host class (BatchedEnvBase, an EnvBase) provides
        engine: BatchEngine
        num_envs: int
        device: torch.device
        heterogeneous: bool
        full_action_spec: Composite
        reward_spec: TensorSpec
        last_extras: dict[int, Extras]
        _pending_seeds: list[int | None] | None
        _sent: dict[int, TensorDictBase]
        # (key, K) -> the leaf spec of K rows; "of" -> the full_action_spec they came from
        _row_specs: dict[tuple | str, TensorSpec]
        _root_arrays: dict
        _next_arrays: dict
        _reward_array: np.ndarray
        _action_keys: list[tuple]
        _action_arrays: list[np.ndarray]
        _object_action_keys: list[tuple[tuple, tuple]]  # (tensordict key, buffer key)

        @property
        def buffers(self) -> Buffers: ...

        def _check_open(self) -> None: ...

        _flag_first_ready: Callable[..., None]  # (FaultedRows': the "fault" flags)

    def async_step_send(self, td: TensorDictBase) -> None:
        """Step the sub-envs that ``td["env_index"]`` names (int64 ``[K]``; without it, all
        of them in order) with ``td``'s actions (batch ``[K]``); returns at once.

        A sub-env still in flight raises a ValueError naming it (nothing is sent).
        ``async_step_recv`` takes the transitions back as they finish.

        Example:
            >>> import torch
            >>> from gymvec import GymEnv, SerialEnv
            >>> env = SerialEnv(3, lambda: GymEnv("CartPole-v1"))
            >>> env.async_reset_send()
            >>> root = env.async_reset_recv(min_get=3)
            >>> env.async_step_send(root.set("action", torch.ones(3, dtype=torch.int64)))
            >>> out = env.async_step_recv(min_get=2)
            >>> len(out["env_index"]) >= 2, out["next", "reward"].shape[-1]
            (True, 1)
            >>> env.close()
        """
        self._check_open()
        rows = self.engine.async_rows(self._env_index(td))  # before any action is written
        self._write_action_rows(td, rows)
        self.engine.async_step_send(rows, AutoresetMode.DISABLED)
        sent = td.clone()  # the caller may write into its own td meanwhile
        if ENV_INDEX not in sent.keys():
            sent.set(ENV_INDEX, torch.from_numpy(rows))
        for position, row in enumerate(rows.tolist()):
            self._sent[row] = sent[position]

    def async_step_recv(self, min_get: int = 1, timeout: float | None = None) -> TensorDictBase:
        """Wait until at least ``min_get`` of the steps in flight have finished, and return
        all that have (batch ``[K']``): each row as ``step`` returns it (the row sent, with
        ``"next"``), with ``"env_index"``. Past ``timeout``, ``TimeoutError``: nothing is
        lost, the transitions come with a later call."""
        self._check_open()
        ready = self.engine.async_recv("step", min_get, timeout=timeout)
        rows = ready.indices
        self.last_extras = ready.extras
        # (a TensorDict: torch.stack dispatches to tensordict's, which torch's stubs cannot say)
        out = cast(TensorDictBase, torch.stack([self._sent.pop(row) for row in rows.tolist()]))
        next_out = self._rows_output(self._next_arrays, rows, self.buffers.next.objects)
        reward = self._reward_array[rows].astype(self.reward_spec.numpy_dtype)
        next_out.set("reward", torch.from_numpy(reward).to(self.device))
        self._flag_first_ready(next_out, rows, ready.faults, sent=out)
        out.set("next", next_out)
        return out

    def async_reset_send(self, td: TensorDictBase | None = None) -> None:
        """Reset the sub-envs that ``td["env_index"]`` names (all if ``td`` is None or has
        none), seeded as ``set_seed`` asked; returns at once."""
        self._check_open()
        rows = self._env_index(td)
        seeds = None
        if self._pending_seeds is not None:  # each sub-env takes its seed once
            pending = self._pending_seeds
            seeds = [pending[row] for row in rows.tolist()]
            for row in rows.tolist():
                pending[row] = None
            if all(seed is None for seed in pending):
                self._pending_seeds = None
        self.engine.async_reset_send(rows, seeds=seeds, into="root")

    def async_reset_recv(self, min_get: int = 1, timeout: float | None = None) -> TensorDictBase:
        """Wait until at least ``min_get`` of the resets in flight have finished, and return
        the root of all that have (batch ``[K']``), with ``"env_index"``."""
        self._check_open()
        ready = self.engine.async_recv("reset", min_get, timeout=timeout)
        self.last_extras = ready.extras
        rows = ready.indices
        out = self._rows_output(self._root_arrays, rows, self.buffers.root.objects)
        self._flag_first_ready(out, rows)
        return out

    def _env_index(self, td: TensorDictBase | None) -> np.ndarray:
        """The rows ``td["env_index"]`` names (all without it), for a uniform batch."""
        if self.heterogeneous:
            raise ValueError(
                "first-ready batches need sub-envs with the same keys; this multi-task batch "
                "has tasks with different keys"
            )
        if td is None or ENV_INDEX not in td.keys():
            if td is not None and tuple(td.batch_size) != (self.num_envs,):
                raise ValueError(
                    f"td: without an 'env_index' entry, expected batch size ({self.num_envs},) "
                    f"(every sub-env), got {tuple(td.batch_size)}"
                )
            return np.arange(self.num_envs, dtype=np.int64)
        index = td.get(ENV_INDEX)
        if not (
            isinstance(index, torch.Tensor)
            and index.dtype == torch.int64
            and tuple(index.shape) == tuple(td.batch_size)
            and index.ndim == 1
        ):
            raise ValueError(
                f"'env_index': expected an int64 tensor of shape {tuple(td.batch_size)} (one "
                f"sub-env index per row of the batch), got {_brief_tensor(index)}"
            )
        return index.cpu().numpy()

    def _write_action_rows(self, td: TensorDictBase, rows: np.ndarray) -> None:
        """Check ``td``'s actions (one per row of ``rows``) and write them into those rows of
        the action buffer."""
        self.buffers.mark_actions_narrow()
        k = len(rows)
        for key, array in zip(self._action_keys, self._action_arrays):
            spec = self._row_specs.get((key, k))
            if spec is None or self._row_specs.get("of") is not self.full_action_spec:
                if self._row_specs.get("of") is not self.full_action_spec:
                    self._row_specs = {"of": self.full_action_spec}
                spec = self.full_action_spec[key].unbatch().expand(k)
                self._row_specs[(key, k)] = spec
            action = td.get(key, None)
            spec.validate(action, key)  # names the key, the spec and what was given
            array[rows] = action.detach().cpu().numpy()
        for key, buffer_key in self._object_action_keys:
            action = td.get(key, None)
            self.full_action_spec[key].unbatch().expand(k).validate(action, key)
            self.engine.write_action_rows(buffer_key, rows, object_values(action))

    def _rows_output(self, arrays: dict, rows: np.ndarray, objects: dict) -> TensorDictBase:
        """Copies of the rows ``rows`` of ``arrays`` (a tree, see ``_numpy_tree``), with the
        object observations of those rows and ``"env_index"``, on ``self.device``."""
        batch = torch.Size([len(rows)])
        out = _rows_tree(arrays, rows, batch)
        for key, values in objects.items():
            out.set(key, non_tensor([values[row] for row in rows.tolist()], batch))
        out.set(ENV_INDEX, torch.from_numpy(rows.copy()))
        return out if self.device.type == "cpu" else out.to(self.device)


def _rows_tree(arrays: dict, rows: np.ndarray, batch_size: torch.Size) -> TensorDict:
    """A CPU TensorDict of the rows ``rows`` of ``arrays`` (fresh copies), nested like it."""
    entries = {
        key: _rows_tree(value, rows, batch_size)
        if type(value) is dict
        else torch.from_numpy(value[rows])
        for key, value in arrays.items()
    }
    return tensordict_unchecked(entries, batch_size, _CPU)


def _brief_tensor(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)} and dtype {value.dtype}"
    return type(value).__name__
