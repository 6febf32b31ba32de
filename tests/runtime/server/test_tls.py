"""TLS: ``serve --certfile/--keyfile`` serves https:// and wss://, and the client talks to it
(a self-signed certificate made at test time)."""

import subprocess

import httpx
import pytest

from runtime.client import SessionsClient
from tests.support.processes import cli_command, cli_env, server_process
from tests.support.tls import self_signed


def msg(message_id, text="hello"):
    return {"id": message_id, "role": "user", "parts": [{"type": "text", "text": text}]}


async def test_a_tls_server_answers_https_and_wss_to_a_client_that_trusts_its_certificate(tmp_path):
    cert, key = self_signed(tmp_path / "tls")
    with server_process(tmp_path / "data", token="t0ken",
                        extra=["--certfile", str(cert), "--keyfile", str(key)]) as server:
        assert server.url.startswith("https://127.0.0.1:")
        async with SessionsClient(server.url, token="t0ken", verify=str(cert)) as client:
            session = client.session("chat")
            assert await session.append_message(msg("m1", "over TLS")) is True
            assert [m["id"] for m in await session.get_history()] == ["m1"]
            async with session.websocket() as ws:
                assert [m["id"] for m in await ws.call("get_history")] == ["m1"]
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            httpx.get(f"{server.url}/v1/health", timeout=30)  # not trusted by default: self-signed
        plain = server.url.replace("https://", "http://")
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"{plain}/v1/health", timeout=30)  # no plain HTTP on a TLS port


def test_a_certificate_that_does_not_load_is_one_line_and_exit_2(tmp_path):
    cert, _ = self_signed(tmp_path / "tls")
    for extra in (["--certfile", str(cert), "--keyfile", str(tmp_path / "missing.pem")],
                  ["--certfile", str(cert), "--keyfile", str(cert)],
                  ["--certfile", str(cert)]):
        done = subprocess.run([*cli_command(), "serve", "--bind", "127.0.0.1:0", "--data", str(tmp_path / "d"),
                               *extra], env=cli_env(None), capture_output=True, text=True, timeout=30)
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1 and "key" in done.stderr
