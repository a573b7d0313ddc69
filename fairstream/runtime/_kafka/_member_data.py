"""What a fairstream member reports in its join metadata's user data, what the leader
hands each member back in its assignment's, and how both are read.

A member reports the partitions it owns, as ``{"topic": [partitions]}`` JSON, so any
leader can hand the planners a previous assignment, whoever led last time, and the
generation it was given them in, which the leader writes into each assignment (a
member that missed a rebalance still claims what it owned: the leader keeps the
newest claim, :func:`fairstream.assign.resolve_owned`). A member of a fairstream
release before generations reports none: generation -1, as Kafka counts it.

It also reports the progress a refused revoke commit left unsaved (noida refuses a
commit racing a rebalance; any broker may time one out): per partition, the commit
it could not write and the commit it saw on the broker then. The leader hands each
such entry to the partition's next owner in its assignment, and that owner writes it
(``Rebalancer._restore``) if the broker still holds the commit the entry saw - no
one committed in between - so it starts where the last owner's handled records end
instead of repeating them. An entry claimed twice, or for a partition no one gets
this round, is dropped: a repeat, never a loss.

User data a leader cannot read (another client's, another fairstream version's
format; fairstream before the handover reads a member that reports unsaved progress
so) counts as no previous assignment and nothing unsaved for that member, with a
warning: a plan never fails over it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog
from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata

from fairstream.assign import Assignment, resolve_owned
from fairstream.assign.claims import NO_GENERATION, Claim
from fairstream.runtime._record import TP
from fairstream.runtime.flow._offsets import Unsaved

__all__ = [
    "Handover",
    "MemberReport",
    "decode_generation",
    "decode_handover",
    "encode_handover",
    "encode_owned",
    "read_reports",
    "reported_owners",
    "route_unsaved",
]

log = structlog.get_logger(__name__)

_RESTARTS = ""
"""User-data key for how often this member's consumer was rebuilt. No topic can be
named "", so every leader's owned-partitions reader skips it, older ones included."""

_UNSAVED = "#unsaved"
"""User-data key for unsaved progress; no topic name may hold a ``#``."""

_GENERATION = "#generation"
"""User-data key for the generation of the owned partitions (of an assignment: the
generation it belongs to), as ``[generation]``: a list of ints under a name no topic
can have, so a leader from before generations reads it as a partition of no topic."""

_UNSAVED_BYTES = 256 * 1024
"""At most this much commit metadata is reported: every member's join metadata goes to
the leader in one response. Entries past it are left out (a repeat, never a loss)."""


class Handover:
    """One member's unsaved progress: what it reports at its next join (``outgoing``),
    and what its last assignment handed it from the partitions' previous owners
    (``incoming``)."""

    def __init__(self) -> None:
        self.outgoing: Unsaved = {}
        self.incoming: Unsaved = {}


@dataclass(frozen=True, slots=True)
class MemberReport:
    """One member's user data, read: the partitions it owns, the generation it got them
    in, its unsaved progress."""

    owned: dict[str, list[int]] = field(default_factory=dict)
    unsaved: Unsaved = field(default_factory=dict)
    generation: int = NO_GENERATION


def encode_owned(
    owned: Mapping[str, list[int]],
    restarts: int,
    unsaved: Unsaved,
    generation: int = NO_GENERATION,
) -> bytes:
    """The user data: owned partitions and their generation (if known), how often the
    consumer was rebuilt (if ever), and the progress a refused revoke commit left
    unsaved (if any)."""
    data: dict[str, Any] = dict(owned)
    if generation != NO_GENERATION:
        data[_GENERATION] = [generation]
    if restarts:
        data[_RESTARTS] = [restarts]
    if unsaved:
        data[_UNSAVED] = _rows(unsaved)
    return json.dumps(data, separators=(",", ":"), sort_keys=True).encode()


def read_reports(
    members: Mapping[str, ConsumerProtocolMemberMetadata],
) -> dict[str, MemberReport]:
    """Every member's user data, read (unreadable data: an empty report and a warning)."""
    return {member_id: _read(member_id, meta.user_data) for member_id, meta in members.items()}


def reported_owners(
    reports: Mapping[str, MemberReport], counts: Mapping[str, int]
) -> tuple[Assignment | None, frozenset[TP]]:
    """The previous assignment members report (``None``: nobody owns anything), and
    the partitions claimed by two members of the newest generation that claims them.

    Claims of partitions that do not exist (any more) are left out first.
    """
    claims: dict[str, Claim] = {
        member_id: (
            report.generation,
            {
                topic: [p for p in partitions if 0 <= p < counts[topic]]
                for topic, partitions in report.owned.items()
                if topic in counts
            },
        )
        for member_id, report in reports.items()
    }
    previous, contested = resolve_owned(claims)
    if contested:
        log.warning("owned_partitions_contested", partitions=sorted(contested))
    return (previous if previous.owner_map() else None), contested


def route_unsaved(reports: Mapping[str, MemberReport], plan: Assignment) -> dict[str, Unsaved]:
    """Each member's share of the unsaved progress: the entries of the partitions it gets.

    An entry two members claim, or whose partition no member gets, is dropped.
    """
    claims: dict[TP, list[tuple[tuple[int, str], tuple[int | None, str]]]] = {}
    for report in reports.values():
        for tp, entry in report.unsaved.items():
            claims.setdefault(tp, []).append(entry)
    owner = {
        (topic, partition): member_id
        for member_id, topics in plan.members.items()
        for topic, partitions in topics.items()
        for partition in partitions
    }
    routed: dict[str, Unsaved] = {}
    for tp, entries in sorted(claims.items()):
        if len(entries) == 1 and tp in owner:
            routed.setdefault(owner[tp], {})[tp] = entries[0]
    return routed


def encode_handover(unsaved: Unsaved, generation: int = NO_GENERATION) -> bytes:
    """An assignment's user data: the unsaved progress handed to its member (if any),
    and the generation the assignment belongs to (if the leader knows it)."""
    data: dict[str, Any] = {_GENERATION: [generation]} if generation != NO_GENERATION else {}
    if not unsaved and not data:
        return b""
    # Always the unsaved list: a member from before generations reads it, and only it.
    data[_UNSAVED] = _rows(unsaved)
    return json.dumps(data, separators=(",", ":")).encode()


def decode_generation(user_data: bytes) -> int:
    """The generation an assignment belongs to; -1 when its leader did not say."""
    decoded = _json_object(user_data) if user_data else None
    generation = _generation(decoded.get(_GENERATION, []) if decoded is not None else [])
    return NO_GENERATION if generation is None else generation


def decode_handover(user_data: bytes) -> Unsaved:
    """The unsaved progress an assignment hands over; none if it carries no such thing."""
    if not user_data:
        return {}
    decoded = _json_object(user_data)
    unsaved = _from_rows(decoded.get(_UNSAVED) if decoded is not None else None)
    if unsaved is None:
        log.warning("handover_unreadable", reason="not_our_format")
        return {}
    return unsaved


def _read(member_id: str, user_data: bytes) -> MemberReport:
    if not user_data:
        return MemberReport()
    decoded = _json_object(user_data)
    unsaved = _from_rows(decoded.pop(_UNSAVED, []) if decoded is not None else None)
    generation = _generation(decoded.pop(_GENERATION, []) if decoded is not None else None)
    if (
        decoded is None
        or unsaved is None
        or generation is None
        or not all(
            isinstance(ps, list) and all(isinstance(p, int) for p in ps) for ps in decoded.values()
        )
    ):
        log.warning("owned_partitions_unreadable", member_id=member_id, reason="not_our_format")
        return MemberReport()
    return MemberReport(decoded, unsaved, generation)


def _generation(value: object) -> int | None:
    """The generation in ``[generation]``; -1 for ``[]`` (none given), ``None`` if malformed."""
    if value == []:
        return NO_GENERATION
    if isinstance(value, list) and len(value) == 1 and type(value[0]) is int:
        return int(value[0])
    return None


def _json_object(data: bytes) -> dict[str, Any] | None:
    try:
        decoded = json.loads(data)
    except ValueError:
        return None
    return decoded if isinstance(decoded, dict) else None


def _rows(unsaved: Unsaved) -> list[list[Any]]:
    rows: list[list[Any]] = []
    room = _UNSAVED_BYTES
    for (topic, partition), ((offset, metadata), (before, before_metadata)) in sorted(
        unsaved.items()
    ):
        room -= len(metadata) + len(before_metadata)
        if room < 0:
            log.warning("unsaved_progress_left_out", partitions=len(unsaved) - len(rows))
            break
        rows.append([topic, partition, offset, metadata, before, before_metadata])
    return rows


def _from_rows(rows: object) -> Unsaved | None:
    """The unsaved progress in ``rows`` (see :func:`_rows`); ``None`` if malformed."""
    if not isinstance(rows, list):
        return None
    unsaved: Unsaved = {}
    for row in rows:
        if not (
            isinstance(row, list)
            and len(row) == 6
            and isinstance(row[0], str)
            and all(type(v) is int for v in (row[1], row[2]))
            and isinstance(row[3], str)
            and (row[4] is None or type(row[4]) is int)
            and isinstance(row[5], str)
        ):
            return None
        topic, partition, offset, metadata, before, before_metadata = row
        unsaved[(topic, partition)] = ((offset, metadata), (before, before_metadata))
    return unsaved
