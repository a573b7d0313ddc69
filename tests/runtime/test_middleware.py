"""Middlewares wrap each handler call: app's outside the subscriber's, retries included."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from fairstream import App, CallNext, ConfigError, DeadLetterPolicy, Record, RetryPolicy
from tests.support.backends import Backend

FAST = RetryPolicy(attempts=3, backoff=0)


def _tracer(events: list[str], name: str) -> Any:
    async def middleware(message: Any, call_next: CallNext) -> None:
        events.append(f"{name}>")
        await call_next(message)
        events.append(f"<{name}")

    return middleware


async def test_app_middlewares_wrap_subscriber_ones_first_outermost(
    backend: Backend, group_id: str
) -> None:
    topic = await backend.create_topic(1)
    events: list[str] = []
    app = backend.app(
        group_id=group_id, middlewares=[_tracer(events, "app1"), _tracer(events, "app2")]
    )
    done = anyio.Event()

    @app.subscriber(topic, middlewares=[_tracer(events, "sub")])
    async def handle(record: Record[bytes]) -> None:
        events.append(f"handler {record.value!r}")
        done.set()

    await backend.produce(topic, [(0, b"a")])
    async with app:
        with anyio.fail_after(30):
            await done.wait()
    assert events == ["app1>", "app2>", "sub>", "handler b'a'", "<sub", "<app2", "<app1"]


async def test_each_retry_passes_through_the_middlewares(backend: Backend, group_id: str) -> None:
    topic = await backend.create_topic(1)
    calls: list[int] = []

    async def count(message: Any, call_next: CallNext) -> None:
        calls.append(message.offset)
        await call_next(message)

    app = backend.app(group_id=group_id, retry=FAST, middlewares=[count])
    done = anyio.Event()
    attempts = 0

    @app.subscriber(topic)
    async def handle(record: Record[bytes]) -> None:
        nonlocal attempts
        attempts += 1
        if attempts < 3:
            raise RuntimeError("flaky")
        done.set()

    await backend.produce(topic, [(0, b"x")])
    async with app:
        with anyio.fail_after(30):
            await done.wait()
    assert calls == [0, 0, 0]


class InvalidOrder(Exception):
    """What the middleware below turns a handler's KeyError into."""


async def test_a_middleware_maps_or_swallows_handler_errors(
    backend: Backend, group_id: str
) -> None:
    topic = await backend.create_topic(1)

    async def map_errors(message: Any, call_next: CallNext) -> None:
        try:
            await call_next(message)
        except KeyError as exc:
            raise InvalidOrder(f"missing {exc}") from exc
        except LookupError:
            pass  # swallowed: the record counts as handled

    app = backend.app(
        group_id=group_id,
        retry=RetryPolicy(attempts=1),
        dead_letter=DeadLetterPolicy(on_error="dead_letter"),
    )
    handled: list[bytes] = []
    done = anyio.Event()

    @app.subscriber(topic, middlewares=[map_errors])
    async def handle(record: Record[bytes]) -> None:
        handled.append(record.value)
        if record.value == b"key":
            raise KeyError("sku")
        if record.value == b"index":
            raise IndexError("ignored")
        if record.value == b"last":
            done.set()

    await backend.produce(topic, [(0, b"key"), (0, b"index"), (0, b"last")])
    async with app:
        with anyio.fail_after(30):
            await done.wait()
    assert handled == [b"key", b"index", b"last"]
    (dead,) = await backend.read_all(f"{topic}.dlq", 1, 1)
    headers = dict(dead.headers)
    assert dead.value == b"key"
    assert headers["fairstream.error.type"] == b"InvalidOrder"
    assert headers["fairstream.error.message"] == b"missing 'sku'"


async def test_a_batch_handler_is_wrapped_once_per_dispatch(
    backend: Backend, group_id: str
) -> None:
    topic = await backend.create_topic(2)
    seen: list[list[bytes]] = []

    async def record_batch(message: Any, call_next: CallNext) -> None:
        assert isinstance(message, list)
        seen.append([r.value for r in message])
        await call_next(message)

    app = backend.app(group_id=group_id, middlewares=[record_batch])
    handled: list[bytes] = []
    done = anyio.Event()

    @app.subscriber(topic, batch=True)
    async def handle(records: list[Record[bytes]]) -> None:
        handled.extend(r.value for r in records)
        if len(handled) == 4:
            done.set()

    await backend.produce(topic, [(0, b"a"), (1, b"b"), (0, b"c"), (1, b"d")])
    async with app:
        with anyio.fail_after(30):
            await done.wait()
    assert sorted(v for batch in seen for v in batch) == [b"a", b"b", b"c", b"d"]
    assert [v for batch in seen for v in batch] == handled


def test_without_middlewares_the_handler_is_called_as_it_is() -> None:
    app = App(bootstrap="127.0.0.1:1", group_id="g")

    @app.subscriber("orders")
    async def handle(record: Record[bytes]) -> None: ...

    assert app.subscribers[0].handler is handle


def test_a_middleware_that_is_not_callable_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"middlewares.*is not callable"):
        App(bootstrap="127.0.0.1:1", group_id="g", middlewares=["tracing"])  # type: ignore[list-item]
    app = App(bootstrap="127.0.0.1:1", group_id="g")
    with pytest.raises(ConfigError, match="is not callable"):

        @app.subscriber("orders", middlewares=[42])  # type: ignore[list-item]
        async def handle(record: Record[bytes]) -> None: ...
