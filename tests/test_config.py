"""Config objects reject values of the wrong type when built, with one precise line.

Without the check ``SchedulerConfig(concurrency=2.5)`` or ``commit_interval=nan`` were
accepted and failed later, inside the running app (issue #22, defect 10).
"""

from __future__ import annotations

from typing import Any

import pytest
from aiokafka import codec

from fairstream import (
    ConfigError,
    ConsumerConfig,
    DeadLetterPolicy,
    ProducerConfig,
    RetryPolicy,
    SchedulerConfig,
    SecurityConfig,
)

NAN = float("nan")
INF = float("inf")


@pytest.mark.parametrize(
    ("config", "settings", "message"),
    [
        # SchedulerConfig
        pytest.param(
            SchedulerConfig,
            {"concurrency": 2.5},
            "concurrency=2.5: must be an int, not float",
            id="SchedulerConfig-concurrency-type",
        ),
        pytest.param(
            SchedulerConfig,
            {"partition_quota": True},
            "partition_quota=True: must be an int, not bool",
            id="SchedulerConfig-partition_quota-bool",
        ),
        pytest.param(
            SchedulerConfig,
            {"max_batch": "10"},
            "max_batch='10': must be an int, not str",
            id="SchedulerConfig-max_batch-type",
        ),
        pytest.param(
            SchedulerConfig,
            {"commit_interval": NAN},
            "commit_interval=nan: must be a finite number",
            id="SchedulerConfig-commit_interval-nan",
        ),
        pytest.param(
            SchedulerConfig,
            {"shutdown_timeout": INF},
            "shutdown_timeout=inf: must be a finite number",
            id="SchedulerConfig-shutdown_timeout-inf",
        ),
        pytest.param(
            SchedulerConfig,
            {"revoke_timeout": "1"},
            "revoke_timeout='1': must be a number, not str",
            id="SchedulerConfig-revoke_timeout-type",
        ),
        pytest.param(
            SchedulerConfig,
            {"commit_interval": False},
            "commit_interval=False: must be a number, not bool",
            id="SchedulerConfig-commit_interval-bool",
        ),
        # ConsumerConfig
        pytest.param(
            ConsumerConfig,
            {"session_timeout_ms": 10.0},
            "session_timeout_ms=10.0: must be an int, not float",
            id="ConsumerConfig-session_timeout_ms-type",
        ),
        pytest.param(
            ConsumerConfig,
            {"fetch_max_bytes": True},
            "fetch_max_bytes=True: must be an int, not bool",
            id="ConsumerConfig-fetch_max_bytes-bool",
        ),
        pytest.param(
            ConsumerConfig,
            {"auto_offset_reset": "newest"},
            "auto_offset_reset='newest': must be one of 'earliest', 'latest'",
            id="ConsumerConfig-auto_offset_reset-literal",
        ),
        pytest.param(
            ConsumerConfig,
            {"client_id": 7},
            "client_id=7: must be a str, not int",
            id="ConsumerConfig-client_id-type",
        ),
        # ProducerConfig
        pytest.param(
            ProducerConfig,
            {"acks": True},
            "producer.acks=True: must be one of 0, 1, 'all'",
            id="ProducerConfig-acks-bool",
        ),
        pytest.param(
            ProducerConfig,
            {"acks": -1},
            "producer.acks=-1: must be one of 0, 1, 'all'",
            id="ProducerConfig-acks-literal",
        ),
        pytest.param(
            ProducerConfig,
            {"acks": 1},
            "producer.acks=1: an idempotent producer needs acks='all'; use acks='all', or "
            "enable_idempotence=False",
            id="ProducerConfig-acks-idempotence",
        ),
        pytest.param(
            ProducerConfig,
            {"compression_type": "brotli"},
            "producer.compression_type='brotli': must be one of 'gzip', 'snappy', 'lz4', "
            "'zstd' or None",
            id="ProducerConfig-compression_type-literal",
        ),
        pytest.param(
            ProducerConfig,
            {"linger_ms": -5},
            "producer.linger_ms=-5: must be >= 0",
            id="ProducerConfig-linger_ms-negative",
        ),
        pytest.param(
            ProducerConfig,
            {"max_batch_size": 0},
            "producer.max_batch_size=0: must be > 0",
            id="ProducerConfig-max_batch_size-zero",
        ),
        pytest.param(
            ProducerConfig,
            {"enable_idempotence": 1},
            "producer.enable_idempotence=1: must be a bool, not int",
            id="ProducerConfig-enable_idempotence-type",
        ),
        # RetryPolicy
        pytest.param(
            RetryPolicy,
            {"attempts": 3.0},
            "retry.attempts=3.0: must be an int, not float",
            id="RetryPolicy-attempts-type",
        ),
        pytest.param(
            RetryPolicy,
            {"attempts": True},
            "retry.attempts=True: must be an int, not bool",
            id="RetryPolicy-attempts-bool",
        ),
        pytest.param(
            RetryPolicy,
            {"backoff": NAN},
            "retry.backoff=nan: must be a finite number",
            id="RetryPolicy-backoff-nan",
        ),
        pytest.param(
            RetryPolicy,
            {"max_backoff": -INF},
            "retry.max_backoff=-inf: must be a finite number",
            id="RetryPolicy-max_backoff--inf",
        ),
        pytest.param(
            RetryPolicy,
            {"multiplier": None},
            "retry.multiplier: must be a number, not NoneType",
            id="RetryPolicy-multiplier-none",
        ),
        # DeadLetterPolicy
        pytest.param(
            DeadLetterPolicy,
            {"on_error": "ignore"},
            "on_error='ignore': must be one of 'dead_letter', 'skip', 'stop'",
            id="DeadLetterPolicy-on_error-literal",
        ),
        pytest.param(
            DeadLetterPolicy,
            {"topic_suffix": b".dlq"},
            "topic_suffix=b'.dlq': must be a str, not bytes",
            id="DeadLetterPolicy-topic_suffix-type",
        ),
        # SecurityConfig
        pytest.param(
            SecurityConfig,
            {"protocol": "TLS"},
            "security.protocol='TLS': must be one of 'PLAINTEXT', 'SSL'",
            id="SecurityConfig-protocol-literal",
        ),
        pytest.param(
            SecurityConfig,
            {"protocol": "SASL_SSL", "sasl_mechanism": "GSSAPI", "username": "u", "password": "p"},
            "security.sasl_mechanism='GSSAPI': must be one of 'PLAIN', 'SCRAM-SHA-256', "
            "'SCRAM-SHA-512' or None",
            id="SecurityConfig-sasl_mechanism-literal",
        ),
        pytest.param(
            SecurityConfig,
            {"ssl_cafile": 3},
            "security.ssl_cafile=3: must be a str or None",
            id="SecurityConfig-ssl_cafile-type",
        ),
    ],
)
def test_wrong_type_is_a_config_error_when_built(
    config: type[Any], settings: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        config(**settings)
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "build",
    [
        lambda: SchedulerConfig(commit_interval=1, revoke_timeout=0, shutdown_timeout=2),
        lambda: RetryPolicy(backoff=0, multiplier=1, max_backoff=3),
        lambda: SecurityConfig(
            protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", username="u", password="p"
        ),
        lambda: ConsumerConfig(auto_offset_reset="latest", client_id="billing"),
        lambda: DeadLetterPolicy(on_error="skip", topic_suffix=".dead"),
        lambda: ProducerConfig(acks=1, enable_idempotence=False, compression_type="gzip"),
    ],
    ids=["int-for-float", "retry", "security", "consumer", "dead-letter", "producer"],
)
def test_well_typed_values_are_accepted(build: Any) -> None:
    build()


def test_producer_settings_are_what_aiokafka_gets() -> None:
    """Kafka's producer defaults since 3.0, and the user's settings passed as they are."""
    assert ProducerConfig().aiokafka_kwargs() == {
        "acks": "all",
        "enable_idempotence": True,
        "compression_type": None,
        "linger_ms": 0,
        "max_batch_size": 16_384,
        "request_timeout_ms": 40_000,
    }
    chosen = ProducerConfig(compression_type="gzip", linger_ms=20, max_batch_size=65_536)
    assert chosen.aiokafka_kwargs(idempotent=False) == {
        "acks": "all",
        "enable_idempotence": False,
        "compression_type": "gzip",
        "linger_ms": 20,
        "max_batch_size": 65_536,
        "request_timeout_ms": 40_000,
    }


@pytest.mark.skipif(codec.has_zstd(), reason="cramjam is installed here: zstd is available")
def test_a_codec_without_its_library_is_refused_when_built() -> None:
    with pytest.raises(ConfigError, match=r"producer.compression_type='zstd'.*pip install cramjam"):
        ProducerConfig(compression_type="zstd")
