"""OpenTelemetry traces (runtime.telemetry): the spans of a request, a turn, an activation, a hibernation,
a cluster forward continuing on the owner host, Postgres appends; nothing secret in them; off when not configured.

Spans are taken by the SDK's own :class:`InMemorySpanExporter`; the cluster test runs two hosts on the
Postgres fixture in one process, the owner served by hypercorn on a loopback socket, so the forward is a
real HTTP request carrying a real ``traceparent``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from actors.session_agent import SessionAgent
from common.wire import OWNER_HEADER
from runtime import open_host, telemetry
from runtime.server.app import SessionsServer, bind_sessions, bind_socket, create_app

TOKEN = "tok-3f9a-very-secret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SECRET_TEXT = "the launch code is 0000"


def message(message_id: str) -> dict:
    return {"message": {"id": message_id, "role": "user", "parts": [{"type": "text", "text": SECRET_TEXT}]}}


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.configure(provider)
    try:
        yield exporter
    finally:
        telemetry.configure(None)


def by_name(finished, name):
    return [span for span in finished if span.name == name]


def assert_nothing_secret(finished):
    for span in finished:
        for key, value in (span.attributes or {}).items():
            assert SECRET_TEXT not in str(value) and TOKEN not in str(value), (span.name, key)
            assert key not in ("url.query", "url.full", "db.query.text", "db.statement"), (span.name, key)


async def test_a_request_is_a_server_span_and_its_turn_a_child(tmp_path, spans):
    async with open_host(tmp_path / "data") as host:
        bind_sessions(host)
        client = create_app(host, token=TOKEN, max_body_bytes=64 * 1024).test_client()
        response = await client.post("/v1/sessions/s1/messages", json=message("m1"), headers=AUTH,
                                     scope_base={"raw_path": b"/v1/sessions/s1/messages"})
        assert response.status_code == 201
        response = await client.get("/v1/sessions/s1/messages?q=secret", headers=AUTH,
                                    scope_base={"raw_path": b"/v1/sessions/s1/messages"})
        assert response.status_code == 200
        assert await host.hibernate("sessions", host.namespace("sessions").id_from_name("s1"))
        response = await client.get("/v1/health", scope_base={"raw_path": b"/v1/health"})
        assert response.status_code == 200
    finished = spans.get_finished_spans()
    post, get = by_name(finished, "POST /v1/sessions/{id}/messages"), by_name(finished, "GET /v1/sessions/{id}/messages")
    assert len(post) == 1 and len(get) == 1
    server = post[0]
    assert server.kind is trace.SpanKind.SERVER
    assert server.attributes["http.request.method"] == "POST"
    assert server.attributes["http.route"] == "/v1/sessions/{id}/messages"
    assert server.attributes["http.response.status_code"] == 201
    assert server.attributes["url.path"] == "/v1/sessions/s1/messages"
    turns = by_name(finished, "actor turn")
    post_turns = [span for span in turns if span.parent is not None and span.parent.span_id == server.context.span_id]
    assert len(post_turns) == 1 and post_turns[0].context.trace_id == server.context.trace_id
    assert post_turns[0].attributes["durable_sessions.actor.namespace"] == "sessions"
    [activation] = by_name(finished, "actor activation")
    assert activation.parent.span_id == server.context.span_id  # the first call woke the actor
    assert len(by_name(finished, "actor hibernation")) == 1
    [health] = by_name(finished, "GET /v1/health")
    assert health.attributes["http.route"] == "/v1/health" and health.attributes["http.response.status_code"] == 200
    assert_nothing_secret(finished)


async def test_a_websocket_is_a_server_span_and_its_frames_turns_under_it(tmp_path, spans):
    async with open_host(tmp_path / "data") as host:
        bind_sessions(host)
        client = create_app(host, token=TOKEN, max_body_bytes=64 * 1024).test_client()
        async with client.websocket("/v1/sessions/s1/ws", headers=AUTH) as ws:
            await ws.send(json.dumps({"id": 1, "method": "append_message", "params": message("m1")}))
            reply = json.loads(await ws.receive())
            while reply.get("id") != 1:  # frames pushed to the session's sockets come first
                reply = json.loads(await ws.receive())
            assert reply == {"id": 1, "result": True}
    finished = spans.get_finished_spans()
    [connection] = by_name(finished, "GET /v1/sessions/{id}/ws")
    assert connection.kind is trace.SpanKind.SERVER and connection.attributes["url.scheme"] == "ws"
    assert connection.attributes["http.route"] == "/v1/sessions/{id}/ws"
    turns = [span for span in by_name(finished, "actor turn")
             if span.context.trace_id == connection.context.trace_id]
    assert turns
    assert_nothing_secret(finished)


async def test_route_templates_name_no_session(tmp_path):
    async with open_host(tmp_path / "data") as host:
        bind_sessions(host)
        server = create_app(host, token=TOKEN, max_body_bytes=64 * 1024).extensions["durable_sessions"]
        assert server.route_template("POST", "/v1/sessions/caf%C3%A9/messages") == "/v1/sessions/{id}/messages"
        assert server.route_template("GET", "/v1/sessions/s1/ws") == "/v1/sessions/{id}/ws"
        assert server.route_template("GET", "/v1/health") == "/v1/health"
        assert server.route_template("GET", "/no/such/path") is None
        assert "{" in server.route_template("GET", "/v1/sessions/s1/no-such-route")  # the catch-all, templated
        assert "s1" not in server.route_template("GET", "/v1/sessions/s1/no-such-route")


async def test_an_incoming_traceparent_is_continued(tmp_path, spans):
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    async with open_host(tmp_path / "data") as host:
        bind_sessions(host)
        client = create_app(host, token=TOKEN, max_body_bytes=64 * 1024).test_client()
        response = await client.get("/v1/sessions/s1/messages", headers={
            **AUTH, "traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"},
            scope_base={"raw_path": b"/v1/sessions/s1/messages"})
        assert response.status_code == 200
    [server] = by_name(spans.get_finished_spans(), "GET /v1/sessions/{id}/messages")
    assert format(server.context.trace_id, "032x") == trace_id
    assert format(server.parent.span_id, "016x") == "00f067aa0ba902b7"


async def test_a_forwarded_call_continues_the_trace_on_the_owner_host(tmp_path, pg_empty_dsn, spans):
    from runtime.host.cluster import ClusterOptions
    from runtime.server.forwarding import Forwarder, hop_secret

    sock, address = bind_socket("127.0.0.1:0")
    owner_url = f"http://{address}"
    owner_options = ClusterOptions(pg_empty_dsn, owner_url, host_id="owner", lease_s=10.0, connect_timeout_s=5.0)
    front_options = ClusterOptions(pg_empty_dsn, "http://127.0.0.1:9", host_id="front", lease_s=10.0,
                                   connect_timeout_s=5.0)
    async with open_host(tmp_path / "owner", cluster=owner_options) as owner_host, \
            open_host(tmp_path / "front", cluster=front_options) as front_host, trio.open_nursery() as nursery:
        for host in (owner_host, front_host):
            bind_sessions(host)
        owner = SessionsServer(owner_host, namespace="sessions", token=TOKEN, max_body_bytes=64 * 1024,
                               forwarder=Forwarder(host_id="owner", advertise_url=owner_url, lease_s=10.0,
                                                   secret=hop_secret(TOKEN)))
        front = SessionsServer(front_host, namespace="sessions", token=TOKEN, max_body_bytes=64 * 1024,
                               forwarder=Forwarder(host_id="front", advertise_url="http://127.0.0.1:9",
                                                   lease_s=10.0, secret=hop_secret(TOKEN)))
        config = Config()
        config.bind = [f"fd://{sock.fileno()}"]
        await nursery.start(serve, owner.app, config)
        owner_client = owner.app.test_client()
        response = await owner_client.post("/v1/sessions/s1/messages", json=message("m1"), headers=AUTH,
                                           scope_base={"raw_path": b"/v1/sessions/s1/messages"})
        assert response.status_code == 201  # the owner holds the session now
        spans.clear()
        response = await front.app.test_client().post(
            "/v1/sessions/s1/messages", json=message("m2"), headers=AUTH,
            scope_base={"raw_path": b"/v1/sessions/s1/messages"})
        assert response.status_code == 201 and response.headers[OWNER_HEADER] == owner_url
        for server in (front, owner):
            await server.forwarder.aclose()
        nursery.cancel_scope.cancel()
    sock.detach()  # hypercorn closed the socket it was given
    finished = spans.get_finished_spans()
    servers = by_name(finished, "POST /v1/sessions/{id}/messages")
    assert len(servers) == 2
    front_span = next(span for span in servers if span.parent is None)
    owner_span = next(span for span in servers if span.parent is not None)
    [forward] = [span for span in finished if span.kind is trace.SpanKind.CLIENT and span.name == "POST"]
    assert forward.parent.span_id == front_span.context.span_id
    assert forward.attributes["server.port"] == int(address.rpartition(":")[2])
    assert forward.attributes["http.response.status_code"] == 201
    assert owner_span.parent.span_id == forward.context.span_id  # the owner continued the front's trace
    assert owner_span.context.trace_id == front_span.context.trace_id
    [turn] = [span for span in by_name(finished, "actor turn") if span.parent.span_id == owner_span.context.span_id]
    assert turn.context.trace_id == front_span.context.trace_id
    appends = by_name(finished, "INSERT ds_log")
    assert appends and all(span.attributes["db.system"] == "postgresql" for span in appends)
    assert all(span.attributes["db.operation.batch.size"] >= 1 for span in appends)
    assert_nothing_secret(finished)


async def test_the_client_carries_the_callers_trace_to_a_real_server(tmp_path, spans):
    from runtime.client import SessionsClient

    sock, address = bind_socket("127.0.0.1:0")
    async with open_host(tmp_path / "data") as host, trio.open_nursery() as nursery:
        bind_sessions(host)
        app = create_app(host, token=TOKEN, max_body_bytes=64 * 1024)
        config = Config()
        config.bind = [f"fd://{sock.fileno()}"]
        await nursery.start(serve, app, config)
        caller = TracerProvider().get_tracer("caller")  # the application's own tracing, not the server's
        async with SessionsClient(f"http://{address}", token=TOKEN) as client:
            with caller.start_as_current_span("agent step") as step:
                assert await client.session("s1").append_message(message("m1")["message"]) is True
        nursery.cancel_scope.cancel()
    sock.detach()  # hypercorn closed the socket it was given
    [server] = by_name(spans.get_finished_spans(), "POST /v1/sessions/{id}/messages")
    assert server.context.trace_id == step.get_span_context().trace_id
    assert server.parent.span_id == step.get_span_context().span_id


def test_the_client_sends_the_traceparent_of_the_current_span_only():
    provider = TracerProvider()
    assert telemetry.outgoing_headers(None) is None  # no span current
    with provider.get_tracer("test").start_as_current_span("caller") as span:
        headers = telemetry.outgoing_headers({"Content-Type": "application/json"})
    trace_id = format(span.get_span_context().trace_id, "032x")
    assert headers["Content-Type"] == "application/json"
    assert headers["traceparent"].split("-")[1] == trace_id


def test_environment_decides_whether_traces_are_on():
    on = telemetry.configured_by_environment
    assert not on({})
    assert not on({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert not on({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"})
    assert on({"OTEL_TRACES_EXPORTER": "console"})
    assert on({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert on({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"})


RUN = textwrap.dedent("""
    import json, sys, trio
    from runtime import open_host, telemetry
    from runtime.server.app import bind_sessions, create_app

    async def main(folder):
        async with open_host(folder) as host:
            bind_sessions(host)
            client = create_app(host, token=None, max_body_bytes=65536).test_client()
            message = {"message": {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}}
            response = await client.post("/v1/sessions/s1/messages", json=message,
                                         scope_base={"raw_path": b"/v1/sessions/s1/messages"})
            assert response.status_code == 201, response.status_code
        loaded = sorted(name for name in sys.modules if name.startswith("opentelemetry"))
        print(json.dumps({"enabled": telemetry.enabled(), "loaded": loaded}))

    trio.run(main, sys.argv[1])
""")


def run_host(tmp_path, **env):
    clean = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    done = subprocess.run([sys.executable, "-c", RUN, str(tmp_path / "data")], env={**clean, **env},
                          capture_output=True, text=True, timeout=120, check=True)
    return done.stdout


def test_without_configuration_nothing_of_opentelemetry_is_loaded_and_no_span_made(tmp_path):
    out = run_host(tmp_path)
    assert json.loads(out.strip().splitlines()[-1]) == {"enabled": False, "loaded": []}


def test_the_console_exporter_of_the_environment_prints_the_spans(tmp_path):
    out = run_host(tmp_path, OTEL_TRACES_EXPORTER="console", OTEL_SERVICE_NAME="ds-test")
    assert '"name": "POST /v1/sessions/{id}/messages"' in out and '"name": "actor turn"' in out
    assert '"service.name": "ds-test"' in out
    assert '"enabled": true' in out
