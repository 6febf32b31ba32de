"""The KV rows of an actor's file as archive records (``kv``), for an actor whose session is elsewhere.

With the sessions in Postgres (``serve --postgres``) the actor's file holds
only host-local state; its KV rows travel in the session's archive after the
rows read from Postgres (``actors.session_archive``). Same records as
:func:`storage.archive_rows.export_records` yields for them; a file without
the KV table (it may be made by its first write) holds none.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

from .sqlite import SqlStorage

__all__ = ["holds_kv", "kv_records"]

_TABLE = "_cf_KV"
_EXISTS = "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?"


def kv_records(storage: SqlStorage) -> Iterator[dict[str, Any]]:
    """The file's KV rows as ``kv`` records (``value``: base64 of the stored bytes), by key."""
    if storage.scalar(_EXISTS, _TABLE) is None:
        return
    for key, value in storage.exec(f"SELECT key, value FROM {_TABLE} ORDER BY key"):
        yield {"type": "kv", "key": key, "value": base64.b64encode(bytes(value)).decode("ascii")}


def holds_kv(storage: SqlStorage) -> bool:
    """``True`` when the file holds KV rows (an import refuses it)."""
    return storage.scalar(_EXISTS, _TABLE) is not None and bool(
        storage.scalar(f"SELECT EXISTS (SELECT 1 FROM {_TABLE})"))
