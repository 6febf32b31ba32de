"""Is an actor's file whole? Cheap checks at every wake, thorough ones for ``doctor``.

Damage must never pass silently (an empty answer where 3,000 messages were,
writes accepted on top of a damaged page). SQLite itself repairs nothing
and, worse, treats several kinds of damage as valid states: a 0-byte file
is an empty database, a missing or partly overwritten ``-wal`` simply
means fewer commits. So the host keeps three lines of defence:

* :func:`check_files` -- the file headers, before SQLite opens anything
  (two small reads): the database header (magic, page size, size a whole
  number of pages, no shorter than its header says when no WAL is
  pending), the WAL header (magic, version, page size, checksum: a damaged
  one makes SQLite ignore the whole log) and the frame headers (a frame of
  the current log generation after one that is not: a damaged frame header,
  which makes SQLite drop every later commit).
* the **generation**: a counter in the file (table :data:`GENERATION_TABLE`,
  created on first use, outside the actor schema's ladder) that the host
  raises when an actor that wrote hibernates or closes, and copies to its
  catalog (:mod:`storage.catalog`).
  A file whose generation is below the catalog's went back in time (its
  WAL was deleted or cut short); a file the catalog knows that is gone
  vanished.
* :func:`quick_check` (``PRAGMA quick_check``) where the file is small
  enough to check at every wake, and :func:`integrity_check` (the full
  ``PRAGMA integrity_check`` plus every WAL frame's checksum) in ``doctor``.

SQLite reporting corruption during a call (``SQLITE_CORRUPT``, ``SQLITE_NOTADB``)
is the last line: :mod:`storage.faults` turns it into
:class:`~common.errors.ActorStorageCorruptError`.

Everything here is synchronous and imports nothing of the runtime.
"""

from __future__ import annotations

import mmap
import os
import struct
import time
from dataclasses import dataclass
from pathlib import Path

import apsw

from . import cipher
from .context import read_config
from .schema import COMPACTIONS_TABLE, MESSAGES_TABLE, table_exists
from .sqlite import SqlStorage

__all__ = [
    "ACTOR_NAME_KEY", "GENERATION_TABLE", "QUICK_CHECK_MAX_BYTES", "ActorFacts", "actor_facts", "bump_generation",
    "InspectionTimeout", "check_files", "companion_files", "examine", "integrity_check", "open_for_inspection", "quick_check",
    "quick_check_file",
    "read_generation", "wal_checksum_problem",
]

#: The one-row table holding the file's generation.
GENERATION_TABLE = "_host_generation"
#: ``assistant_config`` key (session ``""``) where the session actor keeps the name it is addressed by.
ACTOR_NAME_KEY = "actor_name"
#: Files (database plus WAL) up to this size get ``PRAGMA quick_check`` at every wake (about 4 ms per MB).
QUICK_CHECK_MAX_BYTES = 512 * 1024

_MAGIC = b"SQLite format 3\x00"
_HEADER_BYTES = 100
_WAL_MAGICS = (0x377F0682, 0x377F0683)  # little- / big-endian frame checksums
_WAL_VERSION = 3007000
_WAL_HEADER_BYTES = 32
_FRAME_HEADER_BYTES = 24


@dataclass(frozen=True, slots=True)
class ActorFacts:
    """What the host catalog keeps of one actor file (see :func:`actor_facts`).

    Attributes:
        name: the name the actor is addressed by (a session id), or ``None``.
        generation: the file's generation (0 before the first raise).
        messages: rows of ``assistant_messages``.
        compactions: rows of ``assistant_compactions``.
        compacted_through: ``to_message_id`` of the newest compaction, or ``None``.
        first_message_ms, last_message_ms: epoch milliseconds of the oldest and
            newest message's ``created_at``, or ``None`` without messages.
    """

    name: str | None
    generation: int
    messages: int
    compactions: int
    compacted_through: str | None
    first_message_ms: int | None
    last_message_ms: int | None


def companion_files(path: str | os.PathLike[str]) -> list[Path]:
    """The database file and the companions SQLite may leave beside it (``-wal``, ``-shm``, ``-journal``)."""
    base = Path(path)
    return [base, *(base.with_name(base.name + suffix) for suffix in ("-wal", "-shm", "-journal"))]


# -- headers -------------------------------------------------------------------------------


def check_files(path: str | os.PathLike[str]) -> str | None:
    """The first problem found in the headers of ``path`` and its ``-wal``, or ``None``.

    Reads the 100-byte database header, the 32-byte WAL header and each WAL
    frame's 24-byte header; never opens the file with SQLite, never writes.
    A missing database file is not a problem here (the caller knows
    whether it should exist).

    Returns:
        e.g. ``"the file is empty (0 bytes)"``, ``"the WAL header is damaged
        (checksum); SQLite would ignore its 212 frames"``.
    """
    path = Path(path)
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return None
    with path.open("rb") as file:
        header = file.read(_HEADER_BYTES)
    problem, page_size = _database_header_problem(header, size)
    if problem is not None:
        return problem
    wal_problem, wal_frames = _wal_problem(path.with_name(path.name + "-wal"), page_size)
    if wal_problem is not None:
        return wal_problem
    if header[:16] != _MAGIC:
        return None  # encrypted: the page count in its header cannot be read
    return _database_size_problem(header, size, page_size, wal_frames)


def _database_header_problem(header: bytes, size: int) -> tuple[str | None, int]:
    if size == 0:
        return "the file is empty (0 bytes)", 0
    if size < _HEADER_BYTES:
        return f"the file is {size} bytes, shorter than a database header", 0
    if header[:16] != _MAGIC:
        if cipher.active():  # encrypted (storage.cipher): the header is ciphertext, only the size can be checked
            page_size = cipher.PAGE_SIZE
            return (f"the file is {size} bytes, not a whole number of {page_size}-byte pages (cut short?)"
                    if size % page_size else None), page_size
        return "the file does not start with a SQLite header (overwritten or not a database)", 0
    page_size = struct.unpack(">H", header[16:18])[0]
    page_size = 65536 if page_size == 1 else page_size
    if page_size < 512 or page_size & (page_size - 1):
        return f"the header gives an impossible page size ({page_size})", 0
    if size % page_size:
        return f"the file is {size} bytes, not a whole number of {page_size}-byte pages (cut short?)", page_size
    return None, page_size


def _database_size_problem(header: bytes, size: int, page_size: int, wal_frames: int) -> str | None:
    """With no WAL frame pending, the header's page count must fit in the file."""
    change_counter, pages = struct.unpack(">II", header[24:32])
    valid_for = struct.unpack(">I", header[92:96])[0]
    if wal_frames or change_counter != valid_for or pages * page_size <= size:
        return None
    return f"the file holds {size // page_size} pages but its header says {pages} (cut short)"


def _wal_problem(wal: Path, page_size: int) -> tuple[str | None, int]:
    """``(problem, frames of the current generation)`` for the ``-wal`` beside a database."""
    try:
        size = wal.stat().st_size
    except FileNotFoundError:
        return None, 0
    if size == 0:
        return None, 0
    with wal.open("rb") as file:
        header = file.read(_WAL_HEADER_BYTES)
        if len(header) < _WAL_HEADER_BYTES:
            return f"the WAL is {size} bytes, shorter than its header", 0
        problem = _wal_header_problem(header, page_size, size)
        if problem is not None:
            return problem, 0
        if size < _WAL_HEADER_BYTES + page_size + _FRAME_HEADER_BYTES:
            return None, 0
        with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as view:  # no read call per frame
            return _frame_headers_problem(view, header, page_size, size)


def _wal_header_problem(header: bytes, page_size: int, size: int) -> str | None:
    magic, version, wal_page_size = struct.unpack(">III", header[:12])
    frames = (size - _WAL_HEADER_BYTES) // (page_size + _FRAME_HEADER_BYTES)
    if magic not in _WAL_MAGICS or version != _WAL_VERSION:
        return f"the WAL header is damaged (magic); SQLite would ignore its {frames} frames"
    if wal_page_size != page_size:
        return f"the WAL's page size ({wal_page_size}) differs from the database's ({page_size})"
    big_endian = magic & 1
    expected = struct.unpack(">II", header[24:32])
    if _checksum(header[:24], big_endian, (0, 0)) != expected:
        return f"the WAL header is damaged (checksum); SQLite would ignore its {frames} frames"
    return None


def _frame_headers_problem(view: mmap.mmap, header: bytes, page_size: int, size: int) -> tuple[str | None, int]:
    """A frame of the current generation (the header's salts) after one that is not.

    SQLite reuses a log from its start after a checkpoint, so frames of an
    older generation may follow the current ones: that is normal. A current
    frame *after* a foreign one means a frame header between them was damaged.
    Compares the salts of every frame at C speed: one strided slice per salt byte.
    """
    stride = page_size + _FRAME_HEADER_BYTES
    total = (size - _WAL_HEADER_BYTES) // stride
    first = _WAL_HEADER_BYTES + 8
    matching = (1 << (8 * total)) - 1  # one 0xff byte per frame, cleared where a salt byte differs
    for k, salt_byte in enumerate(header[16:24]):
        column = view[first + k:first + total * stride:stride]
        matching &= int.from_bytes(column.translate(_MATCH_TABLES[salt_byte]), "big")
    flags = matching.to_bytes(total, "big")
    foreign = flags.find(b"\x00")
    current = total if foreign < 0 else foreign
    if foreign >= 0 and flags.find(b"\xff", foreign) >= 0:
        return (f"WAL frame {foreign + 1} of {total} is damaged (its header); SQLite would drop "
                "every commit from there on"), current
    return None, current


#: ``bytes.translate`` tables: byte ``b`` -> 0xff, every other byte -> 0x00.
_MATCH_TABLES = [bytes(0xFF if i == b else 0 for i in range(256)) for b in range(256)]


def _checksum(data: bytes, big_endian: int, start: tuple[int, int]) -> tuple[int, int]:
    """SQLite's WAL checksum of ``data`` (a multiple of 8 bytes), continuing from ``start``."""
    s0, s1 = start
    words = struct.unpack(f"{'>' if big_endian else '<'}{len(data) // 4}I", data)
    for i in range(0, len(words), 2):
        s0 = (s0 + words[i] + s1) & 0xFFFFFFFF
        s1 = (s1 + words[i + 1] + s0) & 0xFFFFFFFF
    return s0, s1


def wal_checksum_problem(path: str | os.PathLike[str]) -> str | None:
    """Verify every frame checksum of the current WAL generation (slow: about 0.1 s per MB; ``doctor``).

    A committed frame whose checksum fails means SQLite drops it and every
    later commit. Frames after the last commit frame of a broken chain are
    an interrupted write, not damage.
    """
    path = Path(path)
    wal = path.with_name(path.name + "-wal")
    try:
        size = wal.stat().st_size
        with path.open("rb") as file:
            page_size = _database_header_problem(file.read(_HEADER_BYTES), path.stat().st_size)[1]
    except FileNotFoundError:
        return None
    if size < _WAL_HEADER_BYTES or not page_size:
        return None
    with wal.open("rb") as file:
        header = file.read(_WAL_HEADER_BYTES)
        big_endian = struct.unpack(">I", header[:4])[0] & 1
        running = struct.unpack(">II", header[24:32])
        stride = page_size + _FRAME_HEADER_BYTES
        bad = None
        for index, offset in enumerate(range(_WAL_HEADER_BYTES, size - stride + 1, stride)):
            file.seek(offset)
            frame = file.read(stride)
            if frame[8:16] != header[16:24]:
                break
            commit = struct.unpack(">I", frame[4:8])[0]
            if bad is None:
                running = _checksum(frame[:8] + frame[_FRAME_HEADER_BYTES:], big_endian, running)
                if running != struct.unpack(">II", frame[16:24]):
                    bad = index
            elif commit:
                return f"WAL frame {bad + 1} fails its checksum; SQLite drops the commits after it"
    return None


# -- inside the file ---------------------------------------------------------------------------


def quick_check(storage: SqlStorage) -> str | None:
    """``PRAGMA quick_check``'s first complaint, or ``None`` when the file is sound.

    Reads every page of the database (about 4 ms per MB); run it where the
    file is small enough (:data:`QUICK_CHECK_MAX_BYTES`).

    Raises:
        apsw.Error: SQLite could not read the file (damage it reports as an error).
    """
    rows = [row[0] for row in storage.connection.execute("PRAGMA quick_check(1)")]
    return None if rows == ["ok"] else "; ".join(_complaints(rows))


def quick_check_file(path: str | os.PathLike[str]) -> str | None:
    """:func:`quick_check` on a short-lived connection of its own (the file must not be open elsewhere).

    The check reads every page; on its own connection, everything it
    allocated is given back when it closes (run on the actor's connection,
    about 80 KiB per active actor stayed behind). Damage SQLite reports as
    an error is returned as the problem too.
    """
    try:
        storage = open_for_inspection(path)
    except (apsw.CorruptError, apsw.NotADBError) as exc:
        return str(exc)
    try:
        return quick_check(storage)
    except (apsw.CorruptError, apsw.NotADBError) as exc:
        return str(exc)
    finally:
        storage.close()


def integrity_check(storage: SqlStorage, *, max_errors: int = 20) -> list[str]:
    """Every complaint of ``PRAGMA integrity_check`` (up to ``max_errors``); ``[]`` when sound.

    Raises:
        apsw.Error: SQLite could not read the file.
    """
    rows = [row[0] for row in storage.connection.execute(f"PRAGMA integrity_check({int(max_errors)})")]
    return [] if rows == ["ok"] else _complaints(rows)


def _complaints(rows: list[object]) -> list[str]:
    """SQLite's lines without its ``*** in database main ***`` heading."""
    lines = [line.strip() for row in rows for line in str(row).splitlines()]
    return [line for line in lines if line and not line.startswith("*** in database")]


def read_generation(storage: SqlStorage) -> int:
    """The file's generation (0 when it was never raised)."""
    try:
        value = storage.scalar(f"SELECT generation FROM {GENERATION_TABLE} WHERE id = 1")
    except apsw.SQLError as exc:
        if "no such table" not in str(exc):
            raise
        return 0
    return int(value or 0)


def bump_generation(storage: SqlStorage) -> int:
    """Raise the file's generation by one (one small commit); the new value.

    Raises:
        apsw.Error: the write failed (e.g. ``apsw.FullError``); the file keeps its old value.
    """
    with storage.transaction():
        storage.exec(f"CREATE TABLE IF NOT EXISTS {GENERATION_TABLE} "
                     "(id INTEGER PRIMARY KEY CHECK (id = 1), generation INTEGER NOT NULL)")
        generation = read_generation(storage) + 1
        storage.exec(f"INSERT OR REPLACE INTO {GENERATION_TABLE} (id, generation) VALUES (1, ?)", generation)
    return generation


def actor_facts(storage: SqlStorage) -> ActorFacts:
    """Name, generation, message and compaction counts of an actor file (a few index reads).

    Counting messages reads the smallest index of ``assistant_messages``
    (about 1 ms per 30,000 messages).
    """
    messages, first, last, compactions, through = 0, None, None, 0, None
    if table_exists(storage.connection, MESSAGES_TABLE):  # made by the first message (schema version 9)
        row = storage.connection.execute(
            "SELECT count(*), min(created_at), max(created_at) FROM assistant_messages"
        ).fetchone()
        assert row is not None  # an aggregate without GROUP BY always yields one row
        messages, first, last = row
    if table_exists(storage.connection, COMPACTIONS_TABLE):  # made by the first compaction
        compactions = storage.scalar("SELECT count(*) FROM assistant_compactions")
        through = storage.scalar("SELECT to_message_id FROM assistant_compactions ORDER BY seq DESC LIMIT 1")
    return ActorFacts(
        name=read_config(storage, "", ACTOR_NAME_KEY),
        generation=read_generation(storage),
        messages=int(messages),
        compactions=int(compactions),
        compacted_through=through,
        first_message_ms=_epoch_ms(storage, first),
        last_message_ms=_epoch_ms(storage, last),
    )


def _epoch_ms(storage: SqlStorage, stamp: str | None) -> int | None:
    if stamp is None:
        return None
    value = storage.scalar("SELECT CAST(round((julianday(?) - 2440587.5) * 86400000) AS INTEGER)", stamp)
    return None if value is None else int(value)


def open_for_inspection(path: str | os.PathLike[str]) -> SqlStorage:
    """Open an existing actor file to inspect it: no migration, no checkpoint on close, nothing created.

    The file may be hostile (any file can sit in a data folder): its schema is
    not trusted (``trusted_schema`` off: no functions or virtual tables it
    names run), and its views and triggers are turned off, so reading a name
    that is a view over an endless query fails at once instead of running it.

    Raises:
        apsw.Error: SQLite cannot open or read it (``apsw.NotADBError``, ``apsw.CorruptError``...).
    """
    con = apsw.Connection(os.fspath(path), flags=apsw.SQLITE_OPEN_READWRITE)
    try:
        con.pragma("locking_mode", "EXCLUSIVE")
        con.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
        for setting in _UNTRUSTED:
            con.config(setting, 0)
        con.execute("SELECT count(*) FROM sqlite_schema").fetchall()
    except BaseException:
        con.close()
        raise
    return SqlStorage(con, os.fspath(path), "normal")


#: What :func:`open_for_inspection` turns off: the schema's functions, its views, its triggers.
_UNTRUSTED = (apsw.SQLITE_DBCONFIG_TRUSTED_SCHEMA, apsw.SQLITE_DBCONFIG_ENABLE_VIEW,
              apsw.SQLITE_DBCONFIG_ENABLE_TRIGGER)
#: The tables :func:`actor_facts` reads: each must be a table (not a view) where it exists.
_READ_TABLES = ("assistant_messages", "assistant_compactions", "assistant_config", GENERATION_TABLE)
#: SQLite virtual machine steps between two looks at the clock (:func:`examine`'s budget).
_BUDGET_STEPS = 10_000


class InspectionTimeout(TimeoutError):
    """:func:`examine` ran out of its time budget on one file (nothing is known about it)."""


def examine(
    path: str | os.PathLike[str], known_generation: int | None = None, *, budget_s: float | None = None,
) -> tuple[str, None] | tuple[None, ActorFacts]:
    """The thorough check of one closed actor file (``doctor``): ``(problem, None)`` or ``(None, facts)``.

    Headers, every WAL frame checksum, the full integrity check, and the
    generation against ``known_generation`` (the catalog's, when it has a
    row). Slow on big files (about 30 ms per MB); writes nothing. Opened as
    :func:`open_for_inspection` does (no view, trigger or schema function
    runs), and only tables are read: a known name that is a view is a problem.

    Args:
        budget_s: the most seconds SQLite may work on the file (``None``: no limit),
            enforced with a progress handler that interrupts the statement.

    Raises:
        InspectionTimeout: ``budget_s`` passed before the checks ended.
    """
    deadline = None if budget_s is None else time.monotonic() + budget_s
    problem = check_files(path) or wal_checksum_problem(path)
    if problem is not None:
        return problem, None
    try:
        storage = open_for_inspection(path)
    except apsw.Error as exc:
        return f"SQLite cannot open it: {exc}", None
    if deadline is not None:
        storage.connection.set_progress_handler(lambda: time.monotonic() > deadline, _BUDGET_STEPS)
    try:
        errors = integrity_check(storage)
        if errors:
            return f"the integrity check failed: {'; '.join(errors[:3])}", None
        problem = _not_tables(storage)
        if problem is not None:
            return problem, None
        facts = actor_facts(storage)
    except apsw.InterruptError:
        raise InspectionTimeout(f"the checks took longer than their budget of {budget_s:g} s") from None
    except apsw.Error as exc:
        return f"SQLite could not read it: {exc}", None
    finally:
        storage.close()
    if known_generation is not None and facts.generation < known_generation:
        return (f"its file went back in time (generation {facts.generation}, the catalog saw "
                f"{known_generation})"), None
    return None, facts


def _not_tables(storage: SqlStorage) -> str | None:
    """A problem when a name the checks read is something other than a table (a view, say)."""
    marks = ", ".join("?" * len(_READ_TABLES))
    for name, kind in storage.connection.execute(
            f"SELECT name, type FROM sqlite_schema WHERE name IN ({marks}) AND type != 'table'", _READ_TABLES):
        return f"{name} is a {kind}, not a table: not an actor file this program wrote"
    return None
