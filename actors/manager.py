"""SessionManager: many named sessions in one actor file (spec: SessionManager; docs/behaviours.md §13).

A manager keeps a registry row per session (``assistant_sessions``, see
:mod:`storage.registry`) and hands out one cached :class:`~actors.session.Session`
per session id. It runs on an actor's SQLite file or, the same way, on a
:class:`~storage.postgres.PostgresStorage` (registry, messages, block rows
and search entries in Postgres; :mod:`actors.manager_registry`). The builders declare one frozen
:class:`~actors.session_spec.SessionSpec` (:attr:`SessionManager.spec`:
context blocks, the cached prompt, compaction) and every session the
manager opens is built from that value: blocks without a provider are
stored per session (``<label>_<session id>``), an explicit provider object
is shared by all sessions, as in the original.

Differences from the original, on purpose (docs/deviations.md):

* message ids are unique per session, so two sessions may both hold ``m1``
  (#1);
* :meth:`SessionManager.list` breaks ``updated_at`` ties by the order of the
  writes, the later first, so the same calls always list the same way (#2);
* :meth:`SessionManager.append_all` without a parent continues from the
  latest leaf (#7), and stores its batch in one transaction, all or nothing,
  with one status broadcast (:meth:`Session.append_messages`);
* :meth:`SessionManager.search` uses the one query syntax of
  :mod:`storage.fts`, looks only at stored messages of registered
  sessions and returns each hit's ``sessionId`` and real ``createdAt``
  (#9, #10, #11);
* :meth:`SessionManager.delete` removes every row of the session: messages,
  search rows, compactions, context-block rows, the cached prompt and the
  loaded-skill state (#15);
* :meth:`SessionManager.delete` broadcasts the ``idle`` the original's
  ``clearMessages`` sends (estimate of the refreshed prompt, no history),
  after its one transaction; :meth:`SessionManager.fork` and
  :meth:`SessionManager.compact_and_split` send one ``idle`` for the new
  session after theirs, then run one auto-compaction check (the original
  appends, and broadcasts, message by message);
* a session id with no registry row is an error
  (:class:`~common.errors.NotFoundError`, HTTP 404) for every method but
  :meth:`SessionManager.get`, which returns ``None``; the original quietly
  wrote rows for such ids;
* :meth:`SessionManager.fork` of a message the session does not hold raises
  :class:`~common.errors.MessageNotFoundError` instead of creating an empty
  fork; fork and compact-and-split write all their rows in one transaction.

``updated_at`` follows every write that changes a managed session, whether
it comes through the manager or through the :class:`Session` that
:meth:`SessionManager.get_session` returns: a stored (not duplicate)
message, an update, a delete, a clear, a compaction, a rename, usage
(the Session's ``on_history_changed`` observer reports its writes).
"""

from __future__ import annotations

import builtins
import copy
import math
import types
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from common.errors import ConflictError, InvalidInputError, MessageNotFoundError, NotFoundError
from storage.fts import parse_query
from storage.tree.rows import to_iso8601

from .context import mark_block_source_changed
from .manager_registry import Registry, registry_for
from .session import LATEST_LEAF, Session, target_parts
from .session_messages import search_limit
from .session_spec import SessionSpec, check_text
from .tools import Tool

if TYPE_CHECKING:
    from .embedding import Embedder
    from .session_embeddings import ManagerVectors

__all__ = [
    "END_REASON_COMPACTION",
    "HISTORY_DESCRIPTION",
    "SESSION_SEARCH_DESCRIPTION",
    "SESSION_SEARCH_LIMIT",
    "SPLIT_PREFIX",
    "SessionManager",
]

Message = dict[str, Any]
Row = dict[str, Any]

#: Description of the block added by :meth:`SessionManager.with_searchable_history`.
HISTORY_DESCRIPTION = "Cross-session conversation history"
#: What the model is told about the ``session_search`` tool (docs/behaviours.md §6).
SESSION_SEARCH_DESCRIPTION = "Search past conversations for relevant context. Searches across all sessions."
#: Most hits ``session_search`` and the history block return.
SESSION_SEARCH_LIMIT = 10
#: Start of the summary message :meth:`SessionManager.compact_and_split` writes.
SPLIT_PREFIX = "[Context from previous session]\n\n"
#: ``end_reason`` of a session closed by :meth:`SessionManager.compact_and_split`.
END_REASON_COMPACTION = "compaction"

_SESSION_SEARCH_SCHEMA = {
    "type": "object",
    "properties": {"query": {"type": "string", "description": "Search query"}},
    "required": ["query"],
}


class _HistorySearchProvider:
    """The read-only searchable block of :meth:`SessionManager.with_searchable_history`."""

    def __init__(self, manager: SessionManager) -> None:
        self._manager = manager

    async def get(self) -> str | None:
        """``"<n> sessions available for search."`` (``session`` for 1), ``None`` with no sessions."""
        count = await self._manager.registry.count_sessions()
        if not count:
            return None
        return f"{count} session{'' if count == 1 else 's'} available for search."

    async def search(self, query: str) -> str | None:
        """The best 10 hits as ``[<role>] <content>`` joined by ``\\n---\\n``; ``None`` for none."""
        return _format_hits(await self._manager.search(query, limit=SESSION_SEARCH_LIMIT)) or None


def _format_hits(hits: list[dict[str, str]]) -> str:
    return "\n---\n".join(f"[{hit['role']}] {hit['content']}" for hit in hits)


class _ClassOrInstanceMethod:
    """One attribute name, two methods: ``on_class(cls, ...)`` when read from
    the class, ``on_instance(self, ...)`` when read from an instance."""

    def __init__(self, on_class: Callable[..., Any], on_instance: Callable[..., Any]) -> None:
        self._on_class = on_class
        self._on_instance = on_instance
        self.__doc__ = f"{on_class.__doc__}\n\n{on_instance.__doc__}"

    def __get__(self, instance: Any, owner: type | None = None) -> Callable[..., Any]:
        if instance is None:
            return types.MethodType(self._on_class, owner)
        return types.MethodType(self._on_instance, instance)


class SessionManager:
    """A registry of named sessions sharing one actor's SQLite file (or one Postgres database).

    Build with :meth:`create` and the chainable builders; builders touch no
    SQL and must all come before the first session is opened (after that
    they raise :class:`~common.errors.ConflictError`, since open sessions
    would not see the change). Every method that reads or writes is
    ``async``; :meth:`tools` is plain.

    Registry rows are dicts with the spec's ``assistant_sessions`` columns
    (:data:`storage.registry.SESSION_COLUMNS`); ``created_at`` and
    ``updated_at`` are UTC ``YYYY-MM-DD HH:MM:SS.SSS``.
    """

    def __init__(self, storage: Any, *, target: Any = None) -> None:
        self._storage = storage
        self._registry = registry_for(storage)
        self._target = storage if target is None else target
        self._history_provider = _HistorySearchProvider(self)
        self._spec = SessionSpec()
        self._sessions: dict[str, Session] = {}
        self._opened = False
        self._embedder: Any = None
        self._on_pending: Callable[[], object] | None = None
        self._vectors: ManagerVectors | None = None

    @staticmethod  # bound to the class by _ClassOrInstanceMethod, not by Python
    def _create_manager(cls: type[SessionManager], target: Any) -> SessionManager:
        """``SessionManager.create(target)``: a manager on ``target``'s storage.

        Args:
            target: a :class:`storage.SqlStorage` or a
                :class:`storage.PostgresStorage`, or an object (an Agent)
                whose ``.storage`` is one. A callable ``target.broadcast``
                becomes every session's broadcaster, as with :meth:`Session.create`.

        Raises:
            TypeError: no such storage can be found on ``target``.
        """
        storage, _ = target_parts(target, "SessionManager.create()")
        return cls(storage, target=target)

    @property
    def storage(self) -> Any:
        """The :class:`SqlStorage` (or :class:`~storage.postgres.PostgresStorage`) holding every managed session."""
        return self._storage

    @property
    def registry(self) -> Registry:
        """The registry rows this manager keeps (:mod:`actors.manager_registry`)."""
        return self._registry

    @property
    def spec(self) -> SessionSpec:
        """What every managed session is configured with, as one frozen value
        (the builders below each replace it)."""
        return self._spec

    # -- builders ------------------------------------------------------------------

    def _declare(self, method: str, change: Callable[[SessionSpec], SessionSpec]) -> SessionManager:
        """Replace :attr:`spec` by ``change(spec)`` (which checks the arguments), before any session opens."""
        if self._opened:
            raise ConflictError(f"{method}() configures every managed session and must come before the first one opens")
        self._spec = change(self._spec)
        return self

    def with_context(
        self, label: str, *, description: str | None = None, max_tokens: int | None = None, provider: Any = None
    ) -> SessionManager:
        """Give every session the block ``label`` (see :meth:`Session.with_context`). Returns ``self``.

        Without ``provider`` each session stores the block in its own row
        ``<label>_<session id>``; a ``provider`` object is shared by all.

        Raises:
            InvalidInputError: as :meth:`Session.with_context` (checked now).
            ConflictError: ``Block "<label>" already exists``, or a session is open.
        """
        return self._declare(
            "with_context",
            lambda spec: spec.with_context(label, description=description, max_tokens=max_tokens, provider=provider),
        )

    def with_cached_prompt(self, provider: Any = None) -> SessionManager:
        """Keep every session's frozen prompt (by default in ``_system_prompt_<session id>``). Returns ``self``.

        Raises:
            InvalidInputError: ``provider`` lacks ``get``/``set``.
            ConflictError: a session is open.
        """
        return self._declare("with_cached_prompt", lambda spec: spec.with_cached_prompt(provider))

    def on_compaction(self, fn: Callable[..., Any]) -> SessionManager:
        """Every session compacts with ``fn`` (see :meth:`Session.on_compaction`). Returns ``self``.

        Raises:
            InvalidInputError: ``fn`` is not callable.
            ConflictError: a session is open.
        """
        return self._declare("on_compaction", lambda spec: spec.on_compaction(fn))

    def compact_after(self, threshold: float, *, token_counter: Callable[..., Any] | None = None) -> SessionManager:
        """Every session compacts itself once its estimate exceeds ``threshold`` tokens. Returns ``self``.

        ``token_counter`` replaces the estimate as in :meth:`Session.compact_after`.

        Raises:
            InvalidInputError: ``threshold`` is not a finite number >= 0, or
                ``token_counter`` is not callable.
            ConflictError: a session is open.
        """
        return self._declare("compact_after", lambda spec: spec.compact_after(threshold, token_counter=token_counter))

    def on_compaction_error(self, handler: Callable[..., Any]) -> SessionManager:
        """Automatic-compaction errors of every session go to ``handler``. Returns ``self``.

        Raises:
            InvalidInputError: ``handler`` is not callable.
            ConflictError: a session is open.
        """
        return self._declare("on_compaction_error", lambda spec: spec.on_compaction_error(handler))

    def with_searchable_history(self, label: str) -> SessionManager:
        """Give every session, after its other blocks, a read-only searchable block
        ``label`` (``Cross-session conversation history``) over all managed sessions.

        Its content is ``"<n> sessions available for search."`` (``1 session``
        for one; empty with none); ``search_context`` on it returns the best
        10 hits of :meth:`search` as ``[<role>] <content>`` joined by
        ``\\n---\\n``. Returns ``self``.

        Raises:
            InvalidInputError: ``label`` is not a non-empty string.
            ConflictError: the label is already used, a history block was
                already added, or a session is open.
        """
        provider = self._history_provider
        return self._declare(
            "with_searchable_history",
            lambda spec: spec.with_history_block(label, description=HISTORY_DESCRIPTION, provider=provider),
        )

    def with_embedder(self, embedder: Embedder, *, on_pending: Callable[[], object] | None = None) -> SessionManager:
        """Switch on semantic and hybrid :meth:`search` (and each session's) with ``embedder``.
        Returns ``self``.

        Every session the manager opens gets :meth:`Session.with_embedder`: a
        message stored with text is pending until its vector is stored
        (durably, as that method says), and :meth:`embed_pending` (the owner
        runs it after the write, off the write path: the manager actor's
        alarm) computes the vectors. ``on_pending()`` is called after each
        committed write that stored or updated messages.

        Raises:
            ConflictError: a session is open.
        """
        from .session_embeddings import ManagerVectors

        if self._opened:
            raise ConflictError("with_embedder() configures every managed session and must come before the first one opens")
        self._embedder = embedder
        self._on_pending = on_pending
        self._vectors = ManagerVectors(self._storage, embedder)
        return self

    @property
    def embedder(self) -> Embedder | None:
        """The embedder of :meth:`with_embedder`, or ``None``."""
        return self._embedder

    async def has_pending(self) -> bool:
        """Whether any session holds messages waiting for a vector (``False`` without an embedder)."""
        return self._vectors is not None and bool(await self._vectors.sessions_pending(1))

    async def embed_pending(self) -> int:
        """Embed the messages of every session waiting for a vector, a session at a time; returns how
        many vectors were stored (0 without an embedder).

        Raises:
            actors.embedding.EmbedderError: the model or the endpoint failed (the markers stay).
        """
        if self._vectors is None:
            return 0
        stored = 0
        while True:
            pending = [sid for sid in await self._vectors.sessions_pending(16) if sid]
            done = 0
            for session_id in pending:
                done += await self._open(session_id).embed_pending()
            stored += done
            if not pending or not done:
                return stored

    # -- sessions ---------------------------------------------------------------------

    def _open(self, session_id: str) -> Session:
        """The cached Session of a registered ``session_id``, built from :attr:`spec` on first use."""
        session = self._sessions.get(session_id)
        if session is None:
            self._opened = True
            _, broadcaster = target_parts(self._target, "SessionManager")
            session = Session(
                self._storage,
                spec=self._spec,
                session_id=session_id,
                broadcaster=broadcaster,
                on_history_changed=self._touch,
            )
            if self._embedder is not None:
                session.with_embedder(self._embedder, on_pending=self._on_pending)
            self._sessions[session_id] = session
        return session

    async def _touch(self, session_id: str) -> None:
        """A managed session's stored history changed: touch its row's ``updated_at``."""
        await self._registry.touch_session(session_id)

    async def _require(self, session_id: Any) -> str:
        session_id = _check_text(session_id, "session_id")
        if not await self._registry.session_exists(session_id):
            self._sessions.pop(session_id, None)
            raise NotFoundError(f"session {session_id!r} not found", kind="session", key=session_id)
        return session_id

    async def get_session(self, session_id: str) -> Session:
        """The :class:`Session` of ``session_id``, configured with the manager's
        settings; the same object on every call until :meth:`delete`.

        Raises:
            NotFoundError: ``session_id`` is not registered.
            InvalidInputError: ``session_id`` is not a string.
        """
        return self._open(await self._require(session_id))

    # -- lifecycle ------------------------------------------------------------------------

    async def _create_session(
        self,
        name: str,
        *,
        parent_session_id: str | None = None,
        model: str | None = None,
        source: str | None = None,
    ) -> Row:
        """``await manager.create(name)``: register a new session with a random UUID id; returns its row.

        The row: ``{"id", "name", "parent_session_id", "model", "source",
        "input_tokens": 0, "output_tokens": 0, "estimated_cost": 0.0,
        "end_reason": None, "created_at", "updated_at"}`` (both times equal).
        ``parent_session_id`` is recorded as given, not checked.

        Raises:
            InvalidInputError: ``name`` is not a string, or an option is
                neither a string nor ``None``.
        """
        name = _check_text(name, "name")
        parent_session_id = _check_optional_text(parent_session_id, "parent_session_id")
        model = _check_optional_text(model, "model")
        source = _check_optional_text(source, "source")
        row = await self._registry.insert_session(
            str(uuid.uuid4()), name, parent_session_id=parent_session_id, model=model, source=source
        )
        self._session_count_changed()
        return row

    #: On the class, ``SessionManager.create(target)`` builds a manager; on a
    #: manager, ``await manager.create(name, ...)`` registers a session (the
    #: spec gives both the same name).
    create = _ClassOrInstanceMethod(_create_manager, _create_session)

    async def get(self, session_id: str) -> Row | None:
        """The row of ``session_id``, or ``None`` when it is not registered."""
        return await self._registry.get_session(_check_text(session_id, "session_id"))

    async def list(self) -> list[Row]:
        """Every row, most recently updated first; within one millisecond the
        later write first (creation counts as a write)."""
        return await self._registry.list_sessions()

    async def rename(self, session_id: str, name: str) -> Row:
        """Set the name (touches ``updated_at``); returns the new row.

        Raises:
            NotFoundError: unknown ``session_id``.
            InvalidInputError: ``name`` is not a string.
        """
        name = _check_text(name, "name")
        return self._found(await self._registry.rename_session(await self._require(session_id), name), session_id)

    async def delete(self, session_id: str) -> None:
        """Delete the session and every row it owns, in one transaction.

        Gone afterwards: its messages and their search rows, its compactions,
        its ``assistant_config`` rows (loaded skills; on Postgres the active leaf), its
        context-block rows (``<label>_<session id>``, the cached prompt
        ``_system_prompt_<session id>``) and its registry row. Shared rows
        (explicit providers, search entries of a block label) stay.

        Broadcasts (docs/behaviours.md §13): the original clears the session
        first, so it sends ``idle`` with the estimate of an empty history and
        a prompt rendered again from the blocks. With a broadcaster the
        prompt is refreshed before the delete, as there, and the same
        ``idle`` is sent once the rows are gone (the refresh's cached-prompt
        row goes with them). Without one nothing is rendered.

        Raises:
            NotFoundError: unknown ``session_id``.
            Exception: with a broadcaster, whatever a block provider raises
                during the refresh; nothing was deleted.
        """
        session_id = await self._require(session_id)
        session = self._open(session_id)
        if session.broadcaster is not None:
            await session.refresh_system_prompt()
        self._sessions.pop(session_id, None)
        await self._registry.delete_session(session_id)
        self._session_count_changed()
        await session.broadcast_status()

    # -- messages -----------------------------------------------------------------------------

    async def append(self, session_id: str, message: Message, parent_id: str | None | object = LATEST_LEAF) -> str:
        """Append with :meth:`Session.append_message` rules; returns ``message["id"]``.

        Raises:
            NotFoundError: unknown ``session_id``.
            InvalidMessageError, InvalidInputError: as :meth:`Session.append_message`.
        """
        session = await self.get_session(session_id)
        await session.append_message(message, parent_id)
        return message["id"]

    async def upsert(self, session_id: str, message: Message, parent_id: str | None | object = LATEST_LEAF) -> str:
        """Update the message if the session holds its id, else append it; returns its id.

        Raises: as :meth:`append` (and :meth:`Session.update_message`).
        """
        session = await self.get_session(session_id)
        if isinstance(message, Mapping) and isinstance(message.get("id"), str):
            if await session.get_message(message["id"]) is not None:
                await session.update_message(message)
                return message["id"]
        await session.append_message(message, parent_id)
        return message["id"]

    async def append_all(
        self, session_id: str, messages: Iterable[Message], parent_id: str | None | object = LATEST_LEAF
    ) -> str | None:
        """Append ``messages`` in order, each the child of the one before, in one
        transaction (:meth:`Session.append_messages`).

        The first one's parent is ``parent_id``: by default the latest leaf,
        so a batch continues the conversation (docs/deviations.md #7); ``None`` starts
        a new root. A message already stored is skipped and the chain goes
        on from it. All or nothing: a bad message stores none of them.
        ``updated_at`` is touched once, when something was stored.

        Returns:
            The last message's id, or ``None`` for an empty batch.

        Raises:
            NotFoundError: unknown ``session_id``.
            InvalidMessageError: a message is malformed; ``.field`` is
                ``messages[<i>]...`` (nothing stored).
            InvalidInputError: ``messages`` is not a list of messages, or a bad ``parent_id``.
        """
        session = await self.get_session(session_id)
        if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Iterable):
            raise InvalidInputError("messages must be a list of messages", field="messages")
        batch = list(messages)
        await session.append_messages(batch, parent_id)
        return batch[-1]["id"] if batch else None

    async def get_history(self, session_id: str, leaf_id: str | None = None) -> builtins.list[Message]:
        """:meth:`Session.get_history` of the session (overlays applied). Raises NotFoundError."""
        return await (await self.get_session(session_id)).get_history(leaf_id)

    async def get_message_count(self, session_id: str) -> int:
        """Stored messages on the path to the latest leaf (:meth:`Session.get_path_length`)."""
        return await (await self.get_session(session_id)).get_path_length()

    async def get_branches(self, session_id: str, message_id: str) -> builtins.list[Message]:
        """Children of ``message_id``, oldest first (:meth:`Session.get_branches`)."""
        return await (await self.get_session(session_id)).get_branches(message_id)

    async def clear_messages(self, session_id: str) -> None:
        """Delete the session's messages, compactions and search rows (the row stays)."""
        await (await self.get_session(session_id)).clear_messages()

    async def delete_messages(self, session_id: str, message_ids: Iterable[str]) -> int:
        """:meth:`Session.delete_messages`: returns how many were deleted."""
        return await (await self.get_session(session_id)).delete_messages(message_ids)

    # -- compaction -----------------------------------------------------------------------------

    async def add_compaction(self, session_id: str, summary: str, from_id: str, to_id: str) -> dict[str, str]:
        """:meth:`Session.add_compaction` (touches ``updated_at``); returns the record."""
        return await (await self.get_session(session_id)).add_compaction(summary, from_id, to_id)

    async def get_compactions(self, session_id: str) -> builtins.list[dict[str, str]]:
        """:meth:`Session.get_compactions` of the session, oldest first."""
        return await (await self.get_session(session_id)).get_compactions()

    async def compact_and_split(self, session_id: str, summary: str, name: str | None = None) -> Row:
        """End a session and continue it in a new one that starts from ``summary``.

        In one transaction: the old row gets ``end_reason = "compaction"``
        (and is touched); a new session is registered with ``name`` (default:
        the old name), ``parent_session_id`` = the old id, the old ``model``
        and ``source``; it holds one message ``{"id": <uuid>, "role":
        "assistant", "parts": [{"type": "text", "text": "[Context from
        previous session]\\n\\n" + summary}]}``. After the commit the new
        session broadcasts ``idle`` and runs one auto-compaction check, as the
        original's append of that message does.

        Returns:
            The new session's row.

        Raises:
            NotFoundError: unknown ``session_id`` (nothing written).
            InvalidInputError: ``summary`` or ``name`` is not a string.
        """
        old = await self._get_row(session_id)
        summary = _check_text(summary, "summary")
        name = old["name"] if name is None else _check_text(name, "name")
        text = SPLIT_PREFIX + summary
        message = {"id": str(uuid.uuid4()), "role": "assistant", "parts": [{"type": "text", "text": text}]}
        new_id = str(uuid.uuid4())
        rows = self._open(new_id).prepared_rows([message])
        row = await self._registry.insert_session(
            new_id, name, parent_session_id=old["id"], model=old["model"], source=old["source"],
            messages=rows, end=(old["id"], END_REASON_COMPACTION),
        )
        self._session_count_changed()
        await self._open(new_id).broadcast_status(then_compact=True)
        return row

    async def fork(self, session_id: str, at_message_id: str, name: str) -> Row:
        """A new session holding the history root -> ``at_message_id`` of ``session_id``.

        The path is copied as :meth:`Session.get_history` returns it
        (overlays become ordinary messages; compaction rows are not copied),
        every message with a new UUID id and chained in order from a new
        root. The new row has ``parent_session_id = session_id`` (``model``
        and ``source`` empty, as in the original). The source session is not
        changed. The row and the copies are written in one transaction
        (:meth:`Session.seed_messages`: one bulk insert). After the commit
        the fork broadcasts one ``idle`` with the estimate of the whole copy
        and runs one auto-compaction check, as after a batch (the original
        appends message by message: an ``idle`` per message, and a check
        after each; docs/deviations.md, "Batches are atomic").

        Returns:
            The new session's row.

        Raises:
            NotFoundError: unknown ``session_id``.
            MessageNotFoundError: ``at_message_id`` is not stored in that
                session (an overlay id included). Nothing is written.
            InvalidInputError: ``name`` or ``at_message_id`` is not a string.
        """
        source = await self.get_session(session_id)
        at_message_id = _check_text(at_message_id, "at_message_id")
        name = _check_text(name, "name")
        if await source.get_message(at_message_id) is None:
            raise MessageNotFoundError(at_message_id)
        copies = [{**message, "id": str(uuid.uuid4())} for message in await source.get_history(at_message_id)]
        new_id = str(uuid.uuid4())
        rows = self._open(new_id).prepared_rows(copies)
        row = await self._registry.insert_session(new_id, name, parent_session_id=source.session_id, messages=rows)
        self._session_count_changed()
        await self._open(new_id).broadcast_status(then_compact=True)
        return row

    # -- usage ------------------------------------------------------------------------------------

    async def add_usage(self, session_id: str, input_tokens: int, output_tokens: int, cost: float) -> Row:
        """Add to the row's ``input_tokens``, ``output_tokens`` and
        ``estimated_cost`` (touches ``updated_at``); returns the new row.

        Raises:
            NotFoundError: unknown ``session_id``.
            InvalidInputError: a token count is not an int >= 0, or ``cost``
                not a finite number >= 0, or a new total would not fit a
                counter (2**63 - 1 tokens, a finite cost); nothing written.
        """
        for value, field in ((input_tokens, "input_tokens"), (output_tokens, "output_tokens")):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidInputError(f"{field} must be an int >= 0, not {value!r}", field=field)
        if isinstance(cost, bool) or not isinstance(cost, (int, float)) or not (math.isfinite(cost) and cost >= 0):
            raise InvalidInputError(f"cost must be a finite number >= 0, not {cost!r}", field="cost")
        row = await self._registry.add_usage(
            await self._require(session_id), input_tokens, output_tokens, cost,
            check=lambda current: _check_usage_sums(current, input_tokens, output_tokens, cost),
        )
        return self._found(row, session_id)

    # -- search and tools ----------------------------------------------------------------------------

    async def search(self, query: str, *, limit: int = 20, mode: str = "text") -> builtins.list[dict[str, str]]:
        """Search the stored messages of every registered session: by words (``mode="text"``, the
        default), by meaning (``"semantic"``) or both (``"hybrid"``), as :meth:`Session.search` does
        within one session.

        Text: every word must match, a ``"quoted part"`` as a phrase, nothing
        is FTS5 syntax, CJK text is found inside sentences; a blank query gives
        ``[]``. ``semantic`` ranks the embedded messages of every session by
        the cosine similarity of their vector to the query's (messages not yet
        embedded are not found); ``hybrid`` merges the text and semantic
        rankings (each cut at 50, or ``limit`` if larger) by reciprocal rank
        fusion (k = 60). Both need :meth:`with_embedder`.

        Returns:
            Up to ``limit`` hits, best first: ``[{"id", "role", "content",
            "createdAt", "sessionId"}]`` -- ``content`` the indexed text (the
            text parts joined by a space), ``createdAt`` when the message was
            stored (ISO-8601 UTC with ms), ``sessionId`` its session.

        Raises:
            InvalidInputError: ``query`` is not a string, ``limit`` not an int >= 0,
                ``mode`` unknown, or (``field="embedder"``) semantic/hybrid without an
                embedder, or with one whose dimension differs from a session's stored vectors.
            storage.SearchQueryError: SQLite failed (never hidden as ``[]``).
            actors.embedding.EmbedderError: the embedder failed (503).
        """
        from .session_embeddings import ranked, vectors_for_mode

        _check_text(query, "query")
        limit = search_limit(limit)
        vectors = vectors_for_mode(mode, self._vectors)
        found = await ranked(query, parse_query(query), limit, mode, vectors, self._registry.search_messages,
                             _hit_key)
        return [
            {
                "id": hit["id"],
                "role": hit["role"],
                "content": hit["content"],
                "createdAt": to_iso8601(hit["created_at"]),
                "sessionId": hit["session_id"],
            }
            for hit in found
        ]

    def tools(self) -> dict[str, Tool]:
        """``{"session_search": Tool}``: the model searches every managed session.

        Input ``{"query": str}``; the result is the best 10 hits of
        :meth:`search` as ``[<role>] <content>`` joined by ``\\n---\\n``, or
        ``No results found.``. Give a model both kinds of tools with
        ``{**await session.tools(), **manager.tools()}``.
        """

        async def run(args: dict[str, Any]) -> str:
            return _format_hits(await self.search(args["query"], limit=SESSION_SEARCH_LIMIT)) or "No results found."

        schema = copy.deepcopy(_SESSION_SEARCH_SCHEMA)
        return {"session_search": Tool("session_search", SESSION_SEARCH_DESCRIPTION, schema, run)}

    # -- helpers ------------------------------------------------------------------------------------

    async def _get_row(self, session_id: Any) -> Row:
        row = await self._registry.get_session(_check_text(session_id, "session_id"))
        return self._found(row, session_id)

    def _session_count_changed(self) -> None:
        """Open sessions re-read the searchable-history block (its text counts the sessions)."""
        mark_block_source_changed(self._history_provider)

    @staticmethod
    def _found(row: Row | None, session_id: str) -> Row:
        if row is None:
            raise NotFoundError(f"session {session_id!r} not found", kind="session", key=session_id)
        return row


#: The largest value a usage counter holds (SQLite's 64-bit INTEGER; beyond it a sum turns REAL).
_MAX_COUNTER = 2**63 - 1


def _check_usage_sums(row: Row, input_tokens: int, output_tokens: int, cost: float) -> None:
    """:class:`InvalidInputError` when adding to ``row``'s counters would overflow them."""
    for value, field in ((input_tokens, "input_tokens"), (output_tokens, "output_tokens")):
        if row[field] + value > _MAX_COUNTER:
            raise InvalidInputError(
                f"{field} would exceed {_MAX_COUNTER} (now {row[field]}, adding {value})", field=field
            )
    if not math.isfinite(row["estimated_cost"] + cost):
        raise InvalidInputError(f"estimated_cost would not be finite (adding {cost!r})", field="cost")


def _check_text(value: Any, name: str) -> str:
    """``value`` if it is a ``str`` without lone surrogates (any store can hold it), else InvalidInputError."""
    return check_text(value, name)


def _check_optional_text(value: Any, name: str) -> str | None:
    return None if value is None else _check_text(value, name)


def _hit_key(hit: Row) -> tuple[str, str]:
    """A cross-session hit's key in the fusion of rankings: its session and message ids."""
    return (hit["session_id"], hit["id"])
