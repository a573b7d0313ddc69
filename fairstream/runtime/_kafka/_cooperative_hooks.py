"""Incremental cooperative rebalancing (KIP-429) on aiokafka's eager coordinator.

aiokafka 0.14 speaks only the eager protocol: before every join its group
coordinator's ``_on_join_prepare`` revokes all partitions and stops ``getmany``
(``begin_reassignment``), and ``_on_join_complete`` replaces the whole assignment,
so every partition is fetched again from its committed offset. Everything is
stopped while the group rebalances, even where the plan hands each partition back.

:func:`make_cooperative` replaces those two methods on one consumer's coordinator:

- before a join, the member commits what it handled and keeps reading: nothing
  is revoked, and the join reports what it owns (the assignor's user data);
- after the join, ``revoked = owned - assigned`` is revoked (the listener commits
  it while it is still assigned), ``added = assigned - owned`` is assigned, and
  the partitions in both keep their fetch positions, queues, in-flight work and
  KIP-333 shadows. When something was revoked, the member asks for another
  rebalance, in which the leader gives it to its new owner (the leader held it back:
  :func:`fairstream.assign.cooperative.hold_back_moves`). It asks one heartbeat
  interval later, not at once (see "The follow-up rejoin waits" below);
- a member whose generation was reset (``UNKNOWN_MEMBER_ID``, ``ILLEGAL_GENERATION``:
  it missed a rebalance, and another member may own its partitions now) loses them:
  the listener's ``on_partitions_lost`` drops them without committing.

A cooperative member commits while the group rebalances, which eager members never
do. Kafka accepts such a commit until the new generation forms; noida answers it
with ``ILLEGAL_GENERATION``, and aiokafka then resets the generation: every member
would lose everything at every join. A refused commit resets nothing
(:mod:`fairstream.runtime._kafka._refused_commits`, as Kafka's Java consumer does for a
commit refused while the group rebalances): it is retried at the next commit, and
the heartbeat, which goes on, says whether the group rebalances (the member rejoins
with its member id) or fenced the member (aiokafka resets the generation: lost).
Asking for a rejoin instead would loop: a refusal that arrives after the member
joined the new generation starts one more rebalance, in which other members'
commits are refused.

The follow-up rejoin waits a heartbeat interval after the round that revoked. A
rejoin at once (as Kafka's Java consumer does) reaches the coordinator a few
milliseconds after the leader's SyncGroup, while other members' JoinGroup and
SyncGroup requests of the round that just completed may still be unanswered.
Kafka answers all of those at the moment the round completes, so nothing is lost;
noida (0.2.3) parks them in a loop that looks at the group every 20 ms and answers
a parked JoinGroup only if it sees the round completing or stable. Rejoined within
those 20 ms, the group is back in PreparingRebalance: the parked member misses its
generation, waits the whole rebalance timeout for the next one (its entry for that
round was cleared by the leader's SyncGroup), gets an empty assignment, and its
session expires meanwhile: the group reshuffles and members lose partitions. One
heartbeat interval is when the other members learn of a rebalance anyway, and it
only delays the moved partitions, which nobody reads until the next round either way.

It is private API, so it is guarded: if the coordinator is not the shape this
module knows, an App with ``cooperative=True`` refuses to start (a ``ConfigError``)
rather than fall back to eager in silence; ``tests/runtime/kafka/test_cooperative.py``
fails loudly when an aiokafka upgrade changes what it relies on.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, Protocol

import structlog
from aiokafka import ConsumerRebalanceListener, TopicPartition
from aiokafka.consumer.fetcher import Fetcher
from aiokafka.consumer.group_coordinator import GroupCoordinator
from aiokafka.consumer.subscription_state import Assignment as Assigned
from aiokafka.consumer.subscription_state import Subscription, TopicPartitionState
from aiokafka.coordinator.protocol import ConsumerProtocol

from fairstream.assign import Assignment
from fairstream.assign.cooperative import held_back, hold_back_moves
from fairstream.errors import ConfigError

__all__ = ["Owner", "hold_back", "make_cooperative", "unsupported"]

log = structlog.get_logger(__name__)

_EXPECTED = {
    "_on_join_prepare": ["previous_assignment"],
    "_on_join_complete": ["generation", "member_id", "protocol", "member_assignment_bytes"],
    "_lookup_assignor": ["name"],
    "_stop_commit_offsets_refresh_task": [],
    "start_commit_offsets_refresh_task": ["assignment"],
    "request_rejoin": [],
    # Not called here, but a cooperative member needs _refused_commits to apply.
    "reset_generation": [],
    "commit_offsets": ["assignment", "offsets"],
    "_do_commit_offsets": ["assignment", "offsets"],
}
"""The coordinator methods this module replaces or calls, with their parameters."""

_STATE = ("reset_to", "pause", "has_valid_position", "position", "paused")
_SUBSCRIPTION = ("assign_from_subscribed", "assigned_partitions", "subscription", "listener")
_FETCH_LOOP = {
    Fetcher._fetch_requests_routine: ("_get_actions_per_node", "_pending_tasks"),
    Fetcher._get_actions_per_node: ("_in_flight",),
}
"""Functions of aiokafka's fetcher, with the private names they must use for
:func:`_look_again_after_finished_fetches` to apply."""


class Owner(Protocol):
    """What the hook needs of the assignor: to forget what it reports owning."""

    def consumer_restarted(self) -> None: ...


def hold_back(
    planned: Assignment,
    owned: Assignment | None,
    contested: frozenset[tuple[str, int]] = frozenset(),
) -> Assignment:
    """The leader's plan for cooperative members: moves between live members, and
    contested partitions, wait a round."""
    waiting = held_back(planned, owned, contested)
    if waiting:
        log.info("cooperative_held_back", partitions=sorted(waiting))
    return hold_back_moves(planned, owned, contested)


def unsupported(coordinator: Any) -> str | None:
    """Why :func:`make_cooperative` cannot hook ``coordinator`` (``None``: it can)."""
    if type(coordinator) is not GroupCoordinator:
        return f"the consumer's coordinator is {type(coordinator).__name__}, not GroupCoordinator"
    for name, params in _EXPECTED.items():
        method = getattr(coordinator, name, None)
        if not callable(method) or list(inspect.signature(method).parameters) != params:
            return f"GroupCoordinator.{name} is not {name}({', '.join(params)})"
    subscription = getattr(coordinator, "_subscription", None)
    missing = [a for a in _SUBSCRIPTION if not hasattr(subscription, a)]
    missing += [a for a in _STATE if not hasattr(TopicPartitionState, a)]
    missing += [a for a in ("assignment", "_assign") if not hasattr(Subscription, a)]
    missing += [a for a in ("state_value", "tps") if not hasattr(Assigned, a)]
    missing += [
        f"{function.__qualname__} using {name}"
        for function, names in _FETCH_LOOP.items()
        for name in names
        if name not in function.__code__.co_names
    ]
    if missing or not hasattr(coordinator, "generation") or not hasattr(coordinator, "member_id"):
        lacking = missing or ["generation/member_id"]
        return f"aiokafka's subscription state or fetcher lacks {lacking}"
    return None


def make_cooperative(consumer: Any, owner: Owner, *, rejoin_after_s: float) -> None:
    """Make a started aiokafka ``consumer`` rebalance cooperatively; before ``subscribe()``.

    ``rejoin_after_s`` (the heartbeat interval) is how long a member that revoked
    partitions waits before it asks for the round that hands them on.

    :raises ConfigError: aiokafka's coordinator is not the one this module knows.
    """
    coordinator: Any = getattr(consumer, "_coordinator", None)
    reason = unsupported(coordinator)
    fetcher = getattr(consumer, "_fetcher", None)
    if reason is None and type(fetcher) is not Fetcher:
        reason = f"the consumer's fetcher is {type(fetcher).__name__}, not Fetcher"
    if reason is not None:
        raise ConfigError(
            "cooperative",
            True,
            f"this aiokafka cannot rebalance cooperatively: {reason}",
            "use cooperative=False, or the aiokafka version fairstream pins",
        )
    _look_again_after_finished_fetches(fetcher)
    hook = _Cooperative(coordinator, owner, rejoin_after_s)
    coordinator._on_join_prepare = hook.prepare
    coordinator._on_join_complete = hook.complete


def _look_again_after_finished_fetches(fetcher: Any) -> None:
    """Keep aiokafka's fetcher from sleeping 200 ms on a fetch that already finished.

    The fetcher marks a broker busy while a request to it is in flight and unmarks it
    in the request task's done callback. Every cooperative round hands aiokafka a new
    assignment (``_Cooperative._reassign``), which restarts its fetch loop: the loop
    drops its request tasks and looks at the new assignment at once. When a fetch
    answer arrived in that same event-loop turn, its task is done but the callback has
    not run: the broker still looks busy, no fetch is sent, and the loop sleeps its
    200 ms poll timeout with no task left to wake it. noida answers in 20 ms ticks, so
    kept partitions stalled ~0.2 s in one cooperative round in three, each time with
    such a stale mark (benchmarks/RESULTS.md, #23). Any other wake-up (a resumed
    partition, a consumed buffer) can meet the same turn. Here the loop waits no time
    while only finished requests are marked in flight, so it looks again once the
    callback ran.
    """
    actions = fetcher._get_actions_per_node

    def get_actions_per_node(assignment: Any) -> tuple[Any, Any, float, bool, Any]:
        fetches, resets, timeout, invalid_metadata, resumes = actions(assignment)
        if fetcher._in_flight and all(task.done() for task in fetcher._pending_tasks):
            timeout = 0
        return fetches, resets, timeout, invalid_metadata, resumes

    fetcher._get_actions_per_node = get_actions_per_node


class _Cooperative:
    """The two replaced coordinator methods, for one consumer."""

    def __init__(self, coordinator: Any, owner: Owner, rejoin_after_s: float) -> None:
        self._coordinator = coordinator
        self._subscription = coordinator._subscription
        self._owner = owner
        self._member_id: str = ""
        self._rejoin_after_s = rejoin_after_s
        self._follow_up: asyncio.TimerHandle | None = None

    async def prepare(self, previous_assignment: Any) -> None:
        """Before a join: lose what a reset generation took, commit, read on (no revoke)."""
        coordinator = self._coordinator
        coordinator._group_subscription = None
        if self._follow_up is not None:
            self._follow_up.cancel()  # this join is the round it was to ask for
            self._follow_up = None
        owned = set(self._subscription.assigned_partitions())
        if owned and not coordinator.member_id:
            await self._lose(owned, reason="generation_reset")
        self._member_id = coordinator.member_id
        log.info(
            "cooperative_join",
            group_id=coordinator.group_id,
            generation=coordinator.generation,
            member_id=coordinator.member_id,
            owned=len(self._subscription.assigned_partitions()),
        )
        # The listener commits what was handled (nothing revoked); the lag assignor's
        # listener reads the group's lag for the leader's plan.
        await _call(self._subscription.listener, "on_partitions_revoked", set())

    async def complete(
        self, generation: int, member_id: str, protocol: str, member_assignment_bytes: bytes
    ) -> None:
        """After a join: revoke what was taken, keep what stays, assign what was added."""
        coordinator = self._coordinator
        assignor = coordinator._lookup_assignor(protocol)
        assert assignor, f"invalid assignment protocol: {protocol}"
        owned = set(self._subscription.assigned_partitions())
        if not member_assignment_bytes:
            # No assignment at all: the leader did not plan for this member (noida
            # answers so a member it left out of the generation), so others may own
            # its partitions now: lost. Rejoin, with metadata that makes it rebalance.
            if owned:
                await self._lose(owned, reason="left_out_of_generation")
            self._owner.consumer_restarted()
            coordinator.request_rejoin()
            return
        assignment = ConsumerProtocol.ASSIGNMENT.decode(member_assignment_bytes)
        new = set(assignment.partitions())
        if owned and self._member_id and member_id != self._member_id:
            # Reset during the join: a generation went on without us (KIP-429: lost).
            await self._lose(owned, reason="member_id_changed")
            owned = set()
        revoked, added = owned - new, new - owned
        listener = self._subscription.listener
        if revoked:
            # Committed while still assigned: aiokafka refuses commits of others.
            await _call(listener, "on_partitions_revoked", revoked)
        self._reassign(new)
        assignor.on_assignment(assignment)
        await coordinator._stop_commit_offsets_refresh_task()
        coordinator.start_commit_offsets_refresh_task(self._subscription.subscription.assignment)
        log.info(
            "cooperative_assignment",
            group_id=coordinator.group_id,
            generation=generation,
            member_id=member_id,
            kept=len(new & owned),
            revoked=sorted(_tps(revoked)),
            added=sorted(_tps(added)),
        )
        await _call(listener, "on_partitions_assigned", added)
        if revoked:
            # The revoked partitions are nobody's now: the next round hands them on,
            # once the other members had their answers of this one (module docstring).
            self._follow_up = asyncio.get_running_loop().call_later(
                self._rejoin_after_s, self._rejoin, generation, member_id
            )

    def _rejoin(self, generation: int, member_id: str) -> None:
        """Ask for the round that hands on what was revoked, unless one came meanwhile."""
        self._follow_up = None
        coordinator = self._coordinator
        if coordinator.generation == generation and coordinator.member_id == member_id:
            coordinator.request_rejoin()

    def _reassign(self, new: set[TopicPartition]) -> None:
        """Take ``new`` as the assignment; kept partitions read on from where they were."""
        subscription = self._subscription.subscription
        before = subscription.assignment
        kept = {
            tp: state
            for tp in new
            if before is not None and (state := before.state_value(tp)) is not None
        }
        self._subscription.assign_from_subscribed(new)
        after = subscription.assignment
        for tp, old in kept.items():
            state = after.state_value(tp)
            if old.has_valid_position:
                state.reset_to(old.position)
            state.highwater, state.lso, state.timestamp = old.highwater, old.lso, old.timestamp
            if old.paused:
                state.pause()

    async def _lose(self, owned: set[TopicPartition], *, reason: str) -> None:
        log.warning(
            "partitions_lost",
            group_id=self._coordinator.group_id,
            partitions=sorted(_tps(owned)),
            reason=reason,
        )
        listener = self._subscription.listener
        lost = getattr(listener, "on_partitions_lost", None)
        await _call(listener, "on_partitions_lost" if lost else "on_partitions_revoked", owned)
        self._subscription.assign_from_subscribed(set())
        self._owner.consumer_restarted()  # report owning nothing at the join


def _tps(tps: set[TopicPartition]) -> list[tuple[str, int]]:
    return [(tp.topic, tp.partition) for tp in tps]


async def _call(listener: ConsumerRebalanceListener | None, name: str, tps: set[Any]) -> None:
    """Await a listener callback as aiokafka does: its exceptions are logged, not raised."""
    if listener is None:
        return
    try:
        result = getattr(listener, name)(tps)
        if asyncio.iscoroutine(result):
            await result
    except Exception:
        log.exception("rebalance_listener_failed", callback=name, partitions=len(tps))
