"""Semantic/hybrid search without an embedder, on both storages: SQLite says which setting to add
(400), Postgres says the mode is not built there yet (501); text search is unchanged on both."""

from __future__ import annotations

import pytest

from actors.session import Session
from common.errors import InvalidInputError, NotSupportedError
from storage import SqlStorage

pytestmark = pytest.mark.both_storages


@pytest.mark.parametrize("mode", ["semantic", "hybrid"])
async def test_semantic_modes_refuse_with_the_storage_s_reason(storage, mode):
    session = Session.create(storage)
    await session.append_message({"id": "m1", "role": "user", "parts": [{"type": "text", "text": "flight cancelled"}]})
    if isinstance(storage, SqlStorage):
        with pytest.raises(InvalidInputError) as raised:
            await session.search("flight", mode=mode)
        assert raised.value.status == 400 and raised.value.field == "embedder"
        assert "[search]" in str(raised.value)
    else:
        with pytest.raises(NotSupportedError) as refused:
            await session.search("flight", mode=mode)
        assert refused.value.status == 501 and mode in str(refused.value) and "Postgres" in str(refused.value)
        with pytest.raises(NotSupportedError):
            await session.reembed()
    assert [hit["id"] for hit in await session.search("flight", mode="text")] == ["m1"]
    assert await session.search_status() == {"embedder": None, "dimension": None, "embedded": 0, "pending": 0}
