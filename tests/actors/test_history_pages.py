"""History pages: ``get_history(leaf_id, limit=, before=, overlays=)`` against slices of the whole history.

A page is defined as a slice of ``get_history`` (actors/history_pages.py);
these tests build trees with branches and compactions and compare every
page, paged back from the newest, with that slice.
"""

import random

import pytest

from actors import InvalidInputError, MessageNotFoundError
from actors.session import Session

pytestmark = pytest.mark.both_storages


def msg(mid, text=None, role="user"):
    return {"id": mid, "role": role, "parts": [{"type": "text", "text": text or f"text of {mid}"}]}


def ids(messages):
    return [m["id"] for m in messages]


async def pages(session, limit, **options):
    """Every page from the newest back to the root, each root-side first, and the pages joined."""
    found, before = [], None
    while True:
        page = await session.get_history(limit=limit, before=before, **options)
        found.append(page)
        if len(page) < limit:
            break
        before = page[0]["id"]
    return found, [m for page in reversed(found) for m in page]


@pytest.fixture
async def session(storage):
    session = Session.create(storage)
    await session.append_messages([msg(f"m{i}") for i in range(1, 11)])
    return session


async def test_the_newest_page_and_the_pages_before_it(session):
    assert ids(await session.get_history(limit=3)) == ["m8", "m9", "m10"]
    assert ids(await session.get_history(limit=3, before="m8")) == ["m5", "m6", "m7"]
    assert ids(await session.get_history(limit=4, before="m3")) == ["m1", "m2"]
    assert await session.get_history(limit=4, before="m1") == []
    assert ids(await session.get_history(before="m4")) == ["m1", "m2", "m3"]
    assert ids(await session.get_history(limit=100)) == [f"m{i}" for i in range(1, 11)]
    assert (await session.get_history(limit=2))[1] == await session.get_message("m10")


async def test_paging_back_joins_to_the_whole_history(session):
    found, joined = await pages(session, 4)
    assert [ids(p) for p in found] == [["m7", "m8", "m9", "m10"], ["m3", "m4", "m5", "m6"], ["m1", "m2"]]
    assert joined == await session.get_history()
    found, _ = await pages(session, 5)
    assert [len(p) for p in found] == [5, 5, 0]  # a page of exactly limit: one more, empty, page ends it


async def test_overlays_are_one_entry_and_can_be_paged_past(session):
    record = await session.add_compaction("m2..m7 in short", "m2", "m7")
    overlay = "compaction_" + record["id"]
    assert ids(await session.get_history(limit=3)) == [overlay, "m8", "m9", "m10"][-3:]
    assert ids(await session.get_history(limit=2, before="m8")) == ["m1", overlay]
    assert ids(await session.get_history(limit=2, before=overlay)) == ["m1"]
    assert (await session.get_history(limit=4))[0]["parts"][0]["text"] == "m2..m7 in short"
    _, joined = await pages(session, 2)
    assert joined == await session.get_history()


async def test_overlays_false_reads_the_stored_messages(session):
    await session.add_compaction("m2..m7 in short", "m2", "m7")
    assert ids(await session.get_history(limit=3, before="m5", overlays=False)) == ["m2", "m3", "m4"]
    assert ids(await session.get_history(overlays=False)) == [f"m{i}" for i in range(1, 11)]
    _, joined = await pages(session, 3, overlays=False)
    assert ids(joined) == [f"m{i}" for i in range(1, 11)]


async def test_a_before_that_is_not_an_entry_of_the_history_is_refused_by_name(session):
    record = await session.add_compaction("m2..m7 in short", "m2", "m7")
    await session.append_message(msg("b1"), "m3")  # another branch; the active leaf is now b1
    with pytest.raises(InvalidInputError, match="before 'm9' is not an entry of this history: it is not a stored "
                                                "message on the path to the leaf") as caught:
        await session.get_history(limit=2, before="m9")
    assert caught.value.field == "before"
    with pytest.raises(InvalidInputError, match=f"compaction {record['id']} hides it"):
        await session.get_history(limit=2, before="m5", leaf_id="m10")
    with pytest.raises(InvalidInputError, match="no compaction overlay with that id applies"):
        await session.get_history(limit=2, before="compaction_" + record["id"], leaf_id="b1")
    # the branch's own history: b1 under m3, which the overlay does not cover on this path
    assert ids(await session.get_history(limit=2, before="b1")) == ["m2", "m3"]
    assert ids(await session.get_history(limit=2, before="m5", leaf_id="m10", overlays=False)) == ["m3", "m4"]


@pytest.mark.parametrize("options", [
    {"limit": 1}, {}, {"overlays": False}, {"leaf_id": "m4"}, {"leaf_id": "nope"}, {"limit": 1, "leaf_id": "nope"},
])
@pytest.mark.parametrize("before", ["zzz", "compaction_nope"])
async def test_a_before_that_names_no_message_is_not_found_not_an_empty_page(session, options, before):
    # an empty page says "the root was reached": an unknown id answered [] could not be told from it
    with pytest.raises(MessageNotFoundError, match=f"message '{before}' not found") as caught:
        await session.get_history(before=before, **options)
    assert (caught.value.kind, caught.value.key) == ("message", before)


async def test_a_before_stored_off_the_path_of_an_unknown_leaf_is_refused_as_not_on_it(session):
    with pytest.raises(InvalidInputError, match="before 'm3' is not an entry of this history") as caught:
        await session.get_history(leaf_id="nope", limit=2, before="m3")
    assert caught.value.field == "before"
    assert await session.get_history(leaf_id="nope", limit=2) == []


async def test_an_empty_session_refuses_any_before_as_not_found(storage):
    empty = Session.create(storage)
    with pytest.raises(MessageNotFoundError, match="message 'm1' not found"):
        await empty.get_history(limit=1, before="m1")
    assert await empty.get_history(limit=1) == []


@pytest.mark.parametrize(("options", "field"), [
    ({"limit": 0}, "limit"), ({"limit": -1}, "limit"), ({"limit": True}, "limit"), ({"limit": "3"}, "limit"),
    ({"before": ""}, "before"), ({"before": 5}, "before"), ({"overlays": "no"}, "overlays"),
    ({"overlays": None}, "overlays"),
])
async def test_bad_paging_arguments_are_refused(session, options, field):
    with pytest.raises(InvalidInputError) as caught:
        await session.get_history(**options)
    assert caught.value.field == field


async def test_an_unknown_leaf_or_an_empty_session_pages_nothing(storage):
    session = Session.create(storage)
    assert await session.get_history(limit=5) == []
    assert await session.get_history(limit=5, overlays=False) == []
    await session.append_message(msg("m1"))
    assert await session.get_history(leaf_id="nope", limit=5) == []
    assert await session.get_history(leaf_id="nope", limit=5, overlays=False) == []


async def test_random_trees_with_compactions_page_as_slices_of_the_history(storage):
    generator = random.Random(1804)
    session = Session.create(storage)
    stored = []
    for i in range(60):
        parent = generator.choice(stored[-5:]) if stored and generator.random() < 0.15 else None
        if parent is None:
            await session.append_message(msg(f"n{i}"))
        else:
            await session.append_message(msg(f"n{i}"), parent)
        stored.append(f"n{i}")
        if i % 9 == 8:
            path = ids(await session.get_history(overlays=False))
            start = generator.randrange(len(path))
            end = generator.randrange(start, len(path))
            await session.add_compaction(f"summary {i}", path[start], path[end])
    for leaf in [None, *generator.sample(stored, 3)]:
        stored_path = [await session.get_message(row["id"]) for row in await session.get_history_row_stats(leaf)]
        for overlays, whole in ((True, await session.get_history(leaf)), (False, stored_path)):
            positions = sorted({0, len(whole), *generator.sample(range(len(whole) + 1), min(10, len(whole)))})
            for limit in (1, 3, 100):
                for position in positions:
                    before = None if position == len(whole) else whole[position]["id"]
                    page = await session.get_history(leaf, limit=limit, before=before, overlays=overlays)
                    assert page == whole[max(0, position - limit):position], (leaf, overlays, limit, before)
