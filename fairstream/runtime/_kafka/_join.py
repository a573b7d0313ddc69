"""What fairstream changes in aiokafka's JoinGroup: one request offering every
strategy, and the answer's generation and instance ids handed to the leader's planner.

aiokafka 0.14 builds the JoinGroup protocol list inside its loop over
``partition_assignment_strategy`` and sends a request on every pass
(``CoordinatorGroupRebalance.perform_group_join``, aio-libs/aiokafka#1168): with
``["lag", "roundrobin", "range"]`` it sends ``[lag]``, then ``[lag, roundrobin]``,
then all three, and keeps only the last answer. The shorter offers are refused by a
group that runs ``roundrobin`` (that loop ignores the error) or, where accepted,
each starts one more rebalance of the whole group: a lone member joining an empty
group reaches generation 3 instead of 1 (``tests/runtime/kafka/test_join.py``).

:func:`offer_all_at_once` wraps the group coordinator's request sender so that only
the JoinGroup carrying every protocol goes out; a shorter one is answered on the
spot with "no error", which moves that loop on to its next pass. Where aiokafka
sends one request with the whole list, every request goes out as before.

aiokafka's leader decodes the JoinGroup answer in
``GroupCoordinator._perform_assignment(response)`` and hands the assignor only each
member's metadata: not the generation being formed, nor the ``group_instance_id``
JoinGroup v5 reports for each static member (KIP-345). :func:`report_join` wraps that
method to hand both to the planner first: the leader writes the generation into each
assignment (members report it back with what they own, Kafka's rule for stale
claims), and ``range``/``roundrobin`` order static members by instance id.

It is private API, so it is guarded: a coordinator, request or answer that does not
look as expected leaves the consumer untouched (a ``join_offer_unpatched`` or
``join_answer_unread`` event), and ``tests/runtime/kafka/test_join.py`` and
``tests/runtime/kafka/test_join_answer.py`` fail loudly when aiokafka changes.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import structlog
from aiokafka.protocol.group import JoinGroupRequest, JoinGroupResponse_v5

__all__ = ["JoinWatcher", "instance_ids", "offer_all_at_once", "report_join"]

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


class JoinWatcher(Protocol):
    """What :func:`report_join` tells: the planner of ``_assignors.PlanningAssignor``."""

    def joining(self, generation: int, instance_ids: Mapping[str, str]) -> None: ...


_MEMBER_FIELDS = ("member_id", "group_instance_id", "member_metadata")
"""The fields of a JoinGroup v5 answer's members, as aiokafka 0.14 names them."""


def _member_fields(response_type: Any) -> tuple[str, ...]:
    """The field names of a JoinGroup answer type's member entries (``()``: none)."""
    schema = getattr(response_type, "SCHEMA", None)
    fields = dict(zip(getattr(schema, "names", ()), getattr(schema, "fields", ()), strict=False))
    return tuple(getattr(getattr(fields.get("members"), "array_of", None), "names", ()))


def instance_ids(response: Any) -> dict[str, str]:
    """member_id -> ``group.instance.id`` of the static members a JoinGroup answer lists.

    Answers before v5 carry no instance ids: every member counts as dynamic then.
    """
    names = _member_fields(type(response))
    if "group_instance_id" not in names:
        return {}
    member, instance = names.index("member_id"), names.index("group_instance_id")
    return {entry[member]: entry[instance] for entry in response.members if entry[instance]}


def report_join(consumer: Any, planner: JoinWatcher) -> bool:
    """Hand ``planner`` each JoinGroup answer it plans; ``False`` if aiokafka differs.

    Call it after ``start()`` and before ``subscribe()``, like :func:`offer_all_at_once`.
    """
    coordinator: Any = getattr(consumer, "_coordinator", None)
    perform = getattr(coordinator, "_perform_assignment", None)
    if (
        not callable(perform)
        or list(inspect.signature(perform).parameters) != ["response"]
        or _member_fields(JoinGroupResponse_v5) != _MEMBER_FIELDS
    ):
        log.info(
            "join_answer_unread",
            reason="aiokafka's group coordinator is not the one this fairstream knows; "
            "generations and instance ids are not reported",
        )
        return False

    async def perform_assignment(response: Any) -> Any:
        planner.joining(response.generation_id, instance_ids(response))
        return await perform(response)

    coordinator._perform_assignment = perform_assignment
    return True
