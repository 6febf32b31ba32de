#!/usr/bin/env python3
"""The Session API on Postgres, the way the spec wires it: one provider per concern.

Run it from the repository root with a Postgres you may create tables in::

    .venv/bin/python examples/postgres_session.py --dsn postgresql://user@localhost/sessions

(or set ``DURABLE_SESSIONS_POSTGRES`` instead of ``--dsn``). It creates the
tables if they are missing (``create_schema``: the spec's migration plus
ours), then builds the spec's example session: a readonly soul, a writable
``memory`` block in a ``PostgresContextProvider`` row, a searchable
``knowledge`` block over ``PostgresSearchProvider`` entries and the frozen
prompt cached in another row. ``Session.create(PostgresSessionProvider(...))``
skips every SQLite auto-wiring, so each block names its provider. No model,
no server: everything runs in this process against the database.

What it shows: the frozen prompt, the AI tools writing memory and
knowledge the way a model would, messages and search (one query syntax,
Chinese text too), and a second Session object -- what a woken actor
builds -- finding the same prompt, history and loaded state in Postgres.
"""

from __future__ import annotations

import argparse
import os
import sys

import psycopg_pool
import trio

from actors import Session
from storage.postgres import (
    PostgresContextProvider,
    PostgresSearchProvider,
    PostgresSessionProvider,
    create_schema,
    describe_dsn,
)

SESSION_ID = "pg-demo"


class Soul:
    """A readonly block: any object with ``get()``."""

    async def get(self) -> str:
        return "You are a helpful assistant."


def build(pool: psycopg_pool.ConnectionPool, session_id: str) -> Session:
    """The spec's Postgres session, with Python names."""
    return (
        Session.create(PostgresSessionProvider(pool, session_id))
        .with_context("soul", provider=Soul())
        .with_context(
            "memory", description="Short facts", max_tokens=1100,
            provider=PostgresContextProvider(pool, f"memory_{session_id}"),
        )
        .with_context("knowledge", description="Searchable knowledge base", provider=PostgresSearchProvider(pool))
        .with_cached_prompt(PostgresContextProvider(pool, f"_prompt_{session_id}"))
    )


def text(message_id: str, role: str, words: str) -> dict:
    return {"id": message_id, "role": role, "parts": [{"type": "text", "text": words}]}


async def main(dsn: str) -> None:
    pool = psycopg_pool.ConnectionPool(dsn, min_size=1, max_size=4, open=False, kwargs={"autocommit": True})
    await trio.to_thread.run_sync(lambda: pool.open(wait=True, timeout=10))
    try:
        await run(pool, dsn)
    finally:
        await trio.to_thread.run_sync(pool.close)


async def run(pool: psycopg_pool.ConnectionPool, dsn: str) -> None:
    print("== open")
    print(f"database: {describe_dsn(dsn)}")
    await create_schema(pool)
    session = build(pool, SESSION_ID)
    if await session.get_path_length():
        await session.clear_messages()
        print("cleared the messages of an earlier run")
    await session.replace_context_block("memory", "")

    print("\n== tools")
    # What a model would call: memory is written whole, knowledge is indexed (its key made from the text).
    tools = await session.tools()
    print("tools:", ", ".join(tools))
    print(await tools["set_context"].execute({"label": "memory", "content": "The user flies from Lisbon."}))
    print(await tools["set_context"].execute({"label": "knowledge", "content": "Economy fares include one 23 kg bag."}))
    print(await tools["search_context"].execute({"label": "knowledge", "query": "bag economy"}))

    print("\n== frozen system prompt")
    # Block writes never change a frozen prompt; refreshing renders and stores it again.
    prompt = await session.refresh_system_prompt()
    print(prompt)
    print("frozen:", await session.freeze_system_prompt() == prompt)

    print("\n== messages")
    await session.append_message(text("u1", "user", "Can I bring a second bag to Tokyo? 東京に行きます。"))
    await session.append_message(text("a1", "assistant", "Economy includes one 23 kg bag; a second one costs extra."))
    await session.append_message(text("u2", "user", "Thanks, book seat 12A please."))
    print("history:", [m["id"] for m in await session.get_history()])
    for query in ("second bag", "東京", '"seat 12A"'):
        print(f"search {query}:", [hit["id"] for hit in await session.search(query)])

    print("\n== a second Session, as after a wake")
    again = build(pool, SESSION_ID)
    print("same frozen prompt:", await again.freeze_system_prompt() == prompt)
    print("memory:", (await again.get_context_block("memory"))["content"])
    print("history:", [m["id"] for m in await again.get_history()])
    print("latest leaf:", (await again.get_latest_leaf())["id"])


def parse_args(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default=os.environ.get("DURABLE_SESSIONS_POSTGRES"),
                        help="Postgres connection string (default $DURABLE_SESSIONS_POSTGRES)")
    args = parser.parse_args(argv)
    if not args.dsn:
        parser.error("give --dsn or set DURABLE_SESSIONS_POSTGRES")
    return args.dsn


if __name__ == "__main__":
    trio.run(main, parse_args())
    sys.exit(0)
