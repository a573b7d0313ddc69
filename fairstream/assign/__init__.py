"""Pure partition planning: who in a consumer group should read which partition.

No I/O, no asyncio, no aiokafka import here, and nothing but :mod:`fairstream.errors`
from the rest of fairstream: the runtime's aiokafka adapters, ``fairstream plan``
and the Spark backfill all call the same functions on plain data. Each strategy
module (``range``, ``roundrobin``, ``sticky``, ``fair``, ``lag``) has one
``plan(snapshot, previous=None)``; :data:`STRATEGIES` maps the names to them.
"""

from fairstream.assign.claims import resolve_owned
from fairstream.assign.inputs import parse_document, read_document
from fairstream.assign.model import (
    Assignment,
    Assignor,
    GroupSnapshot,
    PlanStats,
    TopicPartition,
    partition_lag,
)
from fairstream.assign.quality import count_spread, lag_lower_bound, member_lags, moved, stats
from fairstream.assign.strategies import STRATEGIES, plan, resolve, strategy_names

__all__ = [
    "STRATEGIES",
    "Assignment",
    "Assignor",
    "GroupSnapshot",
    "PlanStats",
    "TopicPartition",
    "count_spread",
    "lag_lower_bound",
    "member_lags",
    "moved",
    "parse_document",
    "partition_lag",
    "plan",
    "read_document",
    "resolve",
    "resolve_owned",
    "stats",
    "strategy_names",
]
