"""Semantic and hybrid search on both storages (a SQLite file, a real Postgres database), with the
real local model: no embedder is a 400 naming the setting; with one, appends only mark, embedding
finishes the pending, updates/deletes/clears keep the vectors in step, every branch and compacted
messages stay eligible (text search's rule), another dimension is refused and reembed is the way out."""

from __future__ import annotations

import pytest

from actors.session import Session
from common.errors import InvalidInputError

pytestmark = pytest.mark.both_storages

TEXTS = {
    "flight": "My flight to Lisbon was cancelled this morning",
    "pasta": "The pasta recipe needs garlic, olive oil and basil",
    "deploy": "The deploy of the billing service happens on Friday",
    "dog": "Our puppy keeps chewing the sofa cushions",
}
MODEL = "wordllama/l2_supercat-256"


def msg(mid, text):
    return {"id": mid, "role": "user", "parts": [{"type": "text", "text": text}]}


def ids(hits):
    return [h["id"] for h in hits]


@pytest.mark.parametrize("mode", ["semantic", "hybrid"])
async def test_semantic_modes_without_an_embedder_name_the_setting(storage, mode):
    session = Session.create(storage)
    await session.append_message(msg("m1", "flight cancelled"))
    with pytest.raises(InvalidInputError) as raised:
        await session.search("flight", mode=mode)
    assert raised.value.status == 400 and raised.value.field == "embedder"
    assert "[search]" in str(raised.value)
    assert await session.reembed() == {"embedder": None, "dimension": None, "embedded": 0, "pending": 0}
    assert [hit["id"] for hit in await session.search("flight", mode="text")] == ["m1"]
    assert await session.search_status() == {"embedder": None, "dimension": None, "embedded": 0, "pending": 0}


def embedded(storage):
    pytest.importorskip("wordllama")
    from actors.session_embeddings import EmbedderConfig, embedder_for

    marked = []
    session = Session.create(storage).with_embedder(embedder_for(EmbedderConfig()), on_pending=lambda: marked.append(1))
    return session, marked


async def test_appends_mark_and_embedding_finishes_the_pending(storage):
    session, marked = embedded(storage)
    for mid, text in TEXTS.items():
        await session.append_message(msg(mid, text))
    await session.append_message({"id": "tool", "role": "assistant", "parts": [{"type": "tool-x", "input": {}}]})
    assert len(marked) == 5
    assert await session.search_status() == {"embedder": MODEL, "dimension": None, "embedded": 0, "pending": 4}
    assert await session.search("the trip that got called off", mode="semantic") == []  # nothing embedded yet
    assert await session.embed_pending() == 4
    assert await session.search_status() == {"embedder": MODEL, "dimension": 256, "embedded": 4, "pending": 0}
    assert await session.search("the trip that got called off", mode="text") == []
    found = await session.search("the trip that got called off", mode="semantic", limit=1)
    assert ids(found) == ["flight"] and found[0]["content"] == TEXTS["flight"] and found[0]["role"] == "user"
    hybrid = await session.search("billing deploy", mode="hybrid", limit=4)
    assert ids(hybrid)[0] == "deploy" and sorted(ids(hybrid)) == sorted(TEXTS)


async def test_update_delete_and_clear_keep_the_vectors_in_step(storage):
    session, _ = embedded(storage)
    for mid, text in TEXTS.items():
        await session.append_message(msg(mid, text))
    await session.embed_pending()
    assert ids(await session.search("a young dog damaging furniture", mode="semantic", limit=1)) == ["dog"]
    # An update drops the old vector and marks the message again; the new text is found once embedded.
    await session.update_message(msg("dog", "Quarterly tax forms are due to the accountant"))
    assert await session.search_status() == {"embedder": MODEL, "dimension": 256, "embedded": 3, "pending": 1}
    assert "dog" not in ids(await session.search("a young dog damaging furniture", mode="semantic", limit=4))
    assert await session.embed_pending() == 1
    assert ids(await session.search("paying taxes", mode="semantic", limit=1)) == ["dog"]
    # Deleting a message deletes its vector.
    await session.delete_messages(["flight"])
    assert (await session.search_status())["embedded"] == 3
    assert "flight" not in ids(await session.search("the trip that got called off", mode="semantic"))
    await session.clear_messages()
    assert await session.search_status() == {"embedder": MODEL, "dimension": None, "embedded": 0, "pending": 0}
    assert await session.search("pasta", mode="hybrid") == []


async def test_every_branch_and_compacted_messages_are_eligible_as_for_text_search(storage):
    session, _ = embedded(storage)
    await session.append_message(msg("root", "Planning the week"))
    await session.append_message(msg("flight", TEXTS["flight"]))
    await session.append_message(msg("dog", TEXTS["dog"]), "root")  # a second branch under root
    await session.append_message(msg("pasta", TEXTS["pasta"]))
    await session.add_compaction("summary of the first turns", "root", "dog")
    await session.embed_pending()
    # The active branch is root -> dog -> pasta, and root..dog is compacted: both rules as text search's.
    assert ids(await session.search("flight Lisbon", mode="text")) == ["flight"]
    assert ids(await session.search("the trip that got called off", mode="semantic", limit=1)) == ["flight"]
    assert ids(await session.search("a young dog damaging furniture", mode="semantic", limit=1)) == ["dog"]
    assert ids(await session.search("flight Lisbon", mode="hybrid", limit=1)) == ["flight"]


async def test_another_dimension_is_refused_in_one_line_and_reembed_is_the_way_out(storage):
    from actors.session_embeddings import EmbedderConfig, EmbeddingMismatchError, embedder_for

    session, marked = embedded(storage)
    for mid, text in TEXTS.items():
        await session.append_message(msg(mid, text))
    await session.embed_pending()
    smaller = Session.create(storage).with_embedder(embedder_for(EmbedderConfig(dimension=64)))
    assert smaller.vectors is not None and smaller.vectors.model == "wordllama/l2_supercat-64"
    # Another model name: its vectors are simply not the session's yet.
    assert await smaller.search_status() == {"embedder": "wordllama/l2_supercat-64", "dimension": None,
                                             "embedded": 0, "pending": 0}
    # The same model name with another dimension (an endpoint's model changed): refused, never mixed.
    liar = _Renamed(embedder_for(EmbedderConfig(dimension=64)), MODEL)
    mixed = Session.create(storage).with_embedder(liar)
    with pytest.raises(EmbeddingMismatchError) as refused:
        await mixed.search("flight", mode="semantic")
    assert refused.value.status == 400 and "\n" not in str(refused.value)
    assert "durable-sessions reembed" in str(refused.value) and "256" in str(refused.value)
    status = await mixed.reembed()
    assert status == {"embedder": MODEL, "dimension": None, "embedded": 0, "pending": 4}
    assert await mixed.embed_pending() == 4
    assert await mixed.search_status() == {"embedder": MODEL, "dimension": 64, "embedded": 4, "pending": 0}
    assert ids(await mixed.search("the trip that got called off", mode="semantic", limit=1)) == ["flight"]


class _Renamed:
    """An embedder under another model name (as an endpoint whose model changed behind one name)."""

    def __init__(self, inner, model):
        self.inner, self.model, self.dimension = inner, model, inner.dimension

    def embed(self, texts):
        return self.inner.embed(texts)


async def test_a_searchable_block_ranks_entries_by_meaning(storage):
    pytest.importorskip("wordllama")
    from actors.session_embeddings import EmbedderConfig, VectorSearchProvider, embedder_for

    block = VectorSearchProvider(storage, embedder_for(EmbedderConfig()))
    block.init("facts")
    for key, text in TEXTS.items():
        await block.set(key, text)
    assert (await block.search("a young dog damaging furniture")).startswith("[dog]\n" + TEXTS["dog"])
    assert (await block.search("billing deploy")).startswith("[deploy]\n")
    await block.set("dog", "Quarterly tax forms are due to the accountant")  # replaced: embedded again
    assert (await block.search("paying taxes")).startswith("[dog]\nQuarterly tax")


async def test_in_postgres_a_searched_session_sees_vectors_another_host_stored(storage):
    """Two Sessions on one Postgres session (two hosts' activations): the first, already searched (its
    vectors in memory), finds what the second stored since -- each search reads the newer stamps."""
    from storage import SqlStorage

    if isinstance(storage, SqlStorage):
        pytest.skip("a SQLite file has one writer: its in-memory vectors never go stale")
    first, _ = embedded(storage)
    await first.append_message(msg("pasta", TEXTS["pasta"]))
    await first.embed_pending()
    assert ids(await first.search("the trip that got called off", mode="semantic")) == ["pasta"]
    second, _ = embedded(storage)
    await second.append_message(msg("flight", TEXTS["flight"]))
    await second.update_message(msg("pasta", "Our puppy keeps chewing the sofa cushions"))
    assert await second.embed_pending() == 2
    assert ids(await first.search("the trip that got called off", mode="semantic", limit=1)) == ["flight"]
    assert ids(await first.search("a young dog damaging furniture", mode="semantic", limit=1)) == ["pasta"]
