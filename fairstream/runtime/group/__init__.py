"""Partitions arriving and leaving: the group's side of the runtime.

``_rebalance`` is the listener that takes partitions up and gives them back
(committing first); ``_jumps`` decides a KIP-333 jump for a partition that arrives
far behind and ``_shadow`` replays the range it jumped over; ``_protocol_names`` says
which JoinGroup protocol a strategy goes by and whether a group may hold other
clients' consumers; ``_assignor_checks`` validates the assignor settings an ``App``
is given. Like the rooms of ``flow/``, they reach Kafka through
:mod:`fairstream.runtime._ports`, never through ``runtime/_kafka``.
"""
