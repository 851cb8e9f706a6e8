"""Errors raised by DAMC.

    DamcError
    ├── ConfigError (ValueError)      a setting is out of range or inconsistent; raised at construction
    ├── TraceError (ValueError)       a trace file cannot be read as OpenAI-style messages
    ├── TokenizerUnavailableError     no offline BPE file for the requested encoding
    └── StoreError                    the record/card store failed
        ├── StoreClosedError          the store was used after close()
        ├── RecordExistsError         a record id is taken (another writer on the session); retried
        └── SchemaVersionError        a stored record has a format version this release cannot read

Errors inside an agent's run (bad tool output, odd messages) never raise: they become safe cards.
"""

from __future__ import annotations


class DamcError(Exception):
    """Base class of every error DAMC raises on purpose."""


class ConfigError(DamcError, ValueError):
    """A setting is invalid; the message names the value and the fix."""


class TraceError(DamcError, ValueError):
    """A trace file is not a list of messages, a JSONL of them, or ``[{"traj": [...]}, ...]``."""


class TokenizerUnavailableError(DamcError):
    """The requested encoding has no offline BPE file on this machine."""


class StoreError(DamcError):
    """The store could not read or write."""


class StoreClosedError(StoreError):
    """The store was used after ``close()``."""


class RecordExistsError(StoreError):
    """A record with this id is already stored: another writer took the sequence number."""

    def __init__(self, record_id: str, namespace_key: str) -> None:
        super().__init__(f"record {record_id!r} is already stored for {namespace_key!r}")


class SchemaVersionError(StoreError):
    """A stored card or record was written by a newer format version."""
