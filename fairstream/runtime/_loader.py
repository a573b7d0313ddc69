"""Finding the ``App`` that ``fairstream run module:attribute`` names."""

from __future__ import annotations

import importlib
import inspect
import sys

from fairstream.errors import ConfigError
from fairstream.runtime._app import App

__all__ = ["load_app"]


def load_app(spec: str) -> App:
    """Import ``module:attribute`` (the current directory first on the path).

    ``attribute`` may also name a function that takes no argument and returns an
    App, so an app can be built from configuration at start-up.

    :raises ConfigError: the spec is malformed, the module or attribute is missing,
        or it is not an App.
    """
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ConfigError(
            "app", spec, "is not of the form module:attribute", "e.g. 'myservice.consumer:app'"
        )
    if "" not in sys.path:
        sys.path.insert(0, "")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module_name.startswith(exc.name):
            raise ConfigError(
                "app",
                spec,
                f"module {module_name!r} was not found",
                "run from the directory that holds it, or add it to PYTHONPATH",
            ) from exc
        raise
    target = getattr(module, attribute, None)
    if target is None:
        raise ConfigError(
            "app", spec, f"module {module_name!r} has no attribute {attribute!r}", "check the name"
        )
    if _is_factory(target):
        target = target()
    if not isinstance(target, App):
        is_async = inspect.iscoroutinefunction(target)
        kind = "an async function" if is_async else f"a {type(target).__name__}"
        raise ConfigError(
            "app",
            spec,
            f"is {kind}, not a fairstream App",
            "point it at the App instance (or a function without arguments returning one)",
        )
    return target


def _is_factory(target: object) -> bool:
    """A plain function callable without arguments (not a handler, not a class)."""
    if isinstance(target, App) or not inspect.isfunction(target):
        return False
    if inspect.iscoroutinefunction(target):
        return False
    params = inspect.signature(target).parameters.values()
    return all(
        p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params
    )
