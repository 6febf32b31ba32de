"""Export a session actor's file as an archive, and import one into an empty actor (docs/export-format.md).

Both run inside one turn of the actor (the runtime calls them with the
agent): :func:`export_lines` reads in one transaction, so the archive is one
consistent view; :func:`import_records` writes in one transaction, so a
failure stores nothing. Messages are imported through the session's own
preparation (validation, search text, token estimate) and the tree engine,
chain by chain in their stored order, then their stored times are put back.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any

from common.archive import ARCHIVE_FORMAT, ARCHIVE_VERSION, dump_record
from common.errors import ConflictError, InvalidInputError
from storage.archive_rows import export_records, holds_session_data, restore_times, write_records
from storage.messages import MessageStore
from storage.sqlite import SqlStorage

from .session import Session

__all__ = ["export_lines", "import_records"]


def export_lines(storage: SqlStorage, session_id: str, *, now: datetime.datetime | None = None) -> list[str]:
    """The archive of the session in ``storage`` (one line per record, no newlines), addressed as ``session_id``.

    ``now`` (default: the current UTC time) becomes the header's volatile ``exportedAt``.
    """
    stamp = (now or datetime.datetime.now(datetime.UTC)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    header = {"type": "header", "format": ARCHIVE_FORMAT, "version": ARCHIVE_VERSION, "sessionId": session_id,
              "exportedAt": stamp}
    with storage.transaction():
        body = [dump_record(record) for record in export_records(storage)]
    return [dump_record(header), *body, dump_record({"type": "end", "records": len(body)})]


def import_records(storage: SqlStorage, session: Session, records: Sequence[dict[str, Any]]) -> int:
    """Store the records of a parsed archive (:func:`common.archive.parse_archive`) in an empty session file.

    Returns the number of messages stored.

    Raises:
        ConflictError: the file already holds messages, compactions, search entries or KV rows.
        InvalidInputError: a message record whose ``message.id`` differs from its ``id``, or a
            message the session refuses (the field names the archive line); nothing was stored.
        apsw.Error: SQLite refused a row; nothing was stored.
    """
    if holds_session_data(storage):
        raise ConflictError("the session already holds data: import an archive only into a session that was "
                            "never written (or delete it first)")
    messages = [(index, record) for index, record in enumerate(records, start=1) if record["type"] == "message"]
    for line, record in messages:
        if record["message"].get("id") != record["id"]:
            raise InvalidInputError(f"line {line}: message.id differs from the record's id {record['id']!r}",
                                    field="archive")
    store = MessageStore(storage)
    with storage.transaction():
        for chain in _chains([record for _, record in messages]):
            rows = session.prepared_rows([record["message"] for record in chain])
            store.append_chain(rows, chain[0]["parentId"])
        restore_times(storage, [(record["id"], record["createdAt"]) for _, record in messages])
        write_records(storage, records)
    return len(messages)


def _chains(messages: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Consecutive messages each under the one before, as runs ``append_chain`` takes."""
    chains: list[list[dict[str, Any]]] = []
    for record in messages:
        if chains and record["parentId"] == chains[-1][-1]["id"]:
            chains[-1].append(record)
        else:
            chains.append([record])
    return chains
