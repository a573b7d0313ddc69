"""A shadow's consumer is stopped even when its start fails or is cancelled.

A rebalance storm revokes partitions while their KIP-333 shadows are still
connecting; each consumer started that way and never stopped made aiokafka log
"Unclosed AIOKafkaConsumer" when it was collected (6 times in the 2M-record soak).
No broker is needed: the bootstrap address is a port nobody listens on.
"""

from __future__ import annotations

import gc
import socket
import warnings

import anyio
import pytest

from fairstream import App, BrokerError
from fairstream.runtime._kafka._clients import aiokafka_clients


def _closed_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


def _unclosed_consumers(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if "Unclosed AIOKafkaConsumer" in str(w.message)]


@pytest.mark.parametrize("how", ["start_fails", "start_cancelled"])
async def test_shadow_consumer_is_stopped_when_its_start_does_not_finish(how: str) -> None:
    clients = aiokafka_clients(App(bootstrap=_closed_port(), group_id="g-shadow"), [])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if how == "start_fails":
            with pytest.raises(BrokerError, match="for the shadow"):
                async with clients.shadow_reader(("t", 0)):
                    pytest.fail("the shadow's consumer cannot start without a broker")
        else:
            with anyio.move_on_after(0) as scope:
                async with clients.shadow_reader(("t", 0)):
                    pytest.fail("cancelled before its consumer started")
            assert scope.cancelled_caught
        gc.collect()
    await clients.aclose()
    assert _unclosed_consumers(caught) == []
