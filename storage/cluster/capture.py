"""Change capture on an actor's file: what each cut of its writes ships to the log.

:class:`ChangeCapture` keeps one SQLite session (``apsw.Session``) attached to
every table of the actor's connection, so each committed write is recorded
as a *changeset*: the physical rows changed, FTS5 shadow tables included
(docs/cluster.md "Measured in the prototype", Q1).
:meth:`~ChangeCapture.cut` takes the changes recorded so far
and starts a new session; it runs only while no transaction is open, because
a session reads the rows' *current* values when it builds the changeset and
would otherwise ship uncommitted ones.

What the capture guarantees, and how:

* **Tables without a primary key** are recorded by rowid
  (``SQLITE_SESSION_OBJCONFIG_ROWID``); without it SQLite skips them.
* **No write escapes.** A commit hook vetoes any commit made while no session
  is attached (after :meth:`~ChangeCapture.detach`, or after the log refused
  the actor's writes): the write is rolled back and the error raised, instead
  of being lost silently -- a write outside the capture makes a later
  changeset fail to apply (docs/cluster.md "Measured in the prototype", Q1).
* **DDL is not in changesets** (and a replica silently skips changes of a
  table it lacks): the capture notices a changed ``PRAGMA schema_version``
  after a commit, and the log then ships a snapshot instead (:attr:`schema_changed`).
  A table dropped or renamed after changes to it were recorded makes SQLite
  refuse the changeset (``SchemaChangeError``); the snapshot carries those too.
* The marker table :data:`MARKER_TABLE` is left out (``table_filter``): it
  records, in the file itself, which log entry the file matches.

Not carried: ``sqlite_sequence`` (AUTOINCREMENT counters) is never captured
by SQLite; the project's schema has no AUTOINCREMENT column, and user tables
that use it get reused ids on a replica (docs/cluster.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import apsw

from common.errors import StorageError, StorageUnavailableError
from storage.schema import create_every_table
from storage.sqlite import SqlStorage

__all__ = ["MARKER_TABLE", "ChangeCapture", "Marker", "ensure_marker", "read_marker", "start_capture", "write_marker"]

#: The local table saying which cluster log entry the file matches (never captured).
MARKER_TABLE = "_ds_cluster"

_CREATE_MARKER = f"""
CREATE TABLE IF NOT EXISTS {MARKER_TABLE} (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    cluster_id TEXT NOT NULL,
    last_seq   INTEGER NOT NULL,
    clean      INTEGER NOT NULL
)"""
_READ_MARKER = f"SELECT cluster_id, last_seq, clean FROM {MARKER_TABLE} WHERE id = 1"
_WRITE_MARKER = f"INSERT OR REPLACE INTO {MARKER_TABLE} (id, cluster_id, last_seq, clean) VALUES (1, ?, ?, ?)"
_MARKER_EXISTS = "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?"

_HOOK_KEY = "storage.cluster.capture"


@dataclass(frozen=True, slots=True)
class Marker:
    """What the file says about itself: it equals the cluster log up to ``last_seq``
    when ``clean`` (written on a clean hibernation; cleared at activation)."""

    cluster_id: str
    last_seq: int
    clean: bool


def ensure_marker(con: apsw.Connection) -> None:
    """Create the marker table in the file if missing (a schema change)."""
    con.execute(_CREATE_MARKER)


def read_marker(storage: SqlStorage) -> Marker | None:
    """The file's marker, or ``None`` when it has none (never used in a cluster)."""
    if storage.scalar(_MARKER_EXISTS, MARKER_TABLE) is None:
        return None
    for cluster_id, last_seq, clean in storage.exec(_READ_MARKER):
        return Marker(cluster_id, last_seq, bool(clean))
    return None


def write_marker(target: SqlStorage | apsw.Connection, marker: Marker) -> None:
    """Store ``marker`` (the table must exist: :func:`ensure_marker`)."""
    con = target.connection if isinstance(target, SqlStorage) else target
    con.execute(_WRITE_MARKER, (marker.cluster_id, marker.last_seq, int(marker.clean)))


def start_capture(storage: SqlStorage, marker: Marker) -> ChangeCapture:
    """What an activation does before any write: store ``marker`` (unclean) and attach a capture.

    Raises:
        StorageUnavailableError: the file refused (a fault of the local disk; the cause is chained).
    """
    try:
        write_marker(storage, marker)
        return ChangeCapture(storage)
    except apsw.Error as exc:
        raise StorageUnavailableError(
            f"{storage.path}: the change capture could not start ({type(exc).__name__}: {exc}); retry") from exc


class ChangeCapture:
    """Records every committed change of ``storage`` for the log.

    Args:
        storage: the actor's open file. Attach before any write of the
            activation (before ``on_start``).

    Attributes:
        committed: ``True`` once a transaction committed since the last cut.
        schema_changed: ``True`` once a commit changed the schema since
            :meth:`reset_schema`; the log ships a snapshot then.
    """

    def __init__(self, storage: SqlStorage) -> None:
        self._storage = storage
        self._con = storage.connection
        self._session: apsw.Session | None = None
        self._refusal: BaseException | None = None
        self.committed = False
        self.schema_changed = False
        create_every_table(self._con)  # made before the capture: never DDL inside a captured turn
        self._schema_version = self._read_schema_version()
        self._session = self._new_session()
        storage.on_commit(self._on_commit, key=_HOOK_KEY)

    def _new_session(self) -> apsw.Session:
        session = apsw.Session(self._con, "main")
        session.config(apsw.SQLITE_SESSION_OBJCONFIG_ROWID, 1)
        session.table_filter(_captured)
        session.attach()
        return session

    def _read_schema_version(self) -> int:
        return int(self._con.pragma("schema_version"))

    def _on_commit(self) -> None:
        if self._session is None:
            if self._refusal is not None:
                raise self._refusal
            raise StorageError(f"{self._storage.path}: a write outside change capture was refused")
        self.committed = True

    @property
    def pending(self) -> bool:
        """``True`` when changes may be waiting for a cut."""
        return self.committed or (self._session is not None and not self._session.is_empty)

    def cut(self) -> bytes:
        """The changes committed since the last cut, as one changeset (``b""`` for none).

        Also notices a schema change (see :attr:`schema_changed`); when DDL
        dropped or renamed a table whose changes were recorded, SQLite cannot
        make the changeset and ``b""`` comes back with :attr:`schema_changed`
        set: the next entry is the whole file.

        Raises:
            RuntimeError: a transaction is open (its rows are not committed yet),
                or the capture was detached.
            apsw.Error: SQLite failed to build the changeset (the recorded
                changes are gone: the caller must fail the log).
        """
        if self._session is None:
            raise RuntimeError("the change capture is detached")
        if self._storage.in_transaction:
            raise RuntimeError("cannot cut the change capture inside a transaction")
        if self.committed:
            self.committed = False
            if self._read_schema_version() != self._schema_version:
                self.schema_changed = True
        if self._session.is_empty:
            return b""
        session, self._session = self._session, None
        try:
            changeset = session.changeset()
        except apsw.SchemaChangeError:
            # A table with recorded changes was dropped or renamed since: SQLite cannot describe
            # those changes, and needs not, as the schema changed and the log ships the whole file.
            self.schema_changed = True
            changeset = b""
        finally:
            session.close()
            self._session = self._new_session()
        return changeset

    def reset_schema(self) -> None:
        """The current schema is what the log has (after a snapshot was shipped)."""
        self._schema_version = self._read_schema_version()
        self.schema_changed = False

    def serialize(self) -> bytes:
        """The whole file as bytes (``sqlite3_serialize``); only outside a transaction.

        Raises:
            RuntimeError: a transaction is open.
        """
        if self._storage.in_transaction:
            raise RuntimeError("cannot serialize the file inside a transaction")
        return self._con.serialize("main")

    def user_version(self) -> int:
        """The file's schema version (``PRAGMA user_version``)."""
        return self._storage.user_version

    def refuse_writes(self, error: BaseException) -> None:
        """Detach, and make every later commit fail with ``error`` (the log is gone)."""
        self._refusal = error
        self.detach()

    def detach(self) -> None:
        """Stop recording; later commits are vetoed (idempotent)."""
        session, self._session = self._session, None
        if session is not None:
            session.close()


def _captured(table: str) -> bool:
    return table != MARKER_TABLE
