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
``prometheus_client`` is installed, and ``app.metrics_text()`` when it is not: both
render one list of metrics (``fairstream.runtime._stats.metric_families``), so the
names, types, labels and numbers are the same either way. Without the extra,
importing this module raises ``ModuleNotFoundError`` naming
``pip install 'fairstream[prometheus]'``.
"""

from __future__ import annotations

from collections.abc import Iterator

from fairstream._extras import missing_extra

try:
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
        Metric,
    )
    from prometheus_client.registry import Collector
except ImportError as exc:
    raise missing_extra("prometheus", "fairstream.prometheus", exc) from exc

from fairstream import App
from fairstream.runtime._stats import Histogram, MetricFamily, metric_families

__all__ = ["FairstreamCollector", "metrics_text"]


class FairstreamCollector(Collector):
    """A ``prometheus_client`` collector over one :class:`~fairstream.App`'s stats."""

    def __init__(self, app: App) -> None:
        self.app = app

    def describe(self) -> list[Metric]:
        """Nothing up front: registering does not call ``app.stats()`` before the app runs."""
        return []

    def collect(self) -> Iterator[Metric]:
        for family in metric_families(self.app.stats()):
            yield _metric(family)


def _metric(family: MetricFamily) -> Metric:
    """``family`` as the ``prometheus_client`` metric of its kind."""
    labels = list(family.labels)
    if family.kind == "histogram":
        histogram = HistogramMetricFamily(family.name, family.help, labels=labels)
        for values, value in family.samples:
            assert isinstance(value, Histogram)  # a histogram family holds only those
            histogram.add_metric(list(values), list(value.buckets), sum_value=value.sum)
        return histogram
    kind = CounterMetricFamily if family.kind == "counter" else GaugeMetricFamily
    metric = kind(family.name, family.help, labels=labels)
    for values, value in family.samples:
        assert not isinstance(value, Histogram)
        metric.add_metric(list(values), value)
    return metric


def metrics_text(app: App) -> str:
    """``app``'s metrics in the Prometheus text format, through ``prometheus_client``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FairstreamCollector(app))
    return generate_latest(registry).decode()
