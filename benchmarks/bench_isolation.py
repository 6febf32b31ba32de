"""Isolation under hostile load: health latency and server memory while one client misbehaves.

Starts a real ``durable-sessions serve`` (``--repo`` picks whose code runs it,
so two versions can be compared) and runs three loads, one after the other,
while a prober sends ``GET /v1/health`` every 20 ms on its own keep-alive
connection:

* **heavy JSON body**: ``--bodies`` POSTs of one message whose ``parts`` is
  ``--parts`` empty objects (``{"id", "role", "parts": [{}, {}, ...]}``,
  the worst shape per byte for the decoder and the message checks). With
  ``--parts 0`` (the default) the count is the most the server's limits
  allow (``server.max_body_items`` and the parts limit), so the figures are
  those of "the worst body the limits allow"; pass the issue's 349525 to see
  a body past them;
* **heavy JSON batch** (without ``--parts``): one ``messages:batch`` of as
  many messages at the parts limit as ``server.max_body_items`` allows;
* **oversized text**: ``--bodies`` messages of one text part filling the
  8 MiB body limit, which the session shrinks to fit its row limit;
* **heavy msgpack frame**: ``--bodies`` WebSocket RPC frames of ``--frame-mib``
  MiB of empty msgpack arrays (``0x91 0x90 ...``: arrays of empty arrays);
* **idle flood**: ``--flood-rate`` connections a second that send nothing or
  half a request head and then hold the socket open, from ``127.0.0.2``
  (another loopback peer; ``--flood-from 127.0.0.1`` floods from the
  legitimate clients' own address), for ``--flood-s`` seconds, while legitimate clients
  from ``127.0.0.1`` send one ``POST /v1/sessions/<id>/messages`` each every
  50 ms, each on a new connection.

It prints, per load, the health probe's answered count and p50/p99/max (ms),
the server's CPU time per heavy request (what a request costs the event loop,
whatever else runs on the machine), the server's RSS growth (VmHWM, the peak, in MiB) and the statuses of the
heavy requests; for the flood, the legitimate requests answered (2xx) over
sent and their p99. Goals (issue 26): health p99 <= 100 ms and RSS growth
<= 64 MiB per heavy request; under the flood, >= 99 % of legitimate
requests answered with p99 <= 1 s.

It ends with one line per load: the goal met or NOT MET.

Run: ``.venv/bin/python benchmarks/bench_isolation.py [--repo PATH] [--only body|batch|text|frame|flood]``
(about a minute on 2 cores).
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
from functools import partial
from pathlib import Path

import msgpack
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from runtime.client.websocket import ConnectionClosed, WebSocketConnection  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from drill_flood import read_response, request_bytes  # noqa: E402

PROBE_EVERY_S = 0.02
ANSWER_TIMEOUT_S = 120.0
#: Issue 26's goals: health p99 and RSS growth per heavy request; under the flood, legitimate requests.
HEALTH_P99_MS = 100.0
RSS_GROWTH_MIB = 64.0
FLOOD_ANSWERED = 0.99
FLOOD_P99_MS = 1000.0
#: ``(load, met)`` of every load run, printed again at the end.
VERDICTS: list[tuple[str, bool]] = []


def verdict(load: str, met: bool, goal: str) -> None:
    """Print and remember whether ``load`` met ``goal``."""
    VERDICTS.append((load, met))
    print(f"goal ({goal}): {'met' if met else 'NOT MET'}")


# -- the server -------------------------------------------------------------------------------------


def start_server(repo: Path, folder: Path) -> tuple[subprocess.Popen, str]:
    ready = folder / "ready.json"
    args = [sys.executable, "-m", "runtime.cli", "--log-level", "WARNING", "serve", "--bind", "127.0.0.1:0",
            "--data", str(folder / "data"), "--ready-file", str(ready)]
    env = {**os.environ, "PYTHONPATH": str(repo)}
    env.pop("DURABLE_SESSIONS_TOKEN", None)
    log = (folder / "server.log").open("w")
    process = subprocess.Popen(args, cwd=repo, env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while not ready.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"server did not start: {(folder / 'server.log').read_text()}")
        time.sleep(0.05)
    return process, json.loads(ready.read_text())["url"]


def rss_mib(pid: int, field: str = "VmRSS") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) the process has used: load on the machine does not inflate it."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def reset_peak(pid: int) -> None:
    """Reset VmHWM to the current RSS (Linux 4.0+: write 5 to clear_refs); best effort."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        pass


# -- raw HTTP -----------------------------------------------------------------------------------------


async def one_request(address: tuple[str, int], method: str, path: str, body: bytes = b"",
                      source: str | None = None) -> tuple[int, bytes]:
    stream = await open_from(address, source)
    async with stream:
        await stream.send_all(request_bytes(f"{address[0]}:{address[1]}", method, path, body, close=True))
        status, _, body = await read_response(stream)
        return status, body


async def open_from(address: tuple[str, int], source: str | None) -> trio.SocketStream:
    if source is None:
        return await trio.open_tcp_stream(*address)
    sock = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_STREAM)
    try:
        await sock.bind((source, 0))
        await sock.connect(address)
    except BaseException:
        sock.close()
        raise
    return trio.SocketStream(sock)


# -- the health prober --------------------------------------------------------------------------------


class Prober:
    """``GET /v1/health`` every :data:`PROBE_EVERY_S` on one keep-alive connection; latencies in ms."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.address = address
        self.latencies: list[float] = []
        self.failures = 0

    async def run(self) -> None:
        request = request_bytes(f"{self.address[0]}:{self.address[1]}", "GET", "/v1/health", close=False)
        stream: trio.SocketStream | None = None
        while True:
            start = time.perf_counter()
            try:
                if stream is None:
                    stream = await trio.open_tcp_stream(*self.address)
                await stream.send_all(request)
                status, _, _ = await read_response(stream)
                if status != 200:
                    self.failures += 1
                self.latencies.append((time.perf_counter() - start) * 1000)
            except (OSError, EOFError, trio.BrokenResourceError):
                self.failures += 1
                stream = None
            await trio.sleep(max(0.0, PROBE_EVERY_S - (time.perf_counter() - start)))

    def p99(self) -> float:
        """The 99th percentile latency (ms); infinite when nothing was answered or a probe failed."""
        if not self.latencies or self.failures:
            return float("inf")
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]

    def summary(self) -> str:
        if not self.latencies:
            return f"health: none answered, {self.failures} failed"
        ordered = sorted(self.latencies)
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
        return (f"health: {len(ordered)} answered, {self.failures} failed, p50 {statistics.median(ordered):.1f} ms, "
                f"p99 {p99:.1f} ms, max {ordered[-1]:.1f} ms")


async def idle_cpu_s(address: tuple[str, int], pid: int) -> float:
    """CPU seconds per second the server spends answering the prober alone."""
    before, started = cpu_s(pid), time.perf_counter()
    await probed(address, partial(trio.sleep, 1.0))
    return (cpu_s(pid) - before) / (time.perf_counter() - started)


async def probed(address: tuple[str, int], load) -> tuple[Prober, object]:
    prober = Prober(address)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(prober.run)
        await trio.sleep(0.5)
        result = await load()
        await trio.sleep(0.3)
        nursery.cancel_scope.cancel()
    return prober, result


# -- loads -------------------------------------------------------------------------------------------


def parts_body(count: int, message_id: str, messages: int = 1) -> bytes:
    """One message of ``count`` empty parts, or (``messages`` > 1) a batch of that many such messages."""
    parts = ",".join(["{}"] * count)
    def one(message: str) -> str:
        return f'{{"id":"{message}","role":"user","parts":[' + parts + "]}"

    if messages == 1:
        return ('{"message":' + one(message_id) + "}").encode()
    batch = ",".join(one(f"{message_id}-{index}") for index in range(messages))
    return ('{"messages":[' + batch + "]}").encode()


async def heavy_bodies(address, pid: int, parts: int, bodies: int, messages: int = 1) -> None:
    size = len(parts_body(parts, "m", messages)) / 2**20
    what = f"a batch of {messages} messages" if messages > 1 else "one message"
    print(f"\n== heavy JSON body: {bodies} x {what} of {parts} empty parts ({size:.2f} MiB)")
    path = "messages:batch" if messages > 1 else "messages"

    async def load() -> list[str]:
        outcomes = []
        for index in range(bodies):
            status, body = await one_request(address, "POST", f"/v1/sessions/heavy-{index}/{path}",
                                             parts_body(parts, f"m{index}", messages))
            outcomes.append(f"{status} {body[:160].decode(errors='replace')}")
        return outcomes

    await measured(address, pid, load, bodies, "heavy JSON batch" if messages > 1 else "heavy JSON body")


async def oversized_text(address, pid: int, bodies: int) -> None:
    """One text part filling the body limit: within every bound, but over the row limit, so the
    session shrinks it (docs/behaviours.md §10); commas in it make the body's value count take
    its second, string-skipping pass."""
    text = "hello world, " * 640_000
    body = json.dumps({"message": {"id": "t", "role": "user", "parts": [{"type": "text", "text": text}]}}).encode()
    print(f"\n== oversized text: {bodies} x one message of one {len(text) / 2**20:.2f} MiB text part (shrunk to "
          "fit the row limit)")

    async def load() -> list[str]:
        outcomes = []
        for index in range(bodies):
            status, answer = await one_request(address, "POST", f"/v1/sessions/text-{index}/messages", body)
            outcomes.append(f"{status} {answer[:160].decode(errors='replace')}")
        return outcomes

    await measured(address, pid, load, bodies, "oversized text (shrunk)")


async def heavy_frames(address, pid: int, mib: float, bodies: int) -> None:
    count = int(mib * 2**20) - 40
    inner = b"\xdd" + (count).to_bytes(4, "big") + b"\x90" * count  # array32 of empty arrays
    frame = b"\x83\xa2id\x01\xa6method\xafappend_messages\xa6params" + inner
    print(f"\n== heavy msgpack WebSocket frame: {bodies} x {len(frame) / 2**20:.2f} MiB of empty arrays")

    async def load() -> list[str]:
        outcomes = []
        for index in range(bodies):
            url = f"ws://{address[0]}:{address[1]}/v1/sessions/frame-{index}/ws"
            try:
                ws = await WebSocketConnection.connect(url)
                try:
                    await ws.send(frame)
                    with trio.fail_after(ANSWER_TIMEOUT_S):
                        reply = await ws.receive()
                    outcomes.append(repr(msgpack.unpackb(reply) if isinstance(reply, bytes) else reply)[:200])
                finally:
                    await ws.aclose()
            except ConnectionClosed as closed:
                outcomes.append(f"closed {closed}")
        return outcomes

    await measured(address, pid, load, bodies, "heavy msgpack frame")


async def measured(address, pid: int, load, count: int, label: str) -> None:
    reset_peak(pid)
    before = rss_mib(pid)
    idle_cpu = await idle_cpu_s(address, pid)
    cpu_before, started = cpu_s(pid), time.perf_counter()
    prober, outcomes = await probed(address, load)
    cpu = cpu_s(pid) - cpu_before - idle_cpu * (time.perf_counter() - started)
    peak = rss_mib(pid, "VmHWM")
    print(prober.summary())
    print(f"server CPU: {1000 * cpu / max(1, count):.0f} ms per heavy request (beyond what the prober alone costs)")
    print(f"RSS: {before:.0f} MiB before, peak {peak:.0f} MiB: +{peak - before:.0f} MiB "
          f"(requests one at a time, so this is the growth per request)")
    for outcome in dict.fromkeys(outcomes):
        print(f"  answer: {outcome}")
    verdict(label, prober.p99() <= HEALTH_P99_MS and peak - before <= RSS_GROWTH_MIB,
            f"health p99 <= {HEALTH_P99_MS:.0f} ms, RSS growth <= {RSS_GROWTH_MIB:.0f} MiB per request")


async def idle_flood(address, pid: int, rate: float, seconds: float, source: str = "127.0.0.2") -> None:
    print(f"\n== idle flood: {rate:g} connections/s from {source} for {seconds:g} s "
          "(half send nothing, half half a head), legitimate appends from 127.0.0.1")
    idle: list[trio.SocketStream] = []
    refused_flood = [0]
    answered: list[float] = []
    statuses: dict[str, int] = {}

    async def flood() -> None:
        half = f"POST /v1/sessions/flood/messages HTTP/1.1\r\nHost: {address[0]}\r\nContent-Le".encode()
        index = 0
        deadline = trio.current_time() + seconds
        while trio.current_time() < deadline:
            try:
                stream = await open_from(address, source)
                if index % 2:
                    await stream.send_all(half)
                idle.append(stream)
            except OSError:
                refused_flood[0] += 1
            index += 1
            await trio.sleep(1 / rate)

    async def legitimate(nursery: trio.Nursery) -> None:
        await trio.sleep(1.0)  # let the flood fill up first
        deadline = trio.current_time() + seconds - 1.5
        index = 0
        while trio.current_time() < deadline:
            nursery.start_soon(one_legit, index)
            index += 1
            await trio.sleep(0.05)

    async def one_legit(index: int) -> None:
        body = json.dumps({"message": {"id": f"m{index}", "role": "user",
                                       "parts": [{"type": "text", "text": "hello"}]}}).encode()
        start = time.perf_counter()
        try:
            with trio.fail_after(30):
                status, _ = await one_request(address, "POST", f"/v1/sessions/legit-{index % 8}/messages", body)
            key = str(status)
            if 200 <= status < 300:
                answered.append((time.perf_counter() - start) * 1000)
        except (OSError, EOFError, trio.BrokenResourceError, trio.TooSlowError) as exc:
            key = type(exc).__name__
        statuses[key] = statuses.get(key, 0) + 1

    async def load() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(flood)
            await legitimate(nursery)

    reset_peak(pid)
    before = rss_mib(pid)
    prober, _ = await probed(address, load)
    still_open = 0
    for stream in idle:
        try:
            with trio.move_on_after(0.001):
                if await stream.receive_some(1) == b"":
                    continue
            still_open += 1
        except (OSError, trio.BrokenResourceError):
            continue
    for stream in idle:
        await trio.aclose_forcefully(stream)
    sent = sum(statuses.values())
    ordered = sorted(answered)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] if ordered else float("nan")
    print(prober.summary())
    print(f"legitimate: {len(answered)}/{sent} answered 2xx ({100 * len(answered) / max(1, sent):.1f} %), "
          f"p99 {p99:.0f} ms; statuses {statuses}")
    print(f"flood: {len(idle)} idle connections opened ({refused_flood[0]} connects failed), "
          f"{still_open} still open at the end; RSS +{rss_mib(pid, 'VmHWM') - before:.0f} MiB")
    verdict("idle flood", bool(sent) and len(answered) >= FLOOD_ANSWERED * sent and p99 <= FLOOD_P99_MS,
            f">= {100 * FLOOD_ANSWERED:.0f} % of legitimate requests answered, p99 <= {FLOOD_P99_MS:.0f} ms")


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as folder:
        process, url = start_server(args.repo, Path(folder))
        address = (url.split("//")[1].rsplit(":", 1)[0], int(url.rsplit(":", 1)[1]))
        try:
            await warm_up(address)
            print("\n== baseline: the prober alone for 3 s (what the machine's own load costs)")
            prober, _ = await probed(address, partial(trio.sleep, 3.0))
            print(prober.summary())
            if args.only in (None, "body"):
                parts = args.parts or limits_allow(args.repo)
                await heavy_bodies(address, process.pid, parts, args.bodies)
            if args.only in (None, "batch") and not args.parts:
                # the whole item bound spent on a batch of messages at the parts limit
                per_message, count = limits_allow(args.repo, batch=True)
                await heavy_bodies(address, process.pid, per_message, args.bodies, count)
            if args.only in (None, "text"):
                await oversized_text(address, process.pid, args.bodies)
            if args.only in (None, "frame"):
                await heavy_frames(address, process.pid, args.frame_mib, args.bodies)
            if args.only in (None, "flood"):
                await idle_flood(address, process.pid, args.flood_rate, args.flood_s, args.flood_from)
        finally:
            process.terminate()
            process.wait(30)
    print("\n== goals (issue 26)")
    for load, met in VERDICTS:
        print(f"{load}: {'met' if met else 'NOT MET'}")


async def warm_up(address: tuple[str, int]) -> None:
    """One small append and one read first: the server's one-time costs (the actor file template, modules
    imported on first use) are not charged to the first load measured."""
    body = json.dumps({"message": {"id": "w", "role": "user", "parts": [{"type": "text", "text": "hi"}]}}).encode()
    for method, payload in (("POST", body), ("GET", b"")):
        status, answer = await one_request(address, method, "/v1/sessions/warm-up/messages", payload)
        if status >= 300:
            raise SystemExit(f"warm-up {method} answered {status}: {answer[:200]!r}")


def limits_allow(repo: Path, batch: bool = False):
    """The most empty parts one message may have under the server's default limits (the issue's 349525
    where the code has no limits); with ``batch``, ``(parts per message, messages)`` of the largest batch
    the bounds allow (each empty part counts 2 values: the object and its place in ``parts``; each
    message 7 more: itself, its place, three members and its ``parts`` list)."""
    probe = ("from runtime.server.config import ServerSettings as S; from actors.session_messages import "
             "MAX_MESSAGE_PARTS as P; print(P, S().max_body_items)")
    try:
        out = subprocess.run([sys.executable, "-c", probe], cwd=repo, env={**os.environ, "PYTHONPATH": str(repo)},
                             capture_output=True, text=True, check=True).stdout
        most_parts, items = (int(value) for value in out.split())
    except (subprocess.CalledProcessError, ValueError):
        return (349525, 1) if batch else 349525
    parts = min(most_parts, (items - 10) // 2)
    if not batch:
        return parts
    return parts, max(1, (items - 3) // (2 * parts + 7))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--only", choices=("body", "batch", "text", "frame", "flood"))
    parser.add_argument("--parts", type=int, default=0)
    parser.add_argument("--bodies", type=int, default=3)
    parser.add_argument("--frame-mib", type=float, default=3.8)
    parser.add_argument("--flood-rate", type=float, default=160.0)
    parser.add_argument("--flood-s", type=float, default=10.0)
    parser.add_argument("--flood-from", default="127.0.0.2",
                        help="the flood's source address (127.0.0.1: the legitimate clients' own, so the "
                             "per-client cap cannot tell them apart)")
    trio.run(main, parser.parse_args())
