"""Symbolic links in the data folder are refused, never followed (issue 26): real servers, real links."""

from __future__ import annotations

import hashlib
import shutil

import httpx
import pytest

from runtime.host.ids import id_from_name
from tests.support.processes import server_process


def msg(message_id, text):
    return {"id": message_id, "role": "user", "parts": [{"type": "text", "text": text}]}


def actor_path(data, session_id):
    actor = id_from_name("sessions", session_id)
    return data / "sessions" / actor.shard / f"{actor.hex}.sqlite3"


def digest(folder):
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(folder.iterdir())}


@pytest.mark.parametrize("linked", ["file", "folder"])
def test_serve_refuses_an_actor_file_or_folder_that_is_a_symbolic_link_out_of_the_data_folder(tmp_path, linked):
    data = tmp_path / "data"
    with server_process(data) as server:
        for session in ("victim", "bystander"):
            reply = httpx.post(f"{server.url}/v1/sessions/{session}/messages", json={"message": msg("m1", "secret")}, timeout=60)
            assert reply.status_code == 201, reply.text
    outside = tmp_path / "outside"
    outside.mkdir()
    path = actor_path(data, "victim")
    moved = path if linked == "file" else path.parent
    target = outside / moved.name
    shutil.move(moved, target)
    moved.symlink_to(target)
    before = digest(target if linked == "folder" else outside)
    with server_process(data) as server:
        for _ in range(2):  # refused every time, and nothing is written through the link
            reply = httpx.get(f"{server.url}/v1/sessions/victim/messages", timeout=60)
            assert reply.status_code == 500, reply.text
            error = reply.json()["error"]
            assert error["type"] == "ActorStorageCorruptError"
            assert f"{moved.relative_to(data)} in the data folder is a symbolic link" in error["message"]
            assert str(outside) not in error["message"]  # the link's target is for the operator's log only
        write = httpx.post(f"{server.url}/v1/sessions/victim/messages", json={"message": msg("m2", "more")}, timeout=60)
        assert write.status_code == 500
        if not actor_path(data, "bystander").is_relative_to(moved):  # another shard: served as usual
            assert httpx.get(f"{server.url}/v1/sessions/bystander/messages", timeout=60).status_code == 200
    assert moved.is_symlink()  # left where it was, not moved to the quarantine
    assert digest(target if linked == "folder" else outside) == before  # never opened: no -wal, same bytes
    log = (tmp_path / "data-server.log").read_text()
    assert f"{moved} is a symbolic link (to {target})" in log
