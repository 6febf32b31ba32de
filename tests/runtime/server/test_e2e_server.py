"""End to end: a real ``durable-sessions serve`` process, real tau-bench chats, hibernation, SIGTERM.

For each input file: start the server on a free loopback port with a temp
data folder, import every trajectory as its own session with
``durable-sessions import`` (through the client), hibernate every actor,
then for each session check -- through the client -- that the history
equals the converted input (ids, roles, text, tool calls with outputs)
and that searching a code the conversation mentions (a booking code, else a
flight number or user id) finds exactly the messages that mention it. The
CLI's read commands run against the same server. SIGTERM must then stop
it cleanly: exit status 0, no traceback.

The 200 trajectories of ``chat/tau-bench/gpt-4o-airline.json`` of the optional
shared data set (tests/support/data.py) run when that file is present; two
small copies in ``tests/data`` always run the same path.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from runtime.cli.importer import read_conversations
from runtime.client import SessionsClient
from tests.support.data import TEST_DATA, shared_data_dir

TOKEN = "e2e-token"
SHARED = Path("chat") / "tau-bench" / "gpt-4o-airline.json"
FIXTURES = [TEST_DATA / "openai_chat" / "tau-bench-airline-3.json", TEST_DATA / "tau-bench" / "airline-sample.json"]
CODE_PATTERNS = (r"\b(?!HAT\d{3}\b)[A-Z0-9]{6}\b", r"\bHAT\d{3}\b", r"\b[a-z]+_[a-z]+_\d{4}\b")


def _inputs():
    params = [pytest.param(path, id=path.name) for path in FIXTURES]
    shared = shared_data_dir()
    if shared is not None and (shared / SHARED).is_file():
        params.append(pytest.param(shared / SHARED, id="gpt-4o-airline-200", marks=pytest.mark.slow))
    else:
        params.append(pytest.param(None, id="gpt-4o-airline-200", marks=pytest.mark.skip(
            reason=f"shared data not found ({SHARED}); set DURABLE_SESSIONS_SHARED_DATA")))
    return params


def _command() -> list[str]:
    script = Path(sys.executable).with_name("durable-sessions")
    return [str(script)] if script.exists() else [sys.executable, "-m", "runtime.cli.main"]


def _env() -> dict[str, str]:
    return {**os.environ, "DURABLE_SESSIONS_TOKEN": TOKEN, "PYTHONUNBUFFERED": "1"}


@pytest.fixture
def server(tmp_path):
    """A running server process; yields ``(process, url)`` and leaves stopping to the test."""
    ready = tmp_path / "ready.json"
    process = subprocess.Popen(
        [*_command(), "serve", "--bind", "127.0.0.1:0", "--data", str(tmp_path / "data"), "--ready-file", str(ready)],
        env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"server did not start: {process.communicate(timeout=5)}")
            time.sleep(0.05)
        yield process, json.loads(ready.read_text())["url"]
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*_command(), *args], env=_env(), capture_output=True, text=True, timeout=300)


def _text(message) -> str:
    return " ".join(p["text"] for p in message["parts"] if p.get("type") == "text")


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _searchable(message) -> str:
    """What search covers: the text parts, plus each tool call's name and the strings in its input."""
    tools = [p for p in message["parts"] if p.get("type", "").startswith("tool-")]
    inputs = [s for p in tools for s in _strings(p["input"])]
    return " ".join([_text(message), *(p["toolName"] for p in tools), *inputs])


def mentioned_code(messages) -> str | None:
    """A code the conversation's text mentions: a booking code used in a tool call, else the first
    booking-code-like token, flight number or user id (``None`` if it mentions none)."""
    text = " ".join(_text(m) for m in messages if m["role"] != "system")
    for message in messages:
        for part in message["parts"]:
            booked = part.get("input", {}).get("reservation_id") if isinstance(part.get("input"), dict) else None
            if isinstance(booked, str) and re.search(rf"\b{re.escape(booked)}\b", text):
                return booked
    for pattern in CODE_PATTERNS:
        found = re.search(pattern, text)
        if found:
            return found.group()
    return None


async def _verify(url, sessions):
    """Check every session's history and search; returns how many were checked with a code."""
    with_code = []
    async with SessionsClient(url, token=TOKEN) as client:
        limiter = trio.CapacityLimiter(16)

        async def check(session):
            async with limiter:
                handle = client.session(session.session_id)
                expected = [item.message for item in session.messages]
                assert await handle.get_history() == expected, session.session_id
                code = mentioned_code(expected)
                if code is None:
                    return
                word = re.compile(rf"\b{re.escape(code)}\b", re.I)
                mentioning = {m["id"] for m in expected if word.search(_searchable(m))}
                hits = await handle.search(code, limit=100)
                assert {hit["id"] for hit in hits} == mentioning, (session.session_id, code)
                assert {hit["id"] for hit in hits if word.search(hit["content"])} == {
                    m["id"] for m in expected if word.search(_text(m))}
                with_code.append(session.session_id)

        async with trio.open_nursery() as nursery:
            for session in sessions:
                nursery.start_soon(check, session)
        stats = await client.statistics()
    return len(with_code), stats


async def _hibernate_all(url):
    async with SessionsClient(url, token=TOKEN) as client:
        count = await client.hibernate()
        return count, await client.statistics()


@pytest.mark.parametrize("source", _inputs())
def test_imported_chats_survive_hibernation_and_the_server_stops_cleanly_on_sigterm(server, source):
    process, url = server
    sessions = read_conversations(source)
    total = sum(len(s.messages) for s in sessions)

    imported = _cli("import", str(source), "--url", url, "--no-progress")
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout == f"imported {len(sessions)} of {len(sessions)} sessions: {total} messages stored, " \
                              "0 already there\n"

    hibernated, stats = trio.run(_hibernate_all, url)
    assert hibernated == len(sessions)
    assert (stats["active"], stats["hibernated"], stats["activations"]) == (0, len(sessions), len(sessions))

    with_code, stats = trio.run(_verify, url, sessions)
    assert stats["activations"] == 2 * len(sessions)  # every session woke from hibernation to answer
    coded = [s.session_id for s in sessions if mentioned_code([item.message for item in s.messages])]
    assert with_code == len(coded) >= 1

    first = sessions[0]
    history = _cli("history", first.session_id, "--url", url, "--json")
    assert json.loads(history.stdout) == [item.message for item in first.messages]
    lines = _cli("history", first.session_id, "--url", url).stdout.splitlines()
    assert [line.split(" ", 1)[0] for line in lines] == [item.message["id"] for item in first.messages]
    stats_out = json.loads(_cli("stats", "--url", url).stdout)
    assert stats_out["hibernated"] + stats_out["active"] == len(sessions)

    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    assert stdout.splitlines()[-1] == "durable-sessions: stopped"
    assert "received SIGTERM: shutting down" in stderr
    assert "Traceback" not in stderr
