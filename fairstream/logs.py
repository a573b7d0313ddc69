"""structlog set-up. Library modules only call ``structlog.get_logger``; entry points
(the CLI, the demo, a user's ``main``) call :func:`configure` once."""

from __future__ import annotations

import logging
import sys
from contextvars import ContextVar
from typing import Any, Literal

import structlog

__all__ = ["LogFormat", "RecordSlot", "add_record_context", "configure", "current_record"]

LogFormat = Literal["console", "json", "auto"]


class RecordSlot:
    """Holds the record a worker is handling.

    The engine sets the context variable once per slice and only swaps
    ``record`` per record: a ContextVar.set() per record would cost more than the
    rest of the per-record path.
    """

    __slots__ = ("record",)

    def __init__(self) -> None:
        self.record: Any = None


current_record: ContextVar[RecordSlot | None] = ContextVar(
    "fairstream_current_record", default=None
)
"""The slot of the record being handled in this task, if any."""


def add_record_context(
    _logger: object, _method: str, event: structlog.typing.EventDict
) -> structlog.typing.EventDict:
    """Add the coordinates of the record being handled (topic, partition, offset).

    The engine sets one context variable per record, which costs next to nothing;
    this processor reads it only when something is actually logged. Add it to your
    own structlog chain if you configure structlog yourself.
    """
    slot = current_record.get()
    record = slot.record if slot is not None else None
    if record is not None:
        event.setdefault("topic", record.topic)
        event.setdefault("partition", record.partition)
        event.setdefault("offset", record.offset)
    return event


class _RedactSaslExchange(logging.Filter):
    """aiokafka logs every request at DEBUG, SaslAuthenticate's password bytes included."""

    def filter(self, record: logging.LogRecord) -> bool:
        if "SaslAuthenticate" in str(record.msg) or any(
            "SaslAuthenticate" in str(arg) for arg in (record.args or ())
        ):
            record.msg, record.args = (
                "SaslAuthenticate exchange (credentials redacted by fairstream)",
                (),
            )
        return True


class _DemoteBootstrapFailure(logging.Filter):
    """aiokafka's error for each bootstrap server it cannot reach becomes a debug line.

    When no server answers, fairstream fails the start with one error line that says
    what and what to do (``cannot reach the Kafka cluster ...; check the bootstrap
    address``); aiokafka's own error line before it would say it twice. Under
    ``--log-level DEBUG`` it still shows, one line per server tried.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg != 'Unable connect to "%s:%s": %s':
            return True
        if not logging.getLogger(record.name).isEnabledFor(logging.DEBUG):
            return False
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True


# Installed on import, not in configure(): secrets must stay out of logs even for
# users who configure logging themselves.
logging.getLogger("aiokafka.conn").addFilter(_RedactSaslExchange())
logging.getLogger("aiokafka").addFilter(_DemoteBootstrapFailure())


def _stderr_logger(*_args: object) -> structlog.PrintLogger:
    return structlog.PrintLogger(sys.stderr)


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler :func:`configure` gives the root logger: one per process.

    It writes to the ``sys.stderr`` of the moment, as ``_stderr_logger`` does, so
    stdlib lines and structlog events share whatever stderr is (pytest capture, a
    daemon's redirect).
    """

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


# Libraries that install handlers of their own on their loggers (uvicorn's
# LOGGING_CONFIG): configure() takes those handlers off so their lines come through
# the root logger's, rendered like every other line.
_OWN_HANDLERS = ("uvicorn", "uvicorn.error", "uvicorn.access")


def _route_stdlib(renderer: structlog.typing.Processor, level: int) -> None:
    """Render every stdlib log record (aiokafka, uvicorn, confluent's librdkafka, a
    user's ``logging`` calls) with the same processors and renderer as structlog's
    events, so a JSON stream stays JSON line by line."""
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[
            structlog.contextvars.merge_contextvars,
            add_record_context,
            structlog.stdlib.add_logger_name,
            structlog.stdlib.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
        ],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            # The console renderer draws exc_info itself; JSON needs it as data.
            *(
                ()
                if isinstance(renderer, structlog.dev.ConsoleRenderer)
                else (structlog.processors.dict_tracebacks,)
            ),
            renderer,
        ],
    )
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, _StderrHandler)]:
        root.removeHandler(handler)  # configure() again replaces, never doubles
    handler = _StderrHandler()
    handler.setFormatter(formatter)
    root.addHandler(handler)
    # Libraries follow the chosen level through the root logger; a level set on
    # a library's own logger (docs, "Logging": quieting aiokafka) stays as set.
    root.setLevel(level)
    for name in _OWN_HANDLERS:
        library = logging.getLogger(name)
        library.handlers.clear()
        library.propagate = True
    logging.captureWarnings(True)  # Python warnings too, as records of "py.warnings"


def configure(fmt: LogFormat = "auto", level: int | str = logging.INFO) -> None:
    """Route fairstream's (and the user's) structlog events, and every stdlib
    logger's lines (aiokafka's, uvicorn's), to stderr in one format.

    ``auto`` picks the console renderer in a terminal and JSON lines otherwise, so
    a service under systemd or Kubernetes logs machine-readable lines by default.
    Stdlib loggers log at ``level`` unless their own level was set (quiet aiokafka
    with ``logging.getLogger("aiokafka").setLevel(logging.WARNING)``).
    :raises ConfigError: ``level`` is not a logging level name.

    :func:`add_record_context` is installed so that the coordinates of the record
    being handled (topic, partition, offset) appear in the user's own logs.
    """
    if isinstance(level, str):
        levels = logging.getLevelNamesMapping()
        if level.upper() not in levels:
            from fairstream.errors import ConfigError

            raise ConfigError(
                "log level", level, "unknown level", "use DEBUG, INFO, WARNING or ERROR"
            )
        level = levels[level.upper()]
    if fmt == "auto":
        fmt = "console" if sys.stderr.isatty() else "json"
    renderer: structlog.typing.Processor
    if fmt == "console":
        # Colours only for a terminal: escape codes garble a file or a pipe.
        renderer = structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    else:
        renderer = structlog.processors.JSONRenderer()
    _route_stdlib(renderer, level)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            add_record_context,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.dict_tracebacks if fmt == "json" else structlog.dev.set_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        # Look sys.stderr up per logger, not once: it may be swapped (pytest capture,
        # a daemon redirecting it) after configure() ran.
        logger_factory=_stderr_logger,
        cache_logger_on_first_use=False,
    )
