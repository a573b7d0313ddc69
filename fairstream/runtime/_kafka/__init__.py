"""Everything that touches aiokafka beyond its public value types, in one place.

aiokafka's private internals (the coordinator's join and sync, the fetcher's
request planning and ``fetched_records``, protocol structs it does not export) are
patched or read only here, each behind a guard that falls back to aiokafka's own
behaviour, logged, when the internals are not the ones this fairstream knows, and
each pinned by a test that fails when aiokafka changes them
(``docs/development/aiokafka-hooks.md`` lists them: the checklist for an upgrade).

The rooms of ``flow/`` and ``group/`` never import this folder: they reach Kafka
through the Protocols in :mod:`fairstream.runtime._ports`, which
:class:`~fairstream.runtime._kafka._clients.AIOKafkaClients` implements. Only the
public face (``_app``, the package ``__init__``) and ``_ports`` import from here.
"""
