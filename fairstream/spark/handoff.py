"""Hand large KIP-333 shadow ranges to a Spark backfill instead of the in-process shadow.

The runtime takes any ``ParallelRebalance(handoff=...)`` callable and never imports
this package; this module builds one around
:func:`~fairstream.spark.backfill.submit_shadow_backfill`:

>>> app = App(
...     bootstrap="kafka:9092",
...     group_id="billing",
...     parallel_rebalance=ParallelRebalance(
...         handoff=spark_shadow_handoff(
...             bootstrap="kafka:9092", group_id="billing", handler="billing.jobs:on_order"
...         ),
...         handoff_threshold=1_000_000,
...     ),
... )  # doctest: +SKIP

The Spark handler takes a :class:`~fairstream.spark.BackfillRecord` (raw bytes),
not the app's decoded ``Record``, so it is named separately. The call blocks until
the job is done, so the runtime runs it in a worker thread; when it raises
(:class:`~fairstream.errors.BackfillError`, a missing extra) the range stays open
and the in-process shadow replays it instead. It never raises
:class:`~fairstream.errors.HandoffFailed`: the job's chunks run in parallel and a
failed task aborts the others, so there is no offset below which every record is
known to be handled, and claiming one could lose records.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from fairstream.ranges import OffsetRange
from fairstream.spark.backfill import submit_shadow_backfill
from fairstream.spark.handlers import Handler

__all__ = ["spark_shadow_handoff"]


def spark_shadow_handoff(
    *,
    bootstrap: str,
    group_id: str,
    handler: str | Handler,
    master: str | None = None,
    chunk: int = 100_000,
    kafka_config: Mapping[str, str] | None = None,
) -> Callable[[str, int, OffsetRange], None]:
    """A ``ParallelRebalance(handoff=...)`` that backfills each range on Spark.

    ``handler`` is a ``module:func`` reference or the function itself; ``master``,
    ``chunk`` and ``kafka_config`` are passed to the backfill (see ``fairstream backfill``).
    Nothing is committed by the job: the app drops the range from its commit
    metadata once the call returns.
    """

    def handoff(topic: str, partition: int, shadow: OffsetRange) -> None:
        submit_shadow_backfill(
            bootstrap=bootstrap,
            group_id=group_id,
            topic=topic,
            partition=partition,
            shadow=shadow,
            handler=handler,
            master=master,
            chunk=chunk,
            kafka_config=kafka_config,
        )

    return handoff
