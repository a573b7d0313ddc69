"""Finding the ``App`` that ``fairstream run module:attribute`` names."""

from __future__ import annotations

import importlib
import inspect
import sys

from fairstream._extras import MissingExtraError
from fairstream.errors import ConfigError
from fairstream.runtime._app import App

__all__ = ["load_app"]


def load_app(spec: str) -> App:
    """Import ``module:attribute`` (the current directory first on the path).

    ``attribute`` may also name a function that takes no argument and returns an
    App, so an app can be built from configuration at start-up.

    :raises ConfigError: the spec is malformed, the module (or a package it imports)
        or the attribute is missing, or it is not an App.
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
        raise _not_found(spec, module_name, exc) from exc
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


def _not_found(spec: str, module_name: str, exc: ModuleNotFoundError) -> ConfigError:
    """Tell "your module is not on the path" from "your module imports a missing package".

    ``exc.name`` is the module that could not be found: the app's own module or one
    of its parent packages means a path problem; anything else is a dependency the
    app imports (``redis_sink`` importing ``redis``), which must be named as such.
    """
    if isinstance(exc, MissingExtraError):  # fairstream.prometheus and the like
        return ConfigError(
            "app",
            spec,
            f"module {module_name!r} needs the {exc.extra!r} extra ({exc.name} missing)",
            f"run: pip install 'fairstream[{exc.extra}]'",
        )
    missing = exc.name
    if missing is None or module_name == missing or module_name.startswith(f"{missing}."):
        return ConfigError(
            "app",
            spec,
            f"module {module_name!r} was not found",
            "run from the directory that holds it, or add it to PYTHONPATH",
        )
    return ConfigError(
        "app",
        spec,
        f"module {module_name!r} imports {missing!r}, which is not installed",
        f"install it into this Python ({sys.executable})",
    )


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
