"""Finding sessions: ``GET /v1/sessions?limit=&cursor=&prefix=`` and ``GET /v1/sessions/{id}``.

Both answer from the host catalog (:mod:`storage.catalog`), never by opening
every session's file, and add no work to an append:

* **The catalog** holds one row per actor file, written when the actor
  hibernates or closes after writing (one small commit then, none per
  call). A listed count is therefore never older than the session's last
  hibernation. Its ``updatedAt`` is the time the session's last write
  committed (the host notes it in memory at each commit), not the time it
  went to sleep; reads never change it.
* **Awake sessions** report fresher numbers: read from their open file
  between turns (:meth:`ActorHost.awake`: never inside an open
  transaction) -- their sort key from their last commit since they woke
  (:meth:`ActorHost.last_write_ms`) or their newest message (one read),
  their counts only when they are on the page asked for.
* **Files without a row** (written before a crash, or by another tool) are
  found by one rescan of the folder, at the first listing after the server
  starts: each such file is opened read-only, its facts read and recorded
  in the catalog, as ``durable-sessions doctor`` does. A file the host holds
  open (an actor starting) is left for its own close to record.

The listing is ordered by ``updatedAt`` (newest first; ties by actor id)
and paged by keyset: ``cursor`` is opaque (the key of the page's last
entry) and the next page holds what sorts below it. A session written
while a client pages moves to the top; each session appears at most once
in one walk through the pages. ``prefix`` keeps session ids starting with
it. Sessions whose file never recorded its id (actors reached only by hex
id) are not listed.

Entries are :data:`runtime.api.SESSION_SUMMARY`: ``id``, ``messages`` (stored
messages, every branch), ``compactions``, ``compactedThrough`` (the last
message the newest compaction covers), ``createdAt``/``updatedAt``, ``state``
(``ok`` or ``quarantined``, with the ``problem``), ``active`` (awake now).

Cluster mode (``serve --cluster``) reads the catalog in Postgres instead
(:mod:`runtime.server.listing_cluster`), and so do sessions in Postgres
(``serve --postgres``), from the database's own catalog
(:mod:`runtime.server.listing_postgres`).
"""

from __future__ import annotations

import base64
import binascii
import datetime
import logging
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio
from quart import Response, request
from quart_trio import QuartTrio

from common.errors import InvalidInputError, NotSupportedError, SessionNotFoundError
from common.wire import SESSIONS_PREFIX
from runtime.api import LIST_DEFAULT_LIMIT, LIST_LIMIT
from runtime.host.ids import ActorId
from runtime.server.listing_postgres import PostgresListing
from storage.catalog import CatalogEntry, last_write_ms, read_facts
from storage.context import read_config
from storage.integrity import ACTOR_NAME_KEY, ActorFacts, actor_facts, companion_files
from storage.kv import ActorStorage

if TYPE_CHECKING:
    from runtime.server.app import SessionsServer
    from runtime.server.listing_cluster import ClusterListing

__all__ = ["SessionListing", "add_listing_routes"]

logger = logging.getLogger(__name__)

#: Files the first-listing rescan reads between two checkpoints (other tasks run in between).
RESCAN_BATCH = 16
#: Looks (10 ms apart) at a new awake session inside a transaction before it is answered as unknown.
_BUSY_TRIES = 100
_HEX = re.compile(r"[0-9a-f]{64}")


@dataclass
class _Candidate:
    """One session that may be on a page: its sort key and what is known of it."""

    updated_ms: int
    actor: ActorId
    row: CatalogEntry | None
    awake: bool = False
    storage: ActorStorage | None = None  # an awake actor's open file (read between turns)

    @property
    def key(self) -> tuple[int, str]:
        return self.updated_ms, self.actor.hex


class SessionListing:
    """The listing of one server's session namespace (made by :func:`add_listing_routes`)."""

    def __init__(self, server: SessionsServer) -> None:
        self.server = server
        self._rescans: dict[str, trio.Event] = {}

    # -- what the routes answer ------------------------------------------------------------------

    def refusal(self) -> NotSupportedError | None:
        """The error listing answers with in this server's mode, or ``None``."""
        if self._in_cluster() is not None:
            return None
        return None

    async def page(self, limit: int = LIST_DEFAULT_LIMIT, cursor: str | None = None,
                   prefix: str | None = None) -> dict[str, Any]:
        """``{"sessions": [...], "cursor": str | None}``: the page of sessions after ``cursor``.

        Raises:
            InvalidInputError: (``field="cursor"``) a cursor this server did not make.
            NotSupportedError: see :meth:`refusal`.
        """
        refused = self.refusal()
        if refused is not None:
            raise refused
        if _in_postgres(self.server.namespace.agent_class):  # serve --postgres: runtime.server.listing_postgres
            return await PostgresListing(self.server).page(limit, cursor, prefix)
        below = decode_cursor(cursor)
        in_cluster = self._in_cluster()
        if in_cluster is not None:
            return await in_cluster.page(limit, below, prefix)
        namespace = self.server.namespace.name
        await self._rescan(namespace)
        catalog = self.server.host.catalog
        awake = []
        for actor, storage in self.server.host.awake(namespace):
            candidate = self._awake(actor, storage, catalog.get(namespace, actor.hex))
            if candidate is not None:
                awake.append(candidate)
        held = {candidate.actor.hex for candidate in awake}
        candidates = [
            _Candidate(row.updated_ms, ActorId(namespace, row.actor_id, row.name), row)
            for row in catalog.page(namespace, limit + 1 + len(held), below=below, prefix=prefix)
            if row.actor_id not in held
        ]
        for candidate in awake:
            name = _name(candidate)
            if name is not None and (prefix is None or name.startswith(prefix)) and \
                    (below is None or candidate.key < below):
                candidates.append(candidate)
        candidates.sort(key=lambda c: c.key, reverse=True)
        shown = candidates[:limit]
        entries = [entry for entry in map(_entry, shown) if entry is not None]
        more = len(candidates) > limit
        return {"sessions": entries, "cursor": encode_cursor(shown[-1].key) if more and shown else None}

    async def describe(self, session_id: str) -> dict[str, Any]:
        """The :data:`~runtime.api.SESSION_SUMMARY` of one session.

        Raises:
            SessionNotFoundError: the host has no session with this id.
            NotSupportedError: see :meth:`refusal`.
        """
        refused = self.refusal()
        if refused is not None:
            raise refused
        if _in_postgres(self.server.namespace.agent_class):
            return await PostgresListing(self.server).describe(session_id)
        actor = self.server.actor_id(session_id)
        in_cluster = self._in_cluster()
        if in_cluster is not None:
            return await in_cluster.describe(actor, session_id)
        namespace = actor.namespace
        host = self.server.host
        row = host.catalog.get(namespace, actor.hex)
        for _ in range(_BUSY_TRIES):
            found = [storage for awake, storage in host.awake(namespace) if awake.hex == actor.hex]
            if not found:
                break
            candidate = self._awake(actor, found[0], row)
            if candidate is not None:
                return _named_entry(candidate, session_id)
            await trio.sleep(0.01)  # a new actor inside a transaction: look again when it ends
        if row is None and self._record(actor):
            row = host.catalog.get(namespace, actor.hex)
        if row is None:
            raise SessionNotFoundError(session_id)
        return _named_entry(_Candidate(row.updated_ms, actor, row), session_id)

    # -- internals --------------------------------------------------------------------------------

    def _in_cluster(self) -> ClusterListing | None:
        """Cluster mode: the listing from the catalog in Postgres (:mod:`runtime.server.listing_cluster`)."""
        cluster = getattr(self.server.host, "cluster", None)
        if cluster is None:
            return None
        from runtime.server.listing_cluster import ClusterListing

        return ClusterListing(cluster, self.server.namespace.name)

    def _awake(self, actor: ActorId, storage: ActorStorage | None, row: CatalogEntry | None) -> _Candidate | None:
        """An awake actor as a candidate: sorted by its last write since it woke (or its newest
        message) when that is newer than its row."""
        written = self.server.host.last_write_ms(actor)
        if storage is None:  # inside a transaction: what the catalog and the commits so far saw
            if row is None:
                return None
            return _Candidate(max(row.updated_ms, written or 0), actor, row, awake=True)
        newest = last_write_ms(storage)
        if newest is None and row is None and written is None:
            newest = _modified_ms(storage)
        updated = max(row.updated_ms if row is not None else 0, newest or 0, written or 0)
        return _Candidate(updated, actor, row, awake=True, storage=storage)

    async def _rescan(self, namespace: str) -> None:
        """Once per server and namespace: record the files the catalog has no row for, or a row a crash
        left ``unclosed`` (stale counts); awake actors are left to their own close."""
        done = self._rescans.get(namespace)
        if done is not None:
            await done.wait()
            return
        done = self._rescans[namespace] = trio.Event()
        try:
            unlisted = list(self.server.host.catalog.unlisted(namespace))
            recorded = 0
            for index, hex_id in enumerate(unlisted):
                recorded += self._record(ActorId(namespace, hex_id))
                if index % RESCAN_BATCH == RESCAN_BATCH - 1:
                    await trio.lowlevel.checkpoint()
            if recorded:
                logger.info("listing: recorded %d actor files of %r the catalog had no row for, or a stale one",
                            recorded, namespace)
        finally:
            done.set()

    def _record(self, actor: ActorId) -> bool:
        """Read a sleeping actor's file and record it in the catalog; ``False`` when there is none or it
        is open (awake or starting) or unreadable (a wake of it reports the damage)."""
        host = self.server.host
        path = host.path_for(actor)
        if host.is_active(actor.namespace, actor) or not path.exists():
            return False
        facts, problem = read_facts(path)
        if facts is None:
            if problem is not None:
                logger.warning("listing: cannot read %s: %s", path, problem)
            return False
        if facts.name is None and actor.name is not None:
            facts = _renamed(facts, actor.name)
        host.catalog.record(actor.namespace, actor.hex, facts, wrote=False)
        return True


def _renamed(facts: ActorFacts, name: str) -> ActorFacts:
    return ActorFacts(name, facts.generation, facts.messages, facts.compactions, facts.compacted_through,
                      facts.first_message_ms, facts.last_message_ms)


def _name(candidate: _Candidate) -> str | None:
    if candidate.row is not None and candidate.row.name is not None:
        return candidate.row.name
    if candidate.actor.name is not None:
        return candidate.actor.name
    if candidate.storage is not None:
        return read_config(candidate.storage, "", ACTOR_NAME_KEY)
    return None


def _modified_ms(storage: ActorStorage) -> int:
    """When the file (or its WAL) was last written, in epoch milliseconds."""
    newest = 0
    for path in companion_files(storage.path)[:2]:
        try:
            newest = max(newest, os.stat(path).st_mtime_ns // 1_000_000)
        except OSError:
            pass
    return newest


def _entry(candidate: _Candidate, name: str | None = None) -> dict[str, Any] | None:
    """The summary of one candidate (its file's facts read now when it is awake)."""
    row = candidate.row
    if candidate.storage is not None:
        facts = actor_facts(candidate.storage)
        name = name or facts.name or candidate.actor.name or (row.name if row else None)
        created = min(x for x in (facts.first_message_ms, row.created_ms if row else None, candidate.updated_ms)
                      if x is not None)
        counts = (facts.messages, facts.compactions, facts.compacted_through)
        state, problem = "ok", None
    elif row is not None:
        name = name or row.name
        created = row.created_ms
        counts = (row.messages, row.compactions, row.compacted_through)
        state, problem = row.state, row.problem
    else:
        return None
    if name is None:
        return None
    return {
        "id": name, "messages": counts[0], "compactions": counts[1], "compactedThrough": counts[2],
        "createdAt": iso_ms(created), "updatedAt": iso_ms(candidate.updated_ms), "state": state,
        "problem": problem, "active": candidate.awake,
    }


def _named_entry(candidate: _Candidate, name: str) -> dict[str, Any]:
    """The summary of a candidate that is awake or has a row, under ``name``."""
    entry = _entry(candidate, name)
    if entry is None:  # neither awake nor in the catalog: not a session of this host
        raise SessionNotFoundError(name)
    return entry


def iso_ms(epoch_ms: int) -> str:
    """Epoch milliseconds as ``YYYY-MM-DDTHH:MM:SS.mmmZ`` (UTC)."""
    moment = datetime.datetime.fromtimestamp(epoch_ms // 1000, datetime.UTC)
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{epoch_ms % 1000:03d}Z"


def encode_cursor(key: tuple[int, str]) -> str:
    """The opaque cursor of the sort key ``(updated_ms, actor hex)``."""
    return base64.urlsafe_b64encode(f"{key[0]}.{key[1]}".encode("ascii")).decode("ascii").rstrip("=")


def decode_cursor(cursor: str | None) -> tuple[int, str] | None:
    """The sort key a cursor holds (``None`` for none).

    Raises:
        InvalidInputError: (``field="cursor"``) not a cursor of this listing.
    """
    if cursor is None:
        return None
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
        updated, _, hex_id = text.partition(".")
        if updated.isdigit() and _HEX.fullmatch(hex_id):
            return int(updated), hex_id
    except (binascii.Error, UnicodeDecodeError, ValueError):
        pass
    raise InvalidInputError("cursor is not a cursor of this listing (pass the cursor of the page before)",
                            field="cursor")


def _in_postgres(agent_class: type) -> bool:
    from actors.session_agent_postgres import PostgresSessionAgent

    return issubclass(agent_class, PostgresSessionAgent)


def add_listing_routes(app: QuartTrio, server: SessionsServer) -> SessionListing:
    """Register ``GET /v1/sessions`` on ``app``; the returned listing also answers ``GET /v1/sessions/{id}``
    (:func:`respond_one`, called by the session routes for a path without a method)."""
    listing = SessionListing(server)

    async def list_sessions() -> Response:
        try:
            limit = _limit(request.args.get("limit"))
            cursor = request.args.get("cursor") or None
            prefix = request.args.get("prefix") or None
            return server.responder.respond(200, await listing.page(limit, cursor, prefix))
        except Exception as exc:  # noqa: BLE001 - every error becomes an error response
            return server.responder.error(exc)

    app.add_url_rule(SESSIONS_PREFIX.rstrip("/"), "list_sessions", list_sessions, methods=["GET"])
    return listing


async def respond_one(server: SessionsServer, listing: SessionListing, session_id: str) -> Response:
    """The answer to ``GET /v1/sessions/{id}``: ``{"session": summary}`` or the error."""
    try:
        return server.responder.respond(200, {"session": await listing.describe(session_id)})
    except Exception as exc:  # noqa: BLE001 - every error becomes an error response
        return server.responder.error(exc)


def _limit(raw: str | None) -> int:
    if raw in (None, ""):
        return LIST_DEFAULT_LIMIT
    try:
        value = int(raw)
    except ValueError:
        raise InvalidInputError(f"limit must be an integer, not {raw!r}", field="limit") from None
    low, high = LIST_LIMIT["minimum"], LIST_LIMIT["maximum"]
    if not low <= value <= high:
        raise InvalidInputError(f"limit must be between {low} and {high}, not {value}", field="limit")
    return value
