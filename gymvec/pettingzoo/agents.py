"""What gymvec needs to know of a PettingZoo env before it lays its agents out as rows: that it
is a parallel env, and the spaces its agents share."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from gymnasium import spaces
from pettingzoo import AECEnv, ParallelEnv

_TRAILING_NUMBER = re.compile(r"^(.*)_\d+$")


def check_parallel_env(env: Any, where: str = "env_fn()") -> None:
    """Raise a TypeError unless ``env`` is a PettingZoo ``ParallelEnv``."""
    if isinstance(env, ParallelEnv):
        return
    if isinstance(env, AECEnv):
        raise TypeError(
            f"{where}: expected a PettingZoo ParallelEnv, got the AEC env {env!r}; wrap it in "
            "pettingzoo.utils.aec_to_parallel(env) (or build the env's parallel_env())"
        )
    raise TypeError(f"{where}: expected a PettingZoo ParallelEnv, got {type(env).__name__}")


def close_env(env: Any) -> None:
    """``env.close()`` where it has one (``env_fn`` may have returned anything)."""
    close = getattr(env, "close", None)
    if callable(close):
        close()


ROWS_ADVICE = (
    "so they cannot be rows of one vector env: use gymvec.pettingzoo.make_env, whose groups "
    "(group_map) hold agents of different spaces"
)


def common_spaces(
    env: ParallelEnv, agents: Sequence[str], advice: str = ROWS_ADVICE
) -> tuple[spaces.Space, spaces.Space]:
    """The observation and action space that all of ``agents`` share; a ValueError naming the
    agents and their spaces where they differ, followed by ``advice``."""
    first = agents[0]
    obs_space, act_space = env.observation_space(first), env.action_space(first)
    for kind, space, of in (
        ("observation", obs_space, env.observation_space),
        ("action", act_space, env.action_space),
    ):
        differing = [agent for agent in agents if of(agent) != space]
        if differing:
            listed = "; ".join(f"{agent}: {of(agent)}" for agent in [first, *differing])
            raise ValueError(f"the agents' {kind} spaces differ ({listed}), {advice}")
    return obs_space, act_space


def default_groups(agents: Sequence[str]) -> dict[str, list[str]]:
    """Agents whose names differ only in a trailing ``_<number>`` form one group, named by
    what comes before it (``adversary_0``, ``adversary_1`` -> ``"adversary"``); any other
    agent is a group of its own name.

    >>> default_groups(["adversary_0", "adversary_1", "agent_0", "ball"])
    {'adversary': ['adversary_0', 'adversary_1'], 'agent': ['agent_0'], 'ball': ['ball']}
    """
    groups: dict[str, list[str]] = {}
    for agent in agents:
        match = _TRAILING_NUMBER.match(agent)
        groups.setdefault(match.group(1) if match else agent, []).append(agent)
    return groups


def split_reset_options(options: dict | None) -> tuple[Any, dict | None]:
    """``(options["reset_mask"] or None, the other options, for each env's reset)``; the
    caller's dict is never mutated (gymnasium's vector envs pop "reset_mask" from theirs)."""
    if options is None:
        return None, None
    env_options = {**options}
    return env_options.pop("reset_mask", None), env_options
