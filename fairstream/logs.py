"""structlog set-up. Library modules only call ``structlog.get_logger``; entry points
(the CLI, the demo, a user's ``main``) call :func:`configure` once."""

from __future__ import annotations

import logging
import sys
from typing import Literal

import structlog

__all__ = ["LogFormat", "configure"]

LogFormat = Literal["console", "json", "auto"]


def configure(fmt: LogFormat = "auto", level: int | str = logging.INFO) -> None:
    """Route fairstream's (and the user's) structlog events to stderr.

    ``auto`` picks the console renderer in a terminal and JSON lines otherwise, so
    a service under systemd or Kubernetes logs machine-readable lines by default.
    ``merge_contextvars`` is installed so that the record coordinates bound around
    each handler call (topic, partition, offset) appear in the user's own logs.
    """
    if isinstance(level, str):
        level = logging.getLevelNamesMapping()[level.upper()]
    if fmt == "auto":
        fmt = "console" if sys.stderr.isatty() else "json"
    renderer: structlog.typing.Processor
    if fmt == "console":
        renderer = structlog.dev.ConsoleRenderer()
    else:
        renderer = structlog.processors.JSONRenderer()
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.dict_tracebacks if fmt == "json" else structlog.dev.set_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
