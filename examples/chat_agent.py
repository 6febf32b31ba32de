#!/usr/bin/env python3
"""An agent loop: you type, the model answers and uses its memory tools.

Run it from the repository root and type (an empty line or Ctrl-D ends)::

    .venv/bin/python examples/chat_agent.py

or give the lines up front, or a file of lines (``--script FILE``)::

    .venv/bin/python examples/chat_agent.py "Remember that I deploy on Tuesdays." "What is our refund policy?"

The model is any OpenAI-compatible chat endpoint named by environment
variables: ``OPENAI_BASE_URL`` (default ``https://api.openai.com/v1``; e.g.
``http://localhost:11434/v1`` for Ollama), ``OPENAI_API_KEY`` and
``OPENAI_MODEL`` (default ``gpt-4o-mini``). With neither a base URL nor a
key set (or with ``--offline``), a small scripted model -- deterministic,
no network -- drives the same loop, so the example runs anywhere.

Each turn: the user message is stored; the model gets the frozen system
prompt, the history and the session's tools (``set_context``,
``load_context``, ``search_context``...); each tool call it makes runs and
is stored, with its result, as a tool part of the assistant message, until
the model answers in plain text. The conversation is kept in
``chat.sqlite3`` in ``--data DIR`` (default: a new temporary folder), so
running again with the same ``--data`` continues it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import trio

from actors import AgentSearchProvider, DirectorySkillProvider, Session
from actors.compaction import create_compact_function, extractive_summarize
from actors.tools import openai_tools
from storage import SqlStorage

SKILLS = Path(__file__).resolve().parent / "skills"
#: Model calls allowed in one turn before the loop stops asking.
MAX_STEPS = 6
SOUL = (
    "You are a helpful team assistant. Save lasting facts about the user with set_context "
    "(label memory, action append), load a skill before following it, and search the "
    "knowledge block before answering questions about the team."
)
KNOWLEDGE = (
    ("Refund policy", "Refund policy: refunds are paid within 5 working days of approval."),
    ("On-call", "On-call: the engineer on call answers a page within 15 minutes, day and night."),
    ("Deploy windows", "Deploy windows: Tuesdays and Thursdays after 10:00 UTC, never on Fridays."),
)


### session: The memory the agent works with
# Providers are duck-typed. A skills provider with get() and load() but no
# set() makes a block the model can load from but not write to, so the
# shipped skill files stay as they are. Auto-compaction keeps a long chat
# under about 4000 tokens with the built-in extractive summarizer.


class Text:
    """A readonly block with fixed text."""

    def __init__(self, text: str) -> None:
        self.text = text

    async def get(self) -> str:
        return self.text


class ReadOnlySkills:
    """The Markdown skills of a folder: loadable, not writable."""

    def __init__(self, folder: Path) -> None:
        self._files = DirectorySkillProvider(folder)

    async def get(self) -> str | None:
        return await self._files.get()

    async def load(self, key: str) -> str | None:
        return await self._files.load(key)


async def open_session(storage: SqlStorage) -> Session:
    session = (
        Session.create(storage)
        .for_session("chat")
        .with_context("soul", provider=Text(SOUL))
        .with_context("memory", description="Learned facts about the user", max_tokens=1100)
        .with_context("skills", description="Loadable skills", provider=ReadOnlySkills(SKILLS))
        .with_context("knowledge", description="Team handbook", provider=AgentSearchProvider(storage))
        .with_cached_prompt()
        .on_compaction(create_compact_function(summarize=extractive_summarize, tail_token_budget=1500))
        .compact_after(4000)
    )
    # First run: fill the knowledge block through the tool a model would use.
    if not (await session.get_context_block("knowledge"))["content"]:
        set_context = (await session.tools())["set_context"]
        for title, content in KNOWLEDGE:
            await set_context.execute({"label": "knowledge", "content": content, "metadata": {"title": title}})
    return session


### convert: Session messages -> OpenAI chat messages
# Session messages keep a tool call and its result in one part; the chat
# API wants an assistant message with tool_calls, then one "tool" message
# per result.


def to_chat_messages(system: str, history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    chat = [{"role": "system", "content": system}]
    for message in history:
        text = "\n".join(p["text"] for p in message["parts"] if p.get("type") == "text")
        calls = [p for p in message["parts"] if str(p.get("type", "")).startswith("tool-")]
        if message["role"] != "assistant" or not calls:
            chat.append({"role": message["role"], "content": text})
            continue
        chat.append({"role": "assistant", "content": text or None, "tool_calls": [
            {"id": p["toolCallId"], "type": "function",
             "function": {"name": p["toolName"], "arguments": json.dumps(p.get("input", {}))}}
            for p in calls
        ]})
        for p in calls:
            chat.append({"role": "tool", "tool_call_id": p["toolCallId"], "content": str(p.get("output", ""))})
    return chat


### models: What the loop needs from a model
# complete(messages, tools) -> Reply: some text and zero or more tool calls.


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: Any


@dataclass
class Reply:
    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)


class OpenAIChatModel:
    """Any OpenAI-compatible ``/chat/completions`` endpoint, through httpx."""

    def __init__(self, base_url: str, api_key: str | None, model: str) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.model = model
        self.http = httpx.AsyncClient(base_url=base_url.rstrip("/"), headers=headers, timeout=120)
        self.name = f"{model} at {base_url}"

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Reply:
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        if tools:
            body["tools"] = tools
        response = await self.http.post("/chat/completions", json=body)
        response.raise_for_status()
        answer = response.json()["choices"][0]["message"]
        calls = []
        for call in answer.get("tool_calls") or []:
            raw = call["function"].get("arguments") or "{}"
            try:
                arguments = json.loads(raw)
            except ValueError:
                arguments = raw  # the tool answers with an error string the model can read
            calls.append(ToolCall(call["id"], call["function"]["name"], arguments))
        return Reply(answer.get("content") or "", calls)

    async def aclose(self) -> None:
        await self.http.aclose()


class ScriptedModel:
    """A stand-in model with fixed rules, for running the loop offline.

    After tool results it answers from them. Otherwise: "remember ..." ->
    set_context on memory; a question naming a skill ("review",
    "incident") -> load_context; any other question -> search_context on
    the knowledge block with its longest word; anything else -> a greeting.
    """

    name = "the scripted offline model"
    _STOP = {"what", "which", "where", "when", "does", "should", "about", "there", "their", "with", "your"}

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Reply:
        last = messages[-1]
        if last["role"] == "tool":
            return Reply(self._answer(messages))
        said = last["content"]
        words = re.findall(r"[a-z0-9]+", said.lower())
        fact = re.match(r"(?i)\s*remember(?: that)?\s+(.+)", said)
        if fact:
            return self._call("set_context", {"label": "memory", "content": fact.group(1), "action": "append"})
        for key in re.findall(r"^- ([a-z0-9-]+):", messages[0]["content"], re.MULTILINE):
            if said.endswith("?") and any(len(w) > 4 and w in words for w in key.split("-")):
                return self._call("load_context", {"label": "skills", "key": key})
        if said.endswith("?"):
            query = max((w for w in words if len(w) > 3 and w not in self._STOP), key=len, default=said)
            return self._call("search_context", {"label": "knowledge", "query": query})
        return Reply("Hello! Tell me something to remember, ask about the team, or ask for a skill.")

    def _call(self, name: str, arguments: dict[str, Any]) -> Reply:
        return Reply(tool_calls=[ToolCall(f"call-{uuid.uuid4().hex[:8]}", name, arguments)])

    def _answer(self, messages: list[dict[str, Any]]) -> str:
        call = next(m for m in reversed(messages) if m.get("tool_calls"))["tool_calls"][0]["function"]
        result = messages[-1]["content"]
        if result.startswith("Error"):
            return f"Sorry, that did not work: {result}"
        if result == "No results found.":
            return "The handbook says nothing about that."
        if call["name"] == "set_context":
            return "Noted, I will remember that."
        if call["name"] == "load_context":
            steps = [line for line in result.splitlines() if line[:1].isdigit() or line.startswith("- ")]
            return f"Following {json.loads(call['arguments'])['key']}, start here: {steps[0]}"
        return "From the handbook: " + result.split("\n", 1)[-1].split("\n\n")[0]


def pick_model(offline: bool) -> OpenAIChatModel | ScriptedModel:
    base_url, api_key = os.environ.get("OPENAI_BASE_URL"), os.environ.get("OPENAI_API_KEY")
    if offline or not (base_url or api_key):
        return ScriptedModel()
    model = os.environ.get("OPENAI_MODEL", "gpt-4o-mini")
    return OpenAIChatModel(base_url or "https://api.openai.com/v1", api_key, model)


### loop: One turn of the agent
# Store the user's message; then ask the model, run the tools it calls,
# store its step as one assistant message (text + tool parts with their
# outputs), and ask again until it answers without tools.


async def run_turn(session: Session, model: Any, said: str) -> str:
    await session.append_message({"id": new_id(), "role": "user", "parts": [{"type": "text", "text": said}]})
    for _ in range(MAX_STEPS):
        tools = await session.tools()
        history = await session.get_history()
        reply = await model.complete(to_chat_messages(await session.freeze_system_prompt(), history),
                                     openai_tools(tools))
        parts: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
        for call in reply.tool_calls:
            tool = tools.get(call.name)
            output = await tool.execute(call.arguments) if tool else f"Error: no tool named {call.name}"
            print(f"  -> {call.name}({json.dumps(call.arguments, ensure_ascii=False)}) = {first_line(output)}")
            parts.append({"type": f"tool-{call.name}", "toolCallId": call.id, "toolName": call.name,
                          "state": "output-available", "input": call.arguments, "output": output})
        await session.append_message({"id": new_id(), "role": "assistant", "parts": parts})
        if not reply.tool_calls:
            return reply.text
    return "(stopped: the model kept calling tools)"


def new_id() -> str:
    return uuid.uuid4().hex[:16]


def first_line(text: str, limit: int = 70) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


### main: Read lines, run turns, show what was stored


async def user_lines(lines: list[str]):
    if lines:
        for line in lines:
            print(f"you: {line}")
            yield line
        return
    interactive = sys.stdin.isatty()
    while True:
        try:
            line = await trio.to_thread.run_sync(input, "you: " if interactive else "")
        except EOFError:
            return
        if not line.strip():
            return
        if not interactive:
            print(f"you: {line}")
        yield line


async def main(data: Path, lines: list[str], offline: bool) -> None:
    storage = SqlStorage.open(data / "chat.sqlite3")
    session = await open_session(storage)
    model = pick_model(offline)
    print(f"model: {model.name}\ndatabase: {data / 'chat.sqlite3'}\n")
    try:
        async for said in user_lines(lines):
            print(f"assistant: {await run_turn(session, model, said)}")
    finally:
        if isinstance(model, OpenAIChatModel):
            await model.aclose()

    # Every step is in the history; tool calls and results are tool parts.
    history = await session.get_history()
    parts = [p for m in history for p in m["parts"] if p["type"].startswith("tool-")]
    print(f"\nstored: {len(history)} messages, {len(parts)} tool part{'' if len(parts) == 1 else 's'} "
          f"({', '.join(sorted({p['toolName'] for p in parts}))})")
    print("memory block:", json.dumps((await session.get_context_block("memory"))["content"]))
    print("loaded skills:", list(await session.get_loaded_skill_keys()))
    storage.close()


def parse_args() -> tuple[Path, list[str], bool]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lines", nargs="*", help="what the user says, one turn each (default: read stdin)")
    parser.add_argument("--script", type=Path, help="a file with one user turn per line")
    parser.add_argument("--data", type=Path, help="folder for chat.sqlite3 (default: a new temporary folder)")
    parser.add_argument("--offline", action="store_true", help="use the scripted model even if OPENAI_* is set")
    args = parser.parse_args()
    lines = list(args.lines)
    if args.script:
        lines += [line for line in args.script.read_text(encoding="utf-8").splitlines() if line.strip()]
    data = args.data or Path(tempfile.mkdtemp(prefix="durable-sessions-chat-"))
    data.mkdir(parents=True, exist_ok=True)
    return data, lines, args.offline


if __name__ == "__main__":
    trio.run(main, *parse_args())
