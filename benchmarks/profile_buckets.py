"""Per-record cost table from py-spy profiles of ``throughput.py``: where each microsecond goes.

Each profile is py-spy's raw (collapsed-stack) output of one way of ``throughput.py``
run alone, e.g. (py-spy need not be installed: ``pip download py-spy`` and unzip its
wheel; ``--nonblocking`` so sampling does not pause the consumer)::

    py-spy record --nonblocking -r 1000 -f raw -o fairstream.txt -- \\
        python throughput.py --records 300000 --ways fairstream --repeat 2 --gc-threshold 10000

Samples of the setup (imports, producing the topic, the commit check, the broker's
stop) are left out. Every other sample goes to the bucket of its innermost frame that
one of ``BUCKETS`` claims, and a bucket's share of the samples times the way's CPU per
record (``throughput.py``'s steady-state column, given as ``NAME=FILE:US``) is its
microseconds per record. With ``--gc-threshold 10000`` the collector stays out of the
steady state (it would otherwise be charged to whatever allocated when it ran,
mostly record building); its own share is the steady-state table's last column::

    python profile_buckets.py raw=raw.txt:1.46 fairstream=fairstream.txt:1.63
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Callable

SETUP = (
    "_find_and_load",
    "produce (throughput",
    "aiokafka/producer",
    "Popen",
    "EmbeddedBroker",
    "end_offsets",
    "check_committed",
    "create_topic",
    "aiokafka/admin",
    "parse_args",
    "configure (",
)
"""Frames that mark a sample of the setup, not of consuming."""

Claim = Callable[[str], bool]


def _in(*parts: str) -> Claim:
    return lambda frame: any(part in frame for part in parts)


BUCKETS: list[tuple[str, Claim]] = [
    (
        "the handler call (the no-op handler and the benchmark's count)",
        _in("Tally.add", "handle (throughput"),
    ),
    (
        "a record built (aiokafka's ConsumerRecord; fairstream's Record)",
        _in("record_from", "_consumer_record"),
    ),
    (
        "aiokafka: record batches decoded (varints, CRC)",
        _in("aiokafka/record/", "PartitionRecords"),
    ),
    ("the pull (getmany, pulls in turn)", _in("_pull_in_turn.py", "getmany", "fetched_records")),
    (
        "aiokafka: fetch requests and responses, commits",
        _in("aiokafka/consumer/", "aiokafka/conn.py", "aiokafka/protocol", "aiokafka/client.py"),
    ),
    ("fetch room: queues filled, held, let go (_fetch)", _in("runtime/flow/_fetch.py")),
    ("scheduler: dispatch built and released (_scheduler)", _in("runtime/flow/_scheduler.py")),
    ("keyed lane: admission, chains, records freed (_keyed)", _in("runtime/flow/_keyed.py")),
    (
        "offsets: watermark, out-of-order marks (_offsets, _commit)",
        _in("runtime/flow/_offsets.py", "runtime/flow/_commit.py"),
    ),
    ("stats (_stats)", _in("runtime/_stats.py")),
    (
        "handling loop: log slot, halt check, offsets advanced (_handling)",
        _in("runtime/flow/_handling.py"),
    ),
    (
        "workers: dispatch turn, in-flight registry, records freed (_workers)",
        _in("runtime/flow/_workers.py"),
    ),
    ("anyio: cancel scopes, events, tasks", _in("anyio/")),
    ("the raw loop itself, its batch freed (_common)", _in("_common.py")),
    ("event loop: task steps, callbacks, select, transports (asyncio)", _in("asyncio/")),
]
REST = "native code py-spy could not name, and the rest"
WHOLE: list[tuple[str, str]] = [
    (
        "aiokafka: a fetch planned over every assigned partition (_get_actions_per_node)",
        "_get_actions_per_node",
    ),
]
"""Buckets that claim a sample wherever their frame is in its stack (what it calls
included): aiokafka's fetch planning walks every assigned partition each time it
runs, so at thousands of partitions how often it runs is what it costs."""


def bucket(stack: str) -> str | None:
    """The bucket of one collapsed stack (``None``: setup)."""
    if any(mark in stack for mark in SETUP):
        return None
    for name, mark in WHOLE:
        if mark in stack:
            return name
    for frame in reversed(stack.split(";")):
        for name, claims in BUCKETS:
            if claims(frame):
                return name
    return REST


def shares(path: str) -> Counter[str]:
    counts: Counter[str] = Counter()
    with open(path) as lines:
        for line in lines:
            stack, _, samples = line.rstrip().rpartition(" ")
            name = bucket(stack)
            if name is not None:
                counts[name] += int(samples)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "ways", nargs="+", metavar="NAME=FILE:US", help="a profile and its CPU us/record"
    )
    args = parser.parse_args()
    columns = []
    for item in args.ways:
        name, _, rest = item.partition("=")
        path, _, cpu = rest.rpartition(":")
        counts = shares(path)
        columns.append((name, counts, sum(counts.values()), float(cpu)))
    print("| us per record | " + " | ".join(name for name, *_ in columns) + " |")
    print("|---|" + "---:|" * len(columns))
    for row in [name for name, _ in WHOLE] + [name for name, _ in BUCKETS] + [REST]:
        cells = [counts[row] / total * cpu for _, counts, total, cpu in columns]
        print(f"| {row} | " + " | ".join(f"{c:.2f}" if c >= 0.005 else "-" for c in cells) + " |")
    print("| **in all** | " + " | ".join(f"**{cpu:.2f}**" for *_, cpu in columns) + " |")
    print("| samples | " + " | ".join(f"{total:,}" for _, _, total, _ in columns) + " |")


if __name__ == "__main__":
    main()
