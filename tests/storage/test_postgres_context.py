"""PostgresContextProvider and PostgresSearchProvider: the SQLite providers' results, on Postgres."""

from __future__ import annotations

import random
import string

import psycopg
import pytest

import storage
from actors import AgentContextProvider, AgentSearchProvider
from storage.postgres import InvalidInputError, PostgresContextProvider, PostgresSearchProvider


def test_providers_are_exported_from_storage():
    assert {"PostgresSessionProvider", "PostgresContextProvider", "PostgresSearchProvider"} <= set(storage.__all__)
    assert storage.PostgresContextProvider is PostgresContextProvider
    assert storage.PostgresSearchProvider is PostgresSearchProvider


async def test_context_block_row(pg_conn):
    block = PostgresContextProvider(pg_conn)
    block.init("memory")
    assert await block.get() is None
    await block.set("likes tea")
    await block.set("likes coffee")
    assert await block.get() == "likes coffee"
    assert await PostgresContextProvider(pg_conn, "memory").get() == "likes coffee"
    row = pg_conn.execute("SELECT label, content, updated_at IS NOT NULL FROM cf_agents_context_blocks").fetchall()
    assert row == [("memory", "likes coffee", True)]


async def test_an_explicit_key_is_kept(pg_conn):
    prompt = PostgresContextProvider(pg_conn, "_system_prompt_s1")
    prompt.init("soul")
    await prompt.set("You are helpful.")
    assert prompt.key == "_system_prompt_s1"
    assert await PostgresContextProvider(pg_conn, "soul").get() is None


async def test_block_values_postgres_cannot_hold_are_refused(pg_conn):
    block = PostgresContextProvider(pg_conn, "memory")
    for bad, message in [("a\x00b", "NUL character"), ("\ud800", "lone UTF-16 surrogate"), (5, "must be a string")]:
        with pytest.raises(InvalidInputError, match=message) as err:
            await block.set(bad)
        assert err.value.field == "content"
    assert await block.get() is None
    with pytest.raises(InvalidInputError):
        PostgresContextProvider(pg_conn, 3)


async def test_search_entries(pg_conn):
    kb = PostgresSearchProvider(pg_conn)
    kb.init("knowledge")
    assert await kb.get() is None
    assert await kb.search("anything") is None
    await kb.set("tea", "Green tea is brewed at 80 degrees.")
    assert await kb.get() == "1 entries indexed."
    await kb.set("coffee", "Espresso is brewed under pressure.")
    await kb.set("tea", "Black tea is brewed with boiling water.")  # replaced, not added
    assert await kb.get() == "2 entries indexed."
    assert await kb.search("brewing") == (  # the shorter text first
        "[coffee]\nEspresso is brewed under pressure.\n\n[tea]\nBlack tea is brewed with boiling water."
    )
    assert await kb.search("green") is None  # the old content is gone from the index
    assert await kb.search('"under pressure"') == "[coffee]\nEspresso is brewed under pressure."
    assert await kb.search("   ") is None and await kb.search("#?!") is None


async def test_search_entries_are_filed_by_label(pg_conn):
    one, two = PostgresSearchProvider(pg_conn), PostgresSearchProvider(pg_conn)
    one.init("a")
    two.init("b")
    await one.set("k", "shared word in a")
    await two.set("k", "shared word in b")
    assert await one.search("shared") == "[k]\nshared word in a"
    assert await two.search("shared") == "[k]\nshared word in b"


async def test_search_entries_cjk_and_limit(pg_conn):
    kb = PostgresSearchProvider(pg_conn)
    kb.init("kb")
    await kb.set("zh", "我们讨论中文搜索测试")
    for i in range(12):
        await kb.set(f"n{i:02d}", f"note number {i}")
    assert await kb.search("搜索") == "[zh]\n我们讨论中文搜索测试"
    found = await kb.search("note")
    assert found.count("[n") == 10 and found.startswith("[n00]\nnote number 0")


async def test_search_entry_bad_input_stores_nothing(pg_conn):
    kb = PostgresSearchProvider(pg_conn)
    kb.init("kb")
    with pytest.raises(InvalidInputError) as err:
        await kb.set("k\x00", "text")
    assert err.value.field == "key"
    with pytest.raises(InvalidInputError, match="query must be a string"):
        await kb.search(None)
    rng = random.Random(3)
    words = " ".join("".join(rng.choices(string.ascii_lowercase, k=8)) for _ in range(150_000))
    with pytest.raises(InvalidInputError, match="cannot be indexed by Postgres") as err:
        await kb.set("huge", words)  # ~1.3 MB of distinct words: over Postgres' tsvector limit
    assert err.value.field == "content"
    assert await kb.get() is None
    assert await kb.search("alpha\x00") is None  # NUL in a query separates words; nothing stored


async def test_same_answers_as_the_sqlite_providers(pg_conn, storage):
    """Block rows and search results match AgentContextProvider / AgentSearchProvider."""
    pg_block, lite_block = PostgresContextProvider(pg_conn), AgentContextProvider(storage)
    pg_kb, lite_kb = PostgresSearchProvider(pg_conn), AgentSearchProvider(storage)
    for provider in (pg_block, lite_block):
        provider.init("memory")
    for provider in (pg_kb, lite_kb):
        provider.init("kb")
    entries = {
        "setup": "Read docs/setup.md before running the installer.",
        "zh": "重跑gen-itgc后再检查",
        "fox": "The quick brown fox jumps over the lazy dog.",
        "syntax": "apples OR pears, NEAR(x y) and tokens*",
    }
    for key, text in entries.items():
        await pg_kb.set(key, text)
        await lite_kb.set(key, text)
    await pg_block.set("remember this")
    await lite_block.set("remember this")
    assert await pg_block.get() == await lite_block.get()
    assert await pg_kb.get() == await lite_kb.get()
    for query in ["setup.md", "running installer", "重跑", "检查", '"quick brown"', '"brown quick"', "apples OR", "tokens*", "lazy cat"]:
        assert await pg_kb.search(query) == await lite_kb.search(query), query


async def test_providers_share_rows_across_connections(pg_dsn, pg_conn):
    await PostgresContextProvider(pg_conn, "memory").set("from one connection")
    with psycopg.connect(pg_dsn, autocommit=True) as other:
        assert await PostgresContextProvider(other, "memory").get() == "from one connection"
