"""The message-store seam (actors/session_store.py) and the untangled parts of the Session.

A Session runs on any object with the methods of HistoryStore: here a
wrapper that lets through exactly those methods of the real SQLite store
runs every Session and SessionCompaction path, and each method is needed.
"""

import ast
import json
from collections import Counter
from pathlib import Path

import actors
from actors import Session
from actors.session_spec import SessionSpec
from actors.session_store import HistoryStore
from storage.messages import MessageStore, PathTokens

PROTOCOL = sorted(name for name, value in vars(HistoryStore).items() if callable(value) and not name.startswith("_"))
ACTORS = Path(actors.__file__).parent


def msg(mid, text=None, role="user", parts=None):
    return {"id": mid, "role": role, "parts": parts or [{"type": "text", "text": text or f"text of {mid}"}]}


class OnlyTheProtocol:
    """A store offering exactly :class:`HistoryStore`'s methods of a real MessageStore; counts calls."""

    def __init__(self, inner):
        self._inner = inner
        self.calls = Counter()
        self.paths_as_json = True

    def __getattr__(self, name):
        if name not in PROTOCOL:
            raise AttributeError(f"{name} is not part of HistoryStore")
        method = getattr(self._inner, name)
        if name == "path_json" and not self.paths_as_json:
            method = lambda leaf_id: None  # noqa: E731 -- "too big for one string": read row by row

        def call(*args, **kwargs):
            self.calls[name] += 1
            return method(*args, **kwargs)

        return call


def compact_middle(messages):
    return {"fromMessageId": messages[1]["id"], "toMessageId": messages[2]["id"], "summary": "the middle"}


def test_the_protocol_names_what_the_sqlite_store_provides():
    assert PROTOCOL == [
        "add_compaction", "append", "append_chain", "children", "clear", "compactions", "delete", "depth_on_path",
        "get", "latest_leaf", "latest_path_tokens", "path_chunks", "path_contents", "path_ids", "path_json",
        "path_stats", "path_tokens", "place", "search", "update", "window",
    ]
    assert all(callable(getattr(MessageStore, name, None)) for name in PROTOCOL)


def public_methods(cls):
    return sorted(name for name, value in vars(cls).items() if callable(value) and not name.startswith("_"))


def test_both_stores_offer_the_same_methods_one_sync_one_async():
    import inspect

    from storage.postgres import PostgresSessionProvider

    assert public_methods(MessageStore) == public_methods(PostgresSessionProvider)
    for name in public_methods(MessageStore):
        sync, other = getattr(MessageStore, name), getattr(PostgresSessionProvider, name)
        assert list(inspect.signature(sync).parameters) == list(inspect.signature(other).parameters), name
        if name not in ("for_session", "path_chunks"):
            assert not inspect.iscoroutinefunction(sync) and inspect.iscoroutinefunction(other), name


async def test_a_session_runs_every_path_on_exactly_the_protocol(storage):
    stores, errors, sent = [], [], []

    def store_for(session_id):
        stores.append(OnlyTheProtocol(MessageStore(storage, session_id)))
        return stores[-1]

    spec = SessionSpec().with_context("memory").on_compaction(compact_middle).on_compaction_error(errors.append)
    session = Session(storage, spec=spec, broadcaster=lambda text: sent.append(json.loads(text)), store_for=store_for)
    session.for_session("s1").compact_after(60)
    assert len(stores) == 2  # for_session opened the store of "s1"
    store = stores[-1]

    assert await session.append_message(msg("m1", "book a flight to Lisbon")) is True
    batch = [msg("m2", "which day?", "assistant"), msg("m3", "friday please")]
    assert await session.append_messages(batch) == [True, True]
    await session.append_message(msg("m4", "done, seat 3A booked for you", "assistant"))  # over 60 tokens: compacts
    assert errors == []
    [record] = await session.get_compactions()
    assert (record["fromMessageId"], record["toMessageId"], record["summary"]) == ("m2", "m3", "the middle")
    assert [m["id"] for m in await session.get_history()] == ["m1", f"compaction_{record['id']}", "m4"]
    assert [m["id"] for m in await session.raw_path_messages()] == ["m1", "m2", "m3", "m4"]
    assert [[m["id"] for m in chunk] async for chunk in session.raw_path_chunks()] == [["m4", "m3", "m2", "m1"]]
    assert await session.estimate_tokens() > 0
    await session.update_message(msg("m4", "done, seat 4C booked", "assistant"))
    assert (await session.get_message("m4"))["parts"][0]["text"] == "done, seat 4C booked"
    assert (await session.get_latest_leaf())["id"] == "m4"
    assert await session.get_path_length() == 4
    assert [m["id"] for m in await session.get_branches("m1")] == ["m2"]
    assert [row["id"] for row in await session.get_history_row_stats()] == ["m1", "m2", "m3", "m4"]
    assert [m["id"] for m in await session.get_history(limit=1, before="m4")] == [f"compaction_{record['id']}"]
    window = await session.get_recent_history(10, 2)
    assert ([m["id"] for m in window["messages"]], window["truncated"]) == (["m3", "m4"], True)
    assert [hit["id"] for hit in await session.search("Lisbon")] == ["m1"]
    assert await session.delete_messages(["m4"]) == 1
    await session.add_compaction("by hand", "m1", "m2")
    await session.clear_messages()
    assert await session.get_history() == []
    assert session.seed_messages([msg("x1"), msg("x2")]) == [True, True]
    assert [m["id"] for m in await session.get_history()] == ["x1", "x2"]
    store.paths_as_json = False
    assert [m["id"] for m in await session.get_history()] == ["x1", "x2"]

    assert errors == []
    assert {"compacting", "idle"} <= {payload.get("phase") for payload in sent}
    assert sorted(store.calls) == PROTOCOL  # every method of the protocol is needed


def imports_of(path):
    """``(level, module)`` of every ``from`` import in ``path`` (TYPE_CHECKING ones included)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {(node.level, node.module) for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}


def test_session_compaction_and_the_spec_do_not_import_the_session():
    for name in ("session_compaction", "session_spec", "session_store", "context"):
        found = imports_of(ACTORS / f"{name}.py")
        assert (1, "session") not in found and (0, "actors.session") not in found, name
    assert not {(1, "context"), (1, "session_compaction")} & imports_of(ACTORS / "session_spec.py")


def test_the_manager_neither_subclasses_nor_patches_sessions():
    source = (ACTORS / "manager.py").read_text(encoding="utf-8")
    tree = ast.parse(source)
    bases = [ast.unparse(b) for node in ast.walk(tree) if isinstance(node, ast.ClassDef) for b in node.bases]
    assert "Session" not in bases
    assignments = [ast.unparse(t) for node in ast.walk(tree) if isinstance(node, ast.Assign) for t in node.targets]
    assert not [t for t in assignments if t.startswith("session.")]


async def test_session_compaction_runs_on_a_store_and_an_engine_without_a_session(storage):
    from actors.context import ContextBlocks
    from actors.session_compaction import BroadcastChannel, SessionCompaction
    from actors.session_spec import CompactionSpec
    from actors.tokens import estimate_string_tokens
    from storage.messages import LATEST_LEAF

    store, sent, stored = MessageStore(storage, "s"), [], []
    for i in range(4):
        store.append(f"m{i}", "user", json.dumps(msg(f"m{i}")), f"text of m{i}", LATEST_LEAF, tokens=10)
    engine = ContextBlocks(storage, session_id="s").with_context("memory")
    compaction = SessionCompaction(
        store, engine, BroadcastChannel(lambda text: sent.append(json.loads(text)), "s", name="chat"),
        spec=CompactionSpec().with_function(compact_middle), on_stored=lambda: stored.append(True),
    )
    prompt = estimate_string_tokens(await engine.prompt_for_estimate())
    assert prompt > 0 and await compaction.estimate() == 40 + prompt  # four stored estimates of 10, plus the prompt
    assert await compaction.compact() == {"fromMessageId": "m1", "toMessageId": "m2", "summary": "the middle"}
    assert [(row.from_message_id, row.to_message_id) for row in store.compactions()] == [("m1", "m2")]
    assert stored == [True]
    assert [(p["phase"], p["sessionId"]) for p in sent] == [("compacting", "chat"), ("idle", "chat")]
    assert sent[-1]["compacted"] == {"tokensBefore": 40 + prompt}


async def test_latest_path_tokens_is_the_path_tokens_of_the_latest_leaf(storage):
    store = MessageStore(storage, "s")
    session = Session(storage, session_id="s")
    assert store.latest_path_tokens() is None
    for mid in ("m1", "m2", "m3"):
        await session.append_message(msg(mid))
    await session.append_message(msg("b3", "a much longer text on a branch of its own"), "m2")
    assert store.latest_path_tokens() == store.path_tokens("b3") == PathTokens(8 + 8 + 17, ())
    await session.add_compaction("short", "m1", "m2")
    [(row, hidden)] = store.latest_path_tokens().hidden
    assert store.latest_path_tokens() == store.path_tokens("b3")
    assert (row.from_message_id, row.to_message_id, hidden) == ("m1", "m2", 16)
    await session.delete_messages(["b3"])
    assert store.latest_path_tokens() == store.path_tokens("m3")
    assert store.latest_path_tokens().total == 24
