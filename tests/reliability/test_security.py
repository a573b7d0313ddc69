"""SASL and TLS settings: validated when built, passed through to aiokafka, and
the password never printed (reprs, error messages, structlog and aiokafka logs)."""

from __future__ import annotations

import logging
import os
import shutil
import ssl
import subprocess
import sys
import uuid
from pathlib import Path

import anyio
import pytest
import structlog

from fairstream import App, ConfigError, Record, SchedulerConfig, SecurityConfig
from fairstream.runtime._kafka._clients import aiokafka_clients
from tests.conftest import Broker
from tests.support.kafka_helpers import create_topic, produce

pytestmark = pytest.mark.reliability

SECRET = "hunter2-" + uuid.uuid4().hex  # unique, so a hit cannot be a coincidence
REPO = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def ca_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A self-signed CA certificate, made with the openssl command line tool."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a CA certificate")
    where = tmp_path_factory.mktemp("ca")
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-subj", "/CN=fairstream-test-ca", "-keyout", str(where / "ca.key")),
            *("-out", str(where / "ca.pem")),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return where / "ca.pem"


# --- validation ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        pytest.param(
            {"protocol": "TLS"}, "security.protocol='TLS': must be one of 'PLAINTEXT'", id="proto"
        ),
        pytest.param(
            {"protocol": "SASL_SSL", "username": "svc", "password": SECRET},
            "SASL_SSL needs sasl_mechanism, username and password",
            id="no-mechanism",
        ),
        pytest.param(
            {"protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "password": SECRET},
            "SASL_PLAINTEXT needs sasl_mechanism, username and password",
            id="no-username",
        ),
        pytest.param(
            {"protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-256", "username": "svc"},
            "SASL_SSL needs sasl_mechanism, username and password",
            id="no-password",
        ),
        pytest.param(
            {"protocol": "SSL", "sasl_mechanism": "PLAIN"},
            "SASL is not used with protocol SSL",
            id="mechanism-without-sasl",
        ),
    ],
)
def test_inconsistent_security_settings_are_config_errors(
    settings: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        SecurityConfig(**settings)  # type: ignore[arg-type]
    assert message in str(caught.value)
    assert SECRET not in str(caught.value)


def test_unknown_sasl_mechanism_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="sasl_mechanism"):
        SecurityConfig(
            protocol="SASL_SSL",
            sasl_mechanism="PLAINN",  # type: ignore[arg-type]
            username="svc",
            password=SECRET,
        )


def test_missing_ca_file_is_a_config_error(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-ca.pem"
    with pytest.raises(ConfigError, match="ssl_cafile"):
        SecurityConfig(protocol="SSL", ssl_cafile=str(missing))


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        pytest.param(
            {"protocol": "SSL", "ssl_certfile": "{ca}"},
            "security.ssl_keyfile: a client certificate needs both ssl_certfile and ssl_keyfile",
            id="cert-without-key",
        ),
        pytest.param(
            {"protocol": "SASL_SSL", "ssl_keyfile": "{ca}"},
            "security.ssl_certfile: a client certificate needs both",
            id="key-without-cert",
        ),
        pytest.param(
            {"protocol": "SSL", "ssl_certfile": "{ca}", "ssl_keyfile": "{missing}"},
            "security.ssl_keyfile='{missing}': no such file",
            id="missing-key",
        ),
        pytest.param(
            {"ssl_cafile": "{ca}"},
            "security.ssl_cafile='{ca}': TLS is not used with protocol PLAINTEXT",
            id="ca-without-tls",
        ),
        pytest.param(
            {"protocol": "SASL_PLAINTEXT", "ssl_certfile": "{ca}", "ssl_keyfile": "{ca}"},
            "TLS is not used with protocol SASL_PLAINTEXT",
            id="cert-without-tls",
        ),
    ],
)
def test_inconsistent_tls_files_are_config_errors(
    settings: dict[str, str], message: str, ca_file: Path, tmp_path: Path
) -> None:
    paths = {"ca": str(ca_file), "missing": str(tmp_path / "missing.key")}
    with pytest.raises(ConfigError) as caught:
        SecurityConfig(**{k: v.format(**paths) for k, v in settings.items()})  # type: ignore[arg-type]
    assert message.format(**paths) in str(caught.value)


# --- pass-through --------------------------------------------------------------------


async def test_sasl_ssl_settings_reach_every_aiokafka_client(ca_file: Path) -> None:
    security = SecurityConfig(
        protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        username="svc-orders",
        password=SECRET,
        ssl_cafile=str(ca_file),
    )
    app = App(bootstrap="127.0.0.1:1", group_id="g", security=security)

    @app.subscriber("orders")
    async def handle(record: Record[bytes]) -> None: ...

    # The factory App uses by default; nothing connects until start().
    clients = aiokafka_clients(app, list(app.subscribers))
    try:
        consumer_client = clients._consumer._client
        producer_client = clients._producing.producer.client
        for client in (consumer_client, producer_client):
            assert client._security_protocol == "SASL_SSL"
            assert client._sasl_mechanism == "SCRAM-SHA-512"
            assert client._sasl_plain_username == "svc-orders"
            assert client._sasl_plain_password == SECRET
            context = client._ssl_context
            assert isinstance(context, ssl.SSLContext)
            assert context.verify_mode == ssl.CERT_REQUIRED
            # Our CA, and only it, is trusted.
            assert context.cert_store_stats()["x509_ca"] == 1
        # The admin client (dead-letter topics) is built from the same settings.
        assert clients._common["sasl_plain_password"] == SECRET
        assert clients._common["security_protocol"] == "SASL_SSL"
    finally:
        await clients._consumer.stop()
        await clients._producing.producer.stop()
        await clients.aclose()


def test_plaintext_passes_no_tls_or_sasl() -> None:
    assert SecurityConfig().aiokafka_kwargs() == {"security_protocol": "PLAINTEXT"}


# --- secrets stay secret -------------------------------------------------------------


def test_password_is_not_in_any_repr(ca_file: Path) -> None:
    security = SecurityConfig(
        protocol="SASL_SSL",
        sasl_mechanism="PLAIN",
        username="svc-orders",
        password=SECRET,
        ssl_cafile=str(ca_file),
    )
    app = App(bootstrap="127.0.0.1:1", group_id="g", security=security)
    for text in (repr(security), str(security), repr(app), str(app), repr(app.security)):
        assert SECRET not in text
    assert "svc-orders" in repr(security)  # the rest of the settings stay visible


def _cli(bootstrap: str, tmp_path: Path, topic: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "FAIRSTREAM_BOOTSTRAP"}
    env.update(
        {"SINK_PATH": str(tmp_path / "sink"), "SINK_TOPIC": topic, "SINK_SASL_PASSWORD": SECRET}
    )
    return subprocess.run(
        [
            *(sys.executable, "-m", "fairstream", "--log-level", "DEBUG", "run"),
            *("tests.reliability.sink_app:build", "--log-format", "json"),
            *("--bootstrap", bootstrap),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.broker
def test_failed_sasl_run_logs_no_password(tansu: Broker, tmp_path: Path) -> None:
    """tansu refuses SASL: the run fails to connect, logs at DEBUG, exits 2."""
    result = _cli(tansu.bootstrap, tmp_path, "orders")
    assert result.returncode == 2
    assert "UnsupportedSaslMechanism" in result.stderr  # SASL was really attempted
    assert SECRET not in result.stdout + result.stderr


@pytest.mark.broker
def test_sasl_run_that_connects_logs_no_password(noida: Broker, tmp_path: Path) -> None:
    """noida accepts SASL PLAIN: the run logs in, then stops on a missing topic."""
    result = _cli(noida.bootstrap, tmp_path, "no-such-topic-sasl")
    assert result.returncode == 2
    assert "not found on the cluster" in result.stderr
    assert SECRET not in result.stdout + result.stderr


async def _consume_with_sasl(bootstrap: str, group_id: str) -> list[dict[str, object]]:
    """Start, consume 20 records, commit and stop with SASL PLAIN; return structlog events."""
    topic = f"sasl-{uuid.uuid4().hex[:10]}"
    await create_topic(bootstrap, topic, 1)
    await produce(bootstrap, topic, [(0, b"v")] * 20)
    app = App(
        bootstrap=bootstrap,
        group_id=group_id,
        instance_id="sasl-0",
        scheduler=SchedulerConfig(commit_interval=0.1),
        security=SecurityConfig(
            protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", username="svc", password=SECRET
        ),
    )
    done = anyio.Event()

    @app.subscriber(topic)
    async def handle(record: Record[bytes]) -> None:
        if record.offset == 19:
            done.set()

    with structlog.testing.capture_logs() as events:
        async with app:
            with anyio.fail_after(30):
                await done.wait()
    return events


@pytest.mark.broker
async def test_consuming_with_sasl_logs_no_password_in_structlog(
    noida: Broker, group_id: str
) -> None:
    """A whole in-process run with SASL (noida accepts PLAIN): fairstream's own events."""
    events = await _consume_with_sasl(noida.bootstrap, group_id)
    assert any(e["event"] == "consumer_started" for e in events)
    assert SECRET not in repr(events)


@pytest.mark.broker
async def test_consuming_with_sasl_logs_no_password_in_aiokafka_debug_logs(
    noida: Broker, group_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    await _consume_with_sasl(noida.bootstrap, group_id)
    assert "SaslAuthenticate" in caplog.text, "the capture did not see the SASL exchange"
    assert SECRET not in caplog.text
