"""Session and SessionManager used the way an embedding program would, with hostile arguments.

The tests marked ``xfail(strict=True)`` pin bugs in modules this hardening
pass does not own (``actors/session.py``, ``actors/manager.py``,
``actors/session_messages.py``, ``actors/session_compaction.py``): each
states the behaviour the spec calls for and fails until the owner fixes it.
The reason names the exception raised today (pytest-trio wraps an async
test's exception in an ExceptionGroup, so only the sync test says ``raises=``).
"""

import datetime

import pytest

from actors.manager import SessionManager
from actors.session import Session
from common.errors import InvalidInputError, InvalidMessageError, MessageNotFoundError
from tests.support.backends import index_rows, kind_of, row_count

pytestmark = pytest.mark.both_storages


def msg(mid, text="hello flight", **extra):
    return {"id": mid, "role": "user", "parts": [{"type": "text", "text": text}], **extra}


def counts(storage):
    return row_count(storage, "assistant_messages"), len(index_rows(storage))


# -- what already holds ----------------------------------------------------------------


@pytest.mark.parametrize("message, field", [
    (None, "message"), ("text", "message"), ({"id": 5, "role": "user", "parts": []}, "message.id"),
    ({"id": "a", "role": None, "parts": []}, "message.role"),
    ({"id": "a", "role": "user", "parts": ()}, "message.parts"),
    ({"id": "a", "role": "user", "parts": [], "metadata": b"x"}, "message"),
    ({"id": "a", "role": "user", "parts": [], "metadata": {"x": float("nan")}}, "message"),
    ({"id": "a", "role": "user", "parts": [], "metadata": {1, 2}}, "message"),
])
async def test_malformed_messages_are_invalid_and_write_nothing(storage, message, field):
    session = Session.create(storage)
    with pytest.raises(InvalidMessageError) as raised:
        await session.append_message(message)
    assert raised.value.field == field
    assert counts(storage) == (0, 0)


async def test_ids_with_nul_path_separators_and_unicode_are_plain_ids(storage):
    session = Session.create(storage)
    weird = ["a\x00b", "../../etc/passwd", "a/b\\c", "😀", "e\u0301", "\u202eabc", " "]
    if kind_of(storage) == "postgres":  # Postgres text holds no NUL: refused, nothing written (docs/postgres.md)
        with pytest.raises(InvalidInputError) as raised:
            await session.append_message(msg("a\x00b"))
        assert raised.value.field == "message_id"
        assert counts(storage) == (0, 0)
        weird.remove("a\x00b")
    for mid in weird:
        assert await session.append_message(msg(mid)) is True
    assert [m["id"] for m in await session.get_history()] == weird
    assert await session.get_message("a") is None
    if kind_of(storage) == "sqlite":
        assert (await session.get_message("a\x00b"))["id"] == "a\x00b"


async def test_json_numbers_are_written_as_javascript_writes_them(storage):
    session = Session.create(storage)
    await session.append_message(msg("f", metadata={"one": 1.0, "big": 1e21, "negzero": -0.0, "tiny": 1e-7}))
    assert (await session.get_message("f"))["metadata"] == {"one": 1, "big": 10**21, "negzero": 0, "tiny": 1e-07}


async def test_manager_arguments_are_checked_before_writing(storage):
    manager = SessionManager.create(storage)
    with pytest.raises(InvalidInputError, match="name must be a string, not int"):
        await manager.create(5)
    sid = (await manager.create("trip"))["id"]
    with pytest.raises(InvalidInputError, match="cost must be a finite number >= 0, not nan"):
        await manager.add_usage(sid, 1, 1, float("nan"))
    with pytest.raises(InvalidMessageError, match=r"messages\[1\].id must be a string, not int"):
        await manager.append_all(sid, [msg("h1"), {"id": 5, "role": "user", "parts": []}])
    assert await manager.get_message_count(sid) == 0
    assert await manager.append_all(sid, (msg(f"g{i}") for i in range(3))) == "g2"
    assert [m["id"] for m in await manager.get_history(sid)] == ["g0", "g1", "g2"]


# -- bugs in modules owned elsewhere (strict xfail) ------------------------------------------------


@pytest.mark.parametrize("message", [
    msg("a", "half an emoji \ud83d"), msg("\udc00"), msg("b", metadata={"\ud800": 1}),
])
async def test_a_lone_surrogate_in_a_message_is_an_invalid_message(storage, message):
    session = Session.create(storage)
    with pytest.raises(InvalidMessageError):
        await session.append_message(message)
    assert counts(storage) == (0, 0)


async def test_a_search_limit_beyond_64_bits_means_every_hit(storage):
    manager = SessionManager.create(storage)
    sid = (await manager.create("trip"))["id"]
    await manager.append(sid, msg("m1"))
    session = await manager.get_session(sid)
    assert [h["id"] for h in await session.search("flight", limit=2**70)] == ["m1"]
    assert [h["id"] for h in await manager.search("flight", limit=2**70)] == ["m1"]


async def test_recent_history_with_min_recent_minus_infinity_keeps_the_leaf(storage):
    session = Session.create(storage)
    for i in range(3):
        await session.append_message(msg(f"m{i}", "x" * 100))
    assert await session.get_recent_history(10, float("-inf")) == await session.get_recent_history(10, 1)


def test_a_huge_integer_threshold_is_accepted(storage):
    assert Session.create(storage).compact_after(10**400).token_threshold == 10**400


async def test_usage_counters_stay_integers_or_refuse(storage):
    manager = SessionManager.create(storage)
    sid = (await manager.create("trip"))["id"]
    with pytest.raises(InvalidInputError):
        await manager.add_usage(sid, 2**63, 0, 0.0)
    await manager.add_usage(sid, 2**62, 0, 0.0)
    with pytest.raises(InvalidInputError):
        await manager.add_usage(sid, 2**62, 0, 0.0)
    assert (await manager.get(sid))["input_tokens"] == 2**62


async def test_a_created_at_outside_utc_range_is_an_invalid_message(storage):
    early = datetime.datetime(1, 1, 1, tzinfo=datetime.timezone(datetime.timedelta(hours=5)))
    with pytest.raises(InvalidMessageError):
        await Session.create(storage).append_message(msg("d", createdAt=early))


# -- ids no store can hold, on both storages -------------------------------------------


async def test_a_lone_surrogate_in_an_id_is_invalid_input_for_every_call(storage):
    # It used to escape as UnicodeEncodeError from SQLite (a 500 over HTTP).
    session = Session.create(storage)
    await session.append_message(msg("m1"))
    bad = "a\ud800"
    calls = {
        "message_id": [lambda: session.get_message(bad), lambda: session.get_branches(bad)],
        "leaf_id": [lambda: session.get_history(bad), lambda: session.get_path_length(bad),
                    lambda: session.get_recent_history(100, leaf_id=bad), lambda: session.get_history_row_stats(bad)],
        "parent_id": [lambda: session.append_message(msg("m2"), bad)],
        "message_ids": [lambda: session.delete_messages([bad])],
        "from_id": [lambda: session.add_compaction("s", bad, "m1")],
    }
    for field, makes in calls.items():
        for make in makes:
            with pytest.raises(InvalidInputError) as raised:
                await make()
            assert raised.value.field == field
    manager = SessionManager.create(storage)
    for call in (lambda: manager.get(bad), lambda: manager.get_session(bad), lambda: manager.create(bad)):
        with pytest.raises(InvalidInputError):
            await call()
    assert [m["id"] for m in await session.get_history()] == ["m1"]


async def test_an_id_holding_nul_reads_as_unknown_on_both_storages(storage):
    session = Session.create(storage)
    await session.append_message(msg("m1"))
    nul = "m\x001"
    assert await session.get_message(nul) is None
    assert await session.get_branches(nul) == []
    assert await session.get_history(nul) == []
    assert await session.get_path_length(nul) == 0
    assert await session.get_recent_history(100, leaf_id=nul) == {"messages": [], "truncated": False,
                                                                   "totalContentBytes": 0}
    assert await session.delete_messages([nul]) == 0
    with pytest.raises(MessageNotFoundError):
        await session.update_message(msg(nul))
    assert await session.append_message(msg("m2"), nul) is True  # an unknown parent makes a root
    assert [m["id"] for m in await session.get_history()] == ["m2"]
