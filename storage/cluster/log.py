"""The fenced log: each actor's cuts shipped to Postgres in order, many actors per statement.

:class:`ActorLog` is one actor's side (its output gate in storage terms).
Writes commit to the actor's file as they always do; every output the runtime
is about to release (a reply, a WebSocket frame) first takes a
:meth:`~ActorLog.barrier`: a *cut* of the changes committed so far, numbered.
The output leaves once :meth:`~ActorLog.wait` sees that cut durable in
Postgres. Reads that saw nothing new wait for nothing, or only for writes
already on their way (a read may *see* an unconfirmed write, but nothing
that depends on it leaves before it is durable -- a Durable Object's output
gate).

:class:`GroupCommitAppender` is the host's side: a few sender tasks, each
with its own connection, take the next entry of every actor with something
to ship and append them all in one statement and one commit
(:data:`~storage.cluster.statements.APPEND`): the fence, the lease renewal,
the log row, the alarm index and the catalog row (:mod:`storage.cluster.catalog`)
per actor. Each actor has at most one entry
in flight (the fence demands ``last_seq = seq - 1``); cuts taken meanwhile
are combined into its next entry.

Outcomes of an entry:

* **appended** -- the cut numbers it covers are durable; the lease deadline moves;
* **refused** -- another host took the actor (or its epoch is stale): the
  actor is *poisoned*; its waiting outputs get :class:`~common.errors.OwnershipLostError`;
* **unknown** -- the statement failed or ran out of time. A diagnose query
  (:data:`~storage.cluster.statements.DIAGNOSE`, on a fresh connection)
  decides: logged with our epoch (and the same bytes) is appended; not
  logged and still ours is sent again; anything else, or Postgres still
  unreachable, poisons the actor with :class:`~common.errors.StorageUnavailableError`.

A poisoned actor's capture refuses further commits, and its file is left
*unclean* (its marker is not rewritten), so the next activation rebuilds it
from Postgres: writes that were never durable disappear, as they must.

Snapshots: a cut after a schema change ships the whole file as its entry
(:data:`~storage.cluster.statements.APPEND_SNAPSHOT`); and once the log
after the newest snapshot outgrows ``max(snapshot_min_bytes, last snapshot)``
the actor's durable state is serialized when nothing is pending, compressed on a
thread and stored (:data:`~storage.cluster.statements.STORE_SNAPSHOT`), which
trims the log it covers -- all but the point-in-time window's
(``window_ms``: the base snapshot of the window and everything after it stay).

Nothing here imports trio: waits are anyio, so the runtime drives it under trio.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import anyio
import apsw

from common.errors import (
    DatabaseError,
    HostClosedError,
    OwnershipLostError,
    StorageError,
    StorageUnavailableError,
)
from storage.kv import ActorStorage

from . import statements as sql
from .capture import ChangeCapture
from .catalog import CatalogTracker
from .driver import PgConnection, PgPool
from .ownership import Lease, Ownership
from .restore import combine as _combine
from .restore import compress_image

__all__ = ["ActorLog", "AppendEntry", "GroupCommitAppender", "LogStatistics"]

logger = logging.getLogger(__name__)

#: Alarm operations carried by an entry.
ALARM_KEEP, ALARM_SET, ALARM_DELETE = 0, 1, 2

_HOOK_KEY = "storage.cluster.log"

_NO_SPAN: AbstractContextManager[object] = nullcontext()


def no_append_span(entries: int) -> AbstractContextManager[object]:
    """The append hook while tracing is off: a shared do-nothing context manager."""
    return _NO_SPAN


#: ``(entries) -> context manager`` around one group-commit statement of ``entries`` actors;
#: :func:`runtime.telemetry.configure` sets a span here (Postgres attributes, no statement text).
append_span: Callable[[int], AbstractContextManager[object]] = no_append_span

#: Most actors in one group-commit statement.
MAX_BATCH = 256
#: Times an entry found not written (its outcome was unknown) is sent again.
MAX_RESENDS = 2


@dataclass(eq=False, slots=True)
class AppendEntry:
    """One log entry of one actor on its way to Postgres (internal to the log)."""

    log: ActorLog
    seq: int
    epoch: int
    changeset: bytes
    upto_cut: int
    alarm_op: int
    alarm_ms: int | None
    image: bytes | None = None  # a snapshot entry: the serialized file (compressed before sending)
    schema_version: int = 0
    catalog: str | None = None  # the actor's catalog row as JSON text (None: as it is)
    sent_at: float = 0.0
    resends: int = 0
    md5: str = field(default="", repr=False)


@dataclass(slots=True)
class LogStatistics:
    """Counters of a :class:`GroupCommitAppender` since it started.

    ``statements``: group-commit statements sent; ``entries``: entries appended;
    ``refused``, ``unknown``: entries that poisoned their actor; ``resent``:
    entries sent again after an unknown outcome; ``snapshots``: snapshots stored
    (both kinds); ``snapshot_failures``: periodic snapshots that failed (harmless).
    """

    statements: int = 0
    entries: int = 0
    refused: int = 0
    unknown: int = 0
    resent: int = 0
    snapshots: int = 0
    snapshot_failures: int = 0


class ActorLog:
    """One actor's cuts, entries and durability (see the module docstring).

    Args:
        storage: the actor's open file.
        capture: its :class:`ChangeCapture` (attached before any write).
        lease: this host's lease on the actor (the epoch every entry carries).
        appender: the host's :class:`GroupCommitAppender`.
        on_poison: called once, synchronously, with the error when the log fails.
        alarm_ms: the alarm the cluster index holds for the actor now (``None``: none).
        catalog: the actor's :class:`~storage.cluster.catalog.CatalogTracker` (``None``: the actor
            has no catalog row); each entry carries the row as of its newest cut.

    Attributes:
        durable_seq: the newest entry known durable.
        poisoned: the error that poisoned the log, or ``None``.
    """

    def __init__(
        self,
        storage: ActorStorage,
        capture: ChangeCapture,
        lease: Lease,
        appender: GroupCommitAppender,
        *,
        on_poison: Callable[[BaseException], None],
        alarm_ms: int | None,
        catalog: CatalogTracker | None = None,
    ) -> None:
        self.storage = storage
        self.catalog = catalog
        self.capture = capture
        self.lease = lease
        self.appender = appender
        self.durable_seq = lease.last_seq
        self.tail_bytes = lease.tail_bytes
        self.snapshot_bytes = 0
        self.poisoned: BaseException | None = None
        self._on_poison = on_poison
        self._shipped_alarm = alarm_ms
        self._cut_alarm = alarm_ms  # the alarm as of the newest cut
        self._last_cut = 0
        self._durable_cut = 0
        self._queue: list[tuple[int, bytes, int | None]] = []  # (cut number, changeset, alarm_ms after it)
        self._in_flight: AppendEntry | None = None
        self._resend: AppendEntry | None = None
        self._cut_after_transaction = False
        self._snapshotting = False
        self._changed = anyio.Event()
        self.closed = False
        storage.on_commit(self._transaction_ended, key=_HOOK_KEY)
        storage.on_rollback(self._transaction_ended, key=_HOOK_KEY)

    def _transaction_ended(self) -> None:
        # Runs inside SQLite's hook: only flag the log; the appender cuts once the commit is done.
        if self._cut_after_transaction:
            self.appender.mark_dirty(self)

    # -- the runtime's side

    @property
    def idle(self) -> bool:
        """``True`` when every committed change is durable and nothing is on its way."""
        return (not self.capture.pending and not self._queue and self._in_flight is None
                and not self._cut_after_transaction and not self._catalog_uncut)

    def barrier(self) -> int:
        """Cut what was committed so far; the cut number an output must wait for.

        Inside an open transaction the cut is taken when it ends (its number
        is already reserved).

        Raises:
            the poisoning error, when the log failed (also when this very cut
            failed: :class:`~common.errors.StorageUnavailableError`).
        """
        if self.poisoned is not None:
            raise self.poisoned
        if self.closed:
            raise HostClosedError(f"actor {self.lease.actor} was closed")
        if self.storage.in_transaction:
            self._cut_after_transaction = True
            self.appender.mark_dirty(self)
            return self._last_cut + 1
        if self.capture.pending or self._cut_after_transaction or self._catalog_uncut:
            self._cut(numbered=self._cut_after_transaction or self._catalog_uncut)
            self._cut_after_transaction = False
        return self._last_cut

    @property
    def _catalog_uncut(self) -> bool:
        """The catalog row changed without a change to the file (a transcript published its row)."""
        return self.catalog is not None and self.catalog.uncut

    def is_durable(self, target: int) -> bool:
        """``True`` when cut ``target`` and all before it are durable."""
        return self._durable_cut >= target

    async def wait(self, target: int) -> None:
        """Wait until cut ``target`` is durable.

        Raises:
            the poisoning error, when the log failed first.
        """
        while self._durable_cut < target:
            if self.poisoned is not None:
                raise self.poisoned
            await self._changed.wait()
        if self.poisoned is not None and self._durable_cut < target:
            raise self.poisoned

    def poison(self, error: BaseException) -> None:
        """Fail the log: later commits are refused, waiting outputs raise ``error``."""
        if self.poisoned is not None:
            return
        self.poisoned = error
        self.capture.refuse_writes(error)
        self._queue.clear()
        self._cut_after_transaction = False
        self._notify()
        try:
            self._on_poison(error)
        except Exception:
            logger.exception("on_poison of %s failed", self.lease.actor)

    def ship_snapshot(self) -> None:
        """Make the next entry a whole-file snapshot (the file changed in a way changesets miss,
        e.g. it was migrated when opened). Outside a transaction only."""
        self.capture.schema_changed = True
        self._cut(numbered=True)

    def close(self) -> None:
        """The actor is closing: stop capturing (nothing more is shipped)."""
        self.closed = True
        self.capture.detach()
        if not self.storage.closed:
            self.storage.on_commit(None, key=_HOOK_KEY)
            self.storage.on_rollback(None, key=_HOOK_KEY)
        self._notify()

    # -- cutting (synchronous; never inside a transaction)

    def _cut(self, *, numbered: bool = False) -> None:
        try:
            changeset = self.capture.cut()
        except apsw.Error as exc:  # the recorded changes are lost: the file must be rebuilt from the log
            error = StorageUnavailableError(
                f"the changes of actor {self.lease.actor} could not be captured ({type(exc).__name__}: {exc}); "
                "nothing of them was kept, retry")
            error.__cause__ = exc
            self.poison(error)
            raise error from exc
        if self.catalog is not None:
            self.catalog.cut(changeset)
        if changeset or numbered or self.capture.schema_changed:
            self._last_cut += 1
            if changeset:
                self._cut_alarm = self._alarm_now()
            self._queue.append((self._last_cut, changeset, self._cut_alarm))
            self.appender.mark_dirty(self)

    def _alarm_now(self) -> int | None:
        row = self.storage.read_alarm_row()
        return None if row is None else row.scheduled_ms

    def take_entry(self) -> AppendEntry | None:
        """The next entry to send, or ``None`` (called by the appender, between statements)."""
        if self.poisoned is not None or self.closed:
            return None
        if self._resend is not None:
            entry, self._resend = self._resend, None
            return entry
        if self._in_flight is not None:
            return None
        if not self.storage.in_transaction and (self.capture.pending or self._cut_after_transaction
                                                or self._catalog_uncut):
            self._cut(numbered=self._cut_after_transaction or self._catalog_uncut)
            self._cut_after_transaction = False
        if not self._queue:
            return None
        if self.capture.schema_changed:
            if self.storage.in_transaction:
                return None  # serialize only committed state: try again after the transaction
            return self._snapshot_entry()
        cuts, self._queue = self._queue, []
        changeset = _combine([cs for _no, cs, _alarm in cuts])
        alarm = cuts[-1][2]
        catalog = None if self.catalog is None else self.catalog.take()
        if not changeset and alarm == self._shipped_alarm and catalog is None:
            self._advance(cuts[-1][0])  # nothing to ship: durable once what came before is
            return None
        entry = self._entry(changeset, cuts[-1][0], alarm)
        entry.catalog = catalog
        self._in_flight = entry
        return entry

    def _entry(self, changeset: bytes, upto_cut: int, alarm: int | None) -> AppendEntry:
        if alarm == self._shipped_alarm:
            op, ms = ALARM_KEEP, None
        elif alarm is None:
            op, ms = ALARM_DELETE, None
        else:
            op, ms = ALARM_SET, alarm
        return AppendEntry(self, self.durable_seq + 1, self.lease.epoch, changeset, upto_cut, op, ms)

    def _snapshot_entry(self) -> AppendEntry:
        changeset = self.capture.cut()  # whatever the session holds is in the image
        if self.catalog is not None:
            self.catalog.cut(changeset)
        image = self.capture.serialize()
        upto = self._last_cut
        self._queue.clear()
        self.capture.reset_schema()
        entry = self._entry(b"", upto, self._alarm_now())
        entry.catalog = None if self.catalog is None else self.catalog.take()
        entry.image = image
        entry.schema_version = self.capture.user_version()
        self._in_flight = entry
        return entry

    # -- outcomes (called by the appender)

    def appended(self, entry: AppendEntry) -> None:
        self._in_flight = None
        self.durable_seq = entry.seq
        self.tail_bytes = 0 if entry.image is not None else self.tail_bytes + len(entry.changeset)
        if entry.image is not None:
            self.snapshot_bytes = len(entry.image)
        if entry.alarm_op == ALARM_SET:
            self._shipped_alarm = entry.alarm_ms
        elif entry.alarm_op == ALARM_DELETE:
            self._shipped_alarm = None
        self.lease.extend(entry.sent_at, self.appender.ownership.usable_s)
        self._advance(entry.upto_cut)
        if self._queue or self.capture.pending or self._cut_after_transaction:
            self.appender.mark_dirty(self)
        else:
            self._maybe_snapshot()

    def _advance(self, cut: int) -> None:
        self._durable_cut = max(self._durable_cut, cut)
        self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    def _maybe_snapshot(self) -> None:
        threshold = max(self.appender.snapshot_min_bytes, self.snapshot_bytes)
        if self._snapshotting or self.closed or self.tail_bytes <= threshold:
            return
        if self.storage.in_transaction or self.capture.pending:
            return
        image = self.capture.serialize()  # == the durable state at durable_seq: nothing is pending
        self._snapshotting = True
        self.appender.spawn(self._store_snapshot, image, self.durable_seq, self.capture.user_version(),
                            self.tail_bytes)

    async def _store_snapshot(self, image: bytes, seq: int, schema_version: int, covered: int) -> None:
        try:
            blob = await compress_image(image)
            stored = await self.appender.pool.execute(sql.STORE_SNAPSHOT, {
                "actor": self.lease.actor, "seq": seq, "epoch": self.lease.epoch, "me": self.appender.ownership.host_id,
                "schema_version": schema_version, "image": blob, "window_ms": self.appender.window_ms})
            if stored:
                self.tail_bytes = max(0, self.tail_bytes - covered)
                self.snapshot_bytes = len(blob)
                self.appender.stats.snapshots += 1
        except (StorageError, OSError) as exc:
            self.appender.stats.snapshot_failures += 1
            logger.info("snapshot of %s at seq %d not stored: %s", self.lease.actor, seq, exc)
        finally:
            self._snapshotting = False


class GroupCommitAppender:
    """The host's appender: one statement appends the next entry of many actors.

    Args:
        ownership: the host's :class:`~storage.cluster.ownership.Ownership` (host id, lease length).
        pool: connections for diagnoses and snapshots.
        senders: sender tasks, each with its own connection.
        snapshot_min_bytes: log bytes after the newest snapshot that trigger a new one.
        window_ms: the point-in-time window (milliseconds; 0: none): log entries and snapshots
            younger than it, and the snapshot they start from, are not trimmed.

    Run with ``await task_group.start(appender.run)``; cancel to stop.
    """

    def __init__(self, ownership: Ownership, pool: PgPool, *, senders: int = 1,
                 snapshot_min_bytes: int = 1 << 20, window_ms: int = 0) -> None:
        self.ownership = ownership
        self.window_ms = window_ms
        self.pool = pool
        self.senders = senders
        self.snapshot_min_bytes = snapshot_min_bytes
        self.stats = LogStatistics()
        self._dirty: dict[ActorLog, None] = {}
        self._wakeup = anyio.Event()
        self._group: Any = None

    def mark_dirty(self, log: ActorLog) -> None:
        """``log`` may have an entry to send (synchronous; safe from commit hooks)."""
        self._dirty[log] = None
        self._wakeup.set()

    def spawn(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` in the appender's task group (background work of a log)."""
        if self._group is not None:
            self._group.start_soon(fn, *args)

    async def run(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        """Send entries until cancelled."""
        async with anyio.create_task_group() as group:
            self._group = group
            for _ in range(self.senders):
                group.start_soon(self._sender)
            task_status.started()

    async def _sender(self) -> None:
        conn: PgConnection | None = None
        try:
            while True:
                batch = self._take_batch()
                if not batch:
                    if not self._dirty:
                        if self._wakeup.is_set():  # replaced only once set: no waiter can miss a wakeup
                            self._wakeup = anyio.Event()
                        await self._wakeup.wait()
                    continue
                with append_span(len(batch)):  # a span while tracing is on (runtime.telemetry)
                    conn = await self._send(conn, batch)
        finally:
            if conn is not None:
                conn.close_nowait()

    def _take_batch(self) -> list[AppendEntry]:
        batch: list[AppendEntry] = []
        while self._dirty and len(batch) < MAX_BATCH:
            log = next(iter(self._dirty))
            del self._dirty[log]
            try:
                entry = log.take_entry()
            except Exception as exc:  # a fault of the file: this actor fails, not the host
                logger.exception("cutting the log of %s failed", log.lease.actor)
                log.poison(StorageError(f"the changes of actor {log.lease.actor} could not be cut ({exc})"))
                continue
            if entry is None:
                continue
            if entry.image is not None:
                self.spawn(self._send_snapshot_entry, entry)
            else:
                batch.append(entry)
        return batch

    async def _connection(self, conn: PgConnection | None) -> PgConnection:
        if conn is not None and not conn.broken:
            return conn
        return await PgConnection.connect(
            self.pool.dsn, timeout_s=self.pool.connect_timeout_s, statement_timeout_s=self.pool.statement_timeout_s)

    async def _send(self, conn: PgConnection | None, batch: list[AppendEntry]) -> PgConnection | None:
        own = self.ownership
        sent_at = time.monotonic()
        for entry in batch:
            entry.sent_at = sent_at
        try:
            conn = await self._connection(conn)
            lease_ms = max(1, round(own.lease_s * 1000))
            if len(batch) == 1:
                entry = batch[0]
                statement = sql.APPEND_ONE if entry.alarm_op == ALARM_KEEP else sql.APPEND_ONE_ALARM
                rows = await conn.execute(statement, {
                    "actor": entry.log.lease.actor, "seq": entry.seq, "epoch": entry.epoch,
                    "changeset": entry.changeset, "alarm_op": entry.alarm_op, "alarm_ms": entry.alarm_ms,
                    "catalog": entry.catalog, "me": own.host_id, "lease_ms": lease_ms}, prepare=True)
            else:
                rows = await conn.execute(sql.APPEND, {
                    "actors": [e.log.lease.actor for e in batch], "seqs": [e.seq for e in batch],
                    "epochs": [e.epoch for e in batch], "changesets": [e.changeset for e in batch],
                    "alarm_ops": [e.alarm_op for e in batch], "alarm_ms": [e.alarm_ms for e in batch],
                    "catalogs": [e.catalog for e in batch], "me": own.host_id, "lease_ms": lease_ms}, prepare=True)
        except (StorageUnavailableError, DatabaseError) as exc:
            self.stats.statements += 1
            await self._resolve(batch, exc)
            return conn
        self.stats.statements += 1
        appended = {row[0] for row in rows}
        missing = []
        for entry in batch:
            if entry.log.lease.actor in appended:
                self._appended(entry)
            else:
                missing.append(entry)
        if missing:
            await self._resolve(missing, None)
        return conn

    def _appended(self, entry: AppendEntry) -> None:
        self.stats.entries += 1
        entry.log.appended(entry)

    async def _resolve(self, entries: list[AppendEntry], failure: BaseException | None) -> None:
        """Find out what happened to ``entries`` (refused, or outcome unknown after ``failure``)."""
        try:
            rows = await self.pool.execute(sql.DIAGNOSE, {
                "actors": [e.log.lease.actor for e in entries], "seqs": [e.seq for e in entries]})
        except (StorageUnavailableError, DatabaseError) as exc:
            for entry in entries:
                self._unknown(entry, failure or exc)
            return
        found = {row[0]: row[1:] for row in rows}
        for entry in entries:
            self._decide(entry, found.get(entry.log.lease.actor), failure)

    def _decide(self, entry: AppendEntry, row: tuple[Any, ...] | None, failure: BaseException | None) -> None:
        log = entry.log
        if row is None or row[2] is None:
            self._refused(entry, f"its row is gone from ds_actors{_because(failure)}")
            return
        owner, address, epoch, last_seq, logged_epoch, logged_md5, snapshot_epoch, remaining_ms = row
        if entry.image is not None:
            logged = snapshot_epoch == entry.epoch
        else:
            logged = logged_epoch == entry.epoch and logged_md5 == _md5(entry)
        if logged:
            self._appended(entry)
        elif owner == self.ownership.host_id and epoch == entry.epoch and last_seq == entry.seq - 1:
            if failure is None or entry.resends >= MAX_RESENDS:
                self._unknown(entry, failure or DatabaseError("the fenced append matched nothing"))
                return
            entry.resends += 1
            self.stats.resent += 1
            log._resend = entry  # still in flight: sent again as it is
            self.mark_dirty(log)
        else:
            self._refused(entry, f"host {owner} owns it now at epoch {epoch} (ours: {entry.epoch})"
                          f"{_because(failure)}", address=address, remaining_ms=remaining_ms or 0)

    def _refused(self, entry: AppendEntry, why: str, **_: Any) -> None:
        self.stats.refused += 1
        logger.warning("log entry %d of %s refused: %s", entry.seq, entry.log.lease.actor, why)
        entry.log.lease.lost = True
        entry.log._in_flight = None
        entry.log.poison(OwnershipLostError(
            f"actor {entry.log.lease.actor} moved to another host while this call ran; nothing of it was kept "
            f"({why})"))

    def _unknown(self, entry: AppendEntry, failure: BaseException) -> None:
        self.stats.unknown += 1
        logger.warning("log entry %d of %s: outcome unknown (%s)", entry.seq, entry.log.lease.actor, failure)
        entry.log._in_flight = None
        entry.log.poison(StorageUnavailableError(
            f"the write to actor {entry.log.lease.actor} could not be made durable ({failure}); "
            "retry once Postgres is reachable"))

    async def _send_snapshot_entry(self, entry: AppendEntry) -> None:
        own = self.ownership
        try:
            blob = await compress_image(entry.image or b"")
            entry.sent_at = time.monotonic()
            rows = await self.pool.execute(sql.APPEND_SNAPSHOT, {
                "actor": entry.log.lease.actor, "seq": entry.seq, "epoch": entry.epoch, "me": own.host_id,
                "lease_ms": max(1, round(own.lease_s * 1000)), "schema_version": entry.schema_version,
                "image": blob, "alarm_op": entry.alarm_op, "alarm_ms": entry.alarm_ms, "catalog": entry.catalog,
                "window_ms": self.window_ms})
        except (StorageUnavailableError, DatabaseError) as exc:
            await self._resolve([entry], exc)
            return
        if rows:
            entry.image = blob
            self.stats.snapshots += 1
            self._appended(entry)
        else:
            await self._resolve([entry], None)


def _md5(entry: AppendEntry) -> str:
    if not entry.md5:
        entry.md5 = hashlib.md5(entry.changeset, usedforsecurity=False).hexdigest()
    return entry.md5


def _because(failure: BaseException | None) -> str:
    return "" if failure is None else f"; after: {failure}"


