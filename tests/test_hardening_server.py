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

from _server_process import server_process

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
    head = (f"{method} {path} HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {TOKEN}\r\n"
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
        sock.sendall(f"POST /v1/sessions/keep/messages HTTP/1.1\r\nHost: t\r\nContent-Length: {len(body)}\r\n\r\n"
                     .encode())
        time.sleep(0.05)
        sock.sendall(body)
        assert read_response(sock)[0] == 401
        sock.sendall(b"GET /v1/health HTTP/1.1\r\nHost: t\r\n\r\n")
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
        sock.sendall(b"GET /v1/health HTTP/1.1\r\nHost: t\r\n\r\n")
        try:
            status = read_response(sock)[0]
        except ConnectionResetError:
            status = None
        assert status is None  # closed: the announced body is never read
    assert http.get("/v1/sessions/big/messages").json() == {"messages": []}


# -- bodies ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("content", [
    b"[" * 100_000 + b"]" * 100_000,
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
    response = http.post("/v1/sessions/deep/messages", content=b"\x91" * 100_000 + b"\x90",
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

    response = http.post("/v1/sessions/chunked/messages", content=chunks(), headers={"Content-Type": "application/json"})
    assert_error(response, 413, "PayloadTooLargeError")
    assert http.get("/v1/sessions/chunked/messages:count").json() == {"count": 0}


def test_msgpack_in_and_out(http):
    body = msgpack.packb({"message": msg("mp1", "packed words")})
    response = http.post("/v1/sessions/mp/messages", content=body,
                         headers={"Content-Type": "application/msgpack", "Accept": "application/msgpack"})
    assert response.status_code == 201
    assert msgpack.unpackb(response.content) == {"id": "mp1", "inserted": True}
