"""The cost of OpenTelemetry tracing (runtime.telemetry) on a served append: off, and on.

Run: ``.venv/bin/python benchmarks/bench_telemetry.py [--appends N] [--rounds R]`` (about a minute; the
``otel`` extra, in the ``test`` extra). Nothing of ``OTEL_*`` may be set in the environment.

One host in this process on a temporary folder, and its server's ASGI app called directly (no socket,
so the network's noise does not hide the difference): ``POST /v1/sessions/{id}/messages`` of a
~200-byte message, round robin over 20 sessions, through the whole middleware chain (the session
routes' short way, the turn, the SQLite commit). Three ways, interleaved round by round in one run (their order
rotating):

* ``baseline`` -- the chain without the tracing middleware (:class:`~runtime.telemetry.TraceRequests`
  unwrapped), tracing off: the server as it was before, but for the one-line hooks of the turn and
  activation, whose own cost is measured apart (``hook ns``: ``with telemetry.turn(actor_id): pass``
  while off) and printed as a share of an append;
* ``off`` -- as shipped with the extra installed and no ``OTEL_*`` configuration;
* ``on`` -- tracing on, the SDK's ``TracerProvider`` with a ``SimpleSpanProcessor`` into an
  ``InMemorySpanExporter`` (every span made and handed over at once: the most it can cost in-process).

Printed: the median per-append time of each way in microseconds and its ratio to ``baseline``
(goal for ``off``: at most 1.02).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from runtime import open_host, telemetry  # noqa: E402
from runtime.server.app import bind_sessions, create_app  # noqa: E402

TOKEN = "bench-token-0123456789"
SESSIONS = 20


def _scope(path: str, body: bytes) -> dict[str, Any]:
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": path, "raw_path": path.encode("ascii"), "query_string": b"", "root_path": "",
        "headers": [(b"host", b"localhost"), (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode("ascii")),
                    (b"authorization", f"Bearer {TOKEN}".encode("ascii"))],
        "client": ("127.0.0.1", 40000), "server": ("localhost", 80),
    }


async def _append(asgi: Any, session: str, message_id: str) -> None:
    body = json.dumps({"message": {"id": message_id, "role": "user", "parts": [
        {"type": "text", "text": "a benchmark message of about two hundred bytes, " * 4}]}}).encode("utf-8")
    sent = False
    status = 0

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    await asgi(_scope(f"/v1/sessions/{session}/messages", body), receive, send)
    if status != 201:
        raise RuntimeError(f"append answered {status}")


async def main(appends: int, rounds: int) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    if telemetry.configured_by_environment():
        raise SystemExit("unset the OTEL_* variables first: this benchmark measures tracing off")
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with tempfile.TemporaryDirectory() as folder:
        async with open_host(Path(folder) / "data") as host:
            bind_sessions(host)
            app = create_app(host, token=TOKEN, max_body_bytes=1 << 20)
            traced = app.asgi_app
            assert isinstance(traced, telemetry.TraceRequests)
            untraced = traced.app
            ways = {"baseline": (untraced, None), "off": (traced, None), "on": (traced, provider)}
            times: dict[str, list[float]] = {way: [] for way in ways}
            counter = 0
            for session in range(SESSIONS):  # every actor awake before timing
                counter += 1
                await _append(traced, f"s{session}", f"warm{counter}")
            order = list(ways)
            for _ in range(rounds + 1):  # the first round warms up and is not counted
                order = order[1:] + order[:1]  # each way in each place in turn: no order bias
                for way in order:
                    asgi, tracer_provider = ways[way]
                    telemetry.configure(tracer_provider)
                    started = time.perf_counter()
                    for i in range(appends):
                        counter += 1
                        await _append(asgi, f"s{i % SESSIONS}", f"m{counter}")
                    times[way].append((time.perf_counter() - started) / appends)
                    telemetry.configure(None)
                    exporter.clear()
            for way in times:
                times[way] = times[way][1:]
            actor_id = host.namespace("sessions").id_from_name("s0")
    hook_runs = 200_000
    started = time.perf_counter()
    for _ in range(hook_runs):
        with telemetry.turn(actor_id):
            pass
    hook_s = (time.perf_counter() - started) / hook_runs
    base = statistics.median(times["baseline"])
    print(f"{'way':10} {'append us':>10} {'ratio':>7}")
    for way, values in times.items():
        median = statistics.median(values)
        print(f"{way:10} {median * 1e6:10.1f} {median / base:7.3f}")
    print(f"hook ns    {hook_s * 1e9:10.1f} {hook_s / base:7.5f}  (one off hook, as a share of a baseline append)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--appends", type=int, default=100, help="appends per way and round (default 100)")
    parser.add_argument("--rounds", type=int, default=60, help="rounds counted (default 60)")
    args = parser.parse_args()
    trio.run(main, args.appends, args.rounds)
