"""Faults that heal, where the sub-envs live (API section 13): a sub-env that raises in a
whole-batch step or reset is rebuilt from its factory in its group's process, and the rest of
the command goes on, so no other row is disturbed.

A group heals once the engine asks it to (the ``heal_faults`` request, sent when an executor
starts under ``on_fault="restart"``): its runner's ``on_fault`` is then set. Until then it is
None and a sub-env's exception propagates as it always did ("raise"). A fault costs the steps
nothing before it happens: the runner's one pass keeps the results made so far (``list.extend``
over the steps keeps the items appended before one raised, which CPython does), and only the
pass that raised goes on here.

What the faulted sub-env's row reads: its last observation, reward 0, terminated False,
truncated True; its command's ``Extras.fault`` says what happened (``(kind, message,
traceback)``), and the engine books the restart and reseeds the row's next reset
(``engine/healing.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import call
from typing import Any

from gymvec.errors import error_detail
from gymvec.subenvs.kinds import check_sub_env
from gymvec.wire.commands import Extras

OnFault = Callable[[int, Exception], None]  # (group row of the sub-env that raised, what)


def continue_past_faults(
    on_fault: OnFault | None,
    results: list,
    calls: Sequence[Callable[..., Any]],
    actions: Any,
    exc: Exception,
    faulted_result: Callable[[int], tuple],
    rows: Sequence[int] | None = None,
) -> None:
    """A pass ``results.extend(map(call, calls, actions))`` raised ``exc`` at the call
    ``len(results)`` (of group row ``rows[len(results)]``, default the same): heal that
    sub-env (``on_fault``), put ``faulted_result(row)`` in its place and run the rest of the
    pass, as often as another raises. Without ``on_fault``, ``exc`` propagates ("raise")."""
    if on_fault is None:
        raise exc
    while True:
        k = len(results)
        row = k if rows is None else rows[k]
        on_fault(row, exc)
        results.append(faulted_result(row))
        try:
            results.extend(map(call, calls[k + 1 :], actions[k + 1 :]))
            return
        except Exception as again:
            exc = again


def fault_record(exc: Exception) -> tuple[str, str, str]:
    """``Extras.fault`` of a sub-env that raised ``exc``: ("error", its one-line summary, the
    traceback where it ran)."""
    detail = error_detail(exc)
    return ("error", detail.summary, detail.traceback)


class GroupHealer:
    """Heals the sub-envs of one group (a ``SubEnvGroup``) whose runner is a ``BatchStep`` or
    ``CommandRunner`` over single envs: rebuilds the one that raised from its factory, hands
    its new driver to the runner, and keeps the faults of the command for its extras."""

    def __init__(self, group: Any, env_fns: Sequence[Callable[[], Any]]):
        self.group = group
        self.env_fns = list(env_fns)
        self.faulted: dict[int, tuple] = {}  # buffer row -> Extras.fault, of this command

    def on_fault(self, k: int, exc: Exception) -> None:
        """Sub-env ``k`` (group row) raised ``exc``: rebuild it where it lives."""
        from gymvec.subenvs.drivers import make_driver

        group = self.group
        row = group.start + k
        self.faulted[row] = fault_record(exc)
        old = group.envs[k]
        try:
            env = check_sub_env(self.env_fns[k]())
        except Exception as failed:  # its factory fails too: nothing is left to heal it
            raise group.error(failed, row, what="create_env_fn (rebuilding it)") from None
        try:
            old.close()
        except Exception:  # (a faulted env's close may fail too: it is dropped all the same)
            pass
        group.envs[k] = env
        driver = make_driver(env, row, group.buffers)
        group.drivers[k] = driver
        group.runner.replace(k, driver)

    def take(self, extras: dict[int, Extras]) -> dict[int, Extras]:
        """Add the command's faults to ``extras`` (by row)."""
        for row, fault in self.faulted.items():
            extras.setdefault(row, Extras()).fault = fault
        self.faulted = {}
        return extras
