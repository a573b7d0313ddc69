"""fairstream: fair, rebalance-friendly asyncio Kafka consumers.

The public API lives here; ``fairstream.assign`` (pure planning),
``fairstream.testing`` (brokers and the in-memory kit) and ``fairstream.spark``
(backfills) are imported explicitly.
"""

from types import FunctionType

from fairstream.config import (
    ConsumerConfig,
    DeadLetterPolicy,
    ParallelRebalance,
    ProducerConfig,
    RetryPolicy,
    SchedulerConfig,
    SecurityConfig,
)
from fairstream.errors import (
    BackfillError,
    BrokerError,
    CommitError,
    ConfigError,
    FairstreamError,
    HandlerAborted,
    HandlerCancelled,
    HandlerError,
    HandoffFailed,
    PlanError,
)
from fairstream.runtime._admin import BrokerAdmin
from fairstream.runtime._app import App, Health
from fairstream.runtime._assignors import make_assignor
from fairstream.runtime._decode import DecodeError, Decoder
from fairstream.runtime._http import serve_status
from fairstream.runtime._loader import load_app
from fairstream.runtime._middleware import CallNext, Middleware
from fairstream.runtime._record import Record
from fairstream.runtime._stats import AppStats, HandlerLatency, PartitionStats

__all__ = [
    "App",
    "AppStats",
    "BackfillError",
    "BrokerAdmin",
    "BrokerError",
    "CallNext",
    "CommitError",
    "ConfigError",
    "ConsumerConfig",
    "DeadLetterPolicy",
    "DecodeError",
    "Decoder",
    "FairstreamError",
    "HandlerAborted",
    "HandlerCancelled",
    "HandlerError",
    "HandlerLatency",
    "HandoffFailed",
    "Health",
    "Middleware",
    "ParallelRebalance",
    "PartitionStats",
    "PlanError",
    "ProducerConfig",
    "Record",
    "RetryPolicy",
    "SchedulerConfig",
    "SecurityConfig",
    "load_app",
    "make_assignor",
    "serve_status",
]

__version__ = "0.1.0"


def _show_public_paths() -> None:
    """Reprs, tracebacks and docs say ``fairstream.App``, where users import it from.

    The way trio and anyio fix up their re-exports; the classes stay where they are.
    """
    for name in __all__:
        obj = globals()[name]
        if isinstance(obj, type | FunctionType):  # type aliases keep theirs
            obj.__module__ = __name__


_show_public_paths()
