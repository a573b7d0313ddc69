"""Re-exported names show the path users import them from."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import FunctionType


def show_public_paths(namespace: Mapping[str, object], names: Iterable[str], module: str) -> None:
    """Reprs, tracebacks and docs say ``module.Name`` for each of ``names`` found in
    ``namespace`` (classes and functions; type aliases keep theirs).

    The way trio and anyio fix up their re-exports; the objects stay where they are.
    """
    for name in names:
        obj = namespace.get(name)
        if isinstance(obj, type | FunctionType):
            obj.__module__ = module
