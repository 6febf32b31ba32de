"""LangGraph checkpoint put/get latency: thread actors against ``langgraph-checkpoint-sqlite``'s saver.

Run: ``.venv/bin/python benchmarks/bench_langgraph.py [--threads N]`` (about a minute; extra ``langgraph``
plus ``langgraph-checkpoint-sqlite``, both in the ``test`` extra).

The workload is one real graph: a ``StateGraph`` of four nodes (a chat turn
appending ~300-byte messages to a list channel) run once per thread with
an in-memory saver that records every ``put`` and ``put_writes`` LangGraph
makes. Each saver then replays the same calls for ``--threads`` threads
(default 50: 12 puts and 12 writes batches each, as the graph made them), and
after each put reads the thread's latest checkpoint back (``get_tuple``, what
LangGraph does before every step). Printed: median and p90 of each call in
milliseconds, and the ratio to the SQLite saver measured in the same run.

Savers, all on files in a temporary folder:

* ``sqlite`` -- ``SqliteSaver`` on one ``sqlite3`` connection (the baseline;
  SQLite's defaults: rollback journal, ``synchronous=FULL``: an fsync per commit);
* ``sqlite-wal`` -- the same with ``journal_mode=WAL`` and ``synchronous=NORMAL``, the
  durability the host's actor files have by default (no fsync per commit);
* ``embedded`` -- :class:`runtime.checkpointer.EmbeddedCheckpointer`, a host in
  this process (one actor file per thread, WAL, ``synchronous=NORMAL`` -- the
  host's ``normal`` durability), called from the host's trio loop;
* ``http`` -- :class:`runtime.client.DurableCheckpointer` against a
  ``durable-sessions serve`` on loopback (msgpack over HTTP/1.1, keep-alive);
  ``http-sync`` its blocking methods.

``http floor`` is ``GET /v1/health`` of the same server with a bare
``httpx.Client``: one loopback round trip that does no work, the least any
call over HTTP costs on this machine.
"""

from __future__ import annotations

import argparse
import json
import operator
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Annotated, Any, TypedDict

import httpx
import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.checkpoint.sqlite import SqliteSaver  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402

from runtime.checkpointer import EmbeddedCheckpointer  # noqa: E402
from runtime.client import DurableCheckpointer  # noqa: E402
from runtime.host.actor_host import open_host  # noqa: E402

TEXT = "lorem ipsum dolor sit amet " * 11  # ~300 bytes


class Chat(TypedDict):
    messages: Annotated[list[str], operator.add]


def build_graph() -> StateGraph:
    def user(state: Chat) -> dict:
        return {"messages": [f"user {len(state['messages'])}: {TEXT}"]}

    def think(state: Chat) -> dict:
        return {"messages": [f"thought {len(state['messages'])}: {TEXT}"]}

    def tool(state: Chat) -> dict:
        return {"messages": [f"tool {len(state['messages'])}: {TEXT}"]}

    def answer(state: Chat) -> dict:
        return {"messages": [f"answer {len(state['messages'])}: {TEXT}"]}

    builder = StateGraph(Chat)
    for name, node in (("user", user), ("think", think), ("tool", tool), ("answer", answer)):
        builder.add_node(name, node)
    builder.add_edge(START, "user")
    builder.add_edge("user", "think")
    builder.add_edge("think", "tool")
    builder.add_edge("tool", "answer")
    builder.add_edge("answer", END)
    return builder


class Recorder(InMemorySaver):
    """An in-memory saver that keeps every put and put_writes LangGraph made, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def put(self, config, checkpoint, metadata, new_versions):  # type: ignore[no-untyped-def]
        self.calls.append(("put", (config, checkpoint, metadata, new_versions)))
        return super().put(config, checkpoint, metadata, new_versions)

    def put_writes(self, config, writes, task_id, task_path=""):  # type: ignore[no-untyped-def]
        self.calls.append(("put_writes", (config, writes, task_id, task_path)))
        return super().put_writes(config, writes, task_id, task_path)


def record_workload() -> list[tuple[str, tuple[Any, ...]]]:
    """The calls of three chat turns of the graph on one thread (``thread_id`` ``"recorded"``)."""
    recorder = Recorder()
    graph = build_graph().compile(checkpointer=recorder)
    config = {"configurable": {"thread_id": "recorded"}}
    for _ in range(3):
        graph.invoke({"messages": []}, config)
    return recorder.calls


def retarget(args: tuple[Any, ...], thread_id: str) -> tuple[Any, ...]:
    config = args[0]
    configurable = dict(config["configurable"], thread_id=thread_id)
    return ({**config, "configurable": configurable}, *args[1:])


class Timings:
    def __init__(self) -> None:
        self.put: list[float] = []
        self.writes: list[float] = []
        self.get: list[float] = []

    def row(self, name: str, base: Timings | None) -> str:
        cells = []
        for label in ("put", "writes", "get"):
            values = sorted(getattr(self, label))
            median = statistics.median(values) * 1000
            p90 = values[int(len(values) * 0.9)] * 1000
            ratio = ""
            if base is not None:
                ratio = f" ({median / (statistics.median(getattr(base, label)) * 1000):.2f}x)"
            cells.append(f"{label} {median:6.3f} / {p90:6.3f}{ratio:>9}")
        return f"{name:<10} " + "   ".join(cells)


def replay_sync(saver: Any, calls: list, threads: int) -> Timings:
    timings = Timings()
    for n in range(threads):
        thread_id = f"bench-{n}-{uuid.uuid4().hex[:6]}"
        for kind, args in calls:
            args = retarget(args, thread_id)
            started = time.perf_counter()
            if kind == "put":
                saved = saver.put(*args)
                timings.put.append(time.perf_counter() - started)
                started = time.perf_counter()
                assert saver.get_tuple({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}) is not None
                timings.get.append(time.perf_counter() - started)
                del saved
            else:
                saver.put_writes(*args)
                timings.writes.append(time.perf_counter() - started)
    return timings


async def replay_async(saver: Any, calls: list, threads: int) -> Timings:
    timings = Timings()
    for n in range(threads):
        thread_id = f"bench-{n}-{uuid.uuid4().hex[:6]}"
        for kind, args in calls:
            args = retarget(args, thread_id)
            started = time.perf_counter()
            if kind == "put":
                await saver.aput(*args)
                timings.put.append(time.perf_counter() - started)
                started = time.perf_counter()
                assert await saver.aget_tuple({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})
                timings.get.append(time.perf_counter() - started)
            else:
                await saver.aput_writes(*args)
                timings.writes.append(time.perf_counter() - started)
    return timings


def start_server(folder: Path) -> tuple[subprocess.Popen, str]:
    ready = folder / "ready.json"
    process = subprocess.Popen(
        [str(Path(sys.executable).with_name("durable-sessions")), "--log-level", "WARNING", "serve",
         "--bind", "127.0.0.1:0", "--data", str(folder / "served"), "--ready-file", str(ready)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not ready.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("the server did not start")
        time.sleep(0.05)
    return process, json.loads(ready.read_text())["url"]


async def main(threads: int) -> None:
    calls = record_workload()
    puts = sum(1 for kind, _ in calls if kind == "put")
    print(f"workload: {puts} puts and {len(calls) - puts} put_writes per thread (3 chat turns), {threads} threads")
    print("median / p90 in ms, (ratio to sqlite)")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        warm = max(2, threads // 10)
        connection = sqlite3.connect(folder / "sqlite.db", check_same_thread=False)
        sqlite_saver = SqliteSaver(connection)
        replay_sync(sqlite_saver, calls, warm)
        base = replay_sync(sqlite_saver, calls, threads)
        connection.close()
        print(base.row("sqlite", None))
        connection = sqlite3.connect(folder / "sqlite-wal.db", check_same_thread=False)
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")
        wal_saver = SqliteSaver(connection)
        replay_sync(wal_saver, calls, warm)
        wal = replay_sync(wal_saver, calls, threads)
        connection.close()
        print(wal.row("sqlite-wal", base))

        async with open_host(folder / "actors") as host:
            embedded = EmbeddedCheckpointer(host)
            await replay_async(embedded, calls, warm)
            print((await replay_async(embedded, calls, threads)).row("embedded", base))

        process, url = start_server(folder)
        try:
            async with DurableCheckpointer(url) as saver:
                await replay_async(saver, calls, warm)
                print((await replay_async(saver, calls, threads)).row("http", base))
            with DurableCheckpointer(url) as sync_saver:
                replay_sync(sync_saver, calls, warm)
                print(replay_sync(sync_saver, calls, threads).row("http-sync", base))
            with httpx.Client(base_url=url) as bare:
                floor = []
                for _ in range(300):
                    started = time.perf_counter()
                    bare.get("/v1/health")
                    floor.append(time.perf_counter() - started)
            print(f"http floor (GET /v1/health) {statistics.median(floor) * 1000:.3f} ms median")
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=30)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=50)
    trio.run(main, parser.parse_args().threads)
