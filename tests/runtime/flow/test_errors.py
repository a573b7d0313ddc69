"""Failing handlers and undecodable records: retried, dead-lettered, never skipped silently."""

from __future__ import annotations

import anyio
import pytest

from fairstream import DeadLetterPolicy, HandlerError, Record, RetryPolicy, SchedulerConfig
from tests.support.backends import Backend

FAST_RETRY = RetryPolicy(attempts=3, backoff=0.01)
QUICK = SchedulerConfig(commit_interval=0.1)


async def test_exception_is_retried_then_dead_lettered_with_headers(
    backend: Backend, group_id: str
) -> None:
    topic = await backend.create_topic(1)
    await backend.produce(topic, [(0, b'{"n": %d}' % i) for i in range(10)])
    app = backend.app(group_id=group_id, retry=FAST_RETRY, scheduler=QUICK)
    attempts: dict[int, int] = {}
    done = anyio.Event()

    @app.subscriber(topic)
    async def handle(record: Record[dict[str, int]]) -> None:
        attempts[record.offset] = attempts.get(record.offset, 0) + 1
        if record.value["n"] == 4:
            raise RuntimeError("cannot handle n=4")
        if record.offset == 9:
            done.set()

    async with app:
        with anyio.fail_after(30):
            await done.wait()

    assert attempts[4] == 3
    assert all(attempts[o] == 1 for o in range(10) if o != 4)
    (dead,) = await backend.read_all(f"{topic}.dlq", 1, expected=1)
    headers = dict(dead.headers)  # type: ignore[attr-defined]
    assert dead.value == b'{"n": 4}'  # type: ignore[attr-defined]
    assert headers["fairstream.error.type"] == b"RuntimeError"
    assert headers["fairstream.error.message"] == b"cannot handle n=4"
    assert headers["fairstream.source.topic"] == topic.encode()
    assert headers["fairstream.source.offset"] == b"4"
    assert headers["fairstream.attempts"] == b"3"
    assert await backend.committed(group_id, topic, 1) == [10]


async def test_poison_records_go_straight_to_the_dead_letter_topic(
    backend: Backend, group_id: str
) -> None:
    topic = await backend.create_topic(1)
    values = [b'{"ok": 1}', b"\xff\xfe not utf-8", b"{not json", b"", None, b'{"ok": 2}']
    await backend.produce(topic, [(0, v) for v in values], key=b"k")
    app = backend.app(group_id=group_id, retry=FAST_RETRY, scheduler=QUICK)
    good: list[object] = []
    calls = 0
    done = anyio.Event()

    @app.subscriber(topic)
    async def handle(record: Record[dict[str, int]]) -> None:
        nonlocal calls
        calls += 1
        good.append(record.value)
        if record.offset == len(values) - 1:
            done.set()

    async with app:
        with anyio.fail_after(30):
            await done.wait()

    # The tombstone (None) decodes to None and reaches the handler; the other three fail.
    assert good == [{"ok": 1}, None, {"ok": 2}]
    assert calls == 3
    dead = await backend.read_all(f"{topic}.dlq", 1, expected=3)
    errors = [dict(d.headers)["fairstream.error.message"] for d in dead]  # type: ignore[attr-defined]
    assert [dict(d.headers)["fairstream.attempts"] for d in dead] == [b"0"] * 3  # type: ignore[attr-defined]
    assert b"not valid UTF-8" in errors[0]
    assert all(b"not valid JSON" in e for e in errors[1:])
    assert await backend.committed(group_id, topic, 1) == [len(values)]


async def test_stop_policy_raises_and_commits_nothing_past_the_failed_record(
    backend: Backend, group_id: str
) -> None:
    topic = await backend.create_topic(1)
    await backend.produce(topic, [(0, str(i).encode()) for i in range(20)])
    app = backend.app(
        group_id=group_id,
        retry=RetryPolicy(attempts=2, backoff=0.01),
        dead_letter=DeadLetterPolicy(on_error="stop"),
        scheduler=SchedulerConfig(commit_interval=0.05, partition_quota=5),
    )

    @app.subscriber(topic)
    async def handle(record: Record[str]) -> None:
        if record.value == "12":
            raise ValueError("bad record 12")

    with anyio.fail_after(30), pytest.raises(HandlerError) as caught:
        await app.run()

    assert (caught.value.topic, caught.value.offset, caught.value.attempts) == (topic, 12, 2)
    assert "fix the handler" in str(caught.value)
    assert await backend.committed(group_id, topic, 1) == [12]
