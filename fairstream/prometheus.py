"""Prometheus metrics through ``prometheus_client`` (``pip install 'fairstream[prometheus]'``).

>>> from prometheus_client import REGISTRY
>>> from fairstream.prometheus import FairstreamCollector
>>> REGISTRY.register(FairstreamCollector(app))

The collector reads ``app.stats()`` when Prometheus scrapes, so consuming pays
nothing for it: per partition the lag, queue depth, handled and dead-lettered
records; per app ``fairstream_up``, the buffer, the age of the oldest record in
hand (``fairstream_oldest_in_flight_seconds``), a ``fairstream_handler_seconds``
histogram and counters for retries, dead letters, skipped records, commits, commit
failures, rebalances and consumer rebuilds. Every sample carries ``group_id``.

``fairstream run --http-port`` serves this collector on ``/metrics`` when
``prometheus_client`` is installed, and ``app.metrics_text()`` (the same numbers
without the histogram, no dependency) when it is not.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from fairstream import App
from fairstream.runtime._stats import OLDEST_IN_FLIGHT_HELP, TOTALS

__all__ = ["FairstreamCollector", "metrics_text"]

_PARTITION_LABELS = ["group_id", "topic", "partition"]


class FairstreamCollector(Collector):
    """A ``prometheus_client`` collector over one :class:`~fairstream.App`'s stats."""

    def __init__(self, app: App) -> None:
        self.app = app

    def describe(self) -> list[Metric]:
        """Nothing up front: registering does not call ``app.stats()`` before the app runs."""
        return []

    def collect(self) -> Iterator[Metric]:
        stats = self.app.stats()
        group = stats.group_id
        lag = GaugeMetricFamily(
            "fairstream_partition_lag",
            "records between the committed watermark and the end offset",
            labels=_PARTITION_LABELS,
        )
        depth = GaugeMetricFamily(
            "fairstream_partition_queue_depth",
            "records fetched and waiting for a handler",
            labels=_PARTITION_LABELS,
        )
        handled = CounterMetricFamily(
            "fairstream_partition_handled",
            "records handled (including dead-lettered and skipped)",
            labels=_PARTITION_LABELS,
        )
        failed = CounterMetricFamily(
            "fairstream_partition_dead_lettered",
            "records that failed every attempt (dead-lettered or skipped)",
            labels=_PARTITION_LABELS,
        )
        for p in stats.partitions:
            labels = [group, p.topic, str(p.partition)]
            if p.lag is not None:
                lag.add_metric(labels, p.lag)
            depth.add_metric(labels, p.queue_depth)
            handled.add_metric(labels, p.handled)
            failed.add_metric(labels, p.dead_lettered)
        yield from (lag, depth, handled, failed)

        up = GaugeMetricFamily(
            "fairstream_up",
            "1 when the consumer is running and has joined its group",
            labels=["group_id"],
        )
        up.add_metric([group], int(stats.state == "running"))
        yield up
        buffered = GaugeMetricFamily(
            "fairstream_buffered_records",
            "records fetched and not yet handled",
            labels=["group_id"],
        )
        buffered.add_metric([group], stats.buffered_records)
        yield buffered
        oldest = GaugeMetricFamily(
            "fairstream_oldest_in_flight_seconds", OLDEST_IN_FLIGHT_HELP, labels=["group_id"]
        )
        oldest.add_metric([group], stats.oldest_in_flight_seconds)
        yield oldest
        for name, doc in TOTALS:
            counter = CounterMetricFamily(f"fairstream_{name}", doc, labels=["group_id"])
            counter.add_metric([group], getattr(stats, name))
            yield counter

        latency = stats.handler_latency
        histogram = HistogramMetricFamily(
            "fairstream_handler_seconds",
            "handler time per record (a slice's mean; a batch's time shared by its records)",
            labels=["group_id"],
        )
        buckets = [
            (repr(bound), float(count))
            for bound, count in zip(latency.buckets, latency.counts, strict=True)
        ]
        histogram.add_metric(
            [group], [*buckets, ("+Inf", float(latency.count))], sum_value=latency.sum
        )
        yield histogram


def metrics_text(app: App) -> str:
    """``app``'s metrics in the Prometheus text format, through ``prometheus_client``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FairstreamCollector(app))
    return generate_latest(registry).decode()
