"""The default session actor: :class:`SessionAgent`, one Session per actor, set up by a :class:`SessionConfig`.

The host binds it (``host.bind("sessions", SessionAgent, env=config)``);
every actor id is one conversation with its own SQLite file. Its public
methods are the Session API under the same snake_case names, callable
through stubs, the HTTP routes and WebSocket RPC frames. Each returns fresh
JSON data (dicts, lists, strings, numbers, booleans, ``None``), never
internal state, so a result can be sent over the wire as it is.

Configuration (:class:`SessionConfig`): context blocks in prompt order -- a
readonly *soul* (fixed text or a file), writable blocks with
``max_tokens``, a skills folder (:class:`~actors.skills.DirectorySkillProvider`),
searchable blocks (:class:`~actors.context.AgentSearchProvider`) -- the
cached prompt, and compaction (threshold and summarizer). The default is a
useful assistant session: the soul ``You are a helpful assistant.``, a
writable ``memory`` block of 1100 tokens, a cached prompt and extractive
compaction above 100,000 estimated tokens. A config is turned into one
frozen :class:`~actors.session_spec.SessionSpec` once
(:attr:`SessionConfig.spec`) and every actor's Session is built from it:
fixed-text and file blocks share one provider, a skills folder and search
entries get one provider per actor (its own file).

Hooks of the Session (skill tracking, ``cf_agent_session`` status
broadcasts to the actor's WebSocket peers, automatic compaction) run as in
any Session built with :meth:`~actors.session.Session.create` on the actor.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar, Literal

from common.errors import InvalidInputError, NotFoundError
from storage import SqlStorage
from storage.context import read_config, write_config

from .agent import Agent, AgentContext, AlarmInfo
from .compaction import CompactResult, create_compact_function, extractive_summarize
from .context import search_provider_for
from .session import LATEST_LEAF, Session
from .session_embeddings import EmbedderConfig, VectorSearchProvider, embedder_for
from .session_metadata import read_metadata, write_metadata
from .session_spec import PerSession, SessionSpec
from .skills import DirectorySkillProvider
from .tools import anthropic_tools, openai_tools

__all__ = [
    "DEFAULT_SOUL",
    "BlockConfig",
    "CompactionConfig",
    "SessionAgent",
    "SessionConfig",
    "resolve_summarizer",
]

#: The soul of the default configuration.
DEFAULT_SOUL = "You are a helpful assistant."
#: Block kinds: how a block's provider is made.
BLOCK_KINDS = ("readonly", "writable", "skills", "searchable")
#: Formats of :meth:`SessionAgent.tools`.
TOOL_FORMATS = ("raw", "openai", "anthropic")

BlockKind = Literal["readonly", "writable", "skills", "searchable"]
Message = dict[str, Any]


# -- configuration -------------------------------------------------------------------


@dataclass(frozen=True)
class BlockConfig:
    """One context block, in the order it appears in the system prompt.

    Attributes:
        label: the block label (non-empty).
        kind: ``"readonly"`` (``text`` or ``file``), ``"writable"`` (stored
            in the actor's file, limited by ``max_tokens``), ``"skills"``
            (Markdown files in the folder ``path``) or ``"searchable"``
            (entries indexed in the actor's file).
        description: shown in the block header, e.g. ``Learned facts``.
        max_tokens: writable blocks only: the limit writes must respect
            (estimated tokens); ``None`` for none.
        text: readonly blocks: the fixed content.
        file: readonly blocks: a UTF-8 file read on every (re)load instead of ``text``.
        path: skills blocks: the folder of ``<key>.md`` files.
        writable: skills blocks only: ``True`` lets every session write the
            folder (``set_context`` / ``set_skill``), which every other
            session then loads. ``False`` (default): the folder is read-only
            for sessions and writes are refused (``ContextBlockError``:
            ``does not support writes``); the operator edits the files.

    Raises:
        InvalidInputError: (``field`` names the culprit) an unknown kind, an
            empty label, or an option that does not belong to the kind.
    """

    label: str
    kind: BlockKind = "writable"
    description: str | None = None
    max_tokens: int | None = None
    text: str | None = None
    file: Path | None = None
    path: Path | None = None
    writable: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.label, str) or not self.label:
            raise InvalidInputError("a block label must be a non-empty string", field="label")
        if self.kind not in BLOCK_KINDS:
            raise InvalidInputError(
                f"block {self.label!r}: kind must be one of {', '.join(BLOCK_KINDS)}, not {self.kind!r}", field="kind"
            )
        if self.description is not None and not isinstance(self.description, str):
            raise InvalidInputError(f"block {self.label!r}: description must be a string", field="description")
        self._check_kind_options()

    def _check_kind_options(self) -> None:
        allowed = {"readonly": {"text", "file"}, "writable": {"max_tokens"}, "skills": {"path"}, "searchable": set()}
        for name in ("max_tokens", "text", "file", "path"):
            if getattr(self, name) is not None and name not in allowed[self.kind]:
                message = f"block {self.label!r}: {name} does not apply to a {self.kind} block"
                raise InvalidInputError(message, field=name)
        if self.max_tokens is not None and (
            isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or self.max_tokens < 0
        ):
            raise InvalidInputError(f"block {self.label!r}: max_tokens must be an integer >= 0", field="max_tokens")
        if self.kind == "readonly" and (self.text is None) == (self.file is None):
            raise InvalidInputError(f"readonly block {self.label!r} needs exactly one of text or file", field="text")
        if self.text is not None and not isinstance(self.text, str):
            raise InvalidInputError(f"block {self.label!r}: text must be a string", field="text")
        if self.kind == "skills" and self.path is None:
            raise InvalidInputError(f"skills block {self.label!r} needs a folder path", field="path")
        if not isinstance(self.writable, bool):
            raise InvalidInputError(f"block {self.label!r}: writable must be true or false", field="writable")
        if self.writable and self.kind != "skills":
            raise InvalidInputError(f"block {self.label!r}: writable does not apply to a {self.kind} block "
                                    "(the kind says it)", field="writable")


@dataclass(frozen=True)
class CompactionConfig:
    """How a session compacts (spec: Compaction; ``create_compact_function``).

    Attributes:
        threshold: compact automatically once the estimated tokens of history
            plus prompt exceed this; ``None`` compacts only on request.
        summarizer: ``"extractive"`` (:func:`actors.compaction.extractive_summarize`,
            no model needed) or ``"module:function"``, a callable
            ``(prompt: str) -> str`` (sync or async) importable here.
        protect_head: first messages never compacted.
        tail_token_budget: estimated tokens kept verbatim at the end.
        min_tail_messages: messages always kept at the end.
    """

    threshold: int | None = 100_000
    summarizer: str = "extractive"
    protect_head: int = 3
    tail_token_budget: int = 20_000
    min_tail_messages: int = 2

    def __post_init__(self) -> None:
        if self.threshold is not None and (
            isinstance(self.threshold, bool) or not isinstance(self.threshold, int) or self.threshold <= 0
        ):
            raise InvalidInputError("compaction threshold must be a positive integer or None", field="threshold")
        for name in ("protect_head", "tail_token_budget", "min_tail_messages"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidInputError(f"compaction {name} must be an integer >= 0", field=name)
        if not isinstance(self.summarizer, str) or not self.summarizer:
            raise InvalidInputError("summarizer must be 'extractive' or 'module:function'", field="summarizer")


def _default_blocks() -> tuple[BlockConfig, ...]:
    return (
        BlockConfig("soul", "readonly", text=DEFAULT_SOUL),
        BlockConfig("memory", "writable", description="Learned facts", max_tokens=1100),
    )


@dataclass(frozen=True)
class SessionConfig:
    """Everything that shapes a :class:`SessionAgent`'s session (shared by all its actors).

    Attributes:
        blocks: context blocks in prompt order (labels unique).
        cached_prompt: keep the frozen system prompt in the actor's file, so
            it survives hibernation unchanged (``with_cached_prompt``).
        compaction: compaction settings, or ``None`` for no compaction
            (``compact()`` then raises :class:`~common.errors.CompactionError`).
        search: the embedder of semantic and hybrid message search
            (:class:`~actors.session_embeddings.EmbedderConfig`, the config
            file's ``[search]``); ``None`` (default): text search only.

    Raises:
        InvalidInputError: two blocks share a label.
    """

    blocks: tuple[BlockConfig, ...] = field(default_factory=_default_blocks)
    cached_prompt: bool = True
    compaction: CompactionConfig | None = field(default_factory=CompactionConfig)
    search: EmbedderConfig | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "blocks", tuple(self.blocks))
        if self.search is not None and not isinstance(self.search, EmbedderConfig):
            raise InvalidInputError("search must be an EmbedderConfig or None", field="search")
        labels = [block.label for block in self.blocks]
        for label in labels:
            if labels.count(label) > 1:
                raise InvalidInputError(f'Block "{label}" already exists', field="blocks")

    @cached_property
    def spec(self) -> SessionSpec:
        """The frozen :class:`~actors.session_spec.SessionSpec` this config declares (blocks,
        cached prompt, compaction), made on first use; every actor's Session is built from it.

        Raises:
            InvalidInputError: a label or description the Session refuses, or
                a summarizer that cannot be loaded (:func:`resolve_summarizer`);
                nothing is kept, the next use tries again.
        """
        return _session_spec(self)


def resolve_summarizer(name: str) -> Callable[[str], Any]:
    """The summarizer a :class:`CompactionConfig` names.

    ``"extractive"`` gives :func:`actors.compaction.extractive_summarize`;
    ``"package.module:function"`` imports the module and returns the attribute.

    Raises:
        InvalidInputError: (``field="summarizer"``) malformed name, module not
            importable, attribute missing or not callable.
    """
    if name == "extractive":
        return extractive_summarize
    module_name, sep, attribute = name.partition(":")
    if not sep or not module_name or not attribute:
        message = f"summarizer must be 'extractive' or 'module:function', not {name!r}"
        raise InvalidInputError(message, field="summarizer")
    try:
        found = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise InvalidInputError(f"summarizer {name!r} cannot be loaded: {exc}", field="summarizer") from None
    if not callable(found):
        raise InvalidInputError(f"summarizer {name!r} is not callable", field="summarizer")
    return found


class _TextProvider:
    """A readonly block with fixed text."""

    def __init__(self, text: str) -> None:
        self.text = text

    async def get(self) -> str:
        return self.text


class _ReadOnlySkills:
    """A shared skills folder sessions may list and load but not write (``writable = false``)."""

    def __init__(self, folder: DirectorySkillProvider) -> None:
        self.folder = folder

    async def get(self) -> str | None:
        return await self.folder.get()

    async def load(self, key: str) -> str | None:
        return await self.folder.load(key)


class _FileProvider:
    """A readonly block read from a UTF-8 file at each (re)load."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    async def get(self) -> str:
        return self.path.read_text(encoding="utf-8")


def _provider(block: BlockConfig, search: EmbedderConfig | None = None) -> Any:
    """The provider a block of this kind declares: shared fixed text or file, one per session
    for the actor's skills folder and search entries, ``None`` (the actor's own row) for writable.
    (:class:`BlockConfig` checked that a readonly block has text or file and a skills block a path.)"""
    if block.kind == "readonly" and block.text is not None:
        return _TextProvider(block.text)
    if block.kind == "readonly" and block.file is not None:
        return _FileProvider(block.file)
    if block.kind == "skills" and block.path is not None:
        path = block.path
        if block.writable:
            return PerSession(lambda storage: DirectorySkillProvider(path))
        return PerSession(lambda storage: _ReadOnlySkills(DirectorySkillProvider(path)))
    if block.kind == "searchable" and search is not None:  # words and meaning, fused
        return PerSession(lambda storage: VectorSearchProvider(storage, embedder_for(search))
                          if isinstance(storage, SqlStorage) else search_provider_for(storage))
    if block.kind == "searchable":
        return PerSession(search_provider_for)
    return None  # writable: auto-wired to the actor's file by the engine


def _session_spec(config: SessionConfig) -> SessionSpec:
    """The frozen :class:`~actors.session_spec.SessionSpec` ``config`` declares.

    Raises:
        InvalidInputError: a label or description the Session refuses, or a
            summarizer that cannot be loaded (:func:`resolve_summarizer`).
    """
    spec = SessionSpec()
    for block in config.blocks:
        spec = spec.with_context(
            block.label, description=block.description, max_tokens=block.max_tokens,
            provider=_provider(block, config.search)
        )
    if config.cached_prompt:
        spec = spec.with_cached_prompt()
    compaction = config.compaction
    if compaction is not None:
        spec = spec.on_compaction(create_compact_function(
            summarize=resolve_summarizer(compaction.summarizer),
            protect_head=compaction.protect_head,
            tail_token_budget=compaction.tail_token_budget,
            min_tail_messages=compaction.min_tail_messages,
        ))
        if compaction.threshold is not None:
            spec = spec.compact_after(compaction.threshold)
    return spec


def _build_session(agent: Agent, config: SessionConfig) -> Session:
    """The actor's Session, built from ``config``'s spec (made once per config: :attr:`SessionConfig.spec`)."""
    return Session.create(agent, spec=config.spec)


_ACTOR_NAME_KEY = "actor_name"


def _remember_actor_name(agent: Agent) -> str | None:
    """The name the actor is addressed by (the client's session id), kept in its file.

    A call routed by name carries it; an activation without one (an alarm
    after a restart) reads the stored copy, so broadcasts always name the
    session (docs/deviations.md #16). ``None`` for an actor only ever reached by hex id.
    """
    stored = read_config(agent.storage, "", _ACTOR_NAME_KEY)
    name = agent.ctx.id.name
    if name is None or name == stored:
        return stored
    write_config(agent.storage, "", _ACTOR_NAME_KEY, name)
    return name


# -- the actor -------------------------------------------------------------------------


class SessionAgent(Agent):
    """One conversation per actor: the Session API as stub methods.

    Args:
        ctx: the runtime context.
        env: a :class:`SessionConfig` (``None``: the default configuration).

    Raises:
        TypeError: ``env`` is neither ``None`` nor a :class:`SessionConfig`.

    Methods raise the errors of :mod:`common.errors` (each carries its HTTP
    ``status``): :class:`~common.errors.InvalidInputError` for bad arguments
    (``.field`` names it), :class:`~common.errors.NotFoundError` for unknown
    messages or tools, :class:`~common.errors.CompactionError` when
    compaction is not configured.

    The methods are the Session API table ``runtime.api.SESSION_API``:
    written out here (``actors`` does not import ``runtime``; readers, IDEs
    and type checkers see them), and ``tests/runtime/test_api_table.py``
    keeps their names, parameters and defaults, and :attr:`EMPTY_READS`,
    equal to the table's.
    """

    #: What each read returns for a session that was never written (``runtime.api.EMPTY_READS``).
    #: The server answers these without waking (so without creating) the actor: reading a mistyped
    #: session id leaves no file behind. Config-dependent reads (prompt, blocks, tools) still wake it.
    EMPTY_READS: ClassVar[Mapping[str, Any]] = MappingProxyType({
        "get_history": [], "get_message": None, "get_branches": [], "get_latest_leaf": None,
        "get_path_length": 0, "search": [], "get_compactions": [], "get_loaded_skill_keys": [],
    })

    def __init__(self, ctx: AgentContext, env: SessionConfig | None = None) -> None:
        super().__init__(ctx, env)
        if env is not None and not isinstance(env, SessionConfig):
            raise TypeError(f"SessionAgent needs a SessionConfig as env, not {type(env).__name__}")
        self.config = env or SessionConfig()
        self.session = _build_session(self, self.config)
        self._embedding_scheduled = False
        if self.config.search is not None:
            self.session.with_embedder(embedder_for(self.config.search), on_pending=self._schedule_embedding)
        name = _remember_actor_name(self)
        if name is not None:
            self.session.with_broadcast_id(name)

    # -- embedding after commit (semantic search) --------------------------------------

    async def on_start(self) -> None:
        """With an embedder: mark the messages stored before it was configured (once per
        model), and schedule the alarm that embeds whatever is pending (a restart or a
        wake finishes what an earlier activation left)."""
        vectors = self.session.vectors
        if vectors is None:
            return
        key = f"embeddings_marked:{vectors.model}"
        if read_config(self.storage, "", key) is None and await vectors.has_messages():
            with self.ctx.quiet_writes():
                await vectors.mark_missing()
                write_config(self.storage, "", key, "1")
        if await vectors.pending():
            self._schedule_embedding()

    def _schedule_embedding(self) -> None:
        """Make the actor's alarm due now (unless it already is), to embed the pending messages."""
        if self._embedding_scheduled:
            return
        due = self.ctx.now_ms()
        scheduled = self.storage.get_alarm()
        if scheduled is None or scheduled > due:
            with self.ctx.quiet_writes():
                self.storage.set_alarm(due)
        self._embedding_scheduled = True

    async def alarm(self, info: AlarmInfo) -> None:
        """Embed the pending messages (off the actor's loop, a batch per transaction). A failing
        embedder raises, so the alarm is retried with backoff; the markers stay meanwhile."""
        self._embedding_scheduled = False
        with self.ctx.quiet_writes():
            await self.session.embed_pending()

    # -- messages --------------------------------------------------------------------

    async def append_message(self, message: Message, parent_id: str | None | object = LATEST_LEAF) -> bool:
        """Append ``message`` under ``parent_id`` (omitted: the latest leaf; ``None``: a new root).

        Returns ``True`` if stored, ``False`` for a duplicate id or an overlay id.

        Raises:
            InvalidMessageError: not ``{"id": str, "role": str, "parts": list}``.
            InvalidInputError: ``parent_id`` is not a string or ``None``.
        """
        return await self.session.append_message(message, parent_id)

    async def append_messages(
        self, messages: Sequence[Message], parent_id: str | None | object = LATEST_LEAF
    ) -> list[bool]:
        """Append ``messages`` as one chain in one transaction: the first under
        ``parent_id`` (as :meth:`append_message`), each next one under the one
        before (:meth:`Session.append_messages`).

        All or nothing: a bad message (or a storage error) leaves the session
        untouched. One status broadcast follows the whole batch. Returns one
        ``inserted`` flag per message.

        Raises:
            InvalidMessageError: ``field`` is ``messages[<i>]...`` for the first bad message.
            InvalidInputError: ``messages`` is not a list, or a bad ``parent_id``.
        """
        return await self.session.append_messages(messages, parent_id)

    async def get_history(
        self, leaf_id: str | None = None, limit: int | None = None, before: str | None = None, overlays: bool = True,
    ) -> list[Message]:
        """The path root -> ``leaf_id`` (default: latest leaf), compaction overlays applied; with ``limit``
        or ``before``, one page of it, and with ``overlays=False`` the stored messages
        (:meth:`Session.get_history`)."""
        return await self.session.get_history(leaf_id, limit=limit, before=before, overlays=overlays)

    async def get_message(self, message_id: str) -> Message | None:
        """The stored message, or ``None``."""
        return await self.session.get_message(message_id)

    async def update_message(self, message: Message) -> None:
        """Replace the stored message with ``message["id"]`` (its place in the tree is kept).

        Raises:
            InvalidMessageError: malformed ``message``.
            MessageNotFoundError: no such id (nothing written).
        """
        await self.session.update_message(message)

    async def delete_messages(self, message_ids: Sequence[str]) -> int:
        """Delete these messages (children move up to the parent); returns how many existed."""
        return await self.session.delete_messages(message_ids)

    async def clear_messages(self) -> None:
        """Delete every message and compaction; unload all skills; refresh the prompt."""
        await self.session.clear_messages()

    async def get_branches(self, message_id: str) -> list[Message]:
        """The children of ``message_id``, oldest first."""
        return await self.session.get_branches(message_id)

    async def get_latest_leaf(self) -> Message | None:
        """The latest leaf message, or ``None`` in an empty session."""
        return await self.session.get_latest_leaf()

    async def get_path_length(self, leaf_id: str | None = None) -> int:
        """Stored messages on the path to ``leaf_id`` (default: latest leaf), overlays not applied."""
        return await self.session.get_path_length(leaf_id)

    async def search(self, query: str, limit: int = 20, mode: str = "text") -> list[dict[str, str]]:
        """Search by ``mode`` (``"text"``, ``"semantic"``, ``"hybrid"``): up to ``limit`` hits
        ``{"id", "role", "content", "createdAt"}``, best first (:meth:`Session.search`)."""
        return await self.session.search(query, limit=limit, mode=mode)

    async def reembed(self) -> dict[str, Any]:
        """Drop the session's vectors and embed every message again with the configured embedder
        (after the reply, as for appends); returns the search status (:meth:`Session.reembed`)."""
        return await self.session.reembed()

    async def search_status(self) -> dict[str, Any]:
        """``{"embedder", "dimension", "embedded", "pending"}``: how many messages semantic search
        finds and how many still wait for their vector (:meth:`Session.search_status`)."""
        return await self.session.search_status()

    # -- metadata ----------------------------------------------------------------------------

    async def get_metadata(self) -> dict[str, Any]:
        """The session's metadata object (``{}`` until set; see :mod:`actors.session_metadata`)."""
        return read_metadata(self.storage)

    async def set_metadata(self, metadata: dict[str, Any]) -> dict[str, Any]:
        """Replace the session's metadata with a JSON object (at most 64 KiB); returns it.

        Raises:
            InvalidInputError: (``field="metadata"``) not a small JSON object.
        """
        return write_metadata(self.storage, metadata)

    # -- context blocks and the system prompt ---------------------------------------------

    async def get_context_blocks(self) -> list[dict[str, Any]]:
        """Every block ``{label, description, content, tokens, maxTokens, writable, isSkill, isSearchable}``."""
        return [dict(block) for block in await self.session.get_context_blocks()]

    async def get_context_block(self, label: str) -> dict[str, Any] | None:
        """Block ``label``, or ``None`` when there is none."""
        block = await self.session.get_context_block(label)
        return None if block is None else dict(block)

    async def replace_context_block(self, label: str, content: str) -> dict[str, Any]:
        """Replace the content of a writable block; returns the new block.

        Raises:
            ContextBlockError: readonly/unknown, keyed, or over ``max_tokens`` (message as in the spec).
        """
        return dict(await self.session.replace_context_block(label, content))

    async def append_context_block(self, label: str, content: str) -> dict[str, Any]:
        """Append to a writable block (a newline between when needed); returns the new block.

        Raises:
            ContextBlockError: ``Block "<label>" not found``, or as :meth:`replace_context_block`.
        """
        return dict(await self.session.append_context_block(label, content))

    async def freeze_system_prompt(self) -> str:
        """The frozen system prompt (rendered and stored on first use).

        Storing it on first use is upkeep of a read: it does not move the session's ``updatedAt``.
        """
        with self.ctx.quiet_writes():
            return await self.session.freeze_system_prompt()

    async def refresh_system_prompt(self) -> str:
        """Re-render the system prompt from the blocks now, store and return it."""
        return await self.session.refresh_system_prompt()

    # -- tools and skills ---------------------------------------------------------------------

    async def tools(self, format: str = "raw") -> dict[str, Any] | list[dict[str, Any]]:
        """The AI tools of the current blocks.

        Args:
            format: ``"raw"`` -> ``{name: {"description", "inputSchema"}}`` in
                tool order; ``"openai"`` -> the OpenAI ``tools`` list;
                ``"anthropic"`` -> the Anthropic ``tools`` list.

        Raises:
            InvalidInputError: unknown ``format`` (``field="format"``).
        """
        if format not in TOOL_FORMATS:
            raise InvalidInputError(f"format must be one of {', '.join(TOOL_FORMATS)}, not {format!r}", field="format")
        tools = await self.session.tools()
        if format == "openai":
            return openai_tools(tools)
        if format == "anthropic":
            return anthropic_tools(tools)
        return {name: {"description": t.description, "inputSchema": t.input_schema} for name, t in tools.items()}

    async def execute_tool(self, name: str, args: Any) -> str:
        """Run tool ``name`` with ``args``; its result string (tool errors are ``Error: ...`` strings).

        Raises:
            InvalidInputError: ``name`` is not a string (``field="name"``).
            NotFoundError: (``kind="tool"``) no tool of that name for the current blocks.
        """
        if not isinstance(name, str):
            raise InvalidInputError(f"name must be a string, not {type(name).__name__}", field="name")
        tool = (await self.session.tools()).get(name)
        if tool is None:
            raise NotFoundError(f"no tool named {name!r}", kind="tool", key=str(name))
        return await tool.execute(args)

    async def get_loaded_skill_keys(self) -> list[str]:
        """Loaded skills as ``"label:key"`` strings, in load order."""
        return list(await self.session.get_loaded_skill_keys())

    async def unload_skill(self, label: str, key: str) -> bool:
        """Unload ``label:key`` (its stored output becomes a marker); ``False`` if it was not loaded."""
        return await self.session.unload_skill(label, key)

    # -- compaction -----------------------------------------------------------------------------

    async def compact(self) -> CompactResult | None:
        """Compact now; ``{"fromMessageId", "toMessageId", "summary"}``, or ``None`` when nothing
        was compacted (too short, or the summarizer failed: ``cf_agent_session_error`` is broadcast).

        Raises:
            CompactionError: the config has no compaction.
        """
        return await self.session.compact()

    async def add_compaction(self, summary: str, from_id: str, to_id: str) -> dict[str, str]:
        """Store an overlay ``from_id..to_id`` -> ``summary``; returns the compaction record."""
        return await self.session.add_compaction(summary, from_id, to_id)

    async def estimate_tokens(self) -> int:
        """The estimated tokens of history plus system prompt (what auto-compaction compares)."""
        return await self.session.estimate_tokens()

    async def get_recent_history(self, max_bytes: int, min_recent: int = 1) -> dict[str, Any]:
        """The newest messages that fit ``max_bytes`` of stored JSON: ``{messages, truncated, totalContentBytes}``."""
        return await self.session.get_recent_history(max_bytes, min_recent)

    async def get_compactions(self) -> list[dict[str, str]]:
        """Every compaction record ``{id, summary, fromMessageId, toMessageId, createdAt}``, oldest first."""
        return await self.session.get_compactions()
