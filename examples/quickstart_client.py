#!/usr/bin/env python3
"""Talk to a running host by session ID: the Python client in ten short steps.

Start a host in one terminal (data in ``./data``, listening on
``127.0.0.1:8787``), then run this from the repository root in another::

    .venv/bin/durable-sessions serve
    .venv/bin/python examples/quickstart_client.py

The client finds the host at ``$DURABLE_SESSIONS_URL`` (default
``http://127.0.0.1:8787``) and sends ``$DURABLE_SESSIONS_TOKEN`` as its
bearer token when set (the host needs one when it listens beyond
loopback). Each run uses a new session ID (``quickstart-<random>``) unless
you pass ``--session ID``; look at it afterwards with
``.venv/bin/durable-sessions history ID``.

A session ID is any string: the host routes it to one actor with its own
SQLite file, creating it on first use and waking it from hibernation when
needed. You never create or open anything.
"""

from __future__ import annotations

import argparse
import json
import secrets

import trio

from runtime.client import SessionsClient


def text(message_id: str, role: str, words: str) -> dict:
    """A message in the Session's JSON shape (an AI SDK ``UIMessage`` fits too)."""
    return {"id": message_id, "role": role, "parts": [{"type": "text", "text": words}]}


def show(messages: list[dict]) -> None:
    for message in messages:
        print(f"  {message['id']} [{message['role']}] {message['parts'][0]['text']}")


async def main(session_id: str) -> None:
    ### connect: One client, many sessions
    # SessionsClient reads the URL and token from the environment; use it
    # as an async context manager (it works under trio and asyncio alike).
    async with SessionsClient() as client:
        print("host:", client.url, (await client.health())["status"])
        session = client.session(session_id)
        print("session:", session_id)

        ### append: Append messages
        # Each message becomes the child of the latest one. Appending an id
        # that is already stored changes nothing and returns False.
        print("\n== append")
        await session.append_message(text("u1", "user", "Which database should a small team start with?"))
        await session.append_message(text("a1", "assistant", "PostgreSQL: boring, well documented, it scales."))
        print("stored again?", await session.append_message(text("a1", "assistant", "(a retry)")))

        ### history: Read the conversation back
        print("\n== history")
        show(await session.get_history())

        ### branch: Regenerate an answer as a branch
        # Give an explicit parent to start a sibling: both answers stay,
        # get_branches lists them, and the newest one becomes the latest
        # leaf that get_history() follows. Pass a leaf id to read the other.
        print("\n== branch and regenerate")
        await session.append_message(text("a1-retry", "assistant", "SQLite: one file, zero setup, surprisingly fast."),
                                     parent_id="u1")
        print("answers to u1:", [m["id"] for m in await session.get_branches("u1")])
        print("latest path:")
        show(await session.get_history())
        print("first answer's path:")
        show(await session.get_history("a1"))

        ### search: Full-text search
        # Every word must match, in any order; "quoted words" match as a phrase.
        print("\n== search")
        for hit in await session.search("zero setup"):
            print(f"  {hit['id']} [{hit['role']}] {hit['content']}")

        ### prompt: The frozen system prompt
        # Rendered from the session's context blocks on first use and kept
        # unchanged (also across hibernation) until refreshed. The default
        # host configuration has a soul and a writable memory of 1100 tokens.
        print("\n== frozen system prompt")
        print(await session.freeze_system_prompt())

        ### tools: Tools for your model, and running them
        # tools(format) gives the list to pass to a model ("openai",
        # "anthropic", or "raw"); execute_tool runs one with the arguments
        # the model chose and returns the string to hand back to it.
        print("\n== tools")
        for tool in await session.tools("openai"):
            print("  openai:", tool["function"]["name"], json.dumps(tool["function"]["parameters"]["required"]))
        print(" ", await session.execute_tool("set_context", {"label": "memory", "content": "The team uses SQLite."}))
        print("  memory block:", (await session.get_context_block("memory"))["content"])

        ### events: Watch status broadcasts over a WebSocket
        # After every write the session broadcasts its phase and token
        # estimate to connected sockets -- e.g. to show a context-usage bar.
        # The same socket also takes RPC calls.
        print("\n== events")
        async with session.events() as events:
            await session.append_message(text("u2", "user", "How do I back it up?"))
            async for event in events:
                print(f"  {event['type']}: phase={event['phase']} tokenEstimate={event['tokenEstimate']} "
                      f"tokenThreshold={event['tokenThreshold']}")
                break
            print("  messages on the path (RPC over the socket):", await events.call("get_path_length"))

        ### hibernate: Nothing is lost when the actor sleeps
        # Idle actors hibernate on their own; here we ask for it. The next
        # call wakes the actor from its SQLite file.
        print("\n== hibernate")
        print("  actors hibernated:", await client.hibernate(session_id))
        print("  latest leaf after waking:", (await session.get_latest_leaf())["id"])
        print("  messages on the path:", await session.get_path_length())


def parse_args() -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--session", help="session ID to use (default: a new quickstart-<random>)")
    args = parser.parse_args()
    return args.session or f"quickstart-{secrets.token_hex(4)}"


if __name__ == "__main__":
    trio.run(main, parse_args())
