"""Live traffic for the cooperative-rebalancing tests: a steady producer, waiting helpers."""

from __future__ import annotations

from collections.abc import Callable

import anyio
from aiokafka import AIOKafkaProducer

from fairstream import App


def numbered(partition: int, seq: int) -> tuple[str, bytes | None]:
    """The value ``"<partition>-<seq>"``, no key."""
    return f"{partition}-{seq}", None


async def produce_steadily(
    bootstrap: str,
    topic: str,
    *,
    partitions: int,
    every_s: float,
    written: set[str],
    stop: anyio.Event,
    record: Callable[[int, int], tuple[str, bytes | None]] = numbered,
) -> None:
    """One record to every partition each ``every_s``, until ``stop``.

    ``record(partition, seq)`` gives its value and key (:func:`numbered` by default).
    """
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    await producer.start()
    try:
        seq = 0
        while not stop.is_set():
            for partition in range(partitions):
                value, key = record(partition, seq)
                await producer.send(topic, value.encode(), key=key, partition=partition)
                written.add(value)
            seq += 1
            await anyio.sleep(every_s)
        await producer.flush()
    finally:
        await producer.stop()


async def run_until(app: App, stop: anyio.Event) -> None:
    """Run ``app`` until ``stop`` is set, then drain and leave as ``async with`` does."""
    async with app:
        await stop.wait()


async def wait_until(
    check: Callable[[], bool], within_s: float, why: Callable[[], object] | None = None
) -> None:
    """Poll ``check`` until it holds; after ``within_s`` fail, saying ``why()`` if given."""
    try:
        with anyio.fail_after(within_s):
            while not check():  # noqa: ASYNC110 - a condition over the handled records
                await anyio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(why() if why is not None else "timed out") from None
