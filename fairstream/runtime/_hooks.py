"""Lifecycle hooks and rebalance listeners: ``@app.on_startup``, ``@app.on_shutdown``,
``@app.on_partitions_assigned``, ``@app.on_partitions_revoked``.

Every way of running an app (``fairstream run``, ``app.run()``, ``async with app``, the
ASGI lifespan, ``MemoryBroker().run(app)``) enters ``App.__aenter__`` and leaves through
``App.__aexit__``, so the hooks run there, and the same for all of them:

- startup hooks, in registration order, before the app connects: a hook that raises
  stops the start (the error comes out as it is, nothing is consumed);
- shutdown hooks, in order, once the app has stopped (drained, committed, left its
  group), whenever the startup hooks all ran: also when it stopped on an error, or
  its start failed after them (the broker unreachable); one that raises is logged
  (``shutdown_hook_failed``, with its traceback) and the next still runs.

Rebalance listeners are awaited in order inside the group's rebalance, as the Java
client's ``ConsumerRebalanceListener``: the member rejoins once they returned. Each
gets the ``TopicPartition``s this member gained (after they are registered, before
their first record is handled) or gave up (after their in-flight records finished
and their offsets were committed: a listener may flush what it keeps per partition
knowing the next owner starts after it). Lost partitions (KIP-429) and the
partitions still owned at shutdown (after the final commit) are given to the
revoked listeners too. A listener that raises is logged
(``rebalance_listener_failed``, with its traceback) and is not fatal: the rebalance
goes on with the next one.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Collection
from typing import TypeVar, final

import anyio
import structlog
from aiokafka import TopicPartition

from fairstream.errors import ConfigError
from fairstream.runtime._record import TP

__all__ = ["HookRegistry", "Hooks"]

log = structlog.get_logger(__name__)

Hook = Callable[[], Awaitable[None]]
PartitionsListener = Callable[[list[TopicPartition]], Awaitable[None]]
HookT = TypeVar("HookT", bound=Hook)
ListenerT = TypeVar("ListenerT", bound=PartitionsListener)


def _name(function: object) -> str:
    return str(getattr(function, "__qualname__", function))


def _checked(function: object, decorator: str) -> None:
    if not inspect.iscoroutinefunction(function):
        raise ConfigError(
            decorator, _name(function), "is not an async function", "define it with 'async def'"
        )


@final
class Hooks:
    """The hooks and listeners an app registered, and running them."""

    def __init__(self) -> None:
        self.startup: list[Hook] = []
        self.shutdown: list[Hook] = []
        self.assigned: list[PartitionsListener] = []
        self.revoked: list[PartitionsListener] = []

    async def start(self) -> None:
        """Await the startup hooks in order; the first that raises ends the start."""
        for hook in self.startup:
            await hook()

    async def stop(self) -> None:
        """Await every shutdown hook in order, shielded: the app stops whatever they do."""
        with anyio.CancelScope(shield=True):
            for hook in self.shutdown:
                try:
                    await hook()
                except Exception as exc:
                    log.error(
                        "shutdown_hook_failed",
                        hook=_name(hook),
                        error=f"{type(exc).__name__}: {exc}",
                        exc_info=exc,
                    )

    async def partitions_assigned(self, tps: Collection[TP]) -> None:
        await _notify(self.assigned, "assigned", tps)

    async def partitions_revoked(self, tps: Collection[TP]) -> None:
        await _notify(self.revoked, "revoked", tps)


async def _notify(listeners: list[PartitionsListener], change: str, tps: Collection[TP]) -> None:
    """Await each listener with ``tps`` as ``TopicPartition``s; log what one raises."""
    if not listeners or not tps:
        return
    partitions = [TopicPartition(*tp) for tp in sorted(tps)]
    for listener in listeners:
        try:
            await listener(list(partitions))
        except Exception as exc:
            log.error(
                "rebalance_listener_failed",
                listener=_name(listener),
                partitions_were=change,
                partitions=sorted(tps),
                error=f"{type(exc).__name__}: {exc}",
                exc_info=exc,
            )


class HookRegistry:
    """The decorators that register hooks and listeners; they return the function as is.

    :raises ConfigError: for a function that is not ``async def``.
    """

    _hooks: Hooks

    def on_startup(self, hook: HookT) -> HookT:
        """``async def hook() -> None``, awaited before the app connects."""
        _checked(hook, "on_startup")
        self._hooks.startup.append(hook)
        return hook

    def on_shutdown(self, hook: HookT) -> HookT:
        """``async def hook() -> None``, awaited after the app stopped and committed."""
        _checked(hook, "on_shutdown")
        self._hooks.shutdown.append(hook)
        return hook

    def on_partitions_assigned(self, listener: ListenerT) -> ListenerT:
        """``async def listener(partitions: list[TopicPartition]) -> None``: gained ones."""
        _checked(listener, "on_partitions_assigned")
        self._hooks.assigned.append(listener)
        return listener

    def on_partitions_revoked(self, listener: ListenerT) -> ListenerT:
        """``async def listener(partitions: list[TopicPartition]) -> None``: given up ones,
        after their final commit."""
        _checked(listener, "on_partitions_revoked")
        self._hooks.revoked.append(listener)
        return listener
