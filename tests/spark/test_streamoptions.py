"""The streaming source's options by Spark's Kafka source names, checked without Spark."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

import pytest
from structlog.testing import capture_logs

from fairstream.errors import ConfigError
from fairstream.spark.cluster import OffsetRetry
from fairstream.spark.offsetspec import End
from fairstream.spark.streamoptions import (
    POLL_TIMEOUT,
    RENAMED,
    RESERVED,
    BatchOptions,
    StreamOptions,
)

SPARK = {
    "kafka.bootstrap.servers": "host:9092",
    "subscribe": "clicks, views",
    "kafka.group.id": "etl",
}


def test_spark_names_configure_the_source() -> None:
    options = StreamOptions.parse(
        {**SPARK, "maxOffsetsPerTrigger": "500", "kafka.security.protocol": "SSL"}
    )
    assert options.read.bootstrap == "host:9092"
    assert options.subscription.topics == ("clicks", "views")
    assert options.group_id == "etl"
    assert options.max_records == 500
    # the group and the brokers are the source's, not librdkafka pass-through for readers
    assert dict(options.read.kafka_config) == {"security.protocol": "SSL"}


def test_names_are_case_insensitive_as_spark_hands_them_over_lower_cased() -> None:
    lowered = {key.lower(): value for key, value in {**SPARK, "maxOffsetsPerTrigger": "7"}.items()}
    assert StreamOptions.parse(lowered).max_records == 7


def test_former_names_still_work_and_say_what_replaces_them() -> None:
    former = {"bootstrap": "h:1", "topics": "t", "group_id": "g", "maxRecordsPerBatch": "9"}
    with capture_logs() as logs:
        options = StreamOptions.parse(former)
    assert (options.read.bootstrap, options.group_id) == ("h:1", "g")
    assert options.subscription.topics == ("t",)
    assert options.max_records == 9
    renamed = {(e["option"], e["use"]) for e in logs if e["event"] == "option_renamed"}
    assert renamed == set(RENAMED.items())


def test_a_former_name_beside_its_spark_name_is_refused() -> None:
    with pytest.raises(ConfigError, match="topics='t': given beside subscribe"):
        StreamOptions.parse({**SPARK, "topics": "t"})


@pytest.mark.parametrize("key", sorted(RESERVED))
def test_spark_reserved_kafka_keys_are_refused_by_name(key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        StreamOptions.parse({**SPARK, key: "x"})
    assert caught.value.field == key
    assert caught.value.hint == RESERVED[key]


def test_auto_offset_reset_points_to_starting_offsets() -> None:
    with pytest.raises(ConfigError, match="set startingOffsets instead"):
        StreamOptions.parse({**SPARK, "kafka.auto.offset.reset": "earliest"})


@pytest.mark.parametrize("parse", [StreamOptions.parse, BatchOptions.parse])
def test_group_id_prefix_is_refused_by_name_for_the_group_it_needs(
    parse: Callable[[Mapping[str, str]], object],
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse({**SPARK, "groupidprefix": "x"})
    assert caught.value.field == "groupIdPrefix"
    assert "commits to a group you name" in caught.value.problem
    assert caught.value.hint == "set kafka.group.id instead"
    assert len(str(caught.value).splitlines()) == 1


@pytest.mark.parametrize("name", POLL_TIMEOUT)
def test_spark_poll_timeout_in_ms_is_the_stall_timeout(name: str) -> None:
    options = StreamOptions.parse({**SPARK, name: "2500"})
    assert options.read.stall_timeout == 2.5
    assert dict(options.read.kafka_config) == {}  # not a librdkafka key
    assert BatchOptions.parse({**SPARK, name: "500"}).read.stall_timeout == 0.5
    assert StreamOptions.parse(SPARK).read.stall_timeout == 30.0


@pytest.mark.parametrize(
    ("given", "field", "problem"),
    [
        ({"kafkaConsumer.pollTimeoutMs": "0"}, "kafkaConsumer.pollTimeoutMs", "not a positive"),
        ({"kafkaConsumer.pollTimeoutMs": "x"}, "kafkaConsumer.pollTimeoutMs", "not a number"),
        (
            {"stall_timeout": "5", "kafkaConsumer.pollTimeoutMs": "9"},
            "kafkaConsumer.pollTimeoutMs",
            "given beside stall_timeout",
        ),
        ({"fetchOffset.numRetries": "0"}, "fetchOffset.numRetries", "not a positive integer"),
        ({"fetchOffset.retryIntervalMs": "-1"}, "fetchOffset.retryIntervalMs", "negative"),
        ({"fetchOffset.retryIntervalMs": "x"}, "fetchOffset.retryIntervalMs", "not a number"),
    ],
)
def test_bad_poll_and_fetch_retry_values_name_their_option(
    given: dict[str, str], field: str, problem: str
) -> None:
    for parse in (StreamOptions.parse, BatchOptions.parse):
        with pytest.raises(ConfigError) as caught:
            parse({**SPARK, **given})
        assert (caught.value.field, caught.value.problem[: len(problem)]) == (field, problem)


def test_fetch_offset_retries_as_spark_counts_them() -> None:
    assert StreamOptions.parse(SPARK).offset_retry == OffsetRetry(attempts=3, interval=0.01)
    given = {"fetchOffset.numRetries": "5", "fetchOffset.retryIntervalMs": "250"}
    assert StreamOptions.parse({**SPARK, **given}).offset_retry == OffsetRetry(
        attempts=5, interval=0.25
    )
    assert BatchOptions.parse({**SPARK, **given}).offset_retry.attempts == 5


@pytest.mark.parametrize(
    ("given", "field"),
    [
        ({"catchUpShare": "abc"}, "catchUpShare"),
        ({"catchUpShare": "1.5"}, "catchUpShare"),
        ({"maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger"),
        ({"stall_timeout": "soon"}, "stall_timeout"),
        ({"commitToGroup": "yes"}, "commitToGroup"),
        ({"spelling": "x"}, "spelling"),
    ],
)
def test_a_bad_value_names_its_option(given: dict[str, str], field: str) -> None:
    with pytest.raises(ConfigError) as caught:
        StreamOptions.parse({**SPARK, **given})
    assert caught.value.field == field


@pytest.mark.parametrize("missing", ["kafka.bootstrap.servers", "subscribe", "kafka.group.id"])
def test_required_options_are_named_by_their_spark_name(missing: str) -> None:
    options = {key: value for key, value in SPARK.items() if key != missing}
    with pytest.raises(ConfigError) as caught:
        StreamOptions.parse(options)
    assert caught.value.field == missing


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("endingOffsets", "latest"),
        ("endingOffsetsByTimestamp", '{"clicks": {"0": 5}}'),
        ("endingTimestamp", "5"),
    ],
)
def test_a_stream_has_no_ending_offsets(name: str, value: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"{name}={value!r}: a stream has no end")):
        StreamOptions.parse({**SPARK, name: value})


def test_a_batch_read_ends_by_timestamp_when_told() -> None:
    by_time = '{"clicks": {"0": 5}}'
    parsed = BatchOptions.parse(
        {**SPARK, "endingTimestamp": "1000", "endingOffsetsByTimestamp": by_time}
    ).ending
    assert parsed == End("latest", by_time, 1000)
    assert parsed.option == ("endingTimestamp", "1000")  # it wins, as in Spark
    assert BatchOptions.parse({**SPARK, "endingOffsetsByTimestamp": by_time}).ending.option == (
        "endingOffsetsByTimestamp",
        by_time,
    )
    with pytest.raises(ConfigError, match="endingTimestamp='soon': not a time in ms"):
        BatchOptions.parse({**SPARK, "endingTimestamp": "soon"})


def test_a_batch_read_refuses_stream_options_and_needs_no_group() -> None:
    batch = BatchOptions.parse({"kafka.bootstrap.servers": "h:1", "subscribe": "t"})
    assert (batch.starting.offsets, batch.ending, batch.group_id) == ("earliest", End(), None)
    with pytest.raises(ConfigError, match="maxOffsetsPerTrigger='5': only for a stream"):
        BatchOptions.parse({**SPARK, "maxOffsetsPerTrigger": "5"})
    with pytest.raises(ConfigError, match="startingOffsets='committed': needs the group"):
        BatchOptions.parse(
            {"kafka.bootstrap.servers": "h:1", "subscribe": "t", "startingOffsets": "committed"}
        )


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({}, "give exactly one of subscribe, subscribePattern, assign"),
        ({"subscribe": "a", "assign": '{"a": [0]}'}, "give exactly one of"),
        ({"subscribePattern": "a("}, "not a regular expression"),
        ({"assign": "[0, 1]"}, "not JSON of partitions per topic"),
        ({"assign": '{"a": []}'}, "names no partitions"),
    ],
)
def test_exactly_one_subscription_and_a_valid_one(given: dict[str, str], message: str) -> None:
    options = {"kafka.bootstrap.servers": "h:1", "kafka.group.id": "g", **given}
    with pytest.raises(ConfigError, match=re.escape(message)):
        StreamOptions.parse(options)


def test_a_pattern_covers_whole_names_and_assign_its_topics() -> None:
    base = {"kafka.bootstrap.servers": "h:1", "kafka.group.id": "g"}
    pattern = StreamOptions.parse({**base, "subscribePattern": "orders-.*"}).subscription
    assert [pattern.covers(t) for t in ("orders-eu", "orders", "x-orders-eu")] == [
        True,
        False,
        False,
    ]
    assigned = StreamOptions.parse({**base, "assign": '{"a": [0, 2], "b": [1]}'}).subscription
    assert assigned.topics == ("a", "b")
    assert assigned.assigned == {"a": frozenset({0, 2}), "b": frozenset({1})}
