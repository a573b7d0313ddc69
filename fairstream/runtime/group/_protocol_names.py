"""The JoinGroup protocol names a member offers, one per strategy, and what they mean.

A member may offer several strategies, best first (Kafka's
``partition.assignment.strategy`` list): the coordinator picks a protocol every
member offers, so fairstream members can join a group of plain aiokafka,
librdkafka or Java consumers and take it over once the last of those leaves.
``range`` and ``roundrobin`` are offered under Kafka's own protocol names for that;
the metadata is the standard consumer protocol's (version 0: the subscription,
and fairstream's owned partitions only in the user data), which those clients read.

The names live apart from the planner (:mod:`fairstream.runtime._kafka._assignors`)
and its aiokafka entries (:mod:`fairstream.runtime._kafka._strategy_offers`) because
the rebalance room asks them too: a group on a shared protocol may hold consumers
that cannot read KIP-333 ranges (:func:`shared_protocol`). Plain functions of
strings: the typing Protocols of the runtime are in ``_ports``.
"""

from __future__ import annotations

__all__ = ["protocol_name", "shared_protocol"]

_KAFKA_NAMED = frozenset({"range", "roundrobin"})
"""Strategies every Kafka client has under these protocol names, assigning alike
(``tests/assign/test_kafka_rules.py``), so a mixed group can agree on them."""


def protocol_name(strategy: str, cooperative: bool = False) -> str:
    """The JoinGroup protocol name of a strategy: Kafka's own, or ``fairstream-<name>``.

    ``lag``, ``fair`` and ``sticky`` plan differently from anything another client
    offers (Kafka's ``sticky`` keeps its own user data), so they keep our prefix;
    cooperative members (KIP-429) never share a protocol with eager ones: ``-coop``.
    """
    if cooperative or strategy not in _KAFKA_NAMED:
        return f"fairstream-{strategy}" + ("-coop" if cooperative else "")
    return strategy


def shared_protocol(protocol: str | None) -> bool:
    """Whether a group on ``protocol`` may hold members that are not fairstream apps.

    Any Kafka client can join a group on ``range`` or ``roundrobin``, and such a
    member cannot read the KIP-333 ranges kept in commit metadata: a partition that
    jumped and then moved to it would lose its shadow's records.
    """
    return protocol is not None and not protocol.startswith("fairstream-")
