"""API guards: the public surface is deliberate and imports flow one way."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import fairstream

PACKAGE = Path(fairstream.__file__).parent


def _imports(path: Path) -> set[str]:
    """Every module a file imports, at any depth (lazy imports count too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
    return found


def _modules(area: str) -> list[Path]:
    return sorted((PACKAGE / area).rglob("*.py"))


# What each area may not import (STYLE.md, "Imports flow one way").
FORBIDDEN = {
    "assign": (
        "fairstream.runtime",
        "fairstream.spark",
        "fairstream.testing",
        "fairstream.cli",
        "aiokafka",
        "asyncio",
        "anyio",
        "socket",
    ),
    # Tracing and metrics are extras the runtime must run without (fairstream.otel, .prometheus).
    "runtime": (
        "fairstream.spark",
        "fairstream.testing",
        "fairstream.cli",
        "opentelemetry",
        "prometheus_client",
    ),
    "spark": ("fairstream.runtime", "fairstream.testing", "fairstream.cli"),
    "testing": ("fairstream.cli", "fairstream.spark"),
}


@pytest.mark.parametrize("area", sorted(FORBIDDEN))
def test_imports_flow_one_way(area: str) -> None:
    offenders = {
        f"{path.relative_to(PACKAGE)} imports {name}"
        for path in _modules(area)
        for name in _imports(path)
        if name.startswith(FORBIDDEN[area])
    }
    assert not offenders


LEAVES = {"errors.py", "ranges.py", "config.py", "logs.py", "_field_checks.py", "_extras.py"}


@pytest.mark.parametrize("leaf", sorted(LEAVES))
def test_leaf_modules_import_only_leaves(leaf: str) -> None:
    ours = {name for name in _imports(PACKAGE / leaf) if name.startswith("fairstream")}
    assert ours <= {f"fairstream.{name.removesuffix('.py')}" for name in LEAVES - {leaf}}


def test_fairstream_does_not_import_the_test_kit() -> None:
    assert not any(
        name.startswith("fairstream.testing") for name in _imports(PACKAGE / "__init__.py")
    )


@pytest.mark.parametrize("module", ["fairstream", "fairstream.assign", "fairstream.testing"])
def test_all_is_sorted_and_complete(module: str) -> None:
    mod = importlib.import_module(module)
    exported = list(mod.__all__)
    assert exported == sorted(exported, key=lambda n: (not n.isupper(), n))
    public = {
        name
        for name, value in vars(mod).items()
        if not name.startswith("_") and getattr(value, "__module__", "").startswith("fairstream")
    }
    assert public <= set(exported), f"public but not in __all__: {public - set(exported)}"
    for name in exported:
        assert hasattr(mod, name)


def _runtime_imports(name: str) -> set[str]:
    """The runtime modules ``runtime/<name>.py`` imports, by file name."""
    prefix = "fairstream.runtime."
    return {
        imported.removeprefix(prefix)
        for imported in _imports(PACKAGE / "runtime" / f"{name}.py")
        if imported.startswith(prefix)
    }


# The rooms one record walks through (fetch -> queue -> dispatch -> handler -> offsets
# -> commit). A room talks to its neighbours through the callbacks the engine hands
# it, never by importing them. The floor below them imports only the record.
FLOOR = {"_record": set(), "_scheduler": {"_record"}, "_offsets": {"_record"}}
# The public face: ``App`` and its registration half (``@app.subscriber``).
FACE = {"_app", "_registration"}
# ``_jumps`` is the rebalance room's KIP-333 decision: only ``_rebalance`` uses it.
ROOMS = {
    "_fetch": {"_workers", "_handling", "_rebalance", "_jumps", "_shadow", "_engine", *FACE},
    "_workers": {"_fetch", "_rebalance", "_jumps", "_shadow", "_engine", *FACE},
    "_handling": {"_fetch", "_workers", "_rebalance", "_jumps", "_shadow", "_engine", *FACE},
    "_shadow": {"_fetch", "_workers", "_handling", "_rebalance", "_jumps", "_engine", *FACE},
    "_rebalance": {"_fetch", "_handling", "_commit", "_engine", *FACE},
    "_jumps": {"_fetch", "_workers", "_handling", "_rebalance", "_commit", "_engine", *FACE},
    "_commit": {
        "_fetch",
        "_workers",
        "_handling",
        "_rebalance",
        "_jumps",
        "_shadow",
        "_engine",
        *FACE,
    },
    "_engine": {"_jumps", *FACE},
}


@pytest.mark.parametrize("room", sorted(ROOMS))
def test_rooms_reach_kafka_through_the_ports(room: str) -> None:
    """Only the public face picks the aiokafka clients; the rooms know the Protocols."""
    assert "_clients" not in _runtime_imports(room)


@pytest.mark.parametrize("room", sorted(ROOMS))
def test_rooms_do_not_import_the_planner(room: str) -> None:
    """The planner (``_assignors``) is aiokafka's side of the join: a room learns the
    group's protocol from its clients and what it means from ``_protocols``."""
    assert "_assignors" not in _runtime_imports(room)


def test_protocol_names_import_no_runtime_module() -> None:
    """The planner and the rebalance room both ask them; an import back would tie the two."""
    assert not _runtime_imports("_protocols")


@pytest.mark.parametrize("module", sorted(FLOOR))
def test_the_floor_imports_only_the_record(module: str) -> None:
    assert _runtime_imports(module) <= FLOOR[module]


@pytest.mark.parametrize("room", sorted(ROOMS))
def test_runtime_rooms_do_not_import_their_neighbours(room: str) -> None:
    offenders = _runtime_imports(room) & ROOMS[room]
    assert not offenders, f"runtime/{room}.py imports {sorted(offenders)}"


def test_no_two_runtime_modules_import_each_other() -> None:
    names = [path.stem for path in _modules("runtime") if path.stem != "__init__"]
    pairs = {
        tuple(sorted((a, b)))
        for a in names
        for b in _runtime_imports(a)
        if a in _runtime_imports(b)
    }
    assert not pairs


CLI = {
    "cli.py",
    "_cli_backfill.py",
    "_cli_groups.py",
    "_cli_kafka.py",
    "_cli_replan.py",
    "_cli_stream.py",
    "__main__.py",
}


def test_nothing_imports_the_cli() -> None:
    offenders = [
        f"{path.relative_to(PACKAGE)} imports {name}"
        for path in PACKAGE.rglob("*.py")
        if path.name not in CLI
        for name in _imports(path)
        if name in {f"fairstream.{module.removesuffix('.py')}" for module in CLI}
    ]
    assert not offenders


@pytest.mark.parametrize("module", sorted(CLI))
def test_the_cli_uses_public_names_only(module: str) -> None:
    """What the CLI needs is public API: users can build the same tools."""
    private = {
        name
        for name in _imports(PACKAGE / module)
        if name.startswith("fairstream.")
        and any(part.startswith("_") for part in name.split(".")[1:])
        and name.removeprefix("fairstream.") + ".py" not in CLI
    }
    assert not private, f"{module} imports {sorted(private)}"


@pytest.mark.parametrize("module", ["fairstream", "fairstream.testing"])
def test_public_names_show_their_public_path(module: str) -> None:
    mod = importlib.import_module(module)
    classes = [getattr(mod, name) for name in mod.__all__ if isinstance(getattr(mod, name), type)]
    assert classes
    assert {cls.__module__ for cls in classes} == {module}
    assert repr(fairstream.App).startswith("<class 'fairstream.App'")


def _python(code: str) -> str:
    """What a fresh interpreter prints running ``code``."""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return run.stdout.strip()


@pytest.mark.parametrize(
    "module", ["fairstream.spark.stream", "fairstream.spark.source", "fairstream.assign"]
)
def test_spark_and_planning_leave_the_runtime_out(module: str) -> None:
    """A Spark worker, a Spark query's source process and a planner import neither the
    consumer runtime nor aiokafka and anyio (~0.2 s a process): ``fairstream`` loads
    the runtime's names on first use."""
    loaded = "print(*[m for m in ('fairstream.runtime', 'aiokafka', 'anyio') if m in sys.modules])"
    assert _python(f"import sys, {module}\n{loaded}") == ""
    used = f"import sys, {module}, fairstream\nfairstream.App\n{loaded}"
    assert _python(used) == "fairstream.runtime aiokafka anyio"


def test_what_import_fairstream_reached_before_is_still_reachable() -> None:
    code = "import fairstream\nprint(fairstream.logs.configure, fairstream.assign.plan)"
    shown = _python(code)
    assert "<function configure at" in shown and "<function plan at" in shown


def test_a_runtime_module_imported_first_still_shows_public_paths() -> None:
    code = (
        "from fairstream.runtime._app import App\n"
        "from fairstream.runtime._record import Record\n"
        "print(App.__module__, Record.__module__)"
    )
    assert _python(code) == "fairstream fairstream"


def test_spark_modules_do_not_import_their_package_face() -> None:
    """``fairstream.spark`` loads its modules lazily; importing it back from one of
    them would run the face first and tie every module to every other."""
    offenders = {
        str(path.relative_to(PACKAGE))
        for path in _modules("spark")
        if path.name != "__init__.py" and "fairstream.spark" in _imports(path)
    }
    assert not offenders


def test_spark_modules_import_one_way() -> None:
    """No circle through the Spark modules, lazy imports counted: one that closes
    works only while every import in it stays inside a function."""
    graph = {
        f"fairstream.spark.{path.stem}": {
            name for name in _imports(path) if name.startswith("fairstream.spark.")
        }
        for path in _modules("spark")
        if path.name != "__init__.py"
    }

    def reach(start: str) -> set[str]:
        seen: set[str] = set()
        todo = [start]
        while todo:
            for name in graph.get(todo.pop(), ()):
                if name not in seen:
                    seen.add(name)
                    todo.append(name)
        return seen

    circles = sorted(module for module in graph if module in reach(module))
    assert not circles, f"in an import circle: {circles}"
