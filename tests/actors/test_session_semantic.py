"""Session.search(mode="semantic" | "hybrid") on a real SQLite file with the real local model.

Vectors are computed after commit (pending markers written in the append's
transaction), kept in step with updates, deletes and clears, never mixed
across dimensions; a file of schema version 3 gains the tables.
"""

from __future__ import annotations

import pytest

pytest.importorskip("wordllama")

from actors.session import Session  # noqa: E402
from actors.session_embeddings import EmbedderConfig, EmbeddingMismatchError, embedder_for  # noqa: E402
from common.errors import InvalidInputError  # noqa: E402
from storage import SqlStorage  # noqa: E402
from storage.schema import MIGRATIONS, SCHEMA_VERSION  # noqa: E402

TEXTS = {
    "flight": "My flight to Lisbon was cancelled this morning",
    "pasta": "The pasta recipe needs garlic, olive oil and basil",
    "deploy": "The deploy of the billing service happens on Friday",
    "dog": "Our puppy keeps chewing the sofa cushions",
}


def msg(mid, text):
    return {"id": mid, "role": "user", "parts": [{"type": "text", "text": text}]}


@pytest.fixture
def storage(tmp_path):
    with SqlStorage.open(tmp_path / "s.sqlite3") as storage:
        yield storage


@pytest.fixture
async def session(storage):
    marked = []
    session = Session.create(storage).with_embedder(embedder_for(EmbedderConfig()),
                                                    on_pending=lambda: marked.append(1))
    for mid, text in TEXTS.items():
        await session.append_message(msg(mid, text))
    assert len(marked) == len(TEXTS)  # each committed append asked for an embedding run
    return session


def ids(hits):
    return [h["id"] for h in hits]


async def test_an_append_only_marks_and_embedding_finishes_the_pending(session):
    status = await session.search_status()
    assert status == {"embedder": "wordllama/l2_supercat-256", "dimension": None, "embedded": 0, "pending": 4}
    assert await session.search("the trip that got called off", mode="semantic") == []  # nothing embedded yet
    assert await session.embed_pending() == 4
    assert await session.search_status() == {
        "embedder": "wordllama/l2_supercat-256", "dimension": 256, "embedded": 4, "pending": 0}


async def test_semantic_finds_a_paraphrase_text_search_cannot(session):
    await session.embed_pending()
    assert await session.search("the trip that got called off", mode="text") == []
    hits = await session.search("the trip that got called off", mode="semantic", limit=1)
    assert ids(hits) == ["flight"]
    assert set(hits[0]) == {"id", "role", "content", "createdAt"} and hits[0]["content"] == TEXTS["flight"]
    assert ids(await session.search("a young dog damaging furniture", mode="semantic", limit=1)) == ["dog"]


async def test_hybrid_keeps_the_text_hit_first_and_adds_the_meaning(session):
    await session.embed_pending()
    hybrid = await session.search("billing deploy", mode="hybrid", limit=4)
    assert ids(hybrid)[0] == "deploy"
    assert sorted(ids(hybrid)) == sorted(TEXTS)  # the semantic ranking brings the rest
    assert ids(await session.search("billing deploy", mode="text")) == ["deploy"]  # text mode unchanged
    assert await session.search("", mode="hybrid") == []


async def test_update_delete_and_clear_keep_the_vectors_in_step(session, storage):
    await session.embed_pending()
    await session.update_message(msg("flight", "Dinner tonight is a spicy vegetable curry"))
    assert (await session.search_status())["pending"] == 1  # the old vector is gone, the new text waits
    assert "flight" not in ids(await session.search("the trip that got called off", mode="semantic", limit=1))
    await session.embed_pending()
    assert ids(await session.search("what are we eating this evening", mode="semantic", limit=1)) == ["flight"]
    await session.delete_messages(["dog"])
    assert (await session.search_status())["embedded"] == 3
    assert "dog" not in ids(await session.search("a young dog damaging furniture", mode="semantic"))
    await session.clear_messages()
    assert await session.search_status() == {
        "embedder": "wordllama/l2_supercat-256", "dimension": None, "embedded": 0, "pending": 0}
    assert storage.scalar("SELECT count(*) FROM assistant_embeddings") == 0


async def test_a_message_updated_while_its_batch_was_embedded_keeps_its_marker(session, storage):
    from storage import embeddings

    batch = embeddings.pending_batch(storage, "", 10)
    await session.update_message(msg("pasta", "Quarterly tax forms are due"))  # while "the model runs"
    stored = embeddings.store_vectors(storage, "", "wordllama/l2_supercat-256", 256,
                                      [(seq, text, b"\0" * 1024) for seq, _, text in batch])
    assert len(stored) == 3 and (await session.search_status())["pending"] == 1
    assert storage.scalar("SELECT count(*) FROM assistant_embeddings_pending") == 1  # marked: now below the mark
    await session.embed_pending()
    assert ids(await session.search("paying taxes", mode="semantic", limit=1)) == ["pasta"]


async def test_no_embedder_is_a_400_naming_the_setting(storage):
    session = Session.create(storage)
    await session.append_message(msg("a", "hello there"))
    for mode in ("semantic", "hybrid"):
        with pytest.raises(InvalidInputError, match=r"embedder") as raised:
            await session.search("hello", mode=mode)
        assert raised.value.field == "embedder" and raised.value.status == 400
    with pytest.raises(InvalidInputError, match="mode must be one of text, semantic, hybrid"):
        await session.search("hello", mode="fuzzy")
    assert ids(await session.search("hello")) == ["a"]
    assert await session.search_status() == {"embedder": None, "dimension": None, "embedded": 0, "pending": 0}


async def test_stored_vectors_of_another_dimension_are_refused_in_one_line(session, storage):
    await session.embed_pending()
    storage.exec("UPDATE assistant_embeddings SET dimension = 128, vector = substr(vector, 1, 512)")
    fresh = Session.create(storage).with_embedder(embedder_for(EmbedderConfig()))
    with pytest.raises(EmbeddingMismatchError) as raised:
        await fresh.search("flight", mode="semantic")
    message = str(raised.value)
    assert "\n" not in message and "durable-sessions reembed" in message and "128" in message
    assert raised.value.status == 400 and raised.value.field == "embedder"


def test_a_version_3_file_migrates_and_keeps_its_messages(tmp_path):
    path = tmp_path / "old.sqlite3"
    with SqlStorage.open(path, migrations=MIGRATIONS[:3]) as old:
        old.exec("INSERT INTO assistant_messages (id, role, content) VALUES ('m1', 'user', '{}')")
        assert old.user_version == 3
    with SqlStorage.open(path) as new:
        assert new.user_version == SCHEMA_VERSION
        assert new.scalar("SELECT count(*) FROM assistant_messages") == 1
        # the embedding tables (version 4) are made by their first write since version 6
        assert new.scalar("SELECT count(*) FROM sqlite_schema WHERE name LIKE 'assistant_embeddings%'") == 0


async def test_mark_missing_picks_up_messages_stored_before_the_embedder(storage):
    plain = Session.create(storage)
    for mid, text in TEXTS.items():
        await plain.append_message(msg(mid, text))
    await plain.append_message({"id": "tool", "role": "assistant", "parts": [{"type": "tool-x", "input": {}}]})
    session = Session.create(storage).with_embedder(embedder_for(EmbedderConfig()))
    # Above the embedded-through seq (none yet): pending without any marker; not the text-less one.
    assert (await session.search_status())["pending"] == 4
    assert session.vectors is not None and await session.vectors.mark_missing() == 0
    assert await session.embed_pending() == 4
    assert (await session.search_status())["pending"] == 0


async def test_mark_missing_marks_what_another_model_embedded(storage):
    session = Session.create(storage).with_embedder(embedder_for(EmbedderConfig()))
    for mid, text in TEXTS.items():
        await session.append_message(msg(mid, text))
    assert await session.embed_pending() == 4
    storage.exec("UPDATE assistant_embeddings SET model = 'another' WHERE seq IN (SELECT seq FROM assistant_embeddings "
                 "ORDER BY seq LIMIT 3)")
    assert session.vectors is not None and await session.vectors.mark_missing() == 3
    assert await session.vectors.mark_missing() == 0
    assert (await session.search_status())["pending"] == 3
    assert await session.embed_pending() == 3
    assert (await session.search_status())["pending"] == 0


async def test_a_searchable_block_finds_entries_by_meaning_through_the_actor_tools(tmp_path):
    from actors.session_agent import BlockConfig, SessionAgent, SessionConfig
    from runtime import open_host

    config = SessionConfig(blocks=(BlockConfig("knowledge", "searchable", description="Facts"),),
                           search=EmbedderConfig())
    async with open_host(tmp_path / "data") as host:
        stub = host.bind("sessions", SessionAgent, env=config).get_by_name("kb")
        for key, text in (("gates", "Gate B12 opens early on Mondays"), ("pets", "Dogs must travel in a crate"),
                          ("food", "Vegetarian meals are served on long flights")):
            answer = await stub.execute_tool("set_context", {"label": "knowledge", "content": text,
                                                             "metadata": {"title": key}})
            assert answer == f'Indexed "{key}" in knowledge.'
        # Words: the text ranking still comes first for an exact match.
        found = await stub.execute_tool("search_context", {"label": "knowledge", "query": "gate B12"})
        assert found.startswith("[gates]\nGate B12 opens early on Mondays")
        # Meaning: no shared word, found by its vector; the tool's shape is unchanged.
        found = await stub.execute_tool("search_context", {"label": "knowledge", "query": "animal transport rules"})
        assert found.split("\n\n")[0] == "[pets]\nDogs must travel in a crate"
        # A replaced entry is embedded again from its new content.
        await stub.execute_tool("set_context", {"label": "knowledge", "content": "Cats fly in the cabin",
                                                "metadata": {"title": "pets"}})
        found = await stub.execute_tool("search_context", {"label": "knowledge", "query": "animal transport rules"})
        assert found.split("\n\n")[0] == "[pets]\nCats fly in the cabin"
