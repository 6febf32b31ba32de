"""A client command that cannot reach the server, or is refused for its token, says what to try next."""

import subprocess

from tests.support.postgres import free_port
from tests.support.processes import cli_command, cli_env, server_process


def run(url, token, *args):
    return subprocess.run([*cli_command(), *args, "--url", url], env=cli_env(token), capture_output=True,
                          text=True, timeout=60)


def test_no_server_listening_points_at_serve_and_the_url_option():
    url = f"http://127.0.0.1:{free_port()}"
    result = run(url, None, "list")
    assert result.returncode == 1
    assert result.stdout == ""
    first, hint = result.stderr.splitlines()
    assert first.startswith(f"durable-sessions list: ServerUnreachableError: no server answered at {url} (")
    assert hint == (f"  no server answers at {url}: start one (durable-sessions serve), or name another "
                    "with --url or DURABLE_SESSIONS_URL")


def test_a_missing_or_wrong_token_points_at_the_token_option(tmp_path):
    with server_process(tmp_path / "data", token="the-right-one") as server:
        missing = run(server.url, None, "history", "chat-1")
        wrong = run(server.url, "not-it", "list")
    for result, command in ((missing, "history"), (wrong, "list")):
        assert result.returncode == 1
        assert result.stderr.splitlines() == [
            f"durable-sessions {command}: UnauthorizedError: missing or wrong bearer token",
            "  this server wants its token: pass --token or set DURABLE_SESSIONS_TOKEN",
        ]
