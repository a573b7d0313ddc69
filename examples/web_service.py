"""A FastAPI service that consumes while it serves: health, stats and metrics.

    FAIRSTREAM_BOOTSTRAP=127.0.0.1:PORT uvicorn web_service:api --port 8000

The consumer starts and stops with the web app through its lifespan, so a
rolling deploy drains handlers and commits before the process exits.
Environment: FAIRSTREAM_BOOTSTRAP, FAIRSTREAM_GROUP_ID (default ``web-orders``),
ORDERS_TOPIC (default ``orders``).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from fastapi import FastAPI, Response
from fastapi.responses import PlainTextResponse

from fairstream import App, Record

consumer = App(group_id=os.environ.get("FAIRSTREAM_GROUP_ID", "web-orders"), assignor="lag")
totals = {"orders": 0, "amount": 0}


@consumer.subscriber(os.environ.get("ORDERS_TOPIC", "orders"))
async def handle(record: Record[dict[str, Any]]) -> None:
    totals["orders"] += 1
    totals["amount"] += int(record.value.get("amount", 0))


api = FastAPI(lifespan=consumer.lifespan)


@api.get("/health")
async def health(response: Response) -> dict[str, Any]:
    """200 when consuming; 503 while starting, rebalancing out or stopped."""
    state = consumer.health()
    if not state.ready:
        response.status_code = 503
    return dataclasses.asdict(state)


@api.get("/stats")
async def stats() -> dict[str, Any]:
    return {"consumer": dataclasses.asdict(consumer.stats()), "totals": totals}


@api.get("/metrics", response_class=PlainTextResponse)
async def metrics() -> str:
    return consumer.metrics_text()
