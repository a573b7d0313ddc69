"""Static typing checks, run by mypy (``make typecheck``), never imported by pytest.

Each ``# type: ignore[...]`` marks a line mypy must reject: with ``strict`` on, an
ignore that is not needed is itself an error, so these checks can fail both ways.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, assert_type

from fairstream import App, Record

app = App(group_id="typing", bootstrap="127.0.0.1:9092")


@app.subscriber("orders")
async def handle(record: Record[dict[str, Any]]) -> None:
    # Record[dict] gives value: dict, and the other fields keep their types.
    assert_type(record.value, dict[str, Any])
    assert_type(record.key, bytes | None)
    assert_type(record.offset, int)


# A decorated handler keeps its own type: it is still a coroutine function of a
# Record[dict], so calling it with anything else is an error.
kept: Callable[[Record[dict[str, Any]]], Coroutine[Any, Any, None]] = handle
_ = handle(b"not a record")  # type: ignore[arg-type]


@app.subscriber("clicks", batch=True)
async def handle_batch(records: list[Record[str]]) -> None:
    assert_type(records[0].value, str)


# A batch handler must take a list, and a record handler a record.
@app.subscriber("views", batch=True)  # type: ignore[type-var]
async def not_a_batch(record: Record[str]) -> None: ...


@app.subscriber("carts")  # type: ignore[type-var]
async def not_a_record(records: list[Record[str]]) -> None: ...


def batching(flag: bool) -> None:
    # A computed flag picks neither overload's Literal and takes any async handler.
    @app.subscriber("pages", batch=flag)
    async def either(record: Record[bytes]) -> None: ...


# Record[V] keeps keys as bytes; Record[V, K] asks for decoded keys.
@app.subscriber("users")
async def keyed(record: Record[dict[str, Any], str]) -> None:
    assert_type(record.key, str)
    assert_type(record.value, dict[str, Any])


@app.subscriber("profiles", batch=True)
async def keyed_batch(records: list[Record[str, dict[str, Any]]]) -> None:
    assert_type(records[0].key, dict[str, Any])


def key_as_hex(raw: bytes | None, /) -> str:
    return raw.hex() if raw else ""


@app.subscriber("sessions", key_decoder=key_as_hex)
async def custom_key(record: Record[bytes, Any]) -> None:
    assert_type(record.key, Any)


# A handler under @app.publisher returns what it publishes; the decorators keep its type.
@app.publisher("receipts")
@app.subscriber("payments")
async def pay(record: Record[dict[str, Any]]) -> dict[str, int]:
    return {"paid": 1}


paid: Callable[[Record[dict[str, Any]]], Coroutine[Any, Any, dict[str, int]]] = pay


@app.on_partitions_assigned
async def assigned(partitions: list[Any]) -> None: ...


@app.on_startup
async def started() -> None: ...


@app.on_startup  # type: ignore[type-var]
async def takes_an_argument(x: int) -> None: ...
