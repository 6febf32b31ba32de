#!/usr/bin/env python3
"""A session's memory as MCP tools: what Claude Desktop, Claude Code or Cursor would see.

Needs the ``mcp`` extra (``pip install -e '.[mcp]'``). Start a host in one
terminal, then run this from the repository root in another::

    .venv/bin/durable-sessions serve
    .venv/bin/python examples/mcp_memory.py [--session ID]

It plays the MCP client with the ``mcp`` SDK's own client, both ways a
client can reach the memory:

* stdio -- it spawns ``durable-sessions mcp --session ID`` (what a desktop
  client's configuration runs), which talks to the host at
  ``$DURABLE_SESSIONS_URL`` with ``$DURABLE_SESSIONS_TOKEN``;
* streamable HTTP -- the host's own endpoint, ``$DURABLE_SESSIONS_URL/mcp/ID``.

For Claude Desktop, the server entry is::

    {"mcpServers": {"memory": {"command": "durable-sessions",
                               "args": ["mcp", "--session", "desktop"]}}}
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import sys
from pathlib import Path

import anyio

try:
    import httpx2
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client
    from mcp.client.streamable_http import streamable_http_client
except ImportError:
    sys.exit("this example needs the mcp extra: pip install -e '.[mcp]'")

URL = os.environ.get("DURABLE_SESSIONS_URL", "http://127.0.0.1:8787")
TOKEN = os.environ.get("DURABLE_SESSIONS_TOKEN")


def command() -> str:
    """The ``durable-sessions`` script beside this interpreter (a virtual environment's), else on ``PATH``."""
    beside = Path(sys.executable).with_name("durable-sessions")
    return str(beside) if beside.exists() else (shutil.which("durable-sessions") or "durable-sessions")


async def call(session: ClientSession, name: str, arguments: dict) -> str:
    result = await session.call_tool(name, arguments)
    mark = "error" if result.is_error else "ok"
    return f"{mark}: {result.content[0].text}"


async def over_stdio(session_id: str) -> None:
    print("== stdio: durable-sessions mcp --session", session_id)
    env = {**os.environ, "DURABLE_SESSIONS_URL": URL}
    params = StdioServerParameters(command=command(), args=["mcp", "--session", session_id], env=env)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        print("tools:", ", ".join(tool.name for tool in (await session.list_tools()).tools))
        print("set_context", await call(session, "set_context", {"label": "memory",
                                                                  "content": "The user prefers green tea."}))
        print("append_message", await call(session, "append_message", {"role": "user", "id": "u1",
                                                                        "text": "Remember my tea order"}))
        print("a bad call", await call(session, "set_context", {"label": "soul", "content": "x"}))


async def over_http(session_id: str) -> None:
    print(f"== http: {URL}/mcp/{session_id}")
    headers = {"Authorization": f"Bearer {TOKEN}"} if TOKEN else {}
    async with httpx2.AsyncClient(headers=headers) as http, \
            streamable_http_client(f"{URL}/mcp/{session_id}", http_client=http) as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        hits = json.loads((await session.call_tool("search_history", {"query": "tea"})).content[0].text)
        print("search_history:", [hit["id"] for hit in hits])
        block = (await session.read_resource("memory://blocks/memory")).contents[0].text
        print("memory block:", block)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--session", default=f"mcp-{secrets.token_hex(4)}")
    args = parser.parse_args()
    await over_stdio(args.session)
    await over_http(args.session)


if __name__ == "__main__":
    anyio.run(main)
