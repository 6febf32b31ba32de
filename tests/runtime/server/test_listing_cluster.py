"""Cluster mode (real ``serve --cluster`` processes on a throwaway Postgres): any host lists a session written
through another (the catalog in Postgres; more in tests/cluster/test_http_catalog.py), and a browser's
WebSocket, its token in a subprotocol, is relayed to the session's owner."""

import json

import httpx

from runtime.server.browsers import WS_PROTOCOL, bearer_protocol
from runtime.wsclient import WebSocketConnection
from tests.support.cluster_hosts import run_cluster

TOKEN = "cluster-listing-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


async def test_any_host_lists_the_session_and_a_browser_socket_reaches_the_owner(tmp_path, pg_empty_dsn):
    with run_cluster(tmp_path, pg_empty_dsn, hosts=2, lease_s=2.0, app=None, token=TOKEN) as cluster:
        first, second = cluster.urls
        async with httpx.AsyncClient(headers=AUTH) as http:
            empty = await http.get(f"{first}/v1/sessions")
            stored = await http.post(f"{first}/v1/sessions/chat/messages", json={
                "message": {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}})
            owner = stored.headers["X-Durable-Sessions-Owner"]
            other = second if owner == first else first
            listed = await http.get(f"{other}/v1/sessions")
            one = await http.get(f"{other}/v1/sessions/chat")
        assert stored.status_code == 201
        ws = await WebSocketConnection.connect(other.replace("http", "ws") + "/v1/sessions/chat/ws",
                                               subprotocols=[WS_PROTOCOL, bearer_protocol(TOKEN)])
        assert ws.subprotocol == WS_PROTOCOL
        await ws.send(json.dumps({"id": 1, "method": "get_path_length"}))
        reply = json.loads(await ws.receive())
        await ws.aclose()
    assert empty.json() == {"sessions": [], "cursor": None}
    assert listed.status_code == one.status_code == 200
    assert [(e["id"], e["messages"], e["active"]) for e in listed.json()["sessions"]] == [("chat", 1, True)]
    assert one.json() == {"session": listed.json()["sessions"][0]}
    assert reply == {"id": 1, "result": 1}
