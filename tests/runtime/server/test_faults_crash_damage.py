"""Damage after a crash is never silent: a host killed with ``kill -9`` before a session ever
hibernated, then the session's ``-wal`` deleted or its files removed.

The host marks an actor in its catalog at the first write after it wakes (and again after each
checkpoint of its WAL), before the reply leaves; so a file that lost its WAL or vanished after a
crash is caught as after a clean stop. A crash that damaged nothing costs nothing: the session
answers every acknowledged message, and the first listing after the restart counts them right.
"""

from __future__ import annotations

import os
import shutil
from functools import partial

import httpx
import pytest
import trio

from tests.runtime.server.test_faults_damage import (BYSTANDER, MESSAGES, VICTIM, actor_path, assert_refused,
                                                     msg, run_doctor, write_sessions)
from tests.support.processes import server_process

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def crashed(tmp_path_factory):
    data = tmp_path_factory.mktemp("crashed") / "data"
    trio.run(partial(write_sessions, crash=True), data)
    return data


def copy_of(crashed, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(crashed, data)
    return data


async def test_a_crash_that_damaged_nothing_serves_every_acknowledged_message_and_lists_it(tmp_path, crashed):
    data = copy_of(crashed, tmp_path)
    assert actor_path(data, VICTIM).with_name(actor_path(data, VICTIM).name + "-wal").stat().st_size > 0
    with server_process(data) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as http:
            listed = (await http.get("/v1/sessions")).json()["sessions"]
            assert {e["id"]: e["messages"] for e in listed} == {VICTIM: MESSAGES, BYSTANDER: 10}
            assert (await http.get(f"/v1/sessions/{VICTIM}/messages:count")).json() == {"count": MESSAGES}
            reply = await http.post(f"/v1/sessions/{VICTIM}/messages", json={"message": msg("after", "x")})
            assert reply.status_code == 201


async def test_a_wal_deleted_after_a_crash_is_caught(tmp_path, crashed):
    data = copy_of(crashed, tmp_path)
    victim = actor_path(data, VICTIM)
    wal = victim.with_name(victim.name + "-wal")
    assert wal.stat().st_size > 100_000  # the last commits are only there
    wal.unlink()
    with server_process(data) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as http:
            assert_refused(await http.get(f"/v1/sessions/{VICTIM}/messages:count"), "its file went back in time")
            assert_refused(await http.post(f"/v1/sessions/{VICTIM}/messages", json={"message": msg("n", "x")}),
                           "its file went back in time")
            assert (await http.get(f"/v1/sessions/{BYSTANDER}/messages:count")).json() == {"count": 10}


async def test_files_removed_after_a_crash_are_never_answered_as_an_empty_session(tmp_path, crashed):
    data = copy_of(crashed, tmp_path)
    victim = actor_path(data, VICTIM)
    for path in victim.parent.glob(victim.name + "*"):
        os.unlink(path)
    with server_process(data) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as http:
            assert_refused(await http.get(f"/v1/sessions/{VICTIM}/messages:count"), "its file vanished")
            assert_refused(await http.post(f"/v1/sessions/{VICTIM}/messages", json={"message": msg("n", "x")}),
                           "its file vanished")


@pytest.mark.parametrize("harm", ["WAL deleted", "files removed"])
async def test_doctor_names_a_session_damaged_after_a_crash(tmp_path, crashed, harm):
    data = copy_of(crashed, tmp_path)
    victim = actor_path(data, VICTIM)
    for path in victim.parent.glob(victim.name + ("-wal" if harm == "WAL deleted" else "*")):
        os.unlink(path)
    status, report = run_doctor(data)
    assert status == 1
    assert [finding["name"] for finding in report["findings"]] == [VICTIM]
    assert ("went back in time" if harm == "WAL deleted" else "vanished") in str(report["findings"][0])
