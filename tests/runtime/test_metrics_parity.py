"""One metrics set: ``/metrics`` has the same families with or without prometheus_client.

``app.metrics_text()`` (no dependency) and ``fairstream.prometheus`` render one
snapshot; parsed back, every family must match in name, type, help and samples
(names, labels, values). Nothing here lists the metrics: a family added to either
exposition and not the other fails the comparison.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("prometheus_client", reason="the prometheus extra is not installed")

from prometheus_client.parser import text_string_to_metric_families

from fairstream import App, DeadLetterPolicy, Record, RetryPolicy
from fairstream.prometheus import metrics_text
from fairstream.runtime._stats import AppStats
from fairstream.testing import MemoryBroker

OBSERVABILITY = Path(__file__).parents[2] / "docs" / "operating" / "observability.md"


def _families(text: str) -> dict[str, tuple[str, str, list[tuple[str, Any, float]]]]:
    """name -> (type, help, sorted samples) of a Prometheus text exposition."""
    return {
        family.name: (
            family.type,
            family.documentation,
            sorted((s.name, sorted(s.labels.items()), s.value) for s in family.samples),
        )
        for family in text_string_to_metric_families(text)
    }


async def _snapshot(group_id: str, topic: str) -> tuple[App, AppStats]:
    """An app's stats after it handled, retried, skipped and dead-lettered records."""
    app = App(group_id=group_id, retry=RetryPolicy(attempts=2, backoff=0))

    @app.subscriber(topic)
    async def handle(record: Record[bytes]) -> None:
        if record.value == b"bad":
            raise ValueError("bad record")

    @app.subscriber("skips", dead_letter=DeadLetterPolicy(on_error="skip"))
    async def skip(record: Record[bytes]) -> None:
        raise ValueError("always")

    async with MemoryBroker().run(app, partitions=3) as broker:
        for n in range(9):
            await broker.publish(topic, b"bad" if n == 4 else b"ok", key=b"%d" % n)
        await broker.publish("skips", b"x")
        with anyio.fail_after(10):
            await broker.drain(app)
        return app, app.stats()


@pytest.mark.parametrize(
    ("group_id", "topic"),
    # Kafka allows any group id (a topic name has no quote or backslash): its label
    # value is escaped alike by both.
    [("billing", "orders"), ('bill"ing\\\n', "orders")],
    ids=["plain", "quotes-backslashes-newlines"],
)
async def test_both_expositions_serve_the_same_families(
    monkeypatch: pytest.MonkeyPatch, group_id: str, topic: str
) -> None:
    app, stats = await _snapshot(group_id, topic)
    monkeypatch.setattr(app, "stats", lambda: stats)  # one snapshot for both renderers
    plain, client = _families(app.metrics_text()), _families(metrics_text(app))
    assert plain == client
    # What the comparison covered: every kind, and samples that are not all zero.
    assert {kind for kind, _, _ in plain.values()} == {"gauge", "counter", "histogram"}
    handled = plain["fairstream_partition_handled"][2]
    assert sum(value for _, _, value in handled) == 10
    assert stats.retries and stats.dead_letters and stats.records_skipped


async def test_the_docs_table_names_every_family() -> None:
    app, _ = await _snapshot("billing", "orders")
    section = OBSERVABILITY.read_text().split("## Metrics (Prometheus)", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"`(fairstream_\w+)`", section))
    exposed = {
        family.name + ("_total" if family.type == "counter" else "")
        for family in text_string_to_metric_families(app.metrics_text())
    }
    assert exposed == documented
