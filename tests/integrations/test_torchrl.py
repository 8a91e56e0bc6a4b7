"""torchrl interop (``gymvec.torchrl``): gymvec's batched envs as torchrl envs (specs,
``check_env_specs``, transforms, collectors, the same data as torchrl's own batched envs) and
torchrl's batched envs behind the gymnasium face.

Runs where torchrl is installed (``pip install -e ".[torchrl]"``; .ci/run's venv with every
extra of the README has it); tests/integrations/test_torchrl_missing.py covers the module
without it.
"""

from __future__ import annotations

import functools

import _envs
import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode
from tensordict import TensorDict

torchrl = pytest.importorskip("torchrl", reason="torchrl is not installed (gymvec[torchrl])")

from torchrl.collectors import Collector, MultiSyncCollector  # noqa: E402
from torchrl.data import tensor_specs as rl  # noqa: E402
from torchrl.envs import (  # noqa: E402
    CatFrames,
    DoubleToFloat,
    GymEnv,
    ObservationNorm,
    RewardSum,
    StepCounter,
    TransformedEnv,
)
from torchrl.envs import ParallelEnv as TorchRLParallelEnv  # noqa: E402
from torchrl.envs import SerialEnv as TorchRLSerialEnv  # noqa: E402
from torchrl.envs.utils import check_env_specs  # noqa: E402

import gymvec  # noqa: E402
from gymvec import specs as gv  # noqa: E402
from gymvec.torchrl import (  # noqa: E402
    GymvecWrapper,
    TorchRLEnvWrapper,
    from_torchrl,
    from_torchrl_spec,
    to_torchrl,
    to_torchrl_spec,
)

pytestmark = pytest.mark.timeout(180)

CARTPOLE = functools.partial(gym.make, "CartPole-v1")
TORCHRL_CARTPOLE = functools.partial(GymEnv, "CartPole-v1", categorical_action_encoding=True)
DATA_KEYS = [
    "observation",
    ("next", "observation"),
    ("next", "reward"),
    ("next", "done"),
    ("next", "terminated"),
    ("next", "truncated"),
]


def make_gymvec_serial(n: int = 3) -> GymvecWrapper:
    """A module-level factory: collectors' worker processes unpickle it."""
    return to_torchrl(gymvec.SerialEnv(n, CARTPOLE))


def seeded_actions(steps: int, n: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, 2, (steps, n), generator=generator)


def run_steps(env, actions: torch.Tensor) -> TensorDict:
    """step_and_maybe_reset over ``actions``, stacked along a time dim."""
    td = env.reset()
    steps = []
    for action in actions:
        td["action"] = action
        td, td_next = env.step_and_maybe_reset(td)
        steps.append(td.clone())
        td = td_next
    return torch.stack(steps, dim=1)


# ---- specs -------------------------------------------------------------------------------------
def test_specs_convert_exactly_both_ways():
    specs = {
        "box": gv.Bounded(
            torch.tensor([-1.0, 0.0]), torch.tensor([1.0, 5.0]), shape=(4, 2), dtype=torch.float64
        ),
        "int_box": gv.Bounded(0, 1000, shape=(4,), dtype=torch.int64),
        "free": gv.Unbounded(shape=(4, 3), dtype=torch.float32),
        "discrete": gv.Categorical(5, shape=(4,), dtype=torch.int64),
        "small": gv.Categorical(3, shape=(4,), dtype=torch.int32),
        "multi": gv.MultiCategorical(torch.tensor([[2, 3], [4, 5]]).expand(4, 2, 2)),
        "binary": gv.Binary(n=3).expand(4),
        "flag": gv.Categorical(2, shape=(4, 1), dtype=torch.bool),
        "nested": {"inner": gv.Bounded(-2.0, 2.0, shape=(4, 1))},
    }
    spec = gv.Composite(specs, shape=(4,))
    converted = to_torchrl_spec(spec)
    assert isinstance(converted, rl.Composite) and converted.shape == (4,)
    assert isinstance(converted["box"], rl.BoundedContinuous)
    assert converted["box"].dtype == torch.float64
    assert torch.equal(
        converted["box"].space.high[0], torch.tensor([1.0, 5.0], dtype=torch.float64)
    )
    assert isinstance(converted["int_box"], rl.BoundedDiscrete)
    assert converted["int_box"].dtype == torch.int64
    assert isinstance(converted["free"], rl.UnboundedContinuous)
    assert type(converted["discrete"]) is rl.Categorical and converted["discrete"].n == 5
    assert converted["small"].dtype == torch.int32
    assert type(converted["multi"]) is rl.MultiCategorical
    assert torch.equal(converted["multi"].nvec[0], torch.tensor([[2, 3], [4, 5]]))
    assert type(converted["binary"]) is rl.Binary and converted["binary"].shape == (4, 3)
    assert converted["flag"].dtype == torch.bool and converted["flag"].n == 2
    assert isinstance(converted["nested"], rl.Composite)
    assert isinstance(converted["nested", "inner"], rl.BoundedContinuous)
    # and back: the same gymvec spec
    assert from_torchrl_spec(converted, batch_dims=1) == spec
    back_binary = from_torchrl_spec(converted["binary"], batch_dims=1).unbatch(1)
    assert gymvec.spaces.space_from_spec(back_binary) == gym.spaces.MultiBinary(3)


def test_a_categorical_with_a_start_becomes_a_bounded_integer_spec():
    converted = to_torchrl_spec(gv.Categorical(3, shape=(2,), start=-1))
    assert isinstance(converted, rl.BoundedDiscrete) and converted.dtype == torch.int64
    assert converted.space.low.tolist() == [-1, -1] and converted.space.high.tolist() == [1, 1]
    assert converted.is_in(torch.tensor([-1, 1])) and not converted.is_in(torch.tensor([2, 0]))


def test_specs_gymvec_cannot_hold_raise_naming_where():
    with pytest.raises(TypeError, match=r'spec\["action"\].*OneHot.*categorical_action_encoding'):
        from_torchrl_spec(rl.Composite(action=rl.OneHot(3)))
    stacked = torch.stack([rl.Categorical(2), rl.Categorical(3)])
    with pytest.raises(TypeError, match="Stacked"):
        from_torchrl_spec(stacked)


# ---- gymvec -> torchrl ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: gymvec.SerialEnv(3, CARTPOLE), id="serial"),
        pytest.param(
            lambda: gymvec.ParallelEnv(2, CARTPOLE, envs_per_worker=2, mp_start_method="fork"),
            id="parallel",
        ),
        pytest.param(
            lambda: gymvec.GymVectorEnvWrapper(
                gym.make_vec("CartPole-v1", 3, vectorization_mode="sync")
            ),
            id="vector-wrapper",
        ),
    ],
)
def test_check_env_specs_passes_with_torchrls_own_specs(make):
    env = to_torchrl(make())
    try:
        assert isinstance(env, torchrl.envs.EnvBase)
        assert env.batch_size == env.gymvec_env.batch_size
        assert env.device == torch.device("cpu")
        check_env_specs(env, seed=0)
        n = env.batch_size[0]
        theirs = TorchRLSerialEnv(n, TORCHRL_CARTPOLE)
        try:
            assert env.observation_spec == theirs.observation_spec
            assert env.full_action_spec == theirs.full_action_spec
            assert env.full_reward_spec == theirs.full_reward_spec
            assert env.full_done_spec == theirs.full_done_spec
        finally:
            theirs.close(raise_if_closed=False)
    finally:
        env.close()
    assert env.gymvec_env.is_closed


def test_nested_dict_spaces_infos_and_float64_under_transforms():
    fields = {"steps": 0, "speed": 0.0, "inside": False, "vector": np.zeros(2)}
    fn = functools.partial(_envs.make_dict_env, info_fields=fields)
    env = to_torchrl(gymvec.SerialEnv(2, fn))
    try:
        obs = env.observation_spec
        assert isinstance(obs["sensors", "flags"], rl.Binary)
        assert obs["sensors", "heat"].dtype == torch.float64
        assert obs["count"].dtype == torch.int64
        assert isinstance(env.full_action_spec["action", "gear"], rl.BoundedDiscrete)
        assert set(obs["info"].keys()) == {"steps", "speed", "inside", "vector"}
        check_env_specs(env, seed=0)
        transformed = TransformedEnv(env, DoubleToFloat(in_keys=[("sensors", "heat")]))
        check_env_specs(transformed, seed=0)
        td = transformed.rollout(30, break_when_any_done=False)
        assert td["sensors", "heat"].dtype == torch.float32
        assert td.batch_size == (2, 30)
        gears = td["action", "gear"]
        assert gears.min() >= -1 and gears.max() <= 1
    finally:
        env.close()


def test_same_data_as_torchrls_serial_env():
    ours = make_gymvec_serial(3)
    theirs = TorchRLSerialEnv(3, TORCHRL_CARTPOLE)
    try:
        assert ours.set_seed(7) == theirs.set_seed(7)
        actions = seeded_actions(150, 3)
        a, b = run_steps(ours, actions), run_steps(theirs, actions)
        assert a["next", "done"].sum() >= 3  # resets happened
        for key in DATA_KEYS:
            assert torch.equal(a[key], b[key]), key
        # rollout, without and with resets
        ours.set_seed(1)
        theirs.set_seed(1)
        torch.manual_seed(0)
        a = ours.rollout(120, break_when_any_done=False)
        torch.manual_seed(0)
        b = theirs.rollout(120, break_when_any_done=False)
        for key in [*DATA_KEYS, "action"]:
            assert torch.equal(a[key], b[key]), key
    finally:
        ours.close()
        theirs.close(raise_if_closed=False)


def test_same_data_as_torchrls_parallel_env():
    ours = to_torchrl(gymvec.ParallelEnv(2, CARTPOLE, envs_per_worker=1, mp_start_method="fork"))
    theirs = TorchRLParallelEnv(2, TORCHRL_CARTPOLE, mp_start_method="fork")
    try:
        assert ours.set_seed(3) == theirs.set_seed(3)
        actions = seeded_actions(100, 2, seed=1)
        a, b = run_steps(ours, actions), run_steps(theirs, actions)
        for key in DATA_KEYS:
            assert torch.equal(a[key], b[key]), key
    finally:
        ours.close()
        theirs.close(raise_if_closed=False)


@pytest.mark.parametrize("make", [CARTPOLE, _envs.make_dict_env], ids=["cartpole", "dict"])
def test_one_round_trip_step_and_maybe_reset_matches_torchrls_two(make):
    """The override returns what torchrl's step-then-reset returns, extra root entries too
    (a nested one, as the collectors' ids; and nested observations and infos), on its own
    next-root path and on its general one (step_mdp)."""
    ours, general, reference = (to_torchrl(gymvec.SerialEnv(3, make)) for _ in range(3))
    general._next_root = lambda *args: None
    reference._step_and_maybe_reset = functools.partial(
        torchrl.envs.EnvBase._step_and_maybe_reset, reference
    )
    envs = (ours, general, reference)
    try:
        for env in envs:
            env.set_seed(0)
        results = []
        for env in envs:
            td = env.reset()
            td["extra"] = torch.ones(3, 2)
            td["collector", "ids"] = torch.arange(3)
            roots, steps = [], []
            for _ in range(80):
                torch.manual_seed(len(roots))
                td = env.rand_action(td)
                td, root = env.step_and_maybe_reset(td)
                # setting into the next root leaves the step's data alone (as collectors do)
                root["collector", "ids"] = root["collector", "ids"] + 10
                steps.append(td.clone())
                roots.append(root.clone())
                td = root
            results.append((torch.stack(steps, 1), torch.stack(roots, 1)))
        for result in results[:2]:
            for a, b in zip(result, results[2]):
                assert set(a.keys(True)) == set(b.keys(True))
                assert (a == b).all()
        assert (results[0][1]["extra"] == 0).any()  # rows reset: zeros, as torchrl leaves them
    finally:
        for env in envs:
            env.close()


def test_reset_honours_the_reset_mask():
    env = make_gymvec_serial(3)
    try:
        env.set_seed(0)
        root = env.reset()
        td = env.rand_action(root.clone())
        td = env.step(td)
        stepped = td["next", "observation"].clone()
        mask = torch.tensor([[True], [False], [True]])
        # torchrl's contract: a partial reset gets the current root (the rows kept come from it)
        root = env.step_mdp(td)
        root["_reset"] = mask
        out = env.reset(root)
        # and the gymvec env itself reset the masked sub-envs only
        own_root = env.gymvec_env.reset(TensorDict({"_reset": ~mask}, [3]))
        assert torch.equal(own_root["observation"][0], out["observation"][0])
        assert torch.equal(out["observation"][1], stepped[1])
        assert not torch.equal(out["observation"][0], stepped[0])
        assert not out["done"].any()
    finally:
        env.close()


def test_transforms_rollout_and_step_counts():
    env = TransformedEnv(
        make_gymvec_serial(2),
        torchrl.envs.Compose(
            StepCounter(max_steps=20),
            RewardSum(),
            ObservationNorm(loc=0.0, scale=2.0, in_keys=["observation"]),
            CatFrames(N=3, dim=-1, in_keys=["observation"]),
        ),
    )
    try:
        check_env_specs(env, seed=0)
        td = env.rollout(60, break_when_any_done=False)
        assert td["next", "observation"].shape == (2, 60, 12)
        counts = td["next", "step_count"].squeeze(-1)
        assert counts.max() <= 20
        assert td["next", "truncated"].any()  # StepCounter truncates at 20
        done = td["next", "done"].squeeze(-1)
        rewards = td["next", "episode_reward"].squeeze(-1)
        # the episode reward at each end is the episode's length (CartPole: reward 1 per step)
        assert torch.equal(rewards[done], counts[done].to(rewards.dtype))
    finally:
        env.close()


def test_collector_and_step_and_maybe_reset_as_collectors_call_it():
    env = TransformedEnv(make_gymvec_serial(4), StepCounter())
    collector = Collector(env, None, frames_per_batch=64, total_frames=256)
    try:
        batches = list(collector)
    finally:
        collector.shutdown()
        env.close()
    assert len(batches) == 4
    for batch in batches:
        assert batch.batch_size == (4, 16)
        # a step count restarts after every end: collectors reset the finished sub-envs
        count, next_count = batch["step_count"], batch["next", "step_count"]
        assert torch.equal(next_count, count + 1)
    done = torch.cat([b["next", "done"] for b in batches], 1).squeeze(-1)
    counts = torch.cat([b["step_count"] for b in batches], 1).squeeze(-1)
    after_end = torch.zeros_like(done)
    after_end[:, 1:] = done[:, :-1]
    assert done.any() and (counts[after_end] == 0).all()


@pytest.mark.parametrize("agnostic", [False, True], ids=["cpu", "device_agnostic"])
def test_a_collector_collects_what_it_collects_over_torchrls_own_envs(agnostic):
    """With the env's device (a collector casts each step's data to it) and device-agnostic
    (no device, as torchrl's GymEnv and its batched envs: the data is taken as it is)."""
    ours = to_torchrl(gymvec.SerialEnv(3, CARTPOLE), device_agnostic=agnostic)
    theirs = TorchRLSerialEnv(3, TORCHRL_CARTPOLE)
    assert ours.device == (None if agnostic else torch.device("cpu"))
    check_env_specs(ours, seed=0)
    batches = []
    for env in (ours, theirs):
        env.set_seed(5)  # before the collector's first reset
        torch.manual_seed(0)
        collector = Collector(env, None, frames_per_batch=90, total_frames=270)
        try:
            batches.append(torch.cat(list(collector), -1))
        finally:
            collector.shutdown()
    a, b = batches
    assert a["next", "done"].sum() >= 3  # resets happened
    for key in [*DATA_KEYS, "action", ("collector", "traj_ids")]:
        assert torch.equal(a[key], b[key]), key
    if agnostic:
        with pytest.raises(ValueError, match="on the CPU"):
            to_torchrl(gymvec.SerialEnv(1, CARTPOLE, device="meta"), device_agnostic=True)


def test_multi_sync_collector():
    collector = MultiSyncCollector(
        [make_gymvec_serial, make_gymvec_serial],
        None,
        frames_per_batch=48,
        total_frames=96,
    )
    try:
        batches = list(collector)
    finally:
        collector.shutdown()
    assert len(batches) == 2
    assert sum(b.numel() for b in batches) == 96
    assert all(b["next", "observation"].shape[-1] == 4 for b in batches)


# ---- torchrl -> gymnasium ------------------------------------------------------------------------
def torchrl_chain(seed: int, n: int) -> list[int]:
    """The seeds torchrl's batched envs give their sub-envs for ``set_seed(seed)``."""
    from torchrl._utils import seed_generator

    seeds = [seed]
    for _ in range(n - 1):
        seeds.append(seed_generator(seeds[-1]))
    return seeds


@pytest.mark.parametrize("mode", list(AutoresetMode))
def test_gymnasium_face_over_torchrl_matches_sync_vector_env(mode):
    n = 3
    face = gymvec.GymnasiumVectorEnv(TorchRLSerialEnv(n, TORCHRL_CARTPOLE), autoreset_mode=mode)
    reference = gym.vector.SyncVectorEnv([CARTPOLE] * n, autoreset_mode=mode)
    try:
        assert face.single_observation_space == reference.single_observation_space
        assert face.single_action_space == reference.single_action_space
        assert face.observation_space == reference.observation_space
        assert face.action_space == reference.action_space
        # torchrl's set_seed resets each sub-env with its seed; the face's reset then resets
        # once more
        reference.reset(seed=torchrl_chain(5, n))
        ours, _ = face.reset(seed=5)
        theirs, _ = reference.reset()
        np.testing.assert_array_equal(ours, theirs)
        ends = 0
        for action in seeded_actions(150, n).numpy():
            if mode == AutoresetMode.DISABLED and ends and face.engine.any_finished:
                mask = face.engine.finished.copy()
                ours, _ = face.reset(options={"reset_mask": mask})
                theirs, _ = reference.reset(options={"reset_mask": mask})
                np.testing.assert_array_equal(ours, theirs)
            ours_step = face.step(action)
            theirs_step = reference.step(action)
            for mine, ref in zip(ours_step[:4], theirs_step[:4]):
                np.testing.assert_array_equal(mine, ref)
                assert mine.dtype == ref.dtype
            if mode == AutoresetMode.SAME_STEP and "final_obs" in theirs_step[4]:
                mask = theirs_step[4]["_final_obs"]
                np.testing.assert_array_equal(ours_step[4]["_final_obs"], mask)
                for i in np.flatnonzero(mask):
                    np.testing.assert_array_equal(
                        ours_step[4]["final_obs"][i], theirs_step[4]["final_obs"][i]
                    )
            ends += int((theirs_step[2] | theirs_step[3]).sum())
        assert ends >= 3
    finally:
        face.close()
        reference.close()


def test_gymnasium_face_over_a_transformed_torchrl_parallel_env():
    penv = TorchRLParallelEnv(2, TORCHRL_CARTPOLE, mp_start_method="fork")
    env = TransformedEnv(penv, StepCounter())
    face = gymvec.GymnasiumVectorEnv(env, autoreset_mode="same_step")
    try:
        space = face.single_observation_space
        assert isinstance(space, gym.spaces.Dict)
        assert set(space.spaces) == {"observation", "step_count"}
        assert space["step_count"].dtype == np.int64
        obs, _ = face.reset(seed=0)
        assert obs["step_count"].tolist() == [[0], [0]]
        for _ in range(5):
            obs, rewards, terminations, truncations, _ = face.step(np.array([0, 1]))
        finished = terminations | truncations
        assert rewards.dtype == np.float64
        assert (obs["step_count"][~finished] == 5).all()
    finally:
        face.close()
    assert penv.is_closed


def test_sb3_adapter_over_a_torchrl_env():
    pytest.importorskip("stable_baselines3")
    from gymvec.sb3 import SB3VecEnv

    face = gymvec.GymnasiumVectorEnv(
        TorchRLSerialEnv(2, TORCHRL_CARTPOLE), autoreset_mode="same_step"
    )
    venv = SB3VecEnv(face)
    try:
        obs = venv.reset()
        assert obs.shape == (2, 4)
        ends = 0
        for _ in range(60):
            obs, rewards, dones, infos = venv.step(np.array([0, 0]))
            for done, info in zip(dones, infos):
                if done:
                    ends += 1
                    assert info["terminal_observation"].shape == (4,)
        assert ends >= 2
    finally:
        venv.close()


def test_from_torchrl_unwraps_a_gymvec_wrapper_and_refuses_lists_of_seeds():
    gymvec_env = gymvec.SerialEnv(2, CARTPOLE)
    assert from_torchrl(to_torchrl(gymvec_env)) is gymvec_env
    face = gymvec.GymnasiumVectorEnv(to_torchrl(gymvec_env))
    assert face.engine is gymvec_env.engine
    face.close()
    wrapper = from_torchrl(TorchRLSerialEnv(2, TORCHRL_CARTPOLE))
    try:
        assert isinstance(wrapper, TorchRLEnvWrapper)
        with pytest.raises(ValueError, match="one int seed"):
            wrapper.set_seed([1, 2])
        with pytest.raises(RuntimeError, match="call reset"):  # not an AttributeError on None
            wrapper.autoreset_step(wrapper.rand_action())
    finally:
        wrapper.close()


def test_object_observations_are_torchrl_non_tensor_leaves():
    import _face_envs as fe

    obs_space = gym.spaces.Dict(
        {"text": gym.spaces.Text(6), "box": gym.spaces.Box(-1.0, 1.0, (2,), dtype=np.float32)}
    )
    make = functools.partial(fe.make_spaces_env, obs_space, gym.spaces.Discrete(2), 3)
    env = to_torchrl(gymvec.SerialEnv(2, make))
    try:
        assert isinstance(env.observation_spec["text"], rl.NonTensor)
        assert env.observation_spec["text"].shape == (2,)
        assert isinstance(env.observation_spec["box"], rl.BoundedContinuous)
        env.set_seed(0)
        td = env.rollout(7, break_when_any_done=False)
        texts = [list(row) for row in td["next", "text"]]  # [sub-env][step]
        assert len(texts) == 2 and len(texts[0]) == 7
        assert all(isinstance(t, str) and t in obs_space["text"] for row in texts for t in row)
    finally:
        env.close()


@pytest.mark.parametrize(
    "name",
    ["gymvec.torchrl.specs", "gymvec.torchrl.gymvec_wrapper", "gymvec.torchrl.torchrl_env_wrapper"],
)
def test_docstring_examples(name):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


# ---- the example and the bench case --------------------------------------------------------------
@pytest.mark.timeout(300)
def test_torchrl_ppo_example_quick():
    import subprocess
    import sys
    from pathlib import Path

    example = Path(__file__).resolve().parents[2] / "examples" / "torchrl_ppo.py"
    cmd = [sys.executable, str(example), "--quick", "--start-method", "fork"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=280)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "8 envs (2 workers), 256 frames per batch, 2048 frames" in out
    assert "frames 2048: mean return of the last" in out
    score = float(out.split("mean evaluation return over 8 episodes: ")[1].split()[0])
    assert 1.0 <= score <= 500.0  # CartPole-v1: one reward per step, at most 500 steps
    assert "quick run: no threshold" in out


@pytest.mark.timeout(300)
def test_bench_collector_case_quick():
    from gymvec.bench.__main__ import QUICK
    from gymvec.bench.cases import CASES
    from gymvec.bench.harness import run_cases

    (result,) = run_cases([CASES["torchrl-collector-32"]], QUICK, show_progress=False)
    rows = {r.runner: r for r in result.results}
    assert list(rows) == ["gym-sync", "collector-torchrl", "collector-gymvec"]
    for runner in rows.values():
        assert runner.error is None, runner.error
        assert runner.steps_per_s > 0 and len(runner.samples) == QUICK.repeats


def test_a_partial_step_is_refused():
    env = make_gymvec_serial(2)
    try:
        td = env.rand_action(env.reset())
        td["_step"] = torch.tensor([True, False])
        with pytest.raises(NotImplementedError, match="partial step"):
            env.step(td)
    finally:
        env.close()
