"""The consumer engine on aiokafka and anyio.

Modules are private (``_app``, ``_engine``, ``_scheduler``, ...); the public names
are re-exported by ``fairstream``, which imports this package on first use of one.
May import ``fairstream.assign``, ``config``, ``errors``, ``ranges``; never ``cli``,
``spark`` or ``testing``.
"""

from types import FunctionType

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
    "BrokerAdmin",
    "CallNext",
    "DecodeError",
    "Decoder",
    "HandlerLatency",
    "Health",
    "Middleware",
    "PartitionStats",
    "Record",
    "load_app",
    "make_assignor",
    "serve_status",
]


def _show_public_paths() -> None:
    """Reprs, tracebacks and docs say ``fairstream.App``, where users import it from,
    whichever module of the runtime was imported first."""
    for name in __all__:
        obj = globals()[name]
        if isinstance(obj, type | FunctionType):  # type aliases keep theirs
            obj.__module__ = "fairstream"


_show_public_paths()
