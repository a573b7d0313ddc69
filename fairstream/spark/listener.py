"""Commit every finished micro-batch to the group, the last one included.

The source commits a batch's end while Spark plans the *next* batch
(:meth:`~fairstream.spark.stream.StreamReader.latestOffset`): PySpark calls a reader's
``commit`` only then, so the last batch of a ``Trigger.Once`` run, and the batch before
``query.stop()``, never reached the group, and lag tools showed the group a batch
behind. Spark reports a batch's progress only once the batch is finished (written and
in the checkpoint's commit log), so a listener on the driver that commits each
progress's end offset is late by nothing and never ahead of the sink::

    spark.streams.addListener(fairstream.spark.GroupCommitter(options))

where ``options`` are the source's. ``fairstream stream`` adds it by itself.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping

import structlog

from fairstream.errors import FairstreamError
from fairstream.spark._extra import missing_extra
from fairstream.spark.cluster import GroupClient
from fairstream.spark.streamoptions import StreamOptions
from fairstream.spark.streamplan import StreamOffset, group_commits

try:
    from pyspark.sql.streaming.listener import (
        QueryIdleEvent,
        QueryProgressEvent,
        QueryStartedEvent,
        QueryTerminatedEvent,
        StreamingQueryListener,
    )
except ImportError as exc:
    raise missing_extra(exc) from exc

__all__ = ["GroupCommitter"]

log = structlog.get_logger(__name__)


class GroupCommitter(StreamingQueryListener):
    """A streaming-query listener that commits each finished batch of the fairstream
    source read with ``options`` to its group (offset ``next``, open catch-up ranges as
    metadata), never moving a partition's commit back."""

    def __init__(self, options: Mapping[str, str]) -> None:
        super().__init__()
        self.options = StreamOptions.parse(options)
        self._client: GroupClient | None = None
        self._using = threading.Lock()
        """Spark calls a listener on its callback thread while the driver may call
        :meth:`commit_finished` itself: one client, one user at a time, and never
        closed under a call."""

    def onQueryStarted(self, event: QueryStartedEvent) -> None:
        pass

    def onQueryProgress(self, event: QueryProgressEvent) -> None:
        for source in event.progress.sources:
            self.commit_finished(source.endOffset)

    def commit_finished(self, end: str | None) -> None:
        """Commit ``end``, a finished batch's end offset as Spark reports it (JSON), if it
        is this source's. A driver that waited for its query calls it with the last
        progress's, since listener events arrive asynchronously."""
        done = self._ours(end)
        if done is not None:
            with self._using:
                self._commit(done)

    def onQueryIdle(self, event: QueryIdleEvent) -> None:
        pass

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
        with self._using:
            if self._client is not None:
                self._client.close()
                self._client = None

    def _ours(self, end: str | None) -> StreamOffset | None:
        """The end offset if it is this source's (same group and topics), else None."""
        try:
            done = StreamOffset.from_json(json.loads(end or "null"))
        except (ValueError, TypeError, FairstreamError):
            return None  # another source's offset
        topics = {topic for topic, _ in done.positions}
        covered = all(self.options.subscription.covers(topic) for topic in topics)
        mine = done.group == self.options.group_id and covered
        return done if mine else None

    def _commit(self, done: StreamOffset) -> None:
        o = self.options
        if not o.commit_to_group:
            return
        if self._client is None:
            self._client = GroupClient(
                o.read.bootstrap, o.group_id, o.read.kafka_config, o.offset_retry
            )
        try:
            states = o.subscription.states(self._client)
            current = {(s.topic, s.partition): (s.committed, s.metadata) for s in states}
            # The source commits too, a batch later: never move a partition back.
            ahead = {
                tp: pos
                for tp, pos in done.positions.items()
                if (current.get(tp, (None, ""))[0] or 0) < pos.next
            }
            self._client.commit(group_commits(ahead, current), "stream")
        except FairstreamError as exc:  # a listener must not fail the query: say it
            log.warning("group_commit_failed", group_id=o.group_id, error=str(exc))
