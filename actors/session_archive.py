"""Export a session actor's file as an archive, and import one into an empty actor (docs/export-format.md).

Both run inside one turn of the actor (the runtime calls them with the
agent): :func:`export_lines` reads in one transaction, so the archive is one
consistent view; :func:`import_records` writes in one transaction, so a
failure stores nothing. Messages are imported through the session's own
preparation (validation, search text, token estimate) and the tree engine,
chain by chain in their stored order, then their stored times are put back.

With the sessions in Postgres (:class:`~actors.session_agent_postgres.PostgresSessionAgent`,
``serve --postgres``) :func:`export_lines_postgres` and :func:`import_records_postgres`
do the same on the session's rows (:mod:`storage.postgres.archive_rows`: one
transaction each way), holding the actor's input gate; the actor's KV rows,
which stay in its own file, follow the Postgres rows in the archive. An
import writes them after the Postgres transaction committed; should that
local write fail, the session's rows are deleted again, so either the whole
archive is stored or none of it.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import functools
import re
from collections.abc import Sequence
from typing import Any

from common.archive import ARCHIVE_FORMAT, ARCHIVE_VERSION, dump_record
from common.errors import ConflictError, InvalidInputError
from storage.archive_kv import holds_kv, kv_records
from storage.archive_rows import export_records, holds_session_data, restore_times, write_records
from storage.messages import MessageStore
from storage.sqlite import SqlStorage

from .session import Session

__all__ = ["check_for_postgres", "export_lines", "export_lines_postgres", "import_records", "import_records_postgres"]

#: A stored time as the archive writes it (UTC; Postgres reads it back with its milliseconds).
_STORED_TIME = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(\.\d{1,6})?")
#: The time fields of each record type (checked before Postgres sees them).
_TIME_KEYS = {"message": ("createdAt",), "compaction": ("createdAt",), "contextBlock": ("updatedAt",),
              "searchEntry": ("createdAt", "updatedAt")}


def export_lines(storage: SqlStorage, session_id: str, *, now: datetime.datetime | None = None) -> list[str]:
    """The archive of the session in ``storage`` (one line per record, no newlines), addressed as ``session_id``.

    ``now`` (default: the current UTC time) becomes the header's volatile ``exportedAt``.
    """
    with storage.transaction():
        body = [dump_record(record) for record in export_records(storage)]
    return _framed(session_id, body, now)


def _framed(session_id: str, body: list[str], now: datetime.datetime | None) -> list[str]:
    """``body`` (record lines) between the header and the end record."""
    stamp = (now or datetime.datetime.now(datetime.UTC)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    header = {"type": "header", "format": ARCHIVE_FORMAT, "version": ARCHIVE_VERSION, "sessionId": session_id,
              "exportedAt": stamp}
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
    messages = _messages(records)
    store = MessageStore(storage)
    with storage.transaction():
        for chain in _chains([record for _, record in messages]):
            rows = session.prepared_rows([record["message"] for record in chain])
            store.append_chain(rows, chain[0]["parentId"])
        restore_times(storage, [(record["id"], record["createdAt"]) for _, record in messages])
        write_records(storage, records)
    return len(messages)


def _messages(records: Sequence[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    """``(line, record)`` of each message record, each one's ``message.id`` checked against its ``id``."""
    messages = [(index, record) for index, record in enumerate(records, start=1) if record["type"] == "message"]
    for line, record in messages:
        if record["message"].get("id") != record["id"]:
            raise InvalidInputError(f"line {line}: message.id differs from the record's id {record['id']!r}",
                                    field="archive")
    return messages


async def export_lines_postgres(agent: Any, session_id: str, *, now: datetime.datetime | None = None) -> list[str]:
    """The archive of a :class:`~actors.session_agent_postgres.PostgresSessionAgent`'s session, addressed as
    ``session_id``: its rows in Postgres (one transaction), then the KV rows of the actor's file.

    Raises:
        StorageUnavailableError: Postgres cannot be reached or does not answer in time.
    """
    from storage.postgres.archive_rows import export_rows

    async def read() -> list[str]:
        records = await agent.postgres.runner.run(export_rows(agent.session_key), write=True)
        return [dump_record(record) for record in (*records, *kv_records(agent.storage))]

    return _framed(session_id, await agent.ctx.block_concurrency_while(read), now)


async def import_records_postgres(agent: Any, records: Sequence[dict[str, Any]]) -> int:
    """Store a parsed archive as the (empty) session of a :class:`~actors.session_agent_postgres.PostgresSessionAgent`:
    its rows in Postgres in one transaction, then the KV rows in the actor's file. Returns the messages stored.

    The messages are prepared (:meth:`Session.prepared_rows`, then checked for Postgres) chain by chain inside
    that transaction, on its worker thread, while Postgres stores the chains before
    (:class:`storage.postgres.archive_rows.ArchivedChain`); the actor's turn waits for the whole call.

    Raises:
        ConflictError: the session already holds messages, compactions, search entries or KV rows.
        InvalidInputError: a record whose value Postgres cannot hold (NUL), a time not in the stored form,
            a ``kv`` value that is not base64, a message the session refuses (the message names the line);
            nothing was stored.
        StorageUnavailableError: Postgres cannot be reached or does not answer in time (nothing stored).
    """
    from storage.postgres.archive_rows import ArchivedChain, import_rows

    storage = agent.storage
    messages = [record for _, record in check_for_postgres(records)]
    kv = [record for record in records if record["type"] == "kv"]
    chains = [ArchivedChain([record["id"] for record in chain], chain[0]["parentId"],
                            functools.partial(_rows_for_postgres, agent, chain)) for chain in _chains(messages)]
    times = [(record["id"], record["createdAt"]) for record in messages]

    async def store() -> int:
        if holds_kv(storage):
            raise ConflictError("the session already holds data (KV rows): import an archive only into a session "
                                "that was never written (or delete it first)")
        await agent.postgres.runner.run(import_rows(agent.session_key, chains, times, records), write=True)
        if kv:
            try:
                with storage.transaction():
                    write_records(storage, kv)
            except BaseException:
                await agent.postgres.erase_session(agent.session_key)  # all of it or none of it
                raise
        return len(messages)

    return await agent.ctx.block_concurrency_while(store)


def _rows_for_postgres(agent: Any, chain: list[dict[str, Any]]) -> list[Any]:
    from storage.postgres.messages import check_messages

    rows = agent.session.prepared_rows([record["message"] for record in chain])
    return check_messages(rows, agent.postgres.max_value_bytes)


def check_for_postgres(records: Sequence[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    """Check a parsed archive before it wakes anything: every value of every record as Postgres text can hold it (no NUL), every time in the stored form,
    every ``kv`` value base64, every message record's ``message.id`` its ``id``.

    Returns ``(line, record)`` of each message record.

    Raises:
        InvalidInputError: naming the first bad line (``line <n>: ...``).
    """
    messages = _messages(records)
    for line, record in enumerate(records, start=1):
        for key, value in record.items():
            if isinstance(value, str) and "\x00" in value:
                raise InvalidInputError(f"line {line}: {record['type']}.{key} holds a NUL character, which "
                                        "Postgres text cannot store", field="archive")
        for key in _TIME_KEYS.get(record["type"], ()):
            if not _valid_time(record[key]):
                raise InvalidInputError(f"line {line}: {record['type']}.{key} must be a UTC time "
                                        f"'YYYY-MM-DD HH:MM:SS.SSS', not {record[key]!r}", field="archive")
        if record["type"] == "kv":
            try:
                base64.b64decode(record["value"], validate=True)
            except (binascii.Error, ValueError):
                raise InvalidInputError(f"line {line}: kv.value is not base64", field="archive") from None
    return messages


def _valid_time(text: str) -> bool:
    if _STORED_TIME.fullmatch(text) is None:
        return False
    try:
        datetime.datetime.fromisoformat(text)
    except ValueError:
        return False
    return True


def _chains(messages: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Consecutive messages each under the one before, as runs ``append_chain`` takes."""
    chains: list[list[dict[str, Any]]] = []
    for record in messages:
        if chains and record["parentId"] == chains[-1][-1]["id"]:
            chains[-1].append(record)
        else:
            chains.append([record])
    return chains
