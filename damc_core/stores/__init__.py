"""Where raw records and cards live: one protocol, several backends.

Every method takes the namespace, so a backend can never hand one tenant's records to another.
"""

from .base import MemoryStore
from .memory import InMemoryStore
from .sqlite import SQLiteStore

__all__ = ["InMemoryStore", "MemoryStore", "SQLiteStore"]
