"""The session routes' short way (runtime.server.shortcut) answers exactly as the Quart app does.

Each request is sent twice to two sessions in the same state: once the short way, once with
``server.shortcut = False`` (through the app); statuses, headers and bodies must match.
"""

import json
import re

import msgpack
import pytest
import trio

from actors.session_agent import SessionAgent
from runtime import open_host
from runtime.server.app import bind_sessions, create_app

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


class Probe(SessionAgent):
    async def slow(self, seconds):
        await trio.sleep(seconds)
        return "done"


def msg(message_id, words, role="user"):
    return {"id": message_id, "role": role, "parts": [{"type": "text", "text": words}]}


@pytest.fixture
async def app(tmp_path):
    async with open_host(tmp_path / "data", max_pending_calls=2) as host:
        bind_sessions(host, agent_class=Probe)
        yield create_app(host, token=TOKEN, max_body_bytes=64 * 1024)


async def send(client, method, path, *, data=None, headers=AUTH):
    route = path.split("?", 1)[0]
    response = await client.open(path, method=method, data=data, headers=dict(headers),
                                 scope_base={"raw_path": route.encode("ascii")})
    body = re.sub(rb'"(created|updated)At":"[^"]*"', rb'"\1At":"-"', await response.get_data())  # times
    kept = sorted((name.lower(), value) for name, value in response.headers.items() if name.lower() != "date")
    return response.status_code, kept, body


JSON_HEADERS = {**AUTH, "Content-Type": "application/json"}
MSGPACK_ALL = {**AUTH, "Content-Type": "application/msgpack", "Accept": "application/msgpack"}

# (method, path after the session, body bytes, headers)
REQUESTS = [
    ("POST", "/messages", json.dumps({"message": msg("m1", "hello there")}), JSON_HEADERS),
    ("POST", "/messages", json.dumps({"message": msg("m1", "hello there")}), JSON_HEADERS),  # a duplicate: 200
    ("POST", "/messages", msgpack.packb({"message": msg("m2", "and again")}), MSGPACK_ALL),
    ("POST", "/messages", b"{not json", JSON_HEADERS),
    ("POST", "/messages", b"hello", {**AUTH, "Content-Type": "text/plain"}),
    ("POST", "/messages", json.dumps({"parentId": "m1"}), JSON_HEADERS),
    ("POST", "/messages", json.dumps([1, 2]), JSON_HEADERS),
    ("GET", "/messages", None, AUTH),
    ("GET", "/messages?limit=1", None, {**AUTH, "Accept": "application/msgpack;q=0.9, application/json;q=0.5"}),
    ("GET", "/messages?limit=x", None, AUTH),
    ("GET", "/messages?limit=", None, AUTH),
    ("GET", "/messages/m1", None, AUTH),
    ("GET", "/messages/nope", None, AUTH),
    ("GET", "/messages:count", None, {**AUTH, "Accept": "*/*"}),
    ("GET", "/search?q=hello&q=other", None, AUTH),
    ("PUT", "/messages/m2", json.dumps({"message": msg("m2", "changed")}), JSON_HEADERS),
    ("PUT", "/messages/m2", json.dumps({"message": msg("m3", "changed")}), JSON_HEADERS),
    ("POST", "/rpc", json.dumps({"method": "get_path_length"}), JSON_HEADERS),
    ("POST", "/rpc", json.dumps({"method": "nope"}), JSON_HEADERS),
    ("DELETE", "/messages/m2", None, AUTH),
    ("DELETE", "/messages/m2", None, AUTH),
    ("POST", "/messages", json.dumps({"message": msg("big", "x" * 70_000)}), JSON_HEADERS),
    # the app's own answers: no token, an unknown route, a wrong method, the listing
    ("GET", "/messages", None, {}),
    ("GET", "/nope", None, AUTH),
    ("PATCH", "/messages", None, AUTH),
    ("GET", "", None, AUTH),
]


@pytest.mark.parametrize("encoded", ["plain", "chat%2F1"])
async def test_the_short_way_answers_as_the_app_does(app, encoded):
    server = app.extensions["durable_sessions"]
    client = app.test_client()
    for method, path, data, headers in REQUESTS:
        server.shortcut = True
        short = await send(client, method, f"/v1/sessions/via-{encoded}{path}", data=data, headers=headers)
        server.shortcut = False
        through_app = await send(client, method, f"/v1/sessions/app-{encoded}{path}", data=data, headers=headers)
        through_app = through_app[:2] + (through_app[2].replace(b"app-", b"via-"),)  # a path or id named
        assert short == through_app, (method, path)
    text = server.metrics.render().decode()
    assert 'durable_sessions_requests_total{route="POST /v1/sessions/{id}/messages",status="201"} 4.0' in text


async def test_an_overloaded_actor_is_refused_the_short_way_with_retry_after(app):
    client = app.test_client()

    async def slow():
        await send(client, "POST", "/v1/sessions/s/rpc", data=json.dumps({"method": "slow", "params": [0.5]}),
                   headers=JSON_HEADERS)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(slow)
        nursery.start_soon(slow)
        await trio.sleep(0.1)
        status, headers, body = await send(client, "GET", "/v1/sessions/s/messages")
    assert status == 429 and ("retry-after", "1") in headers
    assert json.loads(body)["error"]["type"] == "ActorOverloadedError"


async def test_on_a_cluster_host_the_short_way_answers_its_active_sessions_as_the_app_does(tmp_path, pg_empty_dsn):
    from common.wire import OWNER_HEADER
    from runtime.host.cluster import ClusterOptions
    from runtime.server.app import SessionsServer
    from runtime.server.forwarding import Forwarder

    options = ClusterOptions(pg_empty_dsn, "http://h1", host_id="h1", lease_s=10.0, connect_timeout_s=5.0)
    async with open_host(tmp_path / "data", cluster=options) as host:
        bind_sessions(host, agent_class=Probe)
        forwarder = Forwarder(host_id="h1", advertise_url="http://h1", lease_s=10.0)
        server = SessionsServer(host, namespace="sessions", token=TOKEN, max_body_bytes=64 * 1024, forwarder=forwarder)
        client = server.app.test_client()
        taken = []
        original = server.app.asgi_app  # the outermost middleware; SessionShortcut sits below ForwardingShortcut
        layers = []
        while type(original).__name__ != "SessionShortcut":
            layers.append(type(original).__name__)
            original = original.app
        assert layers.index("ForwardingShortcut") == len(layers) - 1
        real_answer = original._answer

        async def counted(*args):
            taken.append(args[3].route.name)
            await real_answer(*args)

        original._answer = counted
        for method, path, data, headers in REQUESTS:
            server.shortcut = True
            short = await send(client, method, f"/v1/sessions/via-plain{path}", data=data, headers=headers)
            server.shortcut = False
            through_app = await send(client, method, f"/v1/sessions/app-plain{path}", data=data, headers=headers)
            through_app = through_app[:2] + (through_app[2].replace(b"app-", b"via-"),)
            assert short == through_app, (method, path)
        assert len(taken) > 10  # the session was active after the first append: the short way answered
        status, headers, _ = await send(client, "GET", "/v1/sessions/via-plain/messages:count")
        assert status == 200 and (OWNER_HEADER.lower(), "http://h1") in headers
        # A session not active here goes to the app (which finds its owner): not taken.
        before = len(taken)
        server.shortcut = True
        status, headers, _ = await send(client, "GET", "/v1/sessions/never-written/messages:count")
        assert status == 200 and len(taken) == before
