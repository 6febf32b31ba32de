"""One session's rows in Postgres as archive records, and back: the SQL of export and import with the
sessions in Postgres (``serve --postgres``; docs/export-format.md).

The records are those of :mod:`storage.archive_rows` (a session actor's
file), so an archive moves between modes: the rows filed under
``<label>_<session id>`` (writable blocks, the cached prompt, searchable
entries) are written without that suffix, as a SQLite file holds them, and
get it back on import; times are the file's text (UTC
``YYYY-MM-DD HH:MM:SS.SSS``, :func:`storage.tree.postgres.stamp`). The
``assistant_config`` rows travel as ``config`` records except the name
(``actor_name``); the persisted active leaf (``active_leaf``) is one of them,
so an import puts back the leaf the export left. Text is ordered bytewise
(``COLLATE "C"``), as SQLite orders it. KV rows are not here: they stay in
the actor's own file (``actors.session_archive``).

:func:`export_rows` reads under the session's advisory lock (the one every
message write takes), in one transaction; :func:`import_rows` writes
everything in one transaction and refuses a session that already holds
messages, compactions or search entries, so a failure stores nothing.
The messages of an archive whose ids are all new and none an overlay id
(every archive an export writes) go in with one ``COPY``, their places
(:mod:`storage.tree.places`), ``seq`` values and stored times computed
here, each chain's rows made while the rows before it stream
(:class:`ArchivedChain`); any other archive goes through the tree engine
chain by chain (:func:`storage.tree.writes.append_chain`), then its stored
times in one ``UPDATE``. Then the other rows. Compaction ids, like message
ids, are unique per session (schema version 5), so a copy of a session
imports beside it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from common.errors import ConflictError, InvalidInputError
from common.shapes import OVERLAY_PREFIX

from ..tree import postgres as POSTGRES
from ..tree import writes
from ..tree.places import Places
from ..tree.postgres import DROP_ACTIVE_LEAF_SQL, keep_statistics, stamp
from ..tree.rows import NewMessage, utf8_length
from ..tree.steps import Operation as TreeOperation
from .connection import Copy, Many, Operation, Query, on_postgres

T = TypeVar("T")

__all__ = ["NAME_KEY", "ArchivedChain", "export_rows", "import_rows"]

#: ``assistant_config`` key of the name the session is addressed by: never exported (the header names it).
NAME_KEY = "actor_name"

_LOCK = "SELECT pg_advisory_xact_lock(hashtext('durable_sessions.messages'), hashtext(%(s)s))"
_OWNED = "length(label) > %(n)s AND right(label, %(n)s) = %(suffix)s"
_MESSAGES = (f"SELECT id, parent_id, {stamp('created_at')} AS created, content FROM assistant_messages "
             "WHERE session_id = %(s)s ORDER BY seq")
_COMPACTIONS = (f"SELECT id, summary, from_message_id, to_message_id, {stamp('created_at')} AS created "
                "FROM assistant_compactions WHERE session_id = %(s)s ORDER BY seq")
_CONFIG = ('SELECT key, value FROM assistant_config WHERE session_id = %(s)s AND key <> %(name)s '
           'ORDER BY key COLLATE "C"')
_BLOCKS = (f"SELECT left(label, -%(n)s) AS label, content, {stamp('updated_at')} AS updated "
           f'FROM cf_agents_context_blocks WHERE {_OWNED} ORDER BY left(label, -%(n)s) COLLATE "C"')
_ENTRIES = (f"SELECT left(label, -%(n)s) AS label, key, content, {stamp('created_at')} AS created, "
            f"{stamp('updated_at')} AS updated FROM cf_agents_search_entries WHERE {_OWNED} ORDER BY seq")
_HOLDS = f"""
SELECT EXISTS (SELECT 1 FROM assistant_messages WHERE session_id = %(s)s)
    OR EXISTS (SELECT 1 FROM assistant_compactions WHERE session_id = %(s)s)
    OR EXISTS (SELECT 1 FROM cf_agents_search_entries WHERE {_OWNED}) AS holds
"""
_UTC = "%({0})s::timestamp AT TIME ZONE 'UTC'"
_NEW_SEQS = "SELECT nextval(pg_get_serial_sequence('assistant_messages', 'seq')) AS seq FROM generate_series(1, %(n)s)"
#: The columns :func:`_copied_messages` writes (the generated search columns follow from them).
_MESSAGE_COLUMNS = ("seq", "session_id", "id", "parent_id", "role", "content", "text_content", "tools_content",
                    "created_at", "depth", "path_bytes", "tokens", "path_tokens", "jump_seq")
# One statement for every message (its triggers run once, not once per row: per-row statements cost
# O(session) each, 36 s for 10,000 messages against 0.3 s).
_RESTORE_TIMES = (
    "UPDATE assistant_messages AS m SET created_at = v.t::timestamp AT TIME ZONE 'UTC' "
    "FROM unnest(%(ids)s::text[], %(times)s::text[]) AS v(id, t) WHERE m.session_id = %(s)s AND m.id = v.id")
_INSERT_COMPACTION = ("INSERT INTO assistant_compactions (id, session_id, summary, from_message_id, to_message_id, "
                      "created_at) VALUES (%(id)s, %(s)s, %(summary)s, %(from)s, %(to)s, " + _UTC.format("t") + ")")
_UPSERT_CONFIG = """
INSERT INTO assistant_config (session_id, key, value) VALUES (%(s)s, %(key)s, %(value)s)
ON CONFLICT (session_id, key) DO UPDATE SET value = excluded.value
"""
_UPSERT_BLOCK = ("INSERT INTO cf_agents_context_blocks (label, content, updated_at) VALUES (%(label)s, %(content)s, "
                 + _UTC.format("t") + ") ON CONFLICT (label) DO UPDATE SET content = excluded.content, "
                 "updated_at = excluded.updated_at")
_UPSERT_ENTRY = ("INSERT INTO cf_agents_search_entries (label, key, content, created_at, updated_at) VALUES "
                 "(%(label)s, %(key)s, %(content)s, " + _UTC.format("c") + ", " + _UTC.format("t") + ") "
                 "ON CONFLICT (label, key) DO UPDATE SET content = excluded.content, "
                 "created_at = excluded.created_at, updated_at = excluded.updated_at")


def _owned(session_id: str) -> dict[str, Any]:
    suffix = "_" + session_id
    return {"s": session_id, "n": len(suffix), "suffix": suffix}


def export_rows(session_id: str) -> Operation[list[dict[str, Any]]]:
    """The records of session ``session_id`` in archive order (messages, compactions, config, blocks, entries),
    each as :mod:`common.archive` shapes it, header, ``kv`` and ``end`` left to the caller.
    Run it with ``write=True`` (one transaction, under the session's lock)."""
    params = {**_owned(session_id), "name": NAME_KEY}
    yield Query(_LOCK, params)
    records: list[dict[str, Any]] = []
    for row in (yield Query(_MESSAGES, params)):
        records.append({"type": "message", "id": row["id"], "parentId": row["parent_id"],
                        "createdAt": row["created"], "message": json.loads(row["content"])})
    for row in (yield Query(_COMPACTIONS, params)):
        records.append({"type": "compaction", "id": row["id"], "summary": row["summary"],
                        "fromMessageId": row["from_message_id"], "toMessageId": row["to_message_id"],
                        "createdAt": row["created"]})
    for row in (yield Query(_CONFIG, params)):
        records.append({"type": "config", "key": row["key"], "value": row["value"]})
    for row in (yield Query(_BLOCKS, params)):
        records.append({"type": "contextBlock", "label": row["label"], "content": row["content"],
                        "updatedAt": row["updated"]})
    for row in (yield Query(_ENTRIES, params)):
        records.append({"type": "searchEntry", "label": row["label"], "key": row["key"], "content": row["content"],
                        "createdAt": row["created"], "updatedAt": row["updated"]})
    return records


@dataclass(frozen=True, slots=True)
class ArchivedChain:
    """A run of an archive's messages, each under the one before, as :func:`import_rows` stores it.

    ``ids``: the messages' ids, in order; ``parent``: the first one's ``parentId``; ``rows()``: their
    checked rows (:class:`~storage.tree.rows.NewMessage`, the same ids in the same order), made when the
    import writes them -- on the runner's worker thread, inside the import's transaction, while Postgres
    stores the rows made before. Anything it raises ends the import with nothing stored.
    """

    ids: Sequence[str]
    parent: str | None
    rows: Callable[[], Sequence[NewMessage]]


def import_rows(
    session_id: str, chains: Sequence[ArchivedChain], times: Sequence[tuple[str, str]],
    records: Sequence[Mapping[str, Any]],
) -> Operation[None]:
    """Store an archive as session ``session_id``, in the caller's one transaction (``write=True``).

    ``chains``: the messages as runs for ``append_chain``, in stored order; ``times``: ``(message id,
    createdAt)``; ``records``: the archive's other records (compactions, config, blocks, entries; other
    types are skipped). Values are checked by the caller (text Postgres can hold, times as
    ``YYYY-MM-DD HH:MM:SS[.fff]``).

    Raises:
        ConflictError: the session already holds messages, compactions or search entries (nothing stored).
        InvalidInputError: a chain's rows do not carry its ids (nothing stored); and whatever
            ``ArchivedChain.rows`` raises (nothing stored).
    """
    owned = _owned(session_id)
    yield Query(_LOCK, owned)
    if (yield Query(_HOLDS, owned))[0]["holds"]:
        raise ConflictError("the session already holds data: import an archive only into a session that was "
                            "never written (or delete it first)")
    stored_times = dict(times)
    if _plain(chains, stored_times):
        yield from _copied_messages(session_id, chains, stored_times)
    else:
        for chain in chains:
            yield from on_postgres(writes.append_chain(POSTGRES, session_id, _made(chain), chain.parent))
        if times:
            yield Query(_RESTORE_TIMES, {"s": session_id, "ids": [message_id for message_id, _ in times],
                                         "times": [created for _, created in times]})
    yield Query(DROP_ACTIVE_LEAF_SQL, {"s": session_id})  # the archive's own ``active_leaf`` (if any) comes back
    steps: dict[str, list[dict[str, Any]]] = {_INSERT_COMPACTION: [], _UPSERT_CONFIG: [], _UPSERT_BLOCK: [],
                                              _UPSERT_ENTRY: []}
    for record in records:
        kind = record["type"]
        if kind == "compaction":
            steps[_INSERT_COMPACTION].append({"id": record["id"], "s": session_id, "summary": record["summary"],
                                              "from": record["fromMessageId"], "to": record["toMessageId"],
                                              "t": record["createdAt"]})
        elif kind == "config" and record["key"] != NAME_KEY:
            steps[_UPSERT_CONFIG].append({"s": session_id, "key": record["key"], "value": record["value"]})
        elif kind == "contextBlock":
            steps[_UPSERT_BLOCK].append({"label": record["label"] + owned["suffix"], "content": record["content"],
                                         "t": record["updatedAt"]})
        elif kind == "searchEntry":
            steps[_UPSERT_ENTRY].append({"label": record["label"] + owned["suffix"], "key": record["key"],
                                         "content": record["content"], "c": record["createdAt"],
                                         "t": record["updatedAt"]})
    for sql, params in steps.items():
        if params:
            yield Many(sql, params)


def _made(chain: ArchivedChain) -> Sequence[NewMessage]:
    """The rows of ``chain``, checked to carry its ids."""
    rows = chain.rows()
    if [m.id for m in rows] != list(chain.ids):
        raise InvalidInputError("the rows made for an archive's messages carry other ids than their records "
                                f"(the run of {len(chain.ids)} from {next(iter(chain.ids), None)!r})",
                                field="archive")
    return rows


def _plain(chains: Sequence[ArchivedChain], times: Mapping[str, str]) -> bool:
    """Whether every message id is new (no repeat) with a time, and no id or parent is an overlay id: then each
    message is stored, under its parent when an earlier message has that id, else as a root -- what
    ``append_chain``, chain by chain into the empty session, stores -- and :func:`_copied_messages` can place
    every row without reading one."""
    seen: set[str] = set()
    for chain in chains:
        if chain.parent is not None and chain.parent.startswith(OVERLAY_PREFIX):
            return False
        for message_id in chain.ids:
            if message_id in seen or message_id.startswith(OVERLAY_PREFIX) or message_id not in times:
                return False
            seen.add(message_id)
    return True


def _copied_messages(session_id: str, chains: Sequence[ArchivedChain], times: Mapping[str, str]) -> Operation[None]:
    """The messages of :func:`_plain` ``chains`` in one ``COPY`` with their stored times, into the empty session.

    The rows, their ``seq`` values (one draw) and places (:class:`~storage.tree.places.Places`, every parent
    and jump target among the rows placed before) are what ``append_chain`` stores chain by chain, but in
    one statement: the search columns and indexes are computed in one pass, the catalog's statement-level
    triggers run once, no ``UPDATE`` rewrites the rows for their times. The rows are made while the ``COPY``
    streams (each chain's ``rows()`` as its turn comes), so Python prepares messages while Postgres stores
    the ones before. The planner statistics are checked once, for the deepest row (``keep_statistics``).
    """
    count = sum(len(chain.ids) for chain in chains)
    if not count:
        return
    seqs = iter(sorted(row["seq"] for row in (yield Query(_NEW_SEQS, {"n": count}))))
    deepest = [0]

    def copied() -> Iterator[tuple[Any, ...]]:
        places = Places(POSTGRES, session_id)
        stored: set[str] = set()
        for chain in chains:
            parent = chain.parent if chain.parent in stored else None
            for m in _made(chain):
                seq = next(seqs)
                depth, path_bytes, tokens, path_tokens, jump = _without_reads(
                    places.place(seq, m.id, parent, utf8_length(m.content), m.tokens))
                yield (seq, session_id, m.id, parent, m.role, m.content, m.text, m.tools, times[m.id] + "+00",
                       depth, path_bytes, tokens, path_tokens, jump)
                deepest[0] = max(deepest[0], depth)
                stored.add(m.id)
                parent = m.id

    yield Copy("assistant_messages", _MESSAGE_COLUMNS, copied())
    yield from on_postgres(keep_statistics(count, deepest[0]))


def _without_reads(op: TreeOperation[T]) -> T:
    """The result of ``op``, which must read nothing (every row it needs was placed before)."""
    try:
        step = next(op)
    except StopIteration as done:
        result: T = done.value
        return result
    op.close()
    raise AssertionError(f"placing an imported row read the database ({step!r})")
