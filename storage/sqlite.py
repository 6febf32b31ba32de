"""One apsw connection per actor file: settings, queries, transactions, migrations.

:class:`SqlStorage` is the Python form of a Durable Object's ``ctx.storage.sql``:
synchronous (a local SQLite file never waits on other tasks), one connection
per file, used from the actor's own trio task only. It imports no trio.

Connection settings come from :mod:`apsw.bestpractice` (WAL, foreign keys,
double-quoted strings are identifiers only, a busy timeout); ``durability`` picks ``synchronous=NORMAL`` (survives a killed
process) or ``FULL`` (also survives power loss).

Files are opened with ``locking_mode=EXCLUSIVE`` by default: one process
owns each file (the host's data-folder lock makes that so), so SQLite keeps
the WAL index in the connection's heap memory instead of a memory-mapped
``-shm`` file. No ``-shm`` file means nothing for the kernel to back with a
disk page on a full disk (a mapped page it cannot back kills the process with
SIGBUS), one file descriptor less per open file, and a second process that
tries to open the file is refused (``apsw.BusyError``) instead of sharing it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import uuid
from collections.abc import Callable, Hashable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, Self

import apsw
import apsw.bestpractice

from common.errors import SchemaTooNewError, StorageClosedError

from .private_files import create_private_file, make_private, make_private_dirs
from .schema import MIGRATIONS, Migration

Durability = Literal["normal", "full"]
Locking = Literal["exclusive", "normal"]

#: How long a writer waits for another process holding the file's lock.
BUSY_TIMEOUT_MS = 5_000

_SYNCHRONOUS = {"normal": "NORMAL", "full": "FULL"}
_LOCKING = {"exclusive": "EXCLUSIVE", "normal": "NORMAL"}

_CONNECTION_SETTINGS = (
    apsw.bestpractice.connection_wal,
    apsw.bestpractice.connection_enable_foreign_keys,
    apsw.bestpractice.connection_dqs,
)


class SqlStorage:
    """A SQLite file owned by one actor.

    Create with :meth:`open`; the constructor is internal.

    Attributes:
        path: the file's path (``str``), or ``":memory:"``.
        durability: ``"normal"`` or ``"full"``.
    """

    def __init__(self, connection: apsw.Connection, path: str, durability: Durability) -> None:
        self._con: apsw.Connection | None = connection
        self.path = path
        self.durability = durability

    # -- lifecycle ---------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        durability: Durability = "normal",
        migrations: Sequence[Migration] = MIGRATIONS,
        template: str | os.PathLike[str] | None = None,
        locking: Locking = "exclusive",
    ) -> Self:
        """Open (creating if needed) the SQLite file at ``path`` and migrate it.

        Args:
            path: file path; parent folders are created. ``":memory:"`` gives a
                private in-memory database (tests).
            durability: ``"normal"`` -> ``synchronous=NORMAL``: a committed write
                survives the process being killed. ``"full"`` ->
                ``synchronous=FULL``: it also survives power loss.
            migrations: the schema ladder (default :data:`storage.schema.MIGRATIONS`).
            template: path of a database already at the top of ``migrations``.
                When ``path`` does not exist, its bytes are copied there
                (~1 ms) instead of climbing the ladder (~7 ms of DDL and
                syncs). Missing templates are built first. The copy is
                synced to disk only under ``"full"`` durability.
            locking: ``"exclusive"`` (default): this connection holds the
                file's lock from its first read until :meth:`close`, and the
                WAL index lives in its heap memory (no ``-shm`` file).
                ``"normal"``: SQLite's shared mode (a memory-mapped
                ``-shm`` file; other connections may read and write).

        Raises:
            ValueError: ``durability`` is not ``"normal"`` or ``"full"``, or
                ``locking`` not ``"exclusive"`` or ``"normal"``.
            SchemaTooNewError: the file's ``user_version`` is above
                ``len(migrations)``; the file is not modified.
            apsw.BusyError: another connection holds the file (exclusive locking).
            apsw.Error: the file cannot be opened or is not a database.
        """
        if durability not in _SYNCHRONOUS:
            raise ValueError(f"durability must be 'normal' or 'full', not {durability!r}")
        if locking not in _LOCKING:
            raise ValueError(f"locking must be 'exclusive' or 'normal', not {locking!r}")
        path = os.fspath(path)
        if path != ":memory:":
            make_private_dirs(Path(path).parent)
            if template is not None and not os.path.exists(path):
                _seed_from_template(os.fspath(template), path, migrations, durability)
            else:
                create_private_file(path)  # 0600 before SQLite opens it; its -wal and -shm follow
        con = apsw.Connection(path)
        try:
            con.set_busy_timeout(BUSY_TIMEOUT_MS)
            # Before the first read, which is when SQLite decides where the WAL index lives.
            con.pragma("locking_mode", _LOCKING[locking])
            for setting in _CONNECTION_SETTINGS:
                setting(con)
            con.pragma("synchronous", _SYNCHRONOUS[durability])
            _migrate(con, path, migrations)
        except BaseException:
            con.close()
            raise
        return cls(con, path, durability)

    def close(self) -> None:
        """Close the file. Idempotent. Later calls raise :class:`StorageClosedError`."""
        con, self._con = self._con, None
        if con is not None:
            con.close()

    @property
    def closed(self) -> bool:
        """``True`` once :meth:`close` ran."""
        return self._con is None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- queries -----------------------------------------------------------

    @property
    def connection(self) -> apsw.Connection:
        """The underlying :class:`apsw.Connection` (for code that needs apsw itself)."""
        if self._con is None:
            raise StorageClosedError(f"{self.path}: storage is closed")
        return self._con

    def sql(self, query: str, *params: Any) -> list[dict[str, Any]]:
        """Run ``query`` with ``?`` placeholders bound to ``params``; return all rows.

        The Python form of the original's ``this.sql`` tagged template. Each
        row is a ``dict`` of column name -> value (``str``, ``int``, ``float``,
        ``bytes`` or ``None``). A statement returning no rows gives ``[]``.

        Raises:
            StorageClosedError: after :meth:`close`.
            apsw.Error: SQLite refused the statement (e.g. ``apsw.ConstraintError``).
        """
        cursor = self.connection.execute(query, params)
        try:
            names = [d[0] for d in cursor.get_description()]
        except apsw.ExecutionCompleteError:
            return []
        return [dict(zip(names, row)) for row in cursor]

    def exec(self, query: str, *params: Any) -> apsw.Cursor:
        """Run ``query`` and return the apsw cursor (iterate it for tuples).

        Raises: as :meth:`sql`.
        """
        return self.connection.execute(query, params)

    def scalar(self, query: str, *params: Any) -> Any:
        """First column of the first row, or ``None`` when there is no row."""
        for row in self.connection.execute(query, params):
            return row[0]
        return None

    @contextlib.contextmanager
    def transaction(self) -> Iterator[SqlStorage]:
        """``with storage.transaction():`` -- all or nothing.

        The outermost block is a transaction; a nested block is a savepoint
        that rolls back alone when its body raises. An exception rolls the
        block back and propagates.
        """
        with self.connection:
            yield self

    @property
    def in_transaction(self) -> bool:
        """``True`` inside :meth:`transaction` (autocommit is off)."""
        return not self.connection.get_autocommit()

    @property
    def data_version(self) -> int:
        """The file's data version (``apsw.Connection.data_version``): it moves at every commit of
        any connection to the file, this one included, so an equal value means nothing was committed."""
        return self.connection.data_version()

    def rollback(self) -> bool:
        """Roll back the open transaction, whoever opened it; ``False`` when none was open.

        For the runtime's output gate, which undoes a transaction a call left
        open. A ``with storage.transaction():`` block still running over it
        fails when it ends (its transaction is gone).

        Raises:
            StorageClosedError: after :meth:`close`.
        """
        if not self.in_transaction:
            return False
        self.connection.execute("ROLLBACK")
        return True

    # -- hooks -------------------------------------------------------------

    def on_commit(self, callback: Callable[[], object] | None, *, key: Hashable) -> None:
        """Call ``callback()`` each time a transaction of this connection commits.

        It runs inside SQLite's commit hook, just before the commit is final,
        so it must not use this storage; its return value is ignored (the
        commit goes ahead). An exception it raises turns the commit into a
        rollback and propagates. Callbacks registered under different ``key`` all run;
        registering under a used ``key`` replaces that one, ``None`` removes it.

        Raises:
            StorageClosedError: after :meth:`close`.
        """
        hook = None if callback is None else _commit_hook(callback)
        self.connection.set_commit_hook(hook, id=key)

    def on_rollback(self, callback: Callable[[], None] | None, *, key: Hashable) -> None:
        """Call ``callback()`` each time a transaction of this connection rolls back.

        It runs inside SQLite's rollback hook and must not use this storage.
        Not called for a nested block (a savepoint) rolled back alone, nor
        when the connection closes. ``key`` and ``None`` work as in :meth:`on_commit`.

        Raises:
            StorageClosedError: after :meth:`close`.
        """
        self.connection.set_rollback_hook(callback, id=key)

    @property
    def database_size(self) -> int:
        """Size of the database in bytes (``page_count * page_size``; excludes the WAL)."""
        con = self.connection
        return int(con.pragma("page_count")) * int(con.pragma("page_size"))

    @property
    def user_version(self) -> int:
        """The file's schema version (``PRAGMA user_version``)."""
        return int(self.connection.pragma("user_version"))


def _commit_hook(callback: Callable[[], object]) -> Callable[[], bool]:
    def hook() -> bool:
        callback()
        return False  # let the commit go ahead

    return hook


def _migrate(con: apsw.Connection, path: str, migrations: Sequence[Migration]) -> None:
    """Climb the ``user_version`` ladder in one transaction (or refuse a newer file).

    A step is SQL text, or a callable given the connection (inside the
    transaction) for steps SQL alone cannot do.
    """
    known = len(migrations)
    found = int(con.pragma("user_version"))
    if found > known:
        raise SchemaTooNewError(path, found, known)
    if found == known:
        return
    with con:
        # Re-read inside the write transaction: another process may have migrated.
        found = int(con.pragma("user_version"))
        for step in migrations[found:]:
            if callable(step):
                step(con)  # a step that needs Python (e.g. re-indexing text)
            else:
                con.execute(step)
        con.pragma("user_version", known)


def _seed_from_template(template: str, path: str, migrations: Sequence[Migration], durability: Durability) -> None:
    """Create ``path`` as a byte copy of ``template`` (built first when missing)."""
    ensure_template(template, migrations)
    partial = _partial_name(path)
    shutil.copyfile(template, partial)
    try:
        make_private(partial)
        if durability == "full":
            _fsync_path(partial)
        os.link(partial, path)  # atomic and never replaces a file created meanwhile
    except FileExistsError:
        pass
    finally:
        os.unlink(partial)
    if durability == "full":
        _fsync_path(os.path.dirname(path) or ".")


def ensure_template(template: str | os.PathLike[str], migrations: Sequence[Migration] = MIGRATIONS) -> str:
    """Build the fully migrated, empty database at ``template`` unless it exists; its path.

    Safe to call from many threads and processes at once: a process builds a
    missing template once (one lock per path), always under a name of its own
    next to it, and renames it into place when it is complete, so nobody ever
    opens a half-built template and two builders never share a file.

    Raises:
        apsw.Error, OSError: the template cannot be built (nothing is left behind).
    """
    template = os.fspath(template)
    if os.path.exists(template):
        return template
    with _template_lock(template):
        if not os.path.exists(template):
            _write_template(template, migrations)
    return template


_TEMPLATE_LOCKS: dict[str, threading.Lock] = {}
_TEMPLATE_LOCKS_GUARD = threading.Lock()


def _template_lock(template: str) -> threading.Lock:
    with _TEMPLATE_LOCKS_GUARD:
        return _TEMPLATE_LOCKS.setdefault(os.path.abspath(template), threading.Lock())


def _partial_name(path: str) -> str:
    """A temporary file name next to ``path`` that no other thread or process uses."""
    return f"{path}.{os.getpid()}-{threading.get_ident()}-{uuid.uuid4().hex[:8]}.tmp"


def _write_template(template: str, migrations: Sequence[Migration]) -> None:
    """Build a fully migrated, vacuumed, checkpointed database file at ``template`` (replacing it atomically).

    Vacuumed: the ladder's steps leave pages free (tables renamed, copied
    and dropped); every file copied from the template would carry them.
    """
    make_private_dirs(Path(template).parent)
    partial = _partial_name(template)
    try:
        with SqlStorage.open(partial, migrations=migrations) as built:
            built.connection.execute("VACUUM")
            built.connection.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_TRUNCATE)
        os.replace(partial, template)
    finally:
        for leftover in (partial, f"{partial}-wal", f"{partial}-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(leftover)


def _fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
