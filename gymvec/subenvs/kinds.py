"""Which objects can be sub-envs, and what the engine learns of one (:class:`SubEnvSummary`).

The engine knows gymnasium envs itself. Kinds from the layers above register here when their
module is imported (an instance of one implies its module is): ``gymvec.envs.base`` registers
``EnvBase`` (summarized from its specs, driven through its tensordict API), and
``gymvec.envs.gym_env`` registers ``GymEnv`` as a wrapper of a gymnasium env. So the engine,
which worker processes import, never imports those layers (nor torch).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import gymnasium as gym
from gymnasium import spaces

from gymvec.common.infos import InfoField
from gymvec.common.structure import LeafSpec, leaf_specs, observation_leaves, space_leaves


@dataclasses.dataclass
class SubEnvSummary:
    """What the engine learns of one sub-env, wherever it was built (picklable; torch-free
    for gymnasium sub-envs).

    ``observation_leaves``/``action_leaves``: (key, shape, numpy dtype) of each leaf, as the
    buffers lay them out. Gymnasium sub-envs (also inside a ``GymEnv``) give their spaces and
    gymnasium attributes; other ``EnvBase`` sub-envs give their specs (``specs``: observation
    spec, full action spec, reward dtype). ``info_fields``: the numeric info entries the
    sub-env declares (a ``GymEnv``'s, an ``EnvBase``'s ``info_spec``; none for a gymnasium
    env), for the sub-env the engine builds to learn the layout (None for the others).
    """

    observation_leaves: list[LeafSpec]
    action_leaves: list[LeafSpec]
    observation_space: spaces.Space | None = None
    action_space: spaces.Space | None = None
    metadata: dict = dataclasses.field(default_factory=dict)
    render_mode: str | None = None
    env_spec: Any = None
    specs: tuple | None = None
    info_fields: dict[str, InfoField] | None = None
    rows: int = 1  # a block's num_envs
    block: bool = False  # a gymnasium vector env (see subenvs.block)
    type_name: str = ""  # a block's class, as errors name it


@dataclasses.dataclass(frozen=True)
class SubEnvKind:
    """A class of sub-envs that are not gymnasium envs, as a layer above registers it.

    ``summarize(env, declared_infos)``: its :class:`SubEnvSummary`; ``make_driver(env, index,
    buffers)``: the driver that carries commands out on it (as ``GymDriver``: ``step``,
    ``reset``, and for faults that heal ``last_value`` and ``write_faulted``);
    ``spaces(summary)``: the gymnasium observation and action space of a summary without them.
    """

    cls: type
    summarize: Callable[[Any, bool], SubEnvSummary]
    make_driver: Callable[[Any, int, Any], Any]
    spaces: Callable[[SubEnvSummary], tuple[spaces.Space, spaces.Space]]


_KINDS: list[SubEnvKind] = []
_GYM_WRAPPERS: list[tuple[type, Callable[[Any], gym.Env]]] = []


def register_kind(kind: SubEnvKind) -> None:
    """Let instances of ``kind.cls`` be sub-envs (see :class:`SubEnvKind`)."""
    _KINDS.append(kind)


def register_gym_wrapper(cls: type, unwrap: Callable[[Any], gym.Env]) -> None:
    """Instances of ``cls`` run the gymnasium env ``unwrap(instance)``: the engine drives
    that env directly."""
    _GYM_WRAPPERS.append((cls, unwrap))


def gym_env_of(env: Any) -> gym.Env | None:
    """The gymnasium env a sub-env runs: itself, the env inside a registered wrapper (a
    GymEnv), or None."""
    if isinstance(env, gym.Env):
        return env
    for cls, unwrap in _GYM_WRAPPERS:
        if isinstance(env, cls):
            return unwrap(env)
    return None


def kind_of(env: Any) -> SubEnvKind | None:
    """The registered kind of a sub-env that is not a gymnasium env, or None."""
    for kind in _KINDS:
        if isinstance(env, kind.cls):
            return kind
    return None


def is_block(env: Any) -> bool:
    """Whether a sub-env is a block: a gymnasium vector env, stepped as its rows at once."""
    return isinstance(env, gym.vector.VectorEnv)


def check_sub_env(env: Any) -> Any:
    """``env`` if it is a gymnasium.Env, a gymnasium.vector.VectorEnv (a block) or a gymvec
    EnvBase, else a TypeError."""
    if isinstance(env, gym.Env) or is_block(env) or kind_of(env) is not None:
        return env
    raise TypeError(
        "create_env_fn must return a gymnasium.Env, a gymnasium.vector.VectorEnv (a block of "
        f"rows) or a gymvec EnvBase; it returned {type(env).__module__}.{type(env).__qualname__}"
    )


def summarize(env: Any, declared_infos: bool = False) -> SubEnvSummary:
    """The summary of a sub-env; with ``declared_infos``, also the info fields it declares.

    Nothing here resets or steps the sub-env: the info entries of a gymnasium env are learnt
    from its own first results (see ``BatchEngine.learn_info_fields``).
    """
    if is_block(env):
        return _block_summary(env, declared_infos)
    gym_env = gym_env_of(env)
    if gym_env is None:
        return _kind(env).summarize(env, declared_infos)
    fields = None
    if declared_infos:
        declared = getattr(env, "info_fields", None) if env is not gym_env else None
        fields = dict(declared) if isinstance(declared, dict) else {}  # a GymEnv's
    return SubEnvSummary(
        observation_leaves=leaf_specs(observation_leaves(gym_env.observation_space)),
        action_leaves=leaf_specs(space_leaves(gym_env.action_space, ("action",))),
        observation_space=gym_env.observation_space,
        action_space=gym_env.action_space,
        metadata=dict(gym_env.metadata or {}),
        render_mode=gym_env.render_mode,
        env_spec=gym_env.spec,
        info_fields=fields,
    )


def _block_summary(block: gym.vector.VectorEnv, declared_infos: bool) -> SubEnvSummary:
    observation_space, action_space = block.single_observation_space, block.single_action_space
    return SubEnvSummary(
        observation_leaves=leaf_specs(observation_leaves(observation_space)),
        action_leaves=leaf_specs(space_leaves(action_space, ("action",))),
        observation_space=observation_space,
        action_space=action_space,
        metadata=dict(block.metadata or {}),
        render_mode=block.render_mode,
        env_spec=block.spec,
        info_fields={} if declared_infos else None,
        rows=int(block.num_envs),
        block=True,
        type_name=type(block).__qualname__,
    )


def spaces_of_summary(summary: SubEnvSummary) -> tuple[spaces.Space, spaces.Space]:
    """The gymnasium observation and action space of a sub-env (from its specs where it is
    a gymvec ``EnvBase`` without spaces)."""
    if summary.observation_space is not None and summary.action_space is not None:
        return summary.observation_space, summary.action_space
    if not _KINDS:
        raise TypeError("a sub-env summary without spaces, and no sub-env kind to read its specs")
    return _KINDS[0].spaces(summary)


def spaces_of_summaries(
    summaries: list[SubEnvSummary],
) -> tuple[list[spaces.Space], list[spaces.Space]]:
    """:func:`spaces_of_summary` of each summary (once per distinct summary)."""
    spaces_of: dict[int, tuple] = {}
    for summary in summaries:
        if id(summary) not in spaces_of:
            spaces_of[id(summary)] = spaces_of_summary(summary)
    pairs = [spaces_of[id(summary)] for summary in summaries]
    return [obs for obs, _ in pairs], [action for _, action in pairs]


def _kind(env: Any) -> SubEnvKind:
    kind = kind_of(env)
    if kind is None:
        check_sub_env(env)  # raises
    return kind  # type: ignore[return-value]
