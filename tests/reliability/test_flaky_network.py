"""A network that drops and stalls connections, between the app and a real broker
(``tests.reliability.flaky``: tansu behind a fault proxy it advertises)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from fairstream import DeadLetterPolicy
from tests.conftest import EXTERNAL
from tests.reliability.checker import Sink, check, make_ids, produce_ids, read_sightings, summary
from tests.reliability.flaky import flaky_network, proxied_tansu, sink_app
from tests.support.kafka_helpers import create_topic

pytestmark = [
    pytest.mark.broker,
    pytest.mark.reliability,
    pytest.mark.skipif(
        EXTERNAL is not None, reason="puts a proxy in front of a dedicated embedded broker"
    ),
]


async def test_offsets_read_for_an_assignment_are_retried_when_connections_fail(
    tmp_path: Path,
) -> None:
    """The admin client's first three connections are closed by the network while the
    app reads its committed offsets on assignment (KIP-333's jump decision): the read
    is retried with backoff instead of stopping the app, and every record is handled."""
    async with proxied_tansu() as (proxy, bootstrap):
        topic = f"flaky-{uuid.uuid4().hex[:10]}"
        await create_topic(bootstrap, topic, 3)
        ids = make_ids("assign", 300)
        await produce_ids(bootstrap, topic, ids, 3)
        proxy.refuse("fairstream-admin", 3)
        sink = Sink(tmp_path / "assign.sink", "assign")
        # No dead-letter topic to create: the admin client's first use is the assignment.
        app = sink_app(bootstrap, topic, sink, dead_letter=DeadLetterPolicy(on_error="skip"))
        with capture_logs() as logs:
            async with app:
                await sink.wait_unique(len(ids), 60)
        sink.close()
    retries = [e for e in logs if e["event"] == "assignment_read_retry"]
    assert retries, "the proxy refused no read made for the assignment"
    assert retries[0]["partitions"] == [(topic, p) for p in range(3)]
    result = check("assignment reads", ids, [s.id for s in read_sightings(sink.path)], seconds=0)
    assert result.lost == 0, summary(result)


async def test_no_record_is_lost_while_connections_are_reset_stalled_and_slowed(
    tmp_path: Path,
) -> None:
    """3,000 records handled through added latency, three resets of every connection
    and two blackholes (3 s and 2 s): none lost, and the app never stops."""
    outcome = await flaky_network(records=3_000, partitions=3, workdir=tmp_path)
    print(summary(outcome.result), f"resets={outcome.resets}")
    assert outcome.resets > 0, "no connection was open to reset"
    assert outcome.result.lost == 0, summary(outcome.result)
