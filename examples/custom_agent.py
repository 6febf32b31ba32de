#!/usr/bin/env python3
"""Your own actor class, served by the host: methods, SQL tables, key-value storage, an alarm.

Serve the class in one terminal, then run the client half of this file in
another, both from the repository root::

    .venv/bin/durable-sessions serve --app examples.custom_agent:NotesAgent
    .venv/bin/python examples/custom_agent.py

(``--app`` imports ``module:Class`` from the current folder, as ``python -m``
would.) The client finds the host at ``$DURABLE_SESSIONS_URL``
(default ``http://127.0.0.1:8787``), with ``$DURABLE_SESSIONS_TOKEN`` when set.

With ``--app`` the host routes every ID under ``/v1/sessions/{id}/`` to an
instance of your class instead of the stock ``SessionAgent``: one instance
per ID, one SQLite file per ID, one call at a time. Clients reach its
public methods through ``POST /v1/sessions/{id}/rpc`` (``handle.call``) or
as RPC frames on the WebSocket ``/v1/sessions/{id}/ws``, which also
carries its broadcasts.
"""

from __future__ import annotations

import argparse
import json
import secrets
from typing import Any

import trio

from actors import Agent, AlarmInfo, InvalidInputError

### agent: The actor class
# Subclass Agent. The runtime constructs it as NotesAgent(ctx, env) when an
# ID is first called or wakes from hibernation, awaits on_start(), then
# delivers calls one at a time. Public methods defined here (no leading
# "_" or "on_") are what clients can call; they may be sync or async and
# must return JSON data. An instance may be dropped at any idle moment
# (hibernation) with no goodbye call: keep everything in storage.


class NotesAgent(Agent):
    """A shared notebook per ID, with a digest broadcast by an alarm."""

    async def on_start(self) -> None:
        ### tables: Your own tables, in the actor's own SQLite file
        # self.sql runs one statement and returns rows as dicts. on_start
        # runs at every activation, so make it idempotent.
        self.sql(
            "CREATE TABLE IF NOT EXISTS notes ("
            " id INTEGER PRIMARY KEY, author TEXT NOT NULL, body TEXT NOT NULL, created_ms INTEGER NOT NULL)"
        )

    def add_note(self, author: str, body: str) -> dict[str, Any]:
        """Store a note; returns it as ``{"id", "author", "body"}``."""
        if not isinstance(body, str) or not body.strip():
            # Errors of common.errors carry an HTTP status (400 here) and are
            # raised again, as the same class, in the client. Any other
            # exception is a bug: the client sees a 500 with a log reference.
            raise InvalidInputError("body must be a non-empty string", field="body")
        ### kv: Key-value storage beside the tables
        # self.storage.get/put/delete/list keep msgpack values in the same
        # file; a transaction makes the row and the counter one write.
        with self.storage.transaction():
            [row] = self.sql(
                "INSERT INTO notes (author, body, created_ms) VALUES (?, ?, ?) RETURNING id",
                author, body, self.ctx.now_ms(),
            )
            self.storage.put(f"count:{author}", self.storage.get(f"count:{author}", 0) + 1)
        return {"id": row["id"], "author": author, "body": body}

    def list_notes(self, limit: int = 20) -> list[dict[str, Any]]:
        """The newest notes first: ``[{"id", "author", "body"}]``."""
        return self.sql("SELECT id, author, body FROM notes ORDER BY id DESC LIMIT ?", int(limit))

    def counts(self) -> dict[str, int]:
        """Notes per author, from the key-value counters."""
        return {key.removeprefix("count:"): value for key, value in self.storage.list(prefix="count:").items()}

    def schedule_digest(self, delay_s: float) -> int:
        """Broadcast a digest ``delay_s`` seconds from now; returns the alarm time (epoch ms)."""
        ### alarm: One alarm per actor, kept in its file
        # set_alarm takes epoch milliseconds (use ctx.now_ms(), the host's
        # clock). A due alarm wakes a hibernated actor and runs alarm().
        due = self.ctx.now_ms() + round(float(delay_s) * 1000)
        self.storage.set_alarm(due)
        return due

    async def alarm(self, info: AlarmInfo) -> None:
        ### broadcast: Push to every connected WebSocket
        # The host holds the sockets even while the actor sleeps.
        total = self.sql("SELECT count(*) AS n FROM notes")[0]["n"]
        latest = self.list_notes(limit=1)
        digest = {"type": "digest", "notes": total, "latest": latest[0]["body"] if latest else None}
        self.storage.put("last_digest", digest)
        self.broadcast(json.dumps(digest))


### client: The same class seen from a client
# Run this file as a script against a host serving NotesAgent.


async def main(notebook: str) -> None:
    from runtime.client import SessionsClient

    async with SessionsClient() as client:
        notes = client.session(notebook)
        print("notebook:", notebook)

        ### rpc: Call methods over HTTP
        # handle.call(method, **kwargs) is POST /v1/sessions/{id}/rpc with
        # {"method", "params"}; the answer is the method's return value.
        print("\n== rpc over HTTP")
        print(await notes.call("add_note", author="alice", body="Ship the export fix on Tuesday."))
        print(await notes.call("add_note", author="bob", body="Rotate the staging keys."))
        print(await notes.call("add_note", author="alice", body="Write up the E1042 incident."))
        for note in await notes.call("list_notes", limit=2):
            print(f"  #{note['id']} {note['author']}: {note['body']}")
        print("counts:", await notes.call("counts"))

        ### errors: Errors come back as exceptions
        # Hooks, private names and unknown methods are refused before the
        # actor wakes; your method's InvalidInputError arrives as itself.
        print("\n== errors")
        for method, params in (("on_start", {}), ("add_note", {"author": "alice", "body": " "})):
            try:
                await notes.call(method, **params)
            except Exception as error:  # noqa: BLE001 - shown to the reader
                print(f"  {method}: {type(error).__name__}: {error}")

        ### websocket: RPC frames and broadcasts on one socket
        # Schedule the digest through the socket, then wait for the
        # broadcast the alarm sends a second later.
        print("\n== websocket")
        async with notes.websocket() as socket:
            due = await socket.call("schedule_digest", delay_s=1)
            print("  alarm set for epoch ms", due)
            with trio.fail_after(15):
                async for event in socket:
                    print("  broadcast:", event)
                    break

        ### hibernate: The notebook lives in its file
        print("\n== hibernate")
        print("  actors hibernated:", await client.hibernate(notebook))
        print("  notes after waking:", len(await notes.call("list_notes")))


def parse_args() -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notebook", help="ID of the notebook actor (default: a new notebook-<random>)")
    args = parser.parse_args()
    return args.notebook or f"notebook-{secrets.token_hex(4)}"


if __name__ == "__main__":
    trio.run(main, parse_args())
