"""What semantic search counts as pending on a SQLite file, exactly, through every kind of write.

An append writes nothing for semantic search: a message above the session's
embedded-through ``seq`` is pending by definition (storage/embeddings.py).
The count ``search_status()`` gives is checked against the truth read from
the rows (messages with text and no vector) after each step: appends,
updates (of embedded and of pending messages, to text and to no text),
deletes, a compaction, a branch, a manager fork, hibernation, a restart
(the file reopened), a message changed or replaced while the model runs,
and a file written by version 7, whose appends each wrote a marker.
"""

from __future__ import annotations

import pytest

pytest.importorskip("wordllama")

from actors.session import Session  # noqa: E402
from actors.session_embeddings import EmbedderConfig, embedder_for  # noqa: E402
from storage import SqlStorage, embeddings  # noqa: E402
from storage.messages import MessageStore  # noqa: E402
from storage.schema import _V4, MIGRATIONS, SCHEMA_VERSION  # noqa: E402
from storage.tree.sqlite import TEXT_OF_CONTENT  # noqa: E402

MODEL = "wordllama/l2_supercat-256"
TEXTS = {
    "flight": "My flight to Lisbon was cancelled this morning",
    "pasta": "The pasta recipe needs garlic, olive oil and basil",
    "deploy": "The deploy of the billing service happens on Friday",
    "dog": "Our puppy keeps chewing the sofa cushions",
}


def msg(mid, text):
    return {"id": mid, "role": "user", "parts": [{"type": "text", "text": text}]}


def tool_only(mid):
    return {"id": mid, "role": "assistant", "parts": [{"type": "tool-x", "toolCallId": mid, "input": {}}]}


def truth(storage, session_id=""):
    """Messages of the session with text and no vector: what is pending, read from the rows."""
    vectors = storage.scalar("SELECT count(*) FROM sqlite_schema WHERE name = 'assistant_embeddings'")
    no_vector = "NOT EXISTS (SELECT 1 FROM assistant_embeddings AS e WHERE e.seq = m.seq)" if vectors else "1"
    return storage.scalar(f"SELECT count(*) FROM assistant_messages AS m WHERE m.session_id = ?1 "
                          f"AND {TEXT_OF_CONTENT} != '' AND {no_vector}", session_id)


def markers(storage):
    if not storage.scalar("SELECT count(*) FROM sqlite_schema WHERE name = 'assistant_embeddings_pending'"):
        return 0
    return storage.scalar("SELECT count(*) FROM assistant_embeddings_pending")


async def pending(session):
    return (await session.search_status())["pending"]


def ids(hits):
    return [h["id"] for h in hits]


def embedded_session(storage, session_id=""):
    session = Session(storage, session_id=session_id) if session_id else Session.create(storage)
    return session.with_embedder(embedder_for(EmbedderConfig()))


async def test_appends_write_nothing_and_the_count_stays_exact_through_every_write(tmp_path):
    path = tmp_path / "s.sqlite3"
    with SqlStorage.open(path) as storage:
        session = embedded_session(storage)
        for mid, text in TEXTS.items():
            await session.append_message(msg(mid, text))
        await session.append_message(tool_only("tool"))
        assert await pending(session) == truth(storage) == 4
        # Nothing was written for semantic search: not even its tables exist yet.
        assert storage.scalar("SELECT count(*) FROM sqlite_schema WHERE name LIKE 'assistant_embeddings%'") == 0

        assert await session.embed_pending() == 4
        assert await pending(session) == truth(storage) == 0
        assert embeddings.embedded_through(storage, "") == storage.scalar(
            "SELECT seq FROM assistant_messages WHERE id = 'dog'")

        await session.append_messages([msg("tea", "Green tea steeps for two minutes"),
                                       msg("bike", "The bicycle chain needs oil")])
        assert await pending(session) == truth(storage) == 2 and markers(storage) == 0

        await session.update_message(msg("pasta", "Quarterly tax forms are due next week"))  # embedded: marked
        assert await pending(session) == truth(storage) == 3 and markers(storage) == 1
        await session.update_message(msg("tea", "Black tea steeps for four minutes"))  # pending already
        assert await pending(session) == truth(storage) == 3 and markers(storage) == 1
        await session.update_message(tool_only("pasta"))  # no text left: nothing to embed
        assert await pending(session) == truth(storage) == 2 and markers(storage) == 0
        await session.update_message(msg("pasta", "Quarterly tax forms are due next week"))
        await session.update_message(tool_only("deploy"))  # embedded, then no text: its vector goes
        assert await pending(session) == truth(storage) == 3
        assert storage.scalar("SELECT count(*) FROM assistant_embeddings") == 2

        assert await session.delete_messages(["bike", "flight"]) == 2  # one pending, one embedded
        assert await pending(session) == truth(storage) == 2
        assert storage.scalar("SELECT count(*) FROM assistant_embeddings") == 1

        await session.add_compaction("They talked about taxes and deploys.", "pasta", "dog")
        assert await pending(session) == truth(storage) == 2  # overlays apply on read only

        await session.append_message(msg("branch", "A hike up the mountain on Sunday"), parent_id="dog")
        assert await pending(session) == truth(storage) == 3  # another branch: eligible all the same

    # A restart (what a hibernation does to the file as well): a new process reads the same count.
    with SqlStorage.open(path) as storage:
        session = embedded_session(storage)
        assert await pending(session) == truth(storage) == 3
        assert await session.embed_pending() == 3
        assert await pending(session) == truth(storage) == 0 and markers(storage) == 0
        assert ids(await session.search("paying taxes", mode="semantic", limit=1)) == ["pasta"]
        assert ids(await session.search("walking in the hills", mode="semantic", limit=1)) == ["branch"]
        assert ids(await session.search("how long should tea steep", mode="semantic", limit=1)) == ["tea"]
        await session.clear_messages()
        assert await pending(session) == 0
        assert storage.scalar("SELECT count(*) FROM assistant_embeddings_through") == 0


async def test_the_seq_of_a_deleted_newest_message_given_again_is_pending(tmp_path):
    with SqlStorage.open(tmp_path / "s.sqlite3") as storage:
        session = embedded_session(storage)
        for mid, text in TEXTS.items():
            await session.append_message(msg(mid, text))
        await session.embed_pending()
        dog = storage.scalar("SELECT seq FROM assistant_messages WHERE id = 'dog'")
        await session.delete_messages(["dog", "deploy"])
        await session.append_message(msg("cat", "The kitten sleeps on the warm laptop"))
        assert storage.scalar("SELECT seq FROM assistant_messages WHERE id = 'cat'") == dog - 1  # SQLite gave it again
        assert await pending(session) == truth(storage) == 1
        assert await session.embed_pending() == 1
        assert ids(await session.search("a small cat napping", mode="semantic", limit=1)) == ["cat"]


async def test_writes_made_while_no_embedder_is_configured_keep_the_vectors_true(tmp_path):
    """A session opened without an embedder (semantic search switched off for a while) still keeps
    the vectors it has in step: an update drops the vector of the old text, a delete drops the
    deleted message's and keeps a number SQLite gives again pending."""
    with SqlStorage.open(tmp_path / "s.sqlite3") as storage:
        session = embedded_session(storage)
        for mid, text in TEXTS.items():
            await session.append_message(msg(mid, text))
        assert await session.embed_pending() == 4
        plain = Session(storage, session_id=session.session_id)  # no embedder
        dog = storage.scalar("SELECT seq FROM assistant_messages WHERE id = 'dog'")
        assert await plain.delete_messages(["dog"]) == 1
        await plain.append_message(msg("cat", "The kitten sleeps on the warm laptop"))
        assert storage.scalar("SELECT seq FROM assistant_messages WHERE id = 'cat'") == dog  # given again
        await plain.update_message(msg("pasta", "Quarterly tax forms are due to the accountant"))
        again = embedded_session(storage, session.session_id)
        assert await pending(again) == truth(storage) == 2  # cat and the new pasta
        assert await again.embed_pending() == 2
        assert ids(await again.search("a small cat napping", mode="semantic", limit=1)) == ["cat"]
        assert ids(await again.search("paying taxes", mode="semantic", limit=1)) == ["pasta"]


async def test_a_message_changed_or_replaced_while_the_model_runs_is_embedded_again(tmp_path):
    with SqlStorage.open(tmp_path / "s.sqlite3") as storage:
        session = embedded_session(storage)
        for mid, text in TEXTS.items():
            await session.append_message(msg(mid, text))
        batch = embeddings.pending_batch(storage, "", 10)
        assert [mark for _, mark, _ in batch] == [0, 0, 0, 0]
        # While "the model runs": one message changes, the newest is replaced (its seq given again).
        await session.update_message(msg("pasta", "Quarterly tax forms are due next week"))
        await session.delete_messages(["dog"])
        await session.append_message(msg("cat", "The kitten sleeps on the warm laptop"))
        stored = embeddings.store_vectors(storage, "", MODEL, 256, [(seq, text, b"\0" * 1024) for seq, _, text in batch])
        assert len(stored) == 2  # flight and deploy: the others no longer have the text embedded
        assert await pending(session) == truth(storage) == 2
        assert await session.embed_pending() == 2
        assert await pending(session) == truth(storage) == 0
        assert ids(await session.search("a small cat napping", mode="semantic", limit=1)) == ["cat"]
        assert ids(await session.search("paying taxes", mode="semantic", limit=1)) == ["pasta"]


async def test_a_manager_fork_and_its_sessions_count_apart(tmp_path):
    from actors import SessionManager

    with SqlStorage.open(tmp_path / "m.sqlite3") as storage:
        manager = SessionManager.create(storage).with_embedder(embedder_for(EmbedderConfig()))
        first = await manager.create("first")
        for mid, text in TEXTS.items():
            await manager.append(first["id"], msg(mid, text))
        assert await manager.has_pending()
        assert await manager.embed_pending() == 4
        assert not await manager.has_pending()
        fork = await manager.fork(first["id"], "deploy", "fork")
        assert truth(storage, fork["id"]) == 3 and await manager.has_pending()  # copies, not embedded yet
        assert (await embedded_session(storage, fork["id"]).search_status())["pending"] == 3
        assert await manager.embed_pending() == 3
        assert not await manager.has_pending() and truth(storage, first["id"]) == 0
        await manager.delete(fork["id"])
        assert storage.scalar("SELECT count(*) FROM assistant_embeddings_through WHERE session_id = ?", fork["id"]) == 0


def test_a_version_7_file_with_its_markers_migrates_to_the_same_pending_messages(tmp_path):
    path = tmp_path / "v7.sqlite3"
    # Written as version 7 did: a marker for each message appended, deleted when its vector was stored.
    with SqlStorage.open(path, migrations=MIGRATIONS[:7]) as old:
        assert old.user_version == 7
        old.exec(_V4.split("CREATE TABLE cf_agents_search_embeddings")[0])
        seqs = {}
        for session_id, names in (("", ("flight", "pasta", "deploy", "dog")), ("b", ("tea", "bike"))):
            store = MessageStore(old, session_id)
            for name in names:
                store.append(name, "user", f'{{"id":"{name}","role":"user","parts":[{{"type":"text","text":"{name}"}}]}}',
                             name)
                seqs[name] = old.scalar("SELECT seq FROM assistant_messages WHERE id = ?", name)
                old.exec("INSERT INTO assistant_embeddings_pending (seq, session_id) VALUES (?, ?)", seqs[name], session_id)
        for name in ("flight", "pasta", "deploy"):  # embedded ...
            old.exec("INSERT INTO assistant_embeddings (seq, session_id, model, dimension, vector) "
                     "VALUES (?, '', ?, 256, zeroblob(1024))", seqs[name], MODEL)
            old.exec("DELETE FROM assistant_embeddings_pending WHERE seq = ?", seqs[name])
        old.exec("DELETE FROM assistant_embeddings WHERE seq = ?", seqs["pasta"])  # ... and pasta updated since
        old.exec("INSERT INTO assistant_embeddings_pending (seq, session_id, mark) VALUES (?, '', 2)", seqs["pasta"])
    with SqlStorage.open(path) as new:
        assert new.user_version == SCHEMA_VERSION
        assert embeddings.pending_count(new, "") == truth(new, "") == 2  # pasta and dog
        assert embeddings.pending_count(new, "b") == truth(new, "b") == 2
        assert embeddings.embedded_through(new, "") == seqs["dog"]
        assert embeddings.embedded_through(new, "b") == seqs["bike"]
        MessageStore(new, "").append("cat", "user", '{"id":"cat","role":"user","parts":[{"type":"text","text":"cat"}]}',
                                     "cat")
        assert embeddings.pending_count(new, "") == truth(new, "") == 3
        assert new.scalar("SELECT count(*) FROM assistant_embeddings_pending") == 4  # none for the append
        batch = embeddings.pending_batch(new, "", 10)
        assert sorted(seq for seq, _, _ in batch) == sorted([seqs["pasta"], seqs["dog"],
                                                            new.scalar("SELECT seq FROM assistant_messages WHERE id = 'cat'")])
        embeddings.store_vectors(new, "", MODEL, 256, [(seq, text, b"\0" * 1024) for seq, _, text in batch])
        assert embeddings.pending_count(new, "") == truth(new, "") == 0


async def test_hibernation_keeps_the_count_and_the_wake_finishes_it(tmp_path):
    from actors.session_agent import SessionAgent, SessionConfig
    from runtime import open_host

    # An embeddings endpoint nobody answers: nothing gets embedded, so the count stays put.
    dead = EmbedderConfig(embedder="openai", url="http://127.0.0.1:9/v1", model="nowhere", api_key_env="", dimension=8)
    async with open_host(tmp_path / "data") as host:
        host.bind("sessions", SessionAgent, env=SessionConfig(search=dead))
        stub = host.namespace("sessions").get_by_name("chat-1")
        await stub.append_messages([msg(mid, text) for mid, text in TEXTS.items()])
        await stub.append_message(tool_only("tool"))
        await stub.update_message(msg("pasta", "Quarterly tax forms are due next week"))
        assert await stub.delete_messages(["flight"]) == 1
        await stub.append_message(msg("branch", "A hike up the mountain on Sunday"), "deploy")
        assert (await stub.search_status())["pending"] == 4
        assert await host.hibernate("sessions", stub.id) is True
        assert (await stub.search_status())["pending"] == 4
