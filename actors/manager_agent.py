"""The manager actor: :class:`ManagerAgent`, one :class:`~actors.manager.SessionManager` per actor.

The Cloudflare pattern of one manager per end user: the host binds it
(``host.bind("managers", ManagerAgent, env=config)``), each actor id is one
manager (e.g. ``"user-7"``) holding any number of named sessions in its one
SQLite file. It is configured by the same
:class:`~actors.session_agent.SessionConfig` as
:class:`~actors.session_agent.SessionAgent`: the config's frozen
:attr:`~actors.session_agent.SessionConfig.spec` is declared on the manager
through its builders (blocks, cached prompt, compaction), so a managed
session is set up exactly like a session served as its own actor.

Two kinds of stub methods:

* the SessionManager's own methods under its names (``create``, ``list``,
  ``get``, ``rename``, ``delete``, ``fork``, ``compact_and_split``,
  ``add_usage``, ``search``, the message methods taking a session id, and
  its tools as ``tools(format)`` / ``execute_tool(name, args)``); each
  returns fresh JSON data;
* :meth:`ManagerAgent.call_session`: one Session API method on one managed
  session (:class:`ManagedSession`), which is what the routes
  ``/v1/managers/{id}/sessions/{session_id}/...`` call.

The method list is the manager table ``runtime.manager_api.MANAGER_API``
(``actors`` does not import ``runtime``); ``tests/runtime/test_manager_api_table.py``
keeps this class, :class:`ManagedSession` and the table equal.

Errors are those of :class:`~actors.manager.SessionManager` (a session id
without a registry row is :class:`~common.errors.NotFoundError`, 404) and
of the Session methods; an unknown session method is
:class:`~common.errors.UnknownMethodError` and arguments that do not fit it
:class:`~common.errors.InvalidArgumentsError`, as for any stub call.
"""

from __future__ import annotations

import builtins
import inspect
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, ClassVar

from common.errors import InvalidArgumentsError, InvalidInputError, NotFoundError, UnknownMethodError

from storage.context import read_config, write_config

from .agent import Agent, AgentContext, AlarmInfo
from .manager import SessionManager
from .session import LATEST_LEAF, Session
from .session_agent import TOOL_FORMATS, SessionAgent, SessionConfig
from .session_embeddings import embedder_for
from .session_metadata import read_metadata, write_metadata
from .session_spec import SessionSpec
from .tools import Tool, anthropic_tools, openai_tools

__all__ = ["MANAGED_METHODS", "ManagedSession", "ManagerAgent", "configure_manager", "managed_method"]

Message = dict[str, Any]
Row = dict[str, Any]


def configure_manager(manager: SessionManager, spec: SessionSpec) -> SessionManager:
    """Declare ``spec`` (blocks in order, cached prompt, compaction) on ``manager`` through its builders.

    Afterwards ``manager.spec == spec`` (the row limit, which no manager
    builder sets, stays the default). Returns ``manager``.

    Raises:
        ConflictError: a session of ``manager`` is already open.
    """
    for block in spec.context.blocks:
        manager.with_context(block.label, description=block.description, max_tokens=block.max_tokens,
                             provider=block.provider)
    if spec.context.cached_prompt:
        manager.with_cached_prompt(spec.context.prompt_store)
    compaction = spec.compaction
    if compaction.function is not None:
        manager.on_compaction(compaction.function)
    if compaction.threshold is not None:
        manager.compact_after(compaction.threshold, token_counter=compaction.token_counter)
    if compaction.error_handler is not None:
        manager.on_compaction_error(compaction.error_handler)
    return manager


def _tool_list(tools: Mapping[str, Tool], format: str) -> dict[str, Any] | list[dict[str, Any]]:
    """``tools`` as ``{name: {description, inputSchema}}`` (``raw``) or an OpenAI / Anthropic list."""
    if format not in TOOL_FORMATS:
        raise InvalidInputError(f"format must be one of {', '.join(TOOL_FORMATS)}, not {format!r}", field="format")
    if format == "openai":
        return openai_tools(tools)
    if format == "anthropic":
        return anthropic_tools(tools)
    return {name: {"description": t.description, "inputSchema": t.input_schema} for name, t in tools.items()}


class ManagedSession:
    """One session of a manager with the methods of a :class:`~actors.session_agent.SessionAgent`.

    The same methods, signatures and answers as the session actor (they are
    its functions, run on this session), except that metadata is kept per
    session id in the manager's file (removed with the session by
    :meth:`SessionManager.delete`). Made for one call by
    :meth:`ManagerAgent.call_session`.

    Attributes:
        session: the managed :class:`~actors.session.Session`.
        storage: the manager's file.
        session_id: the session's registry id.
        ctx: the manager actor's context (what the session actor's functions use of theirs, e.g.
            ``quiet_writes`` when the first read of the prompt stores it).
    """

    def __init__(self, session: Session, storage: Any, session_id: str, ctx: AgentContext) -> None:
        self.session = session
        self.storage = storage
        self.session_id = session_id
        self.ctx = ctx

    # -- messages (the session actor's own functions) ----------------------------------------
    append_message = SessionAgent.append_message
    append_messages = SessionAgent.append_messages
    get_history = SessionAgent.get_history
    get_message = SessionAgent.get_message
    update_message = SessionAgent.update_message
    delete_messages = SessionAgent.delete_messages
    clear_messages = SessionAgent.clear_messages
    get_branches = SessionAgent.get_branches
    get_latest_leaf = SessionAgent.get_latest_leaf
    get_path_length = SessionAgent.get_path_length
    search = SessionAgent.search
    search_status = SessionAgent.search_status
    reembed = SessionAgent.reembed
    # -- context blocks, prompt, tools, skills, compaction
    get_context_blocks = SessionAgent.get_context_blocks
    get_context_block = SessionAgent.get_context_block
    replace_context_block = SessionAgent.replace_context_block
    append_context_block = SessionAgent.append_context_block
    freeze_system_prompt = SessionAgent.freeze_system_prompt
    refresh_system_prompt = SessionAgent.refresh_system_prompt
    tools = SessionAgent.tools
    execute_tool = SessionAgent.execute_tool
    get_loaded_skill_keys = SessionAgent.get_loaded_skill_keys
    unload_skill = SessionAgent.unload_skill
    compact = SessionAgent.compact
    add_compaction = SessionAgent.add_compaction
    estimate_tokens = SessionAgent.estimate_tokens
    get_recent_history = SessionAgent.get_recent_history
    get_compactions = SessionAgent.get_compactions

    # -- metadata, per session id ---------------------------------------------------------------

    async def get_metadata(self) -> dict[str, Any]:
        """The session's metadata object (``{}`` until set)."""
        return read_metadata(self.storage, self.session_id)

    async def set_metadata(self, metadata: dict[str, Any]) -> dict[str, Any]:
        """Replace the session's metadata with a JSON object (at most 64 KiB); returns it.

        Raises:
            InvalidInputError: (``field="metadata"``) not a small JSON object.
        """
        return write_metadata(self.storage, metadata, self.session_id)


#: Names :meth:`ManagerAgent.call_session` serves: every public method of :class:`ManagedSession`.
MANAGED_METHODS: frozenset[str] = frozenset(
    name for name, value in vars(ManagedSession).items() if not name.startswith("_") and inspect.isfunction(value)
)


class ManagerAgent(Agent):
    """One SessionManager per actor: the manager's methods as stub methods.

    Args:
        ctx: the runtime context.
        env: a :class:`~actors.session_agent.SessionConfig` (``None``: the default configuration).

    Raises:
        TypeError: ``env`` is neither ``None`` nor a SessionConfig.
    """

    #: What each read returns for a manager that was never written (``runtime.manager_api.MANAGER_EMPTY_READS``).
    EMPTY_READS: ClassVar[Mapping[str, Any]] = MappingProxyType({"list": [], "get": None, "search": []})

    def __init__(self, ctx: AgentContext, env: SessionConfig | None = None) -> None:
        super().__init__(ctx, env)
        if env is not None and not isinstance(env, SessionConfig):
            raise TypeError(f"ManagerAgent needs a SessionConfig as env, not {type(env).__name__}")
        self.config = env or SessionConfig()
        self.manager = configure_manager(SessionManager.create(self), self.config.spec)
        self._with_search()

    # -- embedding after commit (semantic search) ----------------------------------------------------

    def _with_search(self) -> None:
        """With ``[search]``: every managed session marks its messages to embed, the alarm embeds them."""
        self._embedding_scheduled = False
        if self.config.search is not None:
            self.manager.with_embedder(embedder_for(self.config.search), on_pending=self._schedule_embedding)

    def _schedule_embedding(self) -> None:
        """Make the actor's alarm due now (unless it already is), to embed the pending messages."""
        SessionAgent._schedule_embedding(self)  # type: ignore[arg-type]  # uses ctx, storage and the flag only

    async def on_start(self) -> None:
        """With an embedder: mark the messages every session stored before it was configured (once
        per model, recorded in the actor's file), and schedule the alarm when any are pending (a
        restart or a wake finishes what an earlier activation left)."""
        embedder = self.manager.embedder
        if embedder is None:
            return
        key = f"embeddings_marked:{embedder.model}"
        if read_config(self.storage, "", key) is None:
            rows = await self.manager.list()
            with self.ctx.quiet_writes():
                for row in rows:
                    vectors = (await self.manager.get_session(row["id"])).vectors
                    if vectors is not None:
                        await vectors.mark_missing()
                write_config(self.storage, "", key, "1")
        if await self.manager.has_pending():
            self._schedule_embedding()

    async def alarm(self, info: AlarmInfo) -> None:
        """Embed every session's pending messages (off the actor's loop, a batch per transaction).
        A failing embedder raises, so the alarm is retried with backoff; the markers stay meanwhile."""
        self._embedding_scheduled = False
        with self.ctx.quiet_writes():
            await self.manager.embed_pending()

    # -- sessions ------------------------------------------------------------------------------

    async def create(
        self, name: str, parent_session_id: str | None = None, model: str | None = None, source: str | None = None
    ) -> Row:
        """Register a new session (a random UUID id) and return its row (see :meth:`SessionManager.create`).

        Raises:
            InvalidInputError: ``name`` is not a string, or an option neither a string nor ``None``.
        """
        return await self.manager.create(name, parent_session_id=parent_session_id, model=model, source=source)

    async def list(self) -> list[Row]:
        """Every session row, most recently updated first."""
        return await self.manager.list()

    async def get(self, session_id: str) -> Row | None:
        """The row of ``session_id``, or ``None`` when it is not registered."""
        return await self.manager.get(session_id)

    async def rename(self, session_id: str, name: str) -> Row:
        """Set the session's name; the new row. Raises NotFoundError, InvalidInputError."""
        return await self.manager.rename(session_id, name)

    async def delete(self, session_id: str) -> None:
        """Delete the session and every row it owns. Raises NotFoundError."""
        await self.manager.delete(session_id)

    async def fork(self, session_id: str, at_message_id: str, name: str) -> Row:
        """A new session holding the history up to ``at_message_id``; its row.

        Raises:
            NotFoundError: unknown ``session_id``.
            MessageNotFoundError: the session does not hold ``at_message_id``.
            InvalidInputError: a non-string argument.
        """
        return await self.manager.fork(session_id, at_message_id, name)

    async def compact_and_split(self, session_id: str, summary: str, name: str | None = None) -> Row:
        """End the session and continue in a new one starting from ``summary``; the new row."""
        return await self.manager.compact_and_split(session_id, summary, name)

    async def add_usage(self, session_id: str, input_tokens: int, output_tokens: int, cost: float) -> Row:
        """Add tokens and cost to the session's row; the new row. Raises NotFoundError, InvalidInputError."""
        return await self.manager.add_usage(session_id, input_tokens, output_tokens, cost)

    # -- messages of a session ------------------------------------------------------------------------

    async def append(self, session_id: str, message: Message, parent_id: str | None | object = LATEST_LEAF) -> str:
        """Append to the session (Session.append_message rules); the message id."""
        return await self.manager.append(session_id, message, parent_id)

    async def upsert(self, session_id: str, message: Message, parent_id: str | None | object = LATEST_LEAF) -> str:
        """Update the message if the session holds its id, else append it; its id."""
        return await self.manager.upsert(session_id, message, parent_id)

    async def append_all(
        self, session_id: str, messages: Sequence[Message], parent_id: str | None | object = LATEST_LEAF
    ) -> str | None:
        """Append a chain in one transaction; the last id, or ``None`` for an empty batch."""
        return await self.manager.append_all(session_id, messages, parent_id)

    async def get_history(self, session_id: str, leaf_id: str | None = None) -> builtins.list[Message]:
        """The session's path root -> leaf, overlays applied."""
        return await self.manager.get_history(session_id, leaf_id)

    async def get_message_count(self, session_id: str) -> int:
        """Stored messages on the path to the session's latest leaf."""
        return await self.manager.get_message_count(session_id)

    async def get_branches(self, session_id: str, message_id: str) -> builtins.list[Message]:
        """The children of ``message_id`` in the session, oldest first."""
        return await self.manager.get_branches(session_id, message_id)

    async def clear_messages(self, session_id: str) -> None:
        """Delete the session's messages and compactions (its row stays)."""
        await self.manager.clear_messages(session_id)

    async def delete_messages(self, session_id: str, message_ids: Iterable[str]) -> int:
        """Delete these messages of the session; how many existed."""
        return await self.manager.delete_messages(session_id, message_ids)

    async def add_compaction(self, session_id: str, summary: str, from_id: str, to_id: str) -> dict[str, str]:
        """Store an overlay in the session; the compaction record."""
        return await self.manager.add_compaction(session_id, summary, from_id, to_id)

    async def get_compactions(self, session_id: str) -> builtins.list[dict[str, str]]:
        """The session's compaction records, oldest first."""
        return await self.manager.get_compactions(session_id)

    # -- search and tools -----------------------------------------------------------------------------

    async def search(self, query: str, limit: int = 20, mode: str = "text") -> builtins.list[dict[str, str]]:
        """Search every session by words (``text``), meaning (``semantic``) or both (``hybrid``):
        ``{id, role, content, createdAt, sessionId}``, best first (:meth:`SessionManager.search`)."""
        return await self.manager.search(query, limit=limit, mode=mode)

    async def tools(self, format: str = "raw") -> dict[str, Any] | builtins.list[dict[str, Any]]:
        """The manager's tools (``session_search``), raw or as the OpenAI / Anthropic list.

        Raises:
            InvalidInputError: unknown ``format`` (``field="format"``).
        """
        return _tool_list(self.manager.tools(), format)

    async def execute_tool(self, name: str, args: Any) -> str:
        """Run the manager's tool ``name`` with ``args``; its result text (tool errors are ``Error: ...``).

        Raises:
            InvalidInputError: ``name`` is not a string.
            NotFoundError: (``kind="tool"``) no such tool.
        """
        if not isinstance(name, str):
            raise InvalidInputError(f"name must be a string, not {type(name).__name__}", field="name")
        tool = self.manager.tools().get(name)
        if tool is None:
            raise NotFoundError(f"no tool named {name!r}", kind="tool", key=name)
        return await tool.execute(args)

    # -- one managed session --------------------------------------------------------------------------

    async def call_session(
        self, session_id: str, method: str, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None
    ) -> Any:
        """Call the Session API method ``method(*args, **kwargs)`` on the managed session ``session_id``.

        Returns what :class:`~actors.session_agent.SessionAgent` returns for it.

        Raises:
            NotFoundError: ``session_id`` is not registered.
            InvalidInputError: ``session_id`` is not a string, ``args`` not a list or ``kwargs`` not an object.
            UnknownMethodError: ``method`` is not a Session API method.
            InvalidArgumentsError: the arguments do not fit it.
            Whatever the Session method raises.
        """
        function = managed_method(method)
        if isinstance(args, (str, bytes, Mapping)) or not isinstance(args, Sequence):
            raise InvalidInputError("args must be a list", field="args")
        kwargs = {} if kwargs is None else kwargs
        if not isinstance(kwargs, Mapping):
            raise InvalidInputError("kwargs must be an object", field="kwargs")
        try:
            inspect.signature(function).bind(None, *args, **kwargs)
        except TypeError as exc:
            raise InvalidArgumentsError(f"ManagedSession.{method}(): {exc}") from None
        session = await self.manager.get_session(session_id)
        return await function(self._managed_session(session, session_id), *args, **kwargs)

    def _managed_session(self, session: Session, session_id: str) -> ManagedSession:
        """The :class:`ManagedSession` one call runs on (``actors.manager_agent_postgres`` keeps its metadata
        in Postgres)."""
        return ManagedSession(session, self.storage, session_id, self.ctx)


def managed_method(name: Any) -> Any:
    """The function of :class:`ManagedSession` named ``name``.

    Raises:
        UnknownMethodError: not one of :data:`MANAGED_METHODS`.
    """
    if not isinstance(name, str) or name not in MANAGED_METHODS:
        raise UnknownMethodError("ManagedSession", str(name))
    return vars(ManagedSession)[name]
