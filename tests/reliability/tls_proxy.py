"""TLS in front of a real broker: a proxy of ours terminates it, tansu serves Kafka behind.

Neither embedded broker speaks TLS, so the suite puts a TLS-terminating proxy, written
here with Python's ``ssl`` module on anyio sockets, between the clients and a tansu
broker that advertises the proxy's port (``EmbeddedBroker(advertised_port=...)``, as
the fault proxy does). Every connection a client makes, to bootstrap or to the
partition leader, is then a TLS connection that aiokafka must verify; no system
package (stunnel) and no root are needed. The certificates are made per run with the
``openssl`` command line tool: a CA, a server certificate for 127.0.0.1 signed by it,
a client certificate signed by it (mutual TLS) and a second, unrelated CA (the wrong one).

The handshake is driven on an ``ssl.SSLObject`` rather than anyio's ``TLSStream``
because a server must *send* its alert when it refuses a client (TLS 1.3's
``certificate_required``): ``TLSStream`` drops the alert's bytes when the handshake
raises, and the client would see a bare close instead of the reason it must name.
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TypeVar

import anyio
import anyio.abc
import structlog

from fairstream.testing import EmbeddedBroker, free_port

__all__ = ["Certificates", "make_certificates", "missing_tools", "tls_tansu"]

log = structlog.get_logger(__name__)

_CHUNK = 65_536
# A client that connects and sends nothing must not hold a proxy task for ever.
_HANDSHAKE_SECONDS = 30.0

T = TypeVar("T")


def missing_tools() -> str | None:
    """Why the TLS tests cannot run here, or ``None`` when they can."""
    if shutil.which("openssl") is None:
        return "needs the openssl command to make the test certificates"
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


def server_context(certs: Certificates, *, mutual: bool) -> ssl.SSLContext:
    """The proxy's side: the server certificate; with ``mutual``, a client must present
    a certificate the CA signed (stunnel's ``verify = 2``)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certs.server_cert, certs.server_key)
    if mutual:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(certs.ca)
    return context


class _ServerTLS:
    """The server end of one TLS connection over a TCP stream, on an ``ssl.SSLObject``.

    Whatever OpenSSL has to send, an alert included, is sent before an error is
    raised. The lock keeps the two pumps' writes (a read may write too: TLS 1.3
    tickets and key updates) from interleaving on the socket.
    """

    def __init__(self, stream: anyio.abc.SocketStream, context: ssl.SSLContext) -> None:
        self._stream = stream
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self._sending = anyio.Lock()

    async def _flush(self) -> None:
        async with self._sending:
            if data := self._outgoing.read():
                await self._stream.send(data)

    async def _drive(self, step: Callable[[], T]) -> T:
        while True:
            try:
                result = step()
            except ssl.SSLWantReadError:
                await self._flush()
                try:
                    self._incoming.write(await self._stream.receive(_CHUNK))
                except anyio.EndOfStream:
                    self._incoming.write_eof()
            except ssl.SSLError:
                await self._flush()  # the alert telling the client why
                raise
            else:
                await self._flush()
                return result

    async def handshake(self) -> None:
        await self._drive(self._tls.do_handshake)

    async def receive(self) -> bytes:
        data = await self._drive(partial(self._tls.read, _CHUNK))
        if not data:
            raise anyio.EndOfStream
        return data

    async def send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[await self._drive(partial(self._tls.write, view)) :]


_GONE = (ssl.SSLError, OSError, anyio.EndOfStream, anyio.BrokenResourceError)


async def _pump(
    receive: Callable[[], Awaitable[bytes]],
    send: Callable[[bytes], Awaitable[None]],
    both: anyio.CancelScope,
) -> None:
    try:
        while True:
            await send(await receive())
    except (*_GONE, anyio.ClosedResourceError):
        pass  # this direction is over
    finally:
        both.cancel()  # one direction ended: end the other


async def _relay(
    context: ssl.SSLContext, upstream_port: int, client: anyio.abc.SocketStream
) -> None:
    """Terminate TLS from ``client`` and forward the plain bytes to the broker."""
    async with client:
        tls = _ServerTLS(client, context)
        try:
            with anyio.fail_after(_HANDSHAKE_SECONDS):
                await tls.handshake()
        except (*_GONE, TimeoutError) as exc:
            # A refused handshake is what some tests are about; the client names it.
            log.info("tls_handshake_refused", reason=getattr(exc, "reason", type(exc).__name__))
            return
        try:
            async with (
                await anyio.connect_tcp("127.0.0.1", upstream_port) as broker,
                anyio.create_task_group() as pumps,
            ):
                pumps.start_soon(_pump, tls.receive, broker.send, pumps.cancel_scope)
                pumps.start_soon(_pump, broker.receive, tls.send, pumps.cancel_scope)
        except OSError:
            pass  # the broker is gone: the client sees the connection close


@asynccontextmanager
async def tls_tansu(certs: Certificates, *, mutual: bool = False) -> AsyncIterator[str]:
    """A tansu broker behind the TLS proxy, advertising the proxy's port; yields the
    bootstrap. With ``mutual`` the proxy asks every client for a certificate signed by
    the CA."""
    port = free_port()
    broker = EmbeddedBroker("tansu", advertised_port=port)
    await anyio.to_thread.run_sync(broker.start)
    try:
        relay = partial(_relay, server_context(certs, mutual=mutual), broker.port)
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=port)
        async with listener, anyio.create_task_group() as tasks:
            tasks.start_soon(listener.serve, relay)
            try:
                yield f"127.0.0.1:{port}"
            finally:
                tasks.cancel_scope.cancel()
    finally:
        await anyio.to_thread.run_sync(broker.stop)
