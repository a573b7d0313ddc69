"""Grouped, frozen configuration objects, validated when built.

``App`` takes a handful of these rather than forty keyword arguments. Each one
raises :class:`~fairstream.errors.ConfigError` naming the bad field, and
:func:`from_env` reads ``FAIRSTREAM_*`` variables once at start-up.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from fairstream._field_checks import check_positive, check_types
from fairstream.errors import ConfigError
from fairstream.ranges import OffsetRange

__all__ = [
    "ConsumerConfig",
    "ParallelRebalance",
    "ProducerConfig",
    "SchedulerConfig",
    "SecurityConfig",
    "ShadowHandoff",
    "from_env",
]

Acks = Literal[0, 1, "all"]
Compression = Literal["gzip", "snappy", "lz4", "zstd"]
OffsetReset = Literal["earliest", "latest"]
Ordering = Literal["partition", "key", "none"]


def _check_types(config: object, prefix: str = "") -> None:
    # This module's names resolve the hints: the public classes say they live in ``fairstream``.
    check_types(config, globals(), prefix)


@dataclass(frozen=True, slots=True, kw_only=True)
class SecurityConfig:
    """TLS and SASL settings passed through to aiokafka.

    ``ssl_cafile`` is the CA bundle that signed the brokers' certificates (the
    system's CAs when ``None``); ``ssl_certfile`` and ``ssl_keyfile`` are the
    client's own certificate and unencrypted key, for brokers that ask for one
    (mutual TLS). The password never appears in ``repr()`` or logs.
    """

    protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None

    def __post_init__(self) -> None:
        _check_types(self, "security.")
        self._check_tls_files()
        if self.protocol.startswith("SASL"):
            if self.sasl_mechanism is None or not self.username or self.password is None:
                raise ConfigError(
                    "security.sasl_mechanism",
                    self.sasl_mechanism,
                    f"{self.protocol} needs sasl_mechanism, username and password",
                    "set all three, or use protocol='SSL' or 'PLAINTEXT'",
                )
        elif self.sasl_mechanism is not None:
            raise ConfigError(
                "security.sasl_mechanism",
                self.sasl_mechanism,
                f"SASL is not used with protocol {self.protocol}",
                "use protocol='SASL_SSL' or 'SASL_PLAINTEXT'",
            )

    def _check_tls_files(self) -> None:
        """Each TLS file exists, the client certificate comes with its key, and none is
        given without TLS (it would be ignored, and the connection left in clear)."""
        files = {
            "ssl_cafile": (self.ssl_cafile, "the CA bundle (PEM) that signed the brokers' certs"),
            "ssl_certfile": (self.ssl_certfile, "the client's certificate (PEM)"),
            "ssl_keyfile": (self.ssl_keyfile, "the client certificate's private key (PEM)"),
        }
        for name, (path, what) in files.items():
            if path is None:
                continue
            if self.protocol not in ("SSL", "SASL_SSL"):
                raise ConfigError(
                    f"security.{name}",
                    path,
                    f"TLS is not used with protocol {self.protocol}",
                    "use protocol='SSL' or 'SASL_SSL'",
                )
            if not os.path.isfile(path):
                raise ConfigError(
                    f"security.{name}", path, "no such file", f"give the path of {what}"
                )
        if (self.ssl_certfile is None) != (self.ssl_keyfile is None):
            raise ConfigError(
                "security.ssl_keyfile" if self.ssl_keyfile is None else "security.ssl_certfile",
                None,
                "a client certificate needs both ssl_certfile and ssl_keyfile",
                "give both, or neither",
            )

    def aiokafka_kwargs(self) -> dict[str, object]:
        """Keyword arguments for aiokafka's consumer, producer and admin client."""
        kwargs: dict[str, object] = {"security_protocol": self.protocol}
        if self.protocol in ("SSL", "SASL_SSL"):
            from aiokafka.helpers import create_ssl_context

            kwargs["ssl_context"] = create_ssl_context(
                cafile=self.ssl_cafile, certfile=self.ssl_certfile, keyfile=self.ssl_keyfile
            )
        if self.sasl_mechanism is not None:
            kwargs["sasl_mechanism"] = self.sasl_mechanism
            kwargs["sasl_plain_username"] = self.username
            kwargs["sasl_plain_password"] = self.password
        return kwargs


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerConfig:
    """Settings passed through to aiokafka's consumer.

    ``metadata_max_age_ms`` is how often the consumer refreshes the cluster's
    metadata, and so how soon it notices partitions added to a topic it reads.
    aiokafka's default is 5 minutes; 30 s here costs one small request per broker
    every 30 s. A partition added to a topic the group already reads starts at its
    earliest offset whatever ``auto_offset_reset`` says, so the records written to
    it before the consumer noticed are not skipped (KAFKA-12478).

    ``leave_group_on_stop`` is for static members (an ``instance_id``), which stay
    in their group when they stop so that a restart takes their partitions back
    without a rebalance: ``True`` makes a stop leave the group (LeaveGroup by
    instance id, KIP-345), so the others take the partitions at once, for a member
    that goes away for good (a scale down). A member without an ``instance_id``
    always leaves.
    """

    auto_offset_reset: OffsetReset = "earliest"
    session_timeout_ms: int = 10_000
    heartbeat_interval_ms: int = 3_000
    max_poll_interval_ms: int = 300_000
    fetch_max_bytes: int = 52_428_800
    max_partition_fetch_bytes: int = 1_048_576
    metadata_max_age_ms: int = 30_000
    client_id: str = "fairstream"
    leave_group_on_stop: bool = False

    def __post_init__(self) -> None:
        _check_types(self)
        for name in (
            "session_timeout_ms",
            "heartbeat_interval_ms",
            "max_poll_interval_ms",
            "fetch_max_bytes",
            "max_partition_fetch_bytes",
            "metadata_max_age_ms",
        ):
            check_positive(name, getattr(self, name))


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerConfig:
    """Settings passed through to aiokafka's producer: dead letters and ``app.publish``.

    The defaults are what Kafka's own producer defaults to since 3.0: ``acks="all"``
    (a send counts once every in-sync replica has it) and idempotence (a send the
    producer retries after a lost connection is written once). A dead-lettered
    record's offset is committed only after that acknowledgement. A broker that
    hands out no producer ids (tansu) gets a producer without idempotence and a
    ``producer_idempotence_unavailable`` warning; ``acks`` still applies.

    ``compression_type`` other than ``"gzip"`` needs ``pip install cramjam``;
    ``request_timeout_ms`` is how long one send waits for the broker before it
    fails (a dead letter is then retried with backoff).
    """

    acks: Acks = "all"
    enable_idempotence: bool = True
    compression_type: Compression | None = None
    linger_ms: int = 0
    max_batch_size: int = 16_384
    request_timeout_ms: int = 40_000

    def __post_init__(self) -> None:
        _check_types(self, "producer.")
        check_positive("producer.linger_ms", self.linger_ms, allow_zero=True)
        check_positive("producer.max_batch_size", self.max_batch_size)
        check_positive("producer.request_timeout_ms", self.request_timeout_ms)
        if self.enable_idempotence and self.acks != "all":
            raise ConfigError(
                "producer.acks",
                self.acks,
                "an idempotent producer needs acks='all'",
                "use acks='all', or enable_idempotence=False",
            )
        if self.compression_type is not None:
            from aiokafka import codec

            if not getattr(codec, f"has_{self.compression_type}")():
                raise ConfigError(
                    "producer.compression_type",
                    self.compression_type,
                    "its compression library is not installed",
                    "run: pip install cramjam (or choose 'gzip', which needs nothing)",
                )

    def aiokafka_kwargs(self, *, idempotent: bool = True) -> dict[str, object]:
        """Keyword arguments for aiokafka's producer; ``idempotent=False`` turns it off."""
        return {
            "acks": self.acks,
            "enable_idempotence": self.enable_idempotence and idempotent,
            "compression_type": self.compression_type,
            "linger_ms": self.linger_ms,
            "max_batch_size": self.max_batch_size,
            "request_timeout_ms": self.request_timeout_ms,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class SchedulerConfig:
    """KIP-387 fair scheduling and backpressure bounds.

    ``partition_quota`` is how many records one partition may contribute to a
    dispatch before the scheduler moves on to the next partition; a partition no
    other ready partition competes with takes what the dispatch has room for. Records are
    pulled from aiokafka only into partition queues below ``queue_target_records``
    and ``queue_target_bytes``, and one pull brings at most what is left under
    ``max_buffered_records`` (the records decoded ahead of the handlers in all
    live queues together), taking from each partition in turn no more than its
    queue has room for: so one backlog partition never takes the whole buffer while
    a slow handler leaves the others idle (``benchmarks/RESULTS.md``,
    "Concurrency"), and partitions the buffer cannot all hold at once take turns in
    it. (MemoryBroker and an aiokafka this fairstream does not know pull an even
    share of the room per partition instead.) A KIP-333 shadow reads into a queue
    of its own, up to ``queue_target_records`` plus one read, so it never takes the
    live pulls' room.
    ``max_buffered_bytes`` bounds the size of all queues, shadows included.

    ``fetch_linger`` is how long a *trickle* (a partition whose last fetch brought
    less than its queue had room for: a live partition fed a few records at a time)
    may wait in aiokafka's buffer while another partition gives records or the
    queues hold a dispatch's worth of work. aiokafka sends a broker no fetch while
    a fresh buffer of it waits, so the next fetch comes later and brings what
    arrived meanwhile. Beside a draining backlog and 1,000 live records a second
    (RESULTS.md, Fairness): 10 ms made a third of the fetches and spent ~5% less CPU
    per backlog record than no wait, for a live p50 of 28 ms instead of 11 (p99 ~50
    ms, the raw loop's ~12,600); 20 ms saved ~1% more, for a p50 of 42 ms. A member
    with nothing else to do takes a trickle at once; 0 always does. It applies where
    pulls take from each partition in turn (aiokafka's own consumer), not to
    MemoryBroker.

    ``commit_timeout`` bounds one commit: aiokafka retries a retriable commit error
    forever (a deleted topic answers UnknownTopicOrPartition to every try), which
    would hold the revoke before a rebalance and the final commit at shutdown. A
    commit that times out is retried by the next periodic commit, except for the
    partitions of topics that no longer exist, which are dropped (``topic_deleted``).

    ``ordering`` is what may run beside what: ``"partition"`` keeps each partition
    in offset order (one record of a partition in flight), ``"key"`` keeps records
    of one key in offset order (records of other keys, also of the same partition,
    run beside them; null keys are ordered per partition), ``"none"`` lets any
    record run beside any other. ``concurrency`` is how many records (dispatches,
    for batch handlers) are in flight at once. Its default, 64, lets every
    partition of a member be in flight at once with ``"partition"``, so partitions
    never wait on each other; with ``"key"`` it is the number of keys handled at
    once. Out of order, each commit carries an *offset map* of the records finished
    above the committed offset, so a new owner skips them; ``offset_map=False``
    commits the plain watermark only (more records repeat after a crash).

    ``shutdown_timeout`` bounds a stop: in-flight handlers get it less 1 s (a tenth
    of it when that is less), and the final commit what is left of it, at most
    ``revoke_timeout``; so a stop while the broker is away still ends on time.

    ``stuck_handler_warning`` is how many seconds a record may stay in hand (its
    handler, retries and dead letter) before a ``handler_stuck`` warning names its
    topic, partition and offset and how long; the warning comes again every five
    times that (every 5 minutes at the default) while the record stays. A scan at
    most a second apart finds such records (nothing is timed per record), so the
    warning may come up to a second late; ``app.health()`` and the
    ``fairstream_oldest_in_flight_seconds`` gauge show the age of the oldest record
    in hand. At least 1 s.

    Small buffers are fast: records are decoded just ahead of their handler and
    die young, so the garbage collector seldom promotes and rescans them. A record
    that waits in the buffer across a young collection is promoted, and one still
    waiting at the next middle-generation collection reaches the oldest generation,
    which every full collection walks: what the collector spends per record grows
    with how many records wait (raising ``max_buffered_records`` from 2,000 to
    4,000 doubled it). Batch handlers over thousands of partitions gain from 1,000
    (one default batch): at 2,048 partitions it promoted a fifth fewer objects a
    record. Against a broker that holds an empty fetch as Kafka does, both sizes
    run the default ordering and batches at or above a raw aiokafka loop's rate
    there; the embedded noida broker answers an empty fetch at once, which made the
    end of a drain dearer with the smaller buffer, so the default stays 2,000
    (``benchmarks/notes/per_record_cost.md``, "The buffer and the garbage
    collector" and "The tail of a drain"). A dispatch holds only buffered records,
    so keep ``max_batch`` at or below ``max_buffered_records``. Since a pull takes
    from each partition in turn, one pull fills the buffer however many partitions
    there are.
    """

    partition_quota: int = 100
    max_batch: int = 1_000
    concurrency: int = 64
    ordering: Ordering = "partition"
    offset_map: bool = True
    queue_target_records: int = 200
    queue_target_bytes: int = 8 * 1024 * 1024
    max_buffered_records: int = 2_000
    max_buffered_bytes: int = 256 * 1024 * 1024
    fetch_linger: float = 0.01
    commit_interval: float = 1.0
    commit_timeout: float = 10.0
    revoke_timeout: float = 10.0
    shutdown_timeout: float = 30.0
    stuck_handler_warning: float = 60.0

    def __post_init__(self) -> None:
        _check_types(self)
        for name in (
            "partition_quota",
            "max_batch",
            "concurrency",
            "queue_target_records",
            "queue_target_bytes",
            "max_buffered_records",
            "max_buffered_bytes",
            "commit_interval",
            "commit_timeout",
        ):
            check_positive(name, getattr(self, name))
        check_positive("fetch_linger", self.fetch_linger, allow_zero=True)
        check_positive("revoke_timeout", self.revoke_timeout, allow_zero=True)
        check_positive("shutdown_timeout", self.shutdown_timeout, allow_zero=True)
        if self.stuck_handler_warning < 1:
            raise ConfigError(
                "stuck_handler_warning",
                self.stuck_handler_warning,
                "must be >= 1 (seconds a record may stay in a handler before a warning)",
            )
        self.check_batch("max_batch", self.max_batch)

    def overridden(
        self, *, max_batch: int | None, ordering: Ordering | None, concurrency: int | None
    ) -> SchedulerConfig:
        """These settings with a subscriber's own (``None`` keeps these), checked alike."""
        return replace(
            self,
            max_batch=self.max_batch if max_batch is None else max_batch,
            ordering=self.ordering if ordering is None else ordering,
            concurrency=self.concurrency if concurrency is None else concurrency,
        )

    def check_batch(self, name: str, max_batch: int) -> None:
        """A dispatch holds only buffered records, so a larger batch could never fill."""
        if max_batch > self.max_buffered_records:
            raise ConfigError(
                name,
                max_batch,
                f"exceeds max_buffered_records={self.max_buffered_records}",
                "raise SchedulerConfig(max_buffered_records=...) to at least max_batch",
            )


ShadowHandoff = (
    Callable[[str, int, OffsetRange], Awaitable[None]] | Callable[[str, int, OffsetRange], None]
)
"""Handles one shadow range elsewhere (e.g. a Spark backfill) and returns when it is done.

Called with ``(topic, partition, range)``; a plain function runs in a worker thread.
Raising :class:`~fairstream.errors.HandoffFailed` (``offset=N``) says the records
below N were handled and the one at N failed: that record goes through the App's
retry and dead-letter policy in process, and the rest of the range is handed off
again. Raising any other exception leaves the whole range to the in-process shadow.
"""


@dataclass(frozen=True, slots=True, kw_only=True)
class ParallelRebalance:
    """KIP-333 parallel rebalance: ``App(parallel_rebalance=ParallelRebalance(...))``.

    A partition assigned with more than ``threshold`` records of lag jumps to its
    end: new records are served at once, and a shadow replays the backlog beside
    them (``record.replay`` set). ``handoff`` handles backlog ranges of more than
    ``handoff_threshold`` records elsewhere, e.g.
    ``fairstream.spark.handoff.spark_shadow_handoff(...)``. ``parallel_rebalance=True``
    means these defaults. Needs ``ack='auto'``: the runtime commits the shadow's
    progress itself.
    """

    threshold: int = 10_000
    handoff: ShadowHandoff | None = None
    handoff_threshold: int = 1_000_000

    def __post_init__(self) -> None:
        _check_types(self, "parallel_rebalance.")
        check_positive("parallel_rebalance.threshold", self.threshold, allow_zero=True)
        check_positive(
            "parallel_rebalance.handoff_threshold", self.handoff_threshold, allow_zero=True
        )


def from_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ``FAIRSTREAM_*`` settings an entry point should apply, read once.

    Returns the recognised keys that are set and not empty, in lower case without
    the prefix, so callers pass them on explicitly instead of reading the
    environment deep inside the engine. Where each is applied (docs,
    "Configuration"): ``bootstrap`` and ``instance_id`` by ``App()`` when not
    given; ``bootstrap``, ``group_id``, ``assignor``, ``log_level`` and
    ``log_format`` by the ``fairstream`` command as its options' defaults.
    """
    env = os.environ if environ is None else environ
    keys = ("BOOTSTRAP", "GROUP_ID", "ASSIGNOR", "INSTANCE_ID", "LOG_LEVEL", "LOG_FORMAT")
    return {key.lower(): env[f"FAIRSTREAM_{key}"] for key in keys if env.get(f"FAIRSTREAM_{key}")}
