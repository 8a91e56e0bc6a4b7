"""The specs of a batch of sub-envs, from what the engine learnt of them: each sub-env's own
(its gymnasium spaces, or its ``EnvBase`` specs), batched, or the union of a multi-task
batch's keys."""

from __future__ import annotations

from typing import Any, NamedTuple, cast

import torch

from gymvec.envs.gym_env import observation_spec_from_space
from gymvec.errors import SpaceMismatchError
from gymvec.spaces import spec_from_space
from gymvec.specs import Composite, stack_specs
from gymvec.subenvs.group import SubEnvSummary


class BatchSpecs(NamedTuple):
    """A batch's observation and full action specs and reward dtype; for a multi-task batch
    (``heterogeneous``), also each sub-env's keys and each task's action spec."""

    observation: Composite
    action: Composite
    reward_dtype: torch.dtype
    sub_env_keys: list[dict[str, set]]  # (empty where not heterogeneous)
    task_actions: list[Composite]

    @classmethod
    def of(cls, summaries: list[SubEnvSummary], n: int, heterogeneous: bool) -> BatchSpecs:
        """The specs of ``n`` rows whose sub-envs ``summaries`` describe (one per row)."""
        specs: dict[int, tuple] = {}  # per distinct summary: the rows of a task share theirs
        for summary in summaries:
            if id(summary) not in specs:
                specs[id(summary)] = sub_env_specs(summary)
        per_env: list[Any] = [specs[id(summary)] for summary in summaries]
        observations = [obs for obs, _, _ in per_env]
        actions = [action for _, action, _ in per_env]
        if heterogeneous:
            # Specs list every key of every task; outputs are lazy stacks in which each
            # sub-env shows only its own keys.
            keys = [keys_of(obs, action) for obs, action in zip(observations, actions)]
            return cls(
                union_spec(observations, n), union_spec(actions, n), per_env[0][2], keys, actions
            )
        return cls(
            batch_spec(observations, n, "observation"),
            batch_spec(actions, n, "action"),
            per_env[0][2],
            [],
            [],
        )


def sub_env_specs(summary: SubEnvSummary) -> tuple[Composite, Composite, torch.dtype]:
    """(observation spec, full action spec, reward dtype) of a sub-env, unbatched."""
    observation_space, action_space = summary.observation_space, summary.action_space
    if observation_space is not None and action_space is not None:
        action = spec_from_space(action_space, "action_space", objects=True)
        observation = observation_spec_from_space(observation_space)
        return observation, Composite({"action": action}), torch.float32
    if summary.specs is None:
        raise TypeError(f"a sub-env summary with neither spaces nor specs: {summary}")
    observation, full_action, reward_dtype = summary.specs
    return observation.clone(), full_action.clone(), reward_dtype


def union_spec(specs: list[Composite], n: int) -> Composite:
    union = Composite()
    for spec in specs:
        for key in spec.keys(include_nested=True, leaves_only=True):
            if key not in union:
                union[key] = spec[key].clone()
    return union.expand(n)


def keys_of(observation_spec: Composite, full_action_spec: Composite) -> dict[str, set]:
    obs = {k if isinstance(k, tuple) else (k,) for k in observation_spec.keys(True, True)}
    action = {k if isinstance(k, tuple) else (k,) for k in full_action_spec.keys(True, True)}
    return {"obs": obs, "action": action}


def batch_spec(specs: list[Composite], n: int, kind: str) -> Composite:
    first = specs[0]
    if all(spec == first for spec in specs):
        return cast(Composite, first.expand(n))  # (stubs say TensorSpec: it is a Composite)
    try:
        return cast(Composite, stack_specs(specs))
    except ValueError as exc:  # e.g. Categorical specs of different n
        raise SpaceMismatchError(f"sub-envs cannot be batched: {exc}", kind=kind) from exc
