"""The error for a missing ``spark`` extra, in a leaf so the modules that raise it
do not import the package face (``fairstream.spark``) they are loaded from."""

from __future__ import annotations

from fairstream import _extras

__all__ = ["missing_extra"]


def missing_extra(exc: ImportError) -> ImportError:
    """The error to raise when pyspark, pyarrow or confluent-kafka cannot be imported."""
    return _extras.missing_extra("spark", "the Spark backfill", exc)
