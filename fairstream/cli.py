"""The ``fairstream`` command: parse arguments, call the library, print.

Each subcommand has an ``_add_<name>`` that declares its options and a
``_run_<name>`` that does the work. A :class:`FairstreamError` becomes one line on
stderr and exit status 2; anything else keeps its traceback, because it is a bug.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence

from fairstream.errors import FairstreamError

__all__ = ["main"]

Runner = Callable[[argparse.Namespace], int]


def _bootstrap_default() -> str | None:
    return os.environ.get("FAIRSTREAM_BOOTSTRAP") or None


# --- broker -------------------------------------------------------------------------


def _add_broker(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "broker",
        help="run an embedded Kafka-protocol broker on 127.0.0.1 until interrupted",
        description=(
            "Start a real Kafka-protocol broker from a PyPI wheel on 127.0.0.1, wait until "
            "it answers a metadata request, print 'bootstrap=127.0.0.1:PORT', and stop it "
            "(removing its data directory) on SIGINT or SIGTERM."
        ),
    )
    parser.add_argument(
        "--engine",
        choices=["noida", "tansu"],
        default="noida",
        help="broker engine: noida (default; keeps commit metadata, restartable) or tansu "
        "(evicts dead members after the session timeout)",
    )
    parser.add_argument(
        "--port", type=int, default=None, help="TCP port to listen on (default: a free port)"
    )
    parser.set_defaults(run=_run_broker)


def _run_broker(args: argparse.Namespace) -> int:
    from fairstream.testing import EmbeddedBroker

    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    with EmbeddedBroker(args.engine, port=args.port) as broker:
        print(f"bootstrap={broker.bootstrap}", flush=True)
        stop.wait()
    return 0


# --- entry point --------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fairstream",
        description="Fair, rebalance-friendly Kafka consumers: tools for planning, running "
        "and testing fairstream apps.",
    )
    parser.add_argument(
        "--log-level",
        default="WARNING",
        help="log level for fairstream's own events on stderr (default: WARNING)",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_broker(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from fairstream import logs

    logs.configure(getattr(args, "log_format", "auto"), args.log_level)
    run: Runner = args.run
    try:
        return run(args)
    except FairstreamError as exc:
        print(f"fairstream {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
