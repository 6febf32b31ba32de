"""The data-lifecycle routes: delete, export and import a session; retention and backups of the host.

==========  ====================================  ======================================================
method      path                                  answer
==========  ====================================  ======================================================
DELETE      ``/v1/sessions/{id}``                 204: the session is erased (``host.erase``); 404 unknown
GET         ``/v1/sessions/{id}/export``          200 ``application/x-ndjson``: its archive
                                                  (:mod:`common.archive`, docs/export-format.md); 404 unknown
POST        ``/v1/sessions/{id}/import``          the archive as the body -> 201 ``{"imported": n}`` (messages);
                                                  400 ``ArchiveError`` naming the first bad line (nothing
                                                  stored); 409 when the session already holds data
POST        ``/v1/host:gc``                       ``{"dryRun"?: bool}`` -> ``{"idleDays", "sessions": [{id,
                                                  updatedAt}], "deleted": bool}``: sessions idle longer than
                                                  ``[retention] delete_idle_after_days`` (none when unset)
POST        ``/v1/host:backup``                   ``{"to": DIR}`` -> ``{"to", "sessions", "bytes"}``: an
                                                  online copy of every actor file and the host's own files
==========  ====================================  ======================================================

In cluster mode ``DELETE``, ``GET .../export`` and ``POST .../import`` reach the
actor's owner like any session call (the archive is checked first on the host
asked, then forwarded with its body); an import runs as one turn of the actor
there, so its writes are the actor's next changeset, durable in the cluster log
before the answer leaves; a delete there erases its working copy and its rows in Postgres
(``HostCluster.erase``), and the host the client asked then has every other live
host drop its copy. With the sessions in Postgres (``serve --postgres``)
``DELETE`` deletes the session's rows in one transaction
(``PostgresSessionAgent.erase_session``) and then the actor's file; export and
import read and write the session's rows in one transaction each
(:mod:`actors.session_archive`). ``host:gc`` works in every mode
(:mod:`runtime.server.retention`). ``host:backup`` answers 501
:class:`~common.errors.NotSupportedError` in cluster mode and with the sessions
in Postgres, naming ``pg_dump`` and ``pg_basebackup``: what those modes keep is
in Postgres, which backs itself up (docs/operations.md, "Backups").
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio
from quart import Response, request

from actors.agent import Agent
from actors.session_agent_postgres import PostgresSessionAgent
from actors.session_archive import check_for_postgres, export_lines, export_lines_postgres, import_records, import_records_postgres
from common.archive import ArchiveError, parse_archive
from common.errors import InvalidInputError, NotSupportedError, SessionNotFoundError
from common.wire import HOP_HEADER
from runtime.server import retention
from runtime.server.client_io import read_body
from runtime.server.retention import RETENTION_LOGGER
from storage.catalog import CATALOG_FILE, actor_files

if TYPE_CHECKING:
    from runtime.host.ids import ActorId
    from runtime.server.app import SessionsServer

__all__ = ["RETENTION_LOGGER", "answer_session", "handles", "install"]

logger = logging.getLogger(__name__)
#: The query argument of a host-to-host ``DELETE`` (with the hop header): drop only this host's working copy.
WORKING_COPY_ARG = "workingCopy"


def install(app: Any, server: SessionsServer) -> None:
    """Add the host routes (``/v1/host:gc``, ``/v1/host:backup``) to ``app``."""
    routes = _HostLifecycle(server)
    app.add_url_rule("/v1/host:gc", "host_gc", server.responder.answering(routes.gc), methods=["POST"])
    app.add_url_rule("/v1/host:backup", "host_backup", server.responder.answering(routes.copy_all), methods=["POST"])


def handles(method: str, segments: list[str]) -> bool:
    """``True`` when a session request (path segments after the id) is one of this module's routes."""
    return (method, tuple(segments)) in {("DELETE", ()), ("GET", ("export",)), ("POST", ("import",))}


async def answer_session(server: SessionsServer, session_id: str, method: str, segments: list[str]) -> Response:
    """Answer ``DELETE /v1/sessions/{id}``, ``GET .../export`` or ``POST .../import``."""
    actor_id = server.actor_id(session_id)
    if method == "DELETE" and server.forwarder is not None:
        return await _delete_in_cluster(server, session_id, actor_id)
    if method == "GET" and server.forwarder is not None:
        return await _export_in_cluster(server, session_id, actor_id)
    if method == "POST" and server.forwarder is not None:
        return await _import_in_cluster(server, session_id, actor_id)
    if in_postgres(server):
        if method == "DELETE":
            return await _delete_in_postgres(server, session_id, actor_id)
        if method == "GET":
            return await _export_in_postgres(server, session_id, actor_id)
        records = await _archive()
        check_for_postgres(records)  # before anything wakes: a bad value names its line, nothing is created
        return await _import(server, session_id, actor_id, records)
    if method == "POST":
        return await _import(server, session_id, actor_id, await _archive())
    if not server.namespace.exists(actor_id):
        raise SessionNotFoundError(session_id)
    if method == "DELETE":
        await server.host.erase(server.namespace, actor_id)
        return Response(b"", status=204)

    return await _export(server, session_id, actor_id)


def in_postgres(server: SessionsServer) -> bool:
    """The sessions are in Postgres (``serve --postgres``: the bound agent class is a ``PostgresSessionAgent``)."""
    return issubclass(server.namespace.agent_class, PostgresSessionAgent)


async def _export_in_postgres(server: SessionsServer, session_id: str, actor_id: ActorId) -> Response:
    """Sessions in Postgres: 404 unless the catalog has the session (nothing is woken for it), else its
    archive, read as one turn of the actor (:func:`actors.session_archive.export_lines_postgres`)."""
    namespace = server.namespace
    if not await namespace.agent_class.session_written(namespace.env, actor_id):  # type: ignore[attr-defined]
        raise SessionNotFoundError(session_id)

    async def export(agent: Agent) -> list[str]:
        return await export_lines_postgres(agent, session_id)

    return _archive_response(await server.host.run_turn(actor_id, export))


async def _export(server: SessionsServer, session_id: str, actor_id: ActorId) -> Response:
    async def export(agent: Agent) -> list[str]:
        return export_lines(agent.storage, session_id)

    return _archive_response(await server.host.run_turn(actor_id, export))


def _archive_response(lines: list[str]) -> Response:
    return Response(("\n".join(lines) + "\n").encode("utf-8"), status=200, content_type="application/x-ndjson")


@dataclass(frozen=True)
class SessionCall:
    """A session request as it is sent on to the owner: the method, the path as sent (still encoded), the
    raw query, the request's headers (lower-case names) and whether it came from another host."""

    method: str
    path: str
    query: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)
    forwarded: bool = False

    @classmethod
    def this_request(cls) -> SessionCall:
        """The request being answered."""
        path = request.scope.get("raw_path") or request.path.encode("latin-1")  # as sent, still encoded
        return cls(request.method, path.decode("latin-1"), request.query_string,
                   {name.lower(): value for name, value in request.headers.items()}, HOP_HEADER in request.headers)


async def _in_cluster(server: SessionsServer, actor_id: ActorId, here: Callable[[], Awaitable[Response]],
                      body: bytes = b"", call: SessionCall | None = None) -> Response:
    """Cluster mode: ``here()`` when this host owns ``actor_id`` (it raises ``NotOwnerError`` otherwise),
    else the owner's answer to ``call`` (default: this very request, with ``body``: the bytes the client
    sent, already read), passed on unchanged."""
    forwarder = server.forwarder
    assert forwarder is not None
    sent = call or SessionCall.this_request()

    async def remote(url: str) -> Response:
        answer = await forwarder.forward(url, sent.method, sent.path, sent.query, sent.headers, body, actor_id)
        return Response(answer.content, status=answer.status, headers=answer.headers)

    return await forwarder.answer(actor_id, sent.forwarded, here, remote)


async def _written_in_cluster(server: SessionsServer, actor_id: ActorId) -> bool:
    cluster = server.host.cluster
    assert cluster is not None
    return server.host.is_active(server.namespace, actor_id) or await cluster.written(actor_id)


async def _export_in_cluster(server: SessionsServer, session_id: str, actor_id: ActorId) -> Response:
    """Cluster mode: the owner exports the session (a turn of the actor), reached like any session call."""

    async def here() -> Response:
        if not await _written_in_cluster(server, actor_id):
            raise SessionNotFoundError(session_id)
        return await _export(server, session_id, actor_id)

    return await _in_cluster(server, actor_id, here)


async def _delete_in_cluster(server: SessionsServer, session_id: str, actor_id: ActorId) -> Response:
    """Cluster mode: ``DELETE`` of a session (:func:`erase_in_cluster`), or, from another host with
    ``?workingCopy=true``, dropping this host's working copy of an actor erased elsewhere."""
    host = server.host
    if HOP_HEADER in request.headers and request.args.get(WORKING_COPY_ARG) == "true":
        if not host.is_active(server.namespace, actor_id):  # awake here: a new session since the erase
            await host.erase(server.namespace, actor_id, working_copy_only=True)
        return Response(b"", status=204)
    return await erase_in_cluster(server, session_id, actor_id, SessionCall.this_request())


async def erase_in_cluster(server: SessionsServer, session_id: str, actor_id: ActorId, call: SessionCall) -> Response:
    """Cluster mode: the owner erases the actor (its files, then its rows in Postgres under its fence,
    :meth:`~runtime.host.cluster.HostCluster.erase`); a host that does not own it sends ``call`` (a ``DELETE``
    of the session) on to the owner like any other. Then, unless ``call`` came from another host, every other
    live host is told to drop its working copy (a former owner keeps a clean copy of the actor): ``DELETE``
    with the hop header and ``?workingCopy=true``. The answer is the owner's: 204, or 404 never written.

    Raises:
        SessionNotFoundError: (here) the session was never written, or is erased already.
        NotOwnerError, OwnerUnreachableError, StorageUnavailableError: as any forwarded call.
    """
    host = server.host
    assert server.forwarder is not None and host.cluster is not None

    async def here() -> Response:
        if not await _written_in_cluster(server, actor_id):
            raise SessionNotFoundError(session_id)
        await host.erase(server.namespace, actor_id)
        return Response(b"", status=204)

    answer = await _in_cluster(server, actor_id, here, call=call)
    if answer.status_code == 204 and not call.forwarded:
        await _drop_working_copies(server, actor_id, call)
    return answer


async def _delete_in_postgres(server: SessionsServer, session_id: str, actor_id: ActorId) -> Response:
    """Sessions in Postgres (``serve --postgres``): delete the session's rows in one transaction
    (``PostgresSessionAgent.erase_session``), then erase the actor's own file (``host.erase``)."""
    if not await erase_in_postgres(server, actor_id):
        raise SessionNotFoundError(session_id)
    return Response(b"", status=204)


async def erase_in_postgres(server: SessionsServer, actor_id: ActorId) -> bool:
    """Sessions in Postgres: delete the session's rows (one transaction), then the actor's own file;
    ``False`` (nothing changed) when neither Postgres nor this host knew the session."""
    host, namespace = server.host, server.namespace
    existed = await getattr(namespace.agent_class, "erase_session")(namespace.env, actor_id)
    if not (existed or host.knows(actor_id)):
        return False
    await host.erase(namespace, actor_id)
    return True


async def _drop_working_copies(server: SessionsServer, actor_id: ActorId, call: SessionCall) -> None:
    """Ask every other live host to drop its copy of the erased actor (a host that does not answer keeps
    its copy until it is asked again: docs/cluster.md)."""
    forwarder, cluster = server.forwarder, server.host.cluster
    assert forwarder is not None and cluster is not None
    for _host_id, url in await cluster.live_hosts():
        if url.rstrip("/") == forwarder.advertise_url:
            continue
        try:
            answer = await forwarder.forward(url.rstrip("/"), "DELETE", call.path, f"{WORKING_COPY_ARG}=true".encode(),
                                             call.headers, b"")
        except Exception as exc:  # noqa: BLE001 - a host that cannot be reached keeps its copy; logged
            logger.warning("erase of %s: host %s did not drop its working copy (%s)", actor_id.hex, url, exc)
            continue
        if answer.status != 204:
            logger.warning("erase of %s: host %s answered %d to dropping its working copy", actor_id.hex, url,
                           answer.status)


async def _import_in_cluster(server: SessionsServer, session_id: str, actor_id: ActorId) -> Response:
    """Cluster mode: the archive is checked here, then imported by the owner as one turn of the actor (a host
    that does not own it forwards the request, body and all). The turn's writes are the actor's next
    changeset, durable in the cluster log before the answer leaves, as any write is."""
    body = await read_body()
    records = _parsed(body)

    async def here() -> Response:
        return await _import(server, session_id, actor_id, records)

    return await _in_cluster(server, actor_id, here, body)


async def _archive() -> list[dict[str, Any]]:
    return _parsed(await read_body())


def _parsed(body: bytes) -> list[dict[str, Any]]:
    """The records of the archive ``body``; raises ``InvalidInputError`` (400) naming the first bad line."""
    try:
        return parse_archive(body.decode("utf-8", errors="replace").splitlines())
    except ArchiveError as exc:  # answered as the class every client knows (400), the message names the line
        raise InvalidInputError(str(exc), field="archive") from None


async def _import(server: SessionsServer, session_id: str, actor_id: ActorId,
                  records: list[dict[str, Any]]) -> Response:
    async def store(agent: Agent) -> int:
        session = getattr(agent, "session", None)
        if session is None:
            raise NotSupportedError(f"{type(agent).__name__} holds no Session: only session actors import archives")
        if isinstance(agent, PostgresSessionAgent):
            return await import_records_postgres(agent, records)
        return import_records(agent.storage, session, records)

    count = await server.host.run_turn(actor_id, store)
    await server.host.hibernate(server.namespace, actor_id)  # the next call wakes it from what was stored
    logger.info("imported %d messages into session %r", count, session_id)
    return server.responder.respond(201, {"imported": count})


#: Why ``backup`` refuses in cluster mode: the durable state is in Postgres, which backs itself up.
CLUSTER_BACKUP_REFUSAL = (
    "backup copies a data folder, and a cluster keeps its sessions in Postgres (the hosts' folders hold "
    "rebuildable working copies): back up each database of the cluster with pg_dump (a consistent copy while it "
    "runs) or pg_basebackup with WAL archiving (point-in-time recovery); one session is rewound within "
    "[cluster] pitr_days with GET /v1/sessions/{id}/bookmark and POST /v1/sessions/{id}:restore; see "
    "docs/operations.md, \"Backups\"")
#: Why ``backup`` refuses with the sessions in Postgres.
POSTGRES_BACKUP_REFUSAL = (
    "backup copies a data folder, and with serve --postgres the sessions are in Postgres (the folder holds only "
    "host-local state): back up the database with pg_dump (a consistent copy while it runs) or pg_basebackup "
    "with WAL archiving (point-in-time recovery); see docs/operations.md, \"Backups\"")


def refuse_backup(server: SessionsServer) -> None:
    """Raise :class:`NotSupportedError` (501) in cluster mode or with the sessions in Postgres, naming the
    tools that back up what those modes keep (the CLI prints its message as one line, exit status 1)."""
    if server.forwarder is not None or server.host.cluster is not None:
        raise NotSupportedError(CLUSTER_BACKUP_REFUSAL)
    if in_postgres(server):
        raise NotSupportedError(POSTGRES_BACKUP_REFUSAL)


class _HostLifecycle:
    def __init__(self, server: SessionsServer) -> None:
        self.server = server

    async def _object(self) -> dict[str, Any]:
        body = await self.server.responder.read_body()
        if body is None:
            return {}
        if not isinstance(body, dict):
            raise InvalidInputError("the body must be an object", field="body")
        return body

    async def gc(self) -> tuple[int, Any]:
        dry_run = (await self._object()).get("dryRun", False)
        if not isinstance(dry_run, bool):
            raise InvalidInputError("dryRun must be true or false", field="dryRun")
        days = getattr(self.server, "retention_days", None)
        if days is None:
            return 200, {"idleDays": None, "sessions": [], "deleted": False}
        headers = {name.lower(): value for name, value in request.headers.items()}
        found = await retention.collect(self.server, days, dry_run=dry_run, headers=headers)
        return 200, {"idleDays": days, "sessions": [{"id": idle.name, "updatedAt": retention.iso(idle.updated_ms)}
                                                     for idle in found], "deleted": not dry_run}

    async def copy_all(self) -> tuple[int, Any]:
        refuse_backup(self.server)
        target = (await self._object()).get("to")
        if not isinstance(target, str) or not target:
            raise InvalidInputError("to must be the path of a folder (absolute)", field="to")
        folder = Path(target)
        if not folder.is_absolute():
            raise InvalidInputError(f"to must be an absolute path, not {target!r}", field="to")
        data = self.server.host.data_dir.resolve()
        if folder.resolve() == data or data in folder.resolve().parents:
            raise InvalidInputError(f"{folder} is inside the data folder: a backup goes elsewhere", field="to")
        if folder.exists() and any(folder.iterdir()):
            raise InvalidInputError(f"{folder} is not empty: a backup goes into a new or empty folder", field="to")
        return 200, await backup_host(self.server, folder)


async def backup_host(server: SessionsServer, folder: Path) -> dict[str, Any]:
    """Copy the host catalog, then the alarm index, then every actor file of the bound namespaces into
    ``folder`` (a file that moves on meanwhile is newer in the copy than its catalog row, never older)."""
    host = server.host
    host.catalog.backup_to(folder / CATALOG_FILE)
    host.alarm_index.backup_to(folder / "_alarms.sqlite3")
    sessions = 0
    total = 0
    for name, namespace in sorted(host.namespaces.items()):
        for hex_id in list(actor_files(host.data_dir, name)):
            actor_id = namespace.id_from_string(hex_id)
            copied = await host.backup_actor(actor_id, folder / name / hex_id[:2] / f"{hex_id}.sqlite3")
            if copied is not None:
                sessions += 1
                total += copied
            await trio.lowlevel.checkpoint()  # let other requests run between files
    logger.info("backup to %s: %d actor files, %d bytes", folder, sessions, total)
    return {"to": str(folder), "sessions": sessions, "bytes": total}


