"""One JoinGroup offering every strategy, where aiokafka would send one per strategy.

aiokafka 0.14 builds the JoinGroup protocol list inside its loop over
``partition_assignment_strategy`` and sends a request on every pass
(``CoordinatorGroupRebalance.perform_group_join``, aio-libs/aiokafka#1168): with
``["lag", "roundrobin", "range"]`` it sends ``[lag]``, then ``[lag, roundrobin]``,
then all three, and keeps only the last answer. The shorter offers are refused by a
group that runs ``roundrobin`` (that loop ignores the error) or, where accepted,
each starts one more rebalance of the whole group: a lone member joining an empty
group reaches generation 3 instead of 1 (``tests/runtime/test_join.py``).

:func:`offer_all_at_once` wraps the group coordinator's request sender so that only
the JoinGroup carrying every protocol goes out; a shorter one is answered on the
spot with "no error", which moves that loop on to its next pass. Where aiokafka
sends one request with the whole list, every request goes out as before.

It is private API, so it is guarded: a coordinator or request that does not look
as expected leaves the consumer untouched (a ``join_offer_unpatched`` event), and
the test above fails loudly when aiokafka changes either way.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from aiokafka.protocol.group import JoinGroupRequest

__all__ = ["offer_all_at_once"]

log = structlog.get_logger(__name__)


class _NotSent:
    """The answer to a JoinGroup that was not sent: aiokafka's loop reads only this."""

    error_code = 0


def _protocols(request: object) -> list[Any] | None:
    protocols = getattr(request, "_group_protocols", None)
    return protocols if isinstance(protocols, list) else None


def offer_all_at_once(consumer: Any) -> bool:
    """Make a started aiokafka ``consumer`` send one JoinGroup per join; ``False`` if not.

    Call it after ``start()`` and before ``subscribe()``: no join happens in between.
    Nothing to do (``True``) with a single strategy.
    """
    coordinator: Any = getattr(consumer, "_coordinator", None)
    assignors = getattr(coordinator, "_assignors", None)
    send: Callable[[Any], Awaitable[Any]] | None = getattr(coordinator, "_send_req", None)
    probe = JoinGroupRequest("", 0, 0, "", "", "", [])
    if not isinstance(assignors, tuple | list) or send is None or _protocols(probe) is None:
        log.info(
            "join_offer_unpatched",
            reason="aiokafka's group coordinator is not the one this fairstream knows; "
            "a join may send one JoinGroup per strategy",
        )
        return False
    offered = len(assignors)
    if offered < 2:
        return True

    async def send_full_offers(request: Any) -> Any:
        protocols = _protocols(request) if isinstance(request, JoinGroupRequest) else None
        if protocols is not None and len(protocols) < offered:
            return _NotSent()
        return await send(request)

    coordinator._send_req = send_full_offers
    return True
