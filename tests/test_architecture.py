"""API guards: the public surface is deliberate and imports flow one way."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import aiokafka
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


LEAVES = {
    "errors.py",
    "ranges.py",
    "config.py",
    "logs.py",
    "_field_checks.py",
    "_extras.py",
    "_policies.py",
}


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


RUNTIME = "fairstream.runtime"
KAFKA = f"{RUNTIME}._kafka"
ROOM_FOLDERS = (f"{RUNTIME}.flow", f"{RUNTIME}.group")


def _name(path: Path) -> str:
    """The dotted module name of a file of the package."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_name(path): path for path in PACKAGE.rglob("*.py")}


def _ours(path: Path) -> set[str]:
    """The fairstream modules a file imports, ``from package import module`` resolved."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                found.add(submodule if submodule in MODULES else node.module)
    return {name for name in found if name in MODULES} - {_name(path)}


def _in(module: str, *folders: str) -> bool:
    return any(module == folder or module.startswith(f"{folder}.") for folder in folders)


def _runtime(folder: str = RUNTIME) -> list[str]:
    return sorted(name for name in MODULES if _in(name, folder))


# The folders of the runtime (docs/development/architecture.md):
#   runtime/          the face (_app, _registration, ...), the ports, the engine, values
#   runtime/flow/     the record's walk: fetch -> queue -> dispatch -> handler -> offsets -> commit
#   runtime/group/    partitions arriving and leaving: rebalance, KIP-333 jumps and shadows
#   runtime/_kafka/   everything that touches aiokafka beyond its public value types
# The rooms (flow/, group/) know Kafka through the Protocols in ``_ports``; only the face
# that picks the clients (``_app``, the package ``__init__``) and the ports (for the
# values they carry) import ``_kafka``.
KAFKA_USERS = {RUNTIME, f"{RUNTIME}._app", f"{RUNTIME}._ports"}
# The engine wires the rooms together; a room never imports the engine or the face.
ENGINE_AND_FACE = {f"{RUNTIME}._engine", f"{RUNTIME}._app", f"{RUNTIME}._registration"}
# The floor of the walk: values every room shares, importing only the record.
FLOOR = {f"{RUNTIME}._record", f"{RUNTIME}.flow._scheduler", f"{RUNTIME}.flow._offsets"}


def _offenders(modules: list[str], forbidden: Callable[[str], bool]) -> list[str]:
    """``module imports name`` for each fairstream module ``name`` of ``modules`` that
    ``forbidden`` says it may not import."""
    return [
        f"{module} imports {name}"
        for module in modules
        for name in sorted(_ours(MODULES[module]))
        if forbidden(name)
    ]


def test_only_the_face_and_the_ports_import_the_kafka_folder() -> None:
    others = [m for m in _runtime() if not _in(m, KAFKA) and m not in KAFKA_USERS]
    assert not _offenders(others, lambda name: _in(name, KAFKA)), "use the ports"


def test_rooms_import_neither_the_engine_nor_the_face() -> None:
    """The engine hands each room the callbacks it needs, so rooms stay apart."""
    rooms = [m for m in _runtime() if _in(m, *ROOM_FOLDERS)]
    assert not _offenders(rooms, ENGINE_AND_FACE.__contains__)


def test_the_walk_does_not_know_the_group() -> None:
    """A record's walk is the same whoever owns its partition next: ``group/`` calls
    into ``flow/`` (to drain, to commit), never the other way."""
    walk = _runtime(f"{RUNTIME}.flow")
    assert not _offenders(walk, lambda name: _in(name, f"{RUNTIME}.group"))


@pytest.mark.parametrize("module", sorted(FLOOR))
def test_the_floor_imports_only_the_record(module: str) -> None:
    assert {name for name in _ours(MODULES[module]) if _in(name, RUNTIME)} <= {f"{RUNTIME}._record"}


def test_protocol_names_import_no_runtime_module_and_no_aiokafka() -> None:
    """The planner and the rebalance room both ask them; an import back would tie the two."""
    imported = _imports(MODULES[f"{RUNTIME}.group._protocol_names"])
    assert not {name for name in imported if name.startswith((RUNTIME, "aiokafka"))}


AIOKAFKA_PUBLIC = {
    "aiokafka",
    "aiokafka.abc",
    "aiokafka.admin",
    "aiokafka.errors",
    "aiokafka.helpers",
    "aiokafka.partitioner",
    "aiokafka.structs",
}
"""aiokafka's documented modules: clients, errors and value types. Everything else
(``consumer``, ``coordinator``, ``protocol``, ``conn``, ``cluster``, ...) is internal."""


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _aiokafka_private_names() -> frozenset[str]:
    """Every private name aiokafka defines or reads: attributes, functions, classes."""
    names: set[str] = set()
    for path in Path(aiokafka.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and _private(node.attr):
                names.add(node.attr)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and (
                _private(node.name)
            ):
                names.add(node.name)
    return frozenset(names)


AIOKAFKA_PRIVATE = _aiokafka_private_names()


def aiokafka_internals(source: str) -> set[str]:
    """What ``source`` takes from aiokafka's internals: internal modules it imports,
    private names it imports, and private aiokafka attributes it reads on an object
    (``consumer._fetcher``, ``getattr(consumer, "_coordinator")``).

    An attribute counts when aiokafka has a private name like it and the module does
    not set that name on ``self`` itself (its own state may share a name, ``_topics``).
    """
    tree = ast.parse(source)
    own = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.ctx, ast.Store)
        and isinstance(node.value, ast.Name)
        and node.value.id in {"self", "cls"}
    }
    own |= {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    }
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(
                f"import {a.name}"
                for a in node.names
                if a.name.startswith("aiokafka.") and a.name not in AIOKAFKA_PUBLIC
            )
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "aiokafka":
            if node.module not in AIOKAFKA_PUBLIC:
                found.add(f"from {node.module} import ...")
            found.update(
                f"from {node.module} import {a.name}" for a in node.names if _private(a.name)
            )
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            if node.attr in AIOKAFKA_PRIVATE and node.attr not in own:
                found.add(f".{node.attr}")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in {"getattr", "setattr", "hasattr"}
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and node.args[1].value in AIOKAFKA_PRIVATE
            and node.args[1].value not in own
        ):
            found.add(f"{node.func.id}(..., {node.args[1].value!r})")
    return found


@pytest.mark.parametrize(
    "source",
    [
        "from aiokafka.consumer.fetcher import Fetcher",
        "import aiokafka.coordinator.protocol",
        "from aiokafka.protocol.group import JoinGroupRequest",
        "from aiokafka.structs import _private_thing",
        "def f(consumer):\n    return consumer._fetcher",
        "def f(consumer):\n    return getattr(consumer, '_coordinator', None)",
    ],
)
def test_the_detector_sees_aiokafka_internals(source: str) -> None:
    assert aiokafka_internals(source)


def test_the_detector_leaves_public_aiokafka_and_own_state_alone() -> None:
    source = (
        "from aiokafka import AIOKafkaConsumer, TopicPartition\n"
        "from aiokafka.errors import KafkaError\n"
        "class Room:\n"
        "    def __init__(self):\n        self._topics = {}\n"
        "    def size(self):\n        return len(self._topics)\n"
    )
    assert not aiokafka_internals(source)


def test_aiokafka_internals_stay_in_the_kafka_folder() -> None:
    """An aiokafka upgrade audits ``runtime/_kafka`` alone (docs/development/aiokafka-hooks.md)."""
    found = {
        module: sorted(used)
        for module, path in sorted(MODULES.items())
        if not _in(module, KAFKA) and (used := aiokafka_internals(path.read_text()))
    }
    assert not found, f"aiokafka internals outside runtime/_kafka: {found}"


def _circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected parts of an import graph with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[frozenset[str]] = []

    def visit(name: str) -> None:
        index[name] = low[name] = len(index)
        stack.append(name)
        for imported in graph[name]:
            if imported not in index:
                visit(imported)
                low[name] = min(low[name], low[imported])
            elif imported in stack:
                low[name] = min(low[name], index[imported])
        if low[name] == index[name]:
            part = {stack.pop()}
            while name not in part:
                part.add(stack.pop())
            if len(part) > 1:
                found.append(frozenset(part))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return found


def test_no_import_circle_anywhere_in_fairstream() -> None:
    """Lazy imports count: a circle broken only by importing late is still a circle."""
    circles = _circles({name: _ours(path) for name, path in MODULES.items()})
    assert not circles, [sorted(circle) for circle in circles]


def test_the_circle_check_sees_a_circle_through_three_modules() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _circles(graph) == [frozenset({"a", "b", "c"})]


CLI = "fairstream.cli"
CLI_MODULES = [*sorted(name for name in MODULES if _in(name, CLI)), "fairstream.__main__"]


def test_nothing_imports_the_cli() -> None:
    offenders = {
        f"{module} imports {name}"
        for module, path in MODULES.items()
        if module not in CLI_MODULES
        for name in _ours(path)
        if _in(name, CLI)
    }
    assert not offenders


def test_only_the_cli_tests_import_the_clis_own_modules() -> None:
    """What the runtime and the planner share lives in the library (``assign.replan``):
    a test of theirs that needed a CLI module would mean the rule lives in the CLI."""
    tests = Path(__file__).parent
    offenders = [
        f"{path.relative_to(tests)} imports {name}"
        for path in sorted(tests.rglob("*.py"))
        if path.relative_to(tests).parts[0] != "cli"
        for name in sorted(_imports(path))
        if name.startswith(f"{CLI}._")
    ]
    assert not offenders


@pytest.mark.parametrize("module", CLI_MODULES)
def test_the_cli_uses_public_names_only(module: str) -> None:
    """What the CLI needs is public API: users can build the same tools."""
    private = {
        name
        for name in _imports(MODULES[module])
        if name.startswith("fairstream.")
        and any(part.startswith("_") for part in name.split(".")[1:])
        and not _in(name, CLI)
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
