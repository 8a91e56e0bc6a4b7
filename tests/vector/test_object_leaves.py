"""Spaces without a fixed shape (Text, Graph, Sequence, OneOf, custom spaces): "object leaves".

Their values are Python objects, one per sub-env, kept beside the shared buffers: workers send
them back with each command's answer, object actions travel with the command. The gymnasium
face batches them as tuples, as SyncVectorEnv does; the tensordict API holds them as
NonTensorStacks under NonTensor specs.
"""

from __future__ import annotations

import functools

import _face_envs as fe
import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from gymnasium.utils.env_checker import data_equivalence
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from tensordict import NonTensorData, NonTensorStack, TensorDict

import gymvec
from gymvec import (
    GymEnv,
    GymnasiumVectorEnv,
    GymVectorEnvWrapper,
    NonTensor,
    ParallelEnv,
    ParallelVectorEnv,
    SerialEnv,
    SerialVectorEnv,
    UnsupportedSpaceError,
)
from gymvec.spaces import space_from_spec, spec_from_space
from gymvec.specs import Composite, non_tensor, non_tensor_values

BOX2 = spaces.Box(-1.0, 1.0, (2,), dtype=np.float32)
# an observation with every kind of object leaf, nested beside array leaves
MIXED_OBS = spaces.Dict(
    {
        "text": spaces.Text(6),
        "box": BOX2,
        "nested": spaces.Tuple(
            (spaces.Graph(BOX2, spaces.Discrete(3)), spaces.Sequence(spaces.Discrete(4)))
        ),
        "one_of": spaces.OneOf((spaces.Discrete(3), BOX2)),
    }
)
TEXT_ACTION = spaces.Text(4, min_length=1)
MIXED_ACTION = spaces.Dict({"say": spaces.Text(3), "move": spaces.Discrete(2)})


def spaces_fns(obs_space, action_space, n=3, length=3):
    return [functools.partial(fe.make_spaces_env, obs_space, action_space, length)] * n


def face_classes():
    return {
        "serial": SerialVectorEnv,
        # two workers, one of them this process: both ways objects move
        "parallel": functools.partial(
            ParallelVectorEnv, shared_memory=False, context="fork", num_workers=2
        ),
    }


@pytest.fixture(params=["serial", "parallel"])
def face_cls(request):
    return face_classes()[request.param]


def text_actions(step: int, n: int) -> tuple:
    return tuple(f"a{(step + i) % 7}" for i in range(n))


def mixed_actions(step: int, n: int) -> dict:
    return {"say": tuple("xyz"[: 1 + (step + i) % 3] for i in range(n)), "move": np.arange(n) % 2}


@pytest.mark.parametrize("mode", list(AutoresetMode), ids=lambda m: m.value)
@pytest.mark.parametrize(
    "action_space, actions",
    [(TEXT_ACTION, text_actions), (MIXED_ACTION, mixed_actions)],
    ids=["text-action", "mixed-action"],
)
def test_face_equals_sync_vector_env(face_cls, mode, action_space, actions):
    """Object observations, object actions, across episode ends, in each autoreset mode."""
    fns = spaces_fns(MIXED_OBS, action_space)
    env, reference = face_cls(fns, autoreset_mode=mode), SyncVectorEnv(fns, autoreset_mode=mode)
    assert env.observation_space == reference.observation_space
    assert env.action_space == reference.action_space
    obs, infos = env.reset(seed=5)
    ref_obs, ref_infos = reference.reset(seed=5)
    assert isinstance(obs["text"], tuple) and isinstance(obs["nested"][0], tuple)
    assert data_equivalence(obs, ref_obs) and data_equivalence(infos, ref_infos)
    for step in range(8):
        if mode == AutoresetMode.DISABLED and step in (3, 6):
            mask = np.ones(3, dtype=bool)
            obs, _ = env.reset(options={"reset_mask": mask})
            ref_obs, _ = reference.reset(options={"reset_mask": mask})
            assert data_equivalence(obs, ref_obs)
        out = env.step(actions(step, 3))
        expected = reference.step(actions(step, 3))
        assert data_equivalence(out, expected), f"step {step}"
        assert obs in env.observation_space
    env.close()
    reference.close()


def test_same_step_final_obs_are_the_sub_envs_objects(face_cls):
    fns = spaces_fns(MIXED_OBS, TEXT_ACTION)
    env = face_cls(fns, autoreset_mode=AutoresetMode.SAME_STEP)
    env.reset(seed=1)
    for step in range(3):
        *_, infos = env.step(text_actions(step, 3))
    assert infos["_final_obs"].all()
    for final_obs in infos["final_obs"]:
        assert final_obs in env.single_observation_space
        assert isinstance(final_obs["text"], str)
    env.close()


def test_custom_space(face_cls):
    """gymnasium's custom-space test: string actions in, string observations out."""
    fns = [fe.make_custom_space_env] * 4
    env = face_cls(fns)
    assert isinstance(env.action_space, spaces.Tuple)
    assert env.reset()[0] == ("reset",) * 4
    obs, *_ = env.step(("a", "b", "c", "d"))
    assert obs == ("step(a)", "step(b)", "step(c)", "step(d)")
    env.close()


def test_an_object_no_pickle_carries_is_a_worker_error(no_leaks):
    """The worker's answer is pickled before it is posted: the failure comes back as the
    command's error, with its traceback, and the worker stays usable."""
    fns = [fe.CustomSpaceEnv, fe.UnpicklableObsEnv]
    env = ParallelVectorEnv(fns, shared_memory=False, context="fork", num_workers=2)
    assert env.reset() == (("reset", "reset"), {})
    with pytest.raises(gymvec.WorkerError, match=r"^worker 1, pid \d+ raised TypeError") as caught:
        env.step(("a", "b"))
    assert "cannot pickle '_thread.lock' object" in caught.value.worker_traceback
    assert env.reset()[0] == ("reset", "reset")
    env.close()


def test_object_actions_are_checked_for_count_and_type(face_cls):
    env = face_cls(spaces_fns(spaces.Discrete(2), TEXT_ACTION))
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"actions: expected 3 values for Tuple\(Text"):
        env.step(("a", "b"))
    with pytest.raises(TypeError, match="actions: expected a tuple of 3 values .* got str"):
        env.step("abc")
    obs, rewards, *_ = env.step(("a", "b", "c"))  # the env is usable afterwards
    assert rewards.tolist() == [1.0] * 3
    env.close()


@pytest.mark.parametrize(
    "space, leaf",
    [
        (spaces.Sequence(spaces.Discrete(2)), "observation: Sequence"),
        (spaces.Dict({"a": spaces.Tuple((BOX2, spaces.Graph(BOX2, None)))}), "a/1: Graph"),
        (fe.CustomSpace(), "observation: <_face_envs.CustomSpace"),
    ],
    ids=["sequence", "nested-graph", "custom"],
)
def test_shared_memory_refuses_what_gymnasium_cannot_share(space, leaf, no_leaks):
    """AsyncVectorEnv(shared_memory=True) raises for these, and gymnasium's tests skip on its
    words; with shared_memory=False (above) they work."""
    fns = spaces_fns(space, spaces.Discrete(2), n=2)
    words = "has a dynamic shape so its not possible to make a static shared memory"
    with pytest.raises(UnsupportedSpaceError, match=leaf + ".* " + words) as caught:
        ParallelVectorEnv(fns, context="fork")
    assert isinstance(caught.value, TypeError) and isinstance(caught.value, ValueError)


def test_shared_memory_takes_text_and_one_of():
    space = spaces.Tuple((spaces.Text(4), spaces.OneOf((spaces.Discrete(2), BOX2))))
    fns = spaces_fns(space, spaces.Discrete(2), n=2)
    env, reference = ParallelVectorEnv(fns, context="fork"), SyncVectorEnv(fns)
    assert data_equivalence(env.reset(seed=3), reference.reset(seed=3))
    assert data_equivalence(env.step(np.array([0, 1])), reference.step(np.array([0, 1])))
    env.close()
    reference.close()


def test_make_vec_takes_every_space():
    """gymvec's own make_vec has no gymnasium parity to keep: Sequence works in parallel."""
    space = spaces.Sequence(spaces.Discrete(4))
    env_id = "gymvec-test/SequenceObs-v0"
    gym.register(env_id, entry_point=functools.partial(fe.make_spaces_env, space, TEXT_ACTION))
    try:
        env = gymvec.make_vec(env_id, 3, num_workers=2, context="fork")
        reference = SyncVectorEnv(spaces_fns(space, TEXT_ACTION))
        assert data_equivalence(env.reset(seed=2), reference.reset(seed=2))
        assert data_equivalence(env.step(text_actions(0, 3)), reference.step(text_actions(0, 3)))
        env.close()
        reference.close()
    finally:
        del gym.registry[env_id]


# ---- the tensordict API -----------------------------------------------------------------------
def make_text_env():
    return GymEnv(fe.make_spaces_env(MIXED_OBS, TEXT_ACTION, 3))


def objects_of(td, key) -> list:
    return non_tensor_values(td.get(key))


def test_gym_env_holds_objects_as_non_tensor_data():
    env = make_text_env()
    assert env.observation_spec["text"] == NonTensor(spaces.Text(6))
    assert env.observation_spec[("nested", "0")].space == MIXED_OBS["nested"][0]
    assert env.action_spec == NonTensor(TEXT_ACTION)
    env.set_seed(0)
    td = env.reset()
    assert isinstance(td.get("text"), NonTensorData)
    assert env.observation_spec.is_in(td.select(*env.observation_spec.keys()))
    td = env.step(env.rand_action(td))
    assert td.get_non_tensor(("next", "text")) in MIXED_OBS["text"]
    assert td["next", "reward"].item() == 1.0
    env.close()


@pytest.mark.parametrize(
    "make",
    [
        lambda: SerialEnv(2, make_text_env, envs_per_worker=2),
        lambda: ParallelEnv(2, make_text_env, envs_per_worker=2, mp_start_method="fork"),
        lambda: ParallelEnv(
            2, make_text_env, envs_per_worker=2, mp_start_method="fork", local_worker=True
        ),
    ],
    ids=["serial", "parallel", "parallel-local-worker"],
)
def test_batched_envs_carry_objects_like_gymnasium(make, no_leaks):
    """step_and_maybe_reset, partial resets and rollouts against SyncVectorEnv's values."""
    env = make()
    reference = SyncVectorEnv(spaces_fns(MIXED_OBS, TEXT_ACTION, n=4))
    assert env.observation_spec["text"] == NonTensor(spaces.Text(6), shape=(4,))
    env.set_seed(7)
    td = env.reset()
    ref_obs, _ = reference.reset(seed=7)
    assert isinstance(td.get("text"), NonTensorStack)
    assert objects_of(td, "text") == list(ref_obs["text"])
    for step in range(7):
        actions = text_actions(step, 4)
        td.set("action", non_tensor(actions, torch.Size([4])))
        td, root = env.step_and_maybe_reset(td)
        ref_obs, ref_rewards, terminations, truncations, ref_infos = reference.step(actions)
        assert td["next", "reward"].squeeze(-1).tolist() == ref_rewards.tolist()
        # SyncVectorEnv (NEXT_STEP) hands out the step's observations now and resets later;
        # gymvec's root already holds the reset ones of finished sub-envs
        assert objects_of(td, ("next", "text")) == list(ref_obs["text"])
        graphs = objects_of(td, ("next", "nested", "0"))
        assert all(data_equivalence(a, b) for a, b in zip(graphs, ref_obs["nested"][0]))
        if (terminations | truncations).any():
            ref_obs, *_ = reference.step(actions)  # its resets (actions ignored)
            assert objects_of(root, "text") == list(ref_obs["text"])
        td = root
    # a partial reset resets exactly the masked rows' objects
    before = objects_of(td, "text")
    env.set_seed(100)
    reset_mask = torch.tensor([False, True, False, True]).unsqueeze(-1)
    out = env.reset(TensorDict({"_reset": reset_mask}, batch_size=[4]))
    ref_obs, _ = reference.reset(seed=[None, 101, None, 103])
    after = objects_of(out, "text")
    assert [after[0], after[2]] == [before[0], before[2]]
    assert [after[1], after[3]] == [ref_obs["text"][1], ref_obs["text"][3]]
    rollout = env.rollout(3, break_when_any_done=False)
    assert rollout.batch_size == torch.Size([4, 3])
    assert all(text in MIXED_OBS["text"] for text in objects_of(rollout, ("next", "text")))
    env.close()
    reference.close()


def test_object_action_of_the_wrong_kind_names_the_key():
    env = SerialEnv(1, make_text_env, envs_per_worker=2)
    td = env.reset()
    td.set("action", torch.zeros(2))
    with pytest.raises(ValueError, match='"action": expected NonTensor'):
        env.step(td)
    td.set("action", non_tensor(["ok", "much too long"], torch.Size([2])))
    with pytest.raises(ValueError, match="'much too long' is not in Text"):
        env.step(td)
    env.close()


def test_tensordict_sub_envs_with_object_specs_are_refused():
    """Batches carry objects for gymnasium sub-envs; an EnvBase sub-env with NonTensor specs
    is stepped through its tensordict API, which copies tensors only."""
    import _td_envs

    def make():
        env = _td_envs.make_counter()
        env.observation_spec = Composite(
            {"observation": env.observation_spec["observation"], "note": NonTensor()}
        )
        return env

    with pytest.raises(UnsupportedSpaceError, match=r"keys \[\('note',\)\] hold Python objects"):
        SerialEnv(1, make, envs_per_worker=2).reset()


# ---- specs -----------------------------------------------------------------------------------
def test_non_tensor_spec():
    spec = NonTensor(spaces.Text(3)).expand(2, 3)
    assert spec.shape == torch.Size([2, 3]) and spec.unbatch(2) == NonTensor(spaces.Text(3))
    values = spec.rand()
    assert isinstance(values, NonTensorStack) and tuple(values.batch_size) == (2, 3)
    flat = non_tensor_values(values)
    assert len(flat) == 6 and all(v in spaces.Text(3) for v in flat)
    assert spec.is_in(values) and not spec.is_in(spec.unbatch(1).rand())
    assert not spec.is_in(non_tensor(["toolong"] * 6, torch.Size([2, 3])))
    assert non_tensor_values(spec.zero()) == [None] * 6
    assert spec.clone() == spec and spec != NonTensor(spaces.Text(4)).expand(2, 3)
    with pytest.raises(ValueError, match='"obs": expected NonTensor'):
        spec.validate(torch.zeros(2, 3), "obs")
    # a custom space's contains() is not trusted (gymnasium's vector envs never call it)
    custom = NonTensor(fe.CustomSpace()).expand(2)
    custom.validate(non_tensor([1, None], torch.Size([2])), "action")
    assert custom.is_in(custom.rand())


def test_spec_from_space_with_objects_round_trips():
    spec = spec_from_space(MIXED_OBS, objects=True)
    assert spec["text"] == NonTensor(spaces.Text(6))
    assert spec[("nested", "1")] == NonTensor(MIXED_OBS["nested"][1])
    assert space_from_spec(spec) == MIXED_OBS
    with pytest.raises(TypeError, match="cannot convert Text at space"):
        spec_from_space(spaces.Text(3))  # the default: API.md's TypeError
    with pytest.raises(TypeError, match="holds no gymnasium space"):
        space_from_spec(NonTensor())


@pytest.mark.parametrize("mode", list(AutoresetMode), ids=lambda m: m.value)
def test_round_trip_through_the_vector_env_wrapper_equals_sync(mode):
    """gymnasium's vector env as a tensordict env (object leaves as NonTensorStacks) and back
    through the face steps exactly like the vector env itself."""
    fns = spaces_fns(MIXED_OBS, TEXT_ACTION)
    inner = SyncVectorEnv(fns, autoreset_mode=mode)
    env = GymnasiumVectorEnv(GymVectorEnvWrapper(inner), autoreset_mode=mode)
    reference = SyncVectorEnv(fns, autoreset_mode=mode)
    assert data_equivalence(env.reset(seed=3), reference.reset(seed=3))
    for step in range(8):
        if mode == AutoresetMode.DISABLED and step in (3, 6):
            mask = np.ones(3, dtype=bool)
            out = env.reset(options={"reset_mask": mask})
            assert data_equivalence(out, reference.reset(options={"reset_mask": mask}))
        out, expected = env.step(text_actions(step, 3)), reference.step(text_actions(step, 3))
        assert data_equivalence(out, expected), f"step {step}"
    env.close()
    reference.close()


def test_vector_env_wrapper_partial_reset_keeps_the_other_objects():
    env = GymVectorEnvWrapper(SyncVectorEnv(spaces_fns(MIXED_OBS, TEXT_ACTION)))
    assert env.observation_spec["text"] == NonTensor(spaces.Text(6), shape=(3,))
    env.set_seed(0)
    before = objects_of(env.reset(), "text")
    env.set_seed([None, 9, None])
    reset_mask = torch.tensor([[False], [True], [False]])
    after = objects_of(env.reset(TensorDict({"_reset": reset_mask}, batch_size=[3])), "text")
    alone = fe.make_spaces_env(MIXED_OBS, TEXT_ACTION)
    assert after == [before[0], alone.reset(seed=9)[0]["text"], before[2]]
    td = env.rand_action(env.reset())
    assert all(a in TEXT_ACTION for a in objects_of(td, "action"))
    td, root = env.step_and_maybe_reset(td)
    assert all(text in MIXED_OBS["text"] for text in objects_of(td, ("next", "text")))
    env.close()


def test_gym_env_step_and_maybe_reset_takes_the_reset_objects():
    """EnvBase.step_and_maybe_reset merges the reset rows' objects as it merges tensors."""
    space = spaces.Dict({"text": spaces.Text(4), "box": BOX2})
    env = GymEnv(fe.make_spaces_env(space, TEXT_ACTION, 2))
    alone = fe.make_spaces_env(space, TEXT_ACTION, 2)
    env.set_seed(5)
    td = env.reset()
    obs, _ = alone.reset(seed=5)
    for _ in range(5):
        td.set_non_tensor("action", "ab")
        td, root = env.step_and_maybe_reset(td)
        obs, _, terminated, truncated, _ = alone.step("ab")
        assert td.get_non_tensor(("next", "text")) == obs["text"]
        if terminated or truncated:
            obs, _ = alone.reset()
        assert root.get_non_tensor("text") == obs["text"]
        assert np.array_equal(root["box"].numpy(), obs["box"])
        td = root
    env.close()


def test_multi_task_batch_with_an_object_task(no_leaks):
    """A task with Text observations beside one with a Box: each sub-env shows its own keys."""
    text_task = functools.partial(
        fe.make_spaces_env, spaces.Dict({"words": spaces.Text(4)}), spaces.Discrete(2)
    )
    box_task = functools.partial(fe.make_spaces_env, spaces.Dict({"box": BOX2}), spaces.Discrete(2))
    env = ParallelEnv(2, [text_task, box_task], mp_start_method="fork")
    assert env.heterogeneous
    env.set_seed(0)
    td = env.reset()
    alone = text_task()
    assert td[0].get_non_tensor("words") == alone.reset(seed=0)[0]["words"]
    assert "words" not in td[1].keys() and td[1]["box"].shape == (2,)
    td["action"] = torch.zeros(2, dtype=torch.int64)
    td, root = env.step_and_maybe_reset(td)
    assert td[0].get_non_tensor(("next", "words")) == alone.step(0)[0]["words"]
    assert "words" not in td[1]["next"].keys()
    env.close()


def test_torch_output_keeps_objects_as_tuples():
    env = SerialVectorEnv(spaces_fns(MIXED_OBS, TEXT_ACTION), output="torch")
    reference = SyncVectorEnv(spaces_fns(MIXED_OBS, TEXT_ACTION))
    obs, _ = env.reset(seed=4)
    ref_obs, _ = reference.reset(seed=4)
    assert isinstance(obs["box"], torch.Tensor) and np.array_equal(
        obs["box"].numpy(), ref_obs["box"]
    )
    assert obs["text"] == ref_obs["text"]
    obs, rewards, *_ = env.step(text_actions(0, 3))
    assert (
        isinstance(rewards, torch.Tensor)
        and obs["text"] == reference.step(text_actions(0, 3))[0]["text"]
    )
    env.close()
    reference.close()


def test_an_object_action_no_pickle_carries_leaves_the_env_usable(no_leaks):
    """Every worker's command is pickled before any is posted: a failure starts nothing."""
    import threading

    env = ParallelVectorEnv(
        [fe.CustomSpaceEnv] * 3, shared_memory=False, context="fork", num_workers=3
    )
    assert env.reset()[0] == ("reset",) * 3
    with pytest.raises(TypeError, match="lock"):
        env.step(("a", "b", threading.Lock()))  # the last sub-env's worker is the second
    assert env.step(("a", "b", "c"))[0] == ("step(a)", "step(b)", "step(c)")
    assert env.reset()[0] == ("reset",) * 3
    env.close()
