"""Server throughput: appends/s and history reads/s over HTTP and one WebSocket, against the framework ceiling.

Two server processes run side by side on loopback:

* the real ``durable-sessions serve`` (default SessionAgent config, temp data folder);
* a bare quart-trio app on hypercorn (``--baseline`` mode of this script) whose
  routes answer a constant: ``GET /const``, ``POST /const`` (reads the body) and
  a WebSocket that answers every RPC frame with a constant result.

This process is the client (trio; the project's :class:`SessionsClient` on
httpx for HTTP, its wsproto socket for WebSocket), so both servers are
measured through exactly the same client code. For each transport and 1, 8
and 64 concurrent callers it runs each operation for ``--seconds`` and
repeats ``--repeats`` times; it prints the median rate (operations per
second), the median latency, and the ratio to the constant route.

* HTTP: each caller appends to / reads its own session (``bench-http-<i>``),
  over one shared connection pool. Reads return a 50-message history.
* WebSocket: one socket to one session, all callers pipelining RPC frames on
  it (replies matched by id). Reads return a 50-message history.

Run: ``.venv/bin/python benchmarks/bench_server.py [--seconds 2] [--repeats 3]``
(about 2-3 minutes with the defaults on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from runtime.client import SessionsClient  # noqa: E402

CONCURRENCY = (1, 8, 64)
HISTORY_LENGTH = 50
TEXT = ("I need to change my flight to Friday morning and keep the same seat if possible, "
        "the booking reference is in my email from last week")


# -- the bare framework app (``--baseline``) --------------------------------------------------------


def run_baseline(ready_file: Path) -> None:
    """Serve the constant routes on a free loopback port; write the URL to ``ready_file``."""
    from hypercorn.config import Config
    from hypercorn.trio import serve
    from quart import request, websocket
    from quart_trio import QuartTrio

    app = QuartTrio(__name__)

    @app.get("/const")
    async def const_get():
        return {"ok": True}

    @app.post("/const")
    async def const_post():
        await request.get_data()
        return {"ok": True}

    @app.websocket("/v1/sessions/<sid>/ws")
    async def const_ws(sid):
        await websocket.accept()
        while True:
            frame = json.loads(await websocket.receive())
            await websocket.send(json.dumps({"id": frame["id"], "result": True}))

    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None

    async def main():
        async with trio.open_nursery() as nursery:
            urls = await nursery.start(serve, app, config)
            ready_file.write_text(json.dumps({"url": urls[0]}))

    trio.run(main)


# -- processes -------------------------------------------------------------------------------------------


def start(command: list[str], ready_file: Path) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not ready_file.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"server did not start: {command}")
        time.sleep(0.05)
    return process, json.loads(ready_file.read_text())["url"]


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()


# -- measuring ---------------------------------------------------------------------------------------------


async def measure(op: Callable[[int, int], Awaitable[None]], callers: int, seconds: float) -> tuple[float, float]:
    """``(operations per second, median latency in ms)`` of ``callers`` tasks looping ``op`` for ``seconds``."""
    latencies: list[float] = []
    start = time.perf_counter()
    deadline = start + seconds

    async def caller(i: int) -> None:
        n = 0
        while time.perf_counter() < deadline:
            began = time.perf_counter()
            await op(i, n)
            latencies.append(time.perf_counter() - began)
            n += 1

    async with trio.open_nursery() as nursery:
        for i in range(callers):
            nursery.start_soon(caller, i)
    elapsed = time.perf_counter() - start
    return len(latencies) / elapsed, statistics.median(latencies) * 1000


async def cell(op, callers, args) -> tuple[float, float]:
    runs = [await measure(op, callers, args.seconds) for _ in range(args.repeats)]
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def message(tag: str) -> dict:
    return {"id": tag, "role": "user", "parts": [{"type": "text", "text": TEXT}]}


async def prepare(client: SessionsClient) -> None:
    history = [message(f"h{i}") for i in range(HISTORY_LENGTH)]
    for i in range(max(CONCURRENCY)):
        await client.session(f"bench-http-read-{i}").append_messages(history)
    await client.session("bench-ws-read").append_messages(history)


async def bench(args, server_url: str, base_url: str) -> list[tuple]:
    rows = []
    async with SessionsClient(server_url, timeout=60) as client, SessionsClient(base_url, timeout=60) as base:
        await prepare(client)
        rounds = {"n": 0}

        for callers in CONCURRENCY:
            rounds["n"] += 1
            r = rounds["n"]

            async def http_append(i, n):
                await client.session(f"bench-http-{i}").append_message(message(f"r{r}-{n}"))

            async def http_read(i, n):
                await client.session(f"bench-http-read-{i}").get_history()

            async def http_get_const(i, n):
                await base.request("GET", "/const")

            async def http_post_const(i, n):
                await base.request("POST", "/const", body={"message": message(f"r{r}-{n}")})

            rows.append(("HTTP", "append", callers, *await cell(http_append, callers, args),
                         *await cell(http_post_const, callers, args)))
            rows.append(("HTTP", "history", callers, *await cell(http_read, callers, args),
                         *await cell(http_get_const, callers, args)))

        async with client.session("bench-ws").websocket() as socket, \
                client.session("bench-ws-read").websocket() as reader, \
                base.session("const").websocket() as const:
            for callers in CONCURRENCY:
                tag = f"ws{callers}"

                async def ws_append(i, n):
                    await socket.call("append_message", message(f"{tag}-{i}-{n}"))

                async def ws_read(i, n):
                    await reader.call("get_history")

                async def ws_const(i, n):
                    await const.call("get_history")

                constant = await cell(ws_const, callers, args)
                rows.append(("WebSocket", "append", callers, *await cell(ws_append, callers, args), *constant))
                rows.append(("WebSocket", "history", callers, *await cell(ws_read, callers, args), *constant))
    return rows


def report(rows: list[tuple], args) -> None:
    print(f"\nmedian of {args.repeats} runs x {args.seconds:g} s; history = {HISTORY_LENGTH} messages; "
          f"constant route = bare quart-trio on hypercorn, same client")
    print(f"{'transport':<10} {'op':<8} {'callers':>7} {'ops/s':>9} {'p50 ms':>8} {'const ops/s':>12} "
          f"{'const p50':>10} {'ratio':>6}")
    for transport, op, callers, rate, p50, const_rate, const_p50 in rows:
        print(f"{transport:<10} {op:<8} {callers:>7} {rate:>9.0f} {p50:>8.2f} {const_rate:>12.0f} {const_p50:>10.2f} "
              f"{rate / const_rate:>6.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="seconds per run (default 2)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per cell (default 3)")
    parser.add_argument("--baseline", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.baseline is not None:
        run_baseline(args.baseline)
        return
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        cli = Path(sys.executable).with_name("durable-sessions")
        server, server_url = start(
            [str(cli), "--log-level", "WARNING", "serve", "--bind", "127.0.0.1:0", "--data", str(tmp_path / "data"),
             "--ready-file", str(tmp_path / "server.json")], tmp_path / "server.json")
        baseline, base_url = start([sys.executable, __file__, "--baseline", str(tmp_path / "base.json")],
                                   tmp_path / "base.json")
        try:
            print(f"server {server_url} (pid {server.pid}), constant app {base_url} (pid {baseline.pid}); "
                  f"{os.cpu_count()} CPUs")
            rows = trio.run(bench, args, server_url, base_url)
        finally:
            stop(server)
            stop(baseline)
    report(rows, args)


if __name__ == "__main__":
    main()
