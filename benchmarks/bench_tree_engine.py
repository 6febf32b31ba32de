"""The message-tree engine against the hand-written SQLite store it replaced, in one run.

Run: ``.venv/bin/python benchmarks/bench_tree_engine.py [--before REV] [--sizes 10000,100000]``

``storage/tree`` runs the tree rules as operations that yield queries,
driven on apsw (:func:`storage.tree.steps.drive`). This loads the SQLite
store as it was at ``--before`` (default ``9c35d13``, the last commit before
the engine; read with ``git show``, so run it from a git checkout) next to
today's, on the same file, and times both through a :class:`actors.Session`
(``store_for``) and directly on the store, in alternating batches: CPU time
of this process per call (the machine is shared: CPU time is steadier than
wall time), median over the rounds. Each row prints ``after / before``
(goal: <= 1.05, issue 24):

* ``append_message`` (Session, default parent: the latest leaf), and the
  store's ``append`` alone;
* ``get_history()`` of the whole path (Session), and the store's ``path_json``;
* ``search()`` (Session, 20 hits) over the whole file;
* ``estimate_tokens()`` (Session: the latest leaf's running token total);
* ``get_recent_history(8 KiB)`` (Session: one bounded window).

Sessions of ``--sizes`` messages are bulk-loaded with today's ``append_chain``.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from actors.session import Session
from actors.session_messages import search_text
from actors.tokens import estimate_message_tokens, js_stringify
from storage import SqlStorage
from storage.fts import parse_query
from storage.messages import LATEST_LEAF, MessageStore, NewMessage

WORDS = ["flight", "reservation", "cancel", "baggage", "refund", "seat", "upgrade", "gold", "member", "economy", "business", "the", "a", "to", "for", "on", "my"]


def load_store_before(rev: str) -> type:
    """``MessageStore`` of ``storage/messages.py`` at ``rev``, loaded as ``storage._messages_before``."""
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:storage/messages.py"],
                            capture_output=True, text=True, check=True).stdout
    spec = importlib.util.spec_from_loader("storage._messages_before", loader=None)
    assert spec is not None
    module = types.ModuleType(spec.name)
    module.__package__ = "storage"
    sys.modules[spec.name] = module
    exec(compile(source, f"{rev}:storage/messages.py", "exec"), module.__dict__)  # noqa: S102 -- our own file, as it was
    store: type = module.MessageStore
    return store


def message(i: int, prefix: str = "p") -> dict:
    words = [WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(20)]
    return {"id": f"{prefix}{i}", "role": "user" if i % 2 == 0 else "assistant",
            "parts": [{"type": "text", "text": " ".join(words)}]}


def bulk_load(storage: SqlStorage, n: int) -> None:
    rows = []
    for i in range(n):
        m = message(i)
        rows.append(NewMessage(m["id"], m["role"], js_stringify(m), search_text(m["parts"]), "", estimate_message_tokens([m])))
    MessageStore(storage).append_chain(rows, None)


async def alternate(variants: dict[str, Callable[[], Awaitable[object] | object]], batch: int,
                    rounds: int) -> dict[str, float]:
    """Batches of each variant in turn, ``rounds`` times; median CPU microseconds per call."""
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            cpu = time.process_time()
            for _ in range(batch):
                result = fn()
                if hasattr(result, "__await__"):
                    await result
            samples[name].append((time.process_time() - cpu) / batch * 1e6)
    return {name: statistics.median(values) for name, values in samples.items()}


def report(name: str, timed: dict[str, float]) -> None:
    before, after = timed["before"], timed["after"]
    print(f"  {name:<34} before {before:10.1f} us  after {after:10.1f} us  after/before {after / before:5.3f}")


async def bench_size(folder: Path, before_store: type, n: int, rounds: int) -> None:
    storage = SqlStorage.open(folder / f"tree-{n}.sqlite3")
    t = time.perf_counter()
    bulk_load(storage, n)
    print(f"\n{n:,} messages (bulk-loaded in {time.perf_counter() - t:.1f} s)")
    sessions = {
        "before": Session(storage, store_for=lambda sid: before_store(storage, sid)),
        "after": Session(storage, store_for=lambda sid: MessageStore(storage, sid)),
    }
    stores = {"before": before_store(storage, ""), "after": MessageStore(storage, "")}
    counter = iter(range(n, n + 10**7))

    def appending(session: Session) -> Callable[[], Awaitable[object]]:
        return lambda: session.append_message(message(next(counter)))

    def storing(store: object) -> Callable[[], object]:
        def append() -> object:
            m = message(next(counter))
            return store.append(m["id"], m["role"], js_stringify(m), search_text(m["parts"]), LATEST_LEAF,  # type: ignore[attr-defined]
                                tokens=30)
        return append

    report("append_message (Session)", await alternate({k: appending(s) for k, s in sessions.items()}, 200, rounds))
    report("append (store)", await alternate({k: storing(s) for k, s in stores.items()}, 200, rounds))
    reads = max(2, 20_000 // n)
    report("get_history() (Session)", await alternate({k: s.get_history for k, s in sessions.items()}, reads, rounds))
    leaf = stores["after"].latest_leaf()
    report("path_json (store)",
           await alternate({k: (lambda s=s: s.path_json(leaf)) for k, s in stores.items()}, reads, rounds))
    for query in ("flight", "gold member"):
        report(f"search({query!r}) (Session)", await alternate(
            {k: (lambda s=s, q=query: s.search(q, limit=20)) for k, s in sessions.items()}, 5, rounds))
    parsed = parse_query("baggage refund")
    report("search (store, 2 words)", await alternate(
        {k: (lambda s=s: s.search(parsed, 20)) for k, s in stores.items()}, 5, rounds))
    report("estimate_tokens() (Session)",
           await alternate({k: s.estimate_tokens for k, s in sessions.items()}, 200, rounds))
    report("get_recent_history(8 KiB) (Session)", await alternate(
        {k: (lambda s=s: s.get_recent_history(8192)) for k, s in sessions.items()}, 200, rounds))
    storage.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="9c35d13", help="the revision whose storage/messages.py is 'before'")
    parser.add_argument("--sizes", default="10000,100000", help="session sizes, comma-separated")
    parser.add_argument("--rounds", type=int, default=9, help="alternating batches per variant")
    args = parser.parse_args()
    before_store = load_store_before(args.before)
    print(f"tree engine: CPU us per call, median of {args.rounds} alternating batches; before = {args.before}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(s) for s in args.sizes.split(",")):
            await bench_size(Path(tmp), before_store, n, args.rounds)


if __name__ == "__main__":
    trio.run(main)
