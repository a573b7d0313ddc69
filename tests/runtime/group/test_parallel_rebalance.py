"""KIP-333 parallel rebalance on the embedded brokers: jump, shadow, crash, handover.

The crash-safety tests run on noida, which keeps commit metadata; tansu drops it,
which is what the refusal test checks. Every handler records what it saw, and
each test waits (bounded) until every produced record was handled.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from aiokafka import TopicPartition
from structlog.testing import capture_logs

from fairstream import App, HandoffFailed, ParallelRebalance, Record, SchedulerConfig
from fairstream.config import ShadowHandoff
from fairstream.ranges import OffsetRange, decode_shadow
from fairstream.runtime._kafka._admin import BrokerAdmin
from tests.conftest import Broker
from tests.support.backends import QUICK_JOIN
from tests.support.kafka_helpers import create_topic, produce

pytestmark = pytest.mark.broker

ROOT = Path(__file__).parents[3]


@dataclass
class Seen:
    """What the handlers saw, in handling order: (value, replay); replays per member."""

    order: list[tuple[str, bool]] = field(default_factory=list)
    values: Counter[str] = field(default_factory=Counter)
    replayed_by: Counter[str] = field(default_factory=Counter)
    changed: anyio.Event = field(default_factory=anyio.Event)

    def add(self, record: Record[str], member: str) -> None:
        self.order.append((record.value, record.replay))
        self.values[record.value] += 1
        self.replayed_by[member] += record.replay
        self.changed.set()
        self.changed = anyio.Event()

    async def wait_for(self, wanted: set[str]) -> None:
        while not wanted <= self.values.keys():
            await self.changed.wait()


def _values(prefix: str, partitions: int, count: int) -> list[tuple[int, bytes]]:
    return [(i % partitions, f"{prefix}{i}".encode()) for i in range(count)]


def _names(records: list[tuple[int, bytes]]) -> set[str]:
    return {value.decode() for _, value in records}


async def _topic(bootstrap: str, partitions: int) -> str:
    name = f"pr-{uuid.uuid4().hex[:10]}"
    await create_topic(bootstrap, name, partitions)
    return name


async def _commits(
    bootstrap: str, group_id: str, topic: str, partitions: int
) -> list[tuple[int, list[OffsetRange]] | None]:
    """Committed offset and open shadow ranges per partition."""
    async with BrokerAdmin(bootstrap) as admin:
        found = await admin.committed_offsets(
            group_id, [TopicPartition(topic, p) for p in range(partitions)]
        )
    return [
        None
        if (c := found[TopicPartition(topic, p)]) is None
        else (c.offset, decode_shadow(c.metadata))
        for p in range(partitions)
    ]


async def _wait_commits(
    bootstrap: str, group_id: str, topic: str, expected: list[tuple[int, list[OffsetRange]]]
) -> None:
    with anyio.fail_after(30):
        # The broker has no event to wait on: poll it.
        while await _commits(bootstrap, group_id, topic, len(expected)) != expected:  # noqa: ASYNC110
            await anyio.sleep(0.2)


def _app(
    broker: Broker,
    group_id: str,
    topic: str,
    seen: Seen,
    *,
    name: str = "only",
    replay_delay: float = 0.0,
    threshold: int = 500,
    handoff: ShadowHandoff | None = None,
    **options: Any,
) -> App:
    """A parallel-rebalance member whose handler reports to ``seen``.

    ``replay_delay`` slows replayed records only, so the backlog takes a while.
    """
    app = App(
        bootstrap=broker.bootstrap,
        group_id=group_id,
        instance_id=broker.instance_id(name),
        parallel_rebalance=ParallelRebalance(
            threshold=threshold, handoff=handoff, handoff_threshold=500
        ),
        scheduler=SchedulerConfig(commit_interval=0.2, partition_quota=50, max_batch=100),
        **options,
    )

    @app.subscriber(topic)
    async def handle(record: Record[str]) -> None:
        seen.add(record, name)
        if record.replay:
            await anyio.sleep(replay_delay)

    return app


async def test_live_records_are_served_while_the_shadow_replays_the_backlog(
    noida: Broker, group_id: str
) -> None:
    partitions = 2
    topic = await _topic(noida.bootstrap, partitions)
    backlog = _values("b", partitions, 3_000)
    live = _values("l", partitions, 100)
    await produce(noida.bootstrap, topic, backlog)
    seen = Seen()
    app = _app(noida, group_id, topic, seen, replay_delay=0.001)

    async with app:
        with anyio.fail_after(30):
            await app.wait_ready()
        await produce(noida.bootstrap, topic, live)
        with anyio.fail_after(60):
            await seen.wait_for(_names(backlog) | _names(live))
        await _wait_commits(noida.bootstrap, group_id, topic, [(1_550, [])] * partitions)

    replayed = {value for value, replay in seen.order if replay}
    assert replayed == _names(backlog), "the backlog, and only it, is replayed"
    first_live = next(i for i, (_, replay) in enumerate(seen.order) if not replay)
    last_replay = max(i for i, (_, replay) in enumerate(seen.order) if replay)
    assert first_live < last_replay, "a live record waited for the whole backlog"
    assert max(seen.values.values()) == 1


def _sink_lines(sink: Path) -> list[tuple[str, bool]]:
    if not sink.exists():
        return []
    return [
        (value, flag == "1")
        for value, flag in (line.split() for line in sink.read_text().splitlines())
    ]


@contextmanager
def _member(
    noida: Broker, group_id: str, topic: str, sink: Path
) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen(
        [sys.executable, "-m", "fairstream", "run", "tests.support.shadow_member:app"],
        cwd=ROOT,
        env={
            **os.environ,
            "FAIRSTREAM_BOOTSTRAP": noida.bootstrap,
            "FAIRSTREAM_GROUP_ID": group_id,
            "FAIRSTREAM_INSTANCE_ID": "member-0",
            "SHADOW_TOPIC": topic,
            "SHADOW_SINK": str(sink),
            "SHADOW_REPLAY_DELAY": "0.002",
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield process
    finally:
        process.kill()
        process.communicate()


async def test_sigkill_mid_shadow_then_restart_loses_nothing(
    noida: Broker, group_id: str, tmp_path: Path
) -> None:
    topic = await _topic(noida.bootstrap, 1)
    backlog = _values("b", 1, 2_000)
    await produce(noida.bootstrap, topic, backlog)
    sink = tmp_path / "handled.txt"

    with _member(noida, group_id, topic, sink) as first:
        # Kill it once its shadow committed some progress, with most of it left.
        with anyio.fail_after(60):
            while True:
                assert first.poll() is None, first.communicate()[1]
                commits = await _commits(noida.bootstrap, group_id, topic, 1)
                if commits[0] is not None and commits[0][1] and commits[0][1][0].start >= 200:
                    break
                await anyio.sleep(0.1)
        live_before = _values("l", 1, 100)
        await produce(noida.bootstrap, topic, live_before)
        with anyio.fail_after(30):
            while not _names(live_before) <= {v for v, _ in _sink_lines(sink)}:
                assert first.poll() is None, first.communicate()[1]
                await anyio.sleep(0.1)
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    open_at_kill = (await _commits(noida.bootstrap, group_id, topic, 1))[0]
    assert open_at_kill is not None and open_at_kill[1], "killed after the shadow finished"

    live_after = _values("m", 1, 100)
    await produce(noida.bootstrap, topic, live_after)
    everything = _names(backlog) | _names(live_before) | _names(live_after)
    with _member(noida, group_id, topic, sink) as second:
        with anyio.fail_after(60):
            while not everything <= {v for v, _ in _sink_lines(sink)}:
                assert second.poll() is None, second.communicate()[1]
                await anyio.sleep(0.1)
        await _wait_commits(noida.bootstrap, group_id, topic, [(2_200, [])])

    handled = Counter(v for v, _ in _sink_lines(sink))
    assert everything <= handled.keys()
    # The restart resumed the recorded range, it did not replay the backlog again.
    assert sum(n - 1 for n in handled.values()) < len(backlog) // 2


async def test_second_member_joining_during_catch_up_loses_nothing(
    noida: Broker, group_id: str
) -> None:
    partitions = 4
    topic = await _topic(noida.bootstrap, partitions)
    backlog = _values("b", partitions, 4_000)
    await produce(noida.bootstrap, topic, backlog)
    seen = Seen()

    def member(name: str) -> App:
        return _app(noida, group_id, topic, seen, name=name, replay_delay=0.001)

    live = _values("l", partitions, 200)
    async with member("first") as first:
        with anyio.fail_after(30):
            await first.wait_ready()
            while seen.replayed_by["first"] < 400:
                await seen.changed.wait()
        async with member("second") as second:
            with anyio.fail_after(30):
                await second.wait_ready()
            await produce(noida.bootstrap, topic, live)
            with anyio.fail_after(60):
                await seen.wait_for(_names(backlog) | _names(live))
            await _wait_commits(noida.bootstrap, group_id, topic, [(1_050, [])] * partitions)

    assert seen.replayed_by["second"] > 0, "the second member resumed no shadow range"
    assert _names(backlog) | _names(live) <= seen.values.keys()


async def test_lag_under_the_threshold_consumes_plainly(noida: Broker, group_id: str) -> None:
    topic = await _topic(noida.bootstrap, 2)
    records = _values("r", 2, 400)
    await produce(noida.bootstrap, topic, records)
    seen = Seen()
    app = _app(noida, group_id, topic, seen, threshold=500)

    async with app:
        with anyio.fail_after(30):
            await seen.wait_for(_names(records))
        await _wait_commits(noida.bootstrap, group_id, topic, [(200, [])] * 2)

    assert not any(replay for _, replay in seen.order)
    for partition in (0, 1):
        handled = [int(v[1:]) for v, _ in seen.order if int(v[1:]) % 2 == partition]
        assert handled == sorted(handled), "plain consumption keeps partition order"


async def test_broker_dropping_metadata_refuses_to_jump_and_loses_nothing(
    tansu: Broker, group_id: str
) -> None:
    if tansu.keeps_commit_metadata:
        pytest.skip("this broker keeps commit metadata")
    topic = await _topic(tansu.bootstrap, 1)
    records = _values("r", 1, 1_500)
    await produce(tansu.bootstrap, topic, records)
    seen = Seen()
    app = _app(tansu, group_id, topic, seen, consumer=QUICK_JOIN)

    with capture_logs() as logs:
        async with app:
            with anyio.fail_after(60):
                await seen.wait_for(_names(records))

    refused = [e for e in logs if e["event"] == "parallel_rebalance_refused"]
    assert [(e["reason"], e["lag"]) for e in refused] == [("broker_dropped_metadata", 1_500)]
    assert not any(replay for _, replay in seen.order)
    assert [value for value, _ in seen.order[:1_500]] == [f"r{i}" for i in range(1_500)]


@pytest.mark.parametrize(
    ("assignor", "jumps"),
    [("roundrobin", False), (["fair", "roundrobin"], True)],
    ids=["kafka-protocol-refuses", "fairstream-protocol-jumps"],
)
async def test_a_group_other_clients_can_join_does_not_jump(
    noida: Broker, group_id: str, assignor: str | list[str], jumps: bool
) -> None:
    """On ``range``/``roundrobin`` a plain Kafka consumer may share the group; it
    cannot read the shadow ranges, so a jump could lose the backlog. A fairstream
    protocol chosen first (every member is ours) still jumps."""
    topic = await _topic(noida.bootstrap, 1)
    records = _values("r", 1, 1_500)
    await produce(noida.bootstrap, topic, records)
    seen = Seen()
    app = _app(noida, group_id, topic, seen, assignor=assignor)

    with capture_logs() as logs:
        async with app:
            with anyio.fail_after(60):
                await seen.wait_for(_names(records))

    refused = [e["reason"] for e in logs if e["event"] == "parallel_rebalance_refused"]
    started = [e for e in logs if e["event"] == "parallel_rebalance_started"]
    if jumps:
        assert (refused, len(started)) == ([], 1)
        assert any(replay for _, replay in seen.order)
    else:
        assert (refused, started) == (["shared_protocol"], [])
        assert not any(replay for _, replay in seen.order)
        assert [value for value, _ in seen.order] == [f"r{i}" for i in range(1_500)]


@pytest.mark.parametrize(
    "failure",
    [None, RuntimeError("the cluster is busy"), HandoffFailed(5_000)],
    ids=["handed-off", "handoff-fails", "handoff-fails-outside-its-range"],
)
async def test_large_ranges_go_to_the_shadow_handoff(
    noida: Broker, group_id: str, failure: Exception | None
) -> None:
    """A failure that does not say where inside the range it stopped (any exception
    but a ``HandoffFailed`` in the range) leaves the whole range to the shadow."""
    fails = failure is not None
    topic = await _topic(noida.bootstrap, 1)
    backlog = _values("b", 1, 1_000)
    await produce(noida.bootstrap, topic, backlog)
    calls: list[tuple[str, int, OffsetRange]] = []

    def handoff(topic: str, partition: int, shadow: OffsetRange) -> None:
        calls.append((topic, partition, shadow))
        if failure is not None:
            raise failure

    seen = Seen()
    app = _app(
        noida,
        group_id,
        topic,
        seen,
        threshold=100,
        handoff=handoff,
    )
    live = _values("l", 1, 50)
    async with app:
        with anyio.fail_after(30):
            await app.wait_ready()
        await produce(noida.bootstrap, topic, live)
        expected = _names(live) | (_names(backlog) if fails else set())
        with anyio.fail_after(30):
            await seen.wait_for(expected)
        await _wait_commits(noida.bootstrap, group_id, topic, [(1_050, [])])

    assert calls == [(topic, 0, OffsetRange(0, 1_000))]
    replayed = {value for value, replay in seen.order if replay}
    assert replayed == (_names(backlog) if fails else set())


async def test_shadow_stopped_mid_replay_leaves_only_its_unhandled_remainder(
    noida: Broker, group_id: str
) -> None:
    topic = await _topic(noida.bootstrap, 1)
    backlog = _values("b", 1, 2_000)
    await produce(noida.bootstrap, topic, backlog)
    seen = Seen()

    async with _app(noida, group_id, topic, seen, name="first", replay_delay=0.002) as first:
        with anyio.fail_after(30):
            await first.wait_ready()
            while seen.replayed_by["first"] < 300:
                await seen.changed.wait()
    # The member left mid-replay: its last commit clipped the range at its first
    # unhandled record, so the next owner owes only the rest.
    rest = seen.replayed_by["first"]
    assert rest < 2_000, "the shadow finished before the member left"
    assert (await _commits(noida.bootstrap, group_id, topic, 1))[0] == (
        2_000,
        [OffsetRange(rest, 2_000)],
    )

    # The same static member id: noida keeps a static member that left (see README).
    with capture_logs() as logs:
        async with _app(noida, group_id, topic, seen, name="first"):
            with anyio.fail_after(60):
                await seen.wait_for(_names(backlog))
            await _wait_commits(noida.bootstrap, group_id, topic, [(2_000, [])])

    started = [e["ranges"] for e in logs if e["event"] == "shadow_started"]
    assert started == [[[rest, 2_000]]]
    assert seen.replayed_by["first"] == 2_000
    assert max(seen.values.values()) == 1, "a backlog record was handled twice"


async def test_shadow_revoked_by_a_rebalance_resumes_where_its_handled_records_end(
    noida: Broker, group_id: str
) -> None:
    topic = await _topic(noida.bootstrap, 1)
    other = await _topic(noida.bootstrap, 1)
    backlog = _values("b", 1, 2_000)
    await produce(noida.bootstrap, topic, backlog)
    seen = Seen()

    with capture_logs() as logs:
        async with _app(noida, group_id, topic, seen, name="first", replay_delay=0.002) as first:
            with anyio.fail_after(30):
                await first.wait_ready()
                while seen.replayed_by["first"] < 300:
                    await seen.changed.wait()
            # A member of another topic joins: the group rebalances, the shadow is
            # revoked mid-replay (noida refuses the commit racing the rebalance) and
            # the partition comes back.
            async with _app(noida, group_id, other, Seen(), name="second") as second:
                with anyio.fail_after(30):
                    await second.wait_ready()
                with anyio.fail_after(60):
                    await seen.wait_for(_names(backlog))
                await _wait_commits(noida.bootstrap, group_id, topic, [(2_000, [])])

    started = [e["ranges"] for e in logs if e["event"] == "shadow_started"]
    stopped = [e["shadow"] for e in logs if e["event"] == "shadow_stopped"]
    assert len(started) == 2 and len(stopped) == 1, "the shadow was not revoked mid-replay"
    assert started[1] == stopped[0], "the shadow did not resume where its handled records end"
    twice = sorted((v for v, n in seen.values.items() if n > 1), key=lambda v: int(v[1:]))
    assert not twice, f"{len(twice)} backlog records handled twice, from {twice[0]}"
