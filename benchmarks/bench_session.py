"""Session message-tree benchmark: per-operation medians against raw apsw.

Run: ``.venv/bin/python benchmarks/bench_session.py [--sizes 100,10000,100000]``

For each session size it times, as medians in milliseconds:

* ``append_message`` (one transaction each) against raw apsw running the
  same statements (the latest leaf and its place in one lookup, insert,
  FTS row) and against the bare minimum (message row + FTS row);
* ``get_history()`` of the whole path against the same statement (the path
  as one JSON array) fetched raw, raw + one ``json.loads``, and the
  row-by-row way (a row per message, ``json.loads`` each);
* ``get_recent_history(8 KiB)``, ``get_path_length()``, ``get_latest_leaf()``
  (all flat: they read a window or one row); ``get_history_row_stats()``;
* ``search`` over the largest session against the same two statements run
  raw, and against plain ``MATCH ? ORDER BY rank LIMIT 20`` on the FTS table;
* ``append_message`` when the Session has a broadcaster (every real agent
  has one: each append then broadcasts its token estimate), plain and with
  two context blocks, a cached prompt and a compaction overlay on the path,
  and ``estimate_tokens()`` alone -- against the original's 1.2 ms (100
  messages) and 588 ms (10k), which re-read and re-estimate the history on
  every append (docs/performance.md);
* a batch of 1,000 messages stored with ``append_messages`` (one
  transaction, one broadcast) against 1,000 ``append_message`` calls, both
  with a broadcaster, as a real agent has;
* what indexing costs by kind of text: ``append_message`` of the usual
  (ASCII) messages, of messages whose words are glued to CJK text (split
  for the porter index by ``storage.fts.indexed_text``) and of messages
  with a tool call (indexed a second time with their tool calls), and
  ``indexed_text`` alone.

Messages are ~20-word chunks of the tau-bench airline chats when
``/work/shared/data/chat/tau-bench/gpt-4o-airline.json`` exists, generated
sentences otherwise. Sessions are bulk-loaded with the rows a Session would
write, then measured through the public API on a real WAL file.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from actors.session import Session  # noqa: E402
from actors.tokens import estimate_message_tokens, js_stringify  # noqa: E402
from storage import (
    SqlStorage,  # noqa: E402
    fts,  # noqa: E402
)
from storage.tree import sqlite as sql  # noqa: E402
from storage.tree.places import child_place  # noqa: E402

CORPUS = Path("/work/shared/data/chat/tau-bench/gpt-4o-airline.json")
WORDS_PER_MESSAGE = 20
SEARCH_QUERIES = ("flight", "cancel reservation", "baggage allowance", '"gold member"')


# -- data -------------------------------------------------------------------------


def corpus_words() -> list[str]:
    """Words of the airline chats (user and assistant turns), or generated ones."""
    if CORPUS.exists():
        words: list[str] = []
        for task in json.loads(CORPUS.read_text(encoding="utf-8")):
            for turn in task.get("traj", []):
                if turn.get("role") in ("user", "assistant") and isinstance(turn.get("content"), str):
                    words.extend(turn["content"].split())
        if len(words) > 10 * WORDS_PER_MESSAGE:
            return words
    rng = random.Random(7)
    vocab = ("flight reservation cancel baggage refund seat upgrade gold member economy business "
             "the a to for on my").split()
    return [rng.choice(vocab) for _ in range(200_000)]


class Messages:
    """Deterministic messages ``p<i>`` whose text walks through the corpus."""

    def __init__(self, words: list[str], prefix: str = "p") -> None:
        self.words = words
        self.prefix = prefix

    def __call__(self, i: int) -> dict:
        start = (i * WORDS_PER_MESSAGE) % (len(self.words) - WORDS_PER_MESSAGE)
        text = " ".join(self.words[start : start + WORDS_PER_MESSAGE])
        role = "user" if i % 2 == 0 else "assistant"
        return {"id": f"{self.prefix}{i}", "role": role, "parts": [{"type": "text", "text": text}]}


def bulk_load(storage: SqlStorage, make: Messages, n: int) -> str:
    """Write a chain of ``n`` messages exactly as Session would (one transaction); returns the leaf id."""
    con = storage.connection
    with storage.transaction():
        parent, link, depth_of = None, None, {}
        for i in range(n):
            m = make(i)
            content = js_stringify(m)
            place = child_place(link, len(content.encode()), estimate_message_tokens([m]))
            parent_seq = None if link is None else link[0]
            [(seq,)] = con.execute(
                sql.INSERT, ("", m["id"], parent, parent_seq, m["role"], content, *place)
            ).fetchall()
            depth, path_bytes, _, path_tokens, jump = place
            jump = seq if jump is None else jump
            depth_of[seq] = (depth, jump)
            jump_depth, jump_jump = depth_of[jump]
            link = (seq, depth, path_bytes, path_tokens, jump_depth, jump_jump, depth_of[jump_jump][0])
            for stmt, params in fts.index_rows(sql.FTS_TABLE, seq, m["parts"][0]["text"]):
                con.execute(stmt, params)
            parent = m["id"]
    return parent


# -- timing -----------------------------------------------------------------------


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def time_calls(fn: Callable[[], object], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    return median_ms(samples)


async def time_async(fn, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        t = time.perf_counter()
        await fn()
        samples.append(time.perf_counter() - t)
    return median_ms(samples)


def row(name: str, ours: float, raw: float, extra: str = "") -> None:
    print(f"  {name:<44} {ours:9.3f} ms  raw {raw:9.3f} ms  x{ours / raw:6.2f}  {extra}")


# -- operations done raw -------------------------------------------------------------


def raw_append_same_sql(con, m: dict) -> None:
    """The statements MessageStore.append runs, without the Session around them."""
    content = json.dumps(m, separators=(",", ":"), ensure_ascii=False)
    with con:
        found = con.execute(sql.LATEST_LINK, ("",)).fetchone()
        parent, link = (None, None) if found is None else (found[0], found[1:])
        place = child_place(link, len(content.encode()), 30)
        parent_seq = None if link is None else link[0]
        [(seq,)] = con.execute(sql.INSERT, ("", m["id"], parent, parent_seq, m["role"], content, *place)).fetchall()
        con.execute("INSERT INTO assistant_fts (rowid, content) VALUES (?, ?)", (seq, m["parts"][0]["text"]))


def raw_append_minimal(con, m: dict, parent: str) -> None:
    """The floor of docs/performance.md: one transaction with the message row and its FTS row."""
    content = json.dumps(m, separators=(",", ":"), ensure_ascii=False)
    with con:
        [(seq,)] = con.execute(
            "INSERT INTO assistant_messages (session_id, id, parent_id, role, content) "
            "VALUES ('', ?, ?, ?, ?) RETURNING seq",
            (m["id"], parent, m["role"], content),
        ).fetchall()
        con.execute("INSERT INTO assistant_fts (rowid, content) VALUES (?, ?)", (seq, m["parts"][0]["text"]))


def raw_leaf(con) -> str:
    return con.execute(sql.LATEST_LEAF, ("",)).fetchall()[0][0]


def raw_read(con, query: str, *, with_compactions: bool = False) -> list:
    """The latest-leaf lookup, then ``query`` on it (and the compaction rows), as the Session runs them."""
    rows = con.execute(query, ("", raw_leaf(con))).fetchall()
    if with_compactions:
        con.execute(sql.COMPACTIONS, ("",)).fetchall()
    return rows


def raw_recent(con, max_bytes: int) -> list:
    leaf = raw_leaf(con)
    con.execute(sql.PLACE, ("", leaf)).fetchall()
    rows = con.execute(sql.WINDOW, ("", leaf, 1, max_bytes)).fetchall()
    con.execute(sql.COMPACTIONS, ("",)).fetchall()
    return rows


def raw_search_same_sql(con, query: str, limit: int = 20) -> list:
    hits, params = fts.matching_rowids_sql(fts.parse_query(query), sql.FTS_TABLE, tools=True)
    best = con.execute(sql.TOP_HITS.format(hits=hits), (*params, limit)).fetchall()
    seqs = "[" + ",".join(str(s) for s, _ in best) + "]"
    return con.execute(sql.HIT_ROWS, ("", seqs)).fetchall()


def raw_search_plain(con, query: str, limit: int = 20) -> list:
    match = fts.parse_query(query).match_expression
    return con.execute(
        "SELECT rowid FROM assistant_fts WHERE assistant_fts MATCH ? ORDER BY rank LIMIT ?", (match, limit)
    ).fetchall()


# -- the benchmark --------------------------------------------------------------------


async def bench_size(folder: Path, make: Messages, n: int, appends: int, reads: int) -> tuple[SqlStorage, Session]:
    path = folder / f"session-{n}.sqlite3"
    storage = SqlStorage.open(path)
    t = time.perf_counter()
    bulk_load(storage, make, n)
    print(f"\n{n:,} messages (bulk-loaded in {time.perf_counter() - t:.1f} s)")
    session = Session.create(storage)
    con = storage.connection

    history_ms = await time_async(session.get_history, reads)
    raw_history = time_calls(lambda: raw_read(con, sql.PATH_JSON, with_compactions=True), reads)
    raw_parsed = time_calls(lambda: json.loads(raw_read(con, sql.PATH_JSON)[0][0]), reads)
    per_row = time_calls(lambda: [json.loads(r[0]) for r in raw_read(con, sql.PATH_CONTENT)], reads)
    row("get_history() (whole path)", history_ms, raw_history,
        f"raw+one json.loads {raw_parsed:.3f} ms; row by row {per_row:.3f} ms")

    recent = await time_async(lambda: session.get_recent_history(8192), 50)
    raw_window = time_calls(lambda: raw_recent(con, 8192), 50)
    row("get_recent_history(8 KiB)", recent, raw_window)
    stats = await time_async(session.get_history_row_stats, reads)
    raw_stats = time_calls(lambda: raw_read(con, sql.PATH_STATS), reads)
    row("get_history_row_stats() (whole path)", stats, raw_stats)
    length = await time_async(session.get_path_length, 50)
    raw_length = time_calls(lambda: raw_read(con, sql.PLACE), 50)
    row("get_path_length()", length, raw_length)

    latest = await time_async(session.get_latest_leaf, 50)
    raw_latest = time_calls(lambda: raw_read(con, sql.GET), 50)
    row("get_latest_leaf()", latest, raw_latest)

    counter = iter(range(n, n + 5 * appends))
    ours = await time_async(lambda: session.append_message(make(next(counter))), appends)
    broadcast_lines = await bench_broadcast(storage, make, counter, appends, plain=ours)
    same = time_calls(lambda: raw_append_same_sql(con, make(next(counter))), appends)
    last = [raw_leaf(con)]

    def minimal() -> None:  # last: the bare rows carry no place columns
        m = make(next(counter))
        raw_append_minimal(con, m, last[0])
        last[0] = m["id"]

    floor = time_calls(minimal, appends)
    row("append_message", ours, same, f"bare insert+FTS {floor:.3f} ms (x{ours / floor:.2f})")
    print("\n".join(broadcast_lines))
    print("\n".join(await bench_batch(storage, make, iter(range(n + 5 * appends, 10**9)))))
    return storage, session


class Broadcaster:
    """An agent-like target whose broadcast only counts the payloads."""

    def __init__(self, storage: SqlStorage) -> None:
        self.storage = storage
        self.sent = 0

    def broadcast(self, text: str) -> None:
        self.sent += 1


class Soul:
    async def get(self) -> str:
        return "You are a helpful airline assistant. Be brief and exact."


async def bench_broadcast(storage: SqlStorage, make: Messages, counter, appends: int, plain: float) -> list[str]:
    """append_message with status broadcasts (an estimate on every append), then with blocks and an overlay."""
    agent = Broadcaster(storage)
    session = Session.create(agent)
    ours = await time_async(lambda: session.append_message(make(next(counter))), appends)
    lines = [f"  {'append_message + broadcast':<44} {ours:9.3f} ms  (without {plain:.3f} ms; "
             "original 1.2 ms @100, 588 ms @10k)"]
    rich = (Session.create(agent).with_context("soul", provider=Soul())
            .with_context("memory", description="Learned facts", max_tokens=1100).with_cached_prompt())
    await rich.freeze_system_prompt()
    path = await rich.get_history_row_stats()
    await rich.add_compaction("The user changed a flight. " * 20, path[1]["id"], path[len(path) // 2]["id"])
    with_overlay = await time_async(lambda: rich.append_message(make(next(counter))), appends)
    lines.append(f"  {'  + 2 blocks, cached prompt, 1 overlay':<44} {with_overlay:9.3f} ms")
    estimate = await time_async(rich.estimate_tokens, appends)
    tokens = await rich.estimate_tokens()
    lines.append(f"  {'estimate_tokens() (2 blocks, 1 overlay)':<44} {estimate:9.3f} ms  ({tokens:,} tokens)")
    assert agent.sent >= 2 * appends
    return lines


async def bench_batch(storage: SqlStorage, make: Messages, counter, size: int = 1000, repeat: int = 3) -> list[str]:
    """``size`` messages as one ``append_messages`` batch vs ``size`` ``append_message`` calls (with broadcasts)."""
    agent = Broadcaster(storage)
    session = Session.create(agent)

    async def singles() -> None:
        for m in [make(next(counter)) for _ in range(size)]:
            await session.append_message(m)

    async def batch() -> None:
        await session.append_messages([make(next(counter)) for _ in range(size)])

    one_by_one = await time_async(singles, repeat)
    sent = agent.sent
    batched = await time_async(batch, repeat)
    assert agent.sent - sent == repeat
    return [
        f"  {f'{size:,} x append_message + broadcast':<44} {one_by_one:9.3f} ms  "
        f"({one_by_one / size:.3f} ms per message)",
        f"  {f'append_messages of {size:,} + broadcast':<44} {batched:9.3f} ms  "
        f"({batched / size:.3f} ms per message, x{one_by_one / batched:.1f} faster)",
    ]


async def bench_search(storage: SqlStorage, session: Session, reads: int) -> None:
    con = storage.connection
    print(f"\nsearch over {storage.scalar('SELECT count(*) FROM assistant_messages'):,} messages (limit 20)")
    for query in SEARCH_QUERIES:
        parsed = fts.parse_query(query)
        hits, params = fts.matching_rowids_sql(parsed, sql.FTS_TABLE, tools=True)
        matches = storage.scalar(f"SELECT count(*) FROM ({hits})", *params)
        ours = await time_async(lambda: session.search(query), reads)
        same = time_calls(lambda: raw_search_same_sql(con, query), reads)
        plain = time_calls(lambda: raw_search_plain(con, query), reads)
        row(f"search({query!r}) {matches:,} matches", ours, same, f"plain FTS ORDER BY rank {plain:.3f} ms")


def glued_to_cjk(m: dict) -> dict:
    """``m`` with CJK text glued to every other word (``重跑gen-itgc后`` style)."""
    words = m["parts"][0]["text"].split()
    text = " ".join(f"重跑{w}后" if i % 2 else w for i, w in enumerate(words))
    return {**m, "parts": [{"type": "text", "text": text}]}


def with_tool_call(m: dict) -> dict:
    words = m["parts"][0]["text"].split()
    call = {"type": "tool-get_reservation_details", "toolName": "get_reservation_details", "toolCallId": m["id"],
            "state": "output-available", "input": {"reservation_id": words[0], "note": " ".join(words[:8])},
            "output": "ok"}
    return {**m, "parts": [*m["parts"], call]}


async def bench_index_text(storage: SqlStorage, make: Messages, appends: int) -> None:
    """append_message by kind of indexed text, in one run; then ``indexed_text`` alone."""
    print(f"\nindexing cost by kind of text ({appends} appends each, same file)")
    session = Session.create(storage)
    counter = iter(range(10**9, 2 * 10**9))
    plain = await time_async(lambda: session.append_message(make(next(counter))), appends)
    glued = await time_async(lambda: session.append_message(glued_to_cjk(make(next(counter)))), appends)
    tool = await time_async(lambda: session.append_message(with_tool_call(make(next(counter)))), appends)
    print(f"  {'append_message, ASCII text':<44} {plain:9.3f} ms")
    print(f"  {'append_message, words glued to CJK':<44} {glued:9.3f} ms  (x{glued / plain:.2f})")
    print(f"  {'append_message, text + a tool call':<44} {tool:9.3f} ms  (x{tool / plain:.2f})")
    ascii_text = make(1)["parts"][0]["text"]
    cjk_text = glued_to_cjk(make(1))["parts"][0]["text"]
    per_call = 1000
    for name, text in (("ASCII", ascii_text), ("words glued to CJK", cjk_text)):
        took = time_calls(lambda: [fts.indexed_text(text) for _ in range(per_call)], 11) / per_call
        print(f"  {f'indexed_text(), {name} ({len(text)} chars)':<44} {took * 1000:9.3f} us")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,10000,100000", help="session sizes, comma-separated")
    parser.add_argument("--appends", type=int, default=300, help="appends timed per variant and size")
    parser.add_argument("--reads", type=int, default=11, help="repeats of each read")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    make = Messages(corpus_words())
    print("Session benchmark: medians in ms; x = ours / raw apsw running the same SQL")
    with tempfile.TemporaryDirectory(prefix="bench_session_") as tmp:
        largest = None
        for n in sizes:
            reads = args.reads if n <= 10_000 else max(3, args.reads // 2)
            storage, session = await bench_size(Path(tmp), make, n, args.appends, reads)
            if largest is not None:
                largest[0].close()
            largest = (storage, session)
        await bench_search(*largest, reads=args.reads)
        await bench_index_text(largest[0], make, args.appends)
        largest[0].close()


if __name__ == "__main__":
    trio.run(main)
