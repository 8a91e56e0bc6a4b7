"""``make_vec`` for registered gymnasium ids, and gymvec inside ``gymnasium.make_vec``.

Two ways in:

* ``gymvec.make_vec("CartPole-v1", 8, backend="parallel")`` builds a gymvec vector env for any
  registered id, including ids registered at run time in this process: the sub-envs are built
  from the id's ``EnvSpec``, which travels to spawned workers, so they need no registration.
* ``gymnasium.make_vec("gymvec:gymvec/CartPole-v1", num_envs=8)``: gymvec registers a derived
  id ``gymvec/<id>`` (``gymvec-<namespace>/<name>`` for namespaced ids) whose
  ``vector_entry_point`` is :func:`vector_entry_point` (see ``gymnasium_ids``). gymvec options
  (``num_workers``, ``autoreset_mode``, ``output``, ``local_worker``, ``backend``,
  ``context``, ``timeout``) can be passed as keyword arguments of ``gymnasium.make_vec``; the
  rest go to the env.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from typing import TYPE_CHECKING, Any

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec
from gymnasium.vector import AutoresetMode

from gymvec.common.cores import usable_cores
from gymvec.common.faults import Restart, parse_on_fault
from gymvec.subenvs.factories import BlockFactory
from gymvec.subenvs.layout import WorkerLayout

if TYPE_CHECKING:  # importing gymvec registers the ids: torch is not imported for that
    from gymvec.layout.auto import AutoVectorEnv
    from gymvec.vector.vector_env import GymnasiumVectorEnv

BACKENDS = ("auto", "serial", "parallel", "ray")
_GYMVEC_OPTIONS = (
    "backend",
    "num_workers",
    "autoreset_mode",
    "output",
    "local_worker",
    "context",
    "batch_size",
    "timeout",
    "ray_options",
    "on_fault",
)
# gymnasium.make_vec takes vectorization_mode itself: make_vec's is spelled so through it
_ALIASES = {"gymvec_vectorization_mode": "vectorization_mode"}


def make_vec(
    env_id: str | EnvSpec,
    num_envs: int = 1,
    *,
    backend: str = "auto",
    num_workers: int | None = None,
    autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
    output: str = "numpy",
    local_worker: bool | None = None,
    context: str | None = None,
    batch_size: int | None = None,
    timeout: float | None = None,
    ray_options: dict | None = None,
    vectorization_mode: str | None = None,
    on_fault: str | Restart = "raise",
    **env_kwargs: Any,
) -> GymnasiumVectorEnv | AutoVectorEnv:
    """``num_envs`` copies of a registered gymnasium env as a gymvec vector env.

    Args:
        env_id: a registered id (or an ``EnvSpec``).
        num_envs: number of sub-envs.
        backend: "auto" (default: this process or worker processes, chosen at the first
            reset from the sub-env's measured costs, see ``docs/layout.md`` and
            ``envs.layout``), "parallel" (worker processes), "serial" (this process) or "ray"
            (Ray actors, as ``RayEnv``; needs Ray: ``pip install ray``).
        num_workers: worker processes for the parallel backend (default: usable cores);
            Ray actors for the ray backend (default: one per alive node of the cluster).
        autoreset_mode: "next_step", "same_step" or "disabled" (or a gymnasium
            ``AutoresetMode``, or its value).
        output: "numpy" or "torch".
        local_worker: parallel backend: step a share of the sub-envs in this process
            (default: when the workers fill the cores, without a timeout or first-ready
            batches).
        context: parallel backend: the start method of the workers ("fork", "spawn",
            "forkserver"; default: multiprocessing's). Ids registered at run time work with
            every one of them: the id's ``EnvSpec`` travels to the workers.
        batch_size: first-ready batches of this many sub-envs (``async_reset``,
            ``send(actions, env_id)``, ``recv()``; default ``num_envs``).
        timeout: parallel and ray backends: as ``ParallelVectorEnv``'s and ``RayEnv``'s (the
            serial backend refuses one).
        ray_options: ray backend: ``RayEnv``'s options as a dict (``address``,
            ``worker_processes``, ``actor_options``, ``placement``, ``startup_timeout``).
        vectorization_mode: None (default): one gymnasium env per row;
            ``"vector_entry_point"``: one block per worker, a vector env of its share of the
            rows from the id's vector entry point (``gymnasium.make_vec(id, share,
            vectorization_mode="vector_entry_point")``; through ``gymnasium.make_vec`` this
            option is spelled ``gymvec_vectorization_mode``).
        on_fault: "raise" (default: a ``WorkerError`` at a sub-env's first fault),
            "restart" or a ``gymvec.Restart(limit, window)``: a sub-env that raises, or whose
            worker dies or outlasts ``timeout``, is rebuilt and its step reads as a
            truncation (``infos["fault"]``; see ``docs/faults.md``).
        **env_kwargs: passed to ``gymnasium.make`` (``max_episode_steps``, ``render_mode``...);
            a name close to one of gymvec's options that the env does not name raises a
            TypeError that says which option it may stand for.

    Example:
        >>> import gymvec
        >>> envs = gymvec.make_vec("CartPole-v1", 4, backend="serial")
        >>> envs.reset(seed=0)[0].shape
        (4, 4)
        >>> envs.close()
    """
    from gymvec.options import parse_autoreset_mode

    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"num_envs: expected a positive int, got {num_envs!r}")
    if num_workers is not None and (isinstance(num_workers, bool | str) or num_workers < 1):
        raise ValueError(
            f"num_workers: expected a positive int or None (make_vec's backend='auto' chooses "
            f"it), got {num_workers!r}"
        )
    autoreset_mode = parse_autoreset_mode(autoreset_mode)
    parse_on_fault(on_fault)  # a bad one is refused here, before any sub-env is built
    spec = gym.spec(env_id) if isinstance(env_id, str) else env_id
    check_env_kwargs(spec, env_kwargs)
    if vectorization_mode not in (None, "sync", "vector_entry_point"):
        raise ValueError(
            "vectorization_mode: expected None (one env per row) or 'vector_entry_point' "
            f"(blocks), got {vectorization_mode!r}"
        )
    blocks = vectorization_mode == "vector_entry_point"
    if backend == "auto" and timeout is not None:
        # a throwaway timed in this process could outlast the timeout: workers, untimed
        backend = "parallel"
    if backend == "auto" and blocks:
        # the id's own vector env is vectorised already: one block, in this process, unless
        # the options ask for workers (then as backend="parallel")
        wants_workers = num_workers is not None or local_worker is not None
        backend = "parallel" if wants_workers else "serial"
    common = dict(
        autoreset_mode=autoreset_mode, output=output, batch_size=batch_size, on_fault=on_fault
    )

    def build(backend: str, workers: int | None, local: bool | None) -> GymnasiumVectorEnv:
        if blocks:
            if backend == "serial":
                workers = 1
            env_fns: list[Any] = _block_fns(spec, num_envs, workers, autoreset_mode, env_kwargs)
            workers = len(env_fns)
        else:
            env_fns = [functools.partial(gym.make, spec, **env_kwargs)] * num_envs
        envs = _build(backend, env_fns, workers, local, context, timeout, ray_options, common)
        envs.spec = spec
        return envs

    if backend != "auto":
        return build(backend, num_workers, local_worker)
    from gymvec.layout.auto import AutoVectorEnv
    from gymvec.layout.cache import cache_key
    from gymvec.layout.model import Constraints

    constraints = Constraints.of(
        num_workers=num_workers,
        local_worker=local_worker,
        timeout=timeout,
        first_ready=batch_size is not None and batch_size < num_envs,
        context=context,
    )
    auto = AutoVectorEnv(
        [functools.partial(gym.make, spec, **env_kwargs)] * num_envs,
        lambda c: build(c.backend, c.workers if c.backend == "parallel" else None, c.local),
        constraints,
        autoreset_mode,
        key=cache_key(spec.id, env_kwargs, num_envs, usable_cores()),
    )
    auto.spec = spec
    return auto


def _build(
    backend: str,
    env_fns: list,
    num_workers: int | None,
    local_worker: bool | None,
    context: str | None,
    timeout: float | None,
    ray_options: dict | None,
    common: dict[str, Any],
) -> GymnasiumVectorEnv:
    """The vector env of one fixed backend over ``env_fns``."""
    from gymvec.vector.dropin import ParallelVectorEnv, SerialVectorEnv

    if backend == "ray":
        return _ray_vec(env_fns, num_workers, ray_options, timeout=timeout, **common)
    if backend == "serial":
        if timeout is not None:
            raise ValueError(
                "timeout: the serial backend steps every sub-env in this process, where a "
                "timeout cannot cut them short; use backend='parallel'"
            )
        return SerialVectorEnv(env_fns, **common)
    return ParallelVectorEnv(
        env_fns,
        num_workers=num_workers,
        local_worker=local_worker,
        context=context,
        timeout=timeout,
        # Arrays go through shared memory either way; False also takes the spaces that
        # gymnasium's AsyncVectorEnv cannot share (Graph, Sequence, custom), pickled.
        shared_memory=False,
        **common,
    )


def _block_fns(
    spec: EnvSpec,
    num_envs: int,
    num_workers: int | None,
    autoreset_mode: AutoresetMode,
    env_kwargs: dict,
) -> list[BlockFactory]:
    """One block factory per worker, each building the id's vector entry point over that
    worker's share of the rows (in the requested autoreset mode, where the entry point takes
    one: else the engine says which modes the block's own supports)."""
    if spec.vector_entry_point is None:
        raise ValueError(
            f"Cannot create vectorized environment for {spec.id} because it doesn't have a "
            f"vector entry point defined (gymnasium): id {spec.id!r} has no blocks to build; "
            "use the default vectorization_mode=None (one env per row)"
        )
    creator: Any = spec.vector_entry_point
    if isinstance(creator, str):
        creator = gym.envs.registration.load_env_creator(creator)
    takes_mode = "autoreset_mode" in inspect.signature(creator).parameters
    if takes_mode and autoreset_mode is not AutoresetMode.NEXT_STEP:
        env_kwargs = {**env_kwargs, "autoreset_mode": autoreset_mode}
    shares = WorkerLayout.plan(num_envs, num_workers=num_workers).sub_envs_per_worker
    return [
        BlockFactory(
            functools.partial(
                gym.make_vec, spec, share, vectorization_mode="vector_entry_point", **env_kwargs
            ),
            share,
        )
        for share in shares
    ]


def _ray_vec(
    env_fns: list,
    num_workers: int | None,
    ray_options: dict | None,
    *,
    autoreset_mode: Any,
    output: str,
    batch_size: int | None,
    timeout: float | None,
    on_fault: str | Restart,
) -> GymnasiumVectorEnv:
    """The gymnasium face over an engine whose sub-envs run on Ray actors (torch-free)."""
    from gymvec.backends.ray.executor import RayOptions, connect, import_ray, ray_backend
    from gymvec.engine.engine import BatchEngine
    from gymvec.options import check_timeout
    from gymvec.subenvs.factories import SubEnvFactories
    from gymvec.vector.vector_env import GymnasiumVectorEnv

    import_ray()  # before anything is built: without Ray, say how to install it
    options = RayOptions(**(ray_options or {}))
    n = len(env_fns)
    if num_workers is None:
        ray = connect(options.address)
        num_workers = min(n, max(sum(1 for node in ray.nodes() if node["Alive"]), 1))
    factories = SubEnvFactories.spread(env_fns, num_workers)
    engine = BatchEngine(
        factories,
        ray_backend(options),
        timeout=check_timeout(timeout, False),
        on_fault=parse_on_fault(on_fault),
    )
    try:
        _ = engine.executor  # the actors start now
        return GymnasiumVectorEnv(
            engine, autoreset_mode=autoreset_mode, output=output, batch_size=batch_size
        )
    except BaseException:
        engine.close()
        raise


def gymvec_option_names() -> frozenset[str]:
    """The keyword arguments of gymvec's env constructors and ``make_vec``: what a keyword
    argument meant for the env is checked against."""
    from gymvec.backends.processes.executor import ProcessOptions
    from gymvec.backends.ray.executor import RayOptions
    from gymvec.vector.dropin import ParallelVectorEnv

    names = set(inspect.signature(ParallelVectorEnv.__init__).parameters)
    names |= set(inspect.signature(make_vec).parameters)
    names |= {field.name for field in dataclasses.fields(ProcessOptions)}
    names |= {field.name for field in dataclasses.fields(RayOptions)}
    # ParallelEnv's and RayEnv's own (their module imports torch: named here)
    names |= {"envs_per_worker", "mp_start_method", "num_threads", "num_sub_threads", "memmap"}
    names |= {"create_env_kwargs", "worker_processes", "placement", "address"}
    return frozenset(names - {"self", "env_fns", "env_id", "env_kwargs", "kwargs"})


# gymnasium.make's own keyword arguments: they reach gym.make, not the env's constructor.
_MAKE_OPTIONS = frozenset(inspect.signature(gym.make).parameters) - {"id", "kwargs"}


def check_env_kwargs(spec: EnvSpec, env_kwargs: dict[str, Any]) -> None:
    """Refuse a keyword argument for the env that looks like one of gymvec's own options
    (``num_worker`` for ``num_workers``, or ``daemon``, which ``make_vec`` does not take),
    before it reaches the env: a TypeError that says which option it may stand for. A name
    that the env's constructor or registration names itself goes through."""
    from gymvec.options import close_names

    options = gymvec_option_names()
    suspects = [
        name
        for name in env_kwargs
        if name not in _MAKE_OPTIONS
        and name not in spec.kwargs
        and (name in options or close_names(name, options))
    ]
    if not suspects:
        return
    accepted = _constructor_names(spec)
    for name in suspects:
        if name in accepted:
            continue
        if name in options:
            hint = (
                f"`{name}` is an option of gymvec's env classes that make_vec does not take: "
                "build ParallelVectorEnv (or ParallelEnv) directly to set it"
            )
        else:
            hint = "did you mean " + " or ".join(f"`{c}`" for c in close_names(name, options)) + "?"
        taken = ", ".join(sorted(inspect.signature(make_vec).parameters.keys() - {"env_kwargs"}))
        raise TypeError(
            f"make_vec got a keyword argument {name!r}, which is neither an option of "
            f"make_vec nor a parameter of {spec.id!r}'s constructor: {hint} (make_vec's "
            f"options: {taken}; other keyword arguments go to gymnasium.make, then the env)"
        )


def _constructor_names(spec: EnvSpec) -> frozenset[str]:
    """The parameters that the env's entry point names (none where it cannot be loaded)."""
    creator: Any = spec.entry_point
    try:
        if isinstance(creator, str):
            creator = gym.envs.registration.load_env_creator(creator)
        return frozenset(inspect.signature(creator).parameters)
    except Exception:  # not loadable here, or no signature: nothing is known to be the env's
        return frozenset()


def vector_entry_point(
    base_id: str, num_envs: int = 1, **kwargs: Any
) -> GymnasiumVectorEnv | AutoVectorEnv:
    """The ``vector_entry_point`` of gymvec's derived ids (called by ``gymnasium.make_vec``)."""
    options = {name: kwargs.pop(name) for name in _GYMVEC_OPTIONS if name in kwargs}
    options |= {_ALIASES[name]: kwargs.pop(name) for name in _ALIASES if name in kwargs}
    return make_vec(base_id, num_envs, **options, **kwargs)
