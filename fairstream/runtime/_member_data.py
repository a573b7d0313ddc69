"""What a fairstream member reports in its join metadata's user data, and how the
leader reads it back: the partitions it owns, as ``{"topic": [partitions]}`` JSON.

Any leader can then hand the planners a previous assignment, whoever led last time.
User data it cannot read (another client's, another fairstream version's format)
counts as no previous assignment for that member, with a warning: a plan never
fails over it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import structlog
from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata

from fairstream.assign import Assignment

__all__ = ["encode_owned", "reported_owners"]

log = structlog.get_logger(__name__)

_RESTARTS = ""
"""User-data key for how often this member's consumer was rebuilt. No topic can be
named "", so every leader's owned-partitions reader skips it, older ones included."""


def encode_owned(owned: Mapping[str, list[int]], restarts: int) -> bytes:
    """The user data: owned partitions, and how often the consumer was rebuilt (if ever)."""
    data: dict[str, list[int]] = dict(owned)
    if restarts:
        data[_RESTARTS] = [restarts]
    return json.dumps(data, separators=(",", ":"), sort_keys=True).encode()


def reported_owners(
    members: Mapping[str, ConsumerProtocolMemberMetadata], counts: Mapping[str, int]
) -> Assignment | None:
    """The previous assignment members report; partitions claimed twice are dropped."""
    claims: dict[tuple[str, int], list[str]] = {}
    for member_id, meta in sorted(members.items()):
        for topic, partitions in _decode_owned(member_id, meta.user_data).items():
            for partition in partitions:
                if topic in counts and 0 <= partition < counts[topic]:
                    claims.setdefault((topic, partition), []).append(member_id)
    owned: dict[str, dict[str, list[int]]] = {}
    for (topic, partition), claimants in claims.items():
        if len(claimants) == 1:
            owned.setdefault(claimants[0], {}).setdefault(topic, []).append(partition)
    if not owned:
        return None
    return Assignment(
        {m: {t: tuple(ps) for t, ps in topics.items()} for m, topics in owned.items()}
    )


def _decode_owned(member_id: str, user_data: bytes) -> dict[str, list[int]]:
    if not user_data:
        return {}
    try:
        decoded = json.loads(user_data)
    except ValueError:
        decoded = None
    if not isinstance(decoded, dict) or not all(
        isinstance(ps, list) and all(isinstance(p, int) for p in ps) for ps in decoded.values()
    ):
        log.warning("owned_partitions_unreadable", member_id=member_id, reason="not_our_format")
        return {}
    return decoded
