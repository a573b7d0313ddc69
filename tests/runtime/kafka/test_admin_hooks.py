"""What ``_kafka/_admin.py`` takes from aiokafka beyond its public API, pinned.

``stop_quietly`` closes a client's connections itself (its private ``_client``) when
aiokafka cancelled its own request while stopping, and ``BrokerAdmin.describe_group``
decodes DescribeGroups' member metadata and assignments with
``aiokafka.coordinator.protocol.ConsumerProtocol``. An aiokafka release that renames
either fails here, before a member leaks connections or a group reads as empty.
"""

from __future__ import annotations

import asyncio
import inspect

import pytest
import structlog
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.coordinator.protocol import (
    ConsumerProtocol,
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)

from fairstream.runtime._kafka._admin import stop_quietly


@pytest.mark.parametrize(
    ("client", "close"),
    [
        pytest.param(AIOKafkaConsumer, "stop", id="consumer"),
        pytest.param(AIOKafkaAdminClient, "close", id="admin"),
    ],
)
async def test_the_clients_stop_quietly_closes_keep_their_connections_in_client(
    client: type, close: str
) -> None:
    """The consumer's fetcher is what cancels its own request on stop (the producer
    keeps its connections in a public ``client`` and has no such fetcher)."""
    built = client(bootstrap_servers="localhost:9")  # never started: nothing connects
    assert inspect.iscoroutinefunction(getattr(built, close))
    assert inspect.iscoroutinefunction(built._client.close)
    await getattr(built, close)()


async def test_a_stop_that_aiokafka_cancelled_itself_closes_the_connections_and_logs() -> None:
    closed = asyncio.Event()

    class Connections:
        async def close(self) -> None:
            closed.set()

    class Client:
        _client = Connections()

        async def stop(self) -> None:
            raise asyncio.CancelledError  # as aiokafka 0.14's fetcher re-raises on stop

    with structlog.testing.capture_logs() as logs:
        await stop_quietly(Client().stop)
    assert closed.is_set()
    assert [entry["event"] for entry in logs] == ["client_stop_failed"]


def test_group_member_bytes_decode_as_describe_group_reads_them() -> None:
    metadata = ConsumerProtocolMemberMetadata(0, ["orders", "refunds"], b"").encode()
    assignment = ConsumerProtocolMemberAssignment(0, [("orders", [0, 2])], b"").encode()
    assert ConsumerProtocol.METADATA.decode(metadata).subscription == ["orders", "refunds"]
    decoded = ConsumerProtocol.ASSIGNMENT.decode(assignment).assignment
    assert [(topic, list(partitions)) for topic, partitions in decoded] == [("orders", [0, 2])]
