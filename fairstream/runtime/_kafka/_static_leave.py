"""A static member that leaves its group when it stops, if asked to (KIP-345, KIP-812).

A member with an ``instance_id`` does not leave its group when it stops: that is
the point of static membership, a restart within the session timeout takes its
partitions back without a rebalance. When the member goes away for good (a scale
down), its partitions wait out the session timeout, and on a broker that never
evicts (noida) they wait for ever. Kafka's own clients leave then with LeaveGroup
v3, which names the member by its instance id (Kafka Streams'
``CloseOptions.leaveGroup``, KIP-812). aiokafka speaks LeaveGroup v0-v1 only and
skips it for a static member, so :func:`leave_when_stopped` sends the v3 request in
its place, at the moment aiokafka would have left: after the coordination task
ended, before the generation is reset.
"""

from __future__ import annotations

from typing import Any

import structlog
from aiokafka.errors import KafkaError, for_code
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import Array, Int16, Int32, Schema, String

__all__ = ["leave_when_stopped"]

log = structlog.get_logger(__name__)


class _LeaveGroupResponseV3(Response):  # type: ignore[misc]  # aiokafka is untyped
    API_KEY = 13
    API_VERSION = 3
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("error_code", Int16),
        (
            "members",
            Array(
                ("member_id", String("utf-8")),
                ("group_instance_id", String("utf-8")),
                ("error_code", Int16),
            ),
        ),
    )


class _LeaveGroupRequestV3(RequestStruct):  # type: ignore[misc]
    API_KEY = 13
    API_VERSION = 3
    RESPONSE_TYPE = _LeaveGroupResponseV3
    SCHEMA = Schema(
        ("group", String("utf-8")),
        ("members", Array(("member_id", String("utf-8")), ("group_instance_id", String("utf-8")))),
    )


class _StaticLeave(Request[_LeaveGroupRequestV3]):  # type: ignore[misc]
    """LeaveGroup for one static member: its member id and its instance id."""

    API_KEY = 13

    def __init__(self, group_id: str, member_id: str, instance_id: str) -> None:
        self._fields = (group_id, [(member_id, instance_id)])

    def build(self, request_struct_class: type[_LeaveGroupRequestV3]) -> _LeaveGroupRequestV3:
        return request_struct_class(*self._fields)


def leave_when_stopped(consumer: Any, instance_id: str) -> bool:
    """Make a started aiokafka ``consumer`` with ``instance_id`` leave its group on stop.

    ``False`` (logged): its coordinator is not the one this fairstream knows, and the
    member stays in its group as before.
    """
    coordinator: Any = getattr(consumer, "_coordinator", None)
    if not all(
        callable(getattr(coordinator, name, None)) for name in ("_maybe_leave_group", "_send_req")
    ):
        log.warning(
            "static_leave_unavailable",
            reason="aiokafka's group coordinator is not the one this fairstream knows; "
            "this static member stays in its group until its session times out",
        )
        return False
    stay = coordinator._maybe_leave_group

    async def maybe_leave_group() -> None:
        group_id, member_id = coordinator.group_id, coordinator.member_id
        if coordinator.generation > 0 and member_id:
            await _leave(coordinator, group_id, member_id, instance_id)
        await stay()  # resets the generation (and sends nothing for a static member)

    coordinator._maybe_leave_group = maybe_leave_group
    return True


async def _leave(coordinator: Any, group_id: str, member_id: str, instance_id: str) -> None:
    """One try, as aiokafka's own leave: a member that cannot leave times out instead."""
    reason = ""
    try:
        response = await coordinator._send_req(_StaticLeave(group_id, member_id, instance_id))
    except (KafkaError, NotImplementedError) as exc:  # NotImplemented: no v3 on the broker
        reason = str(exc)
    else:
        codes = [response.error_code, *(code for *_, code in response.members)]
        error = next((code for code in codes if code), 0)
        reason = str(for_code(error)()) if error else ""
    if reason:
        log.warning("group_leave_failed", group_id=group_id, instance_id=instance_id, reason=reason)
    else:
        log.info("group_left", group_id=group_id, instance_id=instance_id)
