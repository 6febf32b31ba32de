"""Postgres connections for the cluster, driven by anyio (so they run under trio).

psycopg 3's ``AsyncConnection`` waits through asyncio (``loop.add_reader``)
and connects through ``waiting.wait_conn_async``, so it cannot run under
``trio.run`` as it is. :class:`PgConnection` keeps psycopg's protocol code
(its generators, adaptation, prepared statements) and replaces only the
waiting: :meth:`_AnyioConnection.wait` drives psycopg's generators with
:func:`anyio.wait_readable` / :func:`anyio.wait_writable`, and
:meth:`PgConnection.connect` drives the private ``_connect_gen`` the same way.
Measured (docs/cluster.md "Measured in the prototype", Q4): 2-3x less client
CPU per statement than the sync API on worker threads.

Two private hooks of psycopg are used: ``AsyncConnection.wait`` (overridden)
and ``AsyncConnection._connect_gen``. Both exist with these shapes in the
3.3 series, which ``pyproject.toml`` pins (``psycopg>=3.3,<3.4``);
``tests/storage/test_cluster_driver.py`` connects, runs, cancels and times
out through them, so an upgrade that breaks them fails loudly there. One
more assumption: psycopg's per-connection ``asyncio.Lock`` is never
contended (an uncontended ``asyncio.Lock`` never touches the event loop);
:class:`PgConnection` guarantees it by letting one task at a time use a
connection.

**Deadlines and cancellation.** Every call takes ``timeout_s``. A call that
is cancelled or runs out of time while a statement is on the wire closes the
connection (it may be mid-statement; psycopg's own cancel path only runs for
``asyncio.CancelledError``) and raises :class:`~common.errors.StorageUnavailableError`;
whether a write in flight committed is then *unknown* (the caller resolves
that with a query on a fresh connection). The server side is bounded too:
connections set ``statement_timeout`` and ``lock_timeout`` to the same limit.

**Errors.** A server that answers a new connection with a refusal no
retry can change -- a wrong password or role, a database that does not
exist, no ``pg_hba.conf`` entry -- raises :class:`PostgresRefusedError`
(a :class:`~common.errors.StorageUnavailableError`, so a running host
treats it like an outage, but a start can tell it apart and stop at once,
naming the cause). Lost connections, a server that is down, restarting or too slow
(``OperationalError``, ``InterfaceError``, a timeout) and serialization
failures become :class:`~common.errors.StorageUnavailableError` (503,
retryable); any other psycopg error :class:`~common.errors.DatabaseError`.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import psycopg
from psycopg import errors as pg_errors
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.waiting import Ready, Wait

from common.errors import DatabaseError, StorageUnavailableError

__all__ = ["PgConnection", "PgPool", "PostgresRefusedError", "describe_dsn", "translate_error"]

Params = dict[str, Any] | Sequence[Any] | None

#: psycopg's ``prepare_threshold``: statements are prepared when asked (``prepare=True``), never by count.
_NEVER_BY_COUNT = 2**62


class _AnyioConnection(psycopg.AsyncConnection):
    """psycopg's ``AsyncConnection`` whose waits go through anyio (internal)."""

    async def wait(self, gen: Any, interval: float = 0.0, timeout: float | None = None) -> Any:
        fileno = self.pgconn.socket
        try:
            try:
                state = next(gen)
            except StopIteration as done:
                return done.value
            while True:
                state = gen.send(await _wait_fd(fileno, state))
        except StopIteration as done:
            return done.value
        except BaseException:
            # A wait cancelled mid-exchange leaves the protocol in an unknown state:
            # the connection cannot be used again (and a write's outcome is unknown).
            if self.pgconn.transaction_status == pq.TransactionStatus.ACTIVE:
                self.pgconn.finish()
            raise


async def _wait_fd(fileno: int, state: int) -> Ready:
    """Wait until the socket is ready as psycopg asks (``Wait.R``, ``W`` or ``RW``)."""
    if state == Wait.R:
        await anyio.wait_readable(fileno)
        return Ready.R
    if state == Wait.W:
        await anyio.wait_writable(fileno)
        return Ready.W
    ready = Ready.NONE
    async with anyio.create_task_group() as group:

        async def wait(waiter: Any, value: Ready) -> None:
            nonlocal ready
            await waiter(fileno)
            ready = value
            group.cancel_scope.cancel()

        group.start_soon(wait, anyio.wait_readable, Ready.R)
        group.start_soon(wait, anyio.wait_writable, Ready.W)
    return ready


class PostgresRefusedError(StorageUnavailableError):
    """The server answered a new connection with a refusal that retrying cannot change.

    A wrong password or role, a database that does not exist, no ``pg_hba.conf``
    entry, a role without ``LOGIN`` or ``CONNECT``. ``reason`` is the server's
    own words (one line, e.g. ``password authentication failed for user "x"``).
    """

    def __init__(self, reason: str) -> None:
        super().__init__(f"Postgres refused the connection: {reason}")
        self.reason = reason


#: Words of libpq/server refusals that no retry changes (the server's messages are English in the
#: default ``lc_messages``; a localized server's refusal is retried until the deadline, as before).
_REFUSALS = (
    "password authentication failed", "authentication failed for user", "no password supplied",
    "does not exist", "no pg_hba.conf entry", "permission denied for database", "is not permitted to log in",
    "password is required",
)


def _refusal(exc: BaseException) -> str | None:
    """The server's reason when ``exc`` is a connection refusal no retry changes, else ``None``."""
    if not isinstance(exc, psycopg.OperationalError):
        return None
    text = str(exc)
    if not any(words in text for words in _REFUSALS):
        return None
    reason = text.rsplit("FATAL:", 1)[-1] if "FATAL:" in text else text.rsplit("failed:", 1)[-1]
    return " ".join(reason.split())


def describe_dsn(dsn: str) -> str:
    """``host:port/dbname`` of a connection string or URL, without user or password.

    Raises:
        psycopg.ProgrammingError: the string does not parse.
    """
    params = conninfo_to_dict(dsn)
    host = params.get("host") or params.get("hostaddr") or "localhost"
    return f"{host}:{params.get('port') or 5432}/{params.get('dbname') or params.get('user') or ''}"


def translate_error(exc: BaseException, what: str) -> Exception:
    """``exc`` (psycopg, a timeout, an OS error) as one of the project's errors about ``what``."""
    if isinstance(exc, (StorageUnavailableError, DatabaseError)):
        return exc
    if isinstance(exc, TimeoutError):
        return StorageUnavailableError(f"Postgres did not answer in time ({what})")
    message = f"{type(exc).__name__}: {exc}".strip().rstrip(":")
    if isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError, pg_errors.TransactionRollback, OSError)):
        return StorageUnavailableError(f"Postgres unavailable ({what}: {message})")
    return DatabaseError(f"Postgres failed ({what}: {message})")


class PgConnection:
    """One autocommit Postgres connection used by one task at a time.

    Made by :meth:`connect`. Each :meth:`execute` is one statement (or, with
    ``params=None``, one text of several statements) with its own deadline.

    Attributes:
        broken: ``True`` once the connection failed or was closed; make a new one.
    """

    def __init__(self, conn: _AnyioConnection, statement_timeout_s: float) -> None:
        self._conn = conn
        self._lock = anyio.Lock(fast_acquire=True)  # uncontended by design: no extra scheduling point
        self.statement_timeout_s = statement_timeout_s
        self.used = False  # a statement ran on it (it may have sat idle since)
        self._cursor: psycopg.AsyncCursor[Any] | None = None  # reused: one statement at a time

    @classmethod
    async def connect(cls, dsn: str, *, timeout_s: float, statement_timeout_s: float) -> PgConnection:
        """Open a connection to ``dsn`` within ``timeout_s`` seconds.

        The server is told to end any statement (and any lock wait) after
        ``statement_timeout_s`` seconds, so a statement abandoned by a
        client-side deadline does not run on.

        Raises:
            PostgresRefusedError: the server refused the connection for good
                (password, role, database missing: see the class).
            StorageUnavailableError: the server cannot be reached in time.
        """
        limit_ms = max(1, math.ceil(statement_timeout_s * 1000))
        params = conninfo_to_dict(dsn)
        options = params.get("options", "")
        params["options"] = f"{options} -c statement_timeout={limit_ms} -c lock_timeout={limit_ms}".strip()
        params.setdefault("connect_timeout", str(max(1, math.ceil(timeout_s))))
        params.setdefault("application_name", "durable-sessions-cluster")
        conninfo = make_conninfo("", **params)
        try:
            with anyio.fail_after(timeout_s):
                conn = await _connect(conninfo)
        except BaseException as exc:
            if isinstance(exc, Exception):
                reason = _refusal(exc)
                if reason is not None:
                    raise PostgresRefusedError(reason) from exc
                raise translate_error(exc, "connecting") from exc
            raise
        return cls(conn, statement_timeout_s)

    @property
    def broken(self) -> bool:
        return self._conn.closed or self._conn.pgconn.status == pq.ConnStatus.BAD

    async def execute(
        self, sql: str, params: Params = None, *, timeout_s: float | None = None, prepare: bool | None = None
    ) -> list[tuple[Any, ...]]:
        """Run one statement; its rows as tuples (``[]`` when it returns none).

        Args:
            sql: ``%(name)s`` / ``%s`` placeholders bound from ``params``.
            timeout_s: deadline in seconds (default: ``statement_timeout_s``).
            prepare: ``True`` to prepare it server-side at once (hot statements).

        Raises:
            StorageUnavailableError: connection lost, server down, deadline
                passed or cancelled mid-statement (the connection is then closed).
            DatabaseError: the server refused the statement.
        """
        async with self._lock:
            self.used = True
            try:
                with anyio.fail_after(self.statement_timeout_s if timeout_s is None else timeout_s):
                    cursor = self._cursor
                    if cursor is None or cursor.closed:
                        cursor = self._cursor = self._conn.cursor()
                    await cursor.execute(sql, params, prepare=prepare)
                    return await cursor.fetchall() if cursor.description is not None else []
            except Exception as exc:
                raise translate_error(exc, _first_words(sql)) from exc

    @asynccontextmanager
    async def transaction(self, begin: str = "BEGIN") -> AsyncIterator[PgConnection]:
        """``async with conn.transaction():`` -- the statements inside commit together.

        ``begin`` may name an isolation level (``"BEGIN ISOLATION LEVEL
        REPEATABLE READ READ ONLY"``). Any exception (or cancellation) inside
        closes the connection, which rolls the transaction back on the server
        without another round trip that could hang; the exception propagates.
        """
        await self.execute(begin)
        try:
            yield self
            await self.execute("COMMIT")
        except BaseException:
            self.close_nowait()
            raise

    async def close(self) -> None:
        """Close the connection (idempotent; never raises)."""
        with contextlib.suppress(Exception):  # closing a broken connection cannot fail usefully
            await self._conn.close()

    def close_nowait(self) -> None:
        """Close the socket at once (for synchronous cleanup)."""
        if not self._conn.closed:
            self._conn.pgconn.finish()


async def _connect(conninfo: str) -> _AnyioConnection:
    gen = _AnyioConnection._connect_gen(conninfo)  # private psycopg hook (see the module docstring)
    try:
        fileno, state = next(gen)
        while True:
            ready = await _wait_fd(fileno, state)
            fileno, state = gen.send(ready)
    except StopIteration as done:
        conn: _AnyioConnection = done.value  # the connection the generator returns
    except BaseException:
        gen.close()
        raise
    conn._autocommit = True  # a fresh connection is idle: set it without a round trip (as connect() does)
    # Prepare only what asks for it (prepare=True): no count of runs reaches this threshold. (None would
    # turn preparing off altogether, prepare=True included.)
    conn.prepare_threshold = _NEVER_BY_COUNT
    return conn


def _first_words(sql: str) -> str:
    words = sql.split()
    return " ".join(words[:3]) if words else "statement"


class PgPool:
    """A few :class:`PgConnection` objects shared by tasks, (re)connected on demand.

    Args:
        dsn: libpq connection string.
        size: most connections open at once.
        connect_timeout_s, statement_timeout_s: deadlines (seconds).

    A connection that broke is dropped when it comes back; the next user
    connects afresh, so the pool heals by itself once the server returns.
    """

    def __init__(self, dsn: str, *, size: int, connect_timeout_s: float, statement_timeout_s: float) -> None:
        self.dsn = dsn
        self.size = size
        self.connect_timeout_s = connect_timeout_s
        self.statement_timeout_s = statement_timeout_s
        self._idle: list[PgConnection] = []
        self._slots = anyio.Semaphore(size)
        self._closed = False

    @asynccontextmanager
    async def connection(self, *, wait_s: float | None = None) -> AsyncIterator[PgConnection]:
        """``async with pool.connection() as conn:`` -- one connection for one task.

        Raises:
            StorageUnavailableError: no connection within ``wait_s`` (default:
                ``statement_timeout_s``), or the server cannot be reached.
        """
        if self._closed:
            raise StorageUnavailableError("the Postgres pool is closed")
        limit = self.statement_timeout_s if wait_s is None else wait_s
        started = time.monotonic()
        try:
            with anyio.fail_after(limit):
                await self._slots.acquire()
        except TimeoutError:
            raise StorageUnavailableError(f"no Postgres connection free within {limit:g} s") from None
        conn = None
        try:
            conn = self._idle.pop() if self._idle else None
            if conn is None:
                remaining = max(0.05, self.connect_timeout_s - (time.monotonic() - started))
                conn = await PgConnection.connect(
                    self.dsn, timeout_s=remaining, statement_timeout_s=self.statement_timeout_s)
            yield conn
        finally:
            if conn is not None:
                if conn.broken or self._closed:
                    conn.close_nowait()
                else:
                    self._idle.append(conn)
            self._slots.release()

    async def execute(self, sql: str, params: Params = None, **kwargs: Any) -> list[tuple[Any, ...]]:
        """Run one statement on any free connection (see :meth:`PgConnection.execute`).

        A connection that sat idle may have died with a restarted server: when
        the statement fails as unavailable on such a connection, it runs once
        more on a new one. Every statement sent through the pool is safe to
        repeat (reads, lease updates keyed by epoch, fenced or conflict-free inserts).
        """
        async with self.connection() as conn:
            reused = conn.used
            try:
                return await conn.execute(sql, params, **kwargs)
            except StorageUnavailableError:
                if not reused or not conn.broken:
                    raise
        async with self.connection() as conn:
            return await conn.execute(sql, params, **kwargs)

    def close(self) -> None:
        """Close every idle connection; those in use close when they come back."""
        self._closed = True
        for conn in self._idle:
            conn.close_nowait()
        self._idle.clear()
