"""Encryption at rest (``[storage] encryption_key_file``; :mod:`storage.cipher`) through real processes.

A ``serve`` process with a key writes a message holding a unique marker; no
file of the data folder (actor files, their ``-wal``, the catalog), nor of a
backup of it, holds the marker; the same key reads it back after a restart
and after a restore; another key, no key, a key file others may read, and a
key given to a plain apsw build are each refused at start with one line and
exit status 2.

The processes load the cipher-capable apsw through ``PYTHONPATH``
(:mod:`tests.support.cipher`); without it these tests skip, except in CI.
The refusals of a plain build and of a loose key file need no cipher build.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from pathlib import Path

import httpx
import pytest

from storage.cipher import KEY_FILE_ENV, MARK_FILE
from tests.support.cipher import cipher_pythonpath, is_cipher_build
from tests.support.data import TEST_DATA
from tests.support.processes import cli_command, cli_env, server_process

TOKEN = "encryption-token"
SQLITE_MAGIC = b"SQLite format 3\x00"


def write_key(path: Path, mode: int = 0o600) -> Path:
    path.write_text(secrets.token_hex(32) + "\n", encoding="ascii")
    path.chmod(mode)
    return path


def run(*args: str, pythonpath: str | None = None, key_file: Path | None = None) -> subprocess.CompletedProcess:
    """The ``durable-sessions`` command with ``args``, the cipher build on ``pythonpath`` and the key in the
    environment (or neither)."""
    env = cli_env(TOKEN)
    env.pop(KEY_FILE_ENV, None)
    env.pop("PYTHONPATH", None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    if key_file is not None:
        env[KEY_FILE_ENV] = str(key_file)
    return subprocess.run([*cli_command(), *args], env=env, capture_output=True, text=True, timeout=120)


def refused_serve(data: Path, **options) -> str:
    """Start ``serve`` on ``data`` expecting a refusal: exit status 2 and one line on stderr; that line."""
    done = run("serve", "--bind", "127.0.0.1:0", "--data", str(data), **options)
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("durable-sessions serve: ")
    return lines[0]


def files_under(folder: Path) -> list[Path]:
    return sorted(path for path in folder.rglob("*") if path.is_file())


def assert_no_plaintext(folder: Path, marker: bytes) -> list[str]:
    """No file under ``folder`` holds ``marker`` or SQLite's plain header; the names of the files looked at."""
    names = []
    for path in files_under(folder):
        content = path.read_bytes()
        assert marker not in content, f"{path} holds the marker in plaintext"
        assert not content.startswith(SQLITE_MAGIC), f"{path} is an unencrypted database"
        names.append(path.name)
    return names


def append(url: str, session: str, message_id: str, text: str) -> None:
    message = {"id": message_id, "role": "user", "parts": [{"type": "text", "text": text}]}
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        assert http.post(f"/v1/sessions/{session}/messages", json={"message": message}).status_code == 201


def history(url: str, session: str) -> str:
    done = run("history", session, "--url", url)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def encrypted_env(monkeypatch):
    """The cipher build on ``PYTHONPATH`` of the processes :func:`server_process` starts; its path."""
    pythonpath = cipher_pythonpath()
    monkeypatch.delenv(KEY_FILE_ENV, raising=False)
    if pythonpath:
        monkeypatch.setenv("PYTHONPATH", pythonpath)
    return pythonpath


def test_encrypted_folder_holds_no_plaintext_and_only_its_key_opens_it(tmp_path, monkeypatch, encrypted_env):
    data, backup, restored = tmp_path / "data", tmp_path / "backup", tmp_path / "restored"
    key = write_key(tmp_path / "data.key")
    config = tmp_path / "host.toml"
    config.write_text('[storage]\nencryption_key_file = "data.key"\n', encoding="utf-8")  # relative to the file
    marker = f"marker-{secrets.token_hex(8)}"

    with server_process(data, token=TOKEN, extra=["--config", str(config)]) as server:
        append(server.url, "secret-chat", "m1", f"the booking code is {marker}")
        append(server.url, "secret-chat", "m2", f"{marker} again, for the search index")
        running = assert_no_plaintext(data, marker.encode())  # the actor's -wal is there while it is awake
        assert {"_catalog.sqlite3", MARK_FILE} <= set(running)
        assert any(name.endswith(".sqlite3-wal") for name in running), running
        done = run("backup", "--to", str(backup), "--url", server.url)
        assert done.returncode == 0, done.stderr
    stopped = assert_no_plaintext(data, marker.encode())
    assert sum(name.endswith(".sqlite3") for name in stopped) >= 2, stopped  # the catalog and the actor file
    assert any(name.endswith(".sqlite3") for name in assert_no_plaintext(backup, marker.encode()))

    monkeypatch.setenv(KEY_FILE_ENV, str(key))  # the variable instead of the configuration file
    with server_process(data, token=TOKEN) as server:
        assert f"m1 [user] the booking code is {marker}" in history(server.url, "secret-chat")
        assert f"m2 [user] {marker} again" in history(server.url, "secret-chat")
    monkeypatch.delenv(KEY_FILE_ENV)

    line = refused_serve(data, pythonpath=encrypted_env, key_file=write_key(tmp_path / "other.key"))
    assert "the encryption key does not open the data folder" in line
    line = refused_serve(data, pythonpath=encrypted_env)
    assert f"the data folder {data} is encrypted; give its key file" in line
    assert KEY_FILE_ENV in line

    done = run("doctor", "--data", str(data), pythonpath=encrypted_env, key_file=key)
    assert done.returncode == 0, done.stdout + done.stderr
    done = run("doctor", "--data", str(data), pythonpath=encrypted_env)
    assert done.returncode == 2 and "is encrypted; give its key file" in done.stderr

    done = run("restore", "--from", str(backup), "--data", str(restored), pythonpath=encrypted_env)
    assert done.returncode == 2 and "is an encrypted backup; give its key file" in done.stderr
    done = run("restore", "--from", str(backup), "--data", str(restored), pythonpath=encrypted_env, key_file=key)
    assert done.returncode == 0, done.stderr
    assert_no_plaintext(restored, marker.encode())
    assert (restored / MARK_FILE).read_text() == (data / MARK_FILE).read_text()
    monkeypatch.setenv(KEY_FILE_ENV, str(key))
    with server_process(restored, token=TOKEN) as server:
        assert f"m1 [user] the booking code is {marker}" in history(server.url, "secret-chat")


def test_a_key_on_a_folder_of_unencrypted_files_is_refused(tmp_path, encrypted_env):
    data = tmp_path / "data"
    with server_process(data, token=TOKEN) as server:  # no key: plain files
        append(server.url, "plain-chat", "m1", "kept in plaintext")
    line = refused_serve(data, pythonpath=encrypted_env, key_file=write_key(tmp_path / "data.key"))
    assert f"the data folder {data} holds unencrypted files" in line
    assert not (data / MARK_FILE).exists()
    with server_process(data, token=TOKEN) as server:  # still served as it was
        assert "m1 [user] kept in plaintext" in history(server.url, "plain-chat")


def test_a_key_without_the_cipher_build_names_the_extra(tmp_path):
    if is_cipher_build(""):
        pytest.skip("this environment's apsw is the cipher build itself")
    line = refused_serve(tmp_path / "data", key_file=write_key(tmp_path / "data.key"))
    assert "has no cipher; install the encryption extra: pip install 'durable-sessions[encryption]'" in line
    assert not (tmp_path / "data").exists()  # nothing written


def test_an_unusable_key_file_is_refused_without_showing_it(tmp_path):
    """One process per kind of refusal (storage/test_cipher.py has every case of the key file's content)."""
    key = write_key(tmp_path / "data.key", 0o644)
    line = refused_serve(tmp_path / "data", key_file=key)
    assert f"the encryption key file {key} has mode 0644; only its owner may read it (chmod 600 {key})" in line
    assert key.read_text().strip() not in line
    line = refused_serve(tmp_path / "data", key_file=tmp_path / "missing.key")
    assert f"cannot read the encryption key file {tmp_path / 'missing.key'}: No such file or directory" in line
    assert not (tmp_path / "data").exists()


def test_import_into_an_encrypted_folder_takes_the_key(tmp_path, encrypted_env):
    data, key = tmp_path / "data", write_key(tmp_path / "data.key")
    source = TEST_DATA / "openai_chat" / "tau-bench-airline-3.json"
    done = run("import", str(source), "--data", str(data), "--no-progress", pythonpath=encrypted_env,
               key_file=key)
    assert done.returncode == 0, done.stderr
    assert "imported 3 of 3 sessions" in done.stdout
    assert "_catalog.sqlite3" in assert_no_plaintext(data, b"looking to get a refund for the insurance")
    done = run("import", str(source), "--data", str(data), "--no-progress", pythonpath=encrypted_env)
    assert done.returncode == 2 and "is encrypted; give its key file" in done.stderr
