"""A TCP proxy between Kafka clients and one broker that breaks the network on command.

The broker advertises the proxy's port (tansu's ``--advertised-listener-url``, see
``EmbeddedBroker(advertised_port=...)``), so every connection a client makes, to
bootstrap or to the partition leader, passes through it. The faults are the ones
production networks have:

- :meth:`FaultProxy.reset`: every open connection is closed at once (a load
  balancer or a broker restart dropping them);
- :meth:`FaultProxy.stall`: bytes stop flowing both ways for some seconds, the
  connections stay open (a blackhole: a network partition, a long GC pause);
- :attr:`FaultProxy.latency`: seconds added to every chunk forwarded;
- :meth:`FaultProxy.refuse`: the next ``times`` connections whose first request
  names a client id are closed before it reaches the broker (one client's
  connections failing while the others' work);
- :attr:`FaultProxy.garble`: ``(old, new)`` bytes of the same length replaced in what
  the broker sends, so the record batch holding ``old`` fails its CRC check (a
  corrupted batch of one partition).

Real sockets and a real broker on both sides: only the wire between them is ours.
"""

from __future__ import annotations

import struct

import anyio
import anyio.abc
import structlog

__all__ = ["FaultProxy"]

log = structlog.get_logger(__name__)

_CHUNK = 65_536


def _client_id(first: bytes) -> str | None:
    """The client id in a Kafka request header: size, api key, version, correlation, id."""
    if len(first) < 14:
        return None
    (length,) = struct.unpack(">h", first[12:14])
    return first[14 : 14 + length].decode("utf-8", "replace") if length >= 0 else None


class FaultProxy:
    """Listens on 127.0.0.1:``port`` and forwards to 127.0.0.1:``upstream_port``.

    Run it with ``await tasks.start(proxy.serve)``; it serves until cancelled.
    """

    def __init__(self, upstream_port: int, port: int) -> None:
        self.upstream_port = upstream_port
        self.port = port
        self.latency = 0.0
        self.connections = 0
        """Connections accepted so far."""
        self.resets = 0
        """Connections closed by a fault (reset or refuse)."""
        self._open: set[anyio.CancelScope] = set()
        self._flowing = anyio.Event()
        self._flowing.set()
        self._refusals: dict[str, int] = {}
        self.garble: tuple[bytes, bytes] | None = None

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=self.port)
        task_status.started()
        async with listener:
            await listener.serve(self._connection)

    def reset(self) -> None:
        """Close every open connection now."""
        log.info("proxy_reset", connections=len(self._open))
        self.resets += len(self._open)
        for scope in list(self._open):
            scope.cancel()

    async def stall(self, seconds: float) -> None:
        """Forward nothing, either way, for ``seconds``; the connections stay open."""
        log.info("proxy_stall", seconds=seconds)
        self._flowing = anyio.Event()
        try:
            await anyio.sleep(seconds)
        finally:
            self._flowing.set()

    def refuse(self, client_id: str, times: int) -> None:
        """Close the next ``times`` connections whose first request comes from ``client_id``."""
        self._refusals[client_id] = times

    async def _connection(self, client: anyio.abc.SocketStream) -> None:
        self.connections += 1
        with anyio.CancelScope() as scope:
            self._open.add(scope)
            try:
                async with client, await anyio.connect_tcp("127.0.0.1", self.upstream_port) as up:
                    first = await client.receive(_CHUNK)
                    who = _client_id(first)
                    if who is not None and self._refusals.get(who, 0) > 0:
                        self._refusals[who] -= 1
                        self.resets += 1
                        log.info("proxy_refused", client_id=who)
                        return
                    await up.send(first)
                    async with anyio.create_task_group() as pumps:
                        pumps.start_soon(self._pump, client, up, pumps.cancel_scope, False)
                        pumps.start_soon(self._pump, up, client, pumps.cancel_scope, True)
            except (OSError, anyio.EndOfStream, anyio.BrokenResourceError):
                pass  # either side hung up: the connection is over
            finally:
                self._open.discard(scope)

    async def _pump(
        self,
        source: anyio.abc.SocketStream,
        sink: anyio.abc.SocketStream,
        both: anyio.CancelScope,
        from_broker: bool,
    ) -> None:
        try:
            while True:
                chunk = await source.receive(_CHUNK)
                if from_broker and self.garble is not None:
                    chunk = chunk.replace(*self.garble)
                await self._flowing.wait()
                if self.latency:
                    await anyio.sleep(self.latency)
                await sink.send(chunk)
        except (OSError, anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass  # this direction is over
        finally:
            both.cancel()  # one direction ended: end the other
