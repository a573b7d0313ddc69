"""What ``App(processing="exactly_once")`` accepts, checked before anything connects.

The transactions themselves live in ``_transactions``; this module refuses, with a
``ConfigError`` that says why, the settings they cannot honour yet or at all:

- ``ack="manual"``: a manual commit is a commit outside the transaction that holds
  the outputs; exactly-once commits with the outputs, every ``commit_interval``.
- parallel rebalance (KIP-333): a shadow replays a backlog beside new records and
  commits offset maps a previous owner's handover fills in, progress that is not in
  any transaction.
- ``offset_map=False`` with ``ordering="key"``/``"none"``: records of a partition
  finish out of order, and the outputs of those finished above the committed offset
  are committed with the offset map that says so (``_barrier``); without the map a
  restart would handle them, and publish their outputs, again.

Everything else works: keyed lanes commit through the barrier (``_barrier``), and a
batch handler's dispatches hold one partition each under exactly-once (the engine
makes its lane single), so a batch's outputs go into that partition's transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from fairstream.config import ParallelRebalance
from fairstream.errors import ConfigError
from fairstream.runtime._subscriber import Subscriber

__all__ = [
    "EXACTLY_ONCE_COMMIT_INTERVAL",
    "Processing",
    "check_processing",
    "check_subscribers",
]

Processing = Literal["at_least_once", "exactly_once"]

EXACTLY_ONCE_COMMIT_INTERVAL = 0.1
"""Seconds between transaction commits by default, as Kafka Streams' exactly-once:
outputs are invisible to ``read_committed`` readers until their commit."""


def check_processing(
    processing: str, ack: str, parallel_rebalance: bool | ParallelRebalance
) -> Processing:
    """``processing`` if the App's other settings allow it.

    :raises ConfigError: an unknown mode, or exactly-once with manual acks or
        parallel rebalance.
    """
    if processing == "at_least_once":
        return "at_least_once"
    if processing != "exactly_once":
        raise ConfigError(
            "processing", processing, "unknown mode", "use 'at_least_once' or 'exactly_once'"
        )
    if ack == "manual":
        raise ConfigError(
            "ack",
            ack,
            "cannot be used with processing='exactly_once': a manual commit would commit "
            "offsets outside the transaction that holds the outputs",
            "use ack='auto'; outputs and offsets commit together every commit_interval",
        )
    if parallel_rebalance:
        raise ConfigError(
            "parallel_rebalance",
            parallel_rebalance,
            "cannot be used with processing='exactly_once': a shadow's replayed progress "
            "is committed outside any transaction",
            "leave parallel_rebalance off",
        )
    return "exactly_once"


def check_subscribers(subscribers: Sequence[Subscriber], *, offset_map: bool) -> None:
    """Refuse the handlers exactly-once does not support yet (see the module doc).

    :raises ConfigError: naming the handler and what to change.
    """
    for sub in subscribers:
        where = f"subscriber {sub.name!r}"
        if sub.parallel_rebalance is not None:
            raise ConfigError(
                where,
                None,
                "parallel_rebalance cannot be used with processing='exactly_once': a "
                "shadow's replayed progress is committed outside any transaction",
                "leave it off",
            )
        if sub.keyed and not offset_map:
            raise ConfigError(
                where,
                sub.ordering,
                "needs the offset map with processing='exactly_once': the outputs of "
                "records finished above the committed offset commit with the map that "
                "marks them done, or a restart would publish them again",
                "leave SchedulerConfig(offset_map=True), or use ordering='partition'",
            )
