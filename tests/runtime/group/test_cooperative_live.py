"""Cooperative rebalancing (KIP-429) in a real group under live traffic.

Three members read 8 partitions while a producer writes to every partition every
20 ms; a fourth joins, just as one record of partition 0 starts taking 2.5 s to
handle (the issue's measurement: a slow partition on one member). Eager members all
stop until that member's revoke has waited for it; cooperative members keep handling
the partitions that keep their owner through both rounds of the join.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest
import structlog

from fairstream import App, ConsumerConfig, Record, SchedulerConfig
from tests.conftest import Broker
from tests.support.kafka_helpers import create_topic
from tests.support.live_traffic import produce_steadily, run_until, wait_until

pytestmark = pytest.mark.broker

PARTITIONS = 8
EVERY_S = 0.02
"""The producer writes one record to each partition this often."""

SLOW_S = 2.5
"""How long the first record of partition 0 handled after the join starts takes."""

Log = list[MutableMapping[str, Any]]


@dataclass
class Traffic:
    """What the producer wrote and who handled what when.

    ``seen`` places each handled record in the runtime's log: the number of events
    logged before it. The members share one event loop, so this order is exact, where
    a bound on wall-clock gaps measured the machine's speed as much as the protocol.
    """

    written: set[str] = field(default_factory=set)
    handled: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    times: dict[int, list[tuple[float, str]]] = field(default_factory=lambda: defaultdict(list))
    log: Log = field(default_factory=list)
    seen: dict[int, list[int]] = field(default_factory=lambda: defaultdict(list))
    slow_from: float | None = None
    slowed: bool = False

    def owners(self, start: float, end: float) -> dict[int, set[str]]:
        return {
            p: {member for t, member in events if start <= t < end}
            for p, events in self.times.items()
        }

    def handled_between(self, first: int, last: int) -> set[int]:
        """The partitions handled after log event ``first`` and before event ``last``."""
        return {p for p, seen in self.seen.items() if any(first < i <= last for i in seen)}


def _member(
    broker: Broker,
    group_id: str,
    topic: str,
    name: str,
    traffic: Traffic,
    cooperative: bool,
    *,
    leaves: bool = False,
) -> App:
    app = App(
        bootstrap=broker.bootstrap,
        group_id=group_id,
        assignor="sticky",
        cooperative=cooperative,
        instance_id=broker.instance_id(name),
        # 6 s, the least Kafka accepts: tansu answers each JoinGroup round after half
        # the session timeout and evicts the leaver only when its session ends.
        consumer=ConsumerConfig(
            heartbeat_interval_ms=500, session_timeout_ms=6_000, leave_group_on_stop=leaves
        ),
        scheduler=SchedulerConfig(commit_interval=0.2),
    )

    @app.subscriber(topic)
    async def handle(record: Record[str]) -> None:
        now = time.monotonic()
        traffic.handled[record.value] += 1
        traffic.times[record.partition].append((now, name))
        traffic.seen[record.partition].append(len(traffic.log))
        slow_from = traffic.slow_from
        if record.partition == 0 and slow_from is not None and not traffic.slowed:
            traffic.slowed = now >= slow_from
            if traffic.slowed:
                await anyio.sleep(SLOW_S)

    return app


@contextmanager
def _rebalance_log() -> Iterator[Log]:
    """The runtime's rebalance events, as structlog emits them."""
    with structlog.testing.capture_logs() as logs:
        yield logs


@dataclass
class Scenario:
    """What happened: the traffic, the rebalance windows, the runtime's log."""

    traffic: Traffic
    logs: Log
    join_logs_from: int = 0
    leave_logs_from: int = 0
    owners_before_join: dict[int, set[str]] = field(default_factory=dict)
    owners_after_join: dict[int, set[str]] = field(default_factory=dict)
    owners_after_leave: dict[int, set[str]] = field(default_factory=dict)


async def _scenario(broker: Broker, group_id: str, cooperative: bool, leave: bool) -> Scenario:
    """Three members, then a fourth joins (and, with ``leave``, leaves again).

    The fourth leaves with ``leave_group_on_stop``: on noida members are static (it
    never evicts one), and a static member stays in its group when it stops unless
    it is told to leave.
    """
    topic = f"coop-{group_id[-8:]}"
    await create_topic(broker.bootstrap, topic, PARTITIONS)
    traffic = Traffic()
    stop_producing, stop_first, stop_fourth = anyio.Event(), anyio.Event(), anyio.Event()
    names = {"m0", "m1", "m2"}

    def settled_on(owners: dict[int, set[str]], members: set[str]) -> bool:
        single = len(owners) == PARTITIONS and all(len(o) == 1 for o in owners.values())
        if not single or set().union(*owners.values()) != members:
            return False
        # Balanced (sticky: 3/3/2 or 2 each), so no partition is still on its way.
        load = Counter(m for o in owners.values() for m in o)
        return max(load.values()) - min(load.values()) <= 1

    async def settle(members: set[str]) -> dict[int, set[str]]:
        """Who handled each partition over the second in which the group was first seen
        settled on ``members``. That very window, not one read after it: on a loaded
        machine a later second may hold no handled record at all."""
        settled: dict[int, set[str]] = {}

        def seen_settled() -> bool:
            now = time.monotonic()
            owners = traffic.owners(now - 1.0, now)
            if settled_on(owners, members):
                settled.update(owners)
            return bool(settled)

        await wait_until(seen_settled, 60)
        return settled

    with _rebalance_log() as logs:
        traffic.log = logs
        scenario = Scenario(traffic, logs)
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_traffic, broker.bootstrap, topic, traffic, stop_producing)
            for name in sorted(names):
                app = _member(broker, group_id, topic, name, traffic, cooperative)
                tasks.start_soon(run_until, app, stop_first)
            scenario.owners_before_join = await settle(names)
            traffic.slow_from = time.monotonic()
            scenario.join_logs_from = len(logs)
            fourth = _member(broker, group_id, topic, "m3", traffic, cooperative, leaves=leave)
            tasks.start_soon(run_until, fourth, stop_fourth)
            scenario.owners_after_join = await settle({*names, "m3"})
            if leave:
                scenario.leave_logs_from = len(logs)
                stop_fourth.set()
                scenario.owners_after_leave = await settle(names)
            stop_producing.set()
            await wait_until(lambda: traffic.written <= traffic.handled.keys(), 30)
            stop_fourth.set()
            stop_first.set()
    return scenario


def _revoked(logs: Log) -> set[int]:
    return {
        partition
        for event in logs
        if event["event"] == "partitions_revoked"
        for _, partition in event["partitions"]
    }


def _lost(logs: Log) -> Log:
    return [e for e in logs if e["event"] == "partitions_lost"]


def _first(logs: Log, event: str, since: int, partitions: set[int] | None = None) -> int:
    """The log index of the first ``event`` from ``since`` on (naming one of ``partitions``).

    Moved partitions may reach their new owner in more than one assignment: one whose
    old owner has not revoked it yet is held back to a later round.
    """
    for index in range(since, len(logs)):
        if logs[index]["event"] != event:
            continue
        if partitions is None or partitions & {p for _, p in logs[index]["partitions"]}:
            return index
    raise AssertionError(f"no {event} of {partitions} from log event {since} on")


def _check_join(run: Scenario) -> set[int]:
    """The join's checks; returns the partitions that moved to the fourth member."""
    traffic, logs = run.traffic, run.logs
    rounds = [e for e in logs if e["event"] == "cooperative_assignment"]
    assert traffic.slowed
    # Nothing lost, and no member lost its partitions (a refused commit is no fence).
    assert traffic.written <= traffic.handled.keys()
    assert not _lost(logs), rounds
    # 2 of 8 partitions move to the fourth member, in two rounds.
    before, after = run.owners_before_join, run.owners_after_join
    kept = {p for p in range(PARTITIONS) if before[p] == after[p]}
    moved = set(range(PARTITIONS)) - kept
    assert len(moved) == 2 and {m for p in moved for m in after[p]} == {"m3"}, (before, after)
    assert _revoked(logs[: run.leave_logs_from or None]) == moved
    # KIP-429's promise: the kept partitions flow on between the first revoke and the
    # first handover to the newcomer (an eager group has stopped them all by then).
    # Partition 0 may be waiting out its slow record, whoever reads it.
    revoke = _first(logs, "partitions_revoked", run.join_logs_from)
    handover = _first(logs, "partitions_assigned", revoke, moved)
    assert traffic.handled_between(revoke, handover) >= kept - {0}, (revoke, handover, rounds)
    # Only the moved partitions' uncommitted records were handled twice.
    twice = {int(v.split("-")[0]) for v, n in traffic.handled.items() if n > 1}
    assert twice <= moved, (twice, moved)
    return moved


async def test_cooperative_join_keeps_kept_partitions_flowing(
    broker: Broker, group_id: str
) -> None:
    _check_join(await _scenario(broker, group_id, cooperative=True, leave=False))


async def test_cooperative_leave_moves_only_the_leavers_partitions(
    broker: Broker, group_id: str
) -> None:
    """A fourth member joins, then leaves: its partitions go to the others at once.

    On noida the leaver is a static member with ``leave_group_on_stop``: without it,
    noida, which never evicts, would keep its partitions for ever (tansu evicts a
    dynamic member after its session timeout; it ignores a LeaveGroup).
    """
    run = await _scenario(broker, group_id, cooperative=True, leave=True)
    moved = _check_join(run)
    traffic, logs = run.traffic, run.logs
    before, after = run.owners_after_join, run.owners_after_leave
    orphaned = {p for p, owners in before.items() if owners == {"m3"}}
    assert orphaned == moved
    assert all(before[p] == after[p] for p in set(range(PARTITIONS)) - orphaned)
    assert not _revoked(logs[run.leave_logs_from :])
    assert not _lost(logs)
    # The others handle their own partitions on until the orphans reach them.
    handover = _first(logs, "partitions_assigned", run.leave_logs_from, orphaned)
    flowing = traffic.handled_between(run.leave_logs_from - 1, handover)
    assert flowing >= set(range(PARTITIONS)) - orphaned, (flowing, handover)


async def test_eager_members_stop_everything(noida: Broker, group_id: str) -> None:
    run = await _scenario(noida, group_id, cooperative=False, leave=False)
    traffic = run.traffic

    assert traffic.slowed
    assert traffic.written <= traffic.handled.keys()
    assert _revoked(run.logs) == set(range(PARTITIONS))
    assert not [e for e in run.logs if e["event"] == "cooperative_assignment"]
    # Everything stops: every member has revoked all it held before any is assigned
    # anything, so for a while no partition is handled at all.
    since = run.join_logs_from
    last_revoke = max(
        i for i in range(since, len(run.logs)) if run.logs[i]["event"] == "partitions_revoked"
    )
    assert last_revoke < _first(run.logs, "partitions_assigned", since), run.logs[since:]


async def _traffic(bootstrap: str, topic: str, traffic: Traffic, stop: anyio.Event) -> None:
    await produce_steadily(
        bootstrap, topic, partitions=PARTITIONS, every_s=EVERY_S, written=traffic.written, stop=stop
    )
