"""Faults that heal, where the sub-envs live (API section 13): a sub-env (a single env, or a
block) that raises in a whole-batch step or reset is rebuilt from its factory in its group's
process, and the rest of the command goes on, so no other row is disturbed.

A group heals once the engine asks it to (the ``heal_faults`` request, sent when an executor
starts under ``on_fault="restart"``): its runner's ``on_fault`` is then set. Until then it is
None and a sub-env's exception propagates as it always did ("raise"). A fault costs the steps
nothing before it happens: the runner's one pass keeps the results made so far (``list.extend``
over the steps keeps the items appended before one raised, which CPython does), and only the
pass that raised goes on here.

What the faulted sub-env's row reads: its last observation, reward 0, terminated False,
truncated True (a block writes nothing: the engine restores its rows' last observation and
sets their flags); its command's ``Extras.fault`` says what happened (``(kind, message,
traceback)``), and the engine books the restart and reseeds the row's next reset
(``engine/healing.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import call
from typing import Any

from gymvec.errors import error_detail
from gymvec.subenvs.kinds import check_sub_env, is_block
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
    """Heals the sub-envs of one group (a ``SubEnvGroup``), single envs (gymnasium envs and
    EnvBase sub-envs alike) and blocks: rebuilds the one that raised from its factory, hands
    it to its runner (a single env's new driver to its ``BatchStep`` or ``CommandRunner``, a
    block to its ``BlockRunner``), and keeps the faults of the command for its extras (a
    block's: on each of its rows)."""

    def __init__(self, group: Any, env_fns: Sequence[Callable[[], Any]]):
        self.group = group
        self.env_fns = list(env_fns)
        self.faulted: dict[int, tuple] = {}  # buffer row -> Extras.fault, of this command

    def for_singles(self, runner: Any, first: int) -> OnFault:
        """The ``on_fault`` of ``runner``, a runner of single envs whose row ``k`` is the
        group's sub-env ``first + k``."""

        def on_fault(k: int, exc: Exception) -> None:
            from gymvec.subenvs.drivers import make_driver

            group = self.group
            j = first + k
            row = group.firsts[j]
            self.faulted[row] = fault_record(exc)
            env = self._rebuild(j, row)
            driver = make_driver(env, row, group.buffers)
            group.drivers[j] = driver
            runner.replace(k, driver)

        return on_fault

    def on_block_fault(self, runner: Any, exc: Exception) -> None:
        """The block ``runner`` (a ``BlockRunner``) runs raised ``exc``: rebuild it where it
        lives; all of its rows are faulted."""
        group = self.group
        j = group.env_of_row[runner.start - group.start]
        fault = fault_record(exc)
        for row in range(runner.start, runner.start + runner.n):
            self.faulted[row] = fault
        block = self._rebuild(j, runner.start)
        if not is_block(block) or int(block.num_envs) != runner.n:
            raise group.error(
                ValueError(f"the rebuilt block is not a vector env of {runner.n} rows"),
                runner.start,
                what="create_env_fn (rebuilding it)",
            )
        runner.replace_block(block)

    def _rebuild(self, j: int, row: int) -> Any:
        """Sub-env ``j`` of the group (first row ``row``), built again from its factory in
        place of the one that faulted (closed, as far as it closes)."""
        group = self.group
        try:
            env = check_sub_env(self.env_fns[j]())
        except Exception as failed:  # its factory fails too: nothing is left to heal it
            raise group.error(failed, row, what="create_env_fn (rebuilding it)") from None
        try:
            group.envs[j].close()
        except Exception:  # (a faulted env's close may fail too: it is dropped all the same)
            pass
        group.envs[j] = env
        return env

    def take(self, extras: dict[int, Extras]) -> dict[int, Extras]:
        """Add the command's faults to ``extras`` (by row)."""
        for row, fault in self.faulted.items():
            extras.setdefault(row, Extras()).fault = fault
        self.faulted = {}
        return extras
