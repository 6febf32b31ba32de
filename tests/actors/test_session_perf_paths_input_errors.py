"""Bad input on the session/manager paths: each error names its field, and nothing is written."""

import datetime

import pytest

from actors.manager import SessionManager
from actors.session import Session
from common.errors import InvalidInputError, InvalidMessageError
from tests.support.backends import row_count

pytestmark = pytest.mark.both_storages


def msg(mid, text="hello", **extra):
    return {"id": mid, "role": "user", "parts": [{"type": "text", "text": text}], **extra}


@pytest.mark.parametrize("message, field", [
    (msg("a", "half \ud83d"), "message.parts[0].text"),
    (msg("\udc00"), "message.id"),
    (msg("b", metadata={"ok": ["x", {"deep": "\udfff"}]}), "message.metadata.ok[1].deep"),
    (msg("c", metadata={"\ud800": 1}), "message.metadata"),
])
async def test_a_lone_surrogate_names_the_string_holding_it(storage, message, field):
    session = Session.create(storage)
    with pytest.raises(InvalidMessageError) as raised:
        await session.append_message(message)
    assert raised.value.field == field
    assert str(raised.value) == f"{field} holds a lone UTF-16 surrogate, which is not text"
    assert row_count(storage, "assistant_messages") == 0


async def test_a_lone_surrogate_in_a_batch_names_the_message_and_writes_nothing(storage):
    session = Session.create(storage)
    with pytest.raises(InvalidMessageError) as raised:
        await session.append_messages([msg("ok"), msg("bad", "\ud83d")])
    assert raised.value.field == "messages[1].parts[0].text"
    assert row_count(storage, "assistant_messages") == 0


async def test_a_created_at_utc_cannot_hold_is_an_invalid_created_at(storage):
    early = datetime.datetime(1, 1, 1, tzinfo=datetime.timezone(datetime.timedelta(hours=5)))
    with pytest.raises(InvalidMessageError, match="outside the dates UTC can hold") as raised:
        await Session.create(storage).append_message(msg("d", createdAt=early))
    assert raised.value.field == "message.createdAt"
    assert row_count(storage, "assistant_messages") == 0


async def test_usage_sums_that_would_overflow_name_the_counter_and_change_nothing(storage):
    manager = SessionManager.create(storage)
    sid = (await manager.create("trip"))["id"]
    await manager.add_usage(sid, 2**63 - 2, 5, 1e308)
    with pytest.raises(InvalidInputError, match=r"input_tokens would exceed 9223372036854775807") as raised:
        await manager.add_usage(sid, 2, 0, 0.0)
    assert raised.value.field == "input_tokens"
    with pytest.raises(InvalidInputError) as raised:
        await manager.add_usage(sid, 0, 0, 1e308)
    assert raised.value.field == "cost"
    row = await manager.add_usage(sid, 1, 1, 0.0)
    assert (row["input_tokens"], row["output_tokens"], row["estimated_cost"]) == (2**63 - 1, 6, 1e308)


async def test_recent_history_min_recent_below_one_keeps_only_what_fits(storage):
    session = Session.create(storage)
    for i in range(3):
        await session.append_message(msg(f"m{i}", "x" * 100))
    for floor in (float("-inf"), -5, 0, 0.5):
        window = await session.get_recent_history(0, floor)
        assert [m["id"] for m in window["messages"]] == ["m2"]
    everything = await session.get_recent_history(10, float("inf"))
    assert [m["id"] for m in everything["messages"]] == ["m0", "m1", "m2"]


def test_an_integer_threshold_beyond_floats_is_kept_exactly_and_infinity_is_refused(storage):
    session = Session.create(storage)
    assert session.compact_after(10**400).token_threshold == 10**400
    with pytest.raises(InvalidInputError, match="threshold must be a finite number >= 0, not inf"):
        session.compact_after(float("inf"))


async def test_the_history_block_follows_forks_splits_and_deletes_in_open_sessions(storage):
    manager = SessionManager.create(storage).with_searchable_history("history")
    first_id = (await manager.create("first"))["id"]
    await manager.append(first_id, msg("m1"))
    first = await manager.get_session(first_id)

    async def shown():
        return (await first.get_context_block("history"))["content"]

    assert await shown() == "1 session available for search."
    forked = await manager.fork(first_id, "m1", "copy")
    assert await shown() == "2 sessions available for search."
    await manager.compact_and_split(first_id, "so far")
    assert await shown() == "3 sessions available for search."
    await manager.delete(forked["id"])
    assert await shown() == "2 sessions available for search."
