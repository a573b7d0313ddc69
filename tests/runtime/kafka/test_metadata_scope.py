"""A member's helper clients keep metadata of its topics, not of every topic.

Pins ``_metadata_scope``: the pinned aiokafka's producer keeps its client in ``client``
and its admin client and consumer in ``_client``, each with ``set_topics``; a client
so scoped before it starts ends up with metadata of those topics only (noida answers
a bootstrap's empty topic list with every topic, Kafka a refresh of a client that
tracks none); and an App's producer and admin clients are so scoped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest
import structlog
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

from fairstream import App, Record
from fairstream.runtime._kafka._clients import AIOKafkaClients
from fairstream.runtime._kafka._metadata_scope import keep_metadata_of
from tests.conftest import Broker, TopicFactory

CLIENTS: list[Callable[[str], Any]] = [
    lambda bootstrap: AIOKafkaProducer(bootstrap_servers=bootstrap),
    lambda bootstrap: AIOKafkaConsumer(bootstrap_servers=bootstrap),
    lambda bootstrap: AIOKafkaAdminClient(bootstrap_servers=bootstrap),
]
IDS = ["producer", "consumer", "admin"]


async def _close(client: Any) -> None:
    await (client.close if isinstance(client, AIOKafkaAdminClient) else client.stop)()


def _cluster(owner: Any) -> Any:
    return (getattr(owner, "client", None) or owner._client).cluster


async def _topics_become(owner: Any, wanted: set[str]) -> set[str]:
    """The topics ``owner``'s metadata holds once they are ``wanted`` (or after 10 s)."""
    with anyio.move_on_after(10):
        while _cluster(owner).topics() != wanted:  # noqa: ASYNC110 - aiokafka's own state
            await anyio.sleep(0.05)
    return set(_cluster(owner).topics())


@pytest.mark.parametrize("build", CLIENTS, ids=IDS)
async def test_the_pinned_aiokafka_clients_take_a_topic_scope(build: Callable[[str], Any]) -> None:
    client = build("localhost:9")  # never started: nothing connects
    try:
        assert keep_metadata_of(client, ["orders"]) is True
        assert keep_metadata_of(client, []) is False  # none asked: aiokafka's default stays
    finally:
        await _close(client)


def test_a_client_it_does_not_know_is_left_as_it_is_and_logged() -> None:
    with structlog.testing.capture_logs() as logs:
        assert keep_metadata_of(object(), ["orders"]) is False
    assert [e["event"] for e in logs] == ["metadata_scope_unavailable"]


@pytest.mark.broker
@pytest.mark.parametrize("build", CLIENTS, ids=IDS)
async def test_a_scoped_client_holds_metadata_of_its_topics_only(
    broker: Broker, make_topic: TopicFactory, build: Callable[[str], Any]
) -> None:
    mine = await make_topic(partitions=2)
    await make_topic(partitions=16)  # another topic of the cluster, not this client's
    client = build(broker.bootstrap)
    keep_metadata_of(client, [mine])
    await client.start()
    try:
        assert await _topics_become(client, {mine}) == {mine}
        assert len(_cluster(client).partitions_for_topic(mine)) == 2
    finally:
        await _close(client)


@pytest.mark.broker
async def test_an_apps_producer_and_admin_clients_hold_its_topics_only(
    broker: Broker, make_topic: TopicFactory, group_id: str
) -> None:
    mine = await make_topic(partitions=2)
    await make_topic(partitions=16)
    app = App(bootstrap=broker.bootstrap, group_id=group_id)

    @app.subscriber(mine)
    async def handle(record: Record[bytes]) -> None: ...

    async with app:
        clients = app._clients
        assert isinstance(clients, AIOKafkaClients)
        # The admin connects at the first assignment (the room reads the commits).
        with anyio.fail_after(30):
            while clients._admin._admin is None:  # noqa: ASYNC110 - the member's own state
                await anyio.sleep(0.05)
        admin, probe = clients._admin._clients()
        # The producer's: the app's topic and its dead-letter topic (on by default).
        producing = {mine, f"{mine}.dlq"}
        assert await _topics_become(clients._producing.producer, producing) == producing
        for owner in (admin, probe):
            assert await _topics_become(owner, {mine}) == {mine}, owner
