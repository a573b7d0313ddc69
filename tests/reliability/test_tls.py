"""TLS for real: an App consumes through a TLS-terminating proxy in front of tansu
(``tests.reliability.tls_proxy``), verifying the broker's certificate, with and
without a client certificate, and a wrong CA stops it with one clear line."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from fairstream import App, BrokerError, Record, SecurityConfig
from tests.conftest import EXTERNAL
from tests.reliability.checker import Sink, check, make_ids, produce_ids, read_sightings, summary
from tests.reliability.flaky import sink_app
from tests.reliability.tls_proxy import (
    Certificates,
    make_certificates,
    missing_tools,
    tls_tansu,
)
from tests.support.kafka_helpers import create_topic

pytestmark = [
    pytest.mark.broker,
    pytest.mark.reliability,
    pytest.mark.skipif(
        EXTERNAL is not None, reason="puts the TLS proxy in front of a dedicated embedded broker"
    ),
]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Certificates]:
    why = missing_tools()
    if why is not None:
        pytest.skip(why)
    yield make_certificates(tmp_path_factory.mktemp("tls"))


async def _handles_every_record(
    bootstrap: str, security: SecurityConfig, workdir: Path, scenario: str
) -> None:
    """Create a topic, produce 200 ids and consume them, every client over TLS."""
    topic = f"tls-{uuid.uuid4().hex[:10]}"
    await create_topic(bootstrap, topic, 2, security=security)
    ids = make_ids(scenario, 200)
    await produce_ids(bootstrap, topic, ids, 2, security=security)
    sink = Sink(workdir / f"{topic}.sink", scenario)
    async with sink_app(bootstrap, topic, sink, security=security):
        await sink.wait_unique(len(ids), 60)
    sink.close()
    result = check(scenario, ids, [s.id for s in read_sightings(sink.path)], seconds=0)
    assert result.lost == 0, summary(result)


def _app(bootstrap: str, security: SecurityConfig) -> App:
    """An app that never gets to read: for connections that must fail."""
    app = App(bootstrap=bootstrap, group_id=f"g-tls-{uuid.uuid4().hex[:8]}", security=security)

    @app.subscriber("never-read")
    async def handle(record: Record[bytes]) -> None: ...

    return app


async def test_an_app_consumes_over_tls_verifying_the_broker(
    certs: Certificates, tmp_path: Path
) -> None:
    security = SecurityConfig(protocol="SSL", ssl_cafile=str(certs.ca))
    async with tls_tansu(certs) as bootstrap:
        await _handles_every_record(bootstrap, security, tmp_path, "tls")


async def test_an_app_consumes_with_a_client_certificate(
    certs: Certificates, tmp_path: Path
) -> None:
    """A ``mutual`` proxy refuses a client without a certificate the CA signed."""
    security = SecurityConfig(
        protocol="SSL",
        ssl_cafile=str(certs.ca),
        ssl_certfile=str(certs.client_cert),
        ssl_keyfile=str(certs.client_key),
    )
    async with tls_tansu(certs, mutual=True) as bootstrap:
        await _handles_every_record(bootstrap, security, tmp_path, "mtls")
        # The same broker, the same CA, no client certificate: the handshake fails.
        anonymous = SecurityConfig(protocol="SSL", ssl_cafile=str(certs.ca))
        with pytest.raises(BrokerError, match=r"set security\.ssl_certfile and ssl_keyfile"):
            async with _app(bootstrap, anonymous):
                pass


async def test_a_wrong_ca_stops_the_app_with_one_line_naming_it(
    certs: Certificates, tmp_path: Path
) -> None:
    security = SecurityConfig(protocol="SSL", ssl_cafile=str(certs.wrong_ca))
    async with tls_tansu(certs) as bootstrap:
        with pytest.raises(BrokerError) as caught:
            async with _app(bootstrap, security):
                pass
    message = str(caught.value)
    assert "\n" not in message
    assert "CERTIFICATE_VERIFY_FAILED" in message, message
    assert "security.ssl_cafile" in message, message
