"""A handler cancelled at stop after it published: its transaction is aborted (#41)."""

from __future__ import annotations

import anyio
import pytest

from fairstream import App, Record, SchedulerConfig
from tests.conftest import Broker
from tests.support.kafka_helpers import committed, input_output_topics, produce, read_committed

pytestmark = pytest.mark.broker


async def test_outputs_of_a_handler_cancelled_at_stop_are_aborted(
    noida: Broker, group_id: str
) -> None:
    source, sink = await input_output_topics(noida.bootstrap, "eos-cancel", 1)
    await produce(noida.bootstrap, source, [(0, b"done")])
    app = App(
        group_id=group_id,
        bootstrap=noida.bootstrap,
        processing="exactly_once",
        scheduler=SchedulerConfig(commit_interval=0.1, shutdown_timeout=1.0, max_batch=1),
    )
    published = anyio.Event()

    @app.subscriber(source)
    async def transform(record: Record[bytes]) -> None:
        await app.publish(sink, record.value)
        if record.value == b"hangs":
            published.set()
            await anyio.sleep_forever()

    async with app:
        with anyio.fail_after(30):
            while await committed(noida.bootstrap, group_id, source, 1) != [1]:  # noqa: ASYNC110 - the broker's commit: no event
                await anyio.sleep(0.05)
            await produce(noida.bootstrap, source, [(0, b"hangs")])
            await published.wait()
    # The stop cancelled the second handler after its publish: neither its output
    # nor its offset may commit; the first record's both did.
    assert await read_committed(noida.bootstrap, sink, 1) == [b"done"]
    assert await committed(noida.bootstrap, group_id, source, 1) == [1]
