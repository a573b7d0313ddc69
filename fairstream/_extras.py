"""The error for a missing optional extra, in a leaf so any module may raise it.

The modules behind an extra (``fairstream.prometheus``, ``fairstream.otel``, the
Spark pipeline) import their third-party packages at the top and turn the failure
into one message that names the install command, as httpx does for its extras.
"""

from __future__ import annotations

__all__ = ["MissingExtraError", "missing_extra"]


class MissingExtraError(ModuleNotFoundError):
    """A fairstream feature whose extra is not installed; ``extra`` names it.

    A ``ModuleNotFoundError`` (``name`` is the missing package), so code that
    falls back when an optional import fails keeps working.
    """

    def __init__(self, message: str, *, extra: str, name: str | None) -> None:
        super().__init__(message, name=name)
        self.extra = extra


def missing_extra(extra: str, feature: str, exc: ImportError) -> MissingExtraError:
    """The error to raise when ``feature`` cannot import what the ``extra`` installs."""
    return MissingExtraError(
        f"{feature} needs the {extra!r} extra ({exc.name or exc} is missing); "
        f"run: pip install 'fairstream[{extra}]'",
        extra=extra,
        name=exc.name,
    )
