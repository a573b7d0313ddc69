"""What ``processing="exactly_once"`` refuses, before anything connects, and a broker
without transactions (issue 41)."""

from __future__ import annotations

import uuid

import anyio
import pytest

from fairstream import App, BrokerError, ConfigError, Record, SchedulerConfig
from tests.conftest import Broker
from tests.support.kafka_helpers import create_topic


def _app(**settings: object) -> App:
    return App(group_id="g", bootstrap="127.0.0.1:1", processing="exactly_once", **settings)  # type: ignore[arg-type]


def test_commit_interval_defaults_to_100_ms_under_exactly_once() -> None:
    assert _app().scheduler_config.commit_interval == 0.1
    assert App(group_id="g").scheduler_config.commit_interval == SchedulerConfig().commit_interval


@pytest.mark.parametrize(
    ("settings", "field", "why"),
    [
        ({"ack": "manual"}, "ack", "outside the transaction"),
        ({"parallel_rebalance": True}, "parallel_rebalance", "outside any transaction"),
    ],
)
def test_settings_it_cannot_honour_are_refused_when_built(
    settings: dict[str, object], field: str, why: str
) -> None:
    with pytest.raises(ConfigError, match=why) as caught:
        _app(**settings)
    assert caught.value.field == field


def test_an_unknown_mode_is_refused() -> None:
    with pytest.raises(ConfigError, match="unknown mode"):
        App(group_id="g", processing="at_most_once")  # type: ignore[arg-type]


async def test_key_ordering_without_the_offset_map_is_refused_before_connecting() -> None:
    keyed = _app(scheduler=SchedulerConfig(ordering="key", concurrency=8, offset_map=False))

    @keyed.subscriber("orders")
    async def handle(record: Record[bytes]) -> None: ...

    with pytest.raises(ConfigError, match="needs the offset map"):
        async with keyed:
            pass


@pytest.mark.broker
async def test_a_broker_without_transactions_stops_the_app_with_one_line(
    tansu: Broker, group_id: str
) -> None:
    topic = f"eos-tansu-{uuid.uuid4().hex[:8]}"
    await create_topic(tansu.bootstrap, topic, 1)
    app = App(group_id=group_id, bootstrap=tansu.bootstrap, processing="exactly_once")

    @app.subscriber(topic)
    async def handle(record: Record[bytes]) -> None: ...

    with pytest.raises(BrokerError, match="does the broker support transactions"):
        with anyio.fail_after(60):
            await app.run()
