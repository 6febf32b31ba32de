"""Session.search: one safe syntax, session scope, index upkeep, real errors.

docs/behaviours.md §11 with docs/deviations.md #9 and #10.
"""

import re

import pytest

from actors import InvalidInputError
from actors.session import Session
from common.errors import DatabaseError
from storage import SearchQueryError
from tests.support.backends import index_rows, kind_of, write_counts

pytestmark = pytest.mark.both_storages

TEXTS = {
    "apostrophe": "The user's guide explains the refund flow",
    "path": "See docs/setup.md before you start",
    "policy": "Policy POL-358 covers lost baggage",
    "error": "The booking failed with E-1042 again",
    "mail": "Send the receipt to ops@example.com please",
    "deploy": "The deploy happens on Friday",
    "japanese": "私は東京に行きました",
    "chinese": "我们明天去北京开会",
}

ISO_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def msg(mid, *texts, role="user", extra_parts=()):
    parts = [{"type": "text", "text": t} for t in texts]
    return {"id": mid, "role": role, "parts": [*parts, *extra_parts]}


@pytest.fixture
async def session(storage):
    session = Session.create(storage)
    for mid, text in TEXTS.items():
        await session.append_message(msg(mid, text))
    return session


async def found(session, query, **kwargs):
    return [hit["id"] for hit in await session.search(query, **kwargs)]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("user's", ["apostrophe"]),
        ("docs/setup.md", ["path"]),
        ("POL-358", ["policy"]),
        ("E-1042", ["error"]),
        ("ops@example.com", ["mail"]),
        ("why?", []),
        ("a,b", []),
        ("key:value", []),
        ("#tag", []),
        ("[bracket]", []),
        ('""', []),
        ('"', []),
        ("   ", []),
    ],
)
async def test_awkward_queries_return_lists_and_find_their_message(session, query, expected):
    assert await found(session, query) == expected


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("deploy OR monday", []),  # OR is a word that must match, not an operator
        ("deploy NEAR friday", []),
        ("deploy NOT friday", []),
        ("fri*", []),  # no prefix search: "fri" is a word of its own
        ("-friday", ["deploy"]),  # not a negation: "-" is punctuation
        ("^deploy", ["deploy"]),
        ("(deploy", ["deploy"]),
        ("content:deploy", []),  # not a column filter: the words "content" and "deploy"
    ],
)
async def test_fts5_operators_are_plain_text(session, query, expected):
    assert await found(session, query) == expected


async def test_words_match_in_any_order_and_quotes_make_a_phrase(session):
    assert await found(session, "friday deploy") == ["deploy"]
    assert await found(session, '"deploy happens"') == ["deploy"]
    assert await found(session, '"happens deploy"') == []
    assert await found(session, "deploying") == ["deploy"]


async def test_cjk_words_inside_sentences_are_found(session):
    assert await found(session, "東京") == ["japanese"]
    assert await found(session, "北京") == ["chinese"]
    assert await found(session, "明天去北京") == ["chinese"]


async def test_hits_carry_role_indexed_text_and_stored_time(session):
    [hit] = await session.search("POL-358")
    stored = session.storage.scalar("SELECT created_at FROM assistant_messages WHERE id = 'policy'")
    assert hit == {
        "id": "policy",
        "role": "user",
        "content": "Policy POL-358 covers lost baggage",
        "createdAt": stored.replace(" ", "T") + "Z",
    }
    assert ISO_MS.match(hit["createdAt"])


async def test_text_parts_and_tool_inputs_are_indexed_but_content_is_the_text(storage):
    session = Session.create(storage)
    tool = {"type": "tool-lookup", "toolCallId": "c1", "input": {"q": "zebra"}, "output": "giraffe"}
    reasoning = {"type": "reasoning", "text": "okapi"}
    await session.append_message(msg("m1", "first half", "second half", extra_parts=[tool, reasoning]))
    await session.append_message(msg("m2", extra_parts=[tool]))
    assert await session.search("giraffe") == []  # tool outputs are not indexed
    assert await session.search("okapi") == []  # nor reasoning
    assert [(h["id"], h["content"]) for h in await session.search("zebra")] == [
        ("m2", ""),
        ("m1", "first half second half"),
    ]
    assert sorted(h["id"] for h in await session.search("lookup")) == ["m1", "m2"]
    [hit] = await session.search("half")
    assert hit["content"] == "first half second half"
    # The text index holds messages with text, as the original's; tool calls have their own.
    assert [row["id"] for row in index_rows(storage)] == ["m1"]
    if kind_of(storage) == "sqlite":
        assert storage.scalar("SELECT count(*) FROM assistant_fts_tools") == 2


@pytest.mark.sqlite_only("pins FTS5's bm25 order; Postgres ranks by ts_rank (docs/postgres.md)")
async def test_best_rank_first_and_limit(storage):
    session = Session.create(storage)
    await session.append_message(msg("once", "baggage policy for long flights and other rules"))
    await session.append_message(msg("twice", "baggage baggage"))
    await session.append_message(msg("thrice", "baggage baggage baggage"))
    assert await found(session, "baggage") == ["thrice", "twice", "once"]
    assert await found(session, "baggage", limit=2) == ["thrice", "twice"]
    assert await found(session, "baggage", limit=0) == []


async def test_equal_ranks_come_out_oldest_first(storage):
    session = Session.create(storage)
    for i in range(5):
        await session.append_message(msg(f"m{i}", "same words"))
    assert await found(session, "same") == ["m0", "m1", "m2", "m3", "m4"]


async def test_search_is_scoped_to_the_session_even_when_others_rank_higher(storage):
    mine = Session.create(storage).for_session("mine")
    other = Session.create(storage).for_session("other")
    for i in range(30):
        await other.append_message(msg(f"o{i}", "refund refund refund"))
    await mine.append_message(msg("m1", "a refund request with many other words around it"))
    assert await found(mine, "refund") == ["m1"]
    assert await found(mine, "refund", limit=1) == ["m1"]
    assert len(await other.search("refund", limit=50)) == 30
    assert await found(Session.create(storage), "refund") == []


async def test_update_reindexes_and_delete_and_clear_deindex(session):
    await session.update_message(msg("deploy", "The release moved to Monday"))
    assert await found(session, "friday") == []
    assert await found(session, "monday") == ["deploy"]
    await session.update_message({"id": "deploy", "role": "user", "parts": []})
    assert await found(session, "monday") == []
    await session.delete_messages(["policy", "japanese"])
    assert await found(session, "POL-358") == []
    assert await found(session, "東京") == []
    await session.clear_messages()
    assert await found(session, "refund") == []
    indexes = {k: v for k, v in write_counts(session.storage).items() if k != "assistant_config"}
    assert indexes == dict.fromkeys(indexes, 0)  # messages, the text index and the CJK index are empty


async def test_duplicate_append_does_not_index_twice(session):
    await session.append_message(msg("deploy", "something else entirely"))
    assert await found(session, "entirely") == []
    assert [row["id"] for row in index_rows(session.storage)].count("deploy") == 1


async def test_a_storage_failure_is_raised_not_hidden(session):
    storage = session.storage
    if kind_of(storage) == "sqlite":
        storage.exec("DROP TABLE assistant_fts")
        with pytest.raises(SearchQueryError, match="no such table: assistant_fts"):
            await session.search("deploy")
        return
    storage.exec("ALTER TABLE assistant_messages RENAME COLUMN search_tsv TO search_tsv_gone")
    try:
        with pytest.raises(DatabaseError, match='column "search_tsv" does not exist'):
            await session.search("deploy")
    finally:
        storage.exec("ALTER TABLE assistant_messages RENAME COLUMN search_tsv_gone TO search_tsv")


@pytest.mark.parametrize(("kwargs", "field"), [({"query": 5}, "query"), ({"query": "x", "limit": -1}, "limit"),
                                              ({"query": "x", "limit": True}, "limit")])
async def test_bad_arguments_are_refused(session, kwargs, field):
    kwargs = dict(kwargs)  # the parameter dict is shared by the runs on each storage
    query = kwargs.pop("query")
    with pytest.raises(InvalidInputError) as info:
        await session.search(query, **kwargs)
    assert info.value.field == field
