"""Public test kit: embedded brokers (and, later, the in-memory app)."""

from fairstream.testing._broker import ENGINES, EmbeddedBroker, Engine, EngineInfo, free_port

__all__ = ["ENGINES", "EmbeddedBroker", "Engine", "EngineInfo", "free_port"]
