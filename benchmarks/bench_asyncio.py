"""asyncio vs trio: the Session API on both loops, the host from asyncio, and the OpenAI Agents SDK sessions.

Run: ``.venv/bin/python benchmarks/bench_asyncio.py``

Prints medians of repeated rounds (microseconds per operation):

* **Session API**: ``append_message`` and ``get_history`` (50 messages) of one
  in-process Session, the same code run by ``trio.run`` and by ``asyncio.run``;
* **host calls**: ``await stub.get_path_length()`` on an active actor -- the
  host in the caller's trio loop (``open_host``), against the host in a
  thread of its own (``runtime.testing_asyncio``) called from asyncio and
  from trio: what the thread costs;
* **primitives**: lock, event and sleep(0) of ``anyio`` against ``trio``'s own,
  under trio: what running the host itself on anyio would add per use;
* **Agents SDK sessions**: one turn's ``add_items`` + ``get_items`` on
  ``EmbeddedAgentsSession`` against the SDK's ``SQLiteSession``.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agents import SQLiteSession  # noqa: E402

from actors import Session, SessionAgent, SessionConfig  # noqa: E402
from actors.openai_agents import EmbeddedAgentsSession  # noqa: E402
from runtime import open_host  # noqa: E402
from runtime.testing_asyncio import open_threaded_host  # noqa: E402
from storage import SqlStorage  # noqa: E402

ROUNDS = 7
TURN = [
    {"role": "user", "content": "What's the weather in Paris?"},
    {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city":"Paris"}', "id": "fc1"},
    {"type": "function_call_output", "call_id": "c1", "output": "Sunny, 21 °C"},
    {"id": "msg1", "type": "message", "role": "assistant", "status": "completed",
     "content": [{"type": "output_text", "text": "Paris is sunny.", "annotations": [], "logprobs": []}]},
]


async def per_op(fn: Callable[[], Awaitable[object]], count: int) -> float:
    """Median microseconds per ``await fn()`` over :data:`ROUNDS` rounds of ``count`` calls."""
    rounds = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for _ in range(count):
            await fn()
        rounds.append((time.perf_counter() - start) / count * 1e6)
    return statistics.median(rounds)


def text(n: int) -> dict:
    return {"id": f"m{n}", "role": "user", "parts": [{"type": "text", "text": f"message number {n} about exports"}]}


async def session_api() -> tuple[float, float]:
    session = Session.create(SqlStorage.open(":memory:")).for_session("bench")
    numbers = iter(range(10**9))
    append = await per_op(lambda: session.append_message(text(next(numbers))), 200)
    await session.clear_messages()
    for n in range(50):
        await session.append_message(text(n))
    return append, await per_op(session.get_history, 200)


async def host_calls_in_trio(data: Path) -> float:
    async with open_host(data) as host:
        stub = host.bind("bench", SessionAgent, env=SessionConfig(compaction=None)).get_by_name("a")
        await stub.get_path_length()
        return await per_op(stub.get_path_length, 500)


async def host_calls_through_thread(data: Path) -> float:
    async with open_threaded_host(data) as host:
        stub = host.bind("bench", SessionAgent, env=SessionConfig(compaction=None)).get_by_name("a")
        await stub.get_path_length()
        return await per_op(stub.get_path_length, 500)


async def primitives() -> dict[str, tuple[float, float]]:
    async def lock_with(lock) -> None:
        async with lock:
            pass

    async def event_with(make) -> None:
        event = make()
        event.set()
        await event.wait()

    anyio_lock, trio_lock = anyio.Lock(), trio.Lock()
    return {
        "lock acquire+release": (await per_op(lambda: lock_with(anyio_lock), 20_000),
                                 await per_op(lambda: lock_with(trio_lock), 20_000)),
        "event create+set+wait": (await per_op(lambda: event_with(anyio.Event), 20_000),
                                  await per_op(lambda: event_with(trio.Event), 20_000)),
        "sleep(0)": (await per_op(lambda: anyio.sleep(0), 20_000), await per_op(lambda: trio.sleep(0), 20_000)),
    }


async def agents_sessions() -> tuple[float, float]:
    async def turn(memory) -> None:
        await memory.add_items(TURN)
        await memory.get_items()

    ours = EmbeddedAgentsSession(Session.create(SqlStorage.open(":memory:")).for_session("bench"))
    sdk = SQLiteSession("bench")
    result = await per_op(lambda: turn(ours), 20), await per_op(lambda: turn(sdk), 20)
    sdk.close()
    return result


def main() -> None:
    print("Session API (us per call)            trio      asyncio")
    trio_append, trio_history = trio.run(session_api)
    asyncio_append, asyncio_history = asyncio.run(session_api())
    print(f"  append_message                 {trio_append:8.1f} {asyncio_append:12.1f}")
    print(f"  get_history (50 messages)      {trio_history:8.1f} {asyncio_history:12.1f}")

    with tempfile.TemporaryDirectory() as folder:
        direct = trio.run(host_calls_in_trio, Path(folder) / "direct")
        from_asyncio = asyncio.run(host_calls_through_thread(Path(folder) / "asyncio"))
        from_trio = trio.run(host_calls_through_thread, Path(folder) / "trio")
    print("\nhost call: await stub.get_path_length() (us per call)")
    print(f"  host in the caller's trio loop          {direct:8.1f}")
    print(f"  host in its own thread, from asyncio    {from_asyncio:8.1f}  ({from_asyncio / direct:.1f}x)")
    print(f"  host in its own thread, from trio       {from_trio:8.1f}  ({from_trio / direct:.1f}x)")

    print("\nprimitives under trio (us per use)     anyio      trio")
    for name, (with_anyio, with_trio) in trio.run(primitives).items():
        print(f"  {name:<30} {with_anyio:8.2f} {with_trio:9.2f}  ({with_anyio / with_trio:.1f}x)")

    ours, sdk = asyncio.run(agents_sessions())
    print("\nAgents SDK session: one turn's add_items + get_items, growing history (us per turn)")
    print(f"  EmbeddedAgentsSession          {ours:8.1f}")
    print(f"  SDK SQLiteSession              {sdk:8.1f}  (ratio {ours / sdk:.2f})")


if __name__ == "__main__":
    main()
