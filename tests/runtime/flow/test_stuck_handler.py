"""A handler that never returns is reported (issue #38, defect 6): before, ``/ready``
stayed 200 and nothing was logged. Now a ``handler_stuck`` warning names the record
and how long, ``/health`` shows the age of the oldest record in hand, and
``/metrics`` a gauge of it."""

from __future__ import annotations

import json
import uuid
from typing import Any

import anyio
import pytest
from structlog.testing import capture_logs

from fairstream import App, ConfigError, Record, SchedulerConfig
from fairstream.logs import RecordSlot
from fairstream.runtime._http import serve_status
from fairstream.runtime.flow._stuck import REPEAT_FACTOR, StuckWatch
from fairstream.testing import free_port
from tests.conftest import Broker
from tests.support.backends import QUICK_JOIN
from tests.support.kafka_helpers import create_topic, produce

WARN_AFTER = 1.0


async def _get(port: int, path: str) -> tuple[int, str]:
    """One real HTTP GET against the status endpoint: (status, body)."""
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        answer = b""
        with anyio.move_on_after(10):
            while True:
                try:
                    answer += await stream.receive()
                except anyio.EndOfStream:
                    break
    head, _, body = answer.decode().partition("\r\n\r\n")
    return int(head.split()[1]), body


def _gauge(text: str) -> float:
    (line,) = [
        line
        for line in text.splitlines()
        if line.startswith("fairstream_oldest_in_flight_seconds{")
    ]
    return float(line.rsplit(" ", 1)[1])


async def _stuck_app(
    broker: Broker, group_id: str, **subscriber: Any
) -> tuple[App, str, anyio.Event, anyio.Event, anyio.Event]:
    """An app whose handler returns at once for offsets 0 and 2 of partition 0 and
    stays in the handler of offset 1 until ``release`` is set (``entered`` says it is
    there); the last event is set once all three were handled."""
    topic = f"stuck-{uuid.uuid4().hex[:10]}"
    await create_topic(broker.bootstrap, topic, 2)
    await produce(broker.bootstrap, topic, [(0, b"quick"), (0, b"stuck"), (0, b"after")])
    app = App(
        bootstrap=broker.bootstrap,
        group_id=group_id,
        instance_id=broker.instance_id(group_id),
        consumer=QUICK_JOIN,
        scheduler=SchedulerConfig(stuck_handler_warning=WARN_AFTER, commit_interval=0.2),
    )
    entered, release, all_handled = anyio.Event(), anyio.Event(), anyio.Event()
    handled: list[Record[bytes]] = []

    async def hold(record: Record[bytes]) -> None:
        if record.value == b"stuck":
            entered.set()
            await release.wait()
        handled.append(record)
        if len(handled) == 3:
            all_handled.set()

    if subscriber.get("batch"):

        @app.subscriber(topic, **subscriber)
        async def handle_batch(records: list[Record[bytes]]) -> None:
            for record in records:
                await hold(record)

    else:

        @app.subscriber(topic, **subscriber)
        async def handle(record: Record[bytes]) -> None:
            await hold(record)

    return app, topic, entered, release, all_handled


async def _warned(logs: list[dict[str, Any]]) -> dict[str, Any]:
    with anyio.fail_after(30):
        while True:
            stuck = [e for e in logs if e["event"] == "handler_stuck"]
            if stuck:
                return stuck[0]
            await anyio.sleep(0.1)


@pytest.mark.parametrize(
    "subscriber",
    [{}, {"ordering": "key"}, {"ordering": "none"}],
    ids=["partition", "key", "none"],
)
async def test_a_record_stuck_in_its_handler_is_warned_about_and_served(
    broker: Broker, group_id: str, subscriber: dict[str, Any]
) -> None:
    app, topic, entered, release, all_handled = await _stuck_app(broker, group_id, **subscriber)
    port = free_port()
    with capture_logs() as logs:
        async with app, anyio.create_task_group() as tasks:
            await tasks.start(
                lambda task_status: serve_status(app, port=port, task_status=task_status)
            )
            with anyio.fail_after(30):
                await entered.wait()
            warning = await _warned(logs)

            assert warning["log_level"] == "warning"
            assert (warning["topic"], warning["partition"], warning["offset"]) == (topic, 0, 1)
            assert warning["seconds"] >= WARN_AFTER
            assert app.health().oldest_in_flight_seconds >= WARN_AFTER
            status, body = await _get(port, "/health")
            assert status == 200
            assert json.loads(body)["oldest_in_flight_seconds"] >= WARN_AFTER
            status, body = await _get(port, "/metrics")
            assert _gauge(body) >= WARN_AFTER
            assert _gauge(app.metrics_text()) >= WARN_AFTER

            release.set()
            with anyio.fail_after(30):
                await all_handled.wait()
            assert app.health().oldest_in_flight_seconds == 0.0
            assert _gauge(app.metrics_text()) == 0.0
            tasks.cancel_scope.cancel()


async def test_a_stuck_batch_handler_is_warned_about_as_its_first_record(
    noida: Broker, group_id: str
) -> None:
    app, topic, entered, release, _ = await _stuck_app(noida, group_id, batch=True)
    with capture_logs() as logs:
        async with app:
            with anyio.fail_after(30):
                await entered.wait()
            warning = await _warned(logs)
            assert warning["topic"] == topic
            assert warning["partition"] == 0
            assert warning["offset"] in (0, 1)  # the batch's first record (0, or 1 alone)
            assert app.health().oldest_in_flight_seconds >= WARN_AFTER
            release.set()


async def test_the_gauge_is_served_through_prometheus_client(noida: Broker, group_id: str) -> None:
    prometheus = pytest.importorskip("fairstream.prometheus", reason="prometheus extra missing")
    app, _, entered, release, _ = await _stuck_app(noida, group_id)
    with capture_logs() as logs:
        async with app:
            with anyio.fail_after(30):
                await entered.wait()
            await _warned(logs)
            assert _gauge(prometheus.metrics_text(app)) >= WARN_AFTER
            release.set()


# --- the scan itself, on slots and a clock of the test's own --------------------------


def _record(offset: int) -> Record[bytes]:
    return Record(
        topic="orders",
        partition=3,
        offset=offset,
        key=None,
        value=b"",
        raw=b"",
        headers=(),
        timestamp=0,
    )


def test_the_scan_warns_once_past_the_limit_then_at_the_slow_repeat() -> None:
    slot = RecordSlot()
    watch = StuckWatch({slot}, warn_after=10.0)
    stuck = _record(7)
    slot.record = stuck
    assert watch.scan(100.0) == []  # first seen: the age counts from here
    assert watch.scan(109.0) == []
    assert watch.oldest(109.5) == 9.5
    assert watch.scan(110.0) == [(stuck, 10.0)]
    assert watch.scan(111.0) == []  # not again at every scan
    repeat = 110.0 + REPEAT_FACTOR * 10.0
    assert watch.scan(repeat - 1) == []
    assert watch.scan(repeat) == [(stuck, repeat - 100.0)]


def test_a_new_record_in_the_slot_starts_a_new_age() -> None:
    slot = RecordSlot()
    watch = StuckWatch({slot}, warn_after=10.0)
    slot.record = _record(1)
    watch.scan(100.0)
    slot.record = _record(2)  # the slice moved on between two scans
    assert watch.oldest(108.0) == 0.0
    assert watch.scan(108.0) == []
    assert watch.scan(117.0) == []
    assert watch.oldest(117.0) == 9.0


def test_slots_that_left_are_forgotten() -> None:
    slots: set[RecordSlot] = set()
    watch = StuckWatch(slots, warn_after=1.0)
    slot = RecordSlot()
    slot.record = _record(1)
    slots.add(slot)
    watch.scan(0.0)
    slots.discard(slot)
    assert watch.scan(5.0) == []
    assert watch.oldest(5.0) == 0.0


@pytest.mark.parametrize("seconds", [0.5, 0, -1])
def test_a_warning_limit_below_one_second_is_refused(seconds: float) -> None:
    with pytest.raises(ConfigError, match=r"stuck_handler_warning=.*must be >= 1"):
        SchedulerConfig(stuck_handler_warning=seconds)


def test_a_warning_limit_of_one_second_or_more_is_accepted() -> None:
    assert SchedulerConfig(stuck_handler_warning=1).stuck_handler_warning == 1
    assert SchedulerConfig().stuck_handler_warning == 60.0
