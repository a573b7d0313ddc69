"""A handler's own ``CancelledError`` is a handler failure, not a quiet end of the app."""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import structlog

from fairstream import Record, RetryPolicy, SchedulerConfig
from tests.support.backends import Backend

FAST_RETRY = RetryPolicy(attempts=2, backoff=0.01)


async def _await_a_cancelled_future() -> None:
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    future.cancel()
    await future


async def test_stray_cancelled_error_is_retried_dead_lettered_and_the_app_goes_on(
    backend: Backend, group_id: str
) -> None:
    topic = await backend.create_topic(1)
    await backend.produce(topic, [(0, str(i).encode()) for i in range(20)])
    app = backend.app(
        group_id=group_id, retry=FAST_RETRY, scheduler=SchedulerConfig(commit_interval=0.1)
    )
    attempts: dict[int, int] = {}
    done = anyio.Event()

    @app.subscriber(topic)
    async def handle(record: Record[bytes]) -> None:
        attempts[record.offset] = attempts.get(record.offset, 0) + 1
        if record.offset == 3:
            await _await_a_cancelled_future()
        if record.offset == 19:
            done.set()

    with structlog.testing.capture_logs() as logs:
        async with app:
            with anyio.fail_after(30):
                await done.wait()
    assert attempts[3] == 2
    assert sorted(attempts) == list(range(20))
    (dead,) = await backend.read_all(f"{topic}.dlq", 1, expected=1)
    assert dict(dead.headers)["fairstream.error.type"] == b"HandlerCancelled"
    failed = [e for e in logs if e["event"] == "record_dead_lettered"]
    assert [e["offset"] for e in failed] == [3]
    assert "HandlerCancelled" in failed[0]["error"]
    assert await backend.committed(group_id, topic, 1) == [20]


async def test_stray_cancelled_error_in_a_batch_handler_is_a_failure_too(
    backend: Backend, group_id: str
) -> None:
    topic = await backend.create_topic(1)
    await backend.produce(topic, [(0, str(i).encode()) for i in range(5)])
    app = backend.app(group_id=group_id, retry=FAST_RETRY)
    handled: list[int] = []
    failing: list[int] = []
    tried = anyio.Event()
    later = anyio.Event()

    @app.subscriber(topic, batch=True)
    async def handle(records: list[Record[bytes]]) -> None:
        offsets = [r.offset for r in records]
        if 0 in offsets:
            failing[:] = offsets
            tried.set()
            await _await_a_cancelled_future()
        handled.extend(offsets)
        if 5 in offsets:
            later.set()

    async with app:
        with anyio.fail_after(30):
            await tried.wait()
            for _ in range(300):  # the in-memory kit's reader does not wait
                if len(await _dead(backend, topic, len(failing))) == len(failing):
                    break
                await anyio.sleep(0.1)
            await backend.produce(topic, [(0, b"5")])
            await later.wait()
    dead = await _dead(backend, topic, len(failing))
    assert [dict(r.headers)["fairstream.source.offset"] for r in dead] == [
        str(o).encode() for o in failing
    ]
    assert {dict(r.headers)["fairstream.error.type"] for r in dead} == {b"HandlerCancelled"}
    assert 0 not in handled and 5 in handled
    assert await backend.committed(group_id, topic, 1) == [6]


async def _dead(backend: Backend, topic: str, expected: int) -> list[Any]:
    """The dead letters so far (a real broker's reader waits for ``expected``)."""
    return await backend.read_all(f"{topic}.dlq", 1, expected=expected)
