"""The documentation's runnable blocks, run as written.

A fenced block after ``<!-- readme-test: NAME -->`` in a page under docs/ is saved as
``NAME`` in an empty folder and run there: a ``test_*.py`` file with pytest, anything
else with Python. The blocks are read at test time, so the pages and these checks
cannot drift. (The README's own blocks, the first app, are tests/cli/test_quickstart.py's.)
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).parents[2] / "docs"
MARKED_BLOCK = re.compile(
    r"<!-- readme-test: (?P<name>[\w.]+) -->\n```python\n(?P<body>.*?)```", re.S
)


def _blocks() -> dict[str, str]:
    return {
        m["name"]: m["body"]
        for page in sorted(DOCS.rglob("*.md"))
        for m in MARKED_BLOCK.finditer(page.read_text())
    }


REPOSITORY = "https://github.com/fairstream/fairstream/"
"""``[project.urls] Repository`` in pyproject.toml."""


def _run(name: str, folder: Path) -> subprocess.CompletedProcess[str]:
    """Save the docs' block ``name`` in ``folder`` and run it as a user would."""
    (folder / name).write_text(_blocks()[name])
    command = (
        ["-m", "pytest", name, "-q", "-p", "no:cacheprovider"]
        if name.startswith("test_")
        else [name]
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FAIRSTREAM_")}
    return subprocess.run(
        [sys.executable, *command],
        cwd=folder,
        env=clean,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_every_marked_block_is_checked_here() -> None:
    assert _blocks().keys() == {
        "asyncapi_demo.py",
        "logging_demo.py",
        "metrics_demo.py",
        "pause_demo.py",
        "test_orders.py",
        "test_service.py",
    }


def test_logging_one_json_stream_with_aiokafka_quieted(tmp_path: Path) -> None:
    result = _run("logging_demo.py", tmp_path)
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stderr.splitlines()]
    assert [(e.get("logger"), e["event"]) for e in events] == [
        ("shop", "3 apples left"),
        (None, "order_received"),
    ]
    assert events[1]["amount"] == 42


def test_metrics_the_collector_serves_what_was_handled(tmp_path: Path) -> None:
    pytest.importorskip("prometheus_client", reason="the prometheus extra is not installed")
    result = _run("metrics_demo.py", tmp_path)
    assert result.returncode == 0, result.stderr
    handled = 'fairstream_partition_handled_total{group_id="billing",partition="0",topic="orders"}'
    assert f"{handled} 1.0\n" in result.stdout
    assert "# TYPE fairstream_handler_seconds histogram" in result.stdout


def test_testing_your_app_the_test_passes(tmp_path: Path) -> None:
    result = _run("test_orders.py", tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


def test_pause_nothing_is_fetched_until_resume(tmp_path: Path) -> None:
    result = _run("pause_demo.py", tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.endswith("sent [0]\n")


def test_asyncapi_the_model_is_the_payload(tmp_path: Path) -> None:
    result = _run("asyncapi_demo.py", tmp_path)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["asyncapi"] == "3.0.0" and document["info"]["title"] == "Billing"
    assert document["channels"]["orders"]["address"] == "orders"
    order = document["components"]["schemas"]["Order"]
    assert order["properties"]["amount"] == {"title": "Amount", "type": "number"}


def test_publishers_hooks_and_listeners_the_test_passes(tmp_path: Path) -> None:
    result = _run("test_service.py", tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


def test_the_readme_links_to_files_that_exist() -> None:
    """The README's links into the repository (the guides, RESULTS, examples) are
    absolute and lead to files that exist.

    PyPI shows the README as the project's description, where a relative link leads
    nowhere; GitHub renders the same absolute links. ``make docs`` checks the site's
    links, not the README's.
    """
    root = DOCS.parent
    text = (root / "README.md").read_text()
    assert re.findall(r"\]\(((?!https?://|#)[^)]+)", text) == [], "relative links"
    links = re.findall(re.escape(REPOSITORY) + r"(?:blob|tree)/main/([^)#]+)", text)
    assert any(link.startswith("docs/") for link in links), "no link to the docs pages"
    assert [link for link in links if not (root / link).exists()] == []
