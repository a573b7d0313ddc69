"""Public test kit: embedded brokers for integration tests, an in-memory broker for unit tests."""

from fairstream.testing._broker import ENGINES, EmbeddedBroker, Engine, EngineInfo, free_port
from fairstream.testing._memory import MemoryBroker

__all__ = ["ENGINES", "EmbeddedBroker", "Engine", "EngineInfo", "MemoryBroker", "free_port"]

for _name in __all__:
    if isinstance(_public := globals()[_name], type) or callable(_public):
        _public.__module__ = __name__  # reprs and docs show fairstream.testing.MemoryBroker
