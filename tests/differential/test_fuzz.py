"""Differential fuzzing: generated envs and call sequences through gymvec and gymnasium.

hypothesis generates spaces (nested Dict/Tuple of Box of every numeric dtype with finite and
infinite bounds, Discrete and MultiDiscrete with ``start``, MultiBinary), an env over them
with generated episode lengths and infos, and a sequence of calls (steps, resets with seeds
and masks, ``call``/``get_attr``/``set_attr``). Each case runs through gymvec's drop-ins and
gymnasium's ``SyncVectorEnv`` side by side, in every autoreset mode, with numpy and torch
output, and every result must be equal (``_face_envs.assert_same``). The tensordict API runs
``ParallelEnv`` against ``SerialEnv`` the same way; bad input must raise a named error and
leave the env as it was.

The examples per test come from the hypothesis profile (``conftest.py``): "ci" by default (a
few derandomized examples), ``GYMVEC_HYPOTHESIS_PROFILE=dev`` for a long run by hand.
Parallel cases fork their workers (cheap to start).
"""

from __future__ import annotations

import _face_envs as fe
import _fuzz_envs as fz
import gymnasium as gym
import numpy as np
import pytest
import torch
from _replay import next_step_alone
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from hypothesis import given
from hypothesis import strategies as st
from tensordict import TensorDict

from gymvec import ParallelEnv, ParallelVectorEnv, SerialEnv, SerialVectorEnv

pytestmark = pytest.mark.timeout(600)

MODES = list(AutoresetMode)

# (name, make(env_fns, autoreset_mode, output), fewest and most sub-envs)
BACKENDS = {
    "serial": (SerialVectorEnv, 2, 4),
    "parallel-one-per-worker": (
        lambda fns, **kw: ParallelVectorEnv(
            fns, context="fork", num_workers=len(fns), local_worker=False, **kw
        ),
        2,
        3,
    ),
    "parallel-several-per-worker": (
        lambda fns, **kw: ParallelVectorEnv(
            fns, context="fork", num_workers=2, local_worker=True, **kw
        ),
        3,
        4,
    ),
}


def to_numpy(value):
    """Torch output as numpy, each tensor's dtype checked against numpy's for it."""
    if isinstance(value, dict):
        return {key: to_numpy(v) for key, v in value.items()}
    if isinstance(value, tuple):
        return tuple(to_numpy(v) for v in value)
    if isinstance(value, torch.Tensor):
        return value.numpy()
    return value


def torch_actions(actions):
    if isinstance(actions, dict):
        return {key: torch_actions(v) for key, v in actions.items()}
    if isinstance(actions, tuple):
        return tuple(torch_actions(v) for v in actions)
    return torch.as_tensor(actions)


def check_torch_types(actual, expected, path=""):
    """Torch output: tensors exactly where numpy output has arrays, of the matching dtype."""
    if isinstance(expected, dict):
        for key in expected:
            check_torch_types(actual[key], expected[key], f"{path}[{key!r}]")
    elif isinstance(expected, tuple):
        for k, (a, e) in enumerate(zip(actual, expected)):
            check_torch_types(a, e, f"{path}[{k}]")
    else:
        assert isinstance(actual, torch.Tensor), f"{path}: {type(actual)} is not a tensor"
        assert actual.dtype == torch.from_numpy(np.asarray(expected)).dtype, path


def compare(actual, expected, what: str, output: str) -> None:
    """A face's result (reset or step) against SyncVectorEnv's."""
    if output == "torch":
        values = expected[:-1]  # infos stay numpy
        check_torch_types(actual[:-1], values, what)
        actual = (*to_numpy(actual[:-1]), actual[-1])
    fe.assert_same(actual, expected, what)


def run_differential(make, config: fz.FuzzConfig, mode, output, ops, seed) -> None:
    """Run ``ops`` through SyncVectorEnv and the face ``make`` builds, comparing each result."""
    fns = config.env_fns()
    ref = SyncVectorEnv(fns, autoreset_mode=mode)
    env = make(fns, autoreset_mode=mode, output=output)
    try:
        ref.action_space.seed(seed)
        compare(env.reset(seed=seed), ref.reset(seed=seed), "reset", output)
        n = config.num_envs
        finished = np.zeros(n, dtype=bool)
        for k, op in enumerate(ops):
            what = f"op {k} {op}"
            if op[0] == "step":
                if mode == AutoresetMode.DISABLED and finished.any():
                    # DISABLED needs the finished sub-envs reset first (Sync asserts, gymvec
                    # raises a ValueError: test_bad_input_* below)
                    options = {"reset_mask": finished.copy()}
                    expected = ref.reset(options=dict(options))
                    compare(env.reset(options=options), expected, what + " reset", output)
                actions = ref.action_space.sample()
                expected = ref.step(actions)
                given = torch_actions(actions) if output == "torch" and k % 2 else actions
                compare(env.step(given), expected, what, output)
                finished = expected[2] | expected[3]
            elif op[0] == "reset":
                _, seed_arg, mask = op
                options = None
                if mask is not None:
                    mask = np.array(mask) | (finished if mode == AutoresetMode.DISABLED else False)
                    options = {"reset_mask": mask}
                ref_options = None if options is None else dict(options)  # Sync pops the mask
                expected = ref.reset(seed=seed_arg, options=ref_options)
                compare(env.reset(seed=seed_arg, options=options), expected, what, output)
                finished = finished & ~mask if mask is not None else np.zeros(n, dtype=bool)
            elif op[0] == "call":
                assert env.call("describe", op[1]) == ref.call("describe", op[1]), what
            elif op[0] == "get_attr":
                fe.assert_same(env.get_attr(op[1]), ref.get_attr(op[1]), what)
            else:
                env.set_attr("bonus", op[1])
                ref.set_attr("bonus", op[1])
    finally:
        env.close()
        ref.close()


@st.composite
def cases(draw, min_envs: int, max_envs: int, ints=fz.INT_DTYPES):
    config = draw(fz.fuzz_configs(min_envs, max_envs, ints))
    ops = draw(st.lists(fz.operations(config.num_envs), min_size=4, max_size=16))
    return config, ops, draw(st.sampled_from(["numpy", "torch"])), draw(st.integers(0, 2**16))


@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("mode", MODES, ids=[m.value for m in MODES])
def test_face_equals_sync_vector_env_on_generated_cases(backend, mode):
    make, low, high = BACKENDS[backend]

    @given(cases(low, high))
    def check(case):
        config, ops, output, seed = case
        run_differential(make, config, mode, output, ops, seed)

    check()


# ---- the tensordict API: ParallelEnv against SerialEnv ----------------------------------------
def compare_td(actual, expected, what: str) -> None:
    keys = set(expected.keys(True, True))
    assert set(actual.keys(True, True)) == keys, what
    for key in keys:
        a, e = actual.get(key), expected.get(key)
        if isinstance(e, torch.Tensor):
            assert isinstance(a, torch.Tensor), f"{what} {key}: {type(a)}"
            assert (a.dtype, a.shape) == (e.dtype, e.shape), f"{what} {key}"
            assert torch.equal(a.view(torch.uint8), e.view(torch.uint8)), f"{what} {key}"
        else:
            assert a.tolist() == e.tolist(), f"{what} {key}"


def compare_extras(actual_env, expected_env, what: str) -> None:
    def of(env):
        return {i: (e.root, e.next) for i, e in env.last_extras.items()}

    fe.assert_same(of(actual_env), of(expected_env), what + " extras")


def run_tensordict(config: fz.FuzzConfig, ops, seed: int, workers: int) -> None:
    fns = config.env_fns()
    n = config.num_envs
    counts = [n // workers + (w < n % workers) for w in range(workers)]
    ref = SerialEnv(workers, fns, envs_per_worker=counts)  # the same arguments
    env = ParallelEnv(workers, fns, envs_per_worker=counts, mp_start_method="fork")
    try:
        ref.set_seed(seed)
        env.set_seed(seed)
        root, ref_root = env.reset(), ref.reset()
        compare_td(root, ref_root, "reset")
        for k, op in enumerate(ops):
            what = f"op {k} {op}"
            if op[0] == "step":
                torch.manual_seed(seed + k)
                actions = ref.full_action_spec.rand()
                ref_td, ref_root = ref.step_and_maybe_reset(ref_root.update(actions.clone()))
                td, root = env.step_and_maybe_reset(root.update(actions.clone()))
                compare_td(td, ref_td, what)
                compare_td(root, ref_root, what + " root")
                compare_extras(env, ref, what)
            elif op[0] == "reset":
                _, seed_arg, mask = op
                if isinstance(seed_arg, int):
                    ref.set_seed(seed_arg)
                    env.set_seed(seed_arg)
                reset = None
                if mask is not None:
                    flags = torch.tensor(mask).reshape(n, 1)
                    reset = TensorDict({"_reset": flags}, batch_size=[n])
                ref_root = ref.reset(None if reset is None else reset.clone())
                root = env.reset(reset)
                compare_td(root, ref_root, what)
                compare_extras(env, ref, what)
            elif op[0] == "call":
                assert env.describe(op[1]) == ref.describe(op[1]), what
            elif op[0] == "get_attr":
                assert getattr(env, op[1]) == getattr(ref, op[1]), what
    finally:
        env.close()
        ref.close()


@pytest.mark.parametrize("workers", [1, 2], ids=["one-worker", "two-workers"])
def test_parallel_env_equals_serial_env_on_generated_cases(workers):
    @given(cases(2, 4, fz.TORCH_INT_DTYPES))
    def check(case):
        config, ops, _, seed = case
        run_tensordict(config, ops, seed, workers)

    check()


# ---- bad input: a named error, and the env takes the next good call ---------------------------
def leaf_paths(space, path=()):
    """(path, single-env leaf space) of every leaf of an action space."""
    if isinstance(space, gym.spaces.Dict):
        return [p for key, sub in space.spaces.items() for p in leaf_paths(sub, (*path, key))]
    if isinstance(space, gym.spaces.Tuple):
        return [p for k, sub in enumerate(space.spaces) for p in leaf_paths(sub, (*path, k))]
    return [(path, space)]


def replace_leaf(value, path, new):
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: replace_leaf(value[head], rest, new)}
    return tuple(replace_leaf(v, rest, new) if k == head else v for k, v in enumerate(value))


def get_leaf(value, path):
    for part in path:
        value = value[part]
    return value


def bad_action(draw, space, actions, n):
    """``actions`` with one leaf made wrong: its shape, its dtype or (Discrete and
    MultiDiscrete) its values."""
    paths = leaf_paths(space)
    path, leaf_space = draw(st.sampled_from(paths))
    leaf = np.asarray(get_leaf(actions, path))
    kinds = ["fewer rows", "extra axis", "strings"]
    discrete = isinstance(leaf_space, gym.spaces.Discrete | gym.spaces.MultiDiscrete)
    if discrete:
        kinds += ["floats", "too large", "too small"]
    kind = draw(st.sampled_from(kinds))
    if kind == "fewer rows":
        bad = leaf[: n - 1]
    elif kind == "extra axis":
        bad = leaf[..., None]
    elif kind == "strings":
        bad = leaf.astype(str)
    elif kind == "floats":
        bad = leaf.astype(np.float64) + 0.5
    else:
        start = np.asarray(leaf_space.start)
        span = leaf_space.n if isinstance(leaf_space, gym.spaces.Discrete) else leaf_space.nvec
        bad = leaf.copy()
        row = draw(st.integers(0, n - 1))
        bad[row] = start + span if kind == "too large" else start - 1
    return replace_leaf(actions, path, bad), kind


BAD_SEEDS = [1.5, "7", -1, [0.5, None], [-3, None], {"seed": 1}]
BAD_MASKS = ["list", "shape", "dtype", "none-true"]


def bad_mask(kind, n):
    if kind == "list":
        return [True] * n
    if kind == "shape":
        return np.ones(n + 1, dtype=bool)
    if kind == "dtype":
        return np.ones(n, dtype=np.int64)
    return np.zeros(n, dtype=bool)


@pytest.mark.parametrize("backend", ["serial", "parallel-several-per-worker"])
def test_bad_input_raises_a_named_error_and_the_env_goes_on(backend):
    make, low, high = BACKENDS[backend]

    @given(st.data())
    def check(data):
        config = data.draw(fz.fuzz_configs(low, high))
        n = config.num_envs
        mode = data.draw(st.sampled_from(MODES))
        fns = config.env_fns()
        ref = SyncVectorEnv(fns, autoreset_mode=mode)
        env = make(fns, autoreset_mode=mode)
        try:
            ref.action_space.seed(0)
            fe.assert_same(env.reset(seed=3), ref.reset(seed=3), "reset")
            for k in range(data.draw(st.integers(1, 4))):
                what = data.draw(st.sampled_from(["action", "seed", "mask"]))
                if what == "action":
                    actions, kind = bad_action(data.draw, env.single_action_space,
                                               ref.action_space.sample(), n)  # fmt: skip
                    with pytest.raises((ValueError, TypeError), match="actions") as info:
                        env.step(actions)
                elif what == "seed":
                    kind = data.draw(st.sampled_from(BAD_SEEDS + ["length"]))
                    seed = [0] * (n + 1) if kind == "length" else kind
                    if isinstance(seed, list) and len(seed) == 2:
                        seed = seed + [None] * (n - 2)
                    with pytest.raises((ValueError, TypeError), match="[Ss]eed") as info:
                        env.reset(seed=seed)
                else:
                    kind = data.draw(st.sampled_from(BAD_MASKS))
                    options = {"reset_mask": bad_mask(kind, n)}
                    with pytest.raises((ValueError, TypeError), match="reset_mask") as info:
                        env.reset(options=options)
                    assert "reset_mask" in options  # the caller's dict is left as it was
                assert str(info.value), (what, kind)
                # the next good call: the same as SyncVectorEnv's, which saw no bad call
                if mode == AutoresetMode.DISABLED or k % 2:
                    fe.assert_same(env.reset(seed=k), ref.reset(seed=k), f"reset after {kind}")
                else:
                    actions = ref.action_space.sample()
                    fe.assert_same(env.step(actions), ref.step(actions), f"step after {kind}")
        finally:
            env.close()
            ref.close()

    check()


# ---- first-ready batches: each sub-env's trajectory is its own -------------------------------
def row_of(tree, r):
    if isinstance(tree, dict):
        return {key: row_of(v, r) for key, v in tree.items()}
    if isinstance(tree, tuple):
        return tuple(row_of(v, r) for v in tree)
    return tree[r]


def assert_tree_equal(actual, expected, what: str) -> None:
    """Same structure, and leaf by leaf the same dtype and values (a numpy scalar and a 0-d
    array of it are equal here: a row of a batch is the one, a sub-env may return the other)."""
    if isinstance(expected, dict):
        assert sorted(actual) == sorted(expected), what
        for key in expected:
            assert_tree_equal(actual[key], expected[key], f"{what}[{key!r}]")
    elif isinstance(expected, tuple):
        assert isinstance(actual, tuple) and len(actual) == len(expected), what
        for k, (a, e) in enumerate(zip(actual, expected)):
            assert_tree_equal(a, e, f"{what}[{k}]")
    else:
        a, e = np.asarray(actual), np.asarray(expected)
        assert a.dtype == e.dtype, f"{what}: dtype {a.dtype} != {e.dtype}"
        np.testing.assert_array_equal(a, e, err_msg=what, strict=True)


def replay_alone(config, i: int, seed: int, actions: list, records: list) -> None:
    """Sub-env ``i`` stepped alone under NEXT_STEP autoreset, against what recv returned:
    ``records[0]`` is its reset, ``records[k]`` its answer to ``actions[k - 1]``."""
    expected = [record[:4] for record in next_step_alone(fz.FuzzEnv(config, i), seed, actions)]
    assert len(records) == len(expected), f"sub-env {i}"
    for k, (got, want) in enumerate(zip(records, expected)):
        assert_tree_equal(got[0], want[0], f"sub-env {i} record {k} observation")
        assert got[1:] == want[1:], f"sub-env {i} record {k}: {got[1:]} != {want[1:]}"


@pytest.mark.parametrize("local_worker", [False, True], ids=["workers", "local-share"])
def test_first_ready_batches_replay_each_sub_env_alone(local_worker):
    from gymnasium.vector.utils import batch_space

    @given(st.data())
    def check(data):
        config = data.draw(fz.fuzz_configs(3, 4))
        n = config.num_envs
        batch = data.draw(st.integers(1, n - 1))
        seed = data.draw(st.integers(0, 2**16))
        envs = ParallelVectorEnv(
            config.env_fns(), batch_size=batch, num_workers=2, local_worker=local_worker,
            context="fork",
        )  # fmt: skip
        space = batch_space(envs.single_action_space, batch)
        space.seed(seed)
        actions: dict[int, list] = {i: [] for i in range(n)}
        records: dict[int, list] = {i: [] for i in range(n)}
        try:
            envs.async_reset(seed=seed)
            for _ in range(data.draw(st.integers(4, 16))):
                obs, rewards, terminations, truncations, infos = envs.recv()
                env_id = infos["env_id"].tolist()
                assert len(env_id) == batch and len(set(env_id)) == batch
                chosen = space.sample()
                for r, i in enumerate(env_id):
                    flags = (bool(terminations[r]), bool(truncations[r]))
                    records[i].append((row_of(obs, r), float(rewards[r]), *flags))
                    actions[i].append(row_of(chosen, r))
                envs.send(chosen, np.array(env_id))
        finally:
            envs.close()
        for i in range(n):  # the last actions sent are still in flight: no result for them
            if not records[i]:  # its reset is still in flight
                continue
            if len(actions[i]) == len(records[i]):
                actions[i].pop()
            replay_alone(config, i, seed + i, actions[i], records[i])

    check()
