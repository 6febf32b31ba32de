"""Transcript storage for the Claude Agent SDK ``SessionStore`` contract.

The contract (the SDK's ``SessionStore`` protocol, as its session-storage
documentation states it; this paragraph is the project's copy): a transcript
is addressed by a ``SessionKey`` ``{project_key, session_id, subpath?}``;
``append`` mirrors a batch of opaque JSON entries, ``load`` returns them
deep-equal in append order (``None`` for a key never written), entries
carrying a ``uuid`` already stored under the same key are skipped (the SDK
retries failed batches), and deleting a main transcript removes its
sub-transcripts and its summary. ``list_session_summaries`` answers one
summary per main transcript, folded inside each ``append`` of a main
transcript (:mod:`common.transcript_summary`; sub-transcripts never count),
its ``mtime`` the store's write time on the clock ``list_sessions`` uses.

Three pieces, all synchronous:

* :class:`TranscriptFile` -- the transcripts of ONE ``(project_key,
  session_id)``: the main one (subpath ``""``) and its sub-transcripts
  (``"subagents/agent-<id>"``), in the ``transcript_entries`` table of an
  actor's file. The runtime hosts it inside the session's actor.
* :class:`TranscriptCatalog` -- a small host-level SQLite file answering
  ``list_sessions`` and ``list_session_summaries`` per project without
  opening any transcript file.
* :class:`LocalTranscriptStore` -- the SDK protocol (async methods) over a
  data directory, in process: one file per session plus the catalog. Its
  methods never await, so each call is atomic under trio or asyncio.

Keys are free-form strings and never become paths: a session's file is
named by the SHA-256 of its key.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, overload

from common.shapes import MAIN_SUBPATH, encode_entry, parse_session_key
from common.transcript_summary import fold_session_summary

from .schema import create_on_first_use, table_exists
from .sqlite import Durability, SqlStorage

#: File name of the catalog inside a data directory.
CATALOG_FILE_NAME = "transcripts-catalog.sqlite3"

# Made by the first append (storage.schema.ON_FIRST_USE).
_ENTRIES = "transcript_entries"

#: Folder (inside a data directory) holding one file per session.
TRANSCRIPTS_DIR_NAME = "transcripts"

_CATALOG_V1 = """
CREATE TABLE transcript_sessions (
    project_key TEXT NOT NULL,
    session_id  TEXT NOT NULL,
    mtime_ms    INTEGER NOT NULL,
    summary     TEXT NOT NULL,
    PRIMARY KEY (project_key, session_id)
) WITHOUT ROWID;
"""

#: The catalog's own ``user_version`` ladder (see :mod:`storage.schema`).
CATALOG_MIGRATIONS: tuple[str, ...] = (_CATALOG_V1,)


class TranscriptFile:
    """The transcripts of one ``(project_key, session_id)`` in one SQLite file.

    Subpaths are opaque strings: ``""`` (:data:`MAIN_SUBPATH`) is the main
    transcript, anything else a sub-transcript. The file holds no key
    besides the subpath; the owner knows which session it is.

    Args:
        storage: an open file with the actor schema (``transcript_entries``).
    """

    def __init__(self, storage: SqlStorage) -> None:
        self.storage = storage

    def _exists(self) -> bool:
        """Whether ``transcript_entries`` exists yet (it is made by the first append)."""
        return table_exists(self.storage.connection, _ENTRIES)

    def append(self, subpath: str, entries: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        """Store ``entries`` after those already under ``subpath``, in order.

        An entry whose string ``uuid`` is already stored under ``subpath``
        (earlier, or earlier in this batch) is skipped; entries without one
        are always stored. The batch is one transaction: on error nothing
        of it is stored. An empty batch writes nothing.

        Returns:
            The entries actually stored (the input objects, in order).

        Raises:
            ValueError: ``subpath`` is not a string, or an entry is not a
                JSON object (checked before anything is written).
        """
        _check_subpath(subpath)
        entries = list(entries)  # an iterator is read once, here
        rows = [(encode_entry(entry, i), _entry_uuid(entry)) for i, entry in enumerate(entries)]
        stored: list[Mapping[str, Any]] = []
        if not rows:
            return stored
        con = self.storage.connection
        with self.storage.transaction():
            create_on_first_use(con, _ENTRIES)
            for entry, (text, uuid) in zip(entries, rows):
                con.execute(
                    "INSERT OR IGNORE INTO transcript_entries (subpath, uuid, entry) VALUES (?, ?, ?)",
                    (subpath, uuid, text),
                )
                if con.changes():
                    stored.append(entry)
        return stored

    def load(self, subpath: str) -> list[dict[str, Any]] | None:
        """The entries under ``subpath`` in append order, or ``None`` if there are none.

        Entries are deep-equal to what was appended (JSON round trip).
        """
        _check_subpath(subpath)
        if not self._exists():
            return None
        cursor = self.storage.exec(
            "SELECT entry FROM transcript_entries WHERE subpath = ? ORDER BY seq", subpath
        )
        entries = [json.loads(text) for (text,) in cursor]
        return entries or None

    def load_json(self, subpath: str) -> str | None:
        """The entries under ``subpath`` as one compact JSON array text, or ``None``.

        Equal to ``json.dumps(load(subpath), separators=(",", ":"),
        ensure_ascii=False)`` without decoding anything: a server can send
        it as the response body (about 10x faster than ``load`` + dump).
        """
        _check_subpath(subpath)
        if not self._exists():
            return None
        cursor = self.storage.exec(
            "SELECT entry FROM transcript_entries WHERE subpath = ? ORDER BY seq", subpath
        )
        texts = [text for (text,) in cursor]
        return "[" + ",".join(texts) + "]" if texts else None

    def list_subkeys(self) -> list[str]:
        """The sub-transcript subpaths holding entries, sorted (never ``""``).

        Costs one index seek per subpath, whatever the number of entries.
        """
        found: list[str] = []
        current = MAIN_SUBPATH
        if not self._exists():
            return found
        while True:
            following = self.storage.scalar(
                "SELECT min(subpath) FROM transcript_entries WHERE subpath > ?", current
            )
            if following is None:
                return found
            found.append(following)
            current = following

    def count(self, subpath: str | None = None) -> int:
        """Number of entries under ``subpath``, or in the whole file when ``None``."""
        if subpath is not None:
            _check_subpath(subpath)
        if not self._exists():
            return 0
        if subpath is None:
            return int(self.storage.scalar("SELECT count(*) FROM transcript_entries"))
        _check_subpath(subpath)
        return int(self.storage.scalar("SELECT count(*) FROM transcript_entries WHERE subpath = ?", subpath))

    def delete(self, subpath: str | None = None) -> int:
        """Delete entries; return how many were removed.

        ``None`` or ``""`` (the main transcript) deletes everything in the
        file, sub-transcripts included, as deleting a session must. Any
        other subpath deletes only that sub-transcript.
        """
        if subpath:
            _check_subpath(subpath)
        if not self._exists():
            return 0
        if subpath:
            self.storage.exec("DELETE FROM transcript_entries WHERE subpath = ?", subpath)
        else:
            self.storage.exec("DELETE FROM transcript_entries")
        return self.storage.connection.changes()


class TranscriptCatalog:
    """Per project: each main transcript's mtime and folded summary.

    One row per ``(project_key, session_id)`` whose main transcript was
    appended to. ``mtime`` is the catalog's write time in epoch milliseconds,
    strictly increasing across writes of this catalog (two appends never
    share an mtime), and the summary's ``mtime`` is the same value, so
    ``list_sessions`` and ``list_session_summaries`` share one clock.

    Create with :meth:`open`. Writes are serialised by the catalog's own
    transactions, so the read-fold-write of a summary cannot race.
    """

    def __init__(self, storage: SqlStorage, *, clock_ms: Callable[[], int] | None = None) -> None:
        self.storage = storage
        self._clock_ms = clock_ms or _wall_clock_ms
        self._last_ms = int(storage.scalar("SELECT coalesce(max(mtime_ms), 0) FROM transcript_sessions"))

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        durability: Durability = "normal",
        clock_ms: Callable[[], int] | None = None,
    ) -> TranscriptCatalog:
        """Open (creating and migrating) the catalog file at ``path``.

        Args:
            clock_ms: wall clock in epoch milliseconds (default: ``time.time``).

        Raises: as :meth:`storage.SqlStorage.open`.
        """
        storage = SqlStorage.open(path, durability=durability, migrations=CATALOG_MIGRATIONS)
        return cls(storage, clock_ms=clock_ms)

    def close(self) -> None:
        """Close the file (idempotent)."""
        self.storage.close()

    def for_actor(self, actor_id: object) -> TranscriptCatalog:
        """Itself: every transcript actor of the host records its row here."""
        return self

    def record_append(
        self, project_key: str, session_id: str, entries: Sequence[Mapping[str, Any]]
    ) -> int:
        """Note an append to a MAIN transcript: fold ``entries``, stamp the mtime.

        Call it after the entries were stored, with the entries that were
        (duplicates skipped). Never call it for a sub-transcript.

        Returns:
            The new mtime (epoch ms), also the summary's ``mtime``.
        """
        with self.storage.transaction():
            row = self.storage.sql(
                "SELECT mtime_ms, summary FROM transcript_sessions WHERE project_key = ? AND session_id = ?",
                project_key,
                session_id,
            )
            prev = None
            if row:
                prev = {"session_id": session_id, "mtime": row[0]["mtime_ms"], "data": json.loads(row[0]["summary"])}
            folded = fold_session_summary(prev, session_id, entries)
            mtime = self._next_mtime()
            self.storage.exec(
                "INSERT INTO transcript_sessions (project_key, session_id, mtime_ms, summary) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (project_key, session_id) DO UPDATE SET mtime_ms = excluded.mtime_ms, "
                "summary = excluded.summary",
                project_key,
                session_id,
                mtime,
                _dumps(folded["data"]),
            )
        return mtime

    def forget(self, project_key: str, session_id: str) -> bool:
        """Drop a session's row (its listing and summary). ``True`` if it existed."""
        self.storage.exec(
            "DELETE FROM transcript_sessions WHERE project_key = ? AND session_id = ?", project_key, session_id
        )
        return self.storage.connection.changes() > 0

    def mtime(self, project_key: str, session_id: str) -> int | None:
        """The session's mtime in epoch ms, or ``None`` if it is not listed."""
        return self.storage.scalar(
            "SELECT mtime_ms FROM transcript_sessions WHERE project_key = ? AND session_id = ?",
            project_key,
            session_id,
        )

    def list_sessions(self, project_key: str) -> list[dict[str, Any]]:
        """``[{"session_id": str, "mtime": int}]`` of the project, by session id."""
        rows = self.storage.exec(
            "SELECT session_id, mtime_ms FROM transcript_sessions WHERE project_key = ? ORDER BY session_id",
            project_key,
        )
        return [{"session_id": sid, "mtime": mtime} for sid, mtime in rows]

    def list_session_summaries(self, project_key: str) -> list[dict[str, Any]]:
        """``[{"session_id", "mtime", "data"}]`` of the project; ``data`` as folded."""
        rows = self.storage.exec(
            "SELECT session_id, mtime_ms, summary FROM transcript_sessions WHERE project_key = ? "
            "ORDER BY session_id",
            project_key,
        )
        return [{"session_id": sid, "mtime": mtime, "data": json.loads(data)} for sid, mtime, data in rows]

    def _next_mtime(self) -> int:
        self._last_ms = max(int(self._clock_ms()), self._last_ms + 1)
        return self._last_ms


def session_file_id(project_key: str, session_id: str) -> str:
    """64 hex chars naming a session's file: SHA-256 of the key pair.

    The pair is encoded as a JSON array, so no two pairs share a name.
    """
    return hashlib.sha256(_dumps([project_key, session_id]).encode()).hexdigest()


class LocalTranscriptStore:
    """The SDK's ``SessionStore`` protocol over a local data directory.

    Layout: ``<data_dir>/transcripts/<session_file_id>.sqlite3`` (one file
    per session, holding its sub-transcripts) and
    ``<data_dir>/transcripts-catalog.sqlite3``. Pass it as
    ``ClaudeAgentOptions(session_store=LocalTranscriptStore(path))``.

    Methods are ``async`` as the protocol requires but never await: each
    call runs to completion on the calling thread, so calls cannot
    interleave under trio or asyncio. Use from one thread.

    Args:
        data_dir: the folder (created if missing).
        durability: as :meth:`storage.SqlStorage.open`.
        max_open_files: session files kept open between calls (least
            recently used ones are closed beyond it).
        clock_ms: wall clock in epoch ms for mtimes (default ``time.time``).
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        durability: Durability = "normal",
        max_open_files: int = 64,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        if max_open_files < 1:
            raise ValueError(f"max_open_files must be at least 1, not {max_open_files}")
        self.data_dir = Path(data_dir)
        self.durability = durability
        self._max_open = max_open_files
        self._files: OrderedDict[str, TranscriptFile] = OrderedDict()
        self.catalog = TranscriptCatalog.open(
            self.data_dir / CATALOG_FILE_NAME, durability=durability, clock_ms=clock_ms
        )

    # -- the SessionStore protocol ----------------------------------------

    async def append(self, key: Mapping[str, Any], entries: Sequence[Mapping[str, Any]]) -> None:
        """Mirror a batch (see :meth:`TranscriptFile.append`); ``[]`` is a no-op.

        A batch for the main transcript also updates the catalog (mtime and
        summary, folded from the entries actually stored).

        Raises:
            ValueError: bad key or entry; nothing is stored.
        """
        project_key, session_id, subpath = parse_session_key(key)
        entries = list(entries) if entries else []  # an iterator is read once, here
        if not entries:
            return
        stored = self._file(project_key, session_id, create=True).append(subpath, entries)
        if subpath == MAIN_SUBPATH:
            self.catalog.record_append(project_key, session_id, stored)

    async def load(self, key: Mapping[str, Any]) -> list[dict[str, Any]] | None:
        """The transcript's entries in append order, or ``None`` if never written."""
        project_key, session_id, subpath = parse_session_key(key)
        file = self._file(project_key, session_id, create=False)
        return None if file is None else file.load(subpath)

    async def list_sessions(self, project_key: str) -> list[dict[str, Any]]:
        """``[{"session_id", "mtime"}]`` of main transcripts in ``project_key``."""
        return self.catalog.list_sessions(project_key)

    async def list_session_summaries(self, project_key: str) -> list[dict[str, Any]]:
        """``[{"session_id", "mtime", "data"}]`` folded at append time."""
        return self.catalog.list_session_summaries(project_key)

    async def delete(self, key: Mapping[str, Any]) -> None:
        """Delete a transcript. A main key removes the whole session (file,
        sub-transcripts, catalog row); a subpath removes only that one."""
        project_key, session_id, subpath = parse_session_key(key)
        if subpath == MAIN_SUBPATH:
            self._remove_file(project_key, session_id)
            self.catalog.forget(project_key, session_id)
            return
        file = self._file(project_key, session_id, create=False)
        if file is not None:
            file.delete(subpath)
            if file.count() == 0:
                self._remove_file(project_key, session_id)

    async def list_subkeys(self, key: Mapping[str, Any]) -> list[str]:
        """Sub-transcript subpaths of the session, sorted (``[]`` if none)."""
        project_key, session_id, _ = parse_session_key({**key, "subpath": None})
        file = self._file(project_key, session_id, create=False)
        return [] if file is None else file.list_subkeys()

    # -- lifecycle ----------------------------------------------------------

    def close(self) -> None:
        """Close every open file and the catalog (idempotent)."""
        while self._files:
            _, file = self._files.popitem()
            file.storage.close()
        self.catalog.close()

    async def __aenter__(self) -> LocalTranscriptStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    # -- files ----------------------------------------------------------------

    def _path(self, file_id: str) -> Path:
        return self.data_dir / TRANSCRIPTS_DIR_NAME / f"{file_id}.sqlite3"

    @overload
    def _file(self, project_key: str, session_id: str, *, create: Literal[True]) -> TranscriptFile: ...
    @overload
    def _file(self, project_key: str, session_id: str, *, create: bool) -> TranscriptFile | None: ...

    def _file(self, project_key: str, session_id: str, *, create: bool) -> TranscriptFile | None:
        file_id = session_file_id(project_key, session_id)
        file = self._files.get(file_id)
        if file is not None:
            self._files.move_to_end(file_id)
            return file
        path = self._path(file_id)
        if not create and not path.exists():
            return None
        file = TranscriptFile(SqlStorage.open(path, durability=self.durability))
        self._files[file_id] = file
        while len(self._files) > self._max_open:
            _, oldest = self._files.popitem(last=False)
            oldest.storage.close()
        return file

    def _remove_file(self, project_key: str, session_id: str) -> None:
        file_id = session_file_id(project_key, session_id)
        file = self._files.pop(file_id, None)
        if file is not None:
            file.storage.close()
        path = self._path(file_id)
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)


def _check_subpath(subpath: object) -> None:
    if not isinstance(subpath, str):
        raise ValueError(f"subpath must be a string, not {type(subpath).__name__}")


def _entry_uuid(entry: Mapping[str, Any]) -> str | None:
    uuid = entry.get("uuid")
    return uuid if isinstance(uuid, str) else None


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000
