"""Running the providers' statements on a Postgres connection, under trio.

The providers never touch a socket. Each call is written as a generator
(an :data:`Operation`) that yields :class:`Query` / :class:`Many` /
:class:`Copy` steps and receives each step's rows as a list of dicts; a
:class:`Runner` drives it on one connection, inside one transaction for writes, and returns its
result. The same operation thus runs on any of the accepted connections:

* a ``psycopg.Connection`` (psycopg 3, sync API) -- the recommended one;
* a ``psycopg_pool.ConnectionPool`` -- one pooled connection per call; a
  connection broken by a server restart is replaced by the pool, so the
  next call works again;
* any object with the spec's ``PostgresConnection`` shape:
  ``execute(query, args)`` (plain or ``async``) returning the rows as a
  list of dicts, or an object / dict holding them under ``rows``.
  Statements use ``?`` placeholders; a write is wrapped in
  ``BEGIN`` / ``COMMIT`` (``ROLLBACK`` on failure) sent through the same
  ``execute``, so the object must keep one database session.

**How psycopg runs under trio.** psycopg's ``AsyncConnection`` is built on
asyncio (its waits, locks and cancellation), and its maintainers declined
trio/anyio support (psycopg issue #29; the anyio pull request #146 was
closed unmerged). The two ways left were measured on a local server
(``benchmarks/bench_postgres.py`` has the full comparison):

* the sync API on a worker thread (``anyio.to_thread.run_sync``, which is
  trio's thread pool under trio) -- chosen. One thread hop per provider
  call, not per statement: the whole transaction runs in the worker, so a
  write is never interleaved with another task's statements and no
  ``await`` sits inside it. A hop costs ~50-100 us on this machine
  (``SELECT 1``: 62 us blocking vs 112 us hopping); 20 trio tasks each
  waiting 1 ms on the server finish 2,000 queries in 0.56 s (>= 2 s
  serially), so a slow or distant database never stalls the event loop;
* psycopg's generator layer driven by ``trio.lowlevel.wait_readable``
  (overriding ``AsyncConnection.wait``): ~44 us per ``SELECT 1``, but it
  depends on psycopg internals (asyncio locks, ``wait_conn_async``,
  cancellation) that may change in any release. Rejected.

``anyio`` (not ``trio``) is imported here because ``storage`` must not
import trio (docs/architecture.md); under trio anyio dispatches to trio's threads.

Cancellation: a call whose task is cancelled still runs to its end in the
worker (``abandon_on_cancel=False``) and returns its result, so its
transaction commits or rolls back as a whole; the cancellation takes
effect at the task's next checkpoint. A runner with a deadline
(``runner_for(conn, deadline_s=...)``, what a host uses) instead stops
waiting at the deadline or on cancellation; the abandoned worker still
ends its transaction as a whole when Postgres answers.

Several tasks sharing one connection are serialised per connection (a
``threading.Lock`` held for the whole call), since one connection carries
one transaction at a time. A pool needs no such lock.

Errors: psycopg's connection and availability failures (``OperationalError``,
``InterfaceError``, serialization failures and deadlocks) become
:class:`~common.errors.StorageUnavailableError`, a value over a
Postgres limit :class:`~common.errors.InvalidInputError`, any other
psycopg error :class:`~common.errors.DatabaseError`. Exceptions of
a custom ``execute`` object pass through unchanged.
"""

from __future__ import annotations

import inspect
import re
import threading
import weakref
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import anyio

from common.errors import DatabaseError, DurableSessionsError, InvalidInputError, StorageUnavailableError
from storage.tree.steps import Many as TreeMany
from storage.tree.steps import Operation as TreeOperation

T = TypeVar("T")
Rows = list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Query:
    """One statement: ``sql`` with ``%(name)s`` placeholders (``%%`` for a literal ``%``),
    ``params`` by name. Without ``params`` the text is sent as it is (no placeholder
    processing; several statements may then be sent at once)."""

    sql: str
    params: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Many:
    """One statement run once per parameter mapping (``executemany``); its rows are ``[]``."""

    sql: str
    params: Sequence[Mapping[str, Any]]


@dataclass(frozen=True, slots=True)
class Copy:
    """Rows written into ``table``'s ``columns`` in one statement; its rows are ``[]``.

    On psycopg one ``COPY ... FROM STDIN`` (the rows streamed, no statement
    per row; statement-level triggers fire once); on an ``execute(query, args)``
    object one ``INSERT`` per row. Each row holds one value per column, in
    their order, as psycopg adapts it (``None`` for ``NULL``). ``rows`` may
    be made lazily (a generator): they are then made while the statement
    runs (on psycopg: on the runner's worker thread), and anything raised
    while making them ends the statement and the transaction, nothing
    written."""

    table: str
    columns: tuple[str, ...]
    rows: Iterable[Sequence[Any]]

    @property
    def sql(self) -> str:
        """The ``COPY`` statement psycopg runs."""
        return f"COPY {self.table} ({', '.join(self.columns)}) FROM STDIN"

    @property
    def insert(self) -> str:
        """The ``INSERT`` of one row (``%(c<i>)s`` placeholders) an ``execute`` object runs instead."""
        values = ", ".join(f"%(c{i})s" for i in range(len(self.columns)))
        return f"INSERT INTO {self.table} ({', '.join(self.columns)}) VALUES ({values})"


#: A provider call: yields steps, receives each step's rows, returns the call's result.
Operation = Generator["Query | Many | Copy", Rows, T]


def on_postgres(op: TreeOperation[T]) -> Operation[T]:
    """The tree operation ``op`` as steps of :mod:`storage.postgres.connection` (named
    parameters, rows as dicts), its rows handed back as tuples in column order."""
    try:
        step = next(op)
        while True:
            if isinstance(step, TreeMany):
                names = step.statement.names
                yield Many(step.statement.sql, [dict(zip(names, args)) for args in step.args])
                step = op.send([])
            else:
                statement, args = step
                rows = yield Query(statement.sql, dict(zip(statement.names, args)) if statement.names else None)
                step = op.send([tuple(row.values()) for row in rows])
    except StopIteration as done:
        result: T = done.value
        return result


class Runner(Protocol):
    """Runs an :data:`Operation` on a connection; ``write=True`` -> one transaction."""

    async def run(self, op: Operation[T], *, write: bool) -> T: ...


def runner_for(conn: Any, *, deadline_s: float | None = None) -> Runner:
    """The :class:`Runner` for ``conn`` (see the module docstring for what is accepted).

    ``conn`` may also be a runner made here, or an object holding one as
    ``runner`` (a :class:`~storage.postgres.PostgresStorage`): providers
    made from it share its connection and its call deadline.

    ``deadline_s`` (a psycopg connection or pool only): the longest a
    caller waits for one call, in seconds, thread and connection included;
    past it the caller gets :class:`~common.errors.StorageUnavailableError`
    and the worker is abandoned (its transaction still commits or rolls
    back as a whole when Postgres answers: the outcome of such a write is
    unknown to the caller). ``None``: wait as long as the call takes.

    Raises:
        TypeError: ``conn`` is a psycopg async connection or pool (asyncio
            only), or has no ``execute`` method.
    """
    import psycopg
    import psycopg_pool

    if isinstance(conn, (_PsycopgRunner, _PoolRunner, _ExecuteRunner)):
        return conn
    held = getattr(conn, "runner", None)
    if isinstance(held, (_PsycopgRunner, _PoolRunner, _ExecuteRunner)):
        return held
    if isinstance(conn, (psycopg.AsyncConnection, psycopg_pool.AsyncConnectionPool)):
        raise TypeError(
            f"{type(conn).__name__} needs asyncio; pass a psycopg.Connection or "
            "psycopg_pool.ConnectionPool (they run on worker threads under trio)"
        )
    if isinstance(conn, psycopg_pool.ConnectionPool):
        return _PoolRunner(conn, deadline_s)
    if isinstance(conn, psycopg.Connection):
        return _PsycopgRunner(conn, deadline_s)
    if callable(getattr(conn, "execute", None)):
        return _ExecuteRunner(conn)
    raise TypeError(
        f"cannot run statements on {type(conn).__name__}: need a psycopg.Connection, "
        "a psycopg_pool.ConnectionPool, or an object with execute(query, args)"
    )


# -- psycopg ------------------------------------------------------------------------


def _drive_psycopg(conn: Any, op: Operation[T]) -> T:
    """Run every step of ``op`` on ``conn`` (sync psycopg) and return its result."""
    from psycopg.rows import dict_row

    with conn.cursor(row_factory=dict_row) as cur:
        try:
            step = next(op)
            while True:
                if isinstance(step, Many):
                    cur.executemany(step.sql, step.params)
                    rows: Rows = []
                elif isinstance(step, Copy):
                    with cur.copy(step.sql) as copy:
                        for row in step.rows:
                            copy.write_row(row)
                    rows = []
                else:
                    cur.execute(step.sql, step.params)
                    rows = cur.fetchall() if cur.description is not None else []
                step = op.send(rows)
        except StopIteration as done:
            return done.value


def _translate(exc: Exception) -> DurableSessionsError:
    """A psycopg error as one of ours (see the module docstring)."""
    import psycopg
    from psycopg import errors as pg

    message = f"{type(exc).__name__}: {exc}".strip()
    if isinstance(exc, pg.ProgramLimitExceeded):
        return InvalidInputError(f"a value exceeds a Postgres limit ({message})")
    if isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError, pg.TransactionRollback)):
        return StorageUnavailableError(f"Postgres unavailable ({message})")
    return DatabaseError(f"Postgres failed ({message})")


def _in_transaction(conn: Any, op: Operation[T], write: bool) -> T:
    if write or not conn.autocommit:
        with conn.transaction():
            return _drive_psycopg(conn, op)
    return _drive_psycopg(conn, op)


class _ThreadRunner:
    """Runs a blocking function on a worker thread, translating psycopg errors.

    ``deadline_s``: see :func:`runner_for`.
    """

    def __init__(self, deadline_s: float | None = None) -> None:
        self.deadline_s = deadline_s

    async def _on_thread(self, fn: Callable[[], T]) -> T:
        import psycopg

        def call() -> T:
            try:
                return fn()
            except psycopg.Error as exc:
                raise _translate(exc) from exc

        if self.deadline_s is None:
            return await anyio.to_thread.run_sync(call)
        with anyio.move_on_after(self.deadline_s):
            return await anyio.to_thread.run_sync(call, abandon_on_cancel=True)
        raise StorageUnavailableError(
            f"Postgres did not answer within {self.deadline_s:g} s (the outcome of a write is unknown)"
        )


# One lock per psycopg connection, whoever holds it (providers are cheap and many).
_LOCKS: weakref.WeakKeyDictionary[Any, threading.Lock] = weakref.WeakKeyDictionary()
_LOCKS_GUARD = threading.Lock()


def _lock_for(conn: Any) -> threading.Lock:
    with _LOCKS_GUARD:
        lock = _LOCKS.get(conn)
        if lock is None:
            lock = _LOCKS[conn] = threading.Lock()
        return lock


class _PsycopgRunner(_ThreadRunner):
    def __init__(self, conn: Any, deadline_s: float | None = None) -> None:
        super().__init__(deadline_s)
        self._conn = conn
        self._lock = _lock_for(conn)

    async def run(self, op: Operation[T], *, write: bool) -> T:
        def call() -> T:
            with self._lock:
                return _in_transaction(self._conn, op, write)

        return await self._on_thread(call)


class _PoolRunner(_ThreadRunner):
    def __init__(self, pool: Any, deadline_s: float | None = None) -> None:
        super().__init__(deadline_s)
        self._pool = pool

    async def run(self, op: Operation[T], *, write: bool) -> T:
        def call() -> T:
            with self._pool.connection() as conn:
                return _in_transaction(conn, op, write)

        return await self._on_thread(call)


# -- the spec's PostgresConnection ----------------------------------------------------

_NAMED = re.compile(r"%\((\w+)\)s|%%")


def to_qmark(sql: str, params: Mapping[str, Any] | None) -> tuple[str, list[Any]]:
    """``%(name)s`` placeholders -> ``?`` and the values in order; ``%%`` -> ``%``.

    ``params=None``: the text is returned as it is, with no values.
    """
    args: list[Any] = []
    if params is None:
        return sql, args

    def sub(m: re.Match[str]) -> str:
        if m.group(1) is None:
            return "%"
        args.append(params[m.group(1)])
        return "?"

    return _NAMED.sub(sub, sql), args


def _rows_of(result: Any) -> Rows:
    if isinstance(result, Mapping) and "rows" in result:
        result = result["rows"]
    elif hasattr(result, "rows") and not isinstance(result, list):
        result = result.rows
    return [dict(row) for row in result or ()]


class _ExecuteRunner:
    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self._lock = anyio.Lock()

    async def _execute(self, sql: str, params: Mapping[str, Any] | None = None) -> Rows:
        text, args = to_qmark(sql, params)
        result = self._conn.execute(text, args)
        if inspect.isawaitable(result):
            result = await result
        return _rows_of(result)

    async def run(self, op: Operation[T], *, write: bool) -> T:
        async with self._lock:
            if write:
                await self._execute("BEGIN")
            try:
                result = await self._drive(op)
            except BaseException:
                if write:
                    with anyio.CancelScope(shield=True):
                        await self._execute("ROLLBACK")
                raise
            if write:
                await self._execute("COMMIT")
            return result

    async def _drive(self, op: Operation[T]) -> T:
        try:
            step = next(op)
            while True:
                if isinstance(step, Many):
                    for params in step.params:
                        await self._execute(step.sql, params)
                    rows: Rows = []
                elif isinstance(step, Copy):
                    for row in step.rows:
                        await self._execute(step.insert, {f"c{i}": value for i, value in enumerate(row)})
                    rows = []
                else:
                    rows = await self._execute(step.sql, step.params)
                step = op.send(rows)
        except StopIteration as done:
            return done.value
