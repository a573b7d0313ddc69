"""The consumer engine on aiokafka and anyio.

Modules are private; the public names are re-exported by ``fairstream``, which
imports this package on first use of one. The face (``_app``, ``_registration``,
decoding, middleware, loader, status endpoint), the ports (``_ports``) and the engine
(``_engine``) sit here; ``flow/`` holds the record's walk (fetch, scheduler, workers,
handling, offsets, commit), ``group/`` partitions arriving and leaving (rebalance,
KIP-333 jumps and shadows), and ``_kafka/`` everything that touches aiokafka's
internals (docs/development/architecture.md).
May import ``fairstream.assign``, ``config``, ``errors``, ``ranges``; never ``cli``,
``spark`` or ``testing``.
"""

from fairstream._public import show_public_paths as _show_public_paths
from fairstream.runtime._app import App, Health
from fairstream.runtime._decode import DecodeError, Decoder
from fairstream.runtime._http import serve_status
from fairstream.runtime._kafka._admin import BrokerAdmin
from fairstream.runtime._kafka._assignors import make_assignor
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

# Shown as ``fairstream.App`` (where users import them from), whichever module of the
# runtime was imported first.
_show_public_paths(globals(), __all__, "fairstream")
