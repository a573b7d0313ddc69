"""TLS in front of a real broker: stunnel terminates it, tansu serves Kafka behind.

Neither embedded broker speaks TLS, so the suite puts stunnel (Debian's
``stunnel4``; ``.ci/run`` installs it where it can) between the clients and a
tansu broker that advertises stunnel's port (``EmbeddedBroker(advertised_port=...)``,
as the fault proxy does). Every connection a client makes, to bootstrap or to the
partition leader, is then a TLS connection that aiokafka must verify. The
certificates are made per run with the ``openssl`` command line tool: a CA, a server
certificate for 127.0.0.1 signed by it, a client certificate signed by it (mutual
TLS) and a second, unrelated CA (the wrong one).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio

from fairstream.testing import EmbeddedBroker, free_port

__all__ = ["Certificates", "make_certificates", "missing_tools", "stunnel_tansu"]

_STUNNEL_NAMES = ("stunnel4", "stunnel")


def missing_tools() -> str | None:
    """Why the TLS tests cannot run here, or ``None`` when they can."""
    if shutil.which("openssl") is None:
        return "needs the openssl command to make the test certificates"
    if not any(shutil.which(name) for name in _STUNNEL_NAMES):
        return (
            "needs stunnel to serve TLS in front of the embedded broker: "
            "apt-get install stunnel4 (.ci/run does it when run as root)"
        )
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class Certificates:
    """PEM files: the CA, the server's and a client's certificate and key, another CA."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    wrong_ca: Path


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def _self_signed(where: Path, name: str) -> tuple[Path, Path]:
    cert, key = where / f"{name}.pem", where / f"{name}.key"
    _openssl(
        *("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
        *("-subj", f"/CN=fairstream-test-{name}", "-keyout", str(key), "-out", str(cert)),
    )
    return cert, key


def _signed(where: Path, name: str, ca: tuple[Path, Path], extension: str) -> tuple[Path, Path]:
    """A key and a certificate for ``name`` signed by ``ca``, with one v3 extension."""
    cert, key, request = where / f"{name}.pem", where / f"{name}.key", where / f"{name}.csr"
    _openssl(
        *("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN=fairstream-test-{name}"),
        *("-keyout", str(key), "-out", str(request)),
    )
    extfile = where / f"{name}.ext"
    extfile.write_text(extension + "\n")
    _openssl(
        *("x509", "-req", "-in", str(request), "-CA", str(ca[0]), "-CAkey", str(ca[1])),
        *("-CAcreateserial", "-days", "1", "-extfile", str(extfile), "-out", str(cert)),
    )
    return cert, key


def make_certificates(where: Path) -> Certificates:
    """A fresh CA, a server certificate for 127.0.0.1 (the address aiokafka checks the
    name against), a client certificate and an unrelated CA, all under ``where``."""
    ca = _self_signed(where, "ca")
    server = _signed(where, "server", ca, "subjectAltName=IP:127.0.0.1")
    client = _signed(where, "client", ca, "extendedKeyUsage=clientAuth")
    wrong_ca, _ = _self_signed(where, "wrong-ca")
    return Certificates(
        ca=ca[0],
        server_cert=server[0],
        server_key=server[1],
        client_cert=client[0],
        client_key=client[1],
        wrong_ca=wrong_ca,
    )


def _stunnel_config(certs: Certificates, port: int, upstream: int, *, mutual: bool) -> str:
    lines = [
        "foreground = yes",
        "pid =",
        "debug = 4",
        "[kafka]",
        f"accept = 127.0.0.1:{port}",
        f"connect = 127.0.0.1:{upstream}",
        f"cert = {certs.server_cert}",
        f"key = {certs.server_key}",
    ]
    if mutual:
        # verify = 2: a client must present a certificate that the CA signed.
        lines += ["verify = 2", f"CAfile = {certs.ca}"]
    return "\n".join(lines) + "\n"


async def _until_listening(port: int, stunnel: anyio.abc.Process) -> None:
    with anyio.fail_after(30):
        while True:
            if stunnel.returncode is not None:
                raise RuntimeError(f"stunnel exited with code {stunnel.returncode} at start")
            try:
                stream = await anyio.connect_tcp("127.0.0.1", port)
            except OSError:
                await anyio.sleep(0.05)
            else:
                await stream.aclose()
                return


@asynccontextmanager
async def stunnel_tansu(
    certs: Certificates, workdir: Path, *, mutual: bool = False
) -> AsyncIterator[str]:
    """A tansu broker behind stunnel, advertising stunnel's port; yields the bootstrap.

    With ``mutual`` stunnel asks every client for a certificate signed by the CA.
    """
    port = free_port()
    broker = EmbeddedBroker("tansu", advertised_port=port)
    await anyio.to_thread.run_sync(broker.start)
    config = workdir / f"stunnel-{port}.conf"
    config.write_text(_stunnel_config(certs, port, broker.port, mutual=mutual))
    binary = next(path for name in _STUNNEL_NAMES if (path := shutil.which(name)))
    log = (workdir / f"stunnel-{port}.log").open("wb")
    try:
        async with await anyio.open_process(
            [binary, str(config)], stdout=log, stderr=subprocess.STDOUT
        ) as stunnel:
            try:
                await _until_listening(port, stunnel)
                yield f"127.0.0.1:{port}"
            finally:
                stunnel.terminate()
                with anyio.move_on_after(10, shield=True):
                    await stunnel.wait()
    finally:
        log.close()
        await anyio.to_thread.run_sync(broker.stop)
