"""Cluster mode (real ``serve --cluster`` processes on a throwaway Postgres): the listing answers 501 by name,
and a browser's WebSocket, its token in a subprotocol, is relayed to the session's owner."""

import json

import httpx

from runtime.server.browsers import WS_PROTOCOL, bearer_protocol
from runtime.wsclient import WebSocketConnection
from tests.support.cluster_hosts import run_cluster

TOKEN = "cluster-listing-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


async def test_listing_is_not_supported_and_a_browser_socket_reaches_the_owner(tmp_path, pg_empty_dsn):
    with run_cluster(tmp_path, pg_empty_dsn, hosts=2, lease_s=2.0, app=None, token=TOKEN) as cluster:
        first, second = cluster.urls
        async with httpx.AsyncClient(headers=AUTH) as http:
            listed = await http.get(f"{first}/v1/sessions")
            one = await http.get(f"{first}/v1/sessions/chat")
            stored = await http.post(f"{first}/v1/sessions/chat/messages", json={
                "message": {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}})
        assert stored.status_code == 201
        owner = stored.headers["X-Durable-Sessions-Owner"]
        other = second if owner == first else first
        ws = await WebSocketConnection.connect(other.replace("http", "ws") + "/v1/sessions/chat/ws",
                                               subprotocols=[WS_PROTOCOL, bearer_protocol(TOKEN)])
        assert ws.subprotocol == WS_PROTOCOL
        await ws.send(json.dumps({"id": 1, "method": "get_path_length"}))
        reply = json.loads(await ws.receive())
        await ws.aclose()
    assert listed.status_code == one.status_code == 501
    assert listed.json()["error"]["type"] == "NotSupportedError"
    assert "not supported in cluster mode" in listed.json()["error"]["message"]
    assert reply == {"id": 1, "result": 1}
