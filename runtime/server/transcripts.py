"""Claude Agent SDK transcripts served by an actor host (the SDK's ``SessionStore``; docs/architecture.md).

``async with open_transcripts(host) as store:`` binds
:class:`actors.transcript_agent.TranscriptAgent` as the ``"transcripts"``
namespace, opens the host-level catalog
(``<data_dir>/transcripts-catalog.sqlite3``, see
:class:`storage.transcripts.TranscriptCatalog`) and yields a
:class:`HostTranscriptStore`: the SDK's ``SessionStore`` protocol in
process. The HTTP routes (:mod:`runtime.server.transcript_routes`) call the same
object; ``ClaudeAgentOptions(session_store=store)`` works too when the
agent runs inside the host's trio process.

In a cluster (``serve --cluster``) :func:`bind_cluster_transcripts` binds the
same agent with :class:`ClusterTranscriptListings` as env: each actor
publishes its row (mtime, folded summary) to the catalog in Postgres with its
own log entry, fenced like its data (:mod:`storage.cluster.catalog`); no
host-level file is written. :class:`ClusterTranscriptStore` answers
``list_sessions`` and ``list_session_summaries`` from that catalog on any
host, and asks Postgres whether a pair was ever written before a read
(``HostCluster.written``). Key-addressed calls reach the owner through the
server (:mod:`runtime.server.transcript_routes`).

Routing: each ``(project_key, session_id)`` is one actor, its id
``id_from_name`` of :func:`transcript_actor_name` (a JSON array of the two
strings), so the same session id under two projects is two transcripts and
no key ever becomes part of a path. Reads of a pair that has no actor file
answer at once (``None`` / ``[]``) without creating one.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from actors.transcript_agent import TranscriptAgent, TranscriptListings
from common.errors import InvalidInputError
from common.transcript_summary import fold_session_summary
from runtime.host.actor_host import ActorHost
from runtime.host.ids import ActorId
from runtime.host.namespace import ActorStub, Namespace
from storage.transcripts import CATALOG_FILE_NAME, MAIN_SUBPATH, TranscriptCatalog, parse_session_key

if TYPE_CHECKING:
    from runtime.host.cluster import HostCluster
    from runtime.host.partitions import PartitionedCluster
    from storage.cluster.catalog import CatalogTracker

__all__ = [
    "TRANSCRIPTS_NAMESPACE", "ClusterTranscriptListings", "ClusterTranscriptStore", "HostTranscriptStore",
    "bind_cluster_transcripts", "open_transcripts", "transcript_actor_name",
]

#: Namespace the transcript actors are bound under (and the server looks for).
TRANSCRIPTS_NAMESPACE = "transcripts"

Entry = dict[str, Any]


def transcript_actor_name(project_key: str, session_id: str) -> str:
    """The actor name of a pair: ``["<project_key>","<session_id>"]`` as ASCII JSON.

    JSON quoting makes the encoding injective (no two pairs share a name).
    """
    return json.dumps([project_key, session_id], separators=(",", ":"))


@asynccontextmanager
async def open_transcripts(host: ActorHost, *, namespace: str = TRANSCRIPTS_NAMESPACE) -> AsyncIterator[HostTranscriptStore]:
    """Bind the transcript actors on ``host`` and open its catalog; yields the in-process store.

    The catalog is closed on exit; leave this block only once no request
    can reach the namespace any more (the host closes right after).

    Raises:
        InvalidNamespaceError: ``namespace`` is already bound.
        apsw.Error, OSError: the catalog cannot be opened.
    """
    catalog = TranscriptCatalog.open(host.data_dir / CATALOG_FILE_NAME, durability=host.durability)
    try:
        yield HostTranscriptStore(host.bind(namespace, TranscriptAgent, env=catalog))
    finally:
        catalog.close()


class HostTranscriptStore:
    """The ``SessionStore`` protocol over a host's transcript namespace.

    Methods are ``async`` and must run in the host's trio process. Each
    key-addressed call is one turn of the pair's actor; the listings read
    the catalog directly.

    Args:
        namespace: a namespace bound to :class:`TranscriptAgent` with a
            :class:`TranscriptCatalog` as env (what :func:`open_transcripts` makes).

    Raises:
        TypeError: ``namespace`` is not such a namespace.

    Every method raises :class:`~common.errors.InvalidInputError`
    (``field="key"``, ``"entries"`` or ``"project_key"``) for malformed
    input, before anything is stored.
    """

    def __init__(self, namespace: Namespace) -> None:
        if not issubclass(namespace.agent_class, TranscriptAgent) or not isinstance(namespace.env, self._env_class()):
            raise TypeError(f"{namespace!r} is not a transcript namespace (see open_transcripts)")
        self.namespace = namespace
        self.catalog: Any = namespace.env  # a TranscriptCatalog (see _env_class)

    def _env_class(self) -> type:
        """The class of ``env`` this store serves (the cluster's store overrides it)."""
        return TranscriptCatalog

    def actor_id(self, project_key: str, session_id: str) -> ActorId:
        """The id of the actor holding the pair's transcripts."""
        return self.namespace.id_from_name(transcript_actor_name(project_key, session_id))

    # -- the SessionStore protocol ----------------------------------------------------

    async def append(self, key: Mapping[str, Any], entries: Sequence[Mapping[str, Any]]) -> int:
        """Store a batch after the key's earlier entries; returns how many were stored.

        Entries whose ``uuid`` is already stored under the key are skipped;
        ``[]`` stores nothing and wakes nothing. A main-transcript batch
        updates the catalog (mtime, summary).
        """
        parsed = _parse_key(key)
        if isinstance(entries, (str, bytes, Mapping)) or not isinstance(entries, Sequence):
            raise InvalidInputError("entries must be a list of JSON objects", field="entries")
        if not entries:
            return 0
        return await self._stub(parsed).call("append", _key_dict(parsed), list(entries))

    async def load(self, key: Mapping[str, Any]) -> list[Entry] | None:
        """The key's entries in append order (deep-equal to what was appended), or ``None``."""
        parsed = _parse_key(key)
        if not await self._exists(parsed):
            return None
        return await self._stub(parsed).call("load", _key_dict(parsed))

    async def load_json(self, key: Mapping[str, Any]) -> str | None:
        """:meth:`load` as one compact JSON array text, or ``None`` (for servers: nothing decoded)."""
        parsed = _parse_key(key)
        if not await self._exists(parsed):
            return None
        return await self._stub(parsed).call("load_json", _key_dict(parsed))

    async def list_sessions(self, project_key: str) -> list[dict[str, Any]]:
        """``[{"session_id", "mtime"}]``: the project's main transcripts, mtime in epoch ms."""
        return self.catalog.list_sessions(_check_project_key(project_key))

    async def list_session_summaries(self, project_key: str) -> list[dict[str, Any]]:
        """``[{"session_id", "mtime", "data"}]``: summaries folded at append time (same clock as listing)."""
        return self.catalog.list_session_summaries(_check_project_key(project_key))

    async def delete(self, key: Mapping[str, Any]) -> int:
        """Delete a transcript (a main key: the session, its sub-transcripts and summary); entries removed."""
        parsed = _parse_key(key)
        if not await self._exists(parsed):
            if parsed[2] == MAIN_SUBPATH:
                self._forget_unwritten(parsed[0], parsed[1])
            return 0
        return await self._stub(parsed).call("delete", _key_dict(parsed))

    async def list_subkeys(self, key: Mapping[str, Any]) -> list[str]:
        """The session's sub-transcript subpaths, sorted; ``key``'s own subpath is ignored."""
        parsed = _parse_key({**key, "subpath": None} if isinstance(key, Mapping) else key)
        if not await self._exists(parsed):
            return []
        return await self._stub(parsed).call("list_subkeys", _key_dict(parsed))

    # -- helpers ------------------------------------------------------------------------

    def _stub(self, parsed: tuple[str, str, str]) -> ActorStub:
        return self.namespace.get(self.actor_id(parsed[0], parsed[1]))

    async def _exists(self, parsed: tuple[str, str, str]) -> bool:
        """Whether the pair's actor has a file (or is waking): reads of others need no actor."""
        return self.namespace.exists(self.actor_id(parsed[0], parsed[1]))

    def _forget_unwritten(self, project_key: str, session_id: str) -> None:
        """A main key deleted whose actor has no file: drop a catalog row left by a crash."""
        self.catalog.forget(project_key, session_id)


def bind_cluster_transcripts(host: ActorHost, *, namespace: str = TRANSCRIPTS_NAMESPACE) -> Namespace:
    """Cluster mode: bind the transcript actors on ``host`` (``host.cluster`` set) with their rows
    published to the cluster catalog (:class:`ClusterTranscriptListings`).

    Raises:
        InvalidNamespaceError: ``namespace`` is already bound.
        ValueError: ``host`` is not in cluster mode.
    """
    cluster = host.cluster
    if cluster is None:
        raise ValueError("bind_cluster_transcripts needs a host in cluster mode")
    return host.bind(namespace, TranscriptAgent, env=ClusterTranscriptListings(cluster))


class ClusterTranscriptListings(TranscriptListings):
    """The env of transcript actors in a cluster: each actor's row rides with its log entries.

    Args:
        cluster: the host's :class:`~runtime.host.cluster.HostCluster`.
    """

    def __init__(self, cluster: HostCluster | PartitionedCluster) -> None:
        self.cluster = cluster

    def for_actor(self, actor_id: Any) -> _PublishedRow:
        """The row of the live actor ``actor_id`` (an :class:`~runtime.host.ids.ActorId`)."""
        return _PublishedRow(self.cluster.catalog_tracker(actor_id))


class _PublishedRow:
    """One transcript actor's listing row, kept by its catalog tracker (the next log entry writes it).

    After an activation the row is unknown here (``mtime`` is ``None``): the agent then folds the
    whole stored main transcript again on its next main append, as it does after a crash."""

    def __init__(self, tracker: CatalogTracker) -> None:
        self.tracker = tracker

    def mtime(self, project_key: str, session_id: str) -> int | None:
        row = self.tracker.transcript
        return None if row is None else int(row["mtime_ms"])

    def record_append(self, project_key: str, session_id: str, entries: Sequence[Mapping[str, Any]]) -> int:
        row = self.tracker.transcript
        prev = None if row is None else {"session_id": session_id, "mtime": row["mtime_ms"],
                                         "data": json.loads(row["summary"])}
        folded = fold_session_summary(prev, session_id, entries)
        mtime = max(time.time_ns() // 1_000_000, (row["mtime_ms"] + 1) if row is not None else 0)
        self.tracker.publish(project_key, session_id, mtime, folded["data"])
        return mtime

    def forget(self, project_key: str, session_id: str) -> bool:
        self.tracker.forget()
        return True


class ClusterTranscriptStore(HostTranscriptStore):
    """:class:`HostTranscriptStore` of a cluster host (a namespace of :func:`bind_cluster_transcripts`).

    Listings read the catalog in Postgres (any host answers; after the owner died they hold its
    last durable write); a read of a pair never written anywhere answers at once.
    Listings raise :class:`~common.errors.StorageUnavailableError` when Postgres does not answer in time.
    """

    def __init__(self, namespace: Namespace) -> None:
        super().__init__(namespace)
        self.cluster: HostCluster | PartitionedCluster = namespace.env.cluster

    def _env_class(self) -> type:
        return ClusterTranscriptListings

    async def list_sessions(self, project_key: str) -> list[dict[str, Any]]:
        rows = await self.cluster.transcript_rows(_check_project_key(project_key))
        return [{"session_id": sid, "mtime": mtime} for sid, mtime, _summary in rows]

    async def list_session_summaries(self, project_key: str) -> list[dict[str, Any]]:
        rows = await self.cluster.transcript_rows(_check_project_key(project_key))
        return [{"session_id": sid, "mtime": mtime, "data": json.loads(summary)} for sid, mtime, summary in rows]

    async def _exists(self, parsed: tuple[str, str, str]) -> bool:
        actor = self.actor_id(parsed[0], parsed[1])
        return self.namespace.host.is_active(self.namespace.name, actor) or await self.cluster.written(actor)

    def _forget_unwritten(self, project_key: str, session_id: str) -> None:
        """Nothing to do: a catalog row exists only with a written log."""


def _parse_key(key: Any) -> tuple[str, str, str]:
    """``(project_key, session_id, subpath)``; strings must be encodable as UTF-8."""
    try:
        parsed = parse_session_key(key)
        for text in parsed:
            text.encode("utf-8")
    except ValueError as exc:
        raise InvalidInputError(str(exc), field="key") from None
    return parsed


def _key_dict(parsed: tuple[str, str, str]) -> dict[str, str]:
    project_key, session_id, subpath = parsed
    key = {"project_key": project_key, "session_id": session_id}
    if subpath != MAIN_SUBPATH:
        key["subpath"] = subpath
    return key


def _check_project_key(project_key: Any) -> str:
    if not isinstance(project_key, str) or not project_key:
        raise InvalidInputError(f"project_key must be a non-empty string, not {project_key!r}", field="project_key")
    try:
        project_key.encode("utf-8")
    except UnicodeError:
        raise InvalidInputError("project_key is not valid Unicode text", field="project_key") from None
    return project_key
