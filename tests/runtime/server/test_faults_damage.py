"""Damaged actor files, against real server processes: detected, quarantined, never silent.

A session of 3,000 messages is written, the server stops, its file is
damaged the way disks and people damage files (cut to 0 bytes, its WAL
deleted, random bytes in its WAL, a data page overwritten), and a new
server starts on the folder. Every call to that session -- reads that
would have answered "empty" included -- gets ``ActorStorageCorruptError``
naming it; no write is accepted; its files are moved to ``_quarantine``;
the other session goes on as if nothing happened; a restart still refuses
it; ``durable-sessions doctor`` finds the same damage offline.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess

import apsw
import httpx
import pytest
import trio

from runtime.host.ids import id_from_name
from tests.support.processes import cli_command, cli_env, server_process

pytestmark = pytest.mark.slow

VICTIM, BYSTANDER = "victim", "bystander"
MESSAGES = 3000


def msg(message_id, text):
    return {"id": message_id, "role": "user", "parts": [{"type": "text", "text": text}]}


def actor_path(data, session_id):
    actor = id_from_name("sessions", session_id)
    return data / "sessions" / actor.shard / f"{actor.hex}.sqlite3"


async def write_sessions(data, *, crash=False):
    """3,000 messages in the victim, 10 in the bystander; the server stops cleanly (the catalog is written),
    or with ``crash`` is killed with ``kill -9`` (nothing hibernated, nothing closed)."""
    with server_process(data) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as http:
            for start in range(0, MESSAGES, 250):
                batch = [msg(f"m{i}", f"fact number {i} about the flight to Lisbon") for i in range(start, start + 250)]
                reply = await http.post(f"/v1/sessions/{VICTIM}/messages:batch", json={"messages": batch})
                assert reply.status_code == 201, reply.text
            for i in range(10):
                reply = await http.post(f"/v1/sessions/{BYSTANDER}/messages", json={"message": msg(f"b{i}", "hi")})
                assert reply.status_code == 201
        if crash:
            server.process.send_signal(signal.SIGKILL)
            server.process.wait()


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """A data folder holding the two sessions, written once per module (each test damages a copy)."""
    data = tmp_path_factory.mktemp("written") / "data"
    trio.run(write_sessions, data)
    return data


def copy_of(written, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(written, data)
    assert not (data / "_host.lock").exists()  # a clean stop deleted the lock file
    return data


def cut_to_zero(path):
    path.write_bytes(b"")


def delete_wal(path):
    wal = path.with_name(path.name + "-wal")
    assert wal.stat().st_size > 100_000  # the last commits are only there
    wal.unlink()


def random_bytes_in_wal(path):
    wal = path.with_name(path.name + "-wal")
    frames = (wal.stat().st_size - 32) // (4096 + 24)
    assert frames > 100
    with wal.open("r+b") as file:  # inside the page of a frame two thirds in: only its checksum tells
        file.seek(32 + (frames * 2 // 3) * (4096 + 24) + 24 + 1000)
        file.write(random.Random(7).randbytes(200))


def damaged_data_page(path):
    con = apsw.Connection(str(path))
    try:
        con.pragma("wal_checkpoint(TRUNCATE)")  # every page in the database file, the WAL empty
        pages = [row[0] for row in con.execute(
            "SELECT pageno FROM dbstat WHERE name = 'assistant_messages' AND pagetype = 'leaf' ORDER BY pageno")]
    finally:
        con.close()
    page = pages[len(pages) // 2]
    with path.open("r+b") as file:
        file.seek((page - 1) * 4096)
        file.write(b"\x00" + random.Random(7).randbytes(63))  # page type 0 does not exist


DAMAGE = {
    "cut to 0 bytes": (cut_to_zero, "the file is empty (0 bytes)"),
    "WAL deleted": (delete_wal, "its file went back in time"),
    "random bytes in the WAL": (random_bytes_in_wal, "its file went back in time"),
    "damaged data page": (damaged_data_page, "SQLite reported damage: database disk image is malformed"),
}


def assert_refused(reply, problem):
    assert reply.status_code == 500, reply.text
    error = reply.json()["error"]
    assert error["type"] == "ActorStorageCorruptError"
    assert error["message"].startswith(f"session '{VICTIM}' is damaged and quarantined: ")
    assert problem in error["message"]


def run_doctor(data, *args):
    result = subprocess.run([*cli_command(), "doctor", "--data", str(data), "--json", *args], env=cli_env(None),
                            capture_output=True, text=True, timeout=120)
    return result.returncode, json.loads(result.stdout) if result.stdout.startswith("{") else result.stderr


@pytest.mark.parametrize("damage", list(DAMAGE))
async def test_damage_is_detected_quarantined_and_named_and_other_sessions_go_on(tmp_path, written, damage):
    data = copy_of(written, tmp_path)
    harm, problem = DAMAGE[damage]
    victim_file = actor_path(data, VICTIM)
    harm(victim_file)
    with server_process(data) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as http:
            assert_refused(await http.get(f"/v1/sessions/{VICTIM}/messages"), problem)
            assert_refused(await http.post(f"/v1/sessions/{VICTIM}/messages", json={"message": msg("new", "x")}),
                           problem)
            assert_refused(await http.get(f"/v1/sessions/{VICTIM}/messages:count"), problem)  # never "empty"
            assert_refused(await http.get(f"/v1/sessions/{VICTIM}/search", params={"q": "Lisbon"}), problem)
            assert (await http.get(f"/v1/sessions/{BYSTANDER}/messages:count")).json() == {"count": 10}
            reply = await http.post(f"/v1/sessions/{BYSTANDER}/messages", json={"message": msg("b10", "still here")})
            assert reply.status_code == 201
    assert not victim_file.exists()  # moved aside; nothing new was created in its place
    moved = list((data / "_quarantine" / "sessions").iterdir())
    assert len(moved) == 1 and moved[0].name.startswith(victim_file.stem + "-")
    assert victim_file.name in {p.name for p in moved[0].iterdir()} or damage == "cut to 0 bytes"
    assert "quarantined" in (tmp_path / "data-server.log").read_text()
    with server_process(data) as server:  # a restart still refuses it (the catalog remembers)
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as http:
            assert_refused(await http.get(f"/v1/sessions/{VICTIM}/messages"), problem)
            assert (await http.get(f"/v1/sessions/{BYSTANDER}/messages:count")).json() == {"count": 11}
    assert not victim_file.exists()
    status, report = run_doctor(data)
    assert status == 1
    assert [(f["name"], f["kind"]) for f in report["findings"]] == [(VICTIM, "quarantined")]
    assert problem in report["findings"][0]["problem"]


@pytest.mark.parametrize("damage", list(DAMAGE))
async def test_doctor_finds_the_damage_offline_and_quarantines_it(tmp_path, written, damage):
    data = copy_of(written, tmp_path)
    harm, problem = DAMAGE[damage]
    harm(actor_path(data, VICTIM))
    status, report = run_doctor(data)
    assert status == 1
    assert (report["checked"], report["damaged"], report["vanished"]) == (2, 1, 0)
    finding = report["findings"][0]
    assert (finding["name"], finding["kind"]) == (VICTIM, "damaged")
    expected = {"damaged data page": "database disk image is malformed",
                "random bytes in the WAL": "fails its checksum"}.get(damage, problem)
    assert expected in finding["problem"]
    status, report = run_doctor(data, "--quarantine")
    assert status == 1 and report["findings"][0]["quarantined_to"].startswith("_quarantine/sessions/")
    assert not actor_path(data, VICTIM).exists()
    status, report = run_doctor(data)
    assert status == 1 and [f["kind"] for f in report["findings"]] == ["quarantined"]
    status, report = run_doctor(data, "--release", VICTIM)
    assert status == 0 and report["released"] == 1 and report["findings"] == []
    with server_process(data) as server:  # released: the session id starts afresh
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as http:
            assert (await http.get(f"/v1/sessions/{VICTIM}/messages:count")).json() == {"count": 0}
            assert (await http.post(f"/v1/sessions/{VICTIM}/messages", json={"message": msg("new", "x")})
                    ).status_code == 201


async def test_a_vanished_file_is_never_answered_as_an_empty_session(tmp_path, written):
    data = copy_of(written, tmp_path)
    for path in actor_path(data, VICTIM).parent.glob(actor_path(data, VICTIM).name + "*"):
        os.unlink(path)
    problem = "its file vanished (the catalog saw generation 2, 3000 messages)"  # raised at the first write's mark and at the close
    with server_process(data) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as http:
            assert_refused(await http.get(f"/v1/sessions/{VICTIM}/messages:count"), problem)
            assert_refused(await http.post(f"/v1/sessions/{VICTIM}/messages", json={"message": msg("n", "x")}),
                           problem)
    assert not actor_path(data, VICTIM).exists()


async def test_a_clean_folder_passes_the_doctor_and_a_running_host_refuses_it(tmp_path, written):
    data = copy_of(written, tmp_path)
    status, report = run_doctor(data)
    assert (status, report["checked"], report["findings"]) == (0, 2, [])
    with server_process(data):
        status, stderr = run_doctor(data)
        assert status == 2 and "is in use by another process" in stderr
