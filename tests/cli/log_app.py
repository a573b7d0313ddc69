"""The app the log-stream tests run (``fairstream run tests.cli.log_app:app``).

It logs through the standard library, as a user's code or a library would:
``shop`` at INFO and WARNING for each record, and a ``warnings.warn`` at import.
``LOG_TOPIC`` and ``LOG_GROUP`` name its topic and group; ``LOG_QUIET_AIOKAFKA=1``
quiets aiokafka the way the README's Logging section says.
"""

from __future__ import annotations

import logging
import os
import warnings

from fairstream import App, Record

if os.environ.get("LOG_QUIET_AIOKAFKA") == "1":
    logging.getLogger("aiokafka").setLevel(logging.WARNING)

shop = logging.getLogger("shop")
warnings.warn("the shop's settings are the defaults", UserWarning, stacklevel=1)

app = App(group_id=os.environ.get("LOG_GROUP", "log-app"))


@app.subscriber(os.environ.get("LOG_TOPIC", "orders"))
async def handle(record: Record[bytes]) -> None:
    shop.info("order %d seen", record.offset)
    shop.warning("order %d looks odd", record.offset)
