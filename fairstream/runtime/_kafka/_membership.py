"""A member the group will not keep, and one that waits for the group in silence.

aiokafka 0.14 hides three facts about a member's place in its group:

- **Fenced** (KIP-345): two processes started with one static ``instance_id``. Kafka
  gives the instance to the newer one and answers the older one
  ``FENCED_INSTANCE_ID`` (82), which aiokafka does not know: it raises a bare
  ``KafkaError("UnknownError")``, the engine rebuilds the consumer, the rebuilt one
  fences the other process, and the two take turns for ever (issue #38: 19
  rebalances each in 30 s, records handled twice, not a word why). noida never sends
  82: it hands the instance to whichever joined last and answers the other
  ``UNKNOWN_MEMBER_ID``, which aiokafka answers with a join that takes the instance
  back. So a static member refused as unknown looks at the group (DescribeGroups v4,
  which lists each member's instance id) before it joins again: if another member
  holds its instance id, that is another process. It looks only then, so it costs
  nothing while the group is stable. tansu gives both processes one member id and
  all partitions, with no error and one member in DescribeGroups: nothing to see
  (docs/testing.md, the quirks table).
- **A protocol it did not offer**: noida answered a cooperative member's JoinGroup
  with ``roundrobin``, which only the eager member beside it offered, where Kafka
  answers ``INCONSISTENT_GROUP_PROTOCOL``. aiokafka fails an ``assert`` in its
  coordinator task then, and the member sat with no assignment and no word.
- **Waiting**: a member that joined and got no assignment for a whole rebalance
  timeout (noida elected a member that never rejoined its leader, docs/testing.md's quirks
  table) logs nothing: aiokafka retries in silence.

:func:`watch_membership` wraps the coordinator's request sender (to see those
answers), its error hand-over to ``getmany`` (a :class:`MembershipRefused`, carrying
the :class:`~fairstream.errors.MembershipError`, replaces what aiokafka would raise)
and its join hooks (the look at the group, and the waiting timer). The fetcher stops
the app with the carried error.

It is private API, so it is guarded: a coordinator that does not look as expected
is left as it is (a ``membership_watch_unavailable`` warning), and
``tests/runtime/kafka/test_membership.py`` fails loudly when aiokafka changes.
"""

from __future__ import annotations

import asyncio
from typing import Any

import structlog
from aiokafka.errors import InconsistentGroupProtocolError, KafkaError
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.commit import OffsetCommitRequest
from aiokafka.protocol.group import JoinGroupRequest
from aiokafka.protocol.types import Array, Boolean, Bytes, Int16, Int32, Schema, String

from fairstream.errors import MembershipError
from fairstream.runtime._ports import MembershipRefused

__all__ = ["watch_membership"]

log = structlog.get_logger(__name__)

FENCED_INSTANCE_ID = 82
UNKNOWN_MEMBER_ID = 25
INCONSISTENT_GROUP_PROTOCOL = 23

_HOOKED = ("_send_req", "_push_error_to_user", "_on_join_prepare", "_on_join_complete")
"""The coordinator methods :func:`watch_membership` wraps."""


class _DescribeGroupsResponseV4(Response):  # type: ignore[misc]
    API_KEY = 15
    API_VERSION = 4
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "groups",
            Array(
                ("error_code", Int16),
                ("group", String("utf-8")),
                ("state", String("utf-8")),
                ("protocol_type", String("utf-8")),
                ("protocol", String("utf-8")),
                (
                    "members",
                    Array(
                        ("member_id", String("utf-8")),
                        ("group_instance_id", String("utf-8")),
                        ("client_id", String("utf-8")),
                        ("client_host", String("utf-8")),
                        ("member_metadata", Bytes),
                        ("member_assignment", Bytes),
                    ),
                ),
                ("authorized_operations", Int32),
            ),
        ),
    )


class _DescribeGroupsRequestV4(RequestStruct):  # type: ignore[misc]
    API_KEY = 15
    API_VERSION = 4
    RESPONSE_TYPE = _DescribeGroupsResponseV4
    SCHEMA = Schema(("groups", Array(String("utf-8"))), ("include_authorized_operations", Boolean))


class _DescribeGroup(Request[_DescribeGroupsRequestV4]):  # type: ignore[misc]
    """DescribeGroups v4: the first version that names each member's instance id."""

    API_KEY = 15

    def __init__(self, group_id: str) -> None:
        self._group_id = group_id

    def build(
        self, request_struct_class: type[_DescribeGroupsRequestV4]
    ) -> _DescribeGroupsRequestV4:
        return request_struct_class([self._group_id], False)


class _Refused:
    """The answer aiokafka reads in place of a JoinGroup whose protocol we never offered."""

    error_code = INCONSISTENT_GROUP_PROTOCOL


def _error_codes(request: object, response: Any) -> list[int]:
    """The group-level error code of an answer, and an OffsetCommit's per partition."""
    codes = [code] if isinstance(code := getattr(response, "error_code", None), int) else []
    if isinstance(request, OffsetCommitRequest):  # topics: [(name, [(partition, error)])]
        codes += [error for _, partitions in response.topics for _, error in partitions]
    return codes


def watch_membership(consumer: Any, *, group_id: str, instance_id: str | None) -> bool:
    """Make a started aiokafka ``consumer`` say why its group will not keep it.

    Call it after the other coordinator hooks (``_join``, ``_cooperative_hooks``) and
    before ``subscribe()``. ``False`` (logged): the coordinator is not the one this
    fairstream knows, and nothing changed.
    """
    coordinator: Any = getattr(consumer, "_coordinator", None)
    assignors = getattr(coordinator, "_assignors", None)
    timeout_ms = getattr(coordinator, "_rebalance_timeout_ms", None)
    if (
        not all(callable(getattr(coordinator, name, None)) for name in _HOOKED)
        or not isinstance(assignors, tuple | list)
        or not isinstance(timeout_ms, int)
        or not isinstance(getattr(coordinator, "_closing", None), asyncio.Future)
    ):
        log.warning(
            "membership_watch_unavailable",
            reason="aiokafka's group coordinator is not the one this fairstream knows; "
            "a fenced static member or a protocol it did not offer stops it with a "
            "broker error that does not say so",
        )
        return False
    watch = _Watch(coordinator, group_id, instance_id, [a.name for a in assignors], timeout_ms)
    coordinator._send_req = watch.send
    coordinator._push_error_to_user = watch.push
    coordinator._on_join_prepare = watch.prepare
    coordinator._on_join_complete = watch.complete
    return True


class _Watch:
    """The wrapped coordinator methods of one consumer."""

    def __init__(
        self,
        coordinator: Any,
        group_id: str,
        instance_id: str | None,
        offered: list[str],
        rebalance_timeout_ms: int,
    ) -> None:
        self._coordinator = coordinator
        self._group_id = group_id
        self._instance_id = instance_id
        self._offered = offered
        self._rebalance_timeout_s = rebalance_timeout_ms / 1000
        self._send = coordinator._send_req
        self._push = coordinator._push_error_to_user
        self._prepare = coordinator._on_join_prepare
        self._complete = coordinator._on_join_complete
        self.problem: MembershipError | None = None
        self._refused_member: str | None = None
        self._waiting: asyncio.TimerHandle | None = None

    # --- the answers ------------------------------------------------------------------

    async def send(self, request: Any) -> Any:
        member_id = self._coordinator.member_id
        response = await self._send(request)
        codes = _error_codes(request, response)
        if FENCED_INSTANCE_ID in codes:
            self._refuse_duplicate("the broker fenced this member (FENCED_INSTANCE_ID)")
        elif (
            UNKNOWN_MEMBER_ID in codes
            and self._instance_id is not None
            and member_id
            and member_id == self._coordinator.member_id
        ):
            # Looked into before the next join. Not when the consumer rejoined while
            # the request was out (a broker restart): the answer is about a membership
            # it no longer has, and the member now holding its instance is itself.
            self._refused_member = member_id
        if isinstance(request, JoinGroupRequest) and codes[:1] == [0]:
            protocol = getattr(response, "group_protocol", None)
            if isinstance(protocol, str) and protocol not in self._offered:
                self._refuse_protocol(protocol, "the broker chose it")
                # Joined all the same: a dynamic member leaves on stop (LeaveGroup needs
                # these), or noida would keep it, and might elect it leader, for ever.
                self._coordinator.member_id = response.member_id
                self._coordinator.generation = response.generation_id
                return _Refused()
        return response

    def push(self, exc: Exception) -> Any:
        """Hand ``getmany`` our error in place of aiokafka's, once we know better."""
        if self.problem is None and isinstance(exc, InconsistentGroupProtocolError):
            self._refuse_protocol(None, "the broker refused the join (INCONSISTENT_GROUP_PROTOCOL)")
        return self._push(exc if self.problem is None else MembershipRefused(self.problem))

    # --- the joins --------------------------------------------------------------------

    async def prepare(self, previous_assignment: Any) -> None:
        if self._waiting is None:
            self._waiting = asyncio.get_running_loop().call_later(
                self._rebalance_timeout_s, self._still_waiting
            )
        refused, self._refused_member = self._refused_member, None
        if refused is not None:
            await self._look_for_twin(refused)
        if self.problem is not None:
            raise MembershipRefused(self.problem)
        await self._prepare(previous_assignment)

    async def complete(
        self, generation: int, member_id: str, protocol: str, member_assignment_bytes: bytes
    ) -> None:
        if self._waiting is not None:
            self._waiting.cancel()
            self._waiting = None
        await self._complete(generation, member_id, protocol, member_assignment_bytes)

    def _still_waiting(self) -> None:
        self._waiting = None
        if self._coordinator._closing.done():
            return
        log.warning(
            "group_assignment_waiting",
            group_id=self._group_id,
            member_id=self._coordinator.member_id or None,
            waited_s=self._rebalance_timeout_s,
            reason="joined the group but got no assignment for a whole rebalance timeout; "
            "the group may wait for a member that is gone (docs/testing.md, the embedded brokers' "
            "quirks: a member gone without LeaveGroup)",
        )

    async def _look_for_twin(self, refused: str) -> None:
        """Whether another member holds our instance id, now that we hold none."""
        try:
            response = await self._send(_DescribeGroup(self._group_id))
        except (KafkaError, NotImplementedError) as exc:  # NotImplemented: no v4 here
            log.info("group_describe_failed", group_id=self._group_id, reason=str(exc))
            return
        holders = [
            member[0]
            for group in response.groups
            for member in group[5]
            if member[1] == self._instance_id
            and member[0] not in (refused, self._coordinator.member_id)
        ]
        if holders:
            self._refuse_duplicate(
                f"the broker gave its instance to member {holders[0]!r} (it answered this "
                "one UNKNOWN_MEMBER_ID)"
            )

    # --- the errors -------------------------------------------------------------------

    def _refuse_duplicate(self, how: str) -> None:
        if self.problem is not None:
            return
        self.problem = MembershipError(
            f"another process runs with the same instance_id: {how}",
            group_id=self._group_id,
            instance_id=self._instance_id,
            hint="give each process its own instance_id (FAIRSTREAM_INSTANCE_ID)",
        )
        self._log()

    def _refuse_protocol(self, protocol: str | None, how: str) -> None:
        if self.problem is not None:
            return
        chosen = "a protocol" if protocol is None else f"protocol {protocol!r}"
        self.problem = MembershipError(
            f"the group runs {chosen}, which this member did not offer "
            f"(it offered {', '.join(self._offered)}): {how}",
            group_id=self._group_id,
            hint="give every member of the group a protocol in common "
            "(docs/guides, 'Migrating an existing group' and 'Cooperative rebalancing')",
        )
        self._log()

    def _log(self) -> None:
        assert self.problem is not None
        log.error(
            "group_membership_refused",
            group_id=self._group_id,
            instance_id=self._instance_id,
            reason=self.problem.problem,
        )
