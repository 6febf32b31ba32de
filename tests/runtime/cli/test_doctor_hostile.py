"""``durable-sessions doctor`` on hostile files: a view over an endless recursive query where a table
should be, a trigger, and a file whose checks run past the time budget (issue 26: doctor hung)."""

from __future__ import annotations

import json
import subprocess

import apsw
import pytest

from runtime.host.ids import id_from_name
from storage.integrity import InspectionTimeout, examine, open_for_inspection
from tests.support.processes import cli_command, cli_env

#: A query that never ends (SQLite counts forever).
ENDLESS = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT n FROM r"


def actor_file(data, session_id="evil"):
    actor = id_from_name("sessions", session_id)
    path = data / "sessions" / actor.shard / f"{actor.hex}.sqlite3"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def make(path, *statements):
    con = apsw.Connection(str(path))
    for statement in statements:
        con.execute(statement)
    con.close()


def run_doctor(data, *args):
    done = subprocess.run([*cli_command(), "doctor", "--data", str(data), "--json", *args], env=cli_env(None),
                          capture_output=True, text=True, timeout=300)
    return done.returncode, json.loads(done.stdout) if done.stdout.startswith("{") else done.stderr


def test_a_view_over_an_endless_query_is_named_not_run(tmp_path):
    data = tmp_path / "data"
    make(actor_file(data),
         f"CREATE VIEW assistant_messages(created_at) AS {ENDLESS}",
         "CREATE TABLE assistant_compactions(seq INTEGER PRIMARY KEY, to_message_id TEXT)")
    status, report = run_doctor(data)
    assert status == 1, report
    [finding] = report["findings"]
    assert finding["kind"] == "damaged"
    assert finding["problem"] == "assistant_messages is a view, not a table: not an actor file this program wrote"


def test_views_and_triggers_of_an_inspected_file_never_run(tmp_path):
    path = tmp_path / "x.sqlite3"
    make(path,
         "CREATE TABLE assistant_messages(seq INTEGER PRIMARY KEY, created_at TEXT)",
         "CREATE TABLE assistant_compactions(seq INTEGER PRIMARY KEY, to_message_id TEXT)",
         "CREATE TABLE assistant_config(session_id TEXT, key TEXT, value TEXT)",
         "CREATE TABLE hits(n INTEGER)",
         f"CREATE VIEW endless(n) AS {ENDLESS}",
         "CREATE TRIGGER t AFTER INSERT ON assistant_messages BEGIN INSERT INTO hits VALUES (1); END")
    problem, facts = examine(path, budget_s=60)
    assert problem is None and facts is not None and facts.messages == 0
    storage = open_for_inspection(path)
    try:
        with pytest.raises(apsw.SQLError):  # views are off: an error at once, nothing run
            storage.connection.execute("SELECT count(*) FROM endless").fetchall()
        storage.connection.execute("INSERT INTO assistant_messages(created_at) VALUES ('x')")
        assert storage.connection.execute("SELECT count(*) FROM hits").fetchall() == [(0,)]  # the trigger is off
    finally:
        storage.close()


def test_a_file_whose_checks_run_past_the_budget_is_reported_unchecked(tmp_path):
    """A budget of 0 s: the first look at the clock interrupts the checks (no dependence on speed)."""
    data = tmp_path / "data"
    make(actor_file(data),
         "CREATE TABLE assistant_messages(seq INTEGER PRIMARY KEY, created_at TEXT, body TEXT)",
         "CREATE INDEX by_body ON assistant_messages(body)",
         "CREATE TABLE assistant_compactions(seq INTEGER PRIMARY KEY, to_message_id TEXT)",
         "CREATE TABLE assistant_config(session_id TEXT, key TEXT, value TEXT)",
         "INSERT INTO assistant_messages(created_at, body) WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL "
         "SELECT n + 1 FROM r LIMIT 20000) SELECT 'x', hex(randomblob(20)) FROM r")
    with pytest.raises(InspectionTimeout, match="budget of 0 s"):
        examine(actor_file(data), budget_s=0)
    assert examine(actor_file(data), budget_s=600)[0] is None  # sound, given the time
    status, report = run_doctor(data, "--time-budget", "0", "--quarantine")
    assert status == 1, report
    [finding] = report["findings"]
    assert finding["kind"] == "unchecked" and finding["quarantined_to"] is None  # never quarantined for it
    assert report["unchecked"] == 1
    assert actor_file(data).exists()
