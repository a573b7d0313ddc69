"""Public test kit: embedded brokers for integration tests, an in-memory broker for unit tests."""

from fairstream.testing._broker import ENGINES, EmbeddedBroker, Engine, EngineInfo, free_port
from fairstream.testing._memory import MemoryBroker

__all__ = ["ENGINES", "EmbeddedBroker", "Engine", "EngineInfo", "MemoryBroker", "free_port"]
