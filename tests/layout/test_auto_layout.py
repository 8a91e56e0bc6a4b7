"""``backend="auto"`` (API.md section 14): the layout chosen at the first reset from measured
costs, Sync's trajectories kept, the cache, the options that narrow the choice, autotune."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time

import gymnasium as gym
import numpy as np
import pytest

import gymvec
from gymvec import ParallelVectorEnv
from gymvec.layout import timing
from gymvec.layout.auto import AutoVectorEnv
from gymvec.layout.model import Constraints, Costs, candidates, choose

BUSY_ID = "GymvecLayoutBusy-v0"
COUNTING_ID = "GymvecLayoutCounting-v0"


class BusyEnv(gym.Env):
    """Each step spins 1 ms of CPU: an env that loses without worker processes."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.np_random.uniform(-1, 1, 2).astype(np.float32), {}

    def step(self, action):
        end = time.perf_counter() + 1e-3
        while time.perf_counter() < end:
            pass
        return self.np_random.uniform(-1, 1, 2).astype(np.float32), 1.0, False, False, {}


class CountingEnv(BusyEnv):
    """Cheap; logs "build", "reset" and "step" with this process's id to ``log``."""

    def __init__(self, log: str):
        self.log = log
        self._write("build")

    def _write(self, event: str) -> None:
        with open(self.log, "a") as f:
            f.write(f"{event} {os.getpid()}\n")

    def reset(self, *, seed=None, options=None):
        self._write("reset")
        return super().reset(seed=seed)

    def step(self, action):
        self._write("step")
        return self.np_random.uniform(-1, 1, 2).astype(np.float32), 1.0, False, False, {}


gym.register(BUSY_ID, entry_point=BusyEnv, max_episode_steps=50)
gym.register(COUNTING_ID, entry_point=CountingEnv, max_episode_steps=50)


@pytest.fixture(autouse=True)
def cache_home(tmp_path, monkeypatch):
    """Each test its own cache directory, on; and a machine whose other programs keep no core
    busy (whatever the suite's own load), unless a test says otherwise (``other_programs``),
    and whose cores run alike (the probe runs, its ``pair_slowdown`` read as 1)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("GYMVEC_CACHE", raising=False)
    other_programs(monkeypatch, 0.0)

    def cores_alike() -> tuple[timing.Machine, float]:
        machine, child_cpu = MEASURED_MACHINE()
        return dataclasses.replace(machine, pair_slowdown=1.0), child_cpu

    monkeypatch.setattr(timing, "probe_machine", cores_alike)
    return tmp_path / "cache" / "gymvec"


MEASURED_LOAD = timing.others_load  # (the fixture replaces them)
MEASURED_MACHINE = timing.probe_machine


def other_programs(monkeypatch, load: float) -> None:
    """The choice is made as if other programs kept ``load`` cores busy."""
    monkeypatch.setattr(timing, "others_load", lambda watch=None: load)


def _events(path, event: str) -> int:
    with open(path) as f:
        return sum(line.split()[0] == event for line in f)


def test_the_default_keeps_sync_trajectories():
    envs = gymvec.make_vec("CartPole-v1", 4)
    ref = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 4)
    try:
        assert isinstance(envs, AutoVectorEnv)
        obs, _ = envs.reset(seed=3)
        np.testing.assert_array_equal(obs, ref.reset(seed=3)[0])
        actions = np.random.default_rng(0).integers(0, 2, size=(60, 4))
        for a in actions:  # episodes end: the autoresets are compared too
            got, expected = envs.step(a), ref.step(a)
            for x, y in zip(got[:4], expected[:4]):
                np.testing.assert_array_equal(x, y)
    finally:
        envs.close()
        ref.close()


def test_a_cheap_env_chooses_this_process_a_busy_one_workers(monkeypatch):
    """A cheap env stays in this process where other programs hold a core (on a free
    machine, 4 cheap sub-envs may go either way: see test_the_model_weighs_free_cores)."""
    other_programs(monkeypatch, 1.0)
    cheap = gymvec.make_vec("FrozenLake-v1", 4)
    cheap.reset(seed=0)
    other_programs(monkeypatch, 0.0)
    busy = gymvec.make_vec(BUSY_ID, 4)
    try:
        busy.reset(seed=0)
        assert cheap.layout.backend == "serial" and cheap.layout.local_share == 4
        assert busy.layout.backend == "parallel" and busy.layout.workers == 2
        report = busy.layout.report
        assert report.source == "timed" and 0.8e-3 < report.costs.step < 50e-3  # (loaded: slower)
        assert {c.name for c in report.candidates} >= {"serial", "parallel w=2"}
        assert report.chosen.predicted == max(c.predicted for c in report.candidates)
        busy.step(busy.action_space.sample())
    finally:
        cheap.close()
        busy.close()


def test_building_touches_no_env_and_the_cache_skips_the_timing(tmp_path, cache_home):
    log = str(tmp_path / "log")
    envs = gymvec.make_vec(COUNTING_ID, 3, log=log)
    try:
        # one throwaway built (it gives the spaces), nothing reset or stepped
        assert _events(log, "build") == 1
        assert _events(log, "reset") == _events(log, "step") == 0
        envs.reset(seed=0)
        timed_steps = _events(log, "step")
        assert timed_steps > 0  # the throwaway was timed...
        assert envs.layout.report.source == "timed"
        assert _events(log, "build") == 1 + 3  # ...and the sub-envs are fresh
    finally:
        envs.close()
    assert (cache_home / "layouts.json").exists()
    again = gymvec.make_vec(COUNTING_ID, 3, log=log)
    try:
        again.reset(seed=0)
        assert again.layout.report.source == "cache"
        assert _events(log, "step") == timed_steps  # nothing timed this time
        assert again.layout == envs.layout
    finally:
        again.close()


def test_the_cache_can_be_turned_off(monkeypatch, cache_home):
    monkeypatch.setenv("GYMVEC_CACHE", "0")
    for _ in range(2):
        envs = gymvec.make_vec("FrozenLake-v1", 2)
        envs.reset(seed=0)
        assert envs.layout.report.source == "timed"
        envs.close()
    assert not cache_home.exists()


@pytest.mark.parametrize("damage", ["corrupt", "unwritable"])
def test_a_bad_cache_is_ignored_with_one_warning(damage, cache_home, caplog, monkeypatch):
    if damage == "corrupt":
        cache_home.mkdir(parents=True)
        (cache_home / "layouts.json").write_text("{not json")
    else:  # the cache directory's place is a file
        cache_home.parent.mkdir(parents=True)
        cache_home.write_text("")
    other_programs(monkeypatch, 1.0)  # (a cheap env then stays in this process)
    with caplog.at_level(logging.WARNING, logger="gymvec"):
        for _ in range(2):
            envs = gymvec.make_vec("FrozenLake-v1", 2)
            envs.reset(seed=0)
            assert envs.layout.backend == "serial"
            envs.close()
    warnings = [r for r in caplog.records if r.name == "gymvec" and r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "cache" in warnings[0].getMessage()
    if damage == "corrupt":  # replaced by a sound file
        assert json.loads((cache_home / "layouts.json").read_text())


def test_options_narrow_the_choice():
    costs = Costs(step=5e-6, reset=5e-6, reset_rate=0.05, round_trip=10e-6, cores=2)
    timed = Constraints.of(timeout=5.0)
    assert not timed.serial and all(not c.local for c in candidates(8, 2, timed))
    fixed = choose(costs, 8, Constraints.of(num_workers=2, local_worker=False), "timed")
    assert [c.name for c in fixed.candidates] == ["parallel w=2"]
    first_ready = candidates(8, 2, Constraints.of(first_ready=True))
    assert [c.name for c in first_ready] == ["serial", "parallel w=1", "parallel w=2"]
    # a cheap env where other programs hold a core: this process, unless the options say
    assert choose(costs, 8, Constraints(), "timed", busy=1.0).chosen.backend == "serial"
    # a timeout: workers, untimed (a throwaway here could outlast it)
    envs = gymvec.make_vec("FrozenLake-v1", 2, timeout=30.0)
    try:
        assert isinstance(envs, ParallelVectorEnv) and not envs.engine.local_envs()
    finally:
        envs.close()


def test_the_model_weighs_free_cores_and_their_speeds():
    """On a free 2-core machine whose cores run alike, two processes that spin on shared words
    hand a step over in microseconds: 8 and 32 sub-envs of 5 us are fastest in two shares, one
    stepped here. Where two processes at once run 1.7x as slow as one (a VM whose host cores
    are shared), 8 stay in this process and 8 of 50 us still gain. Where other programs hold
    a core, a share would wait for them: this process."""
    cheap = Costs(step=5e-6, reset=5e-6, reset_rate=0.05, round_trip=10e-6, cores=2)
    free = choose(cheap, 32, Constraints(), "timed", busy=0.0)
    assert free.chosen.name == "parallel w=2 +local" and free.busy == 0.0
    assert "other programs' load 0.0" in free.table()
    assert choose(cheap, 32, Constraints(), "timed", busy=1.2).chosen.name == "serial"
    assert choose(cheap, 8, Constraints(), "timed", busy=0.0).chosen.name == "parallel w=2 +local"
    slow_pair = dataclasses.replace(cheap, pair_slowdown=1.7)
    assert choose(slow_pair, 8, Constraints(), "timed").chosen.name == "serial"
    costlier = dataclasses.replace(slow_pair, step=50e-6)
    assert choose(costlier, 8, Constraints(), "timed").chosen.name == "parallel w=2 +local"
    # a hand-over that costs more than a share saves: this process
    slow_trip = dataclasses.replace(cheap, spin_trip=40e-6)
    assert choose(slow_trip, 8, Constraints(), "timed").chosen.name == "serial"
    # large observations: copying them costs the calling process alone twice
    image = Costs(step=2e-6, reset=0.0, reset_rate=0.0, round_trip=10e-6, cores=2)
    small = choose(image, 32, Constraints(), "timed").candidates[-1].predicted
    big = dataclasses.replace(image, obs_bytes=28224)
    serial, *_, local = choose(big, 32, Constraints(), "timed").candidates
    assert local.predicted < small and local.predicted > 1.2 * serial.predicted


def _children() -> set[int]:
    """This process's child processes (from /proc)."""
    found = set()
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except (OSError, ValueError):
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid():
            found.add(int(entry))
    return found


def test_the_probe_measures_this_machine_and_leaves_no_process(monkeypatch):
    """The probe's forked child answers through a pipe and through shared words, runs the
    same Python work beside this process (its CPU time told, for the load's watch), and is
    gone afterwards; without fork, typical figures."""
    before = _children()
    machine, child_cpu = MEASURED_MACHINE()
    assert 0 < machine.spin_trip < 0.1 and 0 < machine.round_trip < 0.1
    assert 0.5 <= machine.pair_slowdown <= 4.0
    # (the child ran the work 25 times, some 0.5 ms each, and spun through the pings)
    assert 0.005 < child_cpu < 1.0
    assert _children() == before
    monkeypatch.delattr(os, "fork")
    assert MEASURED_MACHINE() == (timing.Machine(), 0.0)


def test_a_program_that_holds_a_core_keeps_cheap_envs_in_this_process(monkeypatch):
    """The load is measured while the throwaway is timed (/proc/stat less this process): a
    program spinning beside it holds a core, so 8 cheap sub-envs stay in this process."""
    import subprocess
    import sys

    monkeypatch.setattr(timing, "others_load", MEASURED_LOAD)
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.2)
        watch = timing.CpuWatch()
        envs = gymvec.make_vec("FrozenLake-v1", 8)
        envs.reset(seed=0)
        assert envs.layout.backend == "serial" and envs.layout.report.busy >= 0.5
        assert watch.others() >= 0.5
        envs.close()
    finally:
        spinner.kill()
        spinner.wait()


def test_gymnasium_make_vec_and_num_workers_auto(monkeypatch):
    envs = gym.make_vec("gymvec:gymvec/FrozenLake-v1", num_envs=2)
    ref = gym.vector.SyncVectorEnv([lambda: gym.make(BUSY_ID)] * 4)
    parallel = ParallelVectorEnv([lambda: gym.make(BUSY_ID)] * 4, num_workers="auto")
    try:
        assert isinstance(envs, AutoVectorEnv) and envs.spec.id == "gymvec/FrozenLake-v1"
        other_programs(monkeypatch, 1.0)  # (FrozenLake then stays in this process)
        envs.reset(seed=0)
        assert envs.layout.backend == "serial"
        report = parallel.layout_report
        assert all(c.backend == "parallel" for c in report.candidates)
        assert report.chosen.workers == 2 and parallel.num_envs == 4
        np.testing.assert_array_equal(parallel.reset(seed=1)[0], ref.reset(seed=1)[0])
        a = parallel.action_space.sample()
        np.testing.assert_array_equal(parallel.step(a)[0], ref.step(a)[0])
    finally:
        envs.close()
        parallel.close()
        ref.close()


def test_bad_input():
    with pytest.raises(ValueError, match="'auto', 'serial', 'parallel', 'ray'"):
        gymvec.make_vec("CartPole-v1", 2, backend="threads")
    with pytest.raises(ValueError, match="num_workers"):
        gymvec.make_vec("CartPole-v1", 2, num_workers="some")
    with pytest.raises(ValueError, match="num_workers"):
        ParallelVectorEnv([lambda: gym.make("CartPole-v1")] * 2, num_workers="some")


class Broken(BusyEnv):
    def step(self, action):
        raise RuntimeError("broken step")


def test_a_throwaway_that_fails_raises_its_error():
    gym.register("GymvecLayoutBroken-v0", entry_point=Broken)
    try:
        envs = gymvec.make_vec("GymvecLayoutBroken-v0", 2)
        with pytest.raises(RuntimeError, match="broken step"):
            envs.reset(seed=0)
        envs.close()
    finally:
        del gym.registry["GymvecLayoutBroken-v0"]


def test_autotune_and_bench_tune(capsys):
    report = gymvec.autotune("CartPole-v1", 2, seconds=0.4)
    assert report.source == "measured"
    assert all(c.measured and c.measured > 0 for c in report.candidates)
    assert report.chosen.measured == max(c.measured for c in report.candidates)
    from gymvec.bench.__main__ import main

    assert main(["--tune", "FrozenLake-v1", "--num-envs", "2", "--max-seconds", "0.4"]) == 0
    out = capsys.readouterr().out
    assert "<- chosen" in out and "make_vec's default would choose" in out


@pytest.mark.parametrize("env_id", ["CartPole-v1", BUSY_ID])
def test_the_async_pairs_and_wrappers_work_whatever_the_layout(env_id, monkeypatch):
    """make_vec's result is used where a ParallelVectorEnv was before: AsyncVectorEnv's
    pairs (and their misuse errors), call/get_attr/set_attr, gymnasium's vector wrappers."""
    from gymnasium.error import AlreadyPendingCallError, NoAsyncCallError
    from gymnasium.wrappers.vector import RecordEpisodeStatistics

    # CartPole where other programs hold a core: this process; the busy env: workers
    other_programs(monkeypatch, 1.0 if env_id == "CartPole-v1" else 0.0)

    envs = RecordEpisodeStatistics(gymvec.make_vec(env_id, 2))
    ref = gym.vector.SyncVectorEnv([lambda: gym.make(env_id)] * 2)
    try:
        auto = envs.unwrapped
        assert isinstance(auto, AutoVectorEnv) and "not chosen yet" in repr(auto)
        auto.reset_async(seed=1)
        with pytest.raises(AlreadyPendingCallError):
            auto.step(auto.action_space.sample())
        np.testing.assert_array_equal(auto.reset_wait()[0], ref.reset(seed=1)[0])
        assert auto.layout.backend == ("serial" if env_id == "CartPole-v1" else "parallel")
        with pytest.raises(NoAsyncCallError):
            auto.step_wait()
        for t in range(3):
            actions = np.array([t % 2, 1])
            auto.step_async(actions)
            got, want = auto.step_wait(), ref.step(actions)
            for x, y in zip(got[:4], want[:4]):
                np.testing.assert_array_equal(x, y)
        auto.call_async("get_wrapper_attr", "spec")
        assert [s.id for s in auto.call_wait()] == [env_id] * 2
        auto.set_attr("marker", [1, 2])
        assert auto.get_attr("marker") == (1, 2)
        for _ in range(60):  # episodes end: the wrapper's statistics come from the infos
            envs.step(envs.action_space.sample())
        assert len(envs.return_queue) > 0
        assert type(auto.inner).__name__ in repr(auto)
    finally:
        envs.close()
        ref.close()
    assert auto.closed and auto.inner.closed


def test_bench_layouts_case_on_a_tiny_panel(capsys):
    """The layouts case: every runner of each env timed in the same run, the default's
    choice, its share of the best runner and its ratio to Sync/Async, per env."""
    import argparse

    from gymvec.bench.__main__ import QUICK, build_parser
    from gymvec.bench.envs import BUSY_STEP_ID as BENCH_BUSY
    from gymvec.bench.layouts import AUTO, format_panel, layouts_main, run_panel_env

    assert build_parser().parse_args(["--case", "layouts"]).case == ["layouts"]
    result = run_panel_env("FrozenLake-v1", 4, QUICK)
    assert not result.errors
    expected = {"gym-sync", "gym-async", "serial", "parallel w=1", "parallel w=2", AUTO}
    assert expected <= set(result.rates)
    assert all(len(rates) == QUICK.repeats and min(rates) > 0 for rates in result.rates.values())
    assert result.chosen in result.rates  # (one of the fixed layouts timed beside it)
    assert 0.5 <= result.pair_slowdown <= 4.0  # (the default's probe: two at once)
    share = result.median(AUTO) / max(result.median(n) for n in result.rates)
    assert result.share_of_best == pytest.approx(share)
    gym_best = max(result.median("gym-sync"), result.median("gym-async"))
    assert result.ratio_gym == pytest.approx(result.median(AUTO) / gym_best)
    table = format_panel([result])
    assert "FrozenLake-v1 x4" in table and "serial" in table
    args = argparse.Namespace(quick=True)
    assert layouts_main(args, QUICK, panel=[(BENCH_BUSY, 2)]) == 0
    out = capsys.readouterr().out
    assert "BusyStep-v0 x2" in out and "targets" in out and "Error" not in out
