"""``app.publish``: the app's own producer, usable as soon as ``async with app`` is entered."""

from __future__ import annotations

import anyio
import pytest

from fairstream import ConfigError, Record
from tests.support.backends import Backend


async def test_publish_right_after_entering_the_app_reaches_the_handler(
    backend: Backend, group_id: str
) -> None:
    topic = await backend.create_topic(1)
    app = backend.app(group_id=group_id)
    seen: list[dict[str, int]] = []
    done = anyio.Event()

    @app.subscriber(topic)
    async def handle(record: Record[dict[str, int]]) -> None:
        seen.append(record.value)
        done.set()

    async with app:
        await app.publish(topic, {"n": 1}, key="k")
        with anyio.fail_after(30):
            await done.wait()
    assert seen == [{"n": 1}]
    with pytest.raises(ConfigError, match="is not running"):
        await app.publish(topic, {"n": 2})
