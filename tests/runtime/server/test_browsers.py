"""Browsers against a real server: CORS off by default, listed origins, ``Origin`` checks on WebSocket
upgrades and requests, and the token as a WebSocket subprotocol (runtime/server/browsers.py)."""

import json

import httpx
import pytest
import trio

from common.errors import HttpError, InvalidInputError, UnauthorizedError
from runtime import open_host
from runtime.server.app import bind_sessions, serve
from runtime.server.browsers import WS_PROTOCOL, bearer_protocol
from runtime.server.config import ConfigError, ServerSettings
from runtime.wsclient import WebSocketConnection

TOKEN = "browser-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
APP = "https://app.example"


async def start(tmp_path, nursery, *, token=TOKEN, origins=()):
    host = await nursery.start(_host, tmp_path)
    settings = ServerSettings(bind="127.0.0.1:0", cors_origins=origins)
    urls = await nursery.start(lambda task_status: serve(host, settings, token=token, task_status=task_status))
    return urls[0]


async def _host(tmp_path, task_status):
    async with open_host(tmp_path / "data") as host:
        bind_sessions(host)
        task_status.started(host)
        await trio.sleep_forever()


def ws_url(url, session="chat"):
    return url.replace("http://", "ws://") + f"/v1/sessions/{session}/ws"


async def call(ws, method, **params):
    await ws.send(json.dumps({"id": 1, "method": method, "params": params}))
    while True:  # broadcasts may come first
        frame = json.loads(await ws.receive())
        if isinstance(frame, dict) and frame.get("id") == 1:
            return frame


# -- CORS ---------------------------------------------------------------------------------------------


async def test_cors_is_off_by_default_a_foreign_page_is_refused_and_gets_no_cors_headers(tmp_path, nursery):
    url = await start(tmp_path, nursery)
    async with httpx.AsyncClient(base_url=url) as http:
        preflight = await http.options("/v1/sessions", headers={
            "Origin": APP, "Access-Control-Request-Method": "GET", "Access-Control-Request-Headers": "authorization"})
        simple = await http.post("/v1/actors:hibernate", headers={"Origin": APP, **AUTH})
        plain = await http.get("/v1/sessions", headers=AUTH)
    assert preflight.status_code == 403
    assert "access-control-allow-origin" not in preflight.headers
    assert simple.status_code == 403
    assert simple.json() == {"error": {"type": "OriginNotAllowedError", "message": (
        "a web page of origin 'https://app.example' may not call this server; list it in [server] cors_origins "
        "to allow it")}}
    assert "access-control-allow-origin" not in simple.headers
    assert plain.status_code == 200 and "access-control-allow-origin" not in plain.headers


async def test_a_listed_origin_gets_its_preflight_answered_and_cors_headers_without_credentials(tmp_path, nursery):
    url = await start(tmp_path, nursery, origins=[APP + "/"])
    async with httpx.AsyncClient(base_url=url) as http:
        preflight = await http.options("/v1/sessions/chat/messages", headers={
            "Origin": APP, "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type"})
        listed = await http.get("/v1/sessions", headers={"Origin": APP, **AUTH})
        refused = await http.get("/v1/sessions", headers={"Origin": APP})
        other = await http.get("/v1/sessions", headers={"Origin": "https://evil.example", **AUTH})
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == APP
    assert preflight.headers["access-control-allow-methods"] == "GET, POST, PUT, DELETE"
    assert preflight.headers["access-control-allow-headers"] == "accept, authorization, content-type"
    assert preflight.headers["access-control-max-age"] == "600"
    assert "access-control-allow-credentials" not in preflight.headers
    assert listed.status_code == 200
    assert listed.headers["access-control-allow-origin"] == APP
    assert listed.headers["vary"] == "Origin"
    assert "Retry-After" in listed.headers["access-control-expose-headers"]
    assert "access-control-allow-credentials" not in listed.headers
    assert refused.status_code == 401 and refused.headers["access-control-allow-origin"] == APP  # readable 401
    assert other.status_code == 403


async def test_a_star_allows_any_origin_with_a_star_and_never_credentials(tmp_path, nursery):
    url = await start(tmp_path, nursery, origins=["*"])
    async with httpx.AsyncClient(base_url=url) as http:
        answer = await http.get("/v1/health", headers={"Origin": "https://anything.example"})
    assert answer.headers["access-control-allow-origin"] == "*"
    assert "access-control-allow-credentials" not in answer.headers


async def test_the_servers_own_pages_may_call_it(tmp_path, nursery):
    url = await start(tmp_path, nursery)
    async with httpx.AsyncClient(base_url=url) as http:
        own = await http.get("/v1/sessions", headers={"Origin": url, **AUTH})
    assert own.status_code == 200 and "access-control-allow-origin" not in own.headers


@pytest.mark.parametrize("origins", ["https://app.example", ["app.example"], ["https://app.example/path"], [5]])
def test_bad_cors_origins_are_configuration_errors(origins):
    with pytest.raises(ConfigError, match="cors_origins"):
        ServerSettings(cors_origins=origins)


# -- WebSockets ---------------------------------------------------------------------------------------


async def test_a_websocket_from_a_foreign_page_is_refused_on_a_tokenless_loopback_server(tmp_path, nursery):
    url = await start(tmp_path, nursery, token=None)
    with pytest.raises(HttpError, match="origin 'https://evil.example' may not call this server") as caught:
        await WebSocketConnection.connect(ws_url(url), headers=[("Origin", "https://evil.example")])
    assert type(caught.value).__name__ == "OriginNotAllowedError" and caught.value.status == 403
    own = await WebSocketConnection.connect(ws_url(url), headers=[("Origin", url)])
    assert (await call(own, "get_path_length"))["result"] == 0
    await own.aclose()
    plain = await WebSocketConnection.connect(ws_url(url))  # no Origin: not a browser
    await plain.aclose()


async def test_a_listed_origin_may_open_a_websocket(tmp_path, nursery):
    url = await start(tmp_path, nursery, origins=[APP])
    ws = await WebSocketConnection.connect(ws_url(url), headers=[("Origin", APP), *AUTH.items()])
    assert (await call(ws, "get_path_length"))["result"] == 0
    await ws.aclose()


async def test_a_browser_sends_the_token_as_a_subprotocol_and_it_is_never_echoed(tmp_path, nursery):
    url = await start(tmp_path, nursery, origins=[APP])
    ws = await WebSocketConnection.connect(ws_url(url), headers=[("Origin", APP)],
                                           subprotocols=[WS_PROTOCOL, bearer_protocol(TOKEN)])
    assert ws.subprotocol == WS_PROTOCOL
    reply = await call(ws, "append_message", message={"id": "m1", "role": "user", "parts": [{"type": "text",
                                                                                             "text": "hi"}]})
    assert reply["result"] is True
    await ws.aclose()
    with pytest.raises(UnauthorizedError):
        await WebSocketConnection.connect(ws_url(url), subprotocols=[WS_PROTOCOL, bearer_protocol("wrong")])
    with pytest.raises(InvalidInputError, match="offer the subprotocol 'durable-sessions'"):
        await WebSocketConnection.connect(ws_url(url), subprotocols=[bearer_protocol(TOKEN)])
    with pytest.raises(UnauthorizedError):
        await WebSocketConnection.connect(ws_url(url), subprotocols=[WS_PROTOCOL])


def test_a_token_with_any_printable_characters_fits_a_subprotocol():
    protocol = bearer_protocol("a b/c,d=e")
    assert protocol.startswith("bearer.") and all(c.isalnum() or c in "-_." for c in protocol)
