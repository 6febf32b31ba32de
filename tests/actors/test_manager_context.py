"""SessionManager settings reach every managed session; delete leaves nothing behind.

docs/behaviours.md §3, §13; docs/deviations.md #15 (delete removes every row of the
session), #16 (broadcasts carry sessionId).
"""


import pytest

from actors import ConflictError, InvalidInputError, SessionManager
from actors.context import SEPARATOR
from tests.support.backends import kind_of, row_count

pytestmark = pytest.mark.both_storages


def msg(mid, text=None, role="user"):
    return {"id": mid, "role": role, "parts": [{"type": "text", "text": text or f"text of {mid}"}]}


class Skills:
    """An in-memory skill collection."""

    async def get(self):
        return "- pirate: Talk like a pirate"

    async def load(self, key):
        return "Arr, matey." if key == "pirate" else None


class Shared:
    """An explicit writable provider: one object, one value for every session."""

    def __init__(self):
        self.value = "shared fact"

    async def get(self):
        return self.value

    async def set(self, content):
        self.value = content


# -- settings propagate ------------------------------------------------------------------------------


async def test_blocks_without_provider_are_stored_per_session(storage):
    manager = SessionManager.create(storage).with_context("memory", description="Learned facts", max_tokens=1100)
    a = (await manager.create("A"))["id"]
    b = (await manager.create("B"))["id"]
    await (await manager.get_session(a)).replace_context_block("memory", "A likes tea")
    await (await manager.get_session(b)).replace_context_block("memory", "B likes coffee")
    rows = storage.sql("SELECT label, content FROM cf_agents_context_blocks ORDER BY content")
    assert rows == [
        {"label": f"memory_{a}", "content": "A likes tea"},
        {"label": f"memory_{b}", "content": "B likes coffee"},
    ]
    block = await (await manager.get_session(a)).get_context_block("memory")
    assert (block["content"], block["description"], block["maxTokens"], block["writable"]) == (
        "A likes tea", "Learned facts", 1100, True
    )


async def test_an_explicit_provider_is_shared_by_every_session(storage):
    shared = Shared()
    manager = SessionManager.create(storage).with_context("team", provider=shared)
    a = await manager.get_session((await manager.create("A"))["id"])
    b = await manager.get_session((await manager.create("B"))["id"])
    await a.replace_context_block("team", "changed by A")
    assert shared.value == "changed by A"
    assert (await b.get_context_block("team"))["content"] == "changed by A"
    assert row_count(storage, "cf_agents_context_blocks") == 0


async def test_cached_prompt_is_stored_per_session(storage):
    manager = SessionManager.create(storage).with_context("soul", provider=Shared()).with_cached_prompt()
    sid = (await manager.create("A"))["id"]
    prompt = await (await manager.get_session(sid)).freeze_system_prompt()
    assert prompt == f"{SEPARATOR}\nSOUL [writable]\n{SEPARATOR}\nshared fact"
    stored = storage.scalar("SELECT content FROM cf_agents_context_blocks WHERE label = ?", f"_system_prompt_{sid}")
    assert stored == prompt


async def test_searchable_history_block_counts_sessions_and_searches_them(storage):
    manager = SessionManager.create(storage).with_context("memory").with_searchable_history("history")
    a = (await manager.create("A"))["id"]
    session = await manager.get_session(a)
    assert (await session.get_context_block("history"))["content"] == "1 session available for search."
    b = (await manager.create("B"))["id"]
    c = (await manager.create("C"))["id"]
    await manager.append(b, msg("m1", "the gate changed to B12"))
    await manager.append(c, msg("m1", "gate B12 is closed", "assistant"))
    prompt = await session.refresh_system_prompt()
    assert prompt.endswith(
        f"{SEPARATOR}\nHISTORY (Cross-session conversation history) [searchable]\n{SEPARATOR}\n"
        "3 sessions available for search."
    )
    block = await session.get_context_block("history")
    assert (block["writable"], block["isSearchable"], block["description"]) == (
        False, True, "Cross-session conversation history"
    )
    tools = await session.tools()
    assert list(tools) == ["set_context", "search_context"]
    search = tools["search_context"]
    assert await search.execute({"label": "history", "query": "gate B12"}) == (
        "[assistant] gate B12 is closed\n---\n[user] the gate changed to B12"
    )
    assert await search.execute({"label": "history", "query": "zeppelin"}) == "No results found."


async def test_compaction_settings_reach_every_session(storage):
    calls = []

    def compact(messages):
        calls.append([m["id"] for m in messages])
        return {"fromMessageId": messages[0]["id"], "toMessageId": messages[1]["id"], "summary": "first two"}

    manager = SessionManager.create(storage).on_compaction(compact).compact_after(20)
    for name in ("A", "B"):
        sid = (await manager.create(name))["id"]
        await manager.append_all(sid, [msg("m1", "word " * 8), msg("m2", "word " * 8)])
        compactions = await manager.get_compactions(sid)
        ranges = [(c["fromMessageId"], c["toMessageId"], c["summary"]) for c in compactions]
        assert ranges == [("m1", "m2", "first two")]
        assert [m["parts"][0]["text"] for m in await manager.get_history(sid)] == ["first two"]
    assert calls == [["m1", "m2"], ["m1", "m2"]]


async def test_compaction_errors_reach_the_handler(storage):
    errors = []

    def compact(messages):
        raise RuntimeError("summarizer down")

    manager = (
        SessionManager.create(storage).on_compaction(compact).compact_after(1).on_compaction_error(errors.append)
    )
    sid = (await manager.create("A"))["id"]
    assert await manager.append(sid, msg("m1", "a long enough message")) == "m1"
    assert [str(e) for e in errors] == ["summarizer down"]
    assert await manager.get_message_count(sid) == 1


async def test_broadcasts_pass_through_and_name_the_session(recording_agent):
    manager = SessionManager.create(recording_agent)
    sid = (await manager.create("A"))["id"]
    await manager.append(sid, msg("m1"))
    assert recording_agent.payloads[-1]["type"] == "cf_agent_session"
    assert recording_agent.payloads[-1]["sessionId"] == sid


# -- builders ---------------------------------------------------------------------------------------------


async def test_builders_refuse_changes_once_a_session_is_open(storage):
    manager = SessionManager.create(storage).with_context("memory")
    await manager.get_session((await manager.create("A"))["id"])
    with pytest.raises(ConflictError, match=r"with_context\(\) configures every managed session"):
        manager.with_context("notes")
    with pytest.raises(ConflictError, match=r"with_searchable_history\(\) configures every managed session"):
        manager.with_searchable_history("history")


def test_builders_check_their_arguments_at_once(storage):
    manager = SessionManager.create(storage).with_context("memory")
    with pytest.raises(ConflictError, match='Block "memory" already exists'):
        manager.with_context("memory")
    with pytest.raises(ConflictError, match='Block "memory" already exists'):
        manager.with_searchable_history("memory")
    with pytest.raises(InvalidInputError) as info:
        manager.with_context("notes", max_tokens=-1)
    assert info.value.field == "max_tokens"
    with pytest.raises(InvalidInputError):
        manager.on_compaction("not callable")
    with pytest.raises(InvalidInputError):
        manager.compact_after(float("nan"))
    with pytest.raises(InvalidInputError):
        manager.on_compaction_error(None)
    with pytest.raises(InvalidInputError):
        manager.with_cached_prompt(object())
    manager.with_searchable_history("history")
    with pytest.raises(ConflictError):
        manager.with_searchable_history("history2")


# -- delete leaves nothing ------------------------------------------------------------------------------------


def tables(storage):
    if kind_of(storage) == "postgres":
        query = "SELECT table_name AS name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY 1"
        return [r["name"] for r in storage.sql(query)]
    return [r["name"] for r in storage.sql("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")]


def mentions(storage, needle):
    """``{table: number of rows holding needle in any column}`` over every table of the file."""
    found = {}
    for table in tables(storage):
        rows = storage.sql(f'SELECT * FROM "{table}"')
        hits = sum(
            any(needle in v if isinstance(v, str) else needle.encode() in v if isinstance(v, bytes) else False
                for v in row.values())
            for row in rows
        )
        if hits:
            found[table] = hits
    return found


def fts_rowids(storage, session_id):
    seqs = [r["seq"] for r in storage.sql("SELECT seq FROM assistant_messages WHERE session_id = ?", session_id)]
    marks = ",".join("?" * len(seqs))
    return seqs, {
        table: [r["rowid"] for r in storage.sql(f"SELECT rowid FROM {table} WHERE rowid IN ({marks})", *seqs)]
        for table in ("assistant_fts", "assistant_fts_cjk")
    }


async def test_delete_leaves_no_row_of_the_session_in_any_table(storage):
    manager = (
        SessionManager.create(storage)
        .with_context("memory", max_tokens=1100)
        .with_context("skills", provider=Skills())
        .with_cached_prompt()
        .with_searchable_history("history")
    )
    a = (await manager.create("A"))["id"]
    b = (await manager.create("B"))["id"]
    for sid in (a, b):
        await manager.append_all(sid, [msg("m1", "東京で会議があります"), msg("m2", "see you there", "assistant")])
        await manager.add_compaction(sid, "a meeting in Tokyo", "m1", "m2")
        session = await manager.get_session(sid)
        await session.replace_context_block("memory", "likes tea")
        await session.freeze_system_prompt()
        load = (await session.tools())["load_context"]
        assert await load.execute({"label": "skills", "key": "pirate"}) == "Arr, matey."

    sqlite = kind_of(storage) == "sqlite"
    if sqlite:
        seqs, indexed = fts_rowids(storage, a)
        assert indexed == {"assistant_fts": seqs, "assistant_fts_cjk": [seqs[0]]}
    b_before = mentions(storage, b)
    # SQLite's text index keeps no copy of the session id (nor of the text); Postgres keeps an active-leaf row
    assert mentions(storage, a) == b_before == {
        "assistant_compactions": 1,
        "assistant_config": 1 if sqlite else 2,
        "assistant_messages": 2,
        "assistant_sessions": 1,
        "cf_agents_context_blocks": 2,
        **({} if sqlite else {"durable_sessions_catalog": 1}),  # Postgres: the listing's row (schema v3)
    }

    await manager.delete(a)

    assert mentions(storage, a) == {}
    if sqlite:
        assert fts_rowids(storage, a) == ([], {"assistant_fts": [], "assistant_fts_cjk": []})
    assert mentions(storage, b) == b_before
    [compaction] = await manager.get_compactions(b)
    assert [m["id"] for m in await manager.get_history(b)] == [f"compaction_{compaction['id']}"]
    assert [r["id"] for r in await manager.list()] == [b]
