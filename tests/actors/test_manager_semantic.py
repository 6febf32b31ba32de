"""SessionManager.search(mode="semantic" | "hybrid") across sessions, on a SQLite file and on Postgres,
with the real local model: the hits carry their sessionId, only the manager's registered sessions
count, deleting a session deletes its vectors, and no embedder is a 400 naming the setting."""

from __future__ import annotations

import pytest

from actors.manager import SessionManager
from common.errors import ConflictError, InvalidInputError

pytestmark = pytest.mark.both_storages

TRIP = {"flight": "My flight to Lisbon was cancelled this morning", "hotel": "The hotel near the beach was lovely"}
HOME = {"dog": "Our puppy keeps chewing the sofa cushions", "deploy": "The deploy of the billing service happens on Friday"}


def msg(mid, text):
    return {"id": mid, "role": "user", "parts": [{"type": "text", "text": text}]}


def hits(found):
    return [(h["sessionId"], h["id"]) for h in found]


@pytest.mark.parametrize("mode", ["semantic", "hybrid"])
async def test_without_an_embedder_the_modes_name_the_setting(storage, mode):
    manager = SessionManager.create(storage)
    row = await manager.create("trip")
    await manager.append(row["id"], msg("flight", TRIP["flight"]))
    with pytest.raises(InvalidInputError) as raised:
        await manager.search("flight", mode=mode)
    assert raised.value.status == 400 and raised.value.field == "embedder" and "[search]" in str(raised.value)
    with pytest.raises(InvalidInputError) as unknown:
        await manager.search("flight", mode="fuzzy")
    assert unknown.value.field == "mode"
    assert hits(await manager.search("flight")) == [(row["id"], "flight")]


async def test_semantic_and_hybrid_search_across_sessions(storage):
    pytest.importorskip("wordllama")
    from actors.session_embeddings import EmbedderConfig, embedder_for

    marked = []
    manager = SessionManager.create(storage).with_embedder(embedder_for(EmbedderConfig()),
                                                           on_pending=lambda: marked.append(1))
    trip, home = await manager.create("trip"), await manager.create("home")
    for mid, text in TRIP.items():
        await manager.append(trip["id"], msg(mid, text))
    await manager.append_all(home["id"], [msg(mid, text) for mid, text in HOME.items()])
    assert marked and await manager.has_pending()
    assert await manager.search("the trip that got called off", mode="semantic") == []  # nothing embedded yet
    assert await manager.embed_pending() == 4
    assert not await manager.has_pending()
    assert await manager.search("the trip that got called off", mode="text") == []
    found = await manager.search("the trip that got called off", mode="semantic", limit=1)
    assert hits(found) == [(trip["id"], "flight")]
    assert found[0]["content"] == TRIP["flight"] and found[0]["role"] == "user" and found[0]["createdAt"].endswith("Z")
    assert hits(await manager.search("a young dog damaging furniture", mode="semantic", limit=1)) == [(home["id"], "dog")]
    hybrid = await manager.search("billing deploy", mode="hybrid", limit=4)
    assert hits(hybrid)[0] == (home["id"], "deploy") and len(hybrid) == 4
    # Each session's own search and status see its own vectors.
    session = await manager.get_session(home["id"])
    assert (await session.search_status())["embedded"] == 2
    # Deleting a session deletes its vectors: never found again.
    await manager.delete(trip["id"])
    assert (trip["id"], "flight") not in hits(await manager.search("the trip that got called off", mode="semantic"))
    assert len(await manager.search("anything at all", mode="semantic")) == 2
    assert storage.scalar("SELECT count(*) FROM assistant_embeddings") == 2  # the rows went, not just hidden
    with pytest.raises(ConflictError):
        manager.with_embedder(embedder_for(EmbedderConfig()))
