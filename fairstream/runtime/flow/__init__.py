"""The record's walk: fetch -> queue -> dispatch -> handler -> offsets -> commit.

``_fetch`` pulls records into per-partition queues, ``_scheduler`` deals them out
fairly, ``_workers`` (and ``_keyed`` for ``ordering="key"``) run them through the
handler in ``_handling`` (retries, ``_stuck`` handlers, ``_dead_letter``), ``_offsets``
keeps each partition's watermark and ``_commit`` (or ``_transactions`` under
exactly-once) commits it. The engine (``runtime/_engine.py``) wires the rooms with
callbacks, so no room imports its neighbours; they reach Kafka through
:mod:`fairstream.runtime._ports`, never through ``runtime/_kafka``.
"""
