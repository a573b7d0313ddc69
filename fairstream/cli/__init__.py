"""The ``fairstream`` command: parse arguments, call the library, print.

``fairstream.cli:main`` is the console script and ``python -m fairstream`` runs it;
nothing in the library imports this package, and it uses public names only.
Each subcommand has an ``_add_<name>`` that declares its options and a
``_run_<name>`` that does the work: ``asyncapi``, ``broker`` and ``run`` here, ``lag``
and ``plan`` in :mod:`fairstream.cli._groups`, ``topic`` and ``produce`` in
:mod:`fairstream.cli._kafka`, ``backfill`` in :mod:`fairstream.cli._backfill`,
``stream`` in :mod:`fairstream.cli._stream`. A :class:`FairstreamError` becomes one
line on stderr and exit status 2; anything else keeps its traceback, because it is a bug.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import logging
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING

from fairstream.cli._backfill import add_backfill
from fairstream.cli._groups import add_lag, add_plan
from fairstream.cli._kafka import (
    add_bootstrap,
    add_produce,
    add_topic,
    check_bootstrap,
    require_extra,
)
from fairstream.cli._stream import add_stream
from fairstream.config import from_env
from fairstream.errors import ConfigError, FairstreamError

if TYPE_CHECKING:
    from fairstream import App
    from fairstream.supervisor import Supervision

__all__ = ["main"]

Runner = Callable[[argparse.Namespace], int]


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
    from fairstream.testing import ENGINES, EmbeddedBroker

    require_extra("broker", ENGINES[args.engine].package)

    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    with EmbeddedBroker(args.engine, port=args.port) as broker:
        print(f"bootstrap={broker.bootstrap}", flush=True)
        stop.wait()
    return 0


# --- run ----------------------------------------------------------------------------


def _add_run(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "run",
        help="run a fairstream App until SIGINT/SIGTERM",
        description=(
            "Import APP (module:attribute, the attribute an App or a function returning one) "
            "and consume until SIGINT or SIGTERM; then stop fetching, drain in-flight "
            "handlers, commit, leave the group and exit 0. A handler failing under the "
            "'stop' policy, an unreachable cluster or a missing topic exit with status 2."
        ),
    )
    parser.add_argument("app", metavar="APP", help="the App to run, as module:attribute")
    add_bootstrap(parser, what="the cluster, instead of the App's own bootstrap")
    parser.add_argument(
        "--group-id",
        metavar="G",
        default=None,
        help="consumer group to join instead of the App's group_id "
        "(default: $FAIRSTREAM_GROUP_ID, else the App's)",
    )
    parser.add_argument(
        "--assignor",
        metavar="S[,S...]",
        default=None,
        help="assignment strategy instead of the App's assignor: range, roundrobin, "
        "sticky, fair or lag, or several best first, e.g. lag,roundrobin,range "
        "(default: $FAIRSTREAM_ASSIGNOR, else the App's)",
    )
    parser.add_argument(
        "--http-port",
        type=int,
        default=None,
        metavar="PORT",
        help="serve /metrics (Prometheus text; through prometheus_client when the "
        "prometheus extra is installed), /health and /ready on --http-host:PORT, 1-65535 "
        "(default: no HTTP endpoint)",
    )
    parser.add_argument(
        "--http-host",
        default="0.0.0.0",
        help="address for --http-port: every interface by default, so container probes "
        "and Prometheus reach it on the pod's address; 127.0.0.1 keeps it local",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="run N worker processes (group members) under one supervisor, to use N cores: "
        "it forwards SIGINT/SIGTERM, restarts a worker that dies (with backoff; one that "
        "exits 2 stops them all, exit 2), names static members <instance_id>-<i>, and "
        "serves one --http-port for all: ready when every worker is, metrics with a "
        "worker label (default: 1, no supervisor)",
    )
    parser.add_argument(
        "--reload",
        action="store_true",
        help="for development: restart the app when a .py file under the current "
        "directory changes (needs the reload extra: pip install 'fairstream[reload]'); "
        "not with --workers above 1",
    )
    parser.set_defaults(run=_run_run, log_level_default="INFO")


def _run_run(args: argparse.Namespace) -> int:
    import anyio

    from fairstream import load_app

    if args.http_port is not None and not 1 <= args.http_port <= 65535:
        raise ConfigError("--http-port", args.http_port, "is not a TCP port", "give 1-65535")
    supervision = _supervision(args)
    app = load_app(args.app)  # under a supervisor too: a bad app fails once, not per worker
    if args.bootstrap:
        app.bootstrap = args.bootstrap
    if app.bootstrap:
        check_bootstrap(app.bootstrap)
    _override_app(app, args)
    if supervision is not None:
        from fairstream.supervisor import supervise

        return supervise(supervision)
    from fairstream.supervisor import worker_setup

    worker = worker_setup()
    if worker is not None:  # one of a supervisor's workers
        import structlog

        app.instance_id = worker.instance_id(app.instance_id)
        structlog.contextvars.bind_contextvars(worker=worker.index)
        anyio.run(partial(_run_with_status, app, sock=worker.sock))
    elif args.http_port is None:
        anyio.run(app.run)
    else:
        anyio.run(partial(_run_with_status, app, host=args.http_host, port=args.http_port))
    return 0


def _supervision(args: argparse.Namespace) -> Supervision | None:
    """What ``--workers``/``--reload`` ask a supervisor to run; ``None``: run in-process."""
    from fairstream.supervisor import Supervision, worker_command

    if args.workers == 1 and not args.reload:
        return None
    supervision = Supervision(
        command=worker_command(
            args.app,
            bootstrap=args.bootstrap,
            options=[
                ("--group-id", args.group_id),
                ("--assignor", args.assignor),
                ("--log-level", args.log_level),
                ("--log-format", args.log_format),
            ],
        ),
        workers=args.workers,
        http_host=args.http_host,
        http_port=args.http_port,
        reload=args.reload,
    )
    if args.reload:
        require_extra("reload", "watchfiles")
    return supervision


def _override_app(app: App, args: argparse.Namespace) -> None:
    """Apply --group-id and --assignor, or their FAIRSTREAM_* variables, over the App's own.

    Like --bootstrap, so one app file runs as different groups per environment.
    """
    from fairstream.assign import strategy_names

    group_id = args.group_id or args.env.get("group_id")
    if group_id:
        app.group_id = group_id
    if args.assignor:
        app.assignor = strategy_names(args.assignor, field="--assignor")
    elif "assignor" in args.env:
        app.assignor = strategy_names(args.env["assignor"], field="FAIRSTREAM_ASSIGNOR")


async def _run_with_status(
    app: App, *, host: str = "127.0.0.1", port: int = 0, sock: socket.socket | None = None
) -> None:
    import anyio

    from fairstream import serve_status

    try:
        from fairstream.prometheus import metrics_text
    except ImportError:  # the prometheus extra is missing: the dependency-free text
        metrics = app.metrics_text
    else:
        metrics = partial(metrics_text, app)
    try:
        async with anyio.create_task_group() as tasks:
            await tasks.start(
                lambda task_status: serve_status(
                    app, host=host, port=port, metrics=metrics, sock=sock, task_status=task_status
                )
            )
            await app.run()
            tasks.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        failure = _sole(group)
    else:
        return
    # Raised outside the except block, so it is not chained to the group: the exit
    # status and the one line must not depend on --http-port.
    raise failure


def _sole(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """What the task group wrapped: app.run()'s error (or the status port's start-up
    error) alone, as ``main`` turns it into the exit status; the group if it holds more."""
    inner: BaseException = group
    while isinstance(inner, BaseExceptionGroup) and len(inner.exceptions) == 1:
        inner = inner.exceptions[0]
    return inner


# --- asyncapi -----------------------------------------------------------------------


def _add_asyncapi(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "asyncapi",
        help="print an AsyncAPI 3.0 document of an App's topics and payloads",
        description=(
            "Import APP (module:attribute, as for 'run') and print an AsyncAPI 3.0 document "
            "of it: a channel per topic, a receive operation per subscriber (a send "
            "operation per publisher), payload schemas from the handlers' type hints "
            "(Record[bytes|str|dict|<pydantic model>]). Nothing connects to Kafka."
        ),
    )
    parser.add_argument("app", metavar="APP", help="the App to describe, as module:attribute")
    parser.add_argument(
        "--format",
        choices=["json", "yaml"],
        default="json",
        help="json (default) or yaml (needs PyYAML: pip install pyyaml)",
    )
    parser.add_argument(
        "--title", default=None, help="the document's info.title (default: the App's group_id)"
    )
    parser.add_argument(
        "--version",
        dest="doc_version",
        default="1.0.0",
        metavar="V",
        help="the document's info.version, your API's version (default: 1.0.0)",
    )
    parser.set_defaults(run=_run_asyncapi)


def _run_asyncapi(args: argparse.Namespace) -> int:
    import json

    from fairstream import load_app
    from fairstream.asyncapi import asyncapi

    if args.format == "yaml" and importlib.util.find_spec("yaml") is None:
        raise ConfigError(
            "--format", "yaml", "needs PyYAML, which is not installed", "run: pip install pyyaml"
        )
    document = asyncapi(load_app(args.app), title=args.title, version=args.doc_version)
    if args.format == "yaml":
        import yaml  # type: ignore[import-untyped]

        print(yaml.safe_dump(document, sort_keys=False), end="")
    else:
        print(json.dumps(document, indent=2))
    return 0


# --- entry point --------------------------------------------------------------------


_LOG_FORMATS = ("auto", "json", "console")


def _add_common(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """Options every command takes, before or after its name.

    The top-level parser holds the defaults; a command's copy defaults to
    SUPPRESS so that it sets the option only when it is given after the name
    (argparse would otherwise overwrite the value given before it).
    """
    default = None if top else argparse.SUPPRESS
    parser.add_argument(
        "--log-level",
        metavar="LEVEL",
        default=default,
        help="log level on stderr: DEBUG, INFO, WARNING or ERROR (default: "
        "$FAIRSTREAM_LOG_LEVEL, else INFO for 'run' and WARNING otherwise)",
    )
    parser.add_argument(
        "--log-format",
        choices=_LOG_FORMATS,
        default=default,
        help="log lines as JSON or for a terminal (default: $FAIRSTREAM_LOG_FORMAT, else auto: "
        "console on a terminal, JSON otherwise)",
    )


def _commands(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """Every parser that runs a command (``topic create``, not ``topic``)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                has_subcommands = any(
                    isinstance(a, argparse._SubParsersAction) for a in sub._actions
                )
                yield from _commands(sub) if has_subcommands else (sub,)


def _version() -> str:
    try:
        return f"fairstream {importlib.metadata.version('fairstream')}"
    except importlib.metadata.PackageNotFoundError:
        return "fairstream (not installed, version unknown: pip install the project)"


def build_parser(env: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
    """The ``fairstream`` parser; ``env`` is :func:`fairstream.config.from_env`'s reading."""
    env = from_env() if env is None else env
    parser = argparse.ArgumentParser(
        prog="fairstream",
        description="Fair, rebalance-friendly Kafka consumers: tools for planning, running "
        "and testing fairstream apps. Options may come before or after the command; "
        "FAIRSTREAM_* environment variables give their defaults (the docs' Configuration "
        "page).",
    )
    parser.add_argument("--version", action="version", version=_version())
    _add_common(parser, top=True)
    add_bootstrap(parser, what="the cluster, for the commands that use one")
    parser.set_defaults(bootstrap=env.get("bootstrap"), env=env)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_asyncapi(commands)
    _add_broker(commands)
    add_backfill(commands)
    add_lag(commands)
    add_plan(commands)
    add_produce(commands)
    add_stream(commands)
    _add_run(commands)
    add_topic(commands)
    for command in _commands(parser):
        _add_common(command, top=False)
    return parser


def _configure_logs(args: argparse.Namespace) -> None:
    """Level and format: the options, else FAIRSTREAM_LOG_LEVEL/_FORMAT, else the defaults."""
    from fairstream import logs

    level, field = args.log_level, "--log-level"
    if level is None:
        level, field = args.env.get("log_level"), "FAIRSTREAM_LOG_LEVEL"
    if level is None:
        level = getattr(args, "log_level_default", "WARNING")
    if level.upper() not in logging.getLevelNamesMapping():
        raise ConfigError(field, level, "unknown log level", "use DEBUG, INFO, WARNING or ERROR")
    fmt = args.log_format or args.env.get("log_format", "auto")
    if fmt not in _LOG_FORMATS:
        raise ConfigError(
            "FAIRSTREAM_LOG_FORMAT",
            fmt,
            "unknown log format",
            f"use one of {', '.join(_LOG_FORMATS)}",
        )
    logs.configure(fmt, level.upper())


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    run: Runner = args.run
    command = " ".join(filter(None, (args.command, getattr(args, "action", None))))
    try:
        _configure_logs(args)
        return run(args)
    except FairstreamError as exc:
        print(f"fairstream {command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
