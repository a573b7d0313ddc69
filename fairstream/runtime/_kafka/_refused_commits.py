"""What a refused commit does to a member: it keeps its member id, and its error is read.

aiokafka 0.14 answers a commit refused with ``ILLEGAL_GENERATION`` or
``UNKNOWN_MEMBER_ID`` by resetting the generation *and the member id*
(``GroupCoordinator._do_commit_offsets``), so the member rejoins as a new member.
A commit races every rebalance (it is sent until the member learns of the
rebalance), and noida refuses such a commit with ``ILLEGAL_GENERATION``. The old
member id stays in noida's group for ever (it never evicts), and noida may elect it
leader of the next generation: the live members' SyncGroup then waits for a leader
that never comes, the round times out and starts again with the same leader, and no
partition is assigned for as long as it runs (issue #38: two dynamic apps beside an
aiokafka and a librdkafka consumer that closed at once, docs/testing.md's quirks table).
Kafka drops a member that does not rejoin within the rebalance timeout, so it
recovers; keeping the member id is what avoids the orphan on any broker.

:func:`keep_member_on_refused_commit` makes a refusal met while committing keep the
member id: an eager member asks to rejoin (it revokes at the join anyway), a
cooperative one does nothing (its heartbeat tells it whether the group rebalances,
``_cooperative_hooks``'s docstring says why it must not ask). A member id the broker truly
forgot is answered ``UNKNOWN_MEMBER_ID`` at the join, and aiokafka resets it then.

aiokafka sends the commit under ``asyncio.shield``: when its caller gave up
(``commit_timeout``, often after a handler blocked the event loop), the refusal
ended a task nobody awaits, and asyncio printed "Task exception was never
retrieved" with an ``UnknownMemberIdError`` traceback. The caller logged its
timeout (``commit_failed``); the task's outcome is read here, and an error that
came after the caller gave up is one ``commit_answered_late`` event.

It is private API, so it is guarded: a coordinator without these methods is left as
it is (a ``refused_commit_unpatched`` event); ``tests/runtime/kafka/test_refused_commits.py``
fails loudly when aiokafka changes.
"""

from __future__ import annotations

import asyncio
import inspect
import weakref
from contextvars import ContextVar
from dataclasses import dataclass
from functools import partial
from typing import Any

import structlog

from fairstream.errors import describe

__all__ = ["keep_member_on_refused_commit"]

log = structlog.get_logger(__name__)

_EXPECTED = {
    "commit_offsets": ["assignment", "offsets"],
    "_do_commit_offsets": ["assignment", "offsets"],
    "reset_generation": [],
    "request_rejoin": [],
}
"""The coordinator methods this module wraps or calls, with their parameters."""


@dataclass(slots=True)
class _Sending:
    """A commit being sent: ``kept`` once a refusal kept the member id (aiokafka resets
    once per refused partition; it is said once)."""

    kept: bool = False


_SENDING: ContextVar[_Sending | None] = ContextVar("fairstream_commit_sending", default=None)
"""Set in the task that sends a commit (aiokafka shields it: a task of its own)."""


@dataclass(slots=True)
class _Caller:
    """One commit's caller: ``gave_up`` once it was cancelled with the commit still out."""

    gave_up: bool = False


_CALLER: ContextVar[_Caller | None] = ContextVar("fairstream_commit_caller", default=None)
"""The caller of the commit under way; the shielded task inherits it (a context copy)."""


def keep_member_on_refused_commit(consumer: Any, *, rejoin: bool) -> bool:
    """Make a started aiokafka ``consumer`` keep its member id when a commit is refused.

    ``rejoin``: ask for a rejoin in place of the reset (eager members). ``False``
    (logged): the coordinator is not the one this fairstream knows.
    """
    coordinator: Any = getattr(consumer, "_coordinator", None)
    for name, params in _EXPECTED.items():
        method = getattr(coordinator, name, None)
        if not callable(method) or list(inspect.signature(method).parameters) != params:
            log.info(
                "refused_commit_unpatched",
                reason=f"aiokafka's GroupCoordinator.{name} is not {name}({', '.join(params)}); "
                "a refused commit makes the member rejoin under a new member id",
            )
            return False
    send, commit = coordinator.commit_offsets, coordinator._do_commit_offsets
    reset = coordinator.reset_generation
    watched: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()

    async def commit_offsets(assignment: Any, offsets: Any) -> Any:
        caller = _Caller()
        token = _CALLER.set(caller)
        try:
            return await send(assignment, offsets)
        except asyncio.CancelledError:
            caller.gave_up = True
            raise
        finally:
            _CALLER.reset(token)

    async def do_commit_offsets(assignment: Any, offsets: Any) -> Any:
        task = asyncio.current_task()
        if task is not None and task not in watched:  # once per task, however long it lives
            watched.add(task)
            task.add_done_callback(partial(_retrieve, _CALLER.get()))
        token = _SENDING.set(_Sending())
        try:
            return await commit(assignment, offsets)
        finally:
            _SENDING.reset(token)

    def reset_generation() -> None:
        sending = _SENDING.get()
        if sending is None:
            reset()
            return
        if sending.kept:
            return
        sending.kept = True
        log.info(
            "commit_refused_member_kept",
            group_id=coordinator.group_id,
            generation=coordinator.generation,
        )
        if rejoin:
            coordinator.request_rejoin()

    coordinator.commit_offsets = commit_offsets
    coordinator._do_commit_offsets = do_commit_offsets
    coordinator.reset_generation = reset_generation
    return True


def _retrieve(caller: _Caller | None, task: asyncio.Task[Any]) -> None:
    """Read a finished commit task's outcome; one event if its caller had given up."""
    if task.cancelled():
        return
    error = task.exception()
    if error is not None and caller is not None and caller.gave_up:
        log.info("commit_answered_late", reason=describe(error))
