"""The data folder is private: folders 0700 and files 0600 whatever the umask (issue 26)."""

from __future__ import annotations

import os
import stat

import httpx

from tests.support.processes import server_process


def modes_under(folder):
    """``{relative path: mode}`` of the folder itself and of everything in it."""
    found = {".": stat.S_IMODE(folder.stat().st_mode)}
    for path in folder.rglob("*"):
        found[path.relative_to(folder).as_posix()] = stat.S_IMODE(path.lstat().st_mode)
    return found


def test_every_folder_is_0700_and_every_file_0600_under_umask_022(tmp_path):
    data = tmp_path / "data"  # made by the server
    old_umask = os.umask(0o022)  # the server inherits it: the usual default, which makes 0644 files
    try:
        with server_process(data) as server:
            with httpx.Client(base_url=server.url, timeout=30) as client:
                for session in ("chat-1", "chat-2", "ns-chat"):
                    message = {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "hello"}]}
                    answer = client.post(f"/v1/sessions/{session}/messages", json={"message": message})
                    assert answer.status_code < 300, answer.text
            running = modes_under(data)
        stopped = modes_under(data)
    finally:
        os.umask(old_umask)
    for seen in (running, stopped):
        assert any(name.endswith(".sqlite3") and "/" in name for name in seen)  # actor files were written
        assert "_catalog.sqlite3" in seen and "_alarms.sqlite3" in seen
        wrong = {name: oct(mode) for name, mode in seen.items()
                 if mode != (0o700 if (data / name).is_dir() else 0o600)}
        assert wrong == {}
    assert "_host.lock" in running and any(name.endswith("-wal") for name in running)
