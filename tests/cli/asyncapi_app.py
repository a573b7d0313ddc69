"""An app with one handler of each payload kind, for ``fairstream asyncapi``'s tests."""

from __future__ import annotations

from pydantic import BaseModel

from fairstream import App, Record


class Item(BaseModel):
    sku: str
    qty: int


class Order(BaseModel):
    id: int
    items: list[Item]


app = App(group_id="billing", bootstrap="kafka-a:9092,kafka-b:9092")


@app.subscriber("orders")
async def on_order(record: Record[Order]) -> None: ...


@app.subscriber("audit", "raw")
async def on_raw(record: Record[bytes]) -> None: ...


@app.subscriber("notes", batch=True)
async def on_notes(records: list[Record[str]]) -> None: ...


@app.subscriber("events")
async def on_event(record: Record[dict[str, int]]) -> None: ...


@app.subscriber("custom", decoder=lambda raw: raw)
async def on_custom(record: Record[object]) -> None: ...


@app.publisher("receipts")
@app.subscriber("payments")
async def on_payment(record: Record[dict]) -> Order | None: ...
