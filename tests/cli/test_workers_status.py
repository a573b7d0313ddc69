"""The supervisor's pieces that need no process: aggregation, backoff, option checks."""

from __future__ import annotations

import socket
import sys

import pytest

from fairstream._worker_status import aggregate_health, merge_metrics
from fairstream.cli import main
from fairstream.errors import ConfigError
from fairstream.runtime import Health
from fairstream.supervisor import Supervision, restart_delay, worker_command, worker_setup

READY = Health(alive=True, ready=True, state="running", oldest_in_flight_seconds=1.5)


def test_ready_only_when_every_worker_is_and_alive_while_one_restarts() -> None:
    assert aggregate_health([READY, READY]).ready
    restarting = aggregate_health([READY, None])
    assert restarting.alive and not restarting.ready
    assert restarting.state == "mixed"
    dead = aggregate_health([READY, Health(alive=False, ready=False, state="failed")])
    assert not dead.alive
    assert aggregate_health([READY, READY]).oldest_in_flight_seconds == 1.5


def test_metrics_keep_each_family_together_with_a_worker_label() -> None:
    one = (
        "# HELP fairstream_handled_total records handled\n"
        "# TYPE fairstream_handled_total counter\n"
        'fairstream_handled_total{topic="t"} 3.0\n'
        "# HELP fairstream_latency_seconds handler time\n"
        "# TYPE fairstream_latency_seconds histogram\n"
        'fairstream_latency_seconds_bucket{le="+Inf"} 3\n'
        "fairstream_latency_seconds_count 3\n"
    )
    merged = merge_metrics({0: one, 1: one.replace("3", "5")}).splitlines()
    assert merged == [
        "# HELP fairstream_handled_total records handled",
        "# TYPE fairstream_handled_total counter",
        'fairstream_handled_total{worker="0",topic="t"} 3.0',
        'fairstream_handled_total{worker="1",topic="t"} 5.0',
        "# HELP fairstream_latency_seconds handler time",
        "# TYPE fairstream_latency_seconds histogram",
        'fairstream_latency_seconds_bucket{worker="0",le="+Inf"} 3',
        'fairstream_latency_seconds_count{worker="0"} 3',
        'fairstream_latency_seconds_bucket{worker="1",le="+Inf"} 5',
        'fairstream_latency_seconds_count{worker="1"} 5',
    ]


def test_restarts_back_off_to_a_cap() -> None:
    assert [restart_delay(n) for n in (1, 2, 3)] == [0.5, 1.0, 2.0]
    assert restart_delay(30) == 30.0


def test_static_members_get_distinct_ids_only_among_several() -> None:
    with socket.socket() as sock:
        env = {"FS_SUPERVISOR_WORKER": "1", "FS_SUPERVISOR_STATUS_FD": str(sock.fileno())}
        several = worker_setup({**env, "FS_SUPERVISOR_WORKERS": "3"})
        alone = worker_setup({**env, "FS_SUPERVISOR_WORKERS": "1"})
        assert several is not None and alone is not None
        assert several.instance_id("svc") == "svc-1"
        assert several.instance_id(None) is None
        assert alone.instance_id("svc") == "svc"  # --reload's one worker keeps its id
        several.sock.detach()
        alone.sock.detach()
    assert worker_setup({}) is None


def test_workers_get_the_options_that_were_given() -> None:
    command = worker_command(
        "svc:app", bootstrap="k:9092", options=[("--group-id", "g"), ("--assignor", None)]
    )
    assert command == ("run", "svc:app", "--bootstrap", "k:9092", "--group-id", "g")


def test_reload_with_several_workers_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"--reload.*for development only"):
        Supervision(command=("run", "a:b"), workers=2, reload=True)
    with pytest.raises(ConfigError, match="--workers"):
        Supervision(command=("run", "a:b"), workers=0)


def test_cli_refuses_bad_worker_options_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "tests.cli.workers_app:app", "--workers", "2", "--reload"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--reload" in err and "drop --workers" in err


def test_reload_without_watchfiles_names_the_extra(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "watchfiles", None)  # as if not installed: no spec
    assert main(["run", "tests.cli.workers_app:app", "--reload"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "pip install 'fairstream[reload]'" in err
