"""Postgres providers under bad input, lost connections, a restarted server and other drivers."""

from __future__ import annotations

import json

import psycopg
import psycopg_pool
import pytest
import trio

from storage.fts import parse_query
from storage.messages import LATEST_LEAF, NewMessage
from storage.postgres import (
    DatabaseError,
    InvalidInputError,
    PostgresSessionProvider,
    StorageUnavailableError,
    create_schema,
)
from storage.postgres.connection import runner_for


def doc(message_id: str) -> str:
    return json.dumps({"id": message_id, "role": "user", "parts": []})


def chain(n: int, prefix: str = "m") -> list[NewMessage]:
    return [NewMessage(f"{prefix}{i}", "user", doc(f"{prefix}{i}"), f"text {i}") for i in range(n)]


def count(dsn: str, session: str = "s") -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM assistant_messages WHERE session_id = %s", (session,)).fetchone()[0]


@pytest.fixture
def store(pg_conn):
    return PostgresSessionProvider(pg_conn, "s")


# -- bad input: a clear error naming the field, nothing sent ----------------------------------


@pytest.mark.parametrize(
    ("args", "field", "message"),
    [
        ((1, "user", "{}", ""), "message_id", "message_id must be a string, not int"),
        (("a", None, "{}", ""), "role", "role must be a string, not NoneType"),
        (("a", "user", b"{}", ""), "content", "content must be a string, not bytes"),
        (("a", "user", "{}", 5), "text", "text must be a string, not int"),
        (("a\x00b", "user", "{}", ""), "message_id", "message_id holds a NUL character at index 1"),
        (("a", "us\x00er", "{}", ""), "role", "role holds a NUL character at index 2"),
        (("a", "user", '{"x":"\x00"}', ""), "content", "Postgres text cannot store"),
        (("a", "user", '{"x":"\ud800"}', ""), "content", "content holds a lone UTF-16 surrogate at index 6"),
        (("a", "user", "{}", "bad \udfff"), "text", "text holds a lone UTF-16 surrogate"),
        (("\ud83d", "user", "{}", ""), "message_id", "lone UTF-16 surrogate"),
    ],
)
async def test_bad_values_are_refused_before_anything_is_sent(pg_dsn, store, args, field, message):
    with pytest.raises(InvalidInputError, match=message.replace("(", r"\(")) as err:
        await store.append(*args)
    assert err.value.field == field
    assert isinstance(err.value, ValueError) and err.value.status == 400
    assert count(pg_dsn) == 0


async def test_bad_keyword_and_parent_arguments(store):
    for kwargs, field in [({"tokens": "3"}, "tokens"), ({"tokens": True}, "tokens"), ({"tools": 7}, "tools")]:
        with pytest.raises(InvalidInputError) as err:
            await store.append("a", "user", "{}", "", **kwargs)
        assert err.value.field == field
    with pytest.raises(InvalidInputError, match="parent_id must be a string, not int"):
        await store.append("a", "user", "{}", "", 5)
    with pytest.raises(InvalidInputError) as err:
        PostgresSessionProvider(store.conn, 5)
    assert err.value.field == "session_id"
    for bad in ("abc", [1], 3):
        with pytest.raises(InvalidInputError) as err:
            await store.delete(bad)
        assert err.value.field == "message_ids"
    with pytest.raises(InvalidInputError, match="query must be a parsed query"):
        await store.search("text", 5)
    with pytest.raises(InvalidInputError, match="max_bytes must be a number, not str"):
        await store.window("a", "10", 1)
    with pytest.raises(InvalidInputError, match="max_bytes must be a number, not NaN"):
        await store.window("a", float("nan"), 1)
    with pytest.raises(InvalidInputError) as err:
        await store.add_compaction("k", "sum\x00mary", "a", "b")
    assert err.value.field == "summary"


async def test_input_is_checked_even_without_a_connection(pg_dsn):
    conn = psycopg.connect(pg_dsn, autocommit=True)
    store = PostgresSessionProvider(conn, "s")
    conn.close()
    with pytest.raises(InvalidInputError):
        await store.append("a\x00", "user", "{}", "")
    with pytest.raises(StorageUnavailableError, match="closed"):
        await store.append("a", "user", "{}", "")


async def test_nul_in_search_text_becomes_a_space(store):
    assert await store.append("a", "user", doc("a"), "left\x00right") == (True, None)
    [hit] = await store.search(parse_query("right"), 5)
    assert hit.content == "left right"
    assert [h.id for h in await store.search(parse_query("left"), 5)] == ["a"]


async def test_oversized_values_are_refused(pg_dsn, pg_conn):
    store = PostgresSessionProvider(pg_conn, "s", max_value_bytes=100)
    fits = "x" * 100
    assert await store.append("a", "user", fits, "") == (True, None)
    with pytest.raises(InvalidInputError, match="content is 102 UTF-8 bytes, over the limit of 100") as err:
        await store.append("b", "user", "é" * 51, "")
    assert err.value.field == "content"
    assert count(pg_dsn) == 1


async def test_a_bad_message_in_a_chain_stores_none_of_it(pg_dsn, store):
    batch = [*chain(2), NewMessage("bad", "user", "{\x00}", ""), *chain(2, "n")]
    with pytest.raises(InvalidInputError) as err:
        await store.append_chain(batch, None)
    assert err.value.field == "messages[2].content"
    with pytest.raises(InvalidInputError) as err:
        await store.append_chain([chain(1)[0], {"id": "x"}], None)
    assert err.value.field == "messages[1]"
    assert count(pg_dsn) == 0


def test_connections_psycopg_cannot_run_under_trio_are_refused(pg_dsn):
    pool = psycopg_pool.AsyncConnectionPool(pg_dsn, open=False)
    with pytest.raises(TypeError, match="AsyncConnectionPool needs asyncio"):
        PostgresSessionProvider(pool, "s")
    with pytest.raises(TypeError, match="need a psycopg.Connection"):
        runner_for(object())


# -- failures inside a write: all or nothing -----------------------------------------------------


def hold_m500(dsn: str) -> psycopg.Connection:
    """A connection holding an uncommitted row ``m500`` of session ``s``, and with it the session's
    catalog row (schema v3): a write of session ``s`` by another transaction waits for it, with
    its first rows written."""
    conn = psycopg.connect(dsn)
    conn.execute("INSERT INTO assistant_messages (session_id, id, role, content) VALUES ('s', 'm500', 'user', '{}')")
    return conn


@pytest.fixture
def blocker(pg_dsn):
    """:func:`hold_m500` for the whole test."""
    conn = hold_m500(pg_dsn)
    yield conn
    conn.close()


async def wait_until_blocked(dsn: str, pid: int | None = None) -> None:
    """Until backend ``pid`` (default: any backend of this database) waits on a lock
    after having written (it has a transaction id)."""
    with psycopg.connect(dsn, autocommit=True) as admin:
        for _ in range(1000):
            blocked = admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND backend_xid IS NOT NULL AND (%(pid)s::int IS NULL OR pid = %(pid)s)",
                {"pid": pid},
            ).fetchall()
            if blocked:
                return
            await trio.sleep(0.01)
    raise AssertionError(f"no backend blocked ({pid=})")


async def test_a_connection_lost_mid_batch_leaves_nothing(pg_dsn, pg_conn, blocker):
    store = PostgresSessionProvider(pg_conn, "s")
    outcome: dict[str, BaseException] = {}

    async def write() -> None:
        try:
            await store.append_chain(chain(1000), None)
        except StorageUnavailableError as exc:
            outcome["error"] = exc

    async with trio.open_nursery() as nursery:
        nursery.start_soon(write)
        await wait_until_blocked(pg_dsn, pg_conn.info.backend_pid)  # m0..m499 written, uncommitted
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            assert admin.execute("SELECT pg_terminate_backend(%s)", (pg_conn.info.backend_pid,)).fetchone() == (True,)
    blocker.rollback()
    assert "error" in outcome and outcome["error"].retryable and outcome["error"].status == 503
    assert count(pg_dsn) == 0
    fresh = PostgresSessionProvider(psycopg.connect(pg_dsn, autocommit=True), "s")
    assert await fresh.latest_leaf() is None
    fresh.conn.close()


async def test_a_cancelled_write_still_commits_or_rolls_back_whole(pg_dsn, pg_conn, blocker):
    store = PostgresSessionProvider(pg_conn, "s")
    returned: list[list] = []

    async def write() -> None:
        returned.append(await store.append_chain(chain(1000), None))
        await trio.sleep(0)  # the task's next checkpoint: the cancellation lands here

    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(write)
            await wait_until_blocked(pg_dsn, pg_conn.info.backend_pid)
            scope.cancel()  # the call runs on: its transaction is never cut in half
            blocker.rollback()  # let it finish
    assert scope.cancelled_caught
    assert len(returned) == 1 and all(inserted for inserted, _ in returned[0])
    assert count(pg_dsn) == 1000
    assert await store.latest_leaf() == "m999"


async def test_a_failing_statement_rolls_the_batch_back(pg_dsn, pg_conn, store):
    pg_conn.execute(
        "CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN RAISE EXCEPTION 'boom on %', NEW.id; END $$"
    )
    pg_conn.execute(
        "CREATE TRIGGER boom BEFORE INSERT ON assistant_messages FOR EACH ROW "
        "WHEN (NEW.id = 'boom') EXECUTE FUNCTION boom()"
    )
    await store.append("first", "user", doc("first"), "")
    batch = [*chain(3), NewMessage("boom", "user", doc("boom"), ""), *chain(3, "n")]
    with pytest.raises(DatabaseError, match="boom on boom"):
        await store.append_chain(batch, None)
    assert count(pg_dsn) == 1
    assert await store.latest_leaf() == "first"


# -- a restarted server ---------------------------------------------------------------------------


async def test_a_pool_rides_out_a_server_restart(pg_server, pg_dsn):
    pool = psycopg_pool.ConnectionPool(
        pg_dsn, min_size=1, max_size=2, timeout=2, check=psycopg_pool.ConnectionPool.check_connection, open=True
    )
    blocker = None
    try:
        store = PostgresSessionProvider(pool, "s")
        await store.append("kept", "user", doc("kept"), "acknowledged before the crash")
        blocker = hold_m500(pg_dsn)
        failed: list[BaseException] = []

        async def write() -> None:
            try:
                await store.append_chain(chain(1000), "kept")
            except StorageUnavailableError as exc:
                failed.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(write)
            await wait_until_blocked(pg_dsn)  # the batch waits on m500, m0..m499 written
            await trio.to_thread.run_sync(pg_server.stop, "immediate")
        assert len(failed) == 1
        with trio.fail_after(10):  # down: a clear error within the pool timeout, never a hang
            with pytest.raises(StorageUnavailableError):
                await store.append("late", "user", doc("late"), "")
        await trio.to_thread.run_sync(pg_server.start)
        assert await store.latest_leaf() == "kept"  # the committed write survived, the batch did not
        assert await store.append("after", "user", doc("after"), "") == (True, "kept")
        assert await store.count() == 2
    finally:
        pool.close()
        if blocker is not None:
            blocker.close()
        if not pg_server.is_running():
            pg_server.start()


async def test_a_plain_connection_reports_the_restart_and_a_new_one_works(pg_server, pg_dsn):
    conn = psycopg.connect(pg_dsn, autocommit=True)
    store = PostgresSessionProvider(conn, "s")
    await store.append("a", "user", doc("a"), "")
    await trio.to_thread.run_sync(pg_server.restart, "fast")
    with pytest.raises(StorageUnavailableError):
        await store.latest_leaf()
    conn.close()
    with psycopg.connect(pg_dsn, autocommit=True) as again:
        assert await PostgresSessionProvider(again, "s").latest_leaf() == "a"


# -- the spec's PostgresConnection: execute(query, args) -----------------------------------------


class QmarkConnection:
    """An object of the spec's ``PostgresConnection`` shape over a real connection:
    ``?`` placeholders, ``{"rows": [dict, ...]}`` results, async."""

    def __init__(self, dsn: str) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.statements: list[str] = []

    async def execute(self, query: str, args: list | None = None) -> dict:
        self.statements.append(query.split()[0])

        def run() -> dict:
            cur = self.conn.execute(query.replace("?", "%s"), args) if args else self.conn.execute(query)
            if cur.description is None:
                return {"rows": []}
            names = [d.name for d in cur.description]
            return {"rows": [dict(zip(names, row)) for row in cur.fetchall()]}

        return await trio.to_thread.run_sync(run)


async def test_an_execute_object_runs_the_same_provider(pg_empty_dsn):
    conn = QmarkConnection(pg_empty_dsn)
    try:
        await create_schema(conn)
        store = PostgresSessionProvider(conn, "s")
        assert await store.append("a", "user", doc("a"), "hello world") == (True, None)
        assert await store.append_chain(chain(3), LATEST_LEAF) == [(True, "a"), (True, "m0"), (True, "m1")]
        assert await store.path_ids("m2") == ["a", "m0", "m1", "m2"]
        assert [h.id for h in await store.search(parse_query("hello"), 5)] == ["a"]
        assert await store.delete(["m0"]) == ["m0"]
        assert await store.path_ids("m2") == ["a", "m1", "m2"]
        conn.conn.execute(
            "CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'boom'; END $$"
        )
        conn.conn.execute(
            "CREATE TRIGGER boom BEFORE INSERT ON assistant_messages FOR EACH ROW "
            "WHEN (NEW.id = 'boom') EXECUTE FUNCTION boom()"
        )
        conn.statements.clear()
        with pytest.raises(psycopg.Error, match="boom"):  # a custom driver's own errors pass through
            await store.append_chain([*chain(2, "x"), NewMessage("boom", "user", doc("boom"), "")], None)
        assert conn.statements[0] == "BEGIN" and conn.statements[-1] == "ROLLBACK"
        assert await store.count() == 3
    finally:
        conn.conn.close()
