"""The Durable Object key-value API and alarm row on an actor's SQLite file.

:class:`ActorStorage` is what an actor sees as ``ctx.storage``: a
:class:`~storage.sqlite.SqlStorage` (``sql``, ``exec``, ``transaction``...)
plus the key-value calls of a Durable Object's storage (``get``, ``put``,
``delete``, ``list``) kept in the ``_cf_KV`` table, and its single alarm
(``set_alarm``, ``get_alarm``, ``delete_alarm``) kept in ``_cf_alarm``.

Values are encoded with msgpack: ``None``, ``bool``, ``int`` (64-bit),
``float``, ``str``, ``bytes``, lists and dicts of these. Tuples come back as
lists. A value that could be written but not read back (a dict keyed by a
tuple, nesting deeper than msgpack reads) is refused by :meth:`put`, so one
bad value can never make :meth:`get` or :meth:`list` fail. Keys are ``str`` of
at most :data:`MAX_KEY_BYTES` UTF-8 bytes, ordered by their UTF-8 bytes
(which is code-point order).

Like the rest of ``storage`` this is synchronous and knows nothing of trio:
scheduling an alarm only writes the row and tells an optional
:attr:`ActorStorage.alarm_listener` (the runtime's hook into its alarm index).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import apsw
import msgpack

from .schema import create_on_first_use, table_exists
from .sqlite import SqlStorage

#: Largest key, in UTF-8 bytes (a Durable Object's limit).
MAX_KEY_BYTES = 2048

_MISSING = object()

# Made by their first write (storage.schema.ON_FIRST_USE).
_KV = "_cf_KV"
_ALARM = "_cf_alarm"

# Largest LIMIT SQLite binds (a 64-bit signed integer).
_MAX_SQL_INT = 2**63 - 1


@dataclass(frozen=True, slots=True)
class AlarmRow:
    """The stored alarm: when (epoch milliseconds) and how many failed runs so far."""

    scheduled_ms: int
    retry_count: int


class ActorStorage(SqlStorage):
    """An actor's file: SQL plus the key-value store and the alarm.

    Open with :meth:`SqlStorage.open` on this class (``ActorStorage.open(path)``).

    Attributes:
        alarm_listener: called as ``listener(epoch_ms)`` just *before*
            :meth:`set_alarm` writes its row and ``listener(None)`` after
            :meth:`delete_alarm` removed it; ``None`` by default.
        delivering_alarm: set by the runtime to :attr:`alarm_generation` while
            ``alarm()`` runs, so :meth:`get_alarm` reports no alarm until the
            handler schedules a new one (as in a Durable Object).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.alarm_listener: Callable[[int | None], None] | None = None
        self.delivering_alarm: int | None = None
        self._alarm_generation = 0
        self._autocheckpoint_pages: int | None = None

    def _has(self, table: str) -> bool:
        """Whether ``table`` exists yet (``_cf_KV`` and ``_cf_alarm`` are made by their first write)."""
        return table_exists(self.connection, table)

    def skip_checkpoint_on_close(self) -> None:
        """Leave the WAL in place when this connection closes.

        Closing then costs no disk sync, and the next open carries on
        appending to the same WAL (no header sync either); checkpoints
        still happen every ``wal_autocheckpoint`` pages. Durability is
        unchanged: committed frames are in the WAL either way. The price is
        an extra file per database on disk (``-wal``; with exclusive locking
        there is no ``-shm``).
        """
        self.connection.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)

    @property
    def wal_file_bytes(self) -> int:
        """Size of the ``-wal`` file on disk in bytes (0 when there is none); one ``stat``."""
        try:
            return os.stat(self.path + "-wal").st_size
        except FileNotFoundError:
            return 0

    def on_checkpoint(self, callback: Callable[[], object] | None) -> None:
        """Call ``callback()`` after each automatic checkpoint of this connection's WAL.

        SQLite checkpoints a WAL by itself once it holds ``wal_autocheckpoint``
        pages (1,000 by default), inside the commit that crossed the line.
        With a callback, this storage runs that same passive checkpoint from
        SQLite's WAL hook and then calls ``callback()`` when any page was
        copied into the database file: after it, the commits that follow are
        at first only in a fresh WAL. ``callback`` runs inside the hook, must
        not use this storage, and what it raises is logged by apsw and
        ignored. ``None`` restores SQLite's own automatic checkpoint.
        """
        connection = self.connection
        if self._autocheckpoint_pages is None:  # SQLite's setting, read before our hook replaces its own
            self._autocheckpoint_pages = int(self.scalar("PRAGMA wal_autocheckpoint") or 0)
        pages = self._autocheckpoint_pages
        if callback is None or pages <= 0:
            connection.wal_autocheckpoint(pages)  # SQLite's own hook again (or none: autocheckpoint off)
            return

        def hook(conn: apsw.Connection, database: str, wal_pages: int) -> int:
            if wal_pages >= pages:
                _log_pages, copied = conn.wal_checkpoint(database, apsw.SQLITE_CHECKPOINT_PASSIVE)
                if copied > 0:
                    callback()
            return apsw.SQLITE_OK

        connection.set_wal_hook(hook)

    def checkpoint_wal(self) -> None:
        """Copy every frame of the WAL into the database file and cut the ``-wal`` file to 0 bytes.

        Blocking disk work (at least two syncs: the WAL, then the database):
        call it off the event loop, on a thread nobody else uses this storage
        from meanwhile. Changes no content.

        Raises:
            apsw.FullError: the database file could not grow (full disk); the
                WAL keeps every frame and nothing is lost.
            apsw.Error: any other failure of the checkpoint, the WAL intact.
        """
        self.connection.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_TRUNCATE)

    # -- key-value ---------------------------------------------------------

    def get(self, key: str, default: Any = None) -> Any:
        """The value stored under ``key``, or ``default`` when there is none.

        Raises:
            TypeError: ``key`` is not a ``str``.
            ValueError: ``key`` is longer than :data:`MAX_KEY_BYTES`.
        """
        key = _check_key(key)
        if not self._has(_KV):
            return default
        blob = self.scalar("SELECT value FROM _cf_KV WHERE key = ?", key)
        return default if blob is None else _decode(blob)

    def get_many(self, keys: Iterable[str]) -> dict[str, Any]:
        """``{key: value}`` for those of ``keys`` that are stored, in key order.

        Raises:
            TypeError: ``keys`` is a single ``str`` (pass a list) or holds a non-``str``.
        """
        found = {}
        for key in sorted(set(_check_key(k) for k in _key_list(keys))):
            value = self.get(key, _MISSING)
            if value is not _MISSING:
                found[key] = value
        return found

    def put(self, key: str, value: Any) -> None:
        """Store ``value`` under ``key`` (replacing any previous value).

        Raises:
            TypeError: ``key`` is not a ``str``, or msgpack cannot encode ``value``.
            ValueError: ``key`` is too long, or an ``int`` does not fit 64 bits.
        """
        row = (_check_key(key), _encode(value))
        create_on_first_use(self.connection, _KV)  # the first time: a commit of its own, or the caller's transaction
        self.exec("INSERT OR REPLACE INTO _cf_KV (key, value) VALUES (?, ?)", *row)

    def put_many(self, entries: Mapping[str, Any]) -> None:
        """Store every ``key: value`` of ``entries`` in one transaction (all or none)."""
        rows = [(_check_key(k), _encode(v)) for k, v in entries.items()]
        if not rows:
            return
        with self.transaction():
            create_on_first_use(self.connection, _KV)
            for row in rows:
                self.exec("INSERT OR REPLACE INTO _cf_KV (key, value) VALUES (?, ?)", *row)

    def delete(self, key: str) -> bool:
        """Remove ``key``; ``True`` when it existed."""
        key = _check_key(key)
        if not self._has(_KV):
            return False
        self.exec("DELETE FROM _cf_KV WHERE key = ?", key)
        return self.connection.changes() > 0

    def delete_many(self, keys: Iterable[str]) -> int:
        """Remove each of ``keys`` in one transaction; the number that existed.

        Raises:
            TypeError: ``keys`` is a single ``str`` (pass a list) or holds a non-``str``.
        """
        checked = [_check_key(k) for k in _key_list(keys)]
        with self.transaction():
            return sum(self.delete(k) for k in set(checked))

    # -- alarm -------------------------------------------------------------

    @property
    def alarm_generation(self) -> int:
        """Counts :meth:`set_alarm` / :meth:`delete_alarm` calls on this connection."""
        return self._alarm_generation

    def get_alarm(self) -> int | None:
        """The scheduled alarm time in epoch milliseconds, or ``None``."""
        if self.delivering_alarm is not None and self.delivering_alarm == self._alarm_generation:
            return None
        row = self.read_alarm_row()
        return None if row is None else row.scheduled_ms

    def set_alarm(self, epoch_ms: float) -> None:
        """Schedule the actor's one alarm at ``epoch_ms`` (replacing any other).

        A time in the past fires as soon as possible. Fractions of a
        millisecond are dropped.

        Raises:
            TypeError: ``epoch_ms`` is not an ``int`` or ``float``.
            ValueError: ``epoch_ms`` is negative, NaN or infinite.
        """
        if isinstance(epoch_ms, bool) or not isinstance(epoch_ms, int | float):
            raise TypeError(f"alarm time must be epoch milliseconds (int or float), not {type(epoch_ms).__name__}")
        if not math.isfinite(epoch_ms) or epoch_ms < 0:
            raise ValueError(
                f"alarm time must be a finite, non-negative number of epoch milliseconds, not {epoch_ms!r}"
            )
        scheduled = int(epoch_ms)
        if self.alarm_listener is not None:
            self.alarm_listener(scheduled)
        self.write_alarm_row(scheduled, 0)
        self._alarm_generation += 1

    def delete_alarm(self) -> None:
        """Cancel the scheduled alarm, if any."""
        self.clear_alarm_row()
        self._alarm_generation += 1
        if self.alarm_listener is not None:
            self.alarm_listener(None)

    def read_alarm_row(self) -> AlarmRow | None:
        """The stored alarm row, including a pending retry (runtime use)."""
        if not self._has(_ALARM):
            return None
        for scheduled_ms, retry_count in self.exec("SELECT scheduled_ms, retry_count FROM _cf_alarm WHERE id = 1"):
            return AlarmRow(scheduled_ms, retry_count)
        return None

    def write_alarm_row(self, scheduled_ms: int, retry_count: int) -> None:
        """Store the alarm row as is, telling no listener (runtime use)."""
        create_on_first_use(self.connection, _ALARM)  # the first time: a commit of its own, or the caller's transaction
        self.exec(
            "INSERT OR REPLACE INTO _cf_alarm (id, scheduled_ms, retry_count) VALUES (1, ?, ?)",
            scheduled_ms,
            retry_count,
        )

    def clear_alarm_row(self) -> None:
        """Remove the alarm row, telling no listener (runtime use)."""
        if self._has(_ALARM):
            self.exec("DELETE FROM _cf_alarm WHERE id = 1")

    # Defined last: the name shadows the builtin inside the class body.
    def list(
        self,
        *,
        prefix: str | None = None,
        start: str | None = None,
        end: str | None = None,
        limit: int | None = None,
        reverse: bool = False,
    ) -> dict[str, Any]:
        """Stored entries as an ordered ``{key: value}``, ascending by key.

        Args:
            prefix: only keys starting with it.
            start: only keys ``>= start``; end: only keys ``< end``.
            limit: at most this many entries (``None``: all; any larger
                ``int`` is fine).
            reverse: descending order (``limit`` then keeps the last keys).

        Raises:
            TypeError: a bound is not a ``str`` / ``limit`` not an ``int``.
            ValueError: ``limit`` is below 1.
        """
        where, params = _range_clause(prefix, start, end)
        query = f"SELECT key, value FROM _cf_KV{where} ORDER BY key {'DESC' if reverse else 'ASC'}"
        exists = self._has(_KV)
        if limit is not None:
            if isinstance(limit, bool) or not isinstance(limit, int):
                raise TypeError(f"limit must be an int, not {type(limit).__name__}")
            if limit < 1:
                raise ValueError(f"limit must be at least 1, not {limit}")
            query += " LIMIT ?"
            params.append(min(limit, _MAX_SQL_INT))
        if not exists:
            return {}
        return {key: _decode(blob) for key, blob in self.exec(query, *params)}


def _check_key(key: Any) -> str:
    if not isinstance(key, str):
        raise TypeError(f"storage keys are str, not {type(key).__name__}")
    if len(key) * 4 > MAX_KEY_BYTES and len(key.encode("utf-8")) > MAX_KEY_BYTES:
        raise ValueError(f"storage key is longer than {MAX_KEY_BYTES} UTF-8 bytes")
    return key


def _key_list(keys: Any) -> Any:
    if isinstance(keys, (str, bytes)):
        raise TypeError(f"keys must be a list of str, not a single {type(keys).__name__}")
    return keys


def _encode(value: Any) -> bytes:
    try:
        blob = msgpack.packb(value, use_bin_type=True)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"value cannot be stored: {exc}") from exc
    except OverflowError as exc:
        raise ValueError(f"value cannot be stored: {exc}") from exc
    if isinstance(value, (list, tuple, dict)):
        _check_readable(blob)
    return blob


def _check_readable(blob: bytes) -> None:
    """Refuse a container msgpack wrote but cannot read back (unhashable map keys, deep nesting)."""
    try:
        _decode(blob)
    except TypeError as exc:  # e.g. a tuple key comes back as an unhashable list
        raise TypeError(f"value cannot be stored: it would not read back ({exc})") from None
    except ValueError as exc:  # msgpack.StackError: nested deeper than it reads
        problem = str(exc) or "nested too deeply"
        raise ValueError(f"value cannot be stored: it would not read back ({problem})") from None


def _decode(blob: bytes) -> Any:
    return msgpack.unpackb(blob, raw=False, strict_map_key=False)


def _range_clause(prefix: str | None, start: str | None, end: str | None) -> tuple[str, list[Any]]:
    """``WHERE`` text and parameters for key bounds (all index range scans)."""
    conditions, params = [], []
    if prefix is not None:
        conditions.append("key >= ?")
        params.append(_check_key(prefix))
        upper = _prefix_upper_bound(prefix)
        if upper is not None:
            conditions.append("key < ?")
            params.append(upper)
    if start is not None:
        conditions.append("key >= ?")
        params.append(_check_key(start))
    if end is not None:
        conditions.append("key < ?")
        params.append(_check_key(end))
    return (" WHERE " + " AND ".join(conditions) if conditions else ""), params


def _prefix_upper_bound(prefix: str) -> str | None:
    """The least string above every string starting with ``prefix`` (``None``: no bound).

    Keys compare by UTF-8 bytes, which is code-point order, so bumping the
    last code point that can grow gives the exclusive upper bound.
    """
    chars = list(prefix)
    while chars:
        code = ord(chars.pop()) + 1
        if code == 0xD800:
            code = 0xE000  # surrogates never occur in stored UTF-8
        if code <= 0x10FFFF:
            return "".join(chars) + chr(code)
    return None
