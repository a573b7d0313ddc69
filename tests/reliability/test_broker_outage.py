"""A broker that goes away for a while and comes back on its data: the app keeps
running, and no record is lost or committed past.

Each test runs its own noida broker (it keeps its log in its data directory; tansu
is memory-only), stops its process for some seconds and starts it again on the same
port and data.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from structlog.testing import capture_logs

from fairstream import App, DeadLetterPolicy, ProducerConfig, Record, RetryPolicy
from fairstream.testing import EmbeddedBroker
from tests.conftest import EXTERNAL
from tests.reliability.checker import summary
from tests.reliability.outage import broker_outage
from tests.support.kafka_helpers import committed, create_topic, produce, read_all

pytestmark = [
    pytest.mark.broker,
    pytest.mark.reliability,
    pytest.mark.skipif(
        EXTERNAL is not None, reason="stops a dedicated embedded noida broker; not for a cluster"
    ),
]


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    data_dir = tmp_path / "noida"
    data_dir.mkdir()
    broker = EmbeddedBroker("noida", data_dir=data_dir).start()
    try:
        yield broker
    finally:
        broker.stop()


async def _logged(logs: list[dict[str, Any]], event: str, wait_limit: float) -> dict[str, Any]:
    """The first ``event`` logged; the app logs from tasks this test cannot await."""
    with anyio.fail_after(wait_limit):
        while True:
            for entry in logs:
                if entry["event"] == event:
                    return entry
            await anyio.sleep(0.05)


async def test_dead_letter_is_retried_through_an_outage_and_committed_after(
    own_broker: EmbeddedBroker,
) -> None:
    """Every record fails; the broker stops while the first one is being dead-lettered.

    The send times out, is retried with backoff until the broker is back, and only
    then does the record count as done: every record reaches the dead-letter topic,
    and the group's offset ends at the partition's end, not before nor past.
    """
    bootstrap = own_broker.bootstrap
    topic = "outage-dlq"
    records = 40
    await create_topic(bootstrap, topic, 2)
    values = ((i % 2, json.dumps({"n": i}).encode()) for i in range(records))
    await produce(bootstrap, topic, values)
    first_failure, broker_down = anyio.Event(), anyio.Event()
    app = App(
        bootstrap=bootstrap,
        group_id="outage-dlq",
        instance_id="outage-dlq-0",
        retry=RetryPolicy(attempts=1),
        dead_letter=DeadLetterPolicy(on_error="dead_letter"),
        producer=ProducerConfig(request_timeout_ms=1_500),
    )

    @app.subscriber(topic)
    async def handle(record: Record[dict[str, int]]) -> None:
        first_failure.set()
        await broker_down.wait()
        raise ValueError(f"record {record.value['n']} is refused")

    with capture_logs() as logs:
        async with app:
            with anyio.fail_after(30):
                await first_failure.wait()
            await anyio.to_thread.run_sync(own_broker.stop_process)
            broker_down.set()
            retry = await _logged(logs, "dead_letter_retry", 60)
            await anyio.to_thread.run_sync(own_broker.start)
            with anyio.fail_after(90):
                dead = await read_all(bootstrap, f"{topic}.dlq", 2, expected=records)
                # The broker holds the commits: no event to wait on, poll it.
                while await committed(bootstrap, "outage-dlq", topic, 2) != [20, 20]:  # noqa: ASYNC110
                    await anyio.sleep(0.2)
            assert app.health().alive
    assert retry["topic"] == topic
    assert sorted(json.loads(d.value)["n"] for d in dead) == list(range(records))  # type: ignore[attr-defined]


async def test_consumer_survives_a_broker_outage_and_ready_follows_it(tmp_path: Path) -> None:
    """The broker is away for 15 s mid-stream: the app keeps running, /ready answers
    503 while it cannot reach the broker and 200 once it is back, nothing is lost."""
    outage = await broker_outage(records=3_000, partitions=3, outage=15, workdir=tmp_path)
    print(summary(outage.result))
    assert outage.result.lost == 0, summary(outage.result)
    assert (outage.ready_before, outage.ready_during, outage.ready_after) == (200, 503, 200)
    assert outage.exit_code == 0, outage.stderr[-2000:]
    assert "Traceback" not in outage.stderr


async def test_sigterm_during_an_outage_exits_and_commits_nothing_unhandled(
    tmp_path: Path,
) -> None:
    """SIGTERM while the broker is away: exit code 0 (within shutdown_timeout plus the
    time to start and close the process, bounded by the wait), and every offset below
    the group's commit was handled; a second process then handles the rest.

    The broker comes back as soon as the process has exited (``outage=0``): it is away
    from before /ready said 503 until after the exit, which is all the SIGTERM is
    tested in; a broker kept away longer only left nobody waiting for it."""
    outage = await broker_outage(
        records=3_000,
        partitions=3,
        outage=0,
        workdir=tmp_path,
        sigterm_during_outage=True,
        shutdown_timeout=5,
    )
    print(summary(outage.result), f"exit after {outage.exit_seconds:.1f} s")
    assert outage.exit_code == 0, outage.stderr[-2000:]
    assert outage.unhandled_below_commit == {}
    assert outage.result.lost == 0, summary(outage.result)
    assert outage.last_exit_code == 0, outage.stderr[-2000:]
    assert "Traceback" not in outage.stderr
