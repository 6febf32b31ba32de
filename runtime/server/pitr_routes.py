"""Point-in-time restore of a session (cluster mode): bookmarks of moments, and rewinding to one.

==========  =======================================  ================================================================
method      path                                     answer
==========  =======================================  ================================================================
GET         ``/v1/sessions/{id}/bookmark?at=TIME``   200 ``{"bookmark", "at", "writtenAt", "window": {"days",
                                                     "from"}}``: the session's state at ``TIME`` (ISO 8601 with
                                                     ``Z`` or an offset; ``writtenAt``: its newest write at or
                                                     before it, ``null`` before the first; a ``TIME`` still
                                                     to come is taken as now); 404 never written;
                                                     400 ``TIME`` outside the window (the message names it)
POST        ``/v1/sessions/{id}:restore``            ``{"bookmark": "..."}`` -> 200 ``{"undo", "restoredTo",
                                                     "messages"}``: the session rewound to the bookmark's moment;
                                                     ``undo`` is the bookmark of the state just before (restore
                                                     it to undo this); 400 for a bookmark of another session,
                                                     a malformed one, or one outside the window (named); 404;
                                                     429 when the session's calls kept it busy for 30 s
==========  =======================================  ================================================================

``:restore`` is a custom method on the session's path segment (as sent: a session whose id ends
in ``:restore`` is addressed with the colon percent-encoded, ``%3Arestore``, and has no such
method). The cluster log and snapshots are the history (:mod:`storage.cluster.history`); any host
answers a bookmark (it reads Postgres), and the restore runs at the session's owner like every
session call (forwarded there, :mod:`runtime.server.forwarding`): the owner closes the actor
(its pending calls answered first), builds the file as of the bookmark from snapshot and log, and
writes it as one fenced whole-file entry, so the restore itself is in the log; the next call wakes
the session from it. Outside cluster mode both routes answer 501 ``NotSupportedError``.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

import trio
from quart import Response, request

from common.errors import ActorBusyError, InvalidInputError, NotSupportedError, SessionNotFoundError
from common.wire import RESTORE_SUFFIX, unquote_segment
from storage.cluster.history import iso_ms
from storage.schema import SCHEMA_VERSION

if TYPE_CHECKING:
    from runtime.server.app import SessionsServer

__all__ = ["answer", "handles"]

_DAY_S = 86_400
#: Seconds a restore waits for the session's pending calls before it closes the session (else 429, nothing
#: changed).
CLOSE_WAIT_S = 30.0


def handles(method: str, session_segment: str, segments: list[str]) -> bool:
    """``True`` when a session request (its raw id segment and the segments after it) is one of this
    module's routes."""
    if method == "GET":
        return segments == ["bookmark"]
    return method == "POST" and not segments and session_segment.endswith(RESTORE_SUFFIX)


async def answer(server: SessionsServer, session_segment: str, segments: list[str]) -> Response:
    """Answer ``GET .../bookmark`` or ``POST ...:restore`` (see the module docstring).

    Raises:
        NotSupportedError: not in cluster mode (501).
        InvalidInputError, SessionNotFoundError, and what the cluster raises (see the table).
    """
    cluster = server.host.cluster
    if server.forwarder is None or cluster is None:
        raise NotSupportedError("point-in-time restore needs cluster mode (serve --cluster): the cluster's log "
                                "and snapshots are the history it restores from")
    if segments:
        return await _bookmark(server, unquote_segment(session_segment, "session_id"))
    return await _restore(server, unquote_segment(session_segment[:-len(RESTORE_SUFFIX)], "session_id"))


def _window(server: SessionsServer, now_ms: int) -> dict[str, Any]:
    window_s = server.host.cluster.pitr_window_s  # type: ignore[union-attr]  # cluster mode (checked)
    return {"days": window_s / _DAY_S, "from": iso_ms(now_ms - round(window_s * 1000))}


async def _bookmark(server: SessionsServer, session_id: str) -> Response:
    actor_id = server.actor_id(session_id)
    at_ms = parse_time(request.args.get("at"))
    found = await server.host.cluster.bookmark(actor_id, at_ms)  # type: ignore[union-attr]
    if found is None:
        raise SessionNotFoundError(session_id)
    token, bookmark, now_ms = found
    return server.responder.respond(200, {
        "bookmark": token, "at": iso_ms(bookmark.at_ms), "writtenAt": iso_ms(bookmark.entry_ms) if bookmark.seq else None,
        "window": _window(server, now_ms)})


async def _restore(server: SessionsServer, session_id: str) -> Response:
    host = server.host
    cluster = host.cluster
    assert cluster is not None
    actor_id = server.actor_id(session_id)

    async def local() -> tuple[int, Any]:
        body = await server.responder.read_body()
        if not isinstance(body, dict) or "bookmark" not in body:
            raise InvalidInputError('the body must be {"bookmark": "..."} (from GET .../bookmark?at=...)',
                                    field="bookmark")
        if not (host.is_active(server.namespace, actor_id) or await cluster.written(actor_id)):
            raise SessionNotFoundError(session_id)
        with trio.move_on_after(CLOSE_WAIT_S):  # its pending calls answered, its file closed
            await host.hibernate(server.namespace, actor_id)
        if host.is_active(server.namespace, actor_id):  # a steady stream of calls kept it busy: nothing changed
            raise ActorBusyError(f"{actor_id.namespace}/{actor_id.hex}", CLOSE_WAIT_S)
        outcome = await cluster.restore(
            actor_id, body["bookmark"], path=host.path_for(actor_id), durability=host.durability,
            template=host.data_dir / "_template" / f"v{SCHEMA_VERSION}.sqlite3")
        return 200, {"undo": outcome.undo, "restoredTo": iso_ms(outcome.restored_at_ms), "messages": outcome.messages}

    return await server.in_cluster(actor_id, local)


def parse_time(text: str | None) -> int:
    """An ISO 8601 time with ``Z`` or an offset (``2026-12-02T07:13:18Z``) as epoch milliseconds.

    Raises:
        InvalidInputError: (``field="at"``) missing, not ISO 8601, or without a time zone.
    """
    if not text:
        raise InvalidInputError("at is required: an ISO 8601 time such as 2026-12-02T07:13:18Z", field="at")
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInputError(f"at must be an ISO 8601 time such as 2026-12-02T07:13:18Z, not {text!r}",
                                field="at") from None
    if moment.tzinfo is None:
        raise InvalidInputError(f"at must name its time zone (Z or an offset such as +02:00): {text!r}", field="at")
    return round(moment.timestamp() * 1000)
