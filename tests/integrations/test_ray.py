"""RayEnv on a local Ray (loopback only): the batched-env behaviour of SerialEnv, the gymnasium
face, SB3, and faults. One Ray instance for the module; the multi-node tests (spread placement,
a lost node) are in test_ray_cluster.py."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

# Before Ray is imported: every Ray process then binds 127.0.0.1, never the machine's address.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

ray = pytest.importorskip("ray")

from gymvec import GymEnv, RayEnv, SerialEnv, WorkerError, make_vec  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(300)


def start_local_ray(num_cpus: int = 4) -> None:
    """A local Ray whose workers import this checkout's gymvec and the tests' helpers."""
    path = os.pathsep.join([str(REPO), str(REPO / "tests"), str(REPO / "tests" / "integrations")])
    ray.init(
        num_cpus=num_cpus,
        object_store_memory=150 * 2**20,
        include_dashboard=False,
        runtime_env={"env_vars": {"PYTHONPATH": path}},
        log_to_driver=False,
    )


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    start_local_ray()
    yield
    ray.shutdown()


def make_cartpole():
    return gym.make("CartPole-v1", max_episode_steps=12)


def make_gym_cartpole():
    return GymEnv(make_cartpole())


def make_dict_cartpole():
    space = gym.spaces.Dict(
        {
            "pos": gym.spaces.Box(-5.0, 5.0, (2,), np.float32),
            "vel": gym.spaces.Box(-np.inf, np.inf, (2,), np.float32),
        }
    )
    return gym.wrappers.TransformObservation(make_cartpole(), _split, space)


def _split(obs):
    return {"pos": obs[:2], "vel": obs[2:]}


class StepFails(gym.Wrapper):
    """Raises in its 3rd step."""

    def __init__(self, env):
        super().__init__(env)
        self.steps = 0

    def step(self, action):
        self.steps += 1
        if self.steps == 3:
            raise ValueError("a sub-env failure, deep inside step")
        return self.env.step(action)


def make_failing():
    return StepFails(make_cartpole())


def actor_pid(env) -> int:
    return os.getpid()


def gymvec_file(env) -> str:
    return sys.modules["gymvec"].__file__


def placement_group_of(env):
    """The placement group of a RayEnv, or of the engine under a gymnasium face."""
    engine = getattr(env, "engine", env)
    return engine.executor.placement_group


def removed(placement_group) -> bool:
    return ray.util.placement_group_table(placement_group)["state"] == "REMOVED"


def assert_same_td(a, b):
    for key in b.keys(True, True):
        assert torch.equal(a.get(key), b.get(key)), key


@pytest.fixture(scope="module")
def ray_env():
    env = RayEnv(2, make_gym_cartpole, envs_per_worker=2)
    yield env
    env.close()


def test_ray_listens_on_the_loopback_address_only(ray_env):
    assert {node["NodeManagerAddress"] for node in ray.nodes()} == {"127.0.0.1"}
    assert len(ray_env.worker_nodes) == 2
    assert set(ray_env.worker_nodes) == {node["NodeID"] for node in ray.nodes()}


def test_actors_import_this_checkout(ray_env):
    import gymvec

    files = ray_env.engine.request("apply", fn=gymvec_file)
    assert files == [gymvec.__file__] * 4
    pids = ray_env.engine.request("apply", fn=actor_pid)
    assert pids[0] == pids[1] != pids[2] == pids[3] and os.getpid() not in pids


def test_trajectories_equal_serial_env(ray_env):
    ref = SerialEnv(2, make_gym_cartpole, envs_per_worker=2)
    try:
        for env in (ray_env, ref):
            env.set_seed(7)
        assert_same_td(ray_env.reset(), ref.reset())
        torch.manual_seed(0)
        ends = 0
        for _ in range(30):
            action = ray_env.rand_action()
            td, root = ray_env.step_and_maybe_reset(action)
            ref_td, ref_root = ref.step_and_maybe_reset(action.clone())
            assert_same_td(td, ref_td)
            assert_same_td(root, ref_root)
            ends += int(td["next", "done"].sum())
        assert ends >= 4  # episodes of 12 steps: resets happened inside the step
        # plain steps, then a partial reset of two sub-envs with seeds
        for _ in range(3):
            action = ray_env.rand_action()
            assert_same_td(ray_env.step(action), ref.step(action.clone()))
        mask = torch.tensor([[True], [False], [False], [True]])
        for env in (ray_env, ref):
            env.set_seed([11, None, None, 12])
        out = ray_env.reset(ray_env.rand_action().set("_reset", mask))
        ref_out = ref.reset(ref.rand_action().set("_reset", mask))
        assert_same_td(out, ref_out)
    finally:
        ref.close()


def test_dispatch_and_state_dict(ray_env):
    ray_env.set_seed(0)
    ray_env.reset()
    specs = ray_env.spec  # an attribute of the sub-envs: one per sub-env
    assert [spec.id for spec in specs] == ["CartPole-v1"] * 4
    assert ray_env.get_wrapper_attr("np_random_seed") == [0, 1, 2, 3]
    with pytest.raises(AttributeError, match="no_such_attribute"):
        _ = ray_env.no_such_attribute
    state = ray_env.state_dict()
    assert len(state["sub_envs"]) == 4
    # unseeded resets draw from the sub-envs' generators: restored, they draw the same again
    first = ray_env.reset()["observation"]
    assert not torch.equal(ray_env.reset()["observation"], first)
    ray_env.load_state_dict(state)
    assert torch.equal(ray_env.reset()["observation"], first)


def test_worker_processes_run_beside_the_actor_with_the_same_trajectories():
    env = RayEnv(1, make_gym_cartpole, envs_per_worker=4, worker_processes=2)
    ref = SerialEnv(1, make_gym_cartpole, envs_per_worker=4)
    try:
        pids = env.engine.request("apply", fn=actor_pid)
        assert pids[0] == pids[1] != pids[2] == pids[3]  # the actor's two, a process's two
        for e in (env, ref):
            e.set_seed(1)
        assert_same_td(env.reset(), ref.reset())
        torch.manual_seed(1)
        for _ in range(20):
            action = env.rand_action()
            td, root = env.step_and_maybe_reset(action)
            ref_td, ref_root = ref.step_and_maybe_reset(action.clone())
            assert_same_td(td, ref_td)
            assert_same_td(root, ref_root)
    finally:
        env.close()
        ref.close()


def test_multi_task_batch_with_different_keys():
    fns = [make_cartpole, make_dict_cartpole]
    env = RayEnv(2, fns, envs_per_worker=[1, 2], placement=None)
    ref = SerialEnv(2, fns, envs_per_worker=[1, 2])
    try:
        assert env.heterogeneous
        for e in (env, ref):
            e.set_seed(5)
        out, ref_out = env.reset(), ref.reset()
        assert "pos" in out[2].keys() and "observation" in out[0].keys()
        for i in range(3):
            assert_same_td(out[i], ref_out[i])
        for _ in range(15):
            action = ref.rand_action()
            td, _ = env.step_and_maybe_reset(action.clone())
            ref_td, _ = ref.step_and_maybe_reset(action)
            for i in range(3):
                assert_same_td(td[i]["next"], ref_td[i]["next"])
    finally:
        env.close()
        ref.close()


def test_make_vec_ray_equals_sync_vector_env_and_dispatches():
    envs = make_vec("CartPole-v1", 4, backend="ray", num_workers=2, max_episode_steps=10)
    sync = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1", max_episode_steps=10)] * 4)
    placement_group = placement_group_of(envs)
    try:
        obs, _ = envs.reset(seed=3)
        ref_obs, _ = sync.reset(seed=3)
        np.testing.assert_array_equal(obs, ref_obs)
        rng = np.random.default_rng(0)
        for _ in range(25):
            actions = rng.integers(0, 2, 4)
            got, want = envs.step(actions), sync.step(actions)
            for a, b in zip(got[:4], want[:4]):
                np.testing.assert_array_equal(a, b)
                assert a.dtype == b.dtype
        assert envs.get_attr("spec")[0].id == "CartPole-v1"
        envs.set_attr("custom", [1, 2, 3, 4])
        assert envs.get_attr("custom") == (1, 2, 3, 4)
        assert envs.call("get_wrapper_attr", "custom") == (1, 2, 3, 4)
    finally:
        envs.close()
        sync.close()
    assert removed(placement_group)


def test_sb3_over_ray():
    pytest.importorskip("stable_baselines3")
    from stable_baselines3.common.vec_env import DummyVecEnv

    from gymvec.sb3 import SB3VecEnv

    venv = SB3VecEnv(
        make_vec("CartPole-v1", 2, backend="ray", num_workers=2, autoreset_mode="same_step")
    )
    dummy = DummyVecEnv([lambda: gym.make("CartPole-v1")] * 2)
    try:
        venv.seed(4)
        dummy.seed(4)
        np.testing.assert_array_equal(venv.reset(), dummy.reset())
        for _ in range(30):
            actions = np.array([1, 0])
            obs, rewards, dones, infos = venv.step(actions)
            ref_obs, ref_rewards, ref_dones, ref_infos = dummy.step(actions)
            np.testing.assert_array_equal(obs, ref_obs)
            np.testing.assert_array_equal(dones, ref_dones)
            for info, ref_info in zip(infos, ref_infos):
                if "terminal_observation" in ref_info:
                    np.testing.assert_array_equal(
                        info["terminal_observation"], ref_info["terminal_observation"]
                    )
    finally:
        venv.close()
        dummy.close()


def test_an_exception_in_a_remote_sub_env_keeps_its_traceback():
    env = RayEnv(2, [make_cartpole, make_failing], placement="pack")
    placement_group = placement_group_of(env)
    try:
        env.reset()
        env.step(env.rand_action())
        env.step(env.rand_action())
        with pytest.raises(WorkerError, match=r"^sub-env 1 \(worker 1, Ray actor on node ") as info:
            env.step(env.rand_action())
        assert isinstance(info.value, ValueError)  # the sub-env's own class, as ParallelEnv
        assert info.value.worker_index == 1 and info.value.sub_env_index == 1
        assert "a sub-env failure, deep inside step" in info.value.worker_traceback
        assert "in step" in info.value.worker_traceback
        env.reset()  # the batch goes on after a sub-env's error
        with pytest.raises(AttributeError) as info:  # a request's error: the same shape
            env.engine.request("call", name="no_such_method")
        assert isinstance(info.value, WorkerError) and info.value.sub_env_index == 0
        assert str(info.value).startswith("sub-env 0 (worker 0, Ray actor on node ")
    finally:
        env.close()
    assert removed(placement_group)


def test_a_killed_actor_raises_worker_error_naming_worker_and_node_and_close_cleans_up():
    env = RayEnv(2, make_gym_cartpole)
    placement_group = placement_group_of(env)
    try:
        env.reset()
        node = env.worker_nodes[1]
        actor = env.engine.executor.handles[1].actor
        pid = env.engine.request("apply", [1], fn=actor_pid)[0]
        os.kill(pid, 9)
        began = time.monotonic()
        with pytest.raises(WorkerError) as info:
            for _ in range(50):  # the kill lands within a step or two
                env.step(env.rand_action())
        assert time.monotonic() - began < 30
        assert info.value.worker_index == 1
        assert "worker 1" in str(info.value) and node in str(info.value)
    finally:
        env.close()
    assert removed(placement_group)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(actor.ping.remote(), timeout=30)


def test_ray_kill_of_an_actor_and_requests_after_it():
    env = RayEnv(2, make_gym_cartpole, placement=None)
    try:
        env.reset()
        ray.kill(env.engine.executor.handles[0].actor)
        with pytest.raises(WorkerError, match="worker 0"):
            for _ in range(50):
                env.step(env.rand_action())
        with pytest.raises(WorkerError, match="worker 0"):
            env.state_dict()
    finally:
        env.close()


def test_the_ray_cluster_example_runs_on_loopback():
    import subprocess

    example = REPO / "examples" / "ray_cluster.py"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, str(example), "--quick"],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert "worker 1: node" in result.stdout and "at 127.0.0.1" in result.stdout
    assert "50 steps of 4 envs on 2 actors" in result.stdout


def test_bad_options_are_refused():
    with pytest.raises(ValueError, match="placement"):
        RayEnv(1, make_cartpole, placement="everywhere")
    with pytest.raises(ValueError, match="worker_processes"):
        RayEnv(1, make_cartpole, worker_processes=0)
    with pytest.raises(ValueError, match="num_workers"):
        RayEnv(0, make_cartpole)


class SlowSteps(gym.Wrapper):
    """Sleeps in every step: its actor answers last."""

    def step(self, action):
        time.sleep(0.4)
        return self.env.step(action)


def make_slow_cartpole():
    return SlowSteps(make_cartpole())


def test_first_ready_steps_come_back_from_the_first_actors_to_answer():
    from tensordict import TensorDict

    env = RayEnv(2, [make_cartpole, make_slow_cartpole], envs_per_worker=2)
    refs = [make_cartpole() for _ in range(4)]
    try:
        env.set_seed(0)
        out = env.reset()
        for i, ref in enumerate(refs):
            np.testing.assert_array_equal(out["observation"][i].numpy(), ref.reset(seed=i)[0])
        rng = np.random.default_rng(0)
        for _ in range(3):
            actions = rng.integers(0, 2, 4)
            td = TensorDict({"action": torch.as_tensor(actions)}, batch_size=[4])
            env.async_step_send(td)
            with pytest.raises(ValueError, match="in flight"):
                env.async_step_send(td[:1].set("env_index", torch.tensor([2])))
            first = env.async_step_recv(min_get=1)
            assert sorted(first["env_index"].tolist()) == [0, 1]  # the fast actor's, alone
            with pytest.raises(TimeoutError):
                env.async_step_recv(min_get=2, timeout=0.01)
            rest = env.async_step_recv(min_get=2)  # nothing was lost to the timeout
            assert sorted(rest["env_index"].tolist()) == [2, 3]
            for out in (first, rest):
                for row, i in enumerate(out["env_index"].tolist()):
                    obs, reward, terminated, truncated, _ = refs[i].step(actions[i])
                    np.testing.assert_array_equal(out["next", "observation"][row].numpy(), obs)
                    assert bool(out["next", "terminated"][row]) == terminated
        # a subset: only sub-env 3 steps, the others stay as they were
        td = TensorDict(
            {"action": torch.tensor([1]), "env_index": torch.tensor([3])}, batch_size=[1]
        )
        env.async_step_send(td)
        out = env.async_step_recv()
        assert out["env_index"].tolist() == [3]
        obs = refs[3].step(1)[0]
        np.testing.assert_array_equal(out["next", "observation"][0].numpy(), obs)
    finally:
        env.close()


def test_first_ready_gymnasium_face_over_ray_replays_each_sub_env():
    envs = make_vec("CartPole-v1", 4, backend="ray", num_workers=2, batch_size=2)
    refs = [gym.make("CartPole-v1") for _ in range(4)]
    try:
        envs.async_reset(seed=0)
        last = [ref.reset(seed=i)[0] for i, ref in enumerate(refs)]
        pending = [False] * 4
        rng = np.random.default_rng(1)
        for _ in range(20):
            obs, rewards, terminations, truncations, infos = envs.recv()
            env_id = infos["env_id"]
            assert len(env_id) == 2
            for row, i in enumerate(env_id.tolist()):
                np.testing.assert_array_equal(obs[row], last[i])
            actions = rng.integers(0, 2, 2)
            for a, i in zip(actions.tolist(), env_id.tolist()):
                if pending[i]:  # NEXT_STEP: the step after an episode's end resets
                    last[i], pending[i] = refs[i].reset()[0], False
                else:
                    last[i], _, term, trunc, _ = refs[i].step(a)
                    pending[i] = term or trunc
            envs.send(actions, env_id)
    finally:
        envs.close()


def test_bench_ray_runners_quick_strict(capsys):
    """The bench's Ray runners on this module's Ray: every one runs, --strict."""
    from gymvec.bench.__main__ import main

    backends = "gym-sync,gymvec-ray,hand-ray,hand-ray-dag,naive-ray"
    argv = ["--quick", "--strict", "--no-progress", "--env-id", "CartPole-v1"]
    argv += ["--num-envs", "4", "--num-workers", "2", "--backends", backends]
    assert main(argv) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    rows = [row for row in rows if row and row[0] == "CartPole-v1-4"]
    assert [row[1] for row in rows] == backends.split(",")
    assert all(float(row[2]) > 0 for row in rows)


def test_first_ready_with_a_dead_actor_raises_worker_error_and_its_sub_envs_need_a_reset():
    env = RayEnv(2, make_gym_cartpole, envs_per_worker=2, placement=None)
    try:
        env.set_seed(0)
        env.reset()
        node = env.worker_nodes[1]
        os.kill(env.engine.request("apply", [2], fn=actor_pid)[0], 9)
        env.async_step_send(env.rand_action())
        taken = []
        with pytest.raises(WorkerError) as info:
            for _ in range(4):
                taken += env.async_step_recv(min_get=1)["env_index"].tolist()
        assert "worker 1" in str(info.value) and node in str(info.value)
        assert set(taken) <= {0, 1}
        step = env.rand_action()[2:3].set("env_index", torch.tensor([2]))
        with pytest.raises(RuntimeError, match="reset"):
            env.async_step_send(step)
    finally:
        env.close()


class StepCount(gym.Wrapper):
    """Reports its step count and a constant in its infos (numeric entries: buffer fields
    learnt from the first results)."""

    def reset(self, **kwargs):
        self.count = 0
        obs, info = self.env.reset(**kwargs)
        return obs, {**info, "count": self.count, "scale": 0.5}

    def step(self, action):
        self.count += 1
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, {**info, "count": self.count, "scale": 0.5}


def make_counting_cartpole():
    return StepCount(make_cartpole())


def test_infos_through_the_gymnasium_face_equal_sync_vector_env():
    envs = RayEnv(2, make_counting_cartpole, envs_per_worker=2).to_gymnasium()
    sync = gym.vector.SyncVectorEnv([make_counting_cartpole] * 4)
    try:
        _, infos = envs.reset(seed=1)
        _, ref_infos = sync.reset(seed=1)
        for key in ref_infos:
            np.testing.assert_array_equal(infos[key], ref_infos[key])
        rng = np.random.default_rng(2)
        for _ in range(20):
            actions = rng.integers(0, 2, 4)
            *got, infos = envs.step(actions)
            *want, ref_infos = sync.step(actions)
            for a, b in zip(got, want):
                np.testing.assert_array_equal(a, b)
            assert sorted(infos) == sorted(ref_infos)
            for key in ref_infos:
                np.testing.assert_array_equal(infos[key], ref_infos[key])
    finally:
        envs.close()
        sync.close()


class Hangs(gym.Wrapper):
    """Its 2nd step takes a minute."""

    def step(self, action):
        self.steps = getattr(self, "steps", 0) + 1
        if self.steps == 2:
            time.sleep(60)
        return self.env.step(action)


def make_hanging():
    return Hangs(make_cartpole())


def test_a_timeout_names_the_busy_worker_and_close_ends_within_seconds():
    from gymvec.errors import SubEnvTimeoutError

    env = RayEnv(2, [make_cartpole, make_hanging], timeout=3.0, placement=None)
    try:
        env.reset()
        env.step(env.rand_action())
        began = time.monotonic()
        with pytest.raises(SubEnvTimeoutError, match=r"workers \[1\] \(sub-envs \[1\]\)"):
            env.step(env.rand_action())
        assert time.monotonic() - began < 20
        with pytest.raises(RuntimeError, match="timed out"):
            env.step(env.rand_action())
    finally:
        began = time.monotonic()
        env.close()
        assert time.monotonic() - began < 20


def test_large_observations_through_lanes_equal_serial_env_after_callers_write_them():
    # Image observations go to observation lanes; a SAME_STEP step leaves the root's
    # observations of the sub-envs it did not reset in the lane (the caller's to write into
    # afterwards): the next root and a later partial reset show what the sub-envs returned.
    import _face_envs as fe

    import gymvec.bench.envs  # noqa: F401  (registers GymvecBench/ImageObs-v0)

    fns = fe.env_fns("GymvecBench/ImageObs-v0", 4, lengths=(3, 4, 5, 6), num_frames=3)
    env = RayEnv(2, fns, envs_per_worker=2)
    ref = SerialEnv(1, fns, envs_per_worker=4)
    try:
        for batch in (env, ref):
            batch.set_seed(5)
        root, ref_root = env.reset(), ref.reset()
        assert_same_td(root, ref_root)
        lanes = [a.ctypes.data for a in env.buffers.handed_out_lanes()]
        torch.manual_seed(1)
        from_lanes = 0
        for t in range(14):
            action = env.rand_action()["action"]
            td, root = env.step_and_maybe_reset(root.set("action", action))
            ref_td, ref_root = ref.step_and_maybe_reset(ref_root.set("action", action.clone()))
            assert_same_td(td, ref_td)
            assert_same_td(root, ref_root)
            from_lanes += td["next", "observation"].data_ptr() in lanes
            td["next", "observation"].zero_()  # (the roots may share it: both written)
            ref_td["next", "observation"].zero_()
            if t % 4 == 3:
                mask = torch.arange(4).unsqueeze(-1) == t % 3
                root = env.reset(root.set("_reset", mask))
                ref_root = ref.reset(ref_root.set("_reset", mask.clone()))
                assert_same_td(root, ref_root)
        assert from_lanes >= 10
    finally:
        env.close()
        ref.close()


def test_a_ray_actor_runs_a_block_as_the_block_alone():
    """make_vec's vector_entry_point mode on Ray: one block (CartPole's numpy vector env) per
    actor, each row as the blocks stepped alone with the contract's seeds."""
    envs = make_vec(
        "CartPole-v1", 6, backend="ray", num_workers=2, vectorization_mode="vector_entry_point"
    )
    alone = [
        gym.make_vec("CartPole-v1", 3, vectorization_mode="vector_entry_point") for _ in range(2)
    ]
    try:
        assert envs.num_envs == 6
        obs, _ = envs.reset(seed=11)
        want = np.concatenate([alone[0].reset(seed=11)[0], alone[1].reset(seed=14)[0]])
        np.testing.assert_array_equal(obs, want)
        rng, finished = np.random.default_rng(0), 0
        for _ in range(60):
            a = rng.integers(0, 2, 6)
            got = envs.step(a)
            parts = [alone[0].step(a[:3]), alone[1].step(a[3:])]
            for k in range(4):
                np.testing.assert_array_equal(got[k], np.concatenate([parts[0][k], parts[1][k]]))
            finished += int(np.sum(got[2] | got[3]))
        assert finished > 0
    finally:
        envs.close()


def test_ray_env_runs_disabled_blocks_in_its_actors():
    """The tensordict side on Ray: two actors, each a SyncVectorEnv block in DISABLED mode,
    stepped with step_and_maybe_reset as SerialEnv of the same blocks."""
    from _block_envs import sync_block_fn
    from gymnasium.vector import AutoresetMode

    fn = sync_block_fn(3, AutoresetMode.DISABLED)
    env, serial = RayEnv(2, fn), SerialEnv(2, fn)
    try:
        assert env.batch_size == torch.Size([6])
        env.set_seed(5)
        serial.set_seed(5)
        td, ref = env.reset(), serial.reset()
        torch.testing.assert_close(td["observation"], ref["observation"])
        for t in range(30):
            action = torch.as_tensor(np.random.default_rng(t).integers(0, 2, 6))
            td["action"], ref["action"] = action, action.clone()
            (td, root), (ref, ref_root) = (
                env.step_and_maybe_reset(td),
                serial.step_and_maybe_reset(ref),
            )
            torch.testing.assert_close(td["next", "observation"], ref["next", "observation"])
            torch.testing.assert_close(root["observation"], ref_root["observation"])
            td, ref = root, ref_root
    finally:
        env.close()
        serial.close()
