"""Every HTTP route of the server, in-process with ``app.test_client()``: statuses, bodies, errors."""

import json
import logging

import msgpack
import pytest
import trio

from actors.session_agent import SessionAgent
from runtime import open_host
from runtime.server.app import bind_sessions, create_app

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


class Probe(SessionAgent):
    """A session actor with extra methods to provoke 429 and 500."""

    async def slow(self, seconds):
        await trio.sleep(seconds)
        return "done"

    async def boom(self):
        raise RuntimeError("secret internals /etc/passwd")


def msg(message_id, words, role="user"):
    return {"id": message_id, "role": role, "parts": [{"type": "text", "text": words}]}


@pytest.fixture
async def host(tmp_path):
    async with open_host(tmp_path / "data", max_pending_calls=2) as host:
        bind_sessions(host, agent_class=Probe)
        yield host


@pytest.fixture
def app(host):
    return create_app(host, token=TOKEN, max_body_bytes=64 * 1024)


@pytest.fixture
def client(app):
    return app.test_client()


async def call(client, method, path, body=None, *, headers=AUTH, raw=None, content_type=None):
    """``(status, decoded body, response)``; the path is sent as is (percent-encoding kept)."""
    route = path.split("?", 1)[0]
    options = {"headers": dict(headers), "scope_base": {"raw_path": route.encode("ascii")}}
    if body is not None:
        options["data"] = json.dumps(body)
        options["headers"]["Content-Type"] = "application/json"
    if raw is not None:
        options["data"] = raw
        options["headers"]["Content-Type"] = content_type
    response = await client.open(path, method=method, **options)
    data = await response.get_data()
    kind = response.headers.get("Content-Type", "")
    decoded = msgpack.unpackb(data) if kind.startswith("application/msgpack") else json.loads(data) if data else None
    return response.status_code, decoded, response


def error(error_type, message, field=None):
    body = {"type": error_type, "message": message}
    if field is not None:
        body["field"] = field
    return {"error": body}


S = "/v1/sessions/chat-42"


# -- health, auth, errors of the HTTP layer -----------------------------------------------------------


async def test_health_needs_no_token(client):
    assert (await call(client, "GET", "/v1/health", headers={}))[:2] == (200, {"status": "ok"})


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"}])
@pytest.mark.parametrize("path", [f"{S}/messages", "/metrics", "/v1/actors"])
async def test_every_other_route_needs_the_bearer_token(client, headers, path):
    status, body, response = await call(client, "GET", path, headers=headers)
    assert (status, body) == (401, error("UnauthorizedError", "missing or wrong bearer token"))
    assert response.headers["WWW-Authenticate"] == "Bearer"


async def test_unknown_routes_and_methods(client):
    assert (await call(client, "GET", f"{S}/nope"))[:2] == (404, error("RouteNotFoundError", f"no route for {S}/nope"))
    assert (await call(client, "GET", "/v2/other"))[:2] == (404, error("RouteNotFoundError", "no route for /v2/other"))
    status, body, response = await call(client, "PUT", f"{S}/messages")
    assert (status, body) == (405, error("MethodNotAllowedError",
                                         f"PUT is not allowed on {S}/messages; use POST, GET, DELETE"))
    assert response.headers["Allow"] == "POST, GET, DELETE"


@pytest.mark.parametrize(("method", "path", "allowed"), [
    ("TRACE", "/v1/health", "GET, HEAD, OPTIONS"),
    ("DELETE", "/v1/actors:hibernate", "OPTIONS, POST"),
    ("POST", "/openapi.json", "GET, HEAD, OPTIONS"),
])
async def test_a_wrong_method_on_a_plain_route_is_405_with_allow(client, method, path, allowed):
    status, body, response = await call(client, method, path)
    assert (status, body) == (405, error("MethodNotAllowedError", f"{method} is not allowed on {path}; use {allowed}"))
    assert response.headers["Allow"] == allowed


@pytest.mark.parametrize(("method", "path", "allowed"), [
    # a verb no session route uses went to the catch-all rule's 405 and got the union of all routes' methods
    ("PATCH", f"{S}/search", "GET"),
    ("MADEUP", f"{S}/search", "GET"),
    ("PUT", f"{S}/search", "GET"),
    ("PATCH", f"{S}/messages", "POST, GET, DELETE"),
    ("OTHER", f"{S}/messages/m1", "GET, PUT, DELETE"),
    ("PATCH", "/v1/sessions/a%2Fb/context/x%3Ay", "GET, PUT"),
    ("PUT", S, "GET"),  # the session's listing entry
])
async def test_every_405_on_a_session_path_lists_that_paths_methods(client, method, path, allowed):
    status, body, response = await call(client, method, path)
    assert (status, body) == (405, error("MethodNotAllowedError", f"{method} is not allowed on {path}; use {allowed}"))
    assert response.headers["Allow"] == allowed


async def test_a_body_over_the_limit_is_refused_with_413(client):
    big = {"message": msg("m1", "x" * (65 * 1024))}
    status, body, _ = await call(client, "POST", f"{S}/messages", big)
    assert (status, body) == (413, error("PayloadTooLargeError", "the body is larger than 65536 bytes"))
    assert (await call(client, "GET", f"{S}/messages:count"))[1] == {"count": 0}


async def test_bodies_must_be_json_or_msgpack(client):
    status, body, _ = await call(client, "POST", f"{S}/messages", raw=b"hello", content_type="text/plain")
    assert (status, body) == (415, error("UnsupportedMediaTypeError", "send application/json or application/msgpack, "
                                         "not text/plain"))
    status, body, _ = await call(client, "POST", f"{S}/messages", raw=b"{oops", content_type="application/json")
    assert status == 400 and body["error"]["field"] == "body"
    assert body["error"]["message"].startswith("the body is not valid JSON")
    status, body, _ = await call(client, "POST", f"{S}/messages", raw=b"[1, 2]", content_type="application/json")
    assert (status, body) == (400, error("InvalidInputError", "the body must be an object", "body"))


async def test_msgpack_in_and_out(client):
    packed = msgpack.packb({"message": msg("m1", "hi")})
    headers = {**AUTH, "Accept": "application/msgpack"}
    status, body, response = await call(client, "POST", f"{S}/messages", raw=packed,
                                        content_type="application/msgpack", headers=headers)
    assert (status, body) == (201, {"id": "m1", "inserted": True})
    assert response.headers["Content-Type"] == "application/msgpack"
    status, body, _ = await call(client, "GET", f"{S}/messages", headers=headers)
    assert body == {"messages": [msg("m1", "hi")]}


# -- session ids ----------------------------------------------------------------------------------------


async def test_session_ids_are_percent_encoded_utf8_strings(client, host):
    path = "/v1/sessions/chat%2F42%20%C3%BC/messages"
    assert (await call(client, "POST", path, {"message": msg("m1", "hi")}))[0] == 201
    stub = host.namespace("sessions").get_by_name("chat/42 ü")
    assert await stub.get_history() == [msg("m1", "hi")]
    assert (await call(client, "GET", f"{S}/messages"))[1] == {"messages": []}


@pytest.mark.parametrize(("session_id", "message"), [
    ("", "session_id must not be empty"),
    ("%C3%BC" * 256 + "a", "session_id is 513 UTF-8 bytes; the limit is 512"),
    ("%FF", "session_id is not valid UTF-8"),
])
async def test_bad_session_ids_are_refused_with_400(client, session_id, message):
    status, body, _ = await call(client, "GET", f"/v1/sessions/{session_id}/messages")
    assert (status, body) == (400, error("InvalidInputError", message, "session_id"))


async def test_a_512_byte_session_id_is_accepted(client):
    assert (await call(client, "GET", f"/v1/sessions/{'%C3%BC' * 256}/messages"))[:2] == (200, {"messages": []})


# -- messages ---------------------------------------------------------------------------------------------


async def test_append_get_update_delete_one_message(client):
    assert (await call(client, "POST", f"{S}/messages", {"message": msg("m1", "hello")}))[:2] == (
        201, {"id": "m1", "inserted": True})
    assert (await call(client, "POST", f"{S}/messages", {"message": msg("m1", "again")}))[:2] == (
        200, {"id": "m1", "inserted": False})
    assert (await call(client, "GET", f"{S}/messages/m1"))[:2] == (200, {"message": msg("m1", "hello")})
    assert (await call(client, "PUT", f"{S}/messages/m1", {"message": msg("m1", "edited")}))[:2] == (200, {"id": "m1"})
    assert (await call(client, "PUT", f"{S}/messages/m1", {"message": {"role": "user", "parts": []}}))[0] == 200
    assert (await call(client, "GET", f"{S}/messages/m1"))[1] == {"message": {"id": "m1", "role": "user", "parts": []}}
    assert (await call(client, "DELETE", f"{S}/messages/m1"))[:2] == (200, {"deleted": 1})
    for method, body in (("GET", None), ("PUT", {"message": msg("m1", "x")}), ("DELETE", None)):
        assert (await call(client, method, f"{S}/messages/m1", body))[:2] == (
            404, error("MessageNotFoundError", "message 'm1' not found"))


async def test_message_bodies_are_validated_with_the_field(client):
    cases = [
        ({}, error("InvalidMessageError", "message is missing", "message")),
        ({"message": {"id": "m1", "parts": []}},
         error("InvalidMessageError", "message.role is missing", "message.role")),
        ({"message": msg("m1", "x"), "parentId": 5},
         error("InvalidInputError", "parentId must be a string or null, not int", "parentId")),
    ]
    for body, expected in cases:
        assert (await call(client, "POST", f"{S}/messages", body))[:2] == (400, expected)
    status, body, _ = await call(client, "PUT", f"{S}/messages/m1", {"message": msg("m2", "x")})
    assert (status, body) == (400, error("InvalidMessageError", "message.id differs from the id in the path",
                                         "message.id"))


async def test_parent_id_absent_continues_and_null_starts_a_root(client):
    await call(client, "POST", f"{S}/messages", {"message": msg("m1", "a")})
    await call(client, "POST", f"{S}/messages", {"message": msg("m2", "b")})
    await call(client, "POST", f"{S}/messages", {"message": msg("r1", "c"), "parentId": None})
    await call(client, "POST", f"{S}/messages", {"message": msg("m3", "d"), "parentId": "m1"})
    assert [m["id"] for m in (await call(client, "GET", f"{S}/messages"))[1]["messages"]] == ["m1", "m3"]
    assert [m["id"] for m in (await call(client, "GET", f"{S}/messages?leaf=m2"))[1]["messages"]] == ["m1", "m2"]
    assert [m["id"] for m in (await call(client, "GET", f"{S}/messages?leaf=r1"))[1]["messages"]] == ["r1"]
    assert [m["id"] for m in (await call(client, "GET", f"{S}/messages/m1/branches"))[1]["messages"]] == ["m2", "m3"]
    assert (await call(client, "GET", f"{S}/messages:leaf"))[1] == {"message": msg("m3", "d")}
    assert (await call(client, "GET", f"{S}/messages:count?leaf=m2"))[1] == {"count": 2}


async def test_batch_append_delete_many_and_clear(client):
    batch = {"messages": [msg("m1", "a"), msg("m2", "b", "assistant"), msg("m3", "c")]}
    assert (await call(client, "POST", f"{S}/messages:batch", batch))[:2] == (201, {"inserted": [True, True, True]})
    assert (await call(client, "POST", f"{S}/messages:batch", batch))[:2] == (200, {"inserted": [False] * 3})
    bad = {"messages": [msg("m4", "a"), {"role": "user", "parts": []}]}
    assert (await call(client, "POST", f"{S}/messages:batch", bad))[:2] == (
        400, error("InvalidMessageError", "messages[1].id is missing", "messages[1].id"))
    assert (await call(client, "POST", f"{S}/messages:delete", {"ids": ["m2", "zz"]}))[:2] == (200, {"deleted": 1})
    assert [m["id"] for m in (await call(client, "GET", f"{S}/messages"))[1]["messages"]] == ["m1", "m3"]
    assert (await call(client, "DELETE", f"{S}/messages"))[:2] == (200, {"cleared": True})
    assert (await call(client, "GET", f"{S}/messages"))[1] == {"messages": []}
    assert (await call(client, "GET", f"{S}/messages:leaf"))[1] == {"message": None}


async def test_reads_of_a_session_never_written_create_no_file(client, host, tmp_path):
    """A mistyped session id must not leave an actor file behind; the answers are an empty session's."""
    t = "/v1/sessions/typo-42"
    assert (await call(client, "GET", f"{t}/messages"))[:2] == (200, {"messages": []})
    assert (await call(client, "GET", f"{t}/messages?leaf=m1"))[:2] == (200, {"messages": []})
    assert (await call(client, "GET", f"{t}/messages/m1"))[0] == 404
    assert (await call(client, "GET", f"{t}/messages/m1/branches"))[:2] == (200, {"messages": []})
    assert (await call(client, "GET", f"{t}/search?q=hello"))[:2] == (200, {"results": []})
    assert (await call(client, "GET", f"{t}/compactions"))[:2] == (200, {"compactions": []})
    assert (await call(client, "GET", f"{t}/skills"))[:2] == (200, {"loaded": []})
    assert (await call(client, "GET", f"{t}/search"))[0] == 400  # validation still applies
    actor = host.namespace("sessions").id_from_name("typo-42")
    assert not host.path_for(actor).exists()
    assert host.statistics().activations == 0
    # The first write creates it, and reads then go to the actor.
    assert (await call(client, "POST", f"{t}/messages", {"message": msg("m1", "hello there")}))[0] == 201
    assert host.path_for(actor).exists()
    assert (await call(client, "GET", f"{t}/search?q=hello"))[1]["results"][0]["id"] == "m1"
    assert (await call(client, "GET", f"{t}/messages/m1"))[1] == {"message": msg("m1", "hello there")}


async def test_search_route(client):
    await call(client, "POST", f"{S}/messages:batch", {"messages": [msg("m1", "Booking ZFA04Y confirmed"),
                                                                   msg("m2", "no code here", "assistant")]})
    status, body, _ = await call(client, "GET", f"{S}/search?q=zfa04y&limit=5")
    assert status == 200
    assert [(h["id"], h["role"], h["content"]) for h in body["results"]] == [("m1", "user", "Booking ZFA04Y confirmed")]
    assert body["results"][0]["createdAt"].endswith("Z")
    assert (await call(client, "GET", f"{S}/search"))[:2] == (
        400, error("InvalidInputError", "query parameter 'q' is required", "q"))
    assert (await call(client, "GET", f"{S}/search?q=x&limit=many"))[:2] == (
        400, error("InvalidInputError", "limit must be an integer, not 'many'", "limit"))


# -- context blocks, prompt, tools, compaction, skills ---------------------------------------------------------


async def test_context_block_routes(client):
    status, body, _ = await call(client, "GET", f"{S}/context")
    assert status == 200 and [b["label"] for b in body["blocks"]] == ["soul", "memory"]
    assert (await call(client, "GET", f"{S}/context/soul"))[1]["block"]["content"] == "You are a helpful assistant."
    assert (await call(client, "GET", f"{S}/context/nope"))[:2] == (
        404, error("NotFoundError", 'Block "nope" not found'))
    status, body, _ = await call(client, "PUT", f"{S}/context/memory", {"content": "Likes tea"})
    assert (status, body["block"]["content"], body["block"]["tokens"]) == (200, "Likes tea", 3)
    status, body, _ = await call(client, "POST", f"{S}/context/memory:append", {"content": "Flies Tuesdays"})
    assert (status, body["block"]["content"]) == (200, "Likes tea\nFlies Tuesdays")
    assert (await call(client, "PUT", f"{S}/context/soul", {"content": "x"}))[:2] == (
        400, error("ContextBlockError", 'Block "soul" is readonly', "label"))
    assert (await call(client, "PUT", f"{S}/context/memory", {"content": "word " * 900}))[:2] == (
        400, error("ContextBlockError", 'Block "memory" exceeds maxTokens: 1170 > 1100', "content"))
    assert (await call(client, "PUT", f"{S}/context/memory", {}))[:2] == (
        400, error("InvalidInputError", "content must be a string, not NoneType", "content"))


async def test_system_prompt_is_frozen_until_refreshed(client):
    frozen = (await call(client, "GET", f"{S}/system-prompt"))[1]["prompt"]
    assert "MEMORY (Learned facts) [0% — 0/1100 tokens] [writable]" in frozen
    await call(client, "PUT", f"{S}/context/memory", {"content": "Likes tea"})
    assert (await call(client, "GET", f"{S}/system-prompt"))[1] == {"prompt": frozen}
    status, body, _ = await call(client, "POST", f"{S}/system-prompt:refresh")
    assert status == 200 and body["prompt"].endswith("[0% — 3/1100 tokens] [writable]\n" + "═" * 46 + "\nLikes tea")


async def test_tools_routes(client):
    raw = (await call(client, "GET", f"{S}/tools"))[1]["tools"]
    assert list(raw) == ["set_context"]
    openai = (await call(client, "GET", f"{S}/tools?format=openai"))[1]["tools"]
    assert openai[0]["type"] == "function" and openai[0]["function"]["name"] == "set_context"
    anthropic = (await call(client, "GET", f"{S}/tools?format=anthropic"))[1]["tools"]
    assert anthropic[0]["input_schema"] == raw["set_context"]["inputSchema"]
    assert (await call(client, "GET", f"{S}/tools?format=xml"))[:2] == (
        400, error("InvalidInputError", "format must be one of raw, openai, anthropic, not 'xml'", "format"))
    args = {"label": "memory", "content": "Likes tea", "action": "append"}
    assert (await call(client, "POST", f"{S}/tools/set_context", args))[:2] == (
        200, {"result": "Written to memory. Usage: 0% (3/1100 tokens)"})
    assert (await call(client, "POST", f"{S}/tools/set_context", {"label": "soul", "content": "x"}))[1] == {
        "result": 'Error: invalid arguments for set_context: label: Invalid input: expected "memory"'}
    assert (await call(client, "POST", f"{S}/tools/load_context", {}))[:2] == (
        404, error("NotFoundError", "no tool named 'load_context'"))


async def test_compaction_and_skill_routes(client):
    await call(client, "POST", f"{S}/messages:batch", {"messages": [msg(f"m{i}", "words") for i in range(3)]})
    assert (await call(client, "POST", f"{S}/compact"))[:2] == (200, {"result": None})  # too short to compact
    assert (await call(client, "GET", f"{S}/compactions"))[:2] == (200, {"compactions": []})
    assert (await call(client, "GET", f"{S}/skills"))[:2] == (200, {"loaded": []})
    assert (await call(client, "DELETE", f"{S}/skills/skills/pirate"))[:2] == (200, {"unloaded": False})


# -- RPC, overload, internal errors, admin -----------------------------------------------------------------------


async def test_rpc_calls_any_public_method(client):
    await call(client, "POST", f"{S}/messages", {"message": msg("m1", "a")})
    assert (await call(client, "POST", f"{S}/rpc", {"method": "get_path_length"}))[:2] == (200, {"result": 1})
    assert (await call(client, "POST", f"{S}/rpc", {"method": "get_history", "params": ["m1"]}))[1] == {
        "result": [msg("m1", "a")]}
    rec = await call(client, "POST", f"{S}/rpc", {"method": "add_compaction",
                                                 "params": {"summary": "s", "from_id": "m1", "to_id": "m1"}})
    assert rec[0] == 200 and rec[1]["result"]["fromMessageId"] == "m1"
    assert (await call(client, "POST", f"{S}/rpc", {"method": "_configure"}))[:2] == (
        404, error("UnknownMethodError", "actor class Probe has no callable method '_configure'"))
    assert (await call(client, "POST", f"{S}/rpc", {"method": "sql", "params": ["DROP TABLE x"]}))[0] == 404
    status, body, _ = await call(client, "POST", f"{S}/rpc", {"method": "get_history", "params": {"nope": 1}})
    assert status == 400 and body["error"]["type"] == "InvalidArgumentsError"


async def test_an_overloaded_actor_answers_429_at_once(client, host):
    results = []

    async def slow():
        results.append((await call(client, "POST", f"{S}/rpc", {"method": "slow", "params": [1.5]}))[:2])

    async with trio.open_nursery() as nursery:
        nursery.start_soon(slow)
        nursery.start_soon(slow)
        while (stats := host.statistics()).running + stats.queued < 2:  # both slow calls admitted
            await trio.sleep(0.01)
        status, body, response = await call(client, "GET", f"{S}/messages")
        answered_while_pending = results == []  # refused at once, not after the slow calls
    assert answered_while_pending
    assert status == 429 and body["error"]["type"] == "ActorOverloadedError"
    assert body["error"]["message"].endswith("is overloaded: 2 calls are already pending")
    assert response.headers["Retry-After"] == "1"
    assert results == [(200, {"result": "done"})] * 2


async def test_a_bug_is_a_500_with_a_reference_and_no_traceback(client, caplog):
    with caplog.at_level(logging.ERROR, logger="runtime.server.app"):
        status, body, _ = await call(client, "POST", f"{S}/rpc", {"method": "boom"})
    assert status == 500 and body["error"]["type"] == "InternalServerError"
    reference = body["error"]["message"].removeprefix("internal server error (reference ").removesuffix(")")
    assert len(reference) == 12 and "passwd" not in json.dumps(body)
    assert any(reference in r.getMessage() and r.exc_info and "passwd" in str(r.exc_info[1]) for r in caplog.records)


async def test_statistics_hibernation_and_metrics(client, host, app):
    await call(client, "POST", f"{S}/messages", {"message": msg("m1", "a")})
    await call(client, "POST", "/v1/sessions/other/messages", {"message": msg("m1", "a")})
    status, stats, _ = await call(client, "GET", "/v1/actors")
    assert status == 200 and (stats["active"], stats["activations"], stats["namespaces"]) == (2, 2, ["sessions"])
    assert (await call(client, "POST", "/v1/actors:hibernate", {"sessionIds": ["chat-42"]}))[:2] == (
        200, {"hibernated": 1})
    assert (await call(client, "POST", "/v1/actors:hibernate"))[:2] == (200, {"hibernated": 1})
    assert (await call(client, "POST", "/v1/actors:hibernate", {"sessionIds": "chat-42"}))[:2] == (
        400, error("InvalidInputError", "sessionIds must be a list of strings", "sessionIds"))
    stats = (await call(client, "GET", "/v1/actors"))[1]
    assert (stats["active"], stats["hibernated"], stats["hibernations"]) == (0, 2, 2)
    assert (await call(client, "GET", f"{S}/messages/m1"))[0] == 200  # wakes it
    response = await client.get("/metrics", headers=AUTH)
    text = (await response.get_data()).decode()
    assert response.headers["Content-Type"].startswith("text/plain")
    assert "durable_sessions_actors_active 1.0" in text and "durable_sessions_actors_hibernated 1.0" in text
    assert "durable_sessions_activations_total 3.0" in text and "durable_sessions_hibernations_total 2.0" in text
    assert 'durable_sessions_requests_total{route="POST /v1/sessions/{id}/messages",status="201"} 2.0' in text
    assert 'durable_sessions_request_duration_seconds_count{route="GET /v1/sessions/{id}/messages/{message_id}"} 1.0' \
        in text


async def test_requests_during_shutdown_get_503(client, app):
    app.extensions["durable_sessions"].closing.set()
    assert (await call(client, "GET", f"{S}/messages"))[:2] == (
        503, error("ServiceUnavailableError", "the server is shutting down"))
    assert (await call(client, "GET", "/v1/health"))[0] == 200


async def test_a_503_says_when_to_retry(client, app):
    app.extensions["durable_sessions"].closing.set()
    status, _, response = await call(client, "POST", f"{S}/messages", {"message": msg("m1", "hi")})
    assert (status, response.headers["Retry-After"]) == (503, "1")
