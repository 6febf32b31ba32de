"""Adversarial requests against one real ``durable-sessions serve`` process (with a token).

Each test sends what a careless or hostile client sends -- bodies that do
not parse, wrong types, ids that are hard to route, bodies that arrive
late, too big or never end, search syntax -- over real sockets, and checks
the answer is a JSON error with the right status (never a 500 or a hang)
and that nothing was half-written.
"""

from __future__ import annotations

import json
import socket
import time

import httpx
import msgpack
import pytest
import trio

from common.errors import ActorBusyError, ActorOverloadedError, UnauthorizedError
from common.wire import quote_segment
from runtime.client import SessionsClient
from runtime.client.websocket import ConnectionClosed, WebSocketConnection
from tests.support.processes import server_process

TOKEN = "hardening-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
LIMIT = 8 * 1024 * 1024


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with server_process(tmp_path_factory.mktemp("hardening") / "data", token=TOKEN) as running:
        yield running


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, headers=AUTH, timeout=10) as client:
        yield client


@pytest.fixture(scope="module")
def port(server):
    return int(server.url.rsplit(":", 1)[1])


def msg(message_id, text="", role="user"):
    return {"id": message_id, "role": role, "parts": [{"type": "text", "text": text}] if text else []}


def send_raw(http, method, raw_path, content=None, headers=None):
    """A request whose path is sent byte for byte (percent-escapes kept)."""
    request = http.build_request(method, "/", content=content, headers=headers)
    request.url = request.url.copy_with(raw_path=raw_path.encode("ascii"))
    return http.send(request)


def assert_error(response, status, error_type, field=None):
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert error["type"] == error_type, error
    assert error.get("field") == field, error
    return error["message"]


# -- raw HTTP/1.1 over a socket --------------------------------------------------------------


def raw_request(method, path, body=b"", *, extra=""):
    head = (f"{method} {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {TOKEN}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n{extra}\r\n")
    return head.encode("latin-1"), body


def read_response(sock):
    """``(status, body)`` of one response, or ``(None, b"")`` when the server closed the connection."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return None, b""
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    length = next((int(v) for k, _, v in (line.partition(":") for line in lines[1:])
                   if k.strip().lower() == "content-length"), 0)
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return int(lines[0].split()[1]), body


def connect(port):
    sock = socket.create_connection(("127.0.0.1", port))
    sock.settimeout(5)
    return sock


# -- keep-alive after an early answer -----------------------------------------------------------


@pytest.mark.parametrize("path", [
    "/v1/nowhere",                             # 404 from routing
    "/v1/sessions/%FF/messages",               # 400: session id not UTF-8
    "/v1/sessions/keep/messages:leaf",         # 405
    "/v1/sessions/keep/messages/m1/branches",  # 405
])
def test_an_error_answered_before_the_body_arrived_leaves_the_connection_usable(port, path):
    body = json.dumps({"message": msg("late-body")}).encode()
    with connect(port) as sock:
        head, payload = raw_request("POST", path, body)
        sock.sendall(head)
        time.sleep(0.05)  # the server answers before the body is there
        sock.sendall(payload)
        status, _ = read_response(sock)
        assert status in (400, 404, 405)
        head, payload = raw_request("GET", "/v1/sessions/keep/messages")
        sock.sendall(head + payload)
        assert read_response(sock) == (200, b'{"messages":[]}')


def test_a_401_before_the_body_arrived_leaves_the_connection_usable(port):
    body = json.dumps({"message": msg("no-token")}).encode()
    with connect(port) as sock:
        sock.sendall(f"POST /v1/sessions/keep/messages HTTP/1.1\r\nHost: localhost\r\nContent-Length: {len(body)}\r\n\r\n"
                     .encode())
        time.sleep(0.05)
        sock.sendall(body)
        assert read_response(sock)[0] == 401
        sock.sendall(b"GET /v1/health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        assert read_response(sock) == (200, b'{"status":"ok"}')


def test_an_answer_waits_at_most_two_seconds_for_a_body_that_never_comes_then_closes(port):
    with connect(port) as sock:
        head, _ = raw_request("POST", "/v1/nowhere", b"x" * 100)
        sock.sendall(head)
        started = time.monotonic()
        assert read_response(sock)[0] == 404
        assert 1.5 < time.monotonic() - started < 4
        assert sock.recv(100) == b""  # closed: the rest of the body would be read as a request


def test_a_pooled_client_goes_on_after_bad_requests_with_bodies(server):
    with httpx.Client(base_url=server.url, headers=AUTH, timeout=5) as client:
        for _ in range(3):
            bad = client.post("/v1/sessions/%FF/messages", json={"message": msg("x")})
            assert bad.status_code == 400
            wrong = client.post("/v1/zzz", json={})
            assert wrong.status_code == 404
            assert client.get("/v1/sessions/pooled/messages").json() == {"messages": []}


def test_a_body_over_the_limit_gets_413_and_the_connection_does_not_hang(port, http):
    with connect(port) as sock:
        head, _ = raw_request("POST", "/v1/sessions/big/messages", b"x" * (LIMIT + 1))
        sock.sendall(head)
        assert read_response(sock)[0] == 413  # answered from the Content-Length alone
        sock.sendall(b"GET /v1/health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        try:
            status = read_response(sock)[0]
        except ConnectionResetError:
            status = None
        assert status is None  # closed: the announced body is never read
    assert http.get("/v1/sessions/big/messages").json() == {"messages": []}


# -- bodies ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("content", [
    b"[" * 40_000 + b"]" * 40_000,
    b'{"message": {"id": "deep", "role": "user", "parts": [' + b"[" * 5000 + b"]" * 5000 + b"]}}",
    b'{"message": {"id": "deep", "role": "user", "parts": [], "metadata": ' + b'{"a":' * 3000 + b"1"
    + b"}" * 3000 + b"}}",
])
def test_deeply_nested_json_is_a_400(http, content):
    response = http.post("/v1/sessions/deep/messages", content=content, headers={"Content-Type": "application/json"})
    message = assert_error(response, 400, "InvalidInputError", "body")
    assert message == "the body is not valid JSON: it is nested too deeply"
    assert http.get("/v1/sessions/deep/messages:count").json() == {"count": 0}


def test_deeply_nested_msgpack_is_a_400(http):
    response = http.post("/v1/sessions/deep/messages", content=b"\x91" * 40_000 + b"\x90",
                         headers={"Content-Type": "application/msgpack"})
    assert_error(response, 400, "InvalidInputError", "body")


@pytest.mark.parametrize("content", [
    b'{"message": {"id": "\\ud800", "role": "user", "parts": []}}',
    b'{"message": {"id": "s1", "role": "user", "parts": [{"type": "text", "text": "a\\udc00b"}]}}',
    b'{"message": {"id": "s2", "role": "user", "parts": []}, "parentId": "\\udbff"}',
])
def test_a_lone_surrogate_escape_in_json_is_a_400(http, content):
    response = http.post("/v1/sessions/surrogates/messages", content=content,
                         headers={"Content-Type": "application/json"})
    message = assert_error(response, 400, "InvalidInputError", "body")
    assert message == "the body is not valid JSON: it holds a lone UTF-16 surrogate (\\ud800-\\udfff)"
    assert http.get("/v1/sessions/surrogates/messages:count").json() == {"count": 0}


def test_a_surrogate_pair_escape_is_a_valid_character(http):
    content = b'{"message": {"id": "pair", "role": "user", "parts": [{"type": "text", "text": "\\ud83d\\ude00 ok"}]}}'
    response = http.post("/v1/sessions/pairs/messages", content=content, headers={"Content-Type": "application/json"})
    assert response.status_code == 201
    assert http.get("/v1/sessions/pairs/messages/pair").json()["message"]["parts"][0]["text"] == "\U0001F600 ok"


@pytest.mark.parametrize("content, kind, error_type, field", [
    (b'{"message": ', "application/json", "InvalidInputError", "body"),
    (b"", "application/json", "InvalidMessageError", "message"),
    (b'{"message": {"id": "x", "role": "user", "parts": [], "n": NaN}}', "application/json",
     "InvalidMessageError", "message"),
    (b'{"message": {"id": "x", "role": "user", "parts": [], "n": -Infinity}}', "application/json",
     "InvalidMessageError", "message"),
    (b'{"message": {"id": "\xff", "role": "user", "parts": []}}', "application/json", "InvalidInputError", "body"),
    (b"\xc1", "application/msgpack", "InvalidInputError", "body"),
    (b"\x81\x01\x02", "application/msgpack", "InvalidInputError", "body"),
    (b"\x80\x80", "application/msgpack", "InvalidInputError", "body"),
    (b'"just a string"', "application/json", "InvalidInputError", "body"),
    (b"[1, 2]", "application/json", "InvalidInputError", "body"),
    (b'{"message": "hi"}', "application/json", "InvalidMessageError", "message"),
    (b'{"message": {"id": 1, "role": "user", "parts": []}}', "application/json", "InvalidMessageError", "message.id"),
    (b'{"message": {"id": "x", "role": "user", "parts": "no"}}', "application/json", "InvalidMessageError",
     "message.parts"),
    (b'{"message": {"id": "x", "role": "user", "parts": []}, "parentId": {"a": 1}}', "application/json",
     "InvalidInputError", "parentId"),
])
def test_bad_append_bodies_are_400_with_the_field_and_store_nothing(http, content, kind, error_type, field):
    response = http.post("/v1/sessions/bad-bodies/messages", content=content, headers={"Content-Type": kind})
    assert_error(response, 400, error_type, field)
    assert http.get("/v1/sessions/bad-bodies/messages:count").json() == {"count": 0}


@pytest.mark.parametrize("kind", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data"])
def test_a_body_that_is_neither_json_nor_msgpack_is_a_415(http, kind):
    response = http.post("/v1/sessions/media/messages", content=b'{"message": {}}', headers={"Content-Type": kind})
    assert_error(response, 415, "UnsupportedMediaTypeError")


def test_a_body_of_exactly_the_limit_is_stored_and_one_byte_more_is_a_413(http):
    template = json.dumps({"message": msg("exact", "@")})
    body = template.replace("@", "a" * (LIMIT - len(template) + 1)).encode()
    assert len(body) == LIMIT
    assert http.post("/v1/sessions/limit/messages", content=body,
                     headers={"Content-Type": "application/json"}).status_code == 201
    over = body.replace(b'"exact"', b'"over1"', 1) + b" "
    assert_error(http.post("/v1/sessions/limit/messages", content=over,
                           headers={"Content-Type": "application/json"}), 413, "PayloadTooLargeError")
    assert http.get("/v1/sessions/limit/messages:count").json() == {"count": 1}


def test_a_chunked_body_without_length_over_the_limit_is_a_413(http):
    def chunks():
        yield b'{"message": {"id": "chunked", "role": "user", "parts": [{"type": "text", "text": "'
        for _ in range(LIMIT // 65536 + 1):
            yield b"a" * 65536
        yield b'"}]}}'

    response = http.post("/v1/sessions/chunked/messages", content=chunks(),
                         headers={"Content-Type": "application/json"})
    assert_error(response, 413, "PayloadTooLargeError")
    assert http.get("/v1/sessions/chunked/messages:count").json() == {"count": 0}


def test_msgpack_in_and_out(http):
    body = msgpack.packb({"message": msg("mp1", "packed words")})
    response = http.post("/v1/sessions/mp/messages", content=body,
                         headers={"Content-Type": "application/msgpack", "Accept": "application/msgpack"})
    assert response.status_code == 201
    assert msgpack.unpackb(response.content) == {"id": "mp1", "inserted": True}


# -- session ids and message ids in paths ---------------------------------------------------------------


@pytest.mark.parametrize("raw_id, field", [
    ("", "session_id"),
    ("a" * 513, "session_id"),
    ("%F0%9F%98%80" * 128 + "a", "session_id"),  # 513 bytes
    ("%FF%FE", "session_id"),
    ("%E2%82", "session_id"),
    ("%ED%A0%80", "session_id"),  # an encoded surrogate is not UTF-8
])
def test_bad_session_ids_are_400_and_create_nothing(http, server, raw_id, field):
    before = sorted(p.name for p in (server.data_dir / "sessions").rglob("*.sqlite3"))
    response = send_raw(http, "POST", f"/v1/sessions/{raw_id}/messages",
                        json.dumps({"message": msg("x")}).encode(), {"Content-Type": "application/json"})
    assert_error(response, 400, "InvalidInputError", field)
    assert sorted(p.name for p in (server.data_dir / "sessions").rglob("*.sqlite3")) == before


@pytest.mark.parametrize("raw_id, session_id", [
    ("a" * 512, "a" * 512),
    ("%F0%9F%98%80" * 128, "\U0001F600" * 128),
    ("%2E%2E", ".."),
    ("a%2Fb", "a/b"),
    ("a%00b", "a\x00b"),
    ("a%20b", "a b"),
    ("%25", "%"),
])
def test_any_session_id_of_512_bytes_or_less_is_its_own_session(http, raw_id, session_id):
    response = send_raw(http, "POST", f"/v1/sessions/{raw_id}/messages",
                        json.dumps({"message": msg("only", session_id)}).encode(), {"Content-Type": "application/json"})
    assert response.status_code == 201, response.text
    history = send_raw(http, "GET", f"/v1/sessions/{raw_id}/messages").json()["messages"]
    assert history == [msg("only", session_id)]


@pytest.mark.parametrize("message_id", ["a/b", "50%", "with space", "..", ".", "日本語", "\U0001F600", "a?b#c",
                                        "x:y"])
def test_message_ids_that_are_awkward_in_paths_round_trip(http, message_id):
    base = "/v1/sessions/awkward-ids/messages"
    assert http.post(base, json={"message": msg(message_id, "first")}).status_code == 201
    path = f"{base}/{quote_segment(message_id)}"
    assert send_raw(http, "GET", path).json() == {"message": msg(message_id, "first")}
    assert send_raw(http, "PUT", path, json.dumps({"message": msg(message_id, "second")}).encode(),
                    {"Content-Type": "application/json"}).json() == {"id": message_id}
    assert send_raw(http, "GET", path).json()["message"]["parts"][0]["text"] == "second"
    assert send_raw(http, "DELETE", path).json() == {"deleted": 1}
    assert_error(send_raw(http, "GET", path), 404, "MessageNotFoundError")


@pytest.mark.parametrize("session_id", [".", "..", "..."])
async def test_the_python_client_reaches_sessions_and_messages_named_with_dots(server, session_id):
    async with SessionsClient(server.url, token=TOKEN) as client:
        session = client.session(session_id)
        await session.clear_messages()  # ".." also served the raw-path test above
        assert await session.append_message(msg("..", "dots")) is True
        assert await session.append_message(msg(".", "dot")) is True
        assert await session.get_message("..") == msg("..", "dots")
        assert [m["id"] for m in await session.get_branches("..")] == ["."]
        await session.update_message(msg(".", "changed"))
        assert [m["parts"][0]["text"] for m in await session.get_history()] == ["dots", "changed"]


@pytest.mark.parametrize("label, status, error_type", [
    ("nope", 404, "NotFoundError"), ("%2F", 404, "NotFoundError"), ("memory%3Aappend", 404, "NotFoundError"),
    ("%00", 404, "NotFoundError"), ("%FF", 400, "InvalidInputError"),
])
def test_odd_context_labels_get_clear_errors(http, label, status, error_type):
    assert_error(send_raw(http, "GET", f"/v1/sessions/labels/context/{label}"), status, error_type,
                 "label" if status == 400 else None)


def test_writing_an_unknown_or_readonly_block_is_a_400_naming_the_label(http):
    for label in ("soul", "nope"):
        response = http.put(f"/v1/sessions/labels/context/{label}", json={"content": "x"})
        assert assert_error(response, 400, "ContextBlockError", "label") == f'Block "{label}" is readonly'
    response = http.put("/v1/sessions/labels/context/memory", json={"content": 5})
    assert_error(response, 400, "InvalidInputError", "content")


# -- query parameters --------------------------------------------------------------------------------------


@pytest.mark.parametrize("limit", ["-1", "10001", "99999999999999999999", "abc", "1.5", "1e3"])
def test_a_bad_search_limit_is_a_400_naming_limit(http, limit):
    assert_error(http.get("/v1/sessions/search/search", params={"q": "x", "limit": limit}), 400,
                 "InvalidInputError", "limit")


def test_search_without_q_is_a_400_naming_q(http):
    assert_error(http.get("/v1/sessions/search/search"), 400, "InvalidInputError", "q")


@pytest.fixture(scope="module")
def searchable(http):
    texts = ["hello world", "the quick brown fox", "你好世界，我们去北京",
             "東京タワーに行きました",
             'say "quoted" thing', "NEAR(a b) OR c*", "a-b ^c d:e"]
    response = http.post("/v1/sessions/fts/messages:batch",
                         json={"messages": [msg(f"f{i}", text) for i, text in enumerate(texts)]})
    assert response.status_code == 201
    return "/v1/sessions/fts/search"


@pytest.mark.parametrize("query, ids", [
    ('"', []), ("*", []), ("NEAR(", ["f5"]), ("OR", ["f5"]), ("-", []), ("-hello", ["f0"]), ("^", []),
    (":", []), ("a:b", ["f5", "f6"]), ("hello*", ["f0"]), ('"hello', ["f0"]), ('"quick fox"', []),
    ('"quick brown"', ["f1"]), ("北京", ["f2"]), ("東京", ["f3"]), ("京", ["f2", "f3"]), ("(", []),
    ("'; DROP TABLE assistant_messages; --", []), ("x" * 10_000, []), (" ", []),
])
def test_search_treats_every_query_as_plain_words(http, searchable, query, ids):
    response = http.get(searchable, params={"q": query})
    assert response.status_code == 200, response.text
    assert sorted(hit["id"] for hit in response.json()["results"]) == ids


def test_a_search_of_twenty_thousand_words_answers_within_half_a_second(http, searchable):
    words = " ".join(f"w{i}" for i in range(20_000))
    started = time.monotonic()
    response = http.post("/v1/sessions/fts/rpc", json={"method": "search", "params": {"query": words}})
    assert response.json() == {"result": []}
    assert time.monotonic() - started < 0.5


# -- tools and RPC -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("body, result", [
    (b"", 'Error: invalid arguments for set_context: label: Invalid input: expected "memory"; '
          'content: Invalid input: expected string, received undefined'),
    (b"[1, 2]", "Error: invalid arguments for set_context: Invalid input: expected object, received array"),
    (b'{"label": "memory", "content": "x", "action": "explode"}',
     'Error: invalid arguments for set_context: action: Invalid option: expected one of "replace"|"append"'),
    (b'{"label": "soul", "content": "x"}',
     'Error: invalid arguments for set_context: label: Invalid input: expected "memory"'),
])
def test_bad_tool_arguments_come_back_as_the_tool_result(http, body, result):
    response = http.post("/v1/sessions/tools/tools/set_context", content=body,
                         headers={"Content-Type": "application/json"})
    assert response.json() == {"result": result}
    assert http.get("/v1/sessions/tools/context/memory").json()["block"]["content"] == ""


def test_an_unknown_tool_is_a_404(http):
    assert_error(http.post("/v1/sessions/tools/tools/load_context", json={}), 404, "NotFoundError")


@pytest.mark.parametrize("body, status, error_type, field", [
    ({"method": 5}, 400, "InvalidInputError", "method"),
    ({"params": []}, 400, "InvalidInputError", "method"),
    ({"method": "get_history", "params": "x"}, 400, "InvalidInputError", "params"),
    ({"method": "nope"}, 404, "UnknownMethodError", None),
    ({"method": "_build_app"}, 404, "UnknownMethodError", None),
    ({"method": "on_start"}, 404, "UnknownMethodError", None),
    ({"method": "search", "params": {"q": "a"}}, 400, "InvalidArgumentsError", None),
    ({"method": "search", "params": {"query": 5}}, 400, "InvalidInputError", "query"),
    ({"method": "get_history", "params": [{"a": 1}]}, 400, "InvalidInputError", "leaf_id"),
    ({"method": "set_metadata", "params": [{"a": "x" * 70_000}]}, 400, "InvalidInputError", "metadata"),
])
def test_bad_rpc_calls_are_clear_errors(http, body, status, error_type, field):
    assert_error(http.post("/v1/sessions/rpc/rpc", json=body), status, error_type, field)


def test_execute_tool_with_a_list_as_name_is_a_400(http):
    response = http.post("/v1/sessions/rpc/rpc", json={"method": "execute_tool", "params": [["x"], {}]})
    assert assert_error(response, 400, "InvalidInputError", "name") == "name must be a string, not list"


def test_a_huge_search_limit_through_rpc_is_answered(http):
    response = http.post("/v1/sessions/rpc/rpc",
                         json={"method": "search", "params": {"query": "a", "limit": 10**20}})
    assert response.json() == {"result": []}


def test_parts_of_any_shape_are_stored_as_sent(http):
    odd = {"id": "odd", "role": "user", "parts": [{"type": "text", "text": 5}, 1, "x", None, {"type": "text"}]}
    assert http.post("/v1/sessions/odd-parts/messages", json={"message": odd}).status_code == 201
    assert http.get("/v1/sessions/odd-parts/messages").json() == {"messages": [odd]}
    assert http.post("/v1/sessions/odd-parts/compact").json() == {"result": None}


def test_a_batch_nested_too_deeply_to_store_is_a_400_for_that_message(http):
    deep = "[" * 800 + "]" * 800
    body = '{"method": "append_messages", "params": [[{"id": "z", "role": "user", "parts": [%s]}]]}' % deep
    response = http.post("/v1/sessions/rpc-deep/rpc", content=body, headers={"Content-Type": "application/json"})
    assert_error(response, 400, "InvalidMessageError", "messages[0]")
    assert http.get("/v1/sessions/rpc-deep/messages:count").json() == {"count": 0}


# -- WebSocket --------------------------------------------------------------------------------------------


async def open_socket(server, session_id):
    url = server.url.replace("http", "ws", 1) + f"/v1/sessions/{quote_segment(session_id)}/ws"
    return await WebSocketConnection.connect(url, headers=[("Authorization", f"Bearer {TOKEN}")])


async def replies(ws, count, timeout=5):
    """The next ``count`` frames that answer calls (broadcasts are skipped)."""
    found = []
    with trio.fail_after(timeout):
        while len(found) < count:
            frame = await ws.receive()
            value = json.loads(frame) if isinstance(frame, str) else msgpack.unpackb(frame)
            if "type" not in value:
                found.append(value)
    return found


async def test_frames_that_are_not_calls_get_no_reply_and_the_socket_keeps_answering(server):
    ws = await open_socket(server, "ws-noise")
    for frame in [b"", "", "not json", "[1, 2]", '"text"', '{"no": "method"}', "[" * 40_000 + "]" * 40_000,
                  b"\xc1", msgpack.packb([1])]:
        await ws.send(frame)
    await ws.send(json.dumps({"id": "after", "method": "get_path_length"}))
    assert await replies(ws, 1) == [{"id": "after", "result": 0}]
    await ws.aclose()


async def test_bad_rpc_frames_are_answered_with_errors_under_their_id(server):
    ws = await open_socket(server, "ws-bad-calls")
    frames = [
        {"id": 1, "method": 5},
        {"id": 2, "method": "get_history", "params": "x"},
        {"id": 3, "method": "nope"},
        {"id": 4, "method": "get_history", "params": [1, 2, 3, 4, 5]},  # one more than it takes
        {"id": 5, "method": "append_message", "params": {"message": {"id": "w", "role": "user", "parts": "x"}}},
    ]
    for frame in frames:
        await ws.send(json.dumps(frame))
    got = {reply["id"]: (reply["error"]["type"], reply["error"].get("field")) for reply in await replies(ws, 5)}
    assert got == {1: ("InvalidInputError", "method"), 2: ("InvalidInputError", "params"),
                   3: ("UnknownMethodError", None), 4: ("InvalidArgumentsError", None),
                   5: ("InvalidMessageError", "message.parts")}
    await ws.aclose()


async def test_an_rpc_frame_with_a_lone_surrogate_is_answered_with_a_400_and_stores_nothing(server, http):
    ws = await open_socket(server, "ws-surrogate")
    await ws.send('{"id": 7, "method": "append_message", "params": [{"id": "\\ud800", "role": "user", "parts": []}]}')
    [reply] = await replies(ws, 1)
    assert reply["id"] == 7
    assert reply["error"]["type"] == "InvalidInputError" and reply["error"]["field"] == "body"
    assert http.get("/v1/sessions/ws-surrogate/messages:count").json() == {"count": 0}
    await ws.aclose()


async def test_a_call_whose_id_json_cannot_carry_is_answered_with_a_null_id(server):
    ws = await open_socket(server, "ws-nan")
    await ws.send('{"id": NaN, "method": "get_path_length"}')
    frame = await ws.receive()
    assert json.loads(frame, parse_constant=lambda name: pytest.fail(f"{name} in a reply")) == {"id": None,
                                                                                              "result": 0}
    await ws.aclose()


async def test_a_frame_over_the_limit_closes_the_socket_with_1009(server, http):
    ws = await open_socket(server, "ws-big")
    with pytest.raises(ConnectionClosed) as closed:
        await ws.send(json.dumps({"id": 1, "method": "get_path_length", "pad": "x" * LIMIT}))
        await replies(ws, 1)
    assert closed.value.code == 1009
    assert http.get("/v1/health").json() == {"status": "ok"}


async def test_a_websocket_without_the_token_is_refused_with_401(server):
    url = server.url.replace("http", "ws", 1) + "/v1/sessions/ws-auth/ws"
    with pytest.raises(UnauthorizedError):
        await WebSocketConnection.connect(url)
    with pytest.raises(UnauthorizedError):
        await WebSocketConnection.connect(url, headers=[("Authorization", "Bearer wrong")])


async def test_calls_on_a_socket_wake_its_actor_after_it_hibernated(server, http):
    ws = await open_socket(server, "ws-sleepy")
    await ws.send(json.dumps({"id": 1, "method": "append_message", "params": [msg("m1", "before sleep")]}))
    assert await replies(ws, 1) == [{"id": 1, "result": True}]
    assert http.post("/v1/actors:hibernate", json={"sessionIds": ["ws-sleepy"]}).json() == {"hibernated": 1}
    await ws.send(json.dumps({"id": 2, "method": "get_history"}))
    assert await replies(ws, 1) == [{"id": 2, "result": [msg("m1", "before sleep")]}]
    await ws.aclose()


async def test_a_call_whose_socket_closes_mid_call_still_completes(server, http):
    ws = await open_socket(server, "ws-gone")
    await ws.send(json.dumps({"id": 1, "method": "append_messages",
                              "params": [[msg(f"g{i}", "words " * 50) for i in range(300)]]}))
    await ws.aclose()
    with trio.fail_after(5):
        while http.get("/v1/sessions/ws-gone/messages:count").json() != {"count": 300}:
            await trio.sleep(0.05)
    assert http.get("/v1/actors").json()["connections"] == 0


# -- tokens ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("method, path", [
    ("GET", "/metrics"), ("GET", "/v1/actors"), ("POST", "/v1/actors:hibernate"), ("OPTIONS", "/v1/actors"),
    ("HEAD", "/v1/actors"), ("OPTIONS", "/v1/sessions/auth/messages"),
    ("GET", "/v1/sessions/auth/messages"), ("POST", "/v1/sessions/auth/messages"), ("GET", "/v1/nowhere"),
    ("GET", "/v1/sessions/%FF/messages"), ("GET", "/v1/transcripts/sessions?project_key=p"),
    ("POST", "/v1/transcripts/entries"),
])
def test_every_route_but_health_needs_the_token(server, http, method, path):
    with httpx.Client(base_url=server.url, timeout=5) as client:
        response = client.request(method, path, json={"message": msg("no")})
        if method == "HEAD":
            assert response.status_code == 401 and response.content == b""
        else:
            assert_error(response, 401, "UnauthorizedError")
        assert response.headers["www-authenticate"] == "Bearer"
        assert client.get("/v1/health").json() == {"status": "ok"}
    assert http.get("/v1/sessions/auth/messages").json() == {"messages": []}


@pytest.mark.parametrize("authorization", ["Bearer wrong", f"Basic {TOKEN}", f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}",
                                           f"Bearer {TOKEN.upper()}", TOKEN, "Bearer", "", f"Bearer {TOKEN} {TOKEN}"])
def test_only_the_exact_bearer_token_is_accepted(server, authorization):
    with httpx.Client(base_url=server.url, timeout=5) as client:
        assert_error(client.get("/v1/actors", headers={"Authorization": authorization}), 401, "UnauthorizedError")


def test_the_scheme_is_case_insensitive_and_spaces_around_the_token_do_not_matter(server):
    with httpx.Client(base_url=server.url, timeout=5) as client:
        for header in (f"bearer {TOKEN}", f"BEARER {TOKEN}", f"Bearer  {TOKEN}"):
            assert client.get("/v1/actors", headers={"Authorization": header}).status_code == 200


# -- concurrency --------------------------------------------------------------------------------------------


async def append_until_run(session, message):
    """Append, sending again while the session refuses the call unrun (429: busy or overloaded).

    On a loaded machine fifty writers on one session wait longer than ``max_queue_s``; a
    refused call did not run, so a real client sends it again, as here.
    """
    while True:
        try:
            return await session.append_message(message)
        except (ActorBusyError, ActorOverloadedError):
            await trio.sleep(0.05)


async def test_fifty_concurrent_writers_lose_nothing_and_build_one_chain(server):
    acknowledged = []
    async with SessionsClient(server.url, token=TOKEN) as client:
        session = client.session("crowd")

        async def writer(w):
            for i in range(6):
                assert await append_until_run(session, msg(f"w{w}-{i}", f"writer {w} says {i}")) is True
                acknowledged.append(f"w{w}-{i}")

        async with trio.open_nursery() as nursery:
            for w in range(50):
                nursery.start_soon(writer, w)
        history = await session.get_history()
        assert len(acknowledged) == 300
        assert sorted(m["id"] for m in history) == sorted(acknowledged)  # one chain: every message on the path
        assert await session.get_path_length() == 300
        for w in range(50):  # each writer's messages in its own order
            mine = [m["id"] for m in history if m["id"].startswith(f"w{w}-")]
            assert mine == [f"w{w}-{i}" for i in range(6)]


async def test_appends_racing_compactions_keep_every_message_and_valid_ranges(server):
    async with SessionsClient(server.url, token=TOKEN) as client:
        session = client.session("crowd-compact")
        ids = []

        async def writer(w):
            for i in range(15):
                await append_until_run(session, msg(f"c{w}-{i}", f"lorem ipsum dolor sit amet {w} {i} " * 20))
                ids.append(f"c{w}-{i}")

        async def compactor():
            for _ in range(15):
                await session.compact()
                await trio.sleep(0.01)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(compactor)
            for w in range(10):
                nursery.start_soon(writer, w)
        assert await session.get_path_length() == 150
        compactions = await session.get_compactions()
        assert compactions
        for compaction in compactions:
            assert compaction["fromMessageId"] in ids and compaction["toMessageId"] in ids
        visible = [m["id"] for m in await session.get_history()]
        assert visible[-1] == ids[-1] or visible[-1] in ids


async def test_two_hundred_sessions_at_once(server):
    async with SessionsClient(server.url, token=TOKEN) as client:
        async def one(n):
            session = client.session(f"many-{n}")
            await session.append_message(msg("hello", f"session {n}"))
            assert [m["parts"][0]["text"] for m in await session.get_history()] == [f"session {n}"]

        async with trio.open_nursery() as nursery:
            for n in range(200):
                nursery.start_soon(one, n)


# -- metrics ------------------------------------------------------------------------------------------------


def test_made_up_http_methods_do_not_grow_the_metrics(server, http):
    with httpx.Client(base_url=server.url, timeout=5) as anonymous:
        for n in range(5):
            assert http.request(f"MADEUP{n}", "/v1/health").status_code == 405
            assert anonymous.request(f"BOGUS{n}", "/v1/sessions/metrics/messages").status_code == 401
    text = http.get("/metrics").text
    assert "MADEUP" not in text and "BOGUS" not in text
    assert 'durable_sessions_requests_total{route="OTHER unmatched",status="405"} 5.0' in text
    assert 'durable_sessions_requests_total{route="OTHER unmatched",status="401"} 5.0' in text


@pytest.mark.parametrize("ids, field", [([""], "sessionIds[0]"), (["ok", "a" * 513], "sessionIds[1]")])
def test_a_bad_id_in_a_hibernate_request_names_its_index_and_hibernates_nothing(http, ids, field):
    assert http.post("/v1/sessions/ok/messages", json={"message": msg("awake")}).status_code in (200, 201)
    assert_error(http.post("/v1/actors:hibernate", json={"sessionIds": ids}), 400, "InvalidInputError", field)
    assert http.post("/v1/actors:hibernate", json={"sessionIds": ["ok"]}).json() == {"hibernated": 1}


@pytest.mark.parametrize("ids", ["a", ["a", 5], None, 5])
def test_a_bad_delete_body_names_the_ids_field_it_has(http, ids):
    assert_error(http.post("/v1/sessions/deletes/messages:delete", json={"ids": ids}), 400, "InvalidInputError", "ids")
