"""The Session: one conversation's message tree, context blocks, compaction and search.

Spec sections followed (``seeds/004``): Session (builder), Messages, Reading
History, Branching, Search, WebSocket Broadcasts, Context Blocks, System
Prompt, Skills, AI Tools, Compaction, Storage; docs/behaviours.md §2-§12,
with the improvements of docs/deviations.md #1-#10, #12-#14, #16-#18.

Parts. The Session is a facade over three parts built from one frozen
:class:`~actors.session_spec.SessionSpec` (the builders replace the part
they declare): the store of its message tree
(:class:`~actors.session_store.HistoryStore`; by default
:class:`storage.messages.MessageStore`), a
:class:`~actors.context.ContextBlocks` engine for context blocks, the
frozen prompt, tools and skills (for which the Session is the
:class:`~actors.skills.SkillHost`), and
:class:`~actors.session_compaction.SessionCompaction` for compaction, the
token estimate and status broadcasts, which gets the store and the engine,
never the Session. After every write that changed the stored history the
``on_history_changed`` observer given at construction is called.

Shapes. A message is a plain ``dict`` in the spec's JSON shape: ``{"id":
str, "role": str, "parts": list, ...}`` (an AI SDK ``UIMessage`` fits).
Messages are stored as compact JSON written the way JavaScript's
``JSON.stringify`` writes it (:func:`actors.tokens.js_stringify`), and every
read parses them again, so a returned dict is always a fresh object.

Tree rules (docs/behaviours.md §5). Each message has at most one parent; the *latest leaf* is
the last message appended (kept in storage, so it survives hibernation) or, when
that was deleted, the newest message left without children (in an actor
file: by insertion order, docs/deviations.md #3). ``get_history()`` walks
from the latest leaf up to its root.

Overlays (docs/behaviours.md §8, docs/deviations.md #13). A compaction row ``(summary, from, to)``
replaces the stretch ``from..to`` of a path, on read only, by the message
``{"id": "compaction_<compaction id>", "role": "assistant", "parts":
[{"type": "text", "text": summary}], "createdAt": <the compaction's
created_at>}``. It applies only to a path holding both its ends. The
overlay's ``createdAt`` is the time the compaction was *stored* (the
original uses the time of the read): a deliberate choice so two reads of the
same history are identical.

Concurrency. Data methods are ``async``. On a SQLite file the storage
work is synchronous (the store is awaited through
:class:`~actors.session_store.SyncStore`, which never suspends) and each
write is one transaction with no ``await`` inside: calls from different
trio tasks never interleave mid-write, and concurrent appends land in the
order they arrive. On Postgres each store call is one transaction of its
own on a worker thread, and the calls of one store run in the order they
were made; other tasks may run between two of a call's store calls (the
host's Postgres actor holds its input gate for whole calls).

Storage. ``Session.create`` takes a :class:`~storage.SqlStorage`, a
:class:`~storage.postgres.PostgresStorage` (everything auto-wired into
Postgres rows as into the file), an Agent whose ``storage`` is one of them,
or the spec's session provider (``PostgresSessionProvider``: no
auto-wiring), see :meth:`Session.create`.

Every write passes through :meth:`Session._prepare_message` (validation,
the :meth:`~Session._before_store` hook, then the row-size limit: a message
whose JSON exceeds the limit -- 1,800,000 UTF-8 bytes unless
:meth:`~Session.with_row_limit` says otherwise -- is shrunk by
:func:`actors.truncation.enforce_row_size_limit` before it is stored,
docs/deviations.md #8) and, once committed, through :meth:`Session._after_write` with
a :class:`MessagesChange`: skill state follows the new message, a
``cf_agent_session`` status is broadcast and, after a new message,
auto-compaction runs when the estimate exceeds the threshold (docs/behaviours.md §12).

Batches. :meth:`Session.append_messages` validates a whole batch, then
stores it as one chain in one transaction (all or nothing) and runs the
after-write effects once for the batch: skill state follows each new
message in order, then *one* status broadcast and *one* auto-compaction
check. The original has no batch write (its ``appendAll`` appends, and
broadcasts, message by message); here a batch is one write, so watchers see
one ``idle`` carrying the final estimate instead of one per message, and
auto-compaction is considered once, after the whole batch (a deliberate
difference).

Search indexes each message's text parts and, beside them, its tool calls'
names and string inputs (a deliberate improvement: a search for a file a
tool read finds the message); a hit's ``content`` is still only the text
parts, ``""`` for a message found through its tool calls alone.
"""

from __future__ import annotations

import inspect
import math
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, KeysView, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

from common.errors import (
    ConflictError,
    InvalidInputError,
    InvalidMessageError,
    MessageNotFoundError,
    NotSupportedError,
)
from storage import SqlStorage
from storage.context import held_exclusively
from storage.embeddings import EmbeddingMessageStore
from storage.fts import parse_query
from storage.messages import LATEST_LEAF, OVERLAY_PREFIX, MessageStore, NewMessage, to_iso8601
from storage.tree.rows import SearchRow

from .compaction import CompactResult, SessionCounter
from .context import ContextBlock, ContextBlocks
from .history_pages import check_page_options, history_page
from .session_compaction import BroadcastChannel, SessionCompaction
from .session_embeddings import SessionVectors, ranked, vectors_for_mode
from .session_messages import (
    apply_overlays,
    check_message,
    compaction_record,
    in_batch,
    parse,
    parse_all,
    search_limit,
    search_text,
    serialise,
    tool_search_text,
    utf8_length,
)
from .session_spec import CompactionFunction, CompactionSpec, ErrorHandler, SessionSpec, check_row_limit, check_text
from .session_store import (
    AsyncHistoryStore,
    HistoryStore,
    as_async_store,
    compaction_records,
    path_messages,
    read_history,
    sync_store,
)
from .skills import skill_events
from .tokens import estimate_message_tokens
from .tools import Tool
from .truncation import enforce_row_size_limit

if TYPE_CHECKING:
    from .embedding import Embedder

__all__ = ["COMPACTION_PREFIX", "LATEST_LEAF", "MessagesChange", "Session"]

#: Overlay message ids are this prefix + the compaction's id. Such ids are never stored.
COMPACTION_PREFIX = OVERLAY_PREFIX

Message = dict[str, Any]

# Budgets are clamped to what SQLite can bind (an infinite budget means "everything").
_MAX_SQL_INT = 2**62


@dataclass(frozen=True, slots=True)
class MessagesChange:
    """What one committed write did; handed to :meth:`Session._after_write`.

    Mirrors the original's change events: ``kind`` is ``"append"``
    (``message``, ``parent_id`` and ``inserted``), ``"append_batch"``
    (``messages``: those really stored, in order; ``inserted`` when there
    is one), ``"update"`` (``message``), ``"delete"`` (``message_ids``:
    those really deleted) or ``"clear"``. Messages are as stored (after
    :meth:`Session._before_store`).
    """

    kind: Literal["append", "append_batch", "update", "delete", "clear"]
    message: Message | None = None
    parent_id: str | None = None
    inserted: bool = False
    message_ids: tuple[str, ...] = field(default=())
    messages: tuple[Message, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class _Prepared:
    message: Message
    content: str
    text: str
    tools: str
    tokens: int

    def row(self) -> NewMessage:
        m = self.message
        return NewMessage(m["id"], m["role"], self.content, self.text, self.tools, self.tokens)


class Session:
    """A conversation stored in one actor's SQLite file.

    Build with :meth:`create`, then chain the builders (:meth:`for_session`,
    :meth:`with_context`, :meth:`with_cached_prompt`, :meth:`on_compaction`,
    :meth:`compact_after`, :meth:`on_compaction_error`,
    :meth:`with_row_limit`); builders touch no SQL and return ``self``. Or
    declare everything once as a frozen :class:`~actors.session_spec.SessionSpec`
    and hand it to any number of sessions (``spec=``). All data methods are ``async``.

    Args:
        storage: the actor's :class:`~storage.SqlStorage` (context-block rows,
            the cached prompt, the loaded-skill state and, by default, the
            messages), or a :class:`~storage.postgres.PostgresStorage` holding
            the same rows in Postgres, or ``None`` (then ``store_for`` is
            required; blocks without a provider are read-only and empty).
        spec: the declared configuration (default: none declared).
        session_id: the id rows are stored under (see :meth:`for_session`).
        broadcaster: see :attr:`broadcaster`.
        on_history_changed: ``fn(session_id)``, called after every committed
            write that changed the stored history -- a stored message (not a
            duplicate), an update, a delete that deleted something, a clear,
            a stored compaction -- before the write's other effects (a
            :class:`~actors.manager.SessionManager` touches ``updated_at`` with it).
        store_for: ``store_for(session_id)`` -> the message store of that
            session (:class:`~actors.session_store.HistoryStore`, synchronous
            or ``async``); default :class:`storage.messages.MessageStore` on a
            ``SqlStorage``, ``storage.messages(session_id)`` on a
            ``PostgresStorage``. A store with ``get_config`` / ``set_config``
            (a :class:`~storage.postgres.PostgresSessionProvider`) also keeps
            the loaded-skill set when ``storage`` is not a SQLite file.

    Raises:
        InvalidInputError: ``session_id`` is not a string.
        TypeError: neither ``storage`` nor ``store_for`` gives a message store.
    """

    #: Default parent of :meth:`append_message`: the latest leaf.
    LATEST_LEAF = LATEST_LEAF

    def __init__(
        self,
        storage: SqlStorage,
        *,
        spec: SessionSpec | None = None,
        session_id: str = "",
        broadcaster: Callable[[str], Any] | None = None,
        on_history_changed: Callable[[str], object] | None = None,
        store_for: Callable[[str], HistoryStore | AsyncHistoryStore] | None = None,
    ) -> None:
        spec = _DEFAULT_SPEC if spec is None else spec
        self._storage = storage
        self._session_id = _check_id(session_id, "session_id")
        self._on_history_changed = on_history_changed
        self._store_for = _default_store_for(storage) if store_for is None else store_for
        self._row_max_bytes = spec.row_max_bytes
        self._channel = BroadcastChannel(broadcaster, self._session_id)
        self._context = ContextBlocks(storage, host=self, session_id=self._session_id, spec=spec.context)
        self._embedder: Embedder | None = None
        self._on_pending: Callable[[], object] | None = None
        self._vectors: SessionVectors | None = None
        self._bind(spec.compaction)

    def _bind(self, compaction: CompactionSpec) -> None:
        """Open the message store of :attr:`session_id` and the compaction part over it."""
        self._messages = as_async_store(self._store_for(self._session_id))
        # The exclusively held SqlStorage behind the store (see _file_version); None: none; False: not known yet.
        self._held: SqlStorage | None | Literal[False] = False
        self._context.with_state(self._messages if callable(getattr(self._messages, "get_config", None)) else None)
        self._channel.session_id = self._session_id
        self._compaction = SessionCompaction(
            self._messages, self._context, self._channel, spec=compaction, on_stored=self._history_changed,
            version=self._file_version,
        )
        if self._embedder is not None:
            self._vectors = SessionVectors(self._storage, self._session_id, self._embedder)

    def _file_version(self) -> int | None:
        """The data version of the file when the estimate may hold the history tokens it reads now
        (see :mod:`actors.session_compaction`), else ``None``: a synchronous store (no other task
        writes between its reads) on a SQLite file this process holds exclusively, outside a
        caller's transaction."""
        held = self._held
        if held is False:  # not looked at yet since _bind
            store = getattr(sync_store(self._messages), "storage", None)
            held = self._held = store if isinstance(store, SqlStorage) and held_exclusively(store) else None
        if held is None:
            return None
        return None if held.in_transaction else held.data_version

    # -- builders ------------------------------------------------------------

    @classmethod
    def create(
        cls, target: Any, *, spec: SessionSpec | None = None, broadcaster: Callable[[str], Any] | None = None
    ) -> Session:
        """A Session on ``target``'s storage, for session id ``''``.

        Args:
            target: a :class:`storage.SqlStorage` or a
                :class:`storage.PostgresStorage` (everything auto-wired into
                it), or an object (an Agent) whose ``.storage`` is one -- if
                ``target.broadcast`` is callable it becomes :attr:`broadcaster`;
                or a session provider: an object with the ``async``
                :class:`~actors.session_store.HistoryStore` methods, such as
                ``PostgresSessionProvider(conn, session_id)`` (the spec's
                ``Session.create(new PostgresSessionProvider(client, id))``).
                A provider gives the session its ``session_id`` and skips all
                auto-wiring, as the spec says: blocks without a provider are
                read-only and empty, ``with_cached_prompt()`` needs a provider,
                and there is no broadcaster unless ``broadcaster`` is given.
                It keeps the loaded-skill set when it has ``get_config`` /
                ``set_config``; :meth:`for_session` needs its ``for_session``.
            spec: the configuration to start from (default: none declared).
            broadcaster: replaces ``target.broadcast`` (see :attr:`broadcaster`).

        Raises:
            TypeError: ``target`` is none of these.
        """
        if is_session_provider(target):
            session_id = getattr(target, "session_id", "")
            return cls(None, spec=spec, session_id=session_id, broadcaster=broadcaster,
                       store_for=partial(_provider_for, target))
        storage, own = target_parts(target, "Session.create()")
        return cls(storage, spec=spec, broadcaster=own if broadcaster is None else broadcaster)

    def for_session(self, session_id: str) -> Session:
        """Scope this Session to ``session_id`` (many sessions can share one file); returns ``self``.

        Messages, compactions, the auto-wired block rows (``<label>_<id>``),
        the cached prompt (``_system_prompt_<id>``) and the loaded-skill row
        are all namespaced by it (docs/behaviours.md §3).

        Raises:
            InvalidInputError: ``session_id`` is not a string.
            ConflictError: the context blocks were already used.
        """
        _check_id(session_id, "session_id")
        self._context.for_session(session_id)
        self._session_id = session_id
        self._bind(self._compaction.spec)
        return self

    def with_context(
        self, label: str, *, description: str | None = None, max_tokens: int | None = None, provider: Any = None
    ) -> Session:
        """Declare a context block (prompt order = call order); returns ``self``.

        Args:
            label: the block label (non-empty).
            description: shown in the block header, e.g. ``Learned facts``.
            max_tokens: limit on the block's estimated tokens (writes over it fail).
            provider: ``get()`` (+ ``set``/``load``/``search``: see
                :mod:`actors.context`); ``None`` auto-wires a writable
                :class:`~actors.context.AgentContextProvider` row.

        Raises:
            InvalidInputError: a bad label, description, ``max_tokens`` or provider.
            ConflictError: the label is already declared, or the blocks were already used.
        """
        self._context.with_context(label, description=description, max_tokens=max_tokens, provider=provider)
        return self

    def with_cached_prompt(self, provider: Any = None) -> Session:
        """Persist the frozen system prompt (in ``provider``, else the
        ``_system_prompt[_<id>]`` row) so it survives hibernation; returns ``self``.

        Raises:
            InvalidInputError: ``provider`` lacks ``get``/``set``.
            ConflictError: the blocks were already used.
        """
        self._context.with_cached_prompt(provider)
        return self

    def on_compaction(self, fn: CompactionFunction) -> Session:
        """Register the compaction function used by :meth:`compact`; returns ``self``.

        ``fn(messages, *, token_counter=None)`` (sync or async; the keyword
        is passed only when ``fn`` accepts it) gets the history with
        overlays applied and returns ``{"fromMessageId", "toMessageId",
        "summary"}`` or ``None`` (nothing to compact);
        :func:`actors.compaction.create_compact_function` builds one.

        Raises:
            InvalidInputError: ``fn`` is not callable.
        """
        self._compaction.spec = self._compaction.spec.with_function(fn)
        return self

    def compact_after(self, threshold: float, *, token_counter: SessionCounter | None = None) -> Session:
        """Compact automatically after a new message when the estimate exceeds
        ``threshold`` tokens (strictly); needs :meth:`on_compaction`. Returns ``self``.

        Args:
            threshold: estimated tokens (a finite number >= 0).
            token_counter: replaces the heuristic estimate:
                ``counter({"messages", "systemPrompt", "contextBlocks"}) ->
                number`` (sync or async; rounded up, clamped at 0). It also
                reaches the compaction function as its ``token_counter``.

        Raises:
            InvalidInputError: a bad threshold or a non-callable counter.
        """
        self._compaction.spec = self._compaction.spec.with_threshold(threshold, token_counter)
        return self

    def on_compaction_error(self, handler: ErrorHandler) -> Session:
        """Call ``handler(exception)`` (sync or async) when automatic compaction
        fails: the function raises or returns a range off the current path,
        or the counter raises (docs/deviations.md #14). Errors of the handler are
        logged and swallowed, so writes stay successful. Returns ``self``.

        Raises:
            InvalidInputError: ``handler`` is not callable.
        """
        self._compaction.spec = self._compaction.spec.with_error_handler(handler)
        return self

    def with_row_limit(self, max_bytes: int) -> Session:
        """Store no message row larger than ``max_bytes`` UTF-8 bytes of JSON
        (default 1,800,000); larger messages are shrunk first (docs/deviations.md #8).
        Returns ``self``.

        Raises:
            InvalidInputError: ``max_bytes`` is not a positive integer.
        """
        self._row_max_bytes = check_row_limit(max_bytes)
        return self

    def with_embedder(self, embedder: Embedder, *, on_pending: Callable[[], object] | None = None) -> Session:
        """Switch on semantic and hybrid :meth:`search` with ``embedder``; returns ``self``.

        Every message stored or updated with text is pending until its
        vector is stored, durably: in a SQLite file an append writes nothing
        more (the message is above the session's embedded-through ``seq``)
        and an update of an embedded message writes a marker in its
        transaction; in Postgres each such write marks its messages.
        :meth:`embed_pending` (which the owner runs after the write, off the
        write path: the session actor's alarm) computes the vectors.
        ``on_pending()`` is called after each committed write that stored or
        updated messages (the owner schedules that run).
        A session in a SQLite file (:class:`storage.embeddings.EmbeddingMessageStore`)
        or in Postgres (:class:`storage.postgres.embeddings.PostgresEmbeddingProvider`).

        Raises:
            NotSupportedError: the session was made from a provider (its storage is not known here).
        """
        storage = self._storage
        if isinstance(storage, SqlStorage):
            self._store_for = partial(EmbeddingMessageStore, storage)
        elif callable(getattr(storage, "embedding_messages", None)):
            self._store_for = storage.embedding_messages
        else:
            raise NotSupportedError("semantic search needs a Session on a SQLite file or a PostgresStorage")
        self._embedder = embedder
        self._on_pending = on_pending
        self._bind(self._compaction.spec)
        return self

    @property
    def vectors(self) -> SessionVectors | None:
        """The session's vectors (:class:`~actors.session_embeddings.SessionVectors`), ``None`` without an embedder."""
        return self._vectors

    async def embed_pending(self) -> int:
        """Embed the messages waiting for a vector (:meth:`with_embedder`); returns how many were
        stored (0 without an embedder)."""
        return 0 if self._vectors is None else await self._vectors.embed_pending()

    def with_broadcast_id(self, name: str) -> Session:
        """Name this session in its broadcasts' ``sessionId`` (docs/deviations.md #16); returns ``self``.

        By default broadcasts carry :attr:`session_id`. A session that owns a
        whole file (one actor per session, as the server runs them) stores its
        rows under ``''`` yet is known to clients by another name: the
        actor's name. Only the payloads change, never the stored rows.

        Raises:
            InvalidInputError: ``name`` is not a string.
        """
        self._channel.name = _check_str(name, "name")
        return self

    @property
    def spec(self) -> SessionSpec:
        """The declared configuration as one frozen value (blocks added at run time by
        :meth:`add_context` are not part of it)."""
        return SessionSpec(self._context.spec, self._compaction.spec, self._row_max_bytes)

    @property
    def broadcaster(self) -> Callable[[str], Any] | None:
        """``target.broadcast`` when the target passed to :meth:`create` has a
        callable ``broadcast`` (sync or async), else ``None``; may be replaced.
        Status payloads go through it (docs/behaviours.md §12, docs/deviations.md #16)."""
        return self._channel.broadcaster

    @broadcaster.setter
    def broadcaster(self, value: Callable[[str], Any] | None) -> None:
        self._channel.broadcaster = value

    @property
    def session_id(self) -> str:
        """The session id rows are stored under (``''`` unless :meth:`for_session` set one)."""
        return self._session_id

    @property
    def broadcast_id(self) -> str:
        """The ``sessionId`` of this session's broadcasts (see :meth:`with_broadcast_id`)."""
        return self._channel.broadcast_id

    @property
    def storage(self) -> Any:
        """The :class:`SqlStorage` (or :class:`~storage.postgres.PostgresStorage`) holding this
        session; ``None`` for a session made from a provider."""
        return self._storage

    @property
    def token_threshold(self) -> float | None:
        """The :meth:`compact_after` threshold, or ``None``."""
        return self._compaction.spec.threshold

    # -- writes ----------------------------------------------------------------

    async def append_message(self, message: Message, parent_id: str | None | object = LATEST_LEAF) -> bool:
        """Store ``message`` as a child of ``parent_id`` and make it the latest leaf.

        Args:
            message: ``{"id": str, "role": str, "parts": list, ...}``; a
                top-level ``createdAt`` given as a ``datetime`` is stored as
                its ISO-8601 text, as JavaScript stores a ``Date``.
            parent_id: omitted (:attr:`LATEST_LEAF`) -> the latest leaf
                (a root in an empty session); ``None`` -> a new root, which
                becomes the latest leaf; an id not stored in this session ->
                a root. An overlay id (``compaction_<id>``) stands for the last
                message that compaction covers.

        A message over the row limit is stored shrunk (docs/deviations.md #8). After
        a new message: skill state follows its ``load_context`` /
        ``unload_context`` parts, ``idle`` is broadcast, and auto-compaction
        runs when the estimate exceeds the threshold -- its failures go to
        :meth:`on_compaction_error`, never to the caller.

        Returns:
            ``True`` if stored. ``False`` when nothing was written: the id is
            already stored in this session (the first content stays, the
            latest leaf does not move), or it is an overlay id (echoed back
            by a client; docs/deviations.md #6).

        Raises:
            InvalidMessageError: ``message`` lacks a string ``id``/``role``
                or a list ``parts``, or is not JSON data; ``.field`` names
                the culprit. Nothing is written.
            InvalidInputError: ``parent_id`` is not a string or ``None``.
        """
        if parent_id is not LATEST_LEAF and parent_id is not None:
            _check_id(parent_id, "parent_id")
        prepared = self._prepare_message(message)
        if prepared.message["id"].startswith(COMPACTION_PREFIX):
            inserted, parent = False, None
        else:
            m = prepared.message
            before = self._file_version()  # a synchronous store commits without suspending in between
            inserted, parent = await self._messages.append(
                m["id"], m["role"], prepared.content, prepared.text, parent_id,
                tokens=prepared.tokens, tools=prepared.tools,
            )
            if inserted:
                self._compaction.appended(m["id"], parent, prepared.tokens, before, self._file_version())
        await self._committed(MessagesChange("append", prepared.message, parent, inserted))
        return inserted

    async def append_messages(
        self, messages: Iterable[Message], parent_id: str | None | object = LATEST_LEAF
    ) -> list[bool]:
        """Store ``messages`` as one chain, in one transaction: all of them or none.

        The first message goes under ``parent_id`` (the three cases of
        :meth:`append_message`), each next one under the one before. A
        message whose id is already stored (or came earlier in the batch)
        is skipped as :meth:`append_message` skips it, and the next one
        goes under that stored message. An overlay id (``compaction_<id>``,
        echoed back by a client) is skipped too (docs/deviations.md #6); the next
        message goes under the last message that compaction covers, or,
        without such a compaction, under the message it would have gone
        under itself.

        Every message is validated and prepared (row-size limit included)
        before anything is written. After the commit the effects run once
        for the batch: skill state follows each new message in order, one
        ``idle`` status is broadcast (with the final estimate), and one
        auto-compaction check runs. A batch storing nothing (all duplicates)
        broadcasts ``idle`` as a duplicate append does; an empty batch does
        nothing.

        Returns:
            One flag per message: ``True`` if stored (see :meth:`append_message`).

        Raises:
            InvalidMessageError: a message is malformed, not JSON data or too
                big to shrink; ``.field`` names it as ``messages[<i>]``,
                ``messages[<i>].<key>``. Nothing is written.
            InvalidInputError: ``messages`` is not a list of messages, or
                ``parent_id`` is not a string or ``None``.
            apsw.Error: SQLite failed; the whole batch was rolled back.
        """
        if parent_id is not LATEST_LEAF and parent_id is not None:
            _check_id(parent_id, "parent_id")
        batch = self._prepare_batch(messages)
        if not batch:
            return []
        if any(skill_events(p.message) for p in batch):
            # Restore the loaded set against the history *before* the batch, so each
            # message's loads and unloads then apply exactly once, in order.
            await self._context.get_loaded_skill_keys()
        outcomes = await self._messages.append_chain([p.row() for p in batch], parent_id)
        stored = tuple(p.message for p, (inserted, _) in zip(batch, outcomes) if inserted)
        await self._committed(MessagesChange("append_batch", inserted=bool(stored), messages=stored))
        return [inserted for inserted, _ in outcomes]

    def seed_messages(self, messages: Iterable[Message]) -> list[bool]:
        """Fill an empty session with ``messages``, chained from a new root, without after-write effects.

        Synchronous, so a caller can write it inside its own SQLite
        transaction together with other rows; only a session on a
        synchronous store (SQLite) has it -- elsewhere store
        :meth:`prepared_rows` in the caller's own transaction. The messages
        go through the same validation, row-size limit and chain rules as
        :meth:`append_messages`, but nothing follows the write: no
        broadcast, no auto-compaction, no skill notes (a session's loaded
        skills are restored from its history on first use). Use
        :meth:`append_messages` for anything else.

        Returns:
            One ``inserted`` flag per message.

        Raises:
            ConflictError: the session already holds messages.
            InvalidMessageError, InvalidInputError: as :meth:`append_messages`.
            TypeError: the session's store is ``async`` (Postgres).
        """
        store = sync_store(self._messages)
        if store is None:
            raise TypeError("seed_messages() needs a synchronous (SQLite) store; use prepared_rows() elsewhere")
        rows = self.prepared_rows(messages)
        if store.latest_leaf() is not None:
            raise ConflictError(f"session {self._session_id!r} already holds messages; only an empty one is seeded")
        return [inserted for inserted, _ in store.append_chain(rows, None)]

    def prepared_rows(self, messages: Iterable[Message]) -> list[NewMessage]:
        """``messages`` as the rows this session would store for them, nothing written.

        Each is validated and prepared as :meth:`append_messages` prepares
        it (the :meth:`_before_store` hook, the row-size limit, the text and
        tool calls it is searched by, its token estimate), so a caller can
        store them in a transaction of its own (``append_chain``).

        Raises:
            InvalidMessageError, InvalidInputError: as :meth:`append_messages`.
        """
        return [p.row() for p in self._prepare_batch(messages)]

    async def update_message(self, message: Message) -> None:
        """Replace the stored message with ``message["id"]``; its place in the tree is kept.

        The role column and the search index follow the new content.

        Raises:
            InvalidMessageError: as :meth:`append_message`.
            MessageNotFoundError: no message with that id in this session
                (nothing is written; docs/deviations.md #4).
        """
        prepared = self._prepare_message(message)
        m = prepared.message
        stored = await self._messages.update(
            m["id"], m["role"], prepared.content, prepared.text, tokens=prepared.tokens, tools=prepared.tools
        )
        if not stored:
            raise MessageNotFoundError(m["id"])
        await self._committed(MessagesChange("update", m))

    async def delete_messages(self, message_ids: Iterable[str]) -> int:
        """Delete these messages; each one's children move up to its parent (docs/deviations.md #5).

        Unknown ids are skipped. Returns how many messages were deleted.

        Raises:
            InvalidInputError: ``message_ids`` is a string or holds a non-string.
        """
        if isinstance(message_ids, (str, bytes)) or not isinstance(message_ids, Iterable):
            raise InvalidInputError("message_ids must be a list of message ids", field="message_ids")
        ids = [_check_id(i, "message_ids") for i in message_ids]
        deleted = await self._messages.delete(ids)
        await self._committed(MessagesChange("delete", message_ids=tuple(deleted)))
        return len(deleted)

    async def clear_messages(self) -> None:
        """Delete every message, compaction and search row of this session.

        The loaded-skill set is emptied and the system prompt refreshed (docs/behaviours.md §2);
        block contents are kept.
        """
        await self._messages.clear()
        await self._committed(MessagesChange("clear"))

    async def broadcast_status(self, *, then_compact: bool = False) -> None:
        """Broadcast ``idle`` with the current estimate, for rows written outside the write
        methods above (:class:`~actors.manager.SessionManager`: after its transaction of
        :meth:`seed_messages` commits, and after a delete).

        With ``then_compact``, one auto-compaction check follows, as after
        :meth:`append_messages` (its failures go to :meth:`on_compaction_error`).
        """
        if then_compact:
            await self._compaction.after_append()
        else:
            await self._compaction.emit_status("idle")

    # -- extension points ------------------------------------------------------

    def _prepare_message(self, message: Message) -> _Prepared:
        """Validate, apply :meth:`_before_store`, enforce the row limit, serialise:
        the one way into storage.

        Raises:
            InvalidMessageError: not a message, not JSON data, or too big to
                shrink under the row limit (a huge id or metadata).
        """
        checked = self._before_store(check_message(message))
        content = serialise(checked)
        size = utf8_length(content)
        if size > self._row_max_bytes:
            # ``content`` is the row text row_bytes() would measure: the shrink need not encode it again
            checked = dict(enforce_row_size_limit(checked, max_bytes=self._row_max_bytes, size=size))
            content = serialise(checked)
        parts = checked["parts"]
        tokens = estimate_message_tokens([checked])
        return _Prepared(checked, content, search_text(parts), tool_search_text(parts), tokens)

    def _prepare_batch(self, messages: Iterable[Message]) -> list[_Prepared]:
        """:meth:`_prepare_message` of every message; an error names ``messages[<i>]``."""
        if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Iterable):
            raise InvalidInputError("messages must be a list of messages", field="messages")
        batch = []
        for index, message in enumerate(messages):
            try:
                batch.append(self._prepare_message(message))
            except InvalidMessageError as exc:
                raise in_batch(exc, index) from exc
        return batch

    def _before_store(self, message: Message) -> Message:
        """Hook run on every message about to be stored (append and update); returns what
        to store. The row limit applies to what it returns."""
        return message

    async def _committed(self, change: MessagesChange) -> None:
        """After a committed write: the "history changed" notice (when it changed), then :meth:`_after_write`."""
        if self._vectors is not None:
            if change.kind in ("update", "delete", "clear"):
                self._vectors.forget()
            if self._on_pending is not None and change.kind in ("append", "append_batch", "update") and (
                change.kind == "update" or change.inserted
            ):
                self._on_pending()
        if _changes_history(change):
            await self._history_changed()
        await self._after_write(change)

    async def _history_changed(self) -> None:
        if self._on_history_changed is not None:
            result = self._on_history_changed(self._session_id)
            if inspect.isawaitable(result):
                await result

    async def _after_write(self, change: MessagesChange) -> None:
        """Run after every committed write (append, also when nothing was inserted;
        update; delete; clear): skill state, status broadcast, auto-compaction (docs/behaviours.md §12)."""
        if change.kind == "append" and change.inserted and change.message is not None:
            await self._context.note_appended(change.message)
            await self._compaction.after_append()
            return
        if change.kind == "append_batch" and change.inserted:
            for message in change.messages:
                await self._context.note_appended(message)
            await self._compaction.after_append()
            return
        if change.kind == "update" and change.message is not None:
            await self._context.note_updated(change.message)
        elif change.kind == "clear":
            await self._context.note_cleared()
        await self._compaction.emit_status("idle")

    # -- reads -----------------------------------------------------------------

    async def get_message(self, message_id: str) -> Message | None:
        """The stored message, or ``None`` (overlay ids are never stored)."""
        content = await self._messages.get(_check_id(message_id, "message_id"))
        return None if content is None else parse(content)

    async def get_latest_leaf(self) -> Message | None:
        """The latest leaf message (see the module docstring), or ``None`` in an empty session."""
        leaf = await self._messages.latest_leaf()
        return None if leaf is None else await self.get_message(leaf)

    async def get_history(
        self, leaf_id: str | None = None, *, limit: int | None = None, before: str | None = None,
        overlays: bool = True,
    ) -> list[Message]:
        """The path root -> ``leaf_id`` (default: the latest leaf), overlays applied.

        The whole path, however long (docs/deviations.md #18). An unknown ``leaf_id``
        gives ``[]``; a ``leaf_id`` with children gives the path to it.

        Pages (an extension of the spec's method, :mod:`actors.history_pages`):
        ``limit`` keeps the newest ``limit`` entries; ``before`` (an entry's id,
        an overlay's included) keeps those older than it, so passing a page's
        first id as ``before`` reads the page before it; ``overlays=False``
        reads the stored messages without compaction overlays. A page reads
        only its own rows. Each page is root-side first; a page shorter than
        ``limit`` reached the root. A ``before`` that is not an entry of this
        history is refused, never answered with an empty page.

        Raises:
            MessageNotFoundError: ``before`` is the id of no stored message and
                of no compaction overlay (an empty session included).
            InvalidInputError: a bad ``leaf_id``, ``limit`` (an int >= 1),
                ``overlays`` (a bool) or ``before`` (``field="before"`` also when
                it is stored but not an entry of this history: on another
                branch, hidden inside an applied overlay, an overlay that does
                not apply here).
        """
        if limit is None and before is None and overlays is True:
            return await read_history(self._messages, await self._leaf(leaf_id))
        check_page_options(limit, before, overlays)
        leaf = await self._leaf(leaf_id)
        if leaf is None:  # an empty session: no id can be an entry of its history
            if before is not None:
                raise MessageNotFoundError(before)
            return []
        return await history_page(self._messages, leaf, limit, before, overlays)

    async def raw_path_messages(self) -> list[Message]:
        """The stored messages root -> latest leaf, *without* compaction overlays.

        What the one-time skill restore scans, so loads inside compacted
        ranges are still seen (docs/behaviours.md §7).
        """
        leaf = await self._messages.latest_leaf()
        return [] if leaf is None else await path_messages(self._messages, leaf)

    async def raw_path_chunks(self, keep: Callable[[str], bool] | None = None) -> AsyncIterator[list[Message]]:
        """The stored messages latest leaf -> root, *without* compaction overlays, a
        bounded chunk at a time, leaf first (chunk after chunk, and within each).

        What the one-time skill restore walks: it holds one chunk at a time
        (:meth:`storage.messages.MessageStore.path_chunks`: at most 1 MiB of
        stored JSON or 1,024 rows, a larger row alone), whatever the history
        length. ``keep(stored_json)`` picks the rows worth parsing; the others
        are skipped unparsed. Rows that are not messages are left out.

        Raises:
            apsw.Error, StorageUnavailableError: the store failed; chunks already yielded stay valid.
        """
        leaf = await self._messages.latest_leaf()
        if leaf is None:
            return
        async for contents in self._messages.path_chunks(leaf):
            if keep is not None:
                contents = [c for c in contents if isinstance(c, str) and keep(c)]
            yield parse_all(contents)

    async def get_path_length(self, leaf_id: str | None = None) -> int:
        """Number of stored messages on the path root -> leaf (no overlays); 0 if unknown."""
        leaf = await self._leaf(leaf_id)
        place = None if leaf is None else await self._messages.place(leaf)
        return 0 if place is None else place[0]

    async def get_branches(self, message_id: str) -> list[Message]:
        """The children of ``message_id``, oldest first (ties in insertion order)."""
        return parse_all(await self._messages.children(_check_id(message_id, "message_id")))

    async def get_history_row_stats(self, leaf_id: str | None = None) -> list[dict[str, Any]]:
        """``[{"id", "role", "bytes"}]`` root -> leaf without reading content.

        ``bytes`` is the UTF-8 size of the stored JSON. No overlays.
        """
        leaf = await self._leaf(leaf_id)
        if leaf is None:
            return []
        return [{"id": i, "role": role, "bytes": size} for i, role, size in await self._messages.path_stats(leaf)]

    async def get_recent_history(
        self, max_bytes: int, min_recent: int = 1, *, leaf_id: str | None = None
    ) -> dict[str, Any]:
        """The newest messages of the path that fit ``max_bytes`` of stored JSON.

        The window always holds the leaf; it grows toward the root while it
        has fewer than ``min_recent`` rows or the next row still fits the
        budget. Only the window's rows are read, so the cost follows the
        window, not the history.

        Returns:
            ``{"messages": [...], "truncated": bool, "totalContentBytes": int}``:
            the window root-side first with overlays applied inside it;
            ``truncated`` when it does not start at the root;
            ``totalContentBytes`` the JSON bytes of the whole path.

        Raises:
            InvalidInputError: ``max_bytes`` or ``min_recent`` is not a number.
        """
        # Whole bytes: a sum of row sizes ``used <= x`` iff ``used <= floor(x)``; below 0 nothing fits.
        budget = math.floor(max(-1, min(_check_number(max_bytes, "max_bytes"), _MAX_SQL_INT)))
        floor = min(_check_number(min_recent, "min_recent"), _MAX_SQL_INT)
        floor = 1 if floor < 1 else int(floor)  # -inf and anything below 1 mean "the leaf"
        leaf = await self._leaf(leaf_id)
        place = None if leaf is None else await self._messages.place(leaf)
        if leaf is None or place is None:
            return {"messages": [], "truncated": False, "totalContentBytes": 0}
        contents, truncated = await self._messages.window(leaf, budget, floor)
        return {
            "messages": apply_overlays(parse_all(contents), await self._messages.compactions()),
            "truncated": truncated,
            "totalContentBytes": place[1],
        }

    async def _leaf(self, leaf_id: str | None) -> str | None:
        if leaf_id is None:
            return await self._messages.latest_leaf()
        return _check_id(leaf_id, "leaf_id")

    # -- search ----------------------------------------------------------------

    async def search(self, query: str, *, limit: int = 20, mode: str = "text") -> list[dict[str, str]]:
        """Search this session's stored messages: by words (``mode="text"``, the default), by
        meaning (``"semantic"``) or both (``"hybrid"``).

        ``semantic`` ranks the embedded messages by the cosine similarity of
        their vector to the query's (:meth:`with_embedder`; messages not yet
        embedded are not found: :meth:`search_status` counts them).
        ``hybrid`` merges the text ranking and the semantic ranking (each cut
        at 50, or ``limit`` if larger) by reciprocal rank fusion (k = 60).
        The same messages are eligible in every mode: all of the session's,
        on every branch, compacted or not.

        Full text:

        Searched: the text parts, and the tool calls' names and string inputs
        (our addition: e.g. the path a ``read_file`` call read). Every word
        must match, in any order, in either; a ``"quoted part"`` must match
        as a phrase; nothing typed is read as FTS5 syntax; porter stemming;
        Chinese and Japanese text is found inside sentences (docs/deviations.md #9, #10).
        Compacted messages stay searchable (overlays apply on read only).

        Returns:
            Up to ``limit`` hits, best first:
            ``[{"id", "role", "content", "createdAt"}]`` where ``content`` is
            the message's text parts joined by one space (``""`` for a
            message found through its tool calls alone) and ``createdAt`` the
            time the message was stored (ISO-8601 UTC with milliseconds). A
            blank query gives ``[]``.

        Raises:
            InvalidInputError: ``query`` is not a string, ``limit`` not an int >= 0,
                ``mode`` unknown, or (``field="embedder"``) semantic/hybrid with no
                embedder configured or with one whose dimension differs from the stored vectors'.
            storage.SearchQueryError: SQLite failed (never hidden as ``[]``).
            actors.embedding.EmbedderError: the embedder failed (503).
        """
        _check_str(query, "query")
        limit = search_limit(limit)
        vectors = vectors_for_mode(mode, self._vectors)
        found = await ranked(query, parse_query(query), limit, mode, vectors, self._messages.search, _row_id)
        return [
            {"id": r.id, "role": r.role, "content": r.content, "createdAt": to_iso8601(r.created_at)}
            for r in found
        ]

    async def reembed(self) -> dict[str, Any]:
        """Drop every vector of this session and mark each message with text to be embedded again
        with the configured embedder (the way out of :class:`~actors.session_embeddings.EmbeddingMismatchError`);
        returns :meth:`search_status` (everything ``pending``; the owner's next embedding run does
        the work). Without an embedder nothing changes and the status says ``embedder: None``.

        """
        if self._vectors is None:
            return await self.search_status()
        vectors = self._vectors
        await vectors.reset()
        if self._on_pending is not None:
            self._on_pending()
        return await vectors.status()

    async def search_status(self) -> dict[str, Any]:
        """How far semantic search has got: ``{"embedder", "dimension", "embedded", "pending"}``.

        ``embedder`` is the model name (``None`` when no embedder is
        configured, then the counts are 0), ``dimension`` that of the stored
        vectors (``None`` before the first), ``embedded`` the messages with a
        vector of that model, ``pending`` those still waiting for one (not
        yet found by semantic search).
        """
        if self._vectors is None:
            return {"embedder": None, "dimension": None, "embedded": 0, "pending": 0}
        return await self._vectors.status()

    # -- compaction overlays ---------------------------------------------------

    async def add_compaction(self, summary: str, from_id: str, to_id: str) -> dict[str, str]:
        """Store an overlay replacing ``from_id..to_id`` with ``summary`` on read.

        Returns ``{"id", "summary", "fromMessageId", "toMessageId",
        "createdAt"}`` (``id`` a random UUID; ``createdAt`` ISO-8601 UTC with
        ms, the stored time). The ids are not checked: an overlay whose ends
        are not both on a path is ignored when that path is read.

        Raises:
            InvalidInputError: an argument is not a string.
        """
        row = await self._messages.add_compaction(
            str(uuid.uuid4()),
            _check_id(summary, "summary"),
            _check_id(from_id, "from_id"),
            _check_id(to_id, "to_id"),
        )
        await self._history_changed()
        return compaction_record(row, iso=True)

    async def get_compactions(self) -> list[dict[str, str]]:
        """Every compaction record of this session, oldest first (ties in insertion order).

        ``createdAt`` is SQLite text, ``YYYY-MM-DD HH:MM:SS.SSS`` UTC (as the
        original's, with milliseconds); :meth:`add_compaction` gives the same
        instant as ISO-8601.
        """
        return await compaction_records(self._messages)

    async def compact(self) -> CompactResult | None:
        """Compact now with the :meth:`on_compaction` function (docs/behaviours.md §8).

        Broadcasts ``compacting``; the function gets :meth:`get_history`
        (overlays applied). A result is stored as one overlay that extends
        the oldest compaction on this branch (iterative, single overlay,
        branch-local: docs/deviations.md #13), the system prompt is refreshed and
        ``idle`` with ``compacted: {tokensBefore}`` is broadcast.

        Returns:
            ``{"fromMessageId", "toMessageId", "summary"}`` as stored, or
            ``None``: nothing to compact (``None`` or blank summary from the
            function), or the function raised or named a range not on the
            current path -- then ``cf_agent_session_error`` is broadcast and
            the error logged (as the original, a manual call does not raise).

        Raises:
            CompactionError: no compaction function is registered
                (``No compaction function registered. Call on_compaction() first.``).
        """
        return await self._compaction.compact()

    async def estimate_tokens(self) -> int:
        """The token estimate that broadcasts and auto-compaction use (docs/behaviours.md §9).

        Without a :meth:`compact_after` counter: the heuristic estimate of
        :meth:`get_history` (overlays applied) plus the prompt used for
        estimates (the frozen prompt, else the stored one, else a fresh
        render), computed from stored running totals -- its cost does not
        grow with the history. With a counter: the counter's answer.

        Raises:
            Exception: whatever a custom counter raises.
        """
        return await self._compaction.estimate()

    # -- context blocks, system prompt, tools, skills (actors.context) ---------

    async def add_context(
        self, label: str, *, description: str | None = None, max_tokens: int | None = None, provider: Any = None
    ) -> ContextBlock:
        """Add a block at runtime (last in prompt order) and return it; the frozen
        prompt is not refreshed (docs/behaviours.md §4).

        Raises:
            ConflictError: ``Block "<label>" already exists``.
            InvalidInputError: as :meth:`with_context`.
        """
        return await self._context.add_context(label, description=description, max_tokens=max_tokens, provider=provider)

    async def remove_context(self, label: str) -> bool:
        """Remove block ``label`` (``False`` if unknown); its loaded skills are
        forgotten without rewriting history; the frozen prompt is not refreshed."""
        return await self._context.remove_context(label)

    async def get_context_block(self, label: str) -> ContextBlock | None:
        """Block ``label`` ``{label, description, content, tokens, maxTokens,
        writable, isSkill, isSearchable}``, or ``None``; blocks load on demand
        (docs/deviations.md #3)."""
        return await self._context.get_context_block(label)

    async def get_context_blocks(self) -> list[ContextBlock]:
        """Every block, in prompt order (loaded on demand)."""
        return await self._context.get_context_blocks()

    async def replace_context_block(self, label: str, content: str) -> ContextBlock:
        """Replace a writable block's content; returns the new block. The frozen
        prompt is unchanged until :meth:`refresh_system_prompt`.

        Raises:
            ContextBlockError: ``Block "<label>" is readonly`` (also for an
                unknown label), ``... is a keyed provider. Use setSkill() or
                setSearchEntry() instead.``, ``... exceeds maxTokens: <n> > <max>``.
        """
        return await self._context.replace_context_block(label, content)

    async def append_context_block(self, label: str, content: str) -> ContextBlock:
        """Append to a writable block (``"\\n"`` between when the block is
        non-empty and ``content`` does not start with one); returns the new block.

        Raises:
            ContextBlockError: ``Block "<label>" not found``, or as :meth:`replace_context_block`.
        """
        return await self._context.append_context_block(label, content)

    async def freeze_system_prompt(self) -> str:
        """The frozen system prompt: the stored one with :meth:`with_cached_prompt`,
        else the snapshot, rendered on first use (docs/behaviours.md §4)."""
        return await self._context.freeze_system_prompt()

    async def refresh_system_prompt(self) -> str:
        """Reload every block, re-render, replace (and persist) the frozen prompt; returns it."""
        return await self._context.refresh_system_prompt()

    async def tools(self) -> dict[str, Tool]:
        """The AI tools for the current blocks, in order ``set_context``,
        ``load_context``, ``unload_context``, ``search_context`` (docs/behaviours.md §6); each
        :class:`~actors.tools.Tool` validates its arguments and returns a string."""
        return await self._context.tools()

    async def unload_skill(self, label: str, key: str) -> bool:
        """Unload skill ``label:key``: ``False`` if it was not loaded; otherwise the
        newest stored load output becomes ``[skill unloaded: <key>]`` (an
        update, so it broadcasts) and ``True`` is returned (docs/behaviours.md §7)."""
        return await self._context.unload_skill(label, key)

    async def get_loaded_skill_keys(self) -> KeysView[str]:
        """Loaded skills as an ordered, set-like view of ``"label:key"``. After a
        wake they come from one stored row, whatever the history length."""
        return await self._context.get_loaded_skill_keys()


# -- helpers -------------------------------------------------------------------


_DEFAULT_SPEC = SessionSpec()


def target_parts(target: Any, caller: str) -> tuple[Any, Callable[[str], Any] | None]:
    """``(storage, broadcaster)`` of a ``create()`` target: a :class:`SqlStorage` or a
    :class:`~storage.postgres.PostgresStorage`, or an object whose ``.storage`` is one
    (its callable ``broadcast`` is the broadcaster).

    Raises:
        TypeError: no such storage on ``target`` (the message names ``caller``).
    """
    storage = target if is_storage(target) else getattr(target, "storage", None)
    if not is_storage(storage):
        raise TypeError(
            f"{caller} needs a SqlStorage or a PostgresStorage, or an object whose .storage is one, "
            f"not {type(target).__name__}"
        )
    broadcast = getattr(target, "broadcast", None)
    return storage, broadcast if callable(broadcast) else None


def is_storage(value: Any) -> bool:
    """``True`` for a :class:`SqlStorage` or a :class:`~storage.postgres.PostgresStorage`."""
    if isinstance(value, SqlStorage):
        return True
    from storage.postgres.storage import PostgresStorage

    return isinstance(value, PostgresStorage)


def is_session_provider(value: Any) -> bool:
    """``True`` for an object with the ``async`` message-store methods (a session provider)."""
    return all(inspect.iscoroutinefunction(getattr(value, name, None)) for name in ("get", "latest_leaf", "append"))


def _default_store_for(storage: Any) -> Callable[[str], Any]:
    if isinstance(storage, SqlStorage):
        return partial(MessageStore, storage)
    if storage is None:
        raise TypeError("a Session without storage needs store_for (or use Session.create(provider))")
    return storage.messages


def _provider_for(provider: Any, session_id: str) -> Any:
    """``provider`` for its own session id, else its ``for_session(session_id)``."""
    if session_id == getattr(provider, "session_id", ""):
        return provider
    other = getattr(provider, "for_session", None)
    if not callable(other):
        raise TypeError(f"{type(provider).__name__} serves one session; it has no for_session()")
    return other(session_id)


def _changes_history(change: MessagesChange) -> bool:
    """Whether a committed write changed the stored history (a duplicate append or an empty delete did not)."""
    if change.kind in ("append", "append_batch"):
        return change.inserted
    if change.kind == "delete":
        return bool(change.message_ids)
    return True


def _check_id(value: Any, name: str) -> str:
    """``value`` if it is a ``str`` any store can hold as an id or text (no lone surrogate), else InvalidInputError."""
    return check_text(value, name)


def _check_str(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise InvalidInputError(f"{name} must be a string, not {type(value).__name__}", field=name)
    return value


def _check_number(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise InvalidInputError(f"{name} must be a number, not {value!r}", field=name)
    return value


def _row_id(row: SearchRow) -> str:
    """A search hit's key in the fusion of rankings: its message id."""
    return row.id
