"""A fetch error on one partition: that partition waits, the others keep flowing (#16).

tansu behind the fault proxy (``tests.reliability.flaky``), which garbles a marker in
one partition's records on their way to the client, so that partition's record batch
fails aiokafka's CRC check on every fetch - a real corrupted batch, not a mock.
"""

from __future__ import annotations

import uuid
from collections import Counter

import anyio
import pytest
from structlog.testing import capture_logs

from fairstream import App, Record, SchedulerConfig
from tests.conftest import EXTERNAL
from tests.reliability.flaky import proxied_tansu
from tests.support.kafka_helpers import create_topic, produce

pytestmark = [
    pytest.mark.broker,
    pytest.mark.reliability,
    pytest.mark.skipif(
        EXTERNAL is not None, reason="puts a proxy in front of a dedicated embedded broker"
    ),
]

MARKER = b"GARBLE-ME"


async def test_a_corrupt_batch_sets_its_partition_aside_and_the_others_keep_flowing() -> None:
    seen: Counter[tuple[int, str]] = Counter()
    changed = anyio.Event()

    async def wait_for(wanted: set[tuple[int, str]]) -> None:
        nonlocal changed
        while not wanted <= seen.keys():
            changed = anyio.Event()
            await changed.wait()

    async with proxied_tansu() as (proxy, bootstrap):
        topic = f"corrupt-{uuid.uuid4().hex[:10]}"
        await create_topic(bootstrap, topic, 3)
        bad = [(0, f"p0-{i}".encode() + (MARKER if i == 5 else b"")) for i in range(10)]
        first = [(p, f"p{p}-{i}".encode()) for p in (1, 2) for i in range(20)]
        await produce(bootstrap, topic, bad + first)
        proxy.garble = (MARKER, MARKER.lower())
        app = App(
            bootstrap=bootstrap,
            group_id=f"g-corrupt-{uuid.uuid4().hex[:8]}",
            scheduler=SchedulerConfig(commit_interval=0.2),
        )

        @app.subscriber(topic)
        async def handle(record: Record[bytes]) -> None:
            seen[record.partition, record.value.decode()] += 1
            changed.set()

        def names(records: list[tuple[int, bytes]]) -> set[tuple[int, str]]:
            return {(p, value.decode()) for p, value in records}

        with capture_logs() as logs:
            async with app:
                with anyio.fail_after(60):
                    await wait_for(names(first))
                    # Set aside twice: retried with backoff, still failing.
                    while sum(e["event"] == "partition_fetch_failed" for e in logs) < 2:  # noqa: ASYNC110
                        await anyio.sleep(0.1)
                # Records written while partition 0 fails are served too.
                later = [(p, f"p{p}-later-{i}".encode()) for p in (1, 2) for i in range(20)]
                await produce(bootstrap, topic, later)
                with anyio.fail_after(60):
                    await wait_for(names(later))
                assert not any(p == 0 for p, _ in seen), "a record of the corrupt batch passed"
                proxy.garble = None  # the batch reads clean again: partition 0 catches up
                with anyio.fail_after(60):
                    await wait_for(names(bad))

    failed = [e for e in logs if e["event"] == "partition_fetch_failed"]
    assert {(e["topic"], e["partition"]) for e in failed} == {(topic, 0)}
    assert "CorruptRecordException" in failed[0]["reason"]
    assert [e["retry_in"] for e in failed[:2]] == [0.5, 1.0]
    assert seen.keys() == names(bad + first + later)
    assert max(seen.values()) == 1
