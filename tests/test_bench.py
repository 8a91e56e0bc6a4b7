"""The bench: its envs through gymnasium, its worker layout, and the CLI's short form end to end."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from gymvec.bench.__main__ import main
from gymvec.bench.cases import SB3_BACKENDS, default_backends
from gymvec.bench.envs import (
    BUSY_LATENCY_ID,
    BUSY_STEP_ID,
    IMAGE_OBS_ID,
    LATENCY_ID,
    importable_id,
    register_bench_envs,
)
from gymvec.bench.harness import Settings
from gymvec.bench.runners import RUNNERS, RunnerOptions, usable_cores, worker_layout

REPO_ROOT = Path(__file__).resolve().parents[1]
median = statistics.median


def _rollout(env: gym.Env, seed: int, actions: list[int]) -> list[np.ndarray]:
    obs, _ = env.reset(seed=seed)
    observations = [obs]
    for action in actions:
        obs, *_ = env.step(action)
        observations.append(obs)
    return observations


@pytest.mark.parametrize(
    "env_id, kwargs, shape, dtype",
    [
        (BUSY_STEP_ID, {"step_seconds": 0.0}, (4,), np.float32),
        (IMAGE_OBS_ID, {}, (4, 84, 84), np.uint8),
        (LATENCY_ID, {"mean_seconds": 1e-4}, (4,), np.float32),
        (BUSY_LATENCY_ID, {"mean_seconds": 1e-4}, (4,), np.float32),
    ],
)
def test_bench_env_observations_and_seeding(env_id, kwargs, shape, dtype):
    env = gym.make(env_id, **kwargs)
    other = gym.make(env_id, **kwargs)
    try:
        assert env.observation_space.shape == shape
        assert env.observation_space.dtype == dtype
        actions = [0, 1, 1, 0, 1, 0, 0, 1, 1, 1]
        first = _rollout(env, 7, actions)
        for obs in first:
            assert obs.shape == shape
            assert obs.dtype == dtype
            assert env.observation_space.contains(obs)
        # The same seed replays the same episode, in another instance too; another seed does not.
        again = _rollout(other, 7, actions)
        assert all(np.array_equal(a, b) for a, b in zip(first, again))
        different = _rollout(other, 8, actions)
        assert not np.array_equal(first[0], different[0])
        # Observations change from step to step (they are not one frozen array).
        assert not np.array_equal(first[1], first[2])
    finally:
        env.close()
        other.close()


@pytest.mark.parametrize(
    "env_id, kwargs",
    [
        (BUSY_STEP_ID, {"step_seconds": 0.0, "episode_steps": 5}),
        (IMAGE_OBS_ID, {"episode_steps": 5}),
        (LATENCY_ID, {"mean_seconds": 0.0, "episode_steps": 5}),
    ],
)
def test_bench_env_truncates_after_episode_steps(env_id, kwargs):
    env = gym.make(env_id, **kwargs)
    try:
        for _ in range(2):  # the second episode after a reset is as long as the first
            env.reset(seed=0)
            flags = [env.step(env.action_space.sample())[2:4] for _ in range(5)]
            assert flags[:4] == [(False, False)] * 4
            assert flags[4] == (False, True)
    finally:
        env.close()


def test_busy_step_env_rewards_action_one():
    env = gym.make(BUSY_STEP_ID, step_seconds=0.0)
    try:
        env.reset(seed=0)
        assert env.step(1)[1] == 1.0
        assert env.step(0)[1] == 0.0
    finally:
        env.close()


def test_latency_env_waits_exponential_times_from_its_own_generator():
    env = gym.make(LATENCY_ID, mean_seconds=2e-3, episode_steps=10_000)
    busy = gym.make(BUSY_LATENCY_ID, mean_seconds=2e-3, episode_steps=10_000)
    try:
        assert busy.unwrapped.busy and not env.unwrapped.busy
        env.reset(seed=3)
        busy.reset(seed=3)
        start = time.perf_counter()
        delays = []
        for _ in range(200):
            step, spun = env.step(0), busy.step(0)
            np.testing.assert_array_equal(step[0], spun[0])  # the same draws, spun
            assert step[1:4] == spun[1:4]
            delays.append(step[4]["delay"])
        elapsed = time.perf_counter() - start
        # Exp(2 ms): mean 2 ms (200 draws: within 30%), and every step took its draw at least
        assert 1.4e-3 < statistics.mean(delays) < 2.6e-3
        assert elapsed >= 2 * sum(delays) * 0.99  # the sleeping env and the spinning one
    finally:
        env.close()
        busy.close()


def test_cli_quick_first_ready_runner_strict(capsys):
    argv = ["--quick", "--strict", "--no-progress", "--env-id", LATENCY_ID, "--num-envs", "4"]
    argv += ["--num-workers", "2", "--backends", "gym-async,gymvec-parallel,gymvec-first-ready"]
    assert main(argv) == 0
    rows = _table_rows(capsys.readouterr().out)
    assert [row[1] for row in rows] == ["gym-async", "gymvec-parallel", "gymvec-first-ready"]
    assert all(float(row[2]) > 0 for row in rows)


def test_bench_env_bad_arguments_are_rejected():
    with pytest.raises(ValueError, match="BusyStepEnv step_seconds must be >= 0, got -1.0"):
        gym.make(BUSY_STEP_ID, step_seconds=-1.0)
    with pytest.raises(ValueError, match="ImageObsEnv episode_steps must be >= 1, got 0"):
        gym.make(IMAGE_OBS_ID, episode_steps=0)
    with pytest.raises(ValueError, match="ImageObsEnv num_frames must be >= 1, got 0"):
        gym.make(IMAGE_OBS_ID, num_frames=0)
    with pytest.raises(ValueError, match="LatencyEnv mean_seconds must be >= 0, got -0.5"):
        gym.make(LATENCY_ID, mean_seconds=-0.5)


def test_run_setting_flags_set_the_settings():
    from gymvec.bench.__main__ import FULL, QUICK, build_parser, select_settings

    parser = build_parser()
    argv = ["--steps", "7", "--repeats", "2", "--warmup", "0", "--max-seconds", "0", "--seed", "3"]
    expected = Settings(steps=7, repeats=2, warmup=0, max_seconds=None, seed=3)
    assert select_settings(parser.parse_args(argv)) == expected
    assert select_settings(parser.parse_args(["--max-seconds", "2.5"])).max_seconds == 2.5
    assert select_settings(parser.parse_args([])) == FULL
    assert select_settings(parser.parse_args(["--quick", "--steps", "5"])).repeats == QUICK.repeats
    assert f"untimed vector steps before each timed run (default {FULL.warmup})" in " ".join(
        parser.format_help().split()
    )
    with pytest.raises(SystemExit):
        parser.parse_args(["--warmup", "-1"])


def test_register_bench_envs_is_idempotent():
    spec = gym.spec(BUSY_STEP_ID)
    register_bench_envs()
    register_bench_envs()
    assert gym.spec(BUSY_STEP_ID) is spec
    assert gym.spec(IMAGE_OBS_ID).entry_point == "gymvec.bench.envs:ImageObsEnv"


def test_importable_id_builds_the_env_in_a_fresh_interpreter():
    # As a spawned worker would: gymvec.bench was never imported there.
    code = (
        "import gymnasium as gym\n"
        f"env = gym.make({importable_id(IMAGE_OBS_ID)!r})\n"
        "obs, _ = env.reset(seed=0)\n"
        "print(obs.shape, obs.dtype)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=_env()
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "(4, 84, 84) uint8"
    assert importable_id("CartPole-v1") == "CartPole-v1"


def test_worker_layout():
    assert worker_layout(32, RunnerOptions(num_workers=2)) == (2, 16)
    assert worker_layout(8, RunnerOptions(envs_per_worker=4)) == (2, 4)
    workers, per_worker = worker_layout(12, RunnerOptions())
    assert workers * per_worker == 12
    assert 1 <= workers <= usable_cores()
    with pytest.raises(ValueError, match="num_envs=10"):
        worker_layout(10, RunnerOptions(num_workers=3))
    with pytest.raises(ValueError, match="num_envs=8"):
        worker_layout(8, RunnerOptions(num_workers=2, envs_per_worker=3))


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


def _table_rows(stdout: str) -> list[list[str]]:
    lines = stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["case", "runner"])
    assert set(lines[header + 1].replace(" ", "")) == {"-"}
    rows = []
    for line in lines[header + 2 :]:
        if not line.strip():  # the verdict follows the table after a blank line
            break
        rows.append(line.split())
    return rows


def test_cli_quick_gymnasium_runners(tmp_path):
    json_path = tmp_path / "bench.json"
    cmd = [sys.executable, "-m", "gymvec.bench", "--quick", "--case", "cartpole-8"]
    cmd += ["--case", "busy-8", "--backends", "gym-sync,gym-async", "--json", str(json_path)]
    out = subprocess.run(
        cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, env=_env()
    )
    assert out.returncode == 0, out.stderr

    rows = _table_rows(out.stdout)
    assert [row[:2] for row in rows] == [
        ["cartpole-8", "gym-sync"],
        ["cartpole-8", "gym-async"],
        ["busy-8", "gym-sync"],
        ["busy-8", "gym-async"],
    ]
    for row in rows:
        assert len(row) == 7, row  # no error column filled in
        rate, ratio_sync, ratio_best = (float(cell) for cell in (row[2], row[4], row[5]))
        assert rate > 0 and ratio_sync > 0 and ratio_best > 0
        assert row[3].endswith("%")  # the spread of the two runs
        assert row[6] == "-"  # no bare-free ran: no ceiling
    assert [row[4] for row in rows if row[1] == "gym-sync"] == ["1.00", "1.00"]
    for case_rows in (rows[:2], rows[2:]):  # x sync: the printed steps/s over gym-sync's
        sync_rate = float(case_rows[0][2])
        for row in case_rows:
            assert float(row[4]) == pytest.approx(float(row[2]) / sync_rate, abs=0.006)

    document = json.loads(json_path.read_text())
    assert set(document) >= {"cases", "machine"}
    assert document["machine"]["usable_cores"] >= 1
    cases = document["cases"]
    assert [(c["case"], c["env_id"], c["num_envs"]) for c in cases] == [
        ("cartpole-8", "CartPole-v1", 8),
        ("busy-8", BUSY_STEP_ID, 8),
    ]
    for case, case_rows in zip(cases, (rows[:2], rows[2:])):
        results = case["results"]
        assert [r["runner"] for r in results] == ["gym-sync", "gym-async"]
        for result, row in zip(results, case_rows):
            assert result["error"] is None
            assert result["steps_per_s"] > 0
            assert f"{result['steps_per_s']:.0f}" == row[2]
            # Ratios are those of the medians, the steps/s the table prints.
            sync, mine = results[0]["samples"], result["samples"]
            assert len(mine) == len(sync) == 2
            assert result["steps_per_s"] == statistics.median(mine)
            assert result["spread"] == pytest.approx((max(mine) - min(mine)) / median(mine))
            assert result["ratio_sync"] == pytest.approx(median(mine) / median(sync))
            best = max(median(sync), median(results[1]["samples"]))
            assert result["ratio_best_gym"] == pytest.approx(median(mine) / best)
            assert result["ratio_best_gym"] <= 1.0  # a gymnasium runner against the faster one
            assert result["ratio_ceiling"] is None
    # The progress went to stderr, not into the table.
    assert "gym-async" in out.stderr


def test_cli_reports_a_failing_runner_and_strict_fails(capsys):
    argv = ["--quick", "--env-id", "gymvec/NoSuchEnv-v0", "--backends", "gym-sync"]
    assert main([*argv, "--no-progress"]) == 0
    rows = _table_rows(capsys.readouterr().out)
    assert rows[0][:3] == ["gymvec/NoSuchEnv-v0-8", "gym-sync", "-"]
    assert "NoSuchEnv" in " ".join(rows[0][6:])
    assert main([*argv, "--no-progress", "--strict"]) == 1


def test_cli_layout_options_reach_the_parallel_runners(capsys):
    argv = ["--quick", "--strict", "--no-progress", "--num-envs", "4", "--envs-per-worker", "2"]
    assert main([*argv, "--backends", "gymvec-parallel,gymvec-td"]) == 0
    rows = _table_rows(capsys.readouterr().out)
    assert [row[1] for row in rows] == ["gymvec-parallel", "gymvec-td"]
    assert all(float(row[2]) > 0 for row in rows)


def test_cli_rejects_an_unknown_runner(capsys):
    with pytest.raises(SystemExit) as excinfo:
        main(["--backends", "gym-sync,no-such-runner"])
    assert excinfo.value.code == 2
    assert "no-such-runner" in capsys.readouterr().err


def test_cli_quick_every_gymvec_runner_strict(tmp_path):
    """The README's main job in its short form: gymvec's runners beside gymnasium's, --strict
    (any runner error fails the run), on the image case too."""
    json_path = tmp_path / "bench.json"
    backends = "gym-sync,gymvec-serial,gymvec-parallel,gymvec-td,bare-loop,bare-parallel,bare-free"
    cmd = [sys.executable, "-m", "gymvec.bench", "--quick", "--strict", "--no-progress"]
    cmd += ["--case", "cartpole-8", "--case", "image-32", "--backends", backends]
    cmd += ["--json", str(json_path)]
    out = subprocess.run(
        cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=240, env=_env()
    )
    assert out.returncode == 0, out.stdout + out.stderr
    rows = _table_rows(out.stdout)
    assert [row[1] for row in rows] == backends.split(",") * 2
    for row in rows:
        assert len(row) == 7, row
        assert all(float(cell.rstrip("%")) >= 0 for cell in row[2:])
    assert [row[6] for row in rows if row[1] == "bare-free"] == ["1.00", "1.00"]
    document = json.loads(json_path.read_text())
    for case in document["cases"]:
        assert all(result["error"] is None for result in case["results"])
        results = {result["runner"]: result for result in case["results"]}
        ceiling, mine = results["bare-free"]["samples"], results["gymvec-parallel"]["samples"]
        assert results["gymvec-parallel"]["ratio_ceiling"] == pytest.approx(
            median(mine) / median(ceiling)
        )


def test_cli_quick_sb3_case_strict():
    """SB3's VecEnv API: SB3's DummyVecEnv and SubprocVecEnv beside gymvec's SB3VecEnv."""
    cmd = [sys.executable, "-m", "gymvec.bench", "--quick", "--strict", "--no-progress"]
    cmd += ["--case", "sb3-32"]
    out = subprocess.run(
        cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=240, env=_env()
    )
    assert out.returncode == 0, out.stdout + out.stderr
    rows = _table_rows(out.stdout)
    assert [row[1] for row in rows] == list(SB3_BACKENDS)
    for row in rows:
        assert len(row) == 7, row
        assert all(float(row[i]) > 0 for i in (2, 4, 5)) and row[6] == "-"


def test_ray_runners_without_ray_say_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # whether or not Ray is installed
    for name in ("gymvec-ray", "hand-ray", "hand-ray-dag", "naive-ray"):
        with pytest.raises(ImportError, match="pip install ray"):
            RUNNERS[name]("CartPole-v1", 4, RunnerOptions(num_workers=2))


def test_optional_runners_without_their_package_say_how_to_install(monkeypatch):
    # None in sys.modules makes the import fail, whether or not the package is installed.
    monkeypatch.setitem(sys.modules, "torchrl", None)
    monkeypatch.setitem(sys.modules, "torchrl.envs", None)
    with pytest.raises(ImportError, match="pip install torchrl"):
        RUNNERS["torchrl-parallel"]("CartPole-v1", 4, RunnerOptions(num_workers=2))
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *args: None)
    gymvec_runners = ("gymvec-serial", "gymvec-parallel", "gymvec-td")
    bare = ("bare-loop", "bare-parallel", "bare-free")
    assert default_backends() == ("gym-sync", "gym-async", *gymvec_runners, *bare)
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *args: name)  # all installed
    assert default_backends() == (
        "gym-sync",
        "gym-async",
        "sb3-subproc",
        "torchrl-parallel",
        *gymvec_runners,
        *bare,
    )


def test_cli_soak_short_run_samples_and_stays_flat(tmp_path, capsys, no_leaks):
    """``--soak`` in its short form: every tenth of the run sampled, a summary per
    configuration, JSON; --strict passes only if each stayed flat and close() left nothing."""
    json_path = tmp_path / "soak.json"
    configs = ["face-disabled", "face-first-ready", "td-parallel-local", "sb3"]
    argv = ["--soak", "--soak-steps", "400", "--num-envs", "4", "--no-progress", "--strict"]
    argv += [arg for name in configs for arg in ("--soak-config", name)]
    assert main([*argv, "--json", str(json_path)]) == 0
    out = capsys.readouterr().out
    assert "change from the first sample" in out
    document = json.loads(json_path.read_text())
    assert document["soak"]["steps"] == 400 and document["soak"]["num_envs"] == 4
    results = document["results"]
    assert [r["config"] for r in results] == configs
    for result in results:
        assert result["error"] is None and result["flat"] is True
        steps = [s["env_steps"] for s in result["samples"]]
        assert steps == list(range(40, 401, 40))  # a sample every tenth of the run
        first = result["samples"][0]
        assert first["rss_mb"] > 0 and first["fds"] > 0 and first["threads"] >= 1
        assert first["children"] >= 1  # the worker processes are counted
        assert result["left_after_close"] == {"children": 0, "shm": 0, "fds": 0}
        assert result["steps_per_s"] > 0
    # with spawn (the soak asks for it) the workers' semaphores are named in /dev/shm
    assert results[2]["samples"][0]["shm"] >= 2


def test_soak_verdict_fails_on_growth_and_on_leftovers():
    from gymvec.bench.soak import RSS_SLACK_MB, Sample, SoakResult

    def result(last: dict, left: dict | None = None) -> SoakResult:
        first = Sample(10, 100.0, 50.0, 12, 3, 2, 4)
        fields = {**first.__dict__, "env_steps": 20, **last}
        return SoakResult("x", [first, Sample(**fields)], 1.0, left or {"children": 0})

    assert result({}).flat()
    assert result({"rss_mb": 100.0 + RSS_SLACK_MB / 2}).flat()  # allocator noise
    assert not result({"rss_mb": 100.0 + 2 * RSS_SLACK_MB}).flat()
    assert not result({"children_rss_mb": 50.0 + 2 * RSS_SLACK_MB}).flat()
    for field in ("fds", "threads", "children", "shm"):
        assert not result({field: 99}).flat(), field
    assert not result({}, {"children": 1}).flat()
    assert result({}).growth()["fds"] == 0


# ---- the first screen: legend, verdict, headroom warning, ETA, --plot, --sweep, startup ------
def _case_result(samples: dict[str, list[float]], name: str = "cartpole-32", case=None):
    """A case's results with these steps/s per round, ratios computed as the bench does."""
    from gymvec.bench.cases import Case
    from gymvec.bench.harness import CaseResult, RunnerResult, add_ratios

    case = case or Case(name, "CartPole-v1", 32, num_workers=2)
    results = [RunnerResult(runner, list(rates)) for runner, rates in samples.items()]
    case_result = CaseResult(case, results)
    add_ratios(case_result)
    return case_result


FULL_RUN = Settings()  # a full run's settings: its verdicts judge
QUICK_RUN = Settings(steps=20, repeats=2, warmup=2)


def _verdict(case_result, settings=FULL_RUN) -> list[str]:
    """The verdict lines, each unwrapped."""
    from gymvec.bench.reporting.verdict import verdict_lines

    return [" ".join(line.split()) for line in verdict_lines([case_result], settings)]


def test_verdict_names_case_runner_and_reference_with_the_tables_ratios():
    case_result = _case_result(
        {
            "gym-sync": [100.0, 200.0, 100.0],
            "gymvec-parallel": [170.0, 340.0, 170.0],
            "bare-parallel": [182.0, 366.0, 182.0],
            "bare-free": [250.0, 500.0, 250.0],
        }
    )
    assert _verdict(case_result) == [
        "cartpole-32, ParallelVectorEnv (gymvec-parallel, 170 steps/s, spread 100%): 1.70x "
        "SyncVectorEnv (gym-sync); 0.93x the framework-free lock-step loop (bare-parallel); "
        "0.68x the ceiling (bare-free)"
    ]


def test_ratios_are_those_of_the_printed_medians_whatever_the_rounds():
    """Issue 55's contradiction: a verdict of 1.09 beside a table reading 0.48. Rounds whose
    load swings pair up into ratios far from the ratio of the medians; table and verdict now
    both print the latter."""
    from gymvec.bench.reporting.report import format_table

    case_result = _case_result(
        {
            "gym-sync": [50598.0, 20000.0, 90000.0, 60000.0, 30000.0],
            "gymvec-td": [24089.0, 22000.0, 99000.0, 65000.0, 10000.0],
            "bare-parallel": [50598.0, 20000.0, 90000.0, 60000.0, 30000.0],
        }
    )
    td = case_result.results[1]
    assert td.steps_per_s == 24089.0 and td.ratio_sync == pytest.approx(24089 / 50598)
    row = next(line.split() for line in format_table([case_result]).splitlines() if "td" in line)
    assert row[2:5] == ["24089", f"{(99000 - 10000) / 24089:.0%}", "0.48"]
    (line,) = _verdict(case_result)
    assert "0.48x SyncVectorEnv (gym-sync); 0.48x the framework-free lock-step loop" in line


@pytest.mark.parametrize(
    "mine, reference, judgement",
    [
        # beaten, but the runs overlap: a noisy run
        (
            [130.0, 135.0, 80.0],
            [100.0, 140.0, 95.0],
            "1.30x the framework-free lock-step loop (bare-parallel): reference beaten within "
            "noise, a noisy run (the runs overlap, spreads 42% and 45%)",
        ),
        # every run above every run of the reference: the reference is wrong here
        (
            [135.0, 130.0, 150.0],
            [100.0, 90.0, 95.0],
            "1.42x the framework-free lock-step loop (bare-parallel): REFERENCE BEATEN beyond "
            "noise (every run above every run of bare-parallel): the reference is wrong here",
        ),
        # one run each: it cannot tell
        (
            [135.0],
            [100.0],
            "1.35x the framework-free lock-step loop (bare-parallel): above its reference in "
            "one run: the noise is unknown, rerun with --repeats 3",
        ),
        # below the reference: nothing to explain
        ([90.0, 95.0], [100.0, 100.0], "0.93x the framework-free lock-step loop (bare-parallel)"),
    ],
)
def test_a_beaten_reference_is_called_noisy_or_wrong(mine, reference, judgement):
    case_result = _case_result(
        {"gym-sync": [100.0] * len(mine), "gymvec-parallel": mine, "bare-parallel": reference}
    )
    (line,) = _verdict(case_result)
    assert line.endswith(judgement), line


@pytest.mark.parametrize(
    "supersuit, word",
    [
        ([10.0, 11.0, 12.0], "1.82x SuperSuit's concat_vec_envs_v1 (pz-supersuit): faster"),
        ([30.0, 31.0, 32.0], "0.65x SuperSuit's concat_vec_envs_v1 (pz-supersuit): slower"),
        ([18.0, 25.0, 21.0], "0.95x SuperSuit's concat_vec_envs_v1 (pz-supersuit): within noise"),
    ],
)
def test_pettingzoo_verdicts_name_their_case_and_sync(supersuit, word):
    from gymvec.bench.cases import CASES

    lines = []
    for name in ("pz-simple-spread-8", "pz-pistonball-4"):
        samples = {
            "pz-gym-sync": [10.0, 10.0, 10.0],
            "pz-supersuit": supersuit,
            "pz-plain": [25.0, 26.0, 24.0],
            "pz-gymvec": [20.0, 19.0, 21.0],
            "pz-block": [12.0, 12.0, 12.0],
            "pz-loop": [13.0, 13.0, 13.0],
        }
        case_result = _case_result(samples, case=CASES[name])
        assert [r.ratio_sync for r in case_result.results] == pytest.approx(
            [1.0, median(supersuit) / 10, 2.5, 2.0, 1.2, 1.3]
        )
        lines += _verdict(case_result)
    assert [line.split(" (")[0] for line in lines] == [
        "pz-simple-spread-8, gymvec.pettingzoo.make_vec",
        "pz-simple-spread-8, PettingZooBlock",
        "pz-pistonball-4, gymvec.pettingzoo.make_vec",
        "pz-pistonball-4, PettingZooBlock",
    ]
    for line in lines[::2]:
        assert "2.00x SyncVectorEnv (pz-gym-sync); 0.80x the plain two-process loop (pz-plain)" in (
            line
        )
        assert line.split("; ")[-1].startswith(word), line
    assert lines[1].endswith(
        "1.20x SyncVectorEnv (pz-gym-sync); 0.92x the plain one-process loop (pz-loop)"
    )


def test_atari_verdict_against_sync_ale_and_the_python_driven_emulator():
    from gymvec.bench.cases import CASES

    samples = {
        "atari-gym-sync": [1000.0, 1100.0, 900.0],
        "atari-gym-async": [1500.0, 1400.0, 1600.0],
        "atari-gymvec": [2500.0, 2400.0, 2600.0],
        "atari-ale-vector": [3100.0, 3000.0, 3200.0],
        "atari-emulator": [3000.0, 2900.0, 3100.0],
        "atari-emulator-resize": [2600.0, 2500.0, 2700.0],
    }
    case_result = _case_result(samples, case=CASES["atari-8"])
    assert [r.ratio_sync for r in case_result.results] == pytest.approx(
        [1.0, 1.5, 2.5, 3.1, 3.0, 2.6]
    )  # the x sync column, filled
    assert case_result.results[2].ratio_best_gym == pytest.approx(2.5 / 1.5)
    ours, ales = _verdict(case_result)
    assert ours == (
        "atari-8, gymvec.atari (atari-gymvec, 2,500 steps/s, spread 8%): 2.50x SyncVectorEnv "
        "(atari-gym-sync); 0.81x ALE's AtariVectorEnv (atari-ale-vector): slower; 0.83x the "
        "emulator driven from Python (atari-emulator); 0.96x the emulator and the resize driven "
        "from Python (atari-emulator-resize)"
    )
    assert ales.startswith("atari-8, ALE's AtariVectorEnv (atari-ale-vector, 3,100 steps/s")
    assert "3.10x SyncVectorEnv (atari-gym-sync); 1.03x the emulator driven from Python" in ales
    assert "bound Python-driven vectorizers only: ALE's C++ threads make no Python call" in ales
    assert "within noise" in ales and "faster" in ales  # 1.03 overlaps, 1.19 does not


def test_quick_verdicts_say_the_figures_are_noise():
    from gymvec.bench.reporting.verdict import verdict_header

    case_result = _case_result(
        {
            "gym-sync": [100.0, 100.0],
            "gymvec-parallel": [300.0, 310.0],
            "bare-parallel": [100.0, 100.0],
            "bare-free": [90.0, 90.0],
        }
    )
    assert "REFERENCE BEATEN" in " ".join(_verdict(case_result))
    assert "no parallel headroom" in " ".join(_verdict(case_result))
    header = " ".join(verdict_header(QUICK_RUN).split())
    assert header.startswith(
        "Verdict (quick run, 20 vector steps a timed run: the figures are noise"
    )
    (line,) = _verdict(case_result, QUICK_RUN)
    for word in ("faster", "slower", "beaten", "BEATEN", "noise", "WARNING"):
        assert word not in line, line
    assert line.endswith(
        "3.05x the framework-free lock-step loop (bare-parallel); 3.39x the ceiling (bare-free)"
    )


@pytest.mark.parametrize("free, warned", [(1.8, False), (1.1, True), (0.63, True)])
def test_no_headroom_warning_when_bare_free_is_not_clearly_above_sync(free, warned):
    from gymvec.bench.reporting.verdict import no_headroom

    case_result = _case_result(
        {"gym-sync": [100.0] * 3, "gymvec-parallel": [80.0] * 3, "bare-free": [100 * free] * 3}
    )
    text = "\n".join(_verdict(case_result))
    assert ("no parallel headroom" in text) is warned
    assert ("Parallel runners cannot beat SyncVectorEnv here" in text) is warned
    assert (no_headroom(case_result) is not None) is warned
    if warned:
        assert f"reaches only {free:.2f}x SyncVectorEnv" in text


def test_cli_first_screen_explains_the_columns_and_ends_with_a_verdict(capsys):
    argv = ["--quick", "--no-progress", "--strict", "--num-envs", "4", "--steps", "5"]
    assert main([*argv, "--backends", "gym-sync,gymvec-serial,bare-loop"]) == 0
    out = capsys.readouterr().out
    for term in ("x sync", "spread", "ratio of the two medians", "x ceiling", "bare-loop"):
        assert term in out.split("case ")[0], term  # explained above the table
    header, verdict = out.split("Verdict (quick run, 5 vector steps a timed run: ")[1].split(
        "compare):\n"
    )
    assert "the figures are noise" in " ".join(header.split())
    assert verdict.startswith("CartPole-v1-4, SerialVectorEnv (gymvec-serial, ")
    verdict = " ".join(verdict.split())
    assert "x SyncVectorEnv (gym-sync); " in verdict
    assert "x the framework-free loop (bare-loop)" in verdict
    assert "faster" not in verdict and "slower" not in verdict and "beaten" not in verdict


def test_progress_eta_from_the_pace_so_far():
    from gymvec.bench.reporting.progress import Progress

    progress = Progress(total=6, enabled=False)
    assert progress.eta() == "ETA ?"
    progress.done = 2
    progress.started = time.monotonic() - 10.0
    assert progress.eta() == "ETA 0:20"


@pytest.mark.parametrize("suffix, magic", [(".png", b"\x89PNG"), (".svg", b"<svg")])
def test_plot_writes_the_chart(tmp_path, suffix, magic):
    pytest.importorskip("matplotlib")
    from gymvec.bench.reporting.plot import plot_cases, plot_sweep

    case_result = _case_result({"gym-sync": [100.0] * 2, "gymvec-parallel": [150.0] * 2})
    path = tmp_path / f"bench{suffix}"
    plot_cases([case_result], str(path))
    assert magic in path.read_bytes()[:400]
    sweep = [_case_result({"gym-sync": [100.0 * n]}, f"n{n}") for n in (1, 2)]
    for result in sweep:
        result.results[0].memory_mb = 5.0
    plot_sweep(sweep, str(tmp_path / f"sweep{suffix}"))
    assert magic in (tmp_path / f"sweep{suffix}").read_bytes()[:400]


def test_plot_without_matplotlib_or_with_a_bad_suffix_stops_before_the_run(monkeypatch, capsys):
    import importlib.util

    find_spec = importlib.util.find_spec

    def without_matplotlib(name, *args):
        return None if name == "matplotlib" else find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", without_matplotlib)
    with pytest.raises(SystemExit) as exit_info:
        main(["--quick", "--plot", "bench.png"])
    assert exit_info.value.code == 2
    assert 'pip install -e ".[plot]"' in capsys.readouterr().err
    monkeypatch.undo()
    with pytest.raises(SystemExit):
        main(["--quick", "--plot", "bench.pdf"])
    assert "expected a file name ending in .png or .svg" in capsys.readouterr().err


def test_cli_sweep_over_num_envs_reports_speed_and_memory(tmp_path, capsys):
    argv = ["--quick", "--no-progress", "--strict", "--steps", "5", "--sweep", "num_envs=2,4"]
    assert main([*argv, "--backends", "gym-sync,gymvec-serial"]) == 0
    out = capsys.readouterr().out
    assert [row[0] for row in _table_rows(out)] == ["CartPole-v1-2"] * 2 + ["CartPole-v1-4"] * 2
    sweep = out.split("num_envs")[1].splitlines()[2:6]
    assert [line.split()[:2] for line in sweep] == [
        ["2", "gym-sync"],
        ["2", "gymvec-serial"],
        ["4", "gym-sync"],
        ["4", "gymvec-serial"],
    ]
    assert all(line.split()[4] != "-" for line in sweep)  # memory measured
    with pytest.raises(SystemExit):
        main(["--sweep", "workers=2,4"])


def test_startup_case_times_a_fresh_interpreter_and_judges_the_target():
    from gymvec.bench.startup import StartupResult, format_startup, run_startup, target_verdict

    (result,) = run_startup(names=("gym-async",), repeats=1)
    assert result.error is None
    assert 0 < result.imported_s <= result.built_s <= result.first_step_s <= result.closed_s < 60
    assert "gym-async" in format_startup([result])
    fake = [
        StartupResult("gymvec-parallel", 0.2, 0.3, 0.3, 0.4),
        StartupResult("torch-import", 2.0, 2.0, 2.0, 2.0),
        StartupResult("gymvec-td", 2.1, 2.2, 2.5, 2.6),
    ]
    assert target_verdict(fake).startswith("ParallelEnv's first step at 2.50 s: within 1.5 x")
    fake[2] = StartupResult("gymvec-td", 2.1, 2.2, 7.0, 7.2)
    assert "NOT within" in target_verdict(fake)
