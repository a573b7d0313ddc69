"""Spark finds the ``fairstream`` data source here without a ``register`` call.

PySpark (4.0+) imports every top-level module named ``pyspark_*`` on its Python path
when a session first uses a Python data source, and registers the ``DefaultSource`` it
finds under that source's name. So with fairstream installed, a new session can
``spark.readStream.format("fairstream")`` (or write) at once.
"""

from __future__ import annotations

from fairstream.spark.source import FairstreamDataSource as DefaultSource

__all__ = ["DefaultSource"]
