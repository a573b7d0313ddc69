"""Cooperative rebalancing (KIP-429) with parallel rebalance (KIP-333) and key order.

Two cooperative members with ``parallel_rebalance`` and ``ordering="key"`` start on
a backlog, so each jumps and replays it in a shadow, slowly. While those shadows
run, a burst of live records arrives faster than the members handle it, and a
third member joins: the partitions that move to it arrive with a backlog above
the threshold, so it jumps and its shadow replays them; the partitions that stay
keep flowing, and their shadows are neither stopped nor restarted by the join.
On noida, which keeps commit metadata (the shadows' ranges live there).
"""

from __future__ import annotations

import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import anyio
import pytest
from structlog.testing import capture_logs

from fairstream import App, ConsumerConfig, ParallelRebalance, Record, SchedulerConfig
from tests.conftest import Broker
from tests.support.kafka_helpers import create_topic, produce_keyed
from tests.support.live_traffic import produce_steadily, run_until, wait_until

pytestmark = pytest.mark.broker

PARTITIONS, KEYS = 6, 4
BACKLOG = 800
"""Records per partition before the members start: each partition jumps and replays them."""
BURST = 800
"""Live records per partition written just before the third member joins."""
THRESHOLD = 300
REPLAY_DELAY_S = 0.04
"""A replayed record's handling time: ``KEYS`` run at once per partition, so a
shadow replays about 100 records a second and the first ones last ~8 s."""
LIVE_DELAY_S = 0.02
"""A live record's handling time: about 200 a second per partition, so the burst
lasts ~4 s, and a moved partition is revoked with most of it unhandled."""
TRICKLE_S = 0.05
"""Live records go on arriving this often from the burst on, so a kept partition
always has something to handle while the group rebalances."""


@dataclass
class Handled:
    """(time, member, partition, key, seq, replay) of each handled record, in order.

    ``seen`` places each in the runtime's log: the number of events logged before it
    (the members share one event loop, so the order is exact).
    """

    events: list[tuple[float, str, int, int, int, bool]] = field(default_factory=list)
    values: Counter[str] = field(default_factory=Counter)
    log: Sequence[Mapping[str, Any]] = ()
    seen: list[int] = field(default_factory=list)
    hurry: bool = False
    """Set once the join is observed: the slow handling only had to last until then."""

    def add(self, record: Record[str], member: str) -> None:
        _, partition, key, seq = record.value.split("-")
        self.events.append(
            (time.monotonic(), member, int(partition), int(key), int(seq), record.replay)
        )
        self.values[record.value] += 1
        self.seen.append(len(self.log))

    def count(self, member: str, *, replay: bool) -> int:
        return sum(1 for _, m, *_, r in self.events if m == member and r == replay)


def _records(prefix: str, start: int, count: int) -> list[tuple[int, bytes, bytes]]:
    """``count`` records per partition: (partition, key, value), keys round-robin."""
    return [
        (p, f"k{p}-{seq % KEYS}".encode(), f"{prefix}-{p}-{seq % KEYS}-{seq}".encode())
        for seq in range(start, start + count)
        for p in range(PARTITIONS)
    ]


def _member(noida: Broker, group_id: str, topic: str, name: str, handled: Handled) -> App:
    app = App(
        bootstrap=noida.bootstrap,
        group_id=group_id,
        instance_id=noida.instance_id(name),
        assignor="sticky",
        cooperative=True,
        parallel_rebalance=ParallelRebalance(threshold=THRESHOLD),
        consumer=ConsumerConfig(heartbeat_interval_ms=500, session_timeout_ms=10_000),
        scheduler=SchedulerConfig(
            ordering="key", commit_interval=0.2, partition_quota=50, max_batch=100
        ),
    )

    @app.subscriber(topic)
    async def handle(record: Record[str]) -> None:
        handled.add(record, name)
        if not handled.hurry:
            await anyio.sleep(REPLAY_DELAY_S if record.replay else LIVE_DELAY_S)

    return app


def _trickled(partition: int, seq: int) -> tuple[str, bytes | None]:
    """A trickle record: a key of its own per partition, beside the backlog's keys."""
    return f"t-{partition}-{KEYS}-{seq}", f"k{partition}-t".encode()


def _partitions(logs: Sequence[Mapping[str, Any]], event: str, key: str = "partitions") -> set[int]:
    return {p for e in logs if e["event"] == event for _, p in e[key]}


def _of(logs: Sequence[Mapping[str, Any]], event: str, partition: int) -> list[Mapping[str, Any]]:
    return [e for e in logs if e["event"] == event and e.get("partition") == partition]


def _first(logs: Sequence[Mapping[str, Any]], event: str, since: int, partitions: set[int]) -> int:
    """The log index of the first ``event`` from ``since`` on naming one of ``partitions``."""
    for index in range(since, len(logs)):
        if logs[index]["event"] == event and partitions & {p for _, p in logs[index]["partitions"]}:
            return index
    raise AssertionError(f"no {event} of {partitions} from log event {since} on")


@pytest.mark.timeout(240)
async def test_moved_partitions_jump_and_kept_shadows_run_on(noida: Broker, group_id: str) -> None:
    topic = f"cp-{uuid.uuid4().hex[:10]}"
    await create_topic(noida.bootstrap, topic, PARTITIONS)
    backlog = _records("b", 0, BACKLOG)
    await produce_keyed(noida.bootstrap, topic, backlog)
    handled = Handled()
    stop = anyio.Event()
    written = {value.decode() for *_, value in backlog}

    with capture_logs() as logs:
        handled.log = logs
        async with anyio.create_task_group() as tasks:
            for name in ("m0", "m1"):
                tasks.start_soon(run_until, _member(noida, group_id, topic, name, handled), stop)
            # Both replay (the group formed, each partition jumped), then it settles.
            await wait_until(
                lambda: all(handled.count(m, replay=True) >= 50 for m in ("m0", "m1")), 60
            )
            await anyio.sleep(1.0)
            burst = _records("l", BACKLOG, BURST)
            await produce_keyed(noida.bootstrap, topic, burst)
            written |= {value.decode() for *_, value in burst}
            trickling = anyio.Event()
            tasks.start_soon(
                partial(
                    produce_steadily,
                    noida.bootstrap,
                    topic,
                    partitions=PARTITIONS,
                    every_s=TRICKLE_S,
                    written=written,
                    stop=trickling,
                    record=_trickled,
                )
            )
            join_logs = len(logs)
            tasks.start_soon(run_until, _member(noida, group_id, topic, "m2", handled), stop)
            # The join is over once the third member handles a record: its shadow's.
            await wait_until(lambda: handled.count("m2", replay=True) > 0, 60)
            await wait_until(lambda: handled.count("m2", replay=False) > 0, 30)
            trickling.set()
            # The join is over and the shadows still run (checked below from the logs):
            # the rest only has to be handled, which took 90-120 s at the slow pace.
            handled.hurry = True
            await wait_until(lambda: written <= handled.values.keys(), 120)
            stop.set()

    before, after = logs[:join_logs], logs[join_logs:]
    rounds = [e for e in after if e["event"].startswith("cooperative_")]
    assert not [e for e in logs if e["event"] == "partitions_lost"], rounds
    assert written <= handled.values.keys(), "records lost"

    # Two partitions move to the newcomer (sticky: 3/3 -> 2/2/2), in two rounds.
    moved = _partitions(after, "partitions_revoked")
    kept = set(range(PARTITIONS)) - moved
    assert len(moved) == 2, rounds
    assert {p for _, m, p, *_ in handled.events if m == "m2"} == moved
    # Each arrives with a backlog above the threshold and jumps: the shadow replays it.
    jumps = {e["partition"]: e for e in after if e["event"] == "parallel_rebalance_started"}
    assert jumps.keys() == moved, rounds
    assert all(e["lag"] >= THRESHOLD for e in jumps.values()), jumps
    replayed = {p for _, m, p, *_, r in handled.events if m == "m2" and r}
    assert replayed == moved
    assert handled.count("m2", replay=False) > 0, "no live records after the jump"

    for p in sorted(kept):
        # Its shadow ran when the join began, and ran on to its end: never stopped
        # or started again, and the partition was never revoked or jumped again.
        started = _of(before, "shadow_started", p)
        assert started and not _of(before[before.index(started[-1]) :], "shadow_finished", p), p
        assert not _of(after, "shadow_stopped", p) and not _of(after, "shadow_started", p), p
        assert len(_of(after, "shadow_finished", p)) == 1, p
        assert not _of(after, "parallel_rebalance_started", p), p
    # Kept partitions keep flowing (KIP-429's promise): their live records are handled
    # between the first revoke and the first handover of a moved partition to m2.
    revoke = _first(logs, "partitions_revoked", join_logs, moved)
    handover = _first(logs, "partitions_assigned", revoke, moved)
    flowing = {
        p
        for (*_, p, _, _, replay), i in zip(handled.events, handled.seen, strict=True)
        if not replay and revoke < i <= handover
    }
    assert flowing >= kept, (revoke, handover, rounds)

    # Only the moved partitions' uncommitted records were handled twice.
    twice = {int(v.split("-")[1]) for v, n in handled.values.items() if n > 1}
    assert twice <= moved, (twice, moved)
    # Live records of each key were handled in offset order, across owners.
    live: dict[tuple[int, int], list[int]] = defaultdict(list)
    for _, _, p, key, seq, replay in handled.events:
        if not replay:
            live[p, key].append(seq)
    unordered = {k: seqs for k, seqs in live.items() if seqs != sorted(set(seqs))}
    assert not unordered, {k: v[:20] for k, v in unordered.items()}
