"""The ``Host`` check against DNS rebinding, ``--insecure-no-token``, and hop headers from clients
(runtime/server/hosts.py, runtime/server/forwarding.py ``HopGate``), on real server processes."""

import socket
import subprocess
from urllib.parse import urlsplit

import httpx
import pytest

from common.wire import HOP_HEADER
from runtime.server.config import ConfigError, ServerSettings
from runtime.server.forwarding import hop_value, verify_hop
from runtime.server.hosts import HostPolicy, host_name
from tests.support.processes import cli_command, cli_env, server_process

EVIL = "rebind.attacker.example"


def test_host_names_are_compared_without_port_case_brackets_or_final_dot():
    assert host_name("LocalHost:8787") == "localhost"
    assert host_name("[::1]:8787") == "::1"
    assert host_name("Sessions.Internal.") == "sessions.internal"
    assert host_name("::1") == "::1"  # a bare IPv6 address keeps its colons


def test_the_policy_answers_loopback_names_the_bound_address_and_listed_names_only():
    policy = HostPolicy(("sessions.internal",), bind="10.1.2.3:8787")
    for host in ("localhost", "localhost:1", "127.0.0.1:8787", "127.9.9.9", "[::1]:8787", "10.1.2.3:8787",
                 "sessions.internal:443", None):
        assert policy.allows(host), host
    for host in (EVIL, f"{EVIL}:8787", "localhost.attacker.example", "10.1.2.4", "", "[::2]"):
        assert not policy.allows(host), host
    assert HostPolicy(token=True).allows(EVIL)  # a token guards the server: no check unless names are listed
    assert not HostPolicy(("a.example",), token=True).allows(EVIL)
    assert HostPolicy(("*",)).allows(EVIL)
    assert HostPolicy(bind="0.0.0.0:8787").bound is None


@pytest.mark.parametrize("value", ["sessions.internal", [1], ["http://x.example"], ["a/b"], [""]])
def test_allowed_hosts_must_be_a_list_of_names(value):
    with pytest.raises(ConfigError, match="allowed_hosts"):
        ServerSettings(allowed_hosts=value)


def _raw(url, request):
    """Send ``request`` (bytes) to the server at ``url``; the status line of its answer."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
        sock.sendall(request)
        answer = b""
        while b"\r\n" not in answer:
            chunk = sock.recv(4096)
            if not chunk:
                break
            answer += chunk
    return answer.split(b"\r\n", 1)[0].decode()


def _upgrade(host):
    return (f"GET /v1/sessions/chat/ws HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
            f"Origin: http://{host}\r\n\r\n").encode()


def test_a_tokenless_server_refuses_a_rebound_host_name_for_requests_and_websockets(tmp_path):
    with server_process(tmp_path / "data") as server:
        port = urlsplit(server.url).port
        with httpx.Client(base_url=server.url, timeout=30) as http:
            evil = http.get("/v1/sessions", headers={"Host": f"{EVIL}:{port}", "Origin": f"http://{EVIL}:{port}"})
            posted = http.post("/v1/sessions/chat/messages", json={"message": {"role": "user", "content": "x"}},
                               headers={"Host": EVIL})
            ok = [http.get("/v1/sessions", headers={"Host": host}).status_code
                  for host in (f"localhost:{port}", f"127.0.0.1:{port}", "[::1]", "localhost")]
            count = http.get("/v1/sessions/chat/messages:count")
        assert evil.status_code == 421
        assert evil.json()["error"]["type"] == "HostNotAllowedError"
        assert EVIL in evil.json()["error"]["message"] and "allowed_hosts" in evil.json()["error"]["message"]
        assert posted.status_code == 421
        assert ok == [200, 200, 200, 200]
        assert count.json() == {"count": 0}  # the refused POST ran nothing
        assert _raw(server.url, _upgrade(f"{EVIL}:{port}")).split(" ")[1] == "421"
        assert _raw(server.url, _upgrade(f"127.0.0.1:{port}")).split(" ")[1] == "101"


def test_listed_hosts_are_answered_and_a_token_turns_the_check_off(tmp_path):
    config = tmp_path / "s.toml"
    config.write_text('[server]\nallowed_hosts = ["sessions.test"]\n')
    with server_process(tmp_path / "a", extra=["--config", str(config)]) as server:
        listed = httpx.get(f"{server.url}/v1/health", headers={"Host": "Sessions.Test:9999"}, timeout=30)
        other = httpx.get(f"{server.url}/v1/health", headers={"Host": EVIL}, timeout=30)
    assert (listed.status_code, other.status_code) == (200, 421)
    with server_process(tmp_path / "b", token="t0ken") as server:
        answer = httpx.get(f"{server.url}/v1/sessions", headers={"Host": EVIL, "Authorization": "Bearer t0ken"},
                           timeout=30)
        refused = httpx.get(f"{server.url}/v1/sessions", headers={"Host": EVIL}, timeout=30)
    assert (answer.status_code, refused.status_code) == (200, 401)


def test_a_public_bind_without_a_token_needs_insecure_no_token_and_still_checks_hosts(tmp_path):
    done = subprocess.run([*cli_command(), "serve", "--bind", "0.0.0.0:0", "--data", str(tmp_path / "data")],
                          env=cli_env(None), capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "--insecure-no-token" in done.stderr
    with server_process(tmp_path / "data", bind="0.0.0.0:0", extra=["--insecure-no-token"]) as server:
        port = urlsplit(server.url).port
        here = httpx.get(f"http://127.0.0.1:{port}/v1/sessions", timeout=30)
        evil = httpx.get(f"http://127.0.0.1:{port}/v1/sessions", headers={"Host": EVIL}, timeout=30)
    assert (here.status_code, evil.status_code) == (200, 421)


def test_a_hop_header_from_a_client_does_not_turn_off_the_origin_check(tmp_path):
    """Before, any client could send ``X-Durable-Sessions-Hop`` and a foreign page's request passed."""
    with server_process(tmp_path / "data") as server:
        foreign = {"Origin": "https://app.example", HOP_HEADER: "anything"}
        answer = httpx.post(f"{server.url}/v1/actors:hibernate", headers=foreign, timeout=30)
        signed = httpx.post(f"{server.url}/v1/actors:hibernate",
                            headers={**foreign, HOP_HEADER: hop_value("guess", "h1")}, timeout=30)
    assert answer.status_code == 403 and answer.json()["error"]["type"] == "OriginNotAllowedError"
    assert signed.status_code == 403  # no hop header is valid outside a cluster


def test_hop_values_verify_only_with_the_shared_secret():
    value = hop_value("s3cret", "h1")
    assert value.startswith("h1;") and "s3cret" not in value
    assert verify_hop("s3cret", value, "10.0.0.9")
    assert not verify_hop("other", value, "10.0.0.9")
    assert not verify_hop("s3cret", "h1", "127.0.0.1")
    assert not verify_hop("s3cret", value.replace("h1;", "h2;"), "10.0.0.9")
    # no secret (a token-less cluster, loopback only): loopback peers only
    assert verify_hop(None, "h1", "127.0.0.1") and verify_hop(None, "h1", "::1")
    assert not verify_hop(None, "h1", "10.0.0.9") and not verify_hop(None, "h1", None)


def test_a_tokenless_cluster_on_a_public_address_needs_the_cluster_secret(tmp_path):
    argv = [*cli_command(), "serve", "--bind", "0.0.0.0:0", "--data", str(tmp_path / "data"), "--insecure-no-token",
            "--cluster", "postgresql://nobody@127.0.0.1:1/none"]
    done = subprocess.run(argv, env=cli_env(None), capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "DURABLE_SESSIONS_CLUSTER_SECRET" in done.stderr
