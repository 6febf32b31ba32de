"""The transcript actor: one Claude Agent SDK session's transcripts per actor.

:class:`TranscriptAgent` hosts a :class:`storage.transcripts.TranscriptFile`
on its actor file: the main transcript of one ``(project_key,
session_id)`` and every sub-transcript of it (``subpath`` such as
``"subagents/agent-<id>"``), so deleting the session deletes them all at
once. The runtime routes each pair to its own actor (``runtime.server.transcripts``
names the actor after a canonical encoding of the pair); this class never
sees an id, only the keys its callers pass.

The host-level :class:`storage.transcripts.TranscriptCatalog` (``list_sessions``
and ``list_session_summaries`` per project) is the actor's ``env``; the agent
uses what ``env.for_actor(ctx.id)`` gives (:class:`TranscriptListing`), so a
placement may publish the row elsewhere (a cluster writes it to Postgres with
the actor's log entry: ``runtime.server.transcripts``). A
main-transcript append updates it in the same turn, right after the entries
committed, with nothing awaited in between: appends to one session fold into
its summary in exactly the order they were stored. Two files mean two
commits; if the process dies between them, the next append to that session
notices the missing catalog row and folds the whole stored main transcript
again, so the summary heals itself.

Methods take the SDK's ``SessionKey`` mapping (``project_key``,
``session_id``, optional ``subpath``) and are plain functions: storage is
synchronous, so a call runs to completion in one turn.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from common.errors import ConflictError, InvalidInputError
from storage.transcripts import MAIN_SUBPATH, TranscriptCatalog, TranscriptFile, parse_session_key

from .agent import Agent, AgentContext

__all__ = ["KEY_RECORD", "TranscriptAgent", "TranscriptListing", "TranscriptListings"]

#: Key-value entry holding ``[project_key, session_id]`` of the actor's transcripts.
KEY_RECORD = "transcripts.key"


class TranscriptListing(Protocol):
    """Where one transcript actor records its session's listing row (mtime in epoch ms, folded summary)."""

    def mtime(self, project_key: str, session_id: str) -> int | None: ...

    def record_append(self, project_key: str, session_id: str, entries: Sequence[Mapping[str, Any]]) -> int: ...

    def forget(self, project_key: str, session_id: str) -> bool: ...


@runtime_checkable
class TranscriptListings(Protocol):
    """A transcript namespace's ``env``: the listing each actor writes to (``for_actor(actor id)``).
    :class:`~storage.transcripts.TranscriptCatalog` is one (the host-level file, itself for every actor)."""

    def for_actor(self, actor_id: Any) -> TranscriptListing: ...


class TranscriptAgent(Agent):
    """The transcripts of one ``(project_key, session_id)`` (contract: :mod:`storage.transcripts`).

    Args:
        ctx: the runtime context.
        env: the namespace's :class:`TranscriptListings` (on a single host its
            :class:`~storage.transcripts.TranscriptCatalog`).

    Raises:
        TypeError: ``env`` is not a :class:`TranscriptListings`.

    Every method raises :class:`~common.errors.InvalidInputError` (HTTP 400)
    for a malformed key or entry, and :class:`~common.errors.ConflictError`
    (409) for a key whose pair differs from the one this actor holds (a
    routing bug, never a client mistake).
    """

    def __init__(self, ctx: AgentContext, env: TranscriptListings | TranscriptCatalog | None = None) -> None:
        super().__init__(ctx, env)
        if not isinstance(env, TranscriptListings):
            raise TypeError(f"TranscriptAgent needs a TranscriptCatalog as env, not {type(env).__name__}")
        self.catalog: TranscriptListing = env.for_actor(ctx.id)
        self.file = TranscriptFile(self.storage)
        self._pair: tuple[str, str] | None = None

    # -- the SessionStore operations ------------------------------------------------

    def append(self, key: Mapping[str, Any], entries: Sequence[Mapping[str, Any]]) -> int:
        """Store ``entries`` after those already under ``key``; how many were stored.

        An entry whose ``uuid`` is already stored under the same key is
        skipped (a retried batch stores nothing twice); an empty batch
        writes nothing. The batch is one transaction. For a main
        transcript the catalog is updated afterwards (mtime, folded
        summary), even when every entry was a duplicate.

        Raises:
            InvalidInputError: (``field="entries"``) ``entries`` is not a
                list of JSON objects; nothing is stored.
        """
        project_key, session_id, subpath = self._parse(key)
        if isinstance(entries, (str, bytes, Mapping)) or not isinstance(entries, Sequence):
            raise InvalidInputError("entries must be a list of JSON objects", field="entries")
        if not entries:
            return 0
        catalogued = subpath != MAIN_SUBPATH or self.catalog.mtime(project_key, session_id) is not None
        try:
            with self.storage.transaction():
                self._remember(project_key, session_id)
                stored = self.file.append(subpath, entries)
        except ValueError as exc:
            self._pair = None
            raise InvalidInputError(str(exc), field="entries") from None
        if subpath == MAIN_SUBPATH:
            folded = stored if catalogued else self.file.load(MAIN_SUBPATH) or []
            self.catalog.record_append(project_key, session_id, folded)
        return len(stored)

    def load(self, key: Mapping[str, Any]) -> list[dict[str, Any]] | None:
        """The entries under ``key`` in append order, or ``None`` if there are none."""
        return self.file.load(self._parse(key)[2])

    def load_json(self, key: Mapping[str, Any]) -> str | None:
        """:meth:`load` as one compact JSON array text (nothing decoded), or ``None``."""
        return self.file.load_json(self._parse(key)[2])

    def delete(self, key: Mapping[str, Any]) -> int:
        """Delete a transcript; how many entries were removed.

        A main key removes the whole session: its entries, its
        sub-transcripts and its catalog row. A subpath removes only that
        sub-transcript.
        """
        project_key, session_id, subpath = self._parse(key)
        if subpath != MAIN_SUBPATH:
            return self.file.delete(subpath)
        with self.storage.transaction():
            removed = self.file.delete(None)
            self.storage.delete(KEY_RECORD)
        self._pair = None
        self.catalog.forget(project_key, session_id)
        return removed

    def list_subkeys(self, key: Mapping[str, Any]) -> list[str]:
        """The session's sub-transcript subpaths, sorted (``[]`` if none); ``key``'s subpath is ignored."""
        self._parse({**key, "subpath": None} if isinstance(key, Mapping) else key)
        return self.file.list_subkeys()

    # -- helpers ----------------------------------------------------------------------

    def _parse(self, key: Any) -> tuple[str, str, str]:
        try:
            project_key, session_id, subpath = parse_session_key(key)
            for text in (project_key, session_id, subpath):
                text.encode("utf-8")
        except ValueError as exc:
            raise InvalidInputError(str(exc), field="key") from None
        held = self._held_pair()
        if held is not None and held != (project_key, session_id):
            raise ConflictError(
                f"this transcript actor holds project {held[0]!r} session {held[1]!r}, "
                f"not project {project_key!r} session {session_id!r}"
            )
        return project_key, session_id, subpath

    def _held_pair(self) -> tuple[str, str] | None:
        if self._pair is None:
            record = self.storage.get(KEY_RECORD)
            if record is not None:
                self._pair = (record[0], record[1])
        return self._pair

    def _remember(self, project_key: str, session_id: str) -> None:
        if self._pair is None:
            self.storage.put(KEY_RECORD, [project_key, session_id])
            self._pair = (project_key, session_id)
