"""AgentRowsBlock (first named PettingZooBlock): PettingZoo parallel envs' agents as the rows of
one gymnasium VectorEnv, against the same envs stepped one by one with the same seeds and
actions; and what it shares with EnvRowsBlock (TableBlock)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("pettingzoo")

from _pz_envs import (  # noqa: E402
    LateEnv,
    LeavingEnv,
    MixedSpacesEnv,
    Reference,
    knights_archers_zombies,
    late_env,
    leaving_env,
    simple_spread,
)
from gymnasium.spaces.utils import flatten  # noqa: E402
from gymnasium.vector.utils import iterate  # noqa: E402

from gymvec import ClosedEnvError  # noqa: E402
from gymvec.pettingzoo import (  # noqa: E402
    AgentRowsBlock,
    EnvRowsBlock,
    PettingZooBlock,
    PettingZooEnvBlock,
)
from gymvec.pettingzoo.table_block import TableBlock  # noqa: E402

ENV_FNS = {
    "leaving": (leaving_env, 24),
    "late": (late_env, 14),
    "simple_spread": (simple_spread, 14),
    "knights_archers_zombies": (knights_archers_zombies, 70),
}


def row_values(block, obs) -> list[np.ndarray]:
    space = block.single_observation_space
    return [flatten(space, value) for value in iterate(block.observation_space, obs)]


def assert_rows(block, result, ref_rows) -> None:
    obs, rewards, terms, truncs, infos = result
    values = row_values(block, obs)
    space = block.single_observation_space
    for ref in ref_rows:
        i = ref["row"]
        expected = np.zeros_like(values[i]) if ref["obs"] is None else flatten(space, ref["obs"])
        np.testing.assert_array_equal(values[i], expected, err_msg=f"row {i}")
        assert rewards[i] == ref["reward"], i
        assert terms[i] == ref["terminated"], i
        assert truncs[i] == ref["truncated"], i
        assert infos["alive"][i] == ref["alive"], i
    assert rewards.dtype == np.float64 and terms.dtype == truncs.dtype == np.bool_


def random_actions(block, rng) -> np.ndarray:
    block.action_space.seed(int(rng.integers(1 << 30)))
    return block.action_space.sample()


@pytest.mark.parametrize("name", list(ENV_FNS))
def test_next_step_rows_equal_envs_stepped_alone(name):
    env_fn, steps = ENV_FNS[name]
    block = PettingZooBlock(env_fn, 2)
    ref = Reference(env_fn, 2)
    rng = np.random.default_rng(0)
    assert block.rows[: len(ref.agents) + 1] == [(0, a) for a in ref.agents] + [(1, ref.agents[0])]
    obs, infos = block.reset(seed=7)
    assert_rows(
        block,
        (obs, np.zeros(block.num_envs), *[np.zeros(block.num_envs, bool)] * 2, infos),
        ref.reset(seed=7),
    )
    ended = 0
    for _ in range(steps):
        actions = random_actions(block, rng)
        result = block.step(actions)
        ended += sum(ref.ended)
        assert_rows(block, result, ref.step(actions))
    assert ended > 0, "no env ended: the autoreset was not exercised"
    block.close()
    ref.close()


def test_same_step_gives_final_obs_and_resets_at_once():
    block = PettingZooBlock(leaving_env, 3, autoreset_mode="same_step")
    ref = Reference(leaving_env, 3)
    rng = np.random.default_rng(1)
    block.reset(seed=3)
    ref.reset(seed=3)
    A, resets, leaving = block.num_agents, 0, 0
    for _ in range(12):
        actions = random_actions(block, rng)
        obs, rewards, terms, truncs, infos = block.step(actions)
        ref_rows = ref.step(actions)
        for e, env in enumerate(ref.envs):
            rows = ref_rows[e * A : (e + 1) * A]
            for r in rows:  # the step's rewards and flags stay in the same-step results
                assert rewards[r["row"]] == r["reward"]
                assert (terms[r["row"]], truncs[r["row"]]) == (r["terminated"], r["truncated"])
            for r in rows:  # a row that finished: its last observation in final_obs
                finished = r["terminated"] or r["truncated"]
                assert infos.get("_final_obs", np.zeros(9, bool))[r["row"]] == finished
                if finished:
                    np.testing.assert_array_equal(infos["final_obs"][r["row"]], r["obs"])
                    assert infos["final_info"]["t"][r["row"]] == env.t
                    leaving += not ref.ended[e]
                    r["obs"] = None  # and its observation what it holds next: zero, or reset
            if not ref.ended[e]:
                assert_rows(block, (obs, rewards, terms, truncs, infos), rows)
                continue
            resets += 1
            reset_obs, _ = env.reset()  # what the block's own reset gave
            ref.ended[e] = False
            for k, agent in enumerate(ref.agents):
                np.testing.assert_array_equal(obs[e * A + k], reset_obs[agent])
                assert infos["alive"][e * A + k]
    assert resets > 0 and leaving > 0
    block.close()


def test_disabled_needs_whole_env_reset_masks():
    block = PettingZooBlock(leaving_env, 2, autoreset_mode="disabled")
    A = block.num_agents
    obs, _ = block.reset(seed=0)
    actions = np.zeros(block.num_envs, np.int64)
    for _ in range(10):
        obs, *_, infos = block.step(actions)
        if block.table.ended.any():
            break
    e = int(np.flatnonzero(block.table.ended)[0])
    with pytest.raises(ValueError, match=f"env {e} .*has no agent left"):
        block.step(actions)
    split = np.zeros(block.num_envs, bool)
    split[e * A] = True
    with pytest.raises(ValueError, match="expected whole envs"):
        block.reset(options={"reset_mask": split})
    mask = np.zeros(block.num_envs, bool)
    mask[e * A : (e + 1) * A] = True
    options = {"reset_mask": mask}
    before = obs.copy()
    obs, infos = block.reset(seed=5, options=options)
    assert "reset_mask" in options  # the caller's dict is left alone
    other = slice((1 - e) * A, (2 - e) * A)
    np.testing.assert_array_equal(obs[other], before[other])
    assert infos["alive"][e * A : (e + 1) * A].all()
    assert infos["_t"].tolist() == mask.tolist()  # reset infos of the reset rows only
    alone = LeavingEnv()
    expected, _ = alone.reset(seed=5 + e)  # seed s gives env e the seed s + e
    np.testing.assert_array_equal(obs[e * A], expected["a_0"])
    block.step(actions)
    block.close()


def test_seeds_map_to_envs_wherever_the_block_starts():
    A = 2
    lone = PettingZooBlock(late_env, 3)
    obs, _ = lone.reset(seed=10)
    assert obs["position"][::A, 1].tolist() == [10.0, 11.0, 12.0]
    obs, _ = lone.reset(seed=np.int64(10))
    assert obs["position"][::A, 1].tolist() == [10.0, 11.0, 12.0]
    # the engine gives a block the seed of its first row: row first_env * A of seed s
    s, first_env = 10, 3
    block = PettingZooBlock(late_env, 2, first_env=first_env)
    obs, _ = block.reset(seed=s + first_env * A)
    assert obs["position"][::A, 1].tolist() == [s + 3.0, s + 4.0]
    assert block.rows == [(3, "p_0"), (3, "p_1"), (4, "p_0"), (4, "p_1")]
    obs, _ = block.reset(seed=[20, 21, 30, 31])  # per-row seeds: each env its first row's
    assert obs["position"][::A, 1].tolist() == [20.0, 30.0]
    with pytest.raises(ValueError, match="list of 4 seeds"):
        block.reset(seed=[1, 2])


def test_infos_action_mask_per_row_and_dict_observations_keep_theirs():
    block = PettingZooBlock(leaving_env, 2)
    _, infos = block.reset(seed=0)
    assert infos["action_mask"].shape == (6, 3) and infos["_action_mask"].all()
    obs, _, _, _, infos = block.step(np.zeros(6, np.int64))
    np.testing.assert_array_equal(infos["_action_mask"], infos["alive"])
    np.testing.assert_array_equal(infos["_t"], infos["alive"])

    late = PettingZooBlock(late_env, 1)
    obs, infos = late.reset(seed=0)
    assert set(obs) == {"action_mask", "position"} and "action_mask" not in infos
    assert infos["alive"].tolist() == [True, False]  # p_1 has not appeared yet
    np.testing.assert_array_equal(obs["action_mask"][1], [0, 0])
    for _ in range(2):
        obs, _, _, _, infos = late.step(np.zeros(2, np.int64))
    assert infos["alive"].tolist() == [True, False]  # p_1 appeared but did not act
    assert obs["position"][1, 0] == 2.0  # its first observation
    obs, _, _, _, infos = late.step(np.zeros(2, np.int64))
    assert infos["alive"].tolist() == [True, True]


def test_actions_of_rows_not_alive_are_ignored():
    block = PettingZooBlock(leaving_env, 1)
    block.reset(seed=0)
    for _ in range(6):  # LeavingEnv raises if it is handed an action for an agent not live
        actions = np.where(block._alive, 1, 99)
        block.step(actions)


def test_bad_inputs():
    from mpe2 import simple_spread_v3

    with pytest.raises(TypeError, match="aec_to_parallel"):
        PettingZooBlock(simple_spread_v3.env)
    with pytest.raises(TypeError, match="expected a PettingZoo ParallelEnv, got int"):
        PettingZooBlock(lambda: 3)
    with pytest.raises(ValueError, match="hunter_0: .*prey_0: .*make_env"):
        PettingZooBlock(MixedSpacesEnv)
    with pytest.raises(ValueError, match="num_envs: expected an int >= 1, got 0"):
        PettingZooBlock(leaving_env, 0)
    block = PettingZooBlock(leaving_env, 2)
    block.reset(seed=0)
    with pytest.raises(ValueError, match=r"actions: expected an array of shape \(6,\)"):
        block.step(np.zeros(5, np.int64))
    with pytest.raises(ValueError, match=r"shape \(6,\) .*integer dtype, got float64"):
        block.step(np.zeros(6))
    with pytest.raises(ValueError, match=r"reset_mask'\]: expected a bool array of shape \(6,\)"):
        block.reset(options={"reset_mask": np.ones(2, bool)})
    assert block.get_attr("max_len") == (5,) * 6
    assert block.call("observation_space", "a_1")[5].shape == (3,)
    block.close()
    assert LateEnv().possible_agents == ["p_0", "p_1"]


def test_import_without_pettingzoo_names_the_extra():
    code = (
        "import sys; sys.modules['pettingzoo'] = None\n"
        "try:\n    import gymvec.pettingzoo\nexcept ImportError as e:\n    print(e)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "gymvec[pettingzoo]" in out.stdout


@pytest.mark.parametrize("mode", ["next_step", "same_step"])
def test_step_into_equals_step_and_writes_into_out(mode):
    # gymvec's block protocol: the observations land in the array it hands (shared memory)
    plain = PettingZooBlock(leaving_env, 3, autoreset_mode=mode)
    into = PettingZooBlock(leaving_env, 3, autoreset_mode=mode)
    try:
        np.testing.assert_array_equal(plain.reset(seed=2)[0], into.reset(seed=2)[0])
        rng, ended = np.random.default_rng(5), 0
        for t in range(14):
            actions = rng.integers(0, 3, plain.num_envs)
            out = np.full(into.observation_space.shape, 99, into.observation_space.dtype)
            want, got = plain.step(actions), into.step_into(actions, out)
            assert got[0] is out
            for k, (x, y) in enumerate(zip(want[:4], got[:4])):
                np.testing.assert_array_equal(x, y, err_msg=f"step {t}, item {k}")
            np.testing.assert_array_equal(want[4]["alive"], got[4]["alive"])
            ended += int(not want[4]["alive"].all())
        assert ended > 0  # agents left (and envs reset) on the way
    finally:
        plain.close()
        into.close()


@pytest.mark.parametrize("cls", [PettingZooBlock, PettingZooEnvBlock])
def test_calls_after_close_raise_closed_env_error(cls):
    block = cls(simple_spread, 2)
    block.reset(seed=0)
    actions = block.action_space.sample()
    block.close()
    message = rf"Trying to operate on `{cls.__name__}`, after a call to `close\(\)`"
    with pytest.raises(ClosedEnvError, match=message):
        block.step(actions)
    with pytest.raises(ClosedEnvError, match=message):
        block.reset(seed=0)
    assert repr(block) == f"{cls.__name__}(num_envs={block.num_envs})"


def test_the_first_names_are_the_blocks():
    assert PettingZooBlock is AgentRowsBlock and PettingZooEnvBlock is EnvRowsBlock


@pytest.mark.parametrize("cls, per_env", [(AgentRowsBlock, 2), (EnvRowsBlock, 1)])
def test_both_blocks_seed_reset_and_call_their_envs_alike(cls, per_env):
    # TableBlock's part, through each block's rows: an agent's each (LateEnv has 2) or an env's
    block = cls(late_env, 3)
    assert isinstance(block, TableBlock) and block.num_envs == 3 * per_env
    block.reset(seed=10)
    assert block.get_attr("seed0") == tuple(float(10 + e) for e in range(3) for _ in range(per_env))
    mask = np.zeros(3 * per_env, bool)
    mask[per_env : 2 * per_env] = True  # env 1's rows
    rows = block.num_envs
    block.reset(seed=list(range(30, 30 + rows)), options={"reset_mask": mask})
    # env 1 takes its first row's seed; the others keep theirs
    assert block.get_attr("seed0")[::per_env] == (10.0, 30.0 + per_env, 12.0)
    spaces = block.call("observation_space", "p_1")
    assert len(spaces) == rows and spaces[0]["position"].shape == (2,)
    assert block.call("possible_agents") == (["p_0", "p_1"],) * rows  # a value, not called
    with pytest.raises(ValueError, match=rf"list of {rows} seeds \(one per row\), got a list of 2"):
        block.reset(seed=[1, 2])
    if per_env > 1:
        half = np.zeros(rows, bool)
        half[per_env] = True
        with pytest.raises(ValueError, match=r"expected whole envs .* for env 1 \(rows 2..3\)"):
            block.reset(options={"reset_mask": half})
    block.close()
