"""Operating the command: startup errors as one line (exit 2), --version, logging options after the
subcommand, JSON logs with an access log, Ctrl-C during an import (130, no traceback), progress bars only on
a terminal. Real processes throughout."""

import fcntl
import json
import os
import pty
import re
import signal
import socket
import struct
import subprocess
import termios
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.support.disks import small_ext4
from tests.support.processes import cli_command, cli_env, server_process


def run(*args, cwd=None, timeout=60):
    return subprocess.run([*cli_command(), *args], env=cli_env(None), capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


def one_line(result):
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr and "ExceptionGroup" not in result.stderr
    return lines[0]


def test_version():
    result = run("--version")
    assert result.returncode == 0
    assert result.stdout.startswith("durable-sessions ") and result.stdout.strip().split()[1][0].isdigit()


def test_a_port_in_use_is_one_line_and_exit_2(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run("serve", "--bind", f"127.0.0.1:{port}", "--data", str(tmp_path / "data"))
    assert result.returncode == 2
    assert one_line(result) == f"durable-sessions serve: cannot listen on 127.0.0.1:{port}: Address already in use"


@pytest.mark.parametrize(("bind", "message"), [
    ("127.0.0.1:99999", "server.bind: port 99999 is not a port (0-65535)"),
    ("127.0.0.1", "server.bind must be 'host:port', not '127.0.0.1'"),
    ("no-such-host.invalid:8787", "cannot listen on no-such-host.invalid:8787: "),
])
def test_a_bad_address_is_one_line_and_exit_2(tmp_path, bind, message):
    result = run("serve", "--bind", bind, "--data", str(tmp_path / "data"), "--token", "t")
    assert result.returncode == 2
    assert one_line(result).startswith(f"durable-sessions serve: {message}")


def test_a_data_folder_that_cannot_be_made_is_named(tmp_path):
    (tmp_path / "afile").write_text("x")
    result = run("serve", "--bind", "127.0.0.1:0", "--data", str(tmp_path / "afile" / "data"))
    assert result.returncode == 2
    assert one_line(result) == (f"durable-sessions serve: cannot use the data folder {tmp_path}/afile/data: "
                                f"Not a directory ({tmp_path}/afile)")
    assert not (tmp_path / "data").exists()


def test_a_read_only_data_folder_is_named_for_serve_and_import(tmp_path, test_data):
    with small_ext4(tmp_path, size_mb=8) as mount:
        (mount / "data").mkdir()
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        try:
            served = run("serve", "--bind", "127.0.0.1:0", "--data", str(mount / "data"))
            imported = run("import", str(test_data / "openai_chat" / "tau-bench-airline-3.json"),
                           "--data", str(mount / "data"))
        finally:
            subprocess.run(["mount", "-o", "remount,rw", str(mount)], check=True)
    for result, command in ((served, "serve"), (imported, "import")):
        assert result.returncode == 2
        line = one_line(result)
        assert line.startswith(f"durable-sessions {command}: cannot use the data folder {mount}/data: "
                               "Read-only file system ("), line


def test_log_options_after_the_subcommand_are_accepted_and_checked():
    assert run("stats", "--log-level", "debug", "--url", "http://127.0.0.1:9").returncode == 1  # parsed, then no server
    result = run("stats", "--log-level", "chatty")
    assert result.returncode == 2
    assert "argument --log-level: invalid choice: 'CHATTY'" in result.stderr
    result = run("--log-format", "yaml", "stats")
    assert result.returncode == 2 and "argument --log-format: invalid choice: 'yaml'" in result.stderr


def test_json_logs_and_the_access_log(tmp_path):
    data = tmp_path / "data"
    with server_process(data, extra=["--log-level", "info", "--log-format", "json", "--access-log"]) as server:
        assert httpx.get(f"{server.url}/v1/health?probe=1", timeout=60).status_code == 200
        assert httpx.get(f"{server.url}/v1/ready", timeout=60).status_code == 200
    lines = [json.loads(line) for line in (tmp_path / "data-server.log").read_text().splitlines()
             if line.startswith("{")]
    assert lines and all(set(line) >= {"time", "level", "logger", "message"} for line in lines)
    access = [line for line in lines if line["logger"] == "durable_sessions.access"]
    assert any('"GET /v1/health?probe=1 1.1" 200' in line["message"] for line in access), access
    assert any('"GET /v1/ready 1.1" 200' in line["message"] for line in access), access
    assert all(line["time"].endswith("Z") for line in lines)


def test_the_text_access_log_escapes_control_characters_of_the_path(tmp_path):
    """A decoded ``%0A`` in the path must not start a line of its own (forged log lines)."""
    data = tmp_path / "data"
    with server_process(data, extra=["--log-level", "info", "--access-log"]) as server:
        port = int(server.url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.sendall(b"GET /v1/sessions/x%0A2030-01-01%20FORGED%20line%0D%1B[31m/messages HTTP/1.1\r\n"
                         b"Host: 127.0.0.1\r\nConnection: close\r\n\r\n")
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 ")
    text = (tmp_path / "data-server.log").read_text()
    lines = text.splitlines()
    access = [line for line in lines if "durable_sessions.access" in line and "/v1/sessions/x" in line]
    assert len(access) == 1, text
    assert "/v1/sessions/x\\n2030-01-01 FORGED line\\r\\x1b[31m/messages" in access[0]
    assert not any(line.startswith("2030-01-01") for line in lines)
    assert "\r" not in text and "\x1b" not in text


def test_no_access_log_unless_asked(tmp_path):
    data = tmp_path / "data"
    with server_process(data, extra=["--log-level", "info"]) as server:
        httpx.get(f"{server.url}/v1/health", timeout=60)
    assert "GET /v1/health" not in (tmp_path / "data-server.log").read_text()


def many_conversations(path: Path, source: Path, copies: int) -> Path:
    records = json.loads(source.read_text())
    out = []
    for i in range(copies):
        for record in records:
            out.append({**record, "task_id": 10_000 + i * len(records) + records.index(record)})
    path.write_text(json.dumps(out))
    return path


def test_ctrl_c_during_an_import_exits_130_without_a_traceback(tmp_path, test_data):
    source = many_conversations(tmp_path / "many.json", test_data / "openai_chat" / "tau-bench-airline-3.json", 400)
    data = tmp_path / "data"
    # Ctrl-C reaches it as it reaches a command typed at a terminal: a test run in a background job (a
    # shell's `&`) has SIGINT ignored, which the child would inherit and Python then respect.
    process = subprocess.Popen([*cli_command(), "import", str(source), "--data", str(data), "--concurrency", "2"],
                               env=cli_env(None), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 60
    while not list(data.glob("sessions/*/*.sqlite3")):  # it is importing
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert err.splitlines()[-1] == "durable-sessions import: interrupted"
    assert "Traceback" not in err and "ExceptionGroup" not in err
    # what was imported before stays; a second run goes on where it stopped
    again = run("import", str(source), "--data", str(data), timeout=300)
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("imported 1200 of 1200 sessions")


@pytest.mark.parametrize("source", ["openai_chat/tau-bench-airline-3.json", "claude_code/projects"])
def test_no_progress_bar_when_stderr_is_not_a_terminal(tmp_path, test_data, source):
    result = run("import", str(test_data / source), "--data", str(tmp_path / "data"))
    assert result.returncode == 0, result.stderr
    assert "it/s" not in result.stderr and "msg/s" not in result.stderr and "file/s" not in result.stderr
    assert "import:" not in result.stderr and "%|" not in result.stderr


@pytest.mark.parametrize(("source", "bar"), [("openai_chat/tau-bench-airline-3.json", r"import: 100%\|█+\| \d+/\d+ "),
                                           ("claude_code/projects", r"import: 100%\|█+\| (\d+)/\1 ")])
def test_the_progress_bar_shows_on_a_terminal(tmp_path, test_data, source, bar):
    primary, secondary = pty.openpty()
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # a terminal of 120 columns
    shown = bytearray()

    def read_terminal():
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # the terminal closed (EIO)
                return
            if not chunk:
                return
            shown.extend(chunk)

    reader = threading.Thread(target=read_terminal, daemon=True)
    reader.start()
    try:
        result = subprocess.run([*cli_command(), "import", str(test_data / source), "--data", str(tmp_path / "data")],
                                env=cli_env(None), stdout=subprocess.PIPE, stderr=secondary, timeout=120)
    finally:
        os.close(secondary)
        reader.join(timeout=10)
        os.close(primary)
    assert result.returncode == 0
    assert re.search(bar, shown.decode("utf-8", "replace")), bytes(shown[-300:])
