"""The driver's group client leaves nothing of confluent-kafka to the garbage collector.

A clean-clone CI run crashed a pytest worker with a segmentation fault inside
confluent-kafka's ``AdminClient.list_offsets``, called by :func:`read_states`. The
admin client has no ``close()``; ours was destroyed whenever the collector reached it,
and one held by a reference cycle (a traceback's frames, say) is destroyed wherever a
collection runs: inside another client's call, or on librdkafka's callback thread,
where confluent-kafka does not expect it (confluent-kafka-python #2129). These tests
pin that closing a client destroys both of its handles then and there.
"""

from __future__ import annotations

import pytest

from fairstream.spark.cluster import GroupClient
from tests.conftest import Broker
from tests.spark.conftest import fill_topic

pytestmark = [pytest.mark.broker]


def test_closing_destroys_the_admin_and_the_consumer_handles_at_once(
    noida: Broker, group_id: str
) -> None:
    topic = fill_topic(noida.bootstrap, [3, 2])
    with GroupClient(noida.bootstrap, group_id, {}) as client:
        states = client.states([topic], quiet=True)
        assert [(s.log_start, s.log_end) for s in states] == [(0, 3), (0, 2)]
    with pytest.raises(RuntimeError, match="closed"):
        client.admin.list_topics(timeout=1)
    with pytest.raises(RuntimeError, match="closed"):
        client.consumer.list_topics(timeout=1)
