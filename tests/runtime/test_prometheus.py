"""Prometheus metrics through prometheus_client (``fairstream[prometheus]``), on a real broker."""

from __future__ import annotations

import uuid

import anyio
import pytest

pytest.importorskip("prometheus_client", reason="the prometheus extra is not installed")

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from fairstream import App, DeadLetterPolicy, Record, RetryPolicy
from fairstream.prometheus import FairstreamCollector
from tests.conftest import Broker
from tests.support.kafka_helpers import create_topic, produce


def _scrape(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(registry).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def test_the_collector_reads_stats_at_scrape_time(noida: Broker, group_id: str) -> None:
    records, skips, dead = (f"t-{uuid.uuid4().hex[:10]}" for _ in range(3))
    for name in (records, skips, dead, f"{dead}.dlq"):
        await create_topic(noida.bootstrap, name, 1)
    app = App(
        bootstrap=noida.bootstrap,
        group_id=group_id,
        instance_id=noida.instance_id(group_id),
        retry=RetryPolicy(attempts=3, backoff=0),
    )
    registry = CollectorRegistry()
    registry.register(FairstreamCollector(app))
    group = (("group_id", group_id),)
    assert _scrape(registry)[("fairstream_up", group)] == 0  # before the app runs
    handled = 0
    done = {name: anyio.Event() for name in (records, skips, dead)}

    @app.subscriber(records)
    async def handle(record: Record[bytes]) -> None:
        nonlocal handled
        handled += 1
        if handled == 6:
            done[records].set()

    # A failing record, then one that succeeds: handled in order, so once the second
    # is, the first was given up (skipped, dead-lettered) and counted.
    @app.subscriber(skips, dead_letter=DeadLetterPolicy(on_error="skip"))
    async def skip(record: Record[bytes]) -> None:
        if record.value != b"ok":
            raise ValueError("always")
        done[skips].set()

    @app.subscriber(dead)
    async def fail(record: Record[bytes]) -> None:
        if record.value != b"ok":
            raise ValueError("always")
        done[dead].set()

    await produce(noida.bootstrap, records, [(0, b"x")] * 6)
    await produce(noida.bootstrap, skips, [(0, b"s"), (0, b"ok")])
    await produce(noida.bootstrap, dead, [(0, b"d"), (0, b"ok")])
    async with app:
        with anyio.fail_after(30):
            for event in done.values():
                await event.wait()
        running = _scrape(registry)
    stopped = _scrape(registry)
    # The dependency-free text carries the same totals.
    assert f'fairstream_retries_total{{group_id="{group_id}"}} 4' in app.metrics_text()

    where = (("group_id", group_id), ("partition", "0"), ("topic", records))
    assert running[("fairstream_up", group)] == 1
    assert running[("fairstream_partition_handled_total", where)] == 6
    assert running[("fairstream_partition_lag", where)] == 0
    assert running[("fairstream_rebalances_total", group)] >= 1
    for totals in (running, stopped):
        assert totals[("fairstream_retries_total", group)] == 4
        assert totals[("fairstream_records_skipped_total", group)] == 1
        assert totals[("fairstream_dead_letters_total", group)] == 1
        assert totals[("fairstream_consumer_rebuilds_total", group)] == 0
        # Every record handled (or given up) is in the histogram once.
        assert totals[("fairstream_handler_seconds_count", group)] == 10
        inf = (*group, ("le", "+Inf"))
        assert totals[("fairstream_handler_seconds_bucket", inf)] == 10
    assert stopped[("fairstream_commits_total", group)] >= 1  # the final commit at least
    assert stopped[("fairstream_commit_failures_total", group)] == 0
