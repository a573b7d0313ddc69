"""Key decoding: ``Record[V, K]`` or ``key_decoder=`` beside ``decoder=``."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

from fairstream import App, CallNext, ConfigError, DeadLetterPolicy, Record, RetryPolicy
from tests.support.backends import Backend


class UserKey(BaseModel):
    tenant: str
    user: int


async def test_keys_arrive_decoded_as_the_hint_or_key_decoder_says(
    backend: Backend, group_id: str
) -> None:
    texts, models, custom, raw = [await backend.create_topic(1) for _ in range(4)]
    app = backend.app(group_id=group_id)
    seen: dict[str, Any] = {}
    middleware_saw: list[Any] = []
    done = {topic: anyio.Event() for topic in (texts, models, custom, raw)}

    async def look(message: Any, call_next: CallNext) -> None:
        middleware_saw.append(message.key)
        await call_next(message)

    @app.subscriber(texts, middlewares=[look])
    async def by_text(record: Record[dict[str, int], str]) -> None:
        seen[texts] = (record.key, record.value)
        done[texts].set()

    @app.subscriber(models)
    async def by_model(record: Record[bytes, UserKey]) -> None:
        seen[models] = record.key
        done[models].set()

    @app.subscriber(custom, key_decoder=lambda raw: json.loads(raw or b"null"))
    async def by_decoder(record: Record[str, Any]) -> None:
        seen[custom] = (record.key, record.value)
        done[custom].set()

    @app.subscriber(raw)
    async def as_sent(record: Record[str]) -> None:
        seen[raw] = record.key
        done[raw].set()

    await backend.produce(texts, [(0, b'{"n": 1}')], key="ключ".encode())
    await backend.produce(models, [(0, b"v")], key=b'{"tenant": "acme", "user": 7}')
    await backend.produce(custom, [(0, b"v")], key=b"[1, 2]")
    await backend.produce(raw, [(0, b"v")], key=b"\xff")
    async with app:
        with anyio.fail_after(30):
            for event in done.values():
                await event.wait()
    assert seen[texts] == ("ключ", {"n": 1})
    assert middleware_saw == ["ключ"]  # middlewares see the key the handler sees
    assert seen[models] == UserKey(tenant="acme", user=7)
    assert seen[custom] == ([1, 2], "v")
    assert seen[raw] == b"\xff"


async def test_a_batch_handler_gets_every_key_decoded(backend: Backend, group_id: str) -> None:
    topic = await backend.create_topic(2)
    app = backend.app(group_id=group_id)
    keys: list[str] = []
    done = anyio.Event()

    @app.subscriber(topic, batch=True)
    async def handle(records: list[Record[bytes, str]]) -> None:
        keys.extend(r.key for r in records)
        if len(keys) == 2:
            done.set()

    await backend.produce(topic, [(0, b"a")], key=b"k0")
    await backend.produce(topic, [(1, b"b")], key=b"k1")
    async with app:
        with anyio.fail_after(30):
            await done.wait()
    assert sorted(keys) == ["k0", "k1"]


async def test_a_key_that_does_not_decode_goes_to_the_error_policy(
    backend: Backend, group_id: str
) -> None:
    topic = await backend.create_topic(1)
    app = backend.app(
        group_id=group_id,
        retry=RetryPolicy(attempts=1),
        dead_letter=DeadLetterPolicy(on_error="dead_letter"),
    )
    handled: list[str] = []
    done = anyio.Event()

    @app.subscriber(topic)
    async def handle(record: Record[bytes, str]) -> None:
        handled.append(record.key)
        done.set()

    await backend.produce(topic, [(0, b"bad")], key=b"\xff")
    await backend.produce(topic, [(0, b"good")], key=b"ok")
    async with app:
        with anyio.fail_after(30):
            await done.wait()
            (dead,) = await backend.read_all(f"{topic}.dlq", 1, 1)
    assert handled == ["ok"]
    headers = dict(dead.headers)
    assert (dead.key, dead.value) == (b"\xff", b"bad")  # the dead letter keeps the key as sent
    assert headers["fairstream.error.type"] == b"DecodeError"
    assert headers["fairstream.error.message"].startswith(b"key is not valid UTF-8")


def test_a_key_type_nothing_decodes_is_refused_at_registration() -> None:
    app = App(bootstrap="127.0.0.1:1", group_id="g")
    with pytest.raises(ConfigError, match="cannot decode record keys into"):

        @app.subscriber("orders")
        async def handle(record: Record[bytes, complex]) -> None: ...
