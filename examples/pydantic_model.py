"""Records decoded into a pydantic model; a record that does not fit is dead-lettered.

    fairstream topic create payments --partitions 3
    fairstream run pydantic_model:app
    fairstream produce payments '{"id": 1, "amount": "12.50", "currency": "EUR"}'
    fairstream produce payments '{"id": "x"}'        # invalid: goes to payments.dlq

``Record[Payment]`` picks pydantic validation once, at registration. A value that
fails it never reaches the handler: it goes straight to the dead-letter topic with
``fairstream.error.type=DecodeError`` and the validation message, and the partition
keeps flowing. Needs pydantic (``pip install pydantic``). Environment:
FAIRSTREAM_BOOTSTRAP, FAIRSTREAM_GROUP_ID (default ``payments``), PAYMENTS_TOPIC
(default ``payments``).
"""

from __future__ import annotations

import os
from decimal import Decimal
from typing import Literal

import structlog
from pydantic import BaseModel, Field

from fairstream import App, Record

log = structlog.get_logger()


class Payment(BaseModel):
    id: int
    amount: Decimal = Field(gt=0)
    currency: Literal["EUR", "USD", "GBP"] = "EUR"


app = App(group_id=os.environ.get("FAIRSTREAM_GROUP_ID", "payments"))


@app.subscriber(os.environ.get("PAYMENTS_TOPIC", "payments"))
async def handle(record: Record[Payment]) -> None:
    payment = record.value  # a validated Payment, not a dict
    log.info("payment_received", id=payment.id, amount=str(payment.amount))
