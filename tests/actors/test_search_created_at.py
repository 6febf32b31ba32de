"""A search hit carries ``createdAt``, the message's stored time (docs/deviations.md, "Search hits carry
createdAt": optional in the spec, left out by the original's ``Session.search``; kept here)."""

import datetime as dt
import re

import pytest

from actors.session import Session

pytestmark = pytest.mark.both_storages

ISO_MS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


async def test_a_hit_carries_the_stored_time_of_its_message(storage):
    session = Session.create(storage)
    before = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
    await session.append_message({"id": "m1", "role": "user", "parts": [{"type": "text", "text": "booking ZFA04Y"}]})
    after = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1)
    [hit] = await session.search("zfa04y")
    assert set(hit) == {"id", "role", "content", "createdAt"}
    assert (hit["id"], hit["role"], hit["content"]) == ("m1", "user", "booking ZFA04Y")
    assert ISO_MS.fullmatch(hit["createdAt"])
    assert before <= dt.datetime.fromisoformat(hit["createdAt"]) <= after
