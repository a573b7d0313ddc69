"""``fairstream run --workers N``: records/s of a CPU-bound handler on 1 and 2 workers.

For each way (``--workers 1`` and ``--workers 2``), interleaved ``--repeat`` times,
runs ``fairstream run workers_app:app`` as users do, on a fresh topic of
``--partitions`` partitions with a fresh group id; once the whole group is ready
(``/ready`` of its status port: every worker has joined), produces ``--records``
records. The handler is ``--loops`` iterations of a
pure-Python loop (calibrated here to ``--ms`` milliseconds, 1 by default) per
record: it holds the GIL, so one process handles at most ~1,000 records/s however
many partitions it owns.

The rate is the records over the time from the first handled to the last: a
worker that joins first has nothing to handle alone, and starting processes (slow
on a loaded machine) is left out. The
table shows min / median / max of the rates and the ratio of the medians, with the
load average before and after, since the ratio needs two cores free::

    python benchmarks/workers.py --repeat 3
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import anyio
import anyio.abc
import httpx
from _common import add_bootstrap_option, cluster, create_topic
from aiokafka import AIOKafkaProducer
from workers_app import spin

from fairstream.testing import free_port

REPO = Path(__file__).parents[1]


def calibrate(ms: float) -> int:
    """Loop iterations that take ``ms`` milliseconds of this machine's Python, at best."""
    loops, best = 20_000, float("inf")
    for _ in range(20):
        start = time.perf_counter()
        spin(loops)
        best = min(best, time.perf_counter() - start)
    return max(1, int(loops * ms / 1000 / best))


async def produce(bootstrap: str, topic: str, records: int, partitions: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        batch = [
            await producer.send(topic, b"x" * 100, partition=i % partitions) for i in range(records)
        ]
        for sent in batch:
            await sent
    finally:
        await producer.stop()


async def _ready(port: int, process: anyio.abc.Process) -> None:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
        while True:
            if process.returncode is not None:
                raise RuntimeError(f"fairstream run exited with {process.returncode}")
            try:
                if (await client.get("/ready")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await anyio.sleep(0.05)


def _stamps(prefix: Path) -> list[float]:
    return [
        float(line)
        for path in prefix.parent.glob(f"{prefix.name}.*")
        for line in path.read_text().split()
    ]


async def one_run(
    bootstrap: str, partitions: int, records: int, workers: int, loops: int, tmp: Path
) -> float:
    """Records/s from the first handled to the last (see the module docstring)."""
    topic = f"workers-{uuid.uuid4().hex[:8]}"
    await create_topic(bootstrap, topic, partitions)
    log = tmp / f"run-{uuid.uuid4().hex[:8]}"
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("FAIRSTREAM_")},
        "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'benchmarks'}",
        "BENCH_TOPIC": topic,
        "BENCH_GROUP": f"bench-{uuid.uuid4().hex[:8]}",
        "BENCH_LOG": str(log),
        "BENCH_LOOPS": str(loops),
    }
    command = [sys.executable, "-m", "fairstream", "run", "workers_app:app"]
    command += ["--bootstrap", bootstrap, "--workers", str(workers), "--log-level", "WARNING"]
    command += ["--http-port", str(port), "--http-host", "127.0.0.1"]
    process = await anyio.open_process(
        command, cwd=tmp, env=env, stdin=subprocess.DEVNULL, stdout=None, stderr=None
    )
    try:
        with anyio.fail_after(300):
            await _ready(port, process)
            await produce(bootstrap, topic, records, partitions)
            while True:
                stamps = _stamps(log)
                if len(stamps) >= records:
                    break
                await anyio.sleep(0.2)
        return len(stamps) / (max(stamps) - min(stamps))
    finally:
        process.send_signal(signal.SIGTERM)
        with anyio.fail_after(60):
            await process.wait()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_bootstrap_option(parser)
    parser.add_argument("--records", type=int, default=6_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--ms", type=float, default=1.0, help="handler milliseconds per record")
    args = parser.parse_args()
    loops = calibrate(args.ms)
    load_before = os.getloadavg()
    rates: dict[int, list[float]] = {1: [], 2: []}
    with cluster(args.bootstrap) as bootstrap, tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeat):
            for workers in rates:
                rate = await one_run(
                    bootstrap, args.partitions, args.records, workers, loops, Path(tmp)
                )
                rates[workers].append(rate)
                print(f"workers={workers}: {rate:,.0f} records/s", flush=True)
    load_after = os.getloadavg()
    print(
        f"\n{args.records} records, {args.partitions} partitions, {loops} loops/record "
        f"(~{args.ms} ms), {os.cpu_count()} CPUs"
    )
    print(f"load average (1/5/15 min) before {load_before}, after {load_after}")
    print("| workers | records/s min | median | max |")
    print("|---|---|---|---|")
    for workers, got in rates.items():
        low, mid, high = min(got), statistics.median(got), max(got)
        print(f"| {workers} | {low:,.0f} | {mid:,.0f} | {high:,.0f} |")
    ratio = statistics.median(rates[2]) / statistics.median(rates[1])
    print(f"\nratio of medians, 2 workers / 1: {ratio:.2f}x (the goal: >= 1.7x on two free cores)")


if __name__ == "__main__":
    anyio.run(main)
