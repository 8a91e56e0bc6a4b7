"""``TableBlock``: what both PettingZoo blocks share, PettingZoo parallel envs (an
:class:`~gymvec.pettingzoo.table.AgentTable`) held as a gymnasium ``VectorEnv`` of
``rows_per_env`` rows an env: resets, seeds, reset masks, calls to the envs, the step's result
and closing. :class:`~gymvec.pettingzoo.agent_rows.AgentRowsBlock` has a row per agent,
:class:`~gymvec.pettingzoo.env_rows.EnvRowsBlock` a row per env."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv

from gymvec.common.reprs import never_raises
from gymvec.errors import ClosedEnvError
from gymvec.pettingzoo.agents import split_reset_options
from gymvec.pettingzoo.table import AgentTable


def check_counts(**counts: tuple[Any, int]) -> None:
    """Each ``name=(value, least)``: an int ``>= least`` (checked before any env is built)."""
    for name, (value, least) in counts.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{name}: expected an int >= {least}, got {value!r}")


class TableBlock(VectorEnv):
    """The envs of ``table`` as ``len(table.envs) * rows_per_env`` rows: env ``e``'s rows are
    ``e * rows_per_env`` to ``(e + 1) * rows_per_env - 1``. A subclass writes the rows:
    ``_reset_env`` (one env's reset into the rows and ``infos``), ``_observations`` and
    ``step``, keeping the rows' results in ``_rewards``, ``_terminations``,
    ``_truncations``."""

    _rewards: np.ndarray
    _terminations: np.ndarray
    _truncations: np.ndarray

    def __init__(
        self,
        table: AgentTable,
        *,
        rows_per_env: int,
        autoreset_mode: AutoresetMode,
        first_env: int = 0,
        copy: bool = True,
    ):
        self.table = table
        self.envs, self.agents = table.envs, table.agents
        self.rows_per_env, self.first_env, self.copy = rows_per_env, first_env, copy
        self.num_envs = len(self.envs) * rows_per_env
        self.metadata = {
            "autoreset_mode": autoreset_mode,
            "render_modes": self.envs[0].metadata.get("render_modes", []),
        }
        self.render_mode = getattr(self.envs[0], "render_mode", None)
        self.closed = False

    # ---- gymnasium's VectorEnv ----------------------------------------------------------------
    def reset(
        self, *, seed: int | Sequence[int | None] | None = None, options: dict | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset the envs (those whose rows ``options["reset_mask"]`` covers, or all)."""
        self._check_open()
        if isinstance(seed, int | np.integer):
            seed = int(seed)
            super().reset(seed=seed)  # the vector env's own np_random, as gymnasium's
        seeds = self._env_seeds(seed)
        mask, env_options = split_reset_options(options)
        infos: dict[str, Any] = {}
        for e in self._envs_of_mask(mask):
            self._reset_env(infos, e, seeds[e], env_options)
        return self._observations(), infos

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Each env's ``name`` (called if callable), once per row, as ``SyncVectorEnv.call``
        gives one result per sub-env."""
        results = []
        for env in self.envs:
            value = getattr(env, name)
            results.append(value(*args, **kwargs) if callable(value) else value)
        return tuple(result for result in results for _ in range(self.rows_per_env))

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """Each env's attribute ``name``, once per row."""
        return tuple(getattr(env, name) for env in self.envs for _ in range(self.rows_per_env))

    def render(self) -> tuple[Any, ...]:
        """Each env's ``render()``."""
        return tuple(env.render() for env in self.envs)

    def close_extras(self, **kwargs: Any) -> None:
        self.table.close()

    @never_raises
    def __repr__(self) -> str:
        return super().__repr__()  # gymnasium's, which reads num_envs

    # ---- what the subclasses write ------------------------------------------------------------
    def _reset_env(
        self, infos: dict[str, Any], e: int, seed: int | None, options: dict | None
    ) -> None:
        """Reset env ``e`` (seeded ``seed``, with the env's ``options``), its rows' results
        cleared and its infos added to ``infos``."""
        raise NotImplementedError

    def _observations(self) -> Any:
        raise NotImplementedError

    # ---- helpers ------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self.closed:
            raise ClosedEnvError.after_close(self)

    def _result(
        self, obs: Any, infos: dict
    ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        """A step's five values: ``obs``, copies of the rewards and flags, ``infos``."""
        rewards, terminations, truncations = self._rewards, self._terminations, self._truncations
        return obs, rewards.copy(), terminations.copy(), truncations.copy(), infos

    def _env_seeds(self, seed: int | Sequence[int | None] | None) -> list[int | None]:
        """Each env's seed: an int ``t`` is the seed of the block's first row, row
        ``first_env * rows_per_env`` of a vector env whose rows are seeded ``s + row``, so
        env ``first_env + j`` gets ``s + first_env + j``; a list gives each env its first
        row's seed."""
        n, per_env = len(self.envs), self.rows_per_env
        if seed is None:
            return [None] * n
        if isinstance(seed, int):
            base = seed - self.first_env * (per_env - 1)
            return [base + j for j in range(n)]
        seeds = list(seed)
        if len(seeds) != self.num_envs:
            raise ValueError(
                f"seed: expected an int, None or a list of {self.num_envs} seeds (one per row), "
                f"got a list of {len(seeds)}"
            )
        return seeds[::per_env]

    def _envs_of_mask(self, mask: Any) -> list[int]:
        """The envs whose rows a reset mask covers (all without one); a mask that covers
        some of an env's rows only is a ValueError."""
        if mask is None:
            return list(range(len(self.envs)))
        mask = np.asarray(mask)
        if mask.shape != (self.num_envs,) or mask.dtype != np.bool_:
            raise ValueError(
                f"options['reset_mask']: expected a bool array of shape ({self.num_envs},), got "
                f"{mask.dtype} of shape {mask.shape}"
            )
        per_env = mask.reshape(len(self.envs), self.rows_per_env)
        split = np.flatnonzero(per_env.any(axis=1) & ~per_env.all(axis=1))
        if split.size:
            e, n = int(split[0]), self.rows_per_env
            raise ValueError(
                f"options['reset_mask']: expected whole envs (all {n} rows of an env or none), "
                f"got rows {per_env[e].tolist()} for env {self.first_env + e} "
                f"(rows {e * n}..{(e + 1) * n - 1})"
            )
        return [int(e) for e in np.flatnonzero(per_env[:, 0])]
