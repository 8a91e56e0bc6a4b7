"""rl-zoo3's ``train`` with gymvec as its vectorizer: ``--vec-env gymvec``.

rl-zoo3's command line knows ``--vec-env dummy`` and ``subproc`` only; its ``ExperimentManager``
takes any other vectorizer through the class attribute ``default_vec_env_cls``, which it calls
as ``cls(env_fns, **vec_env_kwargs)`` (SB3's ``make_vec_env``). This entry point adds
``--vec-env gymvec`` (``gymvec.sb3.ParallelVecEnv``) and ``--vec-env gymvec-serial``
(``gymvec.sb3.SerialVecEnv``), sets that attribute and runs rl-zoo3's own ``train``::

    python -m gymvec.integrations.rl_zoo3 train --algo ppo --env CartPole-v1 \\
        --vec-env gymvec --gymvec-workers 2

Every other argument is rl-zoo3's, unchanged; ``--vec-env dummy``/``subproc`` run rl-zoo3 as
it is. From Python, :func:`vec_env_cls` gives the class to set on ``ExperimentManager``.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["GYMVEC_VEC_ENVS", "main", "vec_env_cls"]

# --vec-env choices this entry point adds to rl-zoo3's own ("dummy", "subproc").
GYMVEC_VEC_ENVS = ("gymvec", "gymvec-serial")
_RL_ZOO3_VEC_ENVS = ("dummy", "subproc")


def vec_env_cls(
    backend: str = "gymvec",
    num_workers: int | None = None,
    start_method: str | None = None,
) -> Callable[..., Any]:
    """The vectorizer to set as ``ExperimentManager.default_vec_env_cls``.

    Args:
        backend: "gymvec" (``ParallelVecEnv``, worker processes) or "gymvec-serial"
            (``SerialVecEnv``, this process).
        num_workers, start_method: ``ParallelVecEnv``'s (default: gymvec's).

    A class, or a ``functools.partial`` of one when options are given: neither is bound as a
    method when stored on the class (a plain function would be).
    """
    from gymvec.sb3 import ParallelVecEnv, SerialVecEnv

    if backend not in GYMVEC_VEC_ENVS:
        raise ValueError(f"backend: expected one of {GYMVEC_VEC_ENVS}, got {backend!r}")
    if backend == "gymvec-serial":
        if num_workers is not None or start_method is not None:
            raise ValueError(
                "--gymvec-workers and --gymvec-start-method are options of --vec-env gymvec "
                "(worker processes); gymvec-serial steps every sub-env in this process"
            )
        return SerialVecEnv
    options: dict[str, Any] = {} if num_workers is None else {"num_workers": num_workers}
    if start_method is not None:
        options["start_method"] = start_method
    return functools.partial(ParallelVecEnv, **options) if options else ParallelVecEnv


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m gymvec.integrations.rl_zoo3",
        description="rl-zoo3's train, with --vec-env gymvec / gymvec-serial; every other "
        "argument goes to rl-zoo3 (python -m rl_zoo3.train --help lists them).",
        allow_abbrev=False,  # an abbreviation of one of rl-zoo3's options must reach rl-zoo3
    )
    parser.add_argument("command", choices=["train"], help="rl-zoo3's command (train only)")
    parser.add_argument(
        "--vec-env", default="dummy", choices=[*_RL_ZOO3_VEC_ENVS, *GYMVEC_VEC_ENVS]
    )
    parser.add_argument("--gymvec-workers", type=int, default=None, metavar="N")
    parser.add_argument(
        "--gymvec-start-method", default=None, choices=["fork", "spawn", "forkserver"]
    )
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """Run rl-zoo3's ``train`` with ``argv`` (default: the command line's arguments)."""
    try:
        from rl_zoo3 import train as rl_zoo3_train
        from rl_zoo3.exp_manager import ExperimentManager
    except ImportError as err:
        raise ImportError(
            "rl-zoo3 is not installed: pip install rl_zoo3 (it brings sb3-contrib)"
        ) from err

    args, rest = _parser().parse_known_args(sys.argv[1:] if argv is None else argv)
    if args.vec_env in _RL_ZOO3_VEC_ENVS:
        if args.gymvec_workers is not None or args.gymvec_start_method is not None:
            _parser().error("--gymvec-workers/--gymvec-start-method need --vec-env gymvec")
        cls = None
    else:
        cls = vec_env_cls(args.vec_env, args.gymvec_workers, args.gymvec_start_method)
    vec_env = args.vec_env if cls is None else "dummy"  # rl-zoo3 checks its own choices
    saved_argv, saved_cls = sys.argv, ExperimentManager.default_vec_env_cls
    sys.argv = [f"{sys.argv[0]} train", *rest, "--vec-env", vec_env]
    if cls is not None:
        ExperimentManager.default_vec_env_cls = cls
    try:
        rl_zoo3_train.train()
    finally:  # main() called in-process (tests) must leave rl-zoo3 as it was
        sys.argv, ExperimentManager.default_vec_env_cls = saved_argv, saved_cls


if __name__ == "__main__":
    main()
