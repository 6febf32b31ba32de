#!/usr/bin/env python3
"""The OpenAI Agents SDK remembering its conversations on a durable-sessions host (or in a local file).

Start a host in one terminal, then run this from the repository root in another::

    .venv/bin/durable-sessions serve
    .venv/bin/python examples/openai_agents_session.py [--session ID]

The client finds the host at ``$DURABLE_SESSIONS_URL`` (default
``http://127.0.0.1:8787``) with ``$DURABLE_SESSIONS_TOKEN`` when set. It
needs the SDK: ``pip install 'durable-sessions[openai-agents]'``.

``Runner.run(agent, ..., session=DurableAgentsSession(id, url))`` gives the
agent a memory that lives on the host: any process that reaches it can
continue the conversation, it survives restarts and hibernation, and every
other client reads it as ordinary Session messages (search finds its text,
tool calls are tool parts). ``EmbeddedAgentsSession`` does the same on a
SQLite file inside your program, with no host.

No network beyond the host, no API key: the model is the SDK's own
``ScriptedModel``, replaying what a model would answer. Put a model name
(``model="gpt-4.1-mini"``) in :func:`make_agent` to use a real one.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import tempfile
from pathlib import Path

from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from actors import Session
from actors.openai_agents import EmbeddedAgentsSession
from runtime.client import DurableAgentsSession, SessionsClient
from storage import SqlStorage

set_tracing_disabled(True)  # this example sends nothing to OpenAI, traces included


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city now."""
    return {"Paris": "Sunny, 21 °C", "Oslo": "Rain, 9 °C"}[city]


def scripted_model() -> ScriptedModel:
    """What a model would answer, turn by turn: two tool calls, then text."""
    return ScriptedModel([
        [function_call("get_weather", {"city": "Paris"}, call_id="call_paris"),
         function_call("get_weather", {"city": "Oslo"}, call_id="call_oslo")],
        [assistant_message("Paris is sunny (21 °C); Oslo has rain (9 °C).", item_id="msg_1")],
        [assistant_message("You asked about Paris and Oslo; Paris was the sunnier.", item_id="msg_2")],
        [assistant_message("Paris: pack sunglasses.", item_id="msg_3")],
    ])


def make_agent(model: ScriptedModel) -> Agent:
    return Agent(name="travel", instructions="Help with travel plans.", model=model, tools=[get_weather])


async def main(session_id: str) -> None:
    model = scripted_model()
    agent = make_agent(model)

    ### memory: The SDK's session memory on the host
    # DurableAgentsSession implements the SDK's Session protocol over HTTP.
    # It makes no connection until the first call, and works from any
    # asyncio loop (Runner.run_sync included).
    memory = DurableAgentsSession(session_id)
    print("host:", memory.url)
    print("session:", session_id)

    ### run: A turn with tool calls
    # The runner reads the history from the host, runs the model and the
    # tools, and stores every new item: the user message, the calls and
    # their outputs, the answer.
    print("\n== first turn")
    result = await Runner.run(agent, "What's the weather in Paris and Oslo?", session=memory)
    print("assistant:", result.final_output)
    print("items stored:", len(await memory.get_items()))

    ### continue: Another process, the same conversation
    # A new DurableAgentsSession with the same id -- in another process, on
    # another machine -- finds everything; the model gets the whole history.
    print("\n== second turn, from a fresh session object")
    result = await Runner.run(agent, "Which city did I ask about?", session=DurableAgentsSession(session_id))
    print("assistant:", result.final_output)
    print("items the model was sent:", len(model.last_call.input))

    ### read: What every other client sees
    # The items are Session messages: user text, tool parts with toolCallId,
    # state, input and output, assistant text. Search finds the text.
    print("\n== as Session messages")
    async with SessionsClient() as client:
        session = client.session(session_id)
        for message in await session.get_history():
            parts = ", ".join(part_summary(part) for part in message["parts"])
            print(f"  [{message['role']}] {parts}")
        print("search 'sunny':", [hit["content"] for hit in await session.search("sunny")])

        ### hibernate: Nothing is lost when the host lets the session sleep
        print("\n== hibernate")
        print("actors hibernated:", await client.hibernate())
    print("items after waking:", len(await memory.get_items()))

    ### pop: Take back the last turn
    # pop_item removes the newest item (the SDK uses it to retry); here it
    # drops the last answer and the question before it.
    print("\n== pop")
    print("popped:", (await memory.pop_item())["content"][0]["text"])
    print("popped:", (await memory.pop_item())["content"])
    print("items left:", len(await memory.get_items()))

    ### embedded: The same memory in a local SQLite file
    # EmbeddedAgentsSession wraps an in-process Session: no host at all.
    print("\n== embedded")
    path = Path(tempfile.mkdtemp(prefix="durable-sessions-agents-")) / "agents.sqlite3"
    print("database:", path)
    storage = SqlStorage.open(path)
    local = EmbeddedAgentsSession(Session.create(storage).for_session("trip"))
    result = await Runner.run(agent, "One tip for the sunnier city?", session=local)
    print("assistant:", result.final_output)
    print("stored in the file:", [m["role"] for m in await local.session.get_history()])
    storage.close()


def part_summary(part: dict) -> str:
    if part["type"] == "text":
        return f"text {part['text']!r}"
    if part["type"].startswith("tool-"):
        return f"{part['type']}({part['input']}) {part['state']} -> {part['output']!r}"
    return part["type"]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--session", default=f"agents-{secrets.token_hex(4)}", help="session id on the host")
    asyncio.run(main(parser.parse_args().session))
