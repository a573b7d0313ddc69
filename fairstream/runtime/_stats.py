"""Counters for ``app.stats()`` and the Prometheus text format.

Counting is per slice (one add per partition per dispatch), never per record.
Rates come from samples taken by the engine's commit loop, so reading stats
costs nothing on the hot path.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from fairstream.runtime._record import TP

__all__ = [
    "HANDLER_BUCKETS",
    "OLDEST_IN_FLIGHT_HELP",
    "TOTALS",
    "AppStats",
    "HandlerLatency",
    "Histogram",
    "MetricFamily",
    "PartitionStats",
    "StatsRecorder",
    "metric_families",
    "prometheus_text",
]

HANDLER_BUCKETS = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0)
"""Upper bounds (seconds) of the handler-time histogram; ``+Inf`` is implied."""


@dataclass(slots=True)
class _Counters:
    handled: int = 0
    dead_lettered: int = 0
    busy_seconds: float = 0.0
    samples: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=16))


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionStats:
    """One assigned partition, as seen by this member."""

    topic: str
    partition: int
    lag: int | None
    queue_depth: int
    paused: bool
    handled: int
    dead_lettered: int
    handled_per_second: float
    mean_handler_ms: float


@dataclass(frozen=True, slots=True, kw_only=True)
class HandlerLatency:
    """Handler seconds per record as a histogram: ``counts[i]`` records took at most
    ``buckets[i]`` (cumulative, like Prometheus's ``le``); ``count`` and ``sum`` of all.

    Timed per slice (one clock read per partition per dispatch, never per record): a
    slice's records are each counted at the slice's mean, and a batch handler's
    records at the dispatch time divided among them.
    """

    buckets: tuple[float, ...] = HANDLER_BUCKETS
    counts: tuple[int, ...] = (0,) * len(HANDLER_BUCKETS)
    count: int = 0
    sum: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class AppStats:
    """A snapshot of the app: its state, every partition it owns, and app-wide totals.

    The totals count since the app was created, partitions it no longer owns included:
    handler ``retries``, records ``dead_letters`` (published to a dead-letter topic) and
    ``records_skipped`` (``on_error='skip'``), ``records_skipped_by_retention`` (deleted
    by retention before the group read them, found when a partition was assigned),
    ``commits`` and ``commit_failures``, ``rebalances`` (assignments received) and
    ``consumer_rebuilds``. ``oldest_in_flight_seconds`` is how long the oldest record
    in hand has been in its handler (0.0 when none is; docs, "Embedding in a web
    service").
    ``protocol`` is the assignment protocol the group chose at
    the last assignment (``fairstream-lag``, or ``roundrobin`` while members of other
    clients share the group; docs, "Migrating an existing group"), ``None`` before
    one and on the in-memory broker.
    """

    group_id: str
    member_id: str | None
    state: str
    buffered_records: int
    buffered_bytes: int
    partitions: tuple[PartitionStats, ...]
    protocol: str | None = None
    retries: int = 0
    dead_letters: int = 0
    records_skipped: int = 0
    records_skipped_by_retention: int = 0
    commits: int = 0
    commit_failures: int = 0
    rebalances: int = 0
    consumer_rebuilds: int = 0
    handler_latency: HandlerLatency = field(default_factory=HandlerLatency)
    oldest_in_flight_seconds: float = 0.0

    @classmethod
    def created(cls, group_id: str) -> AppStats:
        """The stats of an app that has not started: no member, nothing owned."""
        return cls(
            group_id=group_id,
            member_id=None,
            state="created",
            buffered_records=0,
            buffered_bytes=0,
            partitions=(),
        )

    @property
    def handled(self) -> int:
        return sum(p.handled for p in self.partitions)

    @property
    def lag(self) -> int:
        return sum(p.lag or 0 for p in self.partitions)


class StatsRecorder:
    """Accumulates per-partition counters; the engine reads them into ``AppStats``."""

    def __init__(self) -> None:
        self._counters: dict[TP, _Counters] = {}
        self.total_handled = 0
        self.retries = 0
        self.dead_letters = 0
        self.records_skipped = 0
        self.records_skipped_by_retention = 0
        self.commits = 0
        self.commit_failures = 0
        self.rebalances = 0
        self._buckets = [0] * (len(HANDLER_BUCKETS) + 1)  # the last one is +Inf
        self._handler_seconds = 0.0

    def _of(self, tp: TP) -> _Counters:
        counters = self._counters.get(tp)
        if counters is None:
            counters = self._counters[tp] = _Counters()
        return counters

    def handled(self, tp: TP, count: int, seconds: float) -> None:
        counters = self._of(tp)
        counters.handled += count
        counters.busy_seconds += seconds
        self.total_handled += count
        if count:
            self._buckets[bisect_left(HANDLER_BUCKETS, seconds / count)] += count
            self._handler_seconds += seconds

    def dead_lettered(self, tp: TP) -> None:
        """A record of ``tp`` failed every attempt and was published to its dead-letter topic."""
        self._of(tp).dead_lettered += 1
        self.dead_letters += 1

    def skipped(self, tp: TP) -> None:
        """A record of ``tp`` failed every attempt and was dropped (``on_error='skip'``)."""
        self._of(tp).dead_lettered += 1
        self.records_skipped += 1

    def handler_latency(self) -> HandlerLatency:
        cumulative, total = [], 0
        for count in self._buckets[:-1]:
            total += count
            cumulative.append(total)
        return HandlerLatency(
            counts=tuple(cumulative),
            count=total + self._buckets[-1],
            sum=self._handler_seconds,
        )

    def sample(self, now: float | None = None) -> None:
        """Remember current totals so that rates can be computed later."""
        now = time.monotonic() if now is None else now
        for counters in self._counters.values():
            counters.samples.append((now, counters.handled))

    def partition(
        self, tp: TP, *, lag: int | None, queue_depth: int, paused: bool
    ) -> PartitionStats:
        counters = self._of(tp)
        rate = 0.0
        if len(counters.samples) >= 2:
            (t0, n0), (t1, n1) = counters.samples[0], counters.samples[-1]
            rate = (n1 - n0) / (t1 - t0) if t1 > t0 else 0.0
        mean_ms = 1000 * counters.busy_seconds / counters.handled if counters.handled else 0.0
        return PartitionStats(
            topic=tp[0],
            partition=tp[1],
            lag=lag,
            queue_depth=queue_depth,
            paused=paused,
            handled=counters.handled,
            dead_lettered=counters.dead_lettered,
            handled_per_second=rate,
            mean_handler_ms=mean_ms,
        )

    def forget(self, tps: set[TP]) -> None:
        for tp in tps:
            self._counters.pop(tp, None)


MetricKind = Literal["gauge", "counter", "histogram"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Histogram:
    """One histogram sample: ``(le, cumulative count)`` per bucket, ``+Inf`` last."""

    buckets: tuple[tuple[str, float], ...]
    sum: float

    @property
    def count(self) -> float:
        return self.buckets[-1][1]


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricFamily:
    """One metric as both expositions serve it: ``name`` (a counter's without
    ``_total``), kind, help, label names and one sample per label-value tuple."""

    name: str
    kind: MetricKind
    help: str
    labels: tuple[str, ...]
    samples: tuple[tuple[tuple[str, ...], float | Histogram], ...]


_PARTITION_METRICS: tuple[tuple[str, str, MetricKind, str], ...] = (
    ("lag", "lag", "gauge", "records between the committed watermark and the end offset"),
    ("queue_depth", "queue_depth", "gauge", "records fetched and waiting for a handler"),
    ("handled", "handled", "counter", "records handled (including dead-lettered and skipped)"),
    (
        "dead_lettered",
        "dead_lettered",
        "counter",
        "records that failed every attempt (dead-lettered or skipped)",
    ),
)
"""Per-partition families: name after ``fairstream_partition_``, PartitionStats
field, kind, help."""


def metric_families(stats: AppStats) -> list[MetricFamily]:
    """The one list of metrics ``/metrics`` serves, with or without ``prometheus_client``.

    :func:`prometheus_text` renders it by hand and ``fairstream.prometheus`` through
    ``prometheus_client``; a metric added here reaches both, with the same name,
    type and labels (tests/runtime/test_metrics_parity.py compares the two).
    """
    group = stats.group_id
    families = [
        MetricFamily(
            name=f"fairstream_partition_{name}",
            kind=kind,
            help=doc,
            labels=("group_id", "topic", "partition"),
            samples=tuple(
                ((group, p.topic, str(p.partition)), value)
                for p in stats.partitions
                if (value := getattr(p, field)) is not None
            ),
        )
        for name, field, kind, doc in _PARTITION_METRICS
    ]
    app_wide: list[tuple[str, MetricKind, str, float]] = [
        (
            "up",
            "gauge",
            "1 when the consumer is running and has joined its group",
            float(stats.state == "running"),
        ),
        (
            "buffered_records",
            "gauge",
            "records fetched and not yet handled",
            float(stats.buffered_records),
        ),
        (
            "oldest_in_flight_seconds",
            "gauge",
            OLDEST_IN_FLIGHT_HELP,
            stats.oldest_in_flight_seconds,
        ),
        *((name, "counter", doc, float(getattr(stats, name))) for name, doc in TOTALS),
    ]
    families += [
        MetricFamily(
            name=f"fairstream_{name}",
            kind=kind,
            help=doc,
            labels=("group_id",),
            samples=(((group,), value),),
        )
        for name, kind, doc, value in app_wide
    ]
    latency = stats.handler_latency
    buckets = tuple(
        (repr(bound), float(count))
        for bound, count in zip(latency.buckets, latency.counts, strict=True)
    )
    families.append(
        MetricFamily(
            name="fairstream_handler_seconds",
            kind="histogram",
            help="handler time per record (a slice's mean; a batch's time shared by its records)",
            labels=("group_id",),
            samples=(
                (
                    (group,),
                    Histogram(buckets=(*buckets, ("+Inf", float(latency.count))), sum=latency.sum),
                ),
            ),
        )
    )
    return families


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(names: Sequence[str], values: Sequence[str]) -> str:
    """``{a="1",b="2"}``, sorted by name as ``prometheus_client`` writes them."""
    pairs = ",".join(f'{n}="{_escape(v)}"' for n, v in sorted(zip(names, values, strict=True)))
    return f"{{{pairs}}}"


def prometheus_text(stats: AppStats) -> str:
    """The Prometheus text exposition (version 0.0.4) of :func:`metric_families`,
    without ``prometheus_client``."""
    lines: list[str] = []
    for family in metric_families(stats):
        exposed = family.name + ("_total" if family.kind == "counter" else "")
        lines.append(f"# HELP {exposed} {family.help}")
        lines.append(f"# TYPE {exposed} {family.kind}")
        for values, value in family.samples:
            if isinstance(value, Histogram):
                for le, count in value.buckets:
                    labels = _labels((*family.labels, "le"), (*values, le))
                    lines.append(f"{family.name}_bucket{labels} {count!r}")
                labels = _labels(family.labels, values)
                lines.append(f"{family.name}_count{labels} {value.count!r}")
                lines.append(f"{family.name}_sum{labels} {value.sum!r}")
            else:
                lines.append(f"{exposed}{_labels(family.labels, values)} {float(value)!r}")
    return "\n".join(lines) + "\n"


OLDEST_IN_FLIGHT_HELP = "seconds the oldest record in hand has been in its handler (0: none)"
"""Help of the ``fairstream_oldest_in_flight_seconds`` gauge, for either exposition."""

TOTALS = (
    ("retries", "handler calls repeated after a failure"),
    ("dead_letters", "records published to a dead-letter topic"),
    ("records_skipped", "records dropped after failing every attempt (on_error='skip')"),
    (
        "records_skipped_by_retention",
        "records deleted by retention before the group read them",
    ),
    ("commits", "offset commits the broker accepted"),
    ("commit_failures", "offset commits the broker refused (retried later)"),
    ("rebalances", "partition assignments received"),
    ("consumer_rebuilds", "Kafka consumers rebuilt after a fatal fetch error"),
)
"""App-wide counters of :class:`AppStats`: name and help, for either exposition."""
