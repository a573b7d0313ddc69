"""Helpers the tests share: the embedded brokers (``backends``), producing and reading
with plain aiokafka (``kafka_helpers``), live-traffic waits (``live_traffic``), and the
apps some tests start in a child process (``keyed_member``, ``shadow_member``,
``lag_members``). No tests here."""
