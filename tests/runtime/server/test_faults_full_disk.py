"""A full disk, against a real server process on a real (small, loop-mounted) ext4 filesystem.

Every write refused for want of space is answered 507 ``StorageFullError``
with ``Retry-After`` (HTTP, WebSocket RPC, transcript routes), never an
anonymous 500; nothing acknowledged is lost; reads go on; a restart on the
full disk comes up (no ``-shm`` file for SQLite to map, so no SIGBUS); once
space is freed, writes are accepted again.
"""

from __future__ import annotations

import httpx
import pytest

from common.errors import StorageFullError
from runtime.client import SessionsClient
from tests.support.disks import fill, free, small_ext4
from tests.support.processes import server_process

pytestmark = pytest.mark.slow


def msg(message_id, text="hello " * 300):
    return {"id": message_id, "role": "user", "parts": [{"type": "text", "text": text}]}


def assert_full(response):
    assert response.status_code == 507, response.text
    assert response.json()["error"]["type"] == "StorageFullError"
    assert "disk holding the data folder is full" in response.json()["error"]["message"]
    assert response.headers["Retry-After"] == "30"


async def append_until_full(http, session_id, start):
    """Append until the disk refuses; the ids acknowledged, and the refusal."""
    acknowledged = []
    for i in range(start, start + 5000):
        response = await http.post(f"/v1/sessions/{session_id}/messages", json={"message": msg(f"m{i}")})
        if response.status_code != 201:
            return acknowledged, response
        acknowledged.append(f"m{i}")
    raise AssertionError("the disk never filled up")


async def test_a_full_disk_is_a_typed_507_and_nothing_acknowledged_is_lost(tmp_path):
    with small_ext4(tmp_path, size_mb=24) as mount:
        data = mount / "data"
        transcript_key = {"project_key": "p", "session_id": "t"}
        acknowledged = {}
        with server_process(data, files_dir=tmp_path) as server:
            async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
                for sid in ("a", "b"):  # their files exist before the disk fills
                    reply = await http.post(f"/v1/sessions/{sid}/messages", json={"message": msg("m0")})
                    assert reply.status_code == 201
                    acknowledged[sid] = ["m0"]
                stored = await http.post("/v1/transcripts/entries", json={
                    "key": transcript_key, "entries": [{"type": "user", "uuid": "u0"}]})
                assert stored.status_code == 200, stored.text
                assert fill(mount) > 0
                more, refusal = await append_until_full(http, "a", 1)
                acknowledged["a"] += more
                assert_full(refusal)
                assert_full(await http.post("/v1/sessions/b/messages", json={"message": msg("x" * 50)}))
                assert_full(await http.post("/v1/sessions/new-one/messages", json={"message": msg("n0")}))
                assert_full(await http.post("/v1/transcripts/entries", json={
                    "key": transcript_key, "entries": [{"type": "user", "uuid": f"u{i}", "text": "t" * 4000}
                                                       for i in range(1, 200)]}))
                async with SessionsClient(server.url) as client, client.session("b").websocket() as ws:
                    with pytest.raises(StorageFullError, match="disk holding the data folder is full"):
                        await ws.call("append_message", msg("ws-1"))
                    assert [m["id"] for m in await ws.call("get_history")] == acknowledged["b"]
                for sid, ids in acknowledged.items():  # reads go on, and hold exactly what was acknowledged
                    history = (await http.get(f"/v1/sessions/{sid}/messages")).json()["messages"]
                    assert [m["id"] for m in history] == ids
        # Restart on the still-full disk: the server comes up and serves every acknowledged message.
        assert not list(data.rglob("*-shm"))
        with server_process(data, files_dir=tmp_path) as server:
            async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
                for sid, ids in acknowledged.items():
                    history = (await http.get(f"/v1/sessions/{sid}/messages")).json()["messages"]
                    assert [m["id"] for m in history] == ids
                fill(mount)  # whatever the stop freed (a WAL cut at close, the catalog's) is taken again
                assert_full(await http.post("/v1/sessions/a/messages", json={"message": msg("again")}))
                free(mount)
                for sid, first in (("a", "again"), ("new-one", "n0")):
                    reply = await http.post(f"/v1/sessions/{sid}/messages", json={"message": msg(first)})
                    assert reply.status_code == 201
                assert (await http.get("/v1/sessions/a/messages:count")).json()["count"] == len(acknowledged["a"]) + 1
