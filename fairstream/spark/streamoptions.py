"""The streaming source's options, by the names of Spark's own Kafka source.

A data engineer who moves a query from ``format("kafka")`` to ``format("fairstream")``
keeps the options they know: ``kafka.bootstrap.servers``, ``subscribe``,
``maxOffsetsPerTrigger``, ``startingOffsets``, ``kafka.<key>``. The consumer group this
source commits to is ``kafka.group.id`` (Spark reads with a group of its own; here the
group is the point, so it is required). fairstream's own options (``admission``,
``parallelCatchUp``, ...) keep their names. The names fairstream used before
(``bootstrap``, ``topics``, ``group_id``, ``maxRecordsPerBatch``) still work for a
release and log ``option_renamed``.

Spark refuses some ``kafka.*`` keys because the source manages them; so does this
one, naming what to use instead. ``groupIdPrefix``, which makes no sense for a source
that commits to a named group, is refused by name too, rather than reported as
unknown or silently ignored.

Pure: no PySpark import, so the rules are tested without a Spark session.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import structlog

from fairstream.errors import ConfigError
from fairstream.spark.cluster import OffsetRetry
from fairstream.spark.offsetspec import End, Start
from fairstream.spark.reading import ReadSettings
from fairstream.spark.streamplan import Admission
from fairstream.spark.subscription import Subscription, subscription

__all__ = [
    "POLL_TIMEOUT",
    "REFUSED",
    "RENAMED",
    "RESERVED",
    "BatchOptions",
    "StreamOptions",
    "offset_retry",
    "positive_number",
    "read_settings",
    "spark_names",
]

log = structlog.get_logger(__name__)

RENAMED = {
    "bootstrap": "kafka.bootstrap.servers",
    "topics": "subscribe",
    "group_id": "kafka.group.id",
    "maxRecordsPerBatch": "maxOffsetsPerTrigger",
}
"""fairstream's former option names and the Spark names that replace them."""

RESERVED = {
    "kafka.auto.offset.reset": "set startingOffsets instead",
    "kafka.enable.auto.commit": "the source commits to the group itself (commitToGroup)",
    "kafka.key.deserializer": "keys are always binary: cast the key column in Spark",
    "kafka.value.deserializer": "values are always binary: cast the value column in Spark",
    "kafka.interceptor.classes": "the readers are librdkafka consumers, which take none",
}
"""``kafka.*`` keys Spark's Kafka source refuses, and why this one does too."""

REFUSED = {
    "groupIdPrefix": (
        "Spark's source reads with a group it generates from this prefix; the fairstream "
        "source commits to a group you name",
        "set kafka.group.id instead",
    ),
}
"""Spark Kafka source options this source refuses, with why and what to do."""

POLL_TIMEOUT = ("kafkaConsumer.pollTimeoutMs", "kafka.consumer.pollTimeoutMs")
"""Spark's executor poll timeout (ms), and the spelling beside the other ``kafka.*``
keys: both set this source's ``stall_timeout``, in ms."""

_OWN = (
    *("kafka.bootstrap.servers", "subscribe", "subscribePattern", "assign", "kafka.group.id"),
    "startingOffsets",
    *("endingOffsets", "endingOffsetsByTimestamp", "endingTimestamp"),
    *("fetchOffset.numRetries", "fetchOffset.retryIntervalMs", *POLL_TIMEOUT),
    *("maxOffsetsPerTrigger", "admission", "parallelCatchUp", "catchUpThreshold"),
    *("catchUpShare", "commitToGroup", "maxTasks", "stall_timeout", "batch_size", "handler"),
    "includeHeaders",
    "failOnDataLoss",
    *("minOffsetsPerTrigger", "maxTriggerDelay", "minPartitions"),
    *("startingOffsetsByTimestamp", "startingTimestamp", "startingOffsetsByTimestampStrategy"),
)
_KNOWN = frozenset(name.lower() for name in [*_OWN, *RENAMED, "path"])
"""Spark hands options over lower-cased; ``path`` is what ``load(path)`` sets."""


def spark_names(options: Mapping[str, str]) -> dict[str, str]:
    """``options`` lower-cased, with former names replaced by Spark's, checked.

    :raises ConfigError: an unknown, reserved or refused option, or one given under
        both its former and its Spark name.
    """
    given = {key.lower(): str(value) for key, value in options.items()}
    refused = {name.lower(): name for name in REFUSED}
    for key, value in given.items():
        if key in RESERVED:
            raise ConfigError(key, value, "not supported by the fairstream source", RESERVED[key])
        if key in refused:
            raise ConfigError(refused[key], value, *REFUSED[refused[key]])
        if key not in _KNOWN and not key.startswith("kafka."):
            raise ConfigError(key, value, "unknown option of the fairstream source", _hint())
    for old, new in RENAMED.items():
        if old.lower() not in given:
            continue
        if new.lower() in given:
            raise ConfigError(old, given[old.lower()], f"given beside {new}", f"keep {new} only")
        log.warning("option_renamed", option=old, use=new)
        given[new.lower()] = given.pop(old.lower())
    return given


def _hint() -> str:
    return "known: " + ", ".join(_OWN) + ", kafka.<key>"


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamOptions:
    """The streaming source's options, checked once on the driver."""

    read: ReadSettings
    subscription: Subscription
    group_id: str
    starting: Start = field(default_factory=lambda: Start("committed"))
    max_records: int | None = None
    admission: Admission = field(default_factory=Admission)
    commit_to_group: bool = True
    max_tasks: int = 8
    handler: str | None = None
    include_headers: bool = False
    """Spark's ``includeHeaders``: a ``headers`` column after Spark's others."""
    fail_on_data_loss: bool = True
    """Spark's ``failOnDataLoss``: fail the query when owed records are gone."""
    min_tasks: int = 1
    """Spark's ``minPartitions``: at least this many tasks a batch (records allowing)."""
    min_records: int | None = None
    """Spark's ``minOffsetsPerTrigger``: wait for this many records before a batch..."""
    max_trigger_delay: float = 900.0
    """...but no longer than this many seconds since the last batch (``maxTriggerDelay``)."""
    offset_retry: OffsetRetry = field(default_factory=OffsetRetry)
    """Spark's ``fetchOffset.numRetries`` and ``fetchOffset.retryIntervalMs``."""

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> StreamOptions:
        """:raises ConfigError: an unknown option or a bad value, naming the option."""
        given = spark_names(options)
        for name in _BATCH_ONLY:
            if name.lower() in given:
                raise ConfigError(
                    name, given[name.lower()], "a stream has no end", "use spark.read"
                )
        group_id = given.get("kafka.group.id")
        if not group_id:
            raise ConfigError(
                "kafka.group.id", None, "the source commits to a group and needs one", "e.g. 'etl'"
            )
        return cls(
            read=read_settings(given),
            subscription=subscription(given),
            group_id=group_id,
            starting=_start(given, "committed"),
            max_records=_optional_int(given, "maxOffsetsPerTrigger"),
            admission=Admission(
                mode=cast(Any, given.get("admission") or "fair"),
                parallel_catch_up=_flag(given, "parallelCatchUp", False),
                threshold=_optional_int(given, "catchUpThreshold") or 100_000,
                share=_number(given, "catchUpShare", 0.5),
            ),
            commit_to_group=_flag(given, "commitToGroup", True),
            max_tasks=_optional_int(given, "maxTasks") or 8,
            handler=given.get("handler"),
            include_headers=_flag(given, "includeHeaders", False),
            fail_on_data_loss=_flag(given, "failOnDataLoss", True),
            min_tasks=_optional_int(given, "minPartitions") or 1,
            min_records=_optional_int(given, "minOffsetsPerTrigger"),
            max_trigger_delay=_duration(given, "maxTriggerDelay", 900.0),
            offset_retry=offset_retry(given),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchOptions:
    """``spark.read.format("fairstream")`` with Spark's options: the records between
    ``startingOffsets`` (default earliest) and ``endingOffsets`` (default latest), or a
    start and end by timestamp."""

    read: ReadSettings
    subscription: Subscription
    group_id: str | None = None
    """Only for ``startingOffsets=committed``; a batch read commits nothing."""
    starting: Start = field(default_factory=lambda: Start("earliest"))
    ending: End = field(default_factory=End)
    fail_on_data_loss: bool = True
    max_tasks: int = 8
    min_tasks: int = 1
    include_headers: bool = False
    offset_retry: OffsetRetry = field(default_factory=OffsetRetry)
    """Spark's ``fetchOffset.numRetries`` and ``fetchOffset.retryIntervalMs``."""

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> BatchOptions:
        """:raises ConfigError: an unknown, stream-only or bad option, naming it."""
        given = spark_names(options)
        for name in _STREAM_ONLY:
            if name.lower() in given:
                raise ConfigError(
                    name, given[name.lower()], "only for a stream", "use spark.readStream"
                )
        starting = _start(given, "earliest")
        group_id = given.get("kafka.group.id")
        if starting.offsets == "committed" and not group_id:
            raise ConfigError(
                "startingOffsets", "committed", "needs the group", "set kafka.group.id as well"
            )
        return cls(
            read=read_settings(given),
            subscription=subscription(given),
            group_id=group_id,
            starting=starting,
            ending=End(
                given.get("endingoffsets") or "latest",
                given.get("endingoffsetsbytimestamp"),
                _millis(given, "endingTimestamp"),
            ),
            fail_on_data_loss=_flag(given, "failOnDataLoss", True),
            max_tasks=_optional_int(given, "maxTasks") or 8,
            min_tasks=_optional_int(given, "minPartitions") or 1,
            include_headers=_flag(given, "includeHeaders", False),
            offset_retry=offset_retry(given),
        )


_BATCH_ONLY = ("endingOffsets", "endingOffsetsByTimestamp", "endingTimestamp")

_STREAM_ONLY = (
    *("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay", "admission"),
    *("parallelCatchUp", "catchUpThreshold"),
    *("catchUpShare", "commitToGroup", "handler"),
)


def read_settings(given: Mapping[str, str]) -> ReadSettings:
    """How the executors read, from Spark's option names (lower-cased).

    :raises ConfigError: no brokers, or a bad ``stall_timeout``/``batch_size``.
    """
    bootstrap = given.get("kafka.bootstrap.servers")
    if not bootstrap:
        raise ConfigError("kafka.bootstrap.servers", None, "no brokers given", "e.g. 'host:9092'")
    ours = {"kafka.bootstrap.servers", "kafka.group.id", *(name.lower() for name in POLL_TIMEOUT)}
    return ReadSettings(
        bootstrap=bootstrap,
        stall_timeout=_stall_timeout(given),
        batch_size=int(positive_number(given, "batch_size", 10_000)),
        kafka_config={
            key.removeprefix("kafka."): value
            for key, value in given.items()
            if key.startswith("kafka.") and key not in ours
        },
    )


def _stall_timeout(given: Mapping[str, str]) -> float:
    """Seconds a reader may go without progress: ``stall_timeout``, or Spark's
    ``kafkaConsumer.pollTimeoutMs`` in ms (Spark fails a task whose poll returns
    nothing for that long; so does this source). One of them at most.

    :raises ConfigError: two of them, or a value that is not a positive number.
    """
    named = [name for name in ("stall_timeout", *POLL_TIMEOUT) if name.lower() in given]
    if len(named) > 1:
        value = given[named[1].lower()]
        raise ConfigError(named[1], value, f"given beside {named[0]}", f"keep {named[0]} only")
    if named and named[0] in POLL_TIMEOUT:
        return positive_number(given, named[0], 0) / 1000
    return positive_number(given, "stall_timeout", 30.0)


def offset_retry(given: Mapping[str, str]) -> OffsetRetry:
    """Spark's ``fetchOffset.numRetries`` (attempts, default 3) and
    ``fetchOffset.retryIntervalMs`` (default 10 ms) for the driver's offset reads.

    :raises ConfigError: attempts not a positive integer, or a negative interval.
    """
    attempts = _optional_int(given, "fetchOffset.numRetries") or 3
    interval = _number(given, "fetchOffset.retryIntervalMs", 10)
    if interval < 0:
        raise ConfigError(
            "fetchOffset.retryIntervalMs",
            given["fetchoffset.retryintervalms"],
            "negative",
            "e.g. 10",
        )
    return OffsetRetry(attempts=attempts, interval=interval / 1000)


def _start(given: Mapping[str, str], default: str) -> Start:
    strategy = given.get("startingoffsetsbytimestampstrategy", "error").lower()
    if strategy not in ("error", "latest"):
        raise ConfigError(
            "startingOffsetsByTimestampStrategy", strategy, "unknown strategy", "error or latest"
        )
    return Start(
        given.get("startingoffsets") or default,
        given.get("startingoffsetsbytimestamp"),
        _millis(given, "startingTimestamp"),
        strategy,
    )


def _millis(given: Mapping[str, str], name: str) -> int | None:
    """A time in ms since the epoch (``startingTimestamp``, ``endingTimestamp``)."""
    text = given.get(name.lower())
    try:
        return None if text is None else int(text)
    except ValueError:
        raise ConfigError(
            name, text, "not a time in ms since the epoch", "e.g. 1700000000000"
        ) from None


_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}


def _duration(given: Mapping[str, str], name: str, default: float) -> float:
    """A duration in seconds, written as Spark writes them (``15m``, ``30s``, ``500ms``)."""
    text = given.get(name.lower())
    if text is None:
        return default
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|min|m|h|d)?\s*", text)
    if match is None or float(match[1]) <= 0:
        raise ConfigError(name, text, "not a duration", "e.g. '15m', '30s' or '500ms'")
    return float(match[1]) * _UNITS[match[2] or "s"]


def _optional_int(given: Mapping[str, str], name: str) -> int | None:
    text = given.get(name.lower())
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigError(name, text, "not a positive integer", f"e.g. .option({name!r}, 10000)")
    return value


def positive_number(given: Mapping[str, str], name: str, default: float) -> float:
    """The option ``name`` (looked up lower-cased) as a number above 0, or ``default``."""
    value = _number(given, name, default)
    if value <= 0:
        raise ConfigError(
            name, given.get(name.lower()), "not a positive number", f"e.g. {default:g}"
        )
    return value


def _number(given: Mapping[str, str], name: str, default: float) -> float:
    text = given.get(name.lower())
    if text is None:
        return default
    try:
        return float(text)
    except ValueError:
        raise ConfigError(name, text, "not a number", f"e.g. {default:g}") from None


def _flag(given: Mapping[str, str], name: str, default: bool) -> bool:
    text = given.get(name.lower())
    if text is None:
        return default
    if text.lower() not in ("true", "false"):
        raise ConfigError(name, text, "not a boolean", f".option({name!r}, 'true') or 'false'")
    return text.lower() == "true"
