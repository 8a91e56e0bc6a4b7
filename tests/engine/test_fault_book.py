"""The on_fault vocabulary: the option's parsing, Restart's checks, the restart seed and the
book of restarts (its limit, window, record and WARNING)."""

from __future__ import annotations

import logging

import pytest

import gymvec
from gymvec.common.faults import Fault, FaultBook, Restart, parse_on_fault, restart_seed


def test_on_fault_parses_the_three_forms():
    assert parse_on_fault("raise") is None
    assert parse_on_fault("restart") == Restart(limit=10, window=None)
    policy = gymvec.Restart(limit=3, window=5.0)
    assert parse_on_fault(policy) is policy


@pytest.mark.parametrize("bad", ["restarts", "RAISE", None, 3, True])
def test_a_bad_on_fault_names_the_choices(bad):
    with pytest.raises(ValueError, match=r"on_fault: expected one of \('raise', 'restart'\)"):
        parse_on_fault(bad)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"limit": -1}, "Restart limit: expected an int >= 0"),
        ({"limit": 1.5}, "Restart limit"),
        ({"limit": True}, "Restart limit"),
        ({"window": 0}, "Restart window: expected seconds > 0"),
        ({"window": -2.0}, "Restart window"),
        ({"window": "1"}, "Restart window"),
    ],
)
def test_a_bad_restart_policy_is_refused(kwargs, words):
    with pytest.raises(ValueError, match=words):
        Restart(**kwargs)


def test_restart_seeds_depend_on_the_last_seed_and_the_count_only():
    seeds = [restart_seed(7, k) for k in range(1, 50)]
    assert len(set(seeds)) == len(seeds)
    assert seeds == [restart_seed(7, k) for k in range(1, 50)]
    assert all(0 <= seed < 2**32 for seed in seeds)
    assert restart_seed(8, 1) != restart_seed(7, 1)
    assert restart_seed(None, 3) is None


def _fault(sub_env: int) -> Fault:
    return Fault(sub_env, (sub_env,), 0, "error", "ValueError: boom")


def test_the_book_counts_restarts_keeps_the_last_faults_and_warns(caplog):
    book = FaultBook(Restart(limit=200), 3)
    with caplog.at_level(logging.WARNING, logger="gymvec"):
        for i in range(120):
            assert book.allows(i % 2)
            book.record(_fault(i % 2))
    assert book.restarts.tolist() == [60, 60, 0]
    assert len(book.faults) == 100 and book.faults[0] is not book.faults[-1]
    warnings = [r for r in caplog.records if r.name == "gymvec"]
    assert len(warnings) == 120 and "sub-env 1" in warnings[-1].getMessage()


def test_the_limit_over_the_life_and_within_a_window():
    life = FaultBook(Restart(limit=2), 1)
    for _ in range(2):
        assert life.allows(0, now=0.0)
        life.record(_fault(0), now=0.0)
    assert not life.allows(0, now=1e9)
    assert "after 2 restart(s)" in life.past_limit(_fault(0))

    windowed = FaultBook(Restart(limit=2, window=10.0), 1)
    windowed.record(_fault(0), now=0.0)
    windowed.record(_fault(0), now=5.0)
    assert not windowed.allows(0, now=9.0)
    assert windowed.allows(0, now=10.5)  # the first restart left the window
    assert not FaultBook(Restart(limit=0), 1).allows(0)
