"""Context blocks, their providers, and the frozen system prompt (docs/behaviours.md §3, §4).

A *context block* is a labelled section of the system prompt whose content
comes from a *provider*. What a provider can do decides what the block is
(duck typing, as in the original):

===================  =====================================  =============
provider has         block is                               header tag
===================  =====================================  =============
``get``              read-only                              ``[readonly]``
``get`` + ``set``    writable (``set_context``)             ``[writable]``
``get`` + ``load``   a skill collection (``load_context``)  ``[loadable]``
``get`` + ``search`` searchable (``search_context``)        ``[searchable]``
===================  =====================================  =============

Every provider method is ``async`` (a plain function works too); ``init(label)``
is optional and runs before every full load.

:class:`ContextBlocks` is the engine a ``Session`` delegates to: its
declared blocks (a frozen :class:`~actors.session_spec.ContextSpec`, given
at construction or grown by :meth:`~ContextBlocks.with_context` and
:meth:`~ContextBlocks.with_cached_prompt`; :meth:`~ContextBlocks.for_session`
names the rows), block reads and writes, the frozen
prompt, the AI tools and the loaded-skill set. It loads blocks on demand --
reading a block after a wake works even when the prompt came from the cache
(docs/deviations.md #3) -- and re-reads them after a write through a provider or file
it shares with another engine (manager sessions, a search label, a skill
folder), so a session that stayed awake never shows older content than one
that woke up. Its host (the Session) is reached only through
:class:`actors.skills.SkillHost`.
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import KeysView
from dataclasses import replace
from typing import Any, Literal, Protocol, TypedDict, runtime_checkable

from common.errors import ConflictError, ContextBlockError, InvalidInputError
from storage import context as sql
from storage.sqlite import SqlStorage

from .session_spec import BlockSpec, ContextSpec, PerSession, has_method
from .session_spec import check_text as _check_text
from .skills import SkillHost, SkillTracker, skill_events
from .tokens import estimate_string_tokens
from .tools import Tool, build_context_tools, percent

#: Line above and below each block header: 46 x U+2550.
SEPARATOR = "═" * 46


# -- provider protocols ------------------------------------------------------------


@runtime_checkable
class ContextProvider(Protocol):
    """Read-only block: ``get()`` -> the content, or ``None`` for none (rendered as ``""``).

    Optional ``init(label)``: called with the block label before each full load.
    """

    async def get(self) -> str | None: ...


@runtime_checkable
class WritableContextProvider(ContextProvider, Protocol):
    """Writable block: ``set(content)`` stores the whole content."""

    async def set(self, content: str) -> None: ...


@runtime_checkable
class SkillProvider(ContextProvider, Protocol):
    """Skill collection: ``get()`` lists the skills, ``load(key)`` returns one (or ``None``).

    Optional ``set(key, content, description=None)`` makes the block writable.
    """

    async def load(self, key: str) -> str | None: ...


@runtime_checkable
class SearchProvider(ContextProvider, Protocol):
    """Searchable block: ``get()`` summarises, ``search(query)`` returns text (or ``None``).

    Optional ``set(key, content)`` makes the block writable.
    """

    async def search(self, query: str) -> str | None: ...


def is_writable_provider(provider: Any) -> bool:
    """``True`` when ``provider`` has a callable ``set`` (skill and search providers included)."""
    return has_method(provider, "set")


def is_skill_provider(provider: Any) -> bool:
    """``True`` when ``provider`` has a callable ``load``."""
    return has_method(provider, "load")


def is_search_provider(provider: Any) -> bool:
    """``True`` when ``provider`` has a callable ``search``."""
    return has_method(provider, "search")


async def _call(fn: Any, *args: Any) -> Any:
    result = fn(*args)
    return await result if inspect.isawaitable(result) else result


# -- block records and rendering ---------------------------------------------------------


class ContextBlock(TypedDict):
    """A block as read from :class:`ContextBlocks` (JSON keys of the spec).

    ``description`` and ``maxTokens`` are ``None`` when unset; ``tokens`` is
    :func:`~actors.tokens.estimate_string_tokens` of ``content``.
    """

    label: str
    description: str | None
    content: str
    tokens: int
    maxTokens: int | None
    writable: bool
    isSkill: bool
    isSearchable: bool


def render_header(block: ContextBlock) -> str:
    """``LABEL (description) [pct% — tokens/max tokens] [tag]`` (docs/behaviours.md §4).

    The label is upper-cased with full Unicode rules (``straße`` ->
    ``STRASSE``); description and usage appear only when truthy; the tag is
    ``searchable``, else ``loadable``, else ``readonly``, else ``writable``.
    """
    header = block["label"].upper()
    if block["description"]:
        header += f" ({block['description']})"
    if block["maxTokens"]:
        pct = percent(block["tokens"], block["maxTokens"])
        header += f" [{pct}% — {block['tokens']}/{block['maxTokens']} tokens]"
    if block["isSearchable"]:
        return header + " [searchable]"
    if block["isSkill"]:
        return header + " [loadable]"
    return header + (" [writable]" if block["writable"] else " [readonly]")


def render_prompt(blocks: list[ContextBlock]) -> str:
    """The system prompt: each block as ``SEP\\nHEADER\\nSEP\\ncontent``, joined by a blank line.

    An empty read-only block (not writable, not a skill, not searchable) is
    left out; no blocks give ``""``. No trailing newline is added.
    """
    parts = [
        f"{SEPARATOR}\n{render_header(b)}\n{SEPARATOR}\n{b['content']}"
        for b in blocks
        if b["content"] or b["writable"] or b["isSearchable"] or b["isSkill"]
    ]
    return "\n\n".join(parts)


# -- the built-in SQLite providers ----------------------------------------------------------


def _sqlite(storage: Any, name: str) -> SqlStorage:
    """``storage`` if it is a :class:`SqlStorage`, else TypeError naming the Postgres twin to use."""
    if not isinstance(storage, SqlStorage):
        raise TypeError(
            f"{name} needs a SqlStorage, not {type(storage).__name__} "
            "(on Postgres: PostgresContextProvider / PostgresSearchProvider, or row_provider / search_provider_for)"
        )
    return storage


class AgentContextProvider:
    """A writable block stored as one ``cf_agents_context_blocks`` row.

    Args:
        storage: the actor's :class:`~storage.SqlStorage`.
        key: the row's ``label``; when ``None`` the block label given to
            :meth:`init` is used (an explicit key is never replaced).
    """

    def __init__(self, storage: SqlStorage, key: str | None = None) -> None:
        self.storage = _sqlite(storage, "AgentContextProvider")
        self.key = key or ""

    def init(self, label: str) -> None:
        if not self.key:
            self.key = label

    async def get(self) -> str | None:
        return sql.read_block(self.storage, self.key)

    async def set(self, content: str) -> None:
        sql.write_block(self.storage, self.key, content)


class AgentSearchProvider:
    """A searchable block over ``cf_agents_search_entries`` (+ full-text index).

    Entries are filed under the block label from :meth:`init`, so every
    session using that label shares them. Queries follow
    :mod:`storage.fts` (each word must match, ``"phrases"``, no FTS5
    syntax, CJK via the trigram twin).
    """

    def __init__(self, storage: SqlStorage) -> None:
        self.storage = _sqlite(storage, "AgentSearchProvider")
        self.label = ""

    def init(self, label: str) -> None:
        self.label = label

    async def get(self) -> str | None:
        """``"<n> entries indexed."`` (also for 1), or ``None`` with no entries."""
        return sql.entries_summary(sql.count_search_entries(self.storage, self.label))

    async def search(self, query: str) -> str | None:
        """Best 10 matches as ``[<key>]\\n<content>`` joined by a blank line, or ``None``.

        Raises:
            storage.SearchQueryError: SQLite failed (never for user text).
        """
        rows = sql.search_entries(self.storage, self.label, query, sql.SEARCH_LIMIT)
        return sql.entries_text([(r["key"], r["content"]) for r in rows])

    async def set(self, key: str, content: str) -> None:
        """Insert or replace entry ``key`` and its index rows, atomically."""
        sql.upsert_search_entry(self.storage, self.label, key, content)


def row_provider(storage: Any, key: str) -> Any:
    """The writable block row ``key`` of ``storage``: an :class:`AgentContextProvider` on a
    :class:`~storage.SqlStorage`, ``storage.block(key)`` on a :class:`~storage.postgres.PostgresStorage`."""
    return AgentContextProvider(storage, key) if isinstance(storage, SqlStorage) else storage.block(key)


def search_provider_for(storage: Any) -> Any:
    """A searchable block over ``storage``'s entries: an :class:`AgentSearchProvider` on a
    :class:`~storage.SqlStorage`, ``storage.search()`` on a :class:`~storage.postgres.PostgresStorage`
    (a :class:`~actors.session_spec.PerSession` maker)."""
    return AgentSearchProvider(storage) if isinstance(storage, SqlStorage) else storage.search()


# -- writes seen by every engine ------------------------------------------------------------------


class _WriteCounts:
    """How many block writes went through each provider object and each storage file.

    A provider can be shared -- a SessionManager hands the same object to
    every session, several sessions on one file share search entries by
    label, two actors may share a skill folder -- so a block another engine
    loaded earlier can be stale. Engines compare these counts with the ones
    they loaded at and re-read their blocks when they moved (docs/deviations.md #3:
    a session that did not hibernate must not show older content than one
    that did). Weak keys: nothing is kept alive; an object that cannot be
    weakly referenced or hashed is not tracked.

    :attr:`generation` moves at every bump, of any source: while it has not
    moved, no count has (a cheap check before comparing counts).
    """

    def __init__(self) -> None:
        self._counts: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        self.generation = 0

    def bump(self, source: Any) -> None:
        self.generation += 1
        try:
            self._counts[source] = self._counts.get(source, 0) + 1
        except TypeError:
            pass

    def count(self, source: Any) -> int:
        try:
            return self._counts.get(source, 0)
        except TypeError:
            return 0


_WRITES = _WriteCounts()

#: Writes of a session's default cached-prompt row (``_system_prompt[_<session id>]``) per storage file:
#: an engine holds the stored prompt it read while this count is unchanged (see ``ContextBlocks._stored_prompt``).
_PROMPT_WRITES = _WriteCounts()


def mark_block_source_changed(source: Any) -> None:
    """Tell every context engine that blocks read from ``source`` may have changed.

    ``source`` is a provider object or a :class:`~storage.SqlStorage`.
    Writes through an engine (``replace_context_block``, ``set_skill``,
    ``set_search_entry``, the ``set_context`` tool) call this themselves;
    call it when a provider's content changes another way (e.g. a
    manager's session count behind its searchable-history block). Engines
    that loaded blocks from it re-read them (``get()`` only) before their
    next block read.
    """
    _WRITES.bump(source)


# -- the engine ---------------------------------------------------------------------------


def _check_label(label: Any) -> str:
    """``label`` if it is a ``str`` (any string may name a block), else InvalidInputError."""
    if not isinstance(label, str):
        raise InvalidInputError(f"label must be a string, not {type(label).__name__}", field="label")
    return label


def _provider_text(value: Any, label: str, method: str) -> str:
    """What a provider's ``get()``/``load()`` returned, as block text (``None`` -> ``""``)."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise TypeError(f'provider of block "{label}" returned {type(value).__name__} from {method}(), not str or None')
    return value


class ContextBlocks:
    """Context blocks, frozen system prompt, AI tools and loaded skills of one session.

    Args:
        storage: the actor's SQLite file. Blocks without a provider are
            auto-wired to :class:`AgentContextProvider` rows
            (``<label>_<session_id>``, or ``<label>`` without a session id),
            the cached prompt to ``_system_prompt[_<session_id>]``, and the
            loaded-skill set to an ``assistant_config`` row. A
            :class:`~storage.postgres.PostgresStorage` wires the same rows in
            Postgres (``storage.block(key)``). ``None``: blocks without a
            provider are empty and read-only, nothing is persisted.
        host: the session's history (:class:`~actors.skills.SkillHost`), used
            to rewrite unloaded skills and for the one-time restore scan.
        session_id: namespace of auto-wired rows (``""`` for none).
        spec: the declared blocks and prompt store (default: none); a
            :class:`~actors.session_spec.PerSession` provider is made here,
            from ``storage``, on first use.
        state: where the loaded-skill set is kept when ``storage`` is not a
            SQLite file: an object with ``async get_config(key)`` /
            ``set_config(key, value)`` / ``delete_config(key)`` scoped to this
            session (a :class:`~storage.postgres.PostgresSessionProvider`),
            or ``None`` (kept in memory, rebuilt by a history scan on wake).

    Raises:
        InvalidInputError: ``spec`` keeps the prompt in the default row and
            there is no ``storage``.

    Builder calls (:meth:`with_context`, :meth:`with_cached_prompt`,
    :meth:`for_session`) are plain and chainable; everything else is async
    and resolves the configuration on first use, after which the builder
    raises :class:`~common.errors.ConflictError`.

    After each stored message the host calls :meth:`note_appended` (or
    :meth:`note_updated`); after clearing messages :meth:`note_cleared`.
    """

    def __init__(
        self,
        storage: SqlStorage | None = None,
        *,
        host: SkillHost | None = None,
        session_id: str = "",
        spec: ContextSpec | None = None,
        state: Any = None,
    ) -> None:
        self._storage = storage
        self._state = state
        self._host = host
        self._session_id = session_id
        self._spec = ContextSpec()
        if spec is not None:
            self._declare("ContextBlocks", spec)
        self._configs: list[BlockSpec] | None = None
        self._auto_keys: list[str] = []
        self._prompt_store: Any = None
        self._blocks: dict[str, ContextBlock] | None = None
        self._writes_seen: tuple[int, tuple[int, ...]] | None = None
        self._generation_seen = -1  # _WRITES.generation when _writes_seen was last found current
        self._snapshot: str | None = None
        self._skills: SkillTracker | None = None
        # The stored prompt as last read, with the write counts it was read at (see _stored_prompt).
        self._stored: tuple[tuple[int, int], str | None] | None = None
        self._holds_stored: bool | None = None
        # The blocks' version (moves at every change of self._blocks) and the prompt rendered at one.
        self._blocks_version = 0
        self._rendered: tuple[int, str] | None = None

    # -- builder ------------------------------------------------------------------

    @property
    def spec(self) -> ContextSpec:
        """The declared blocks and prompt store (blocks added by :meth:`add_context` are not in it)."""
        return self._spec

    def _check_unresolved(self, method: str) -> None:
        if self._configs is not None:
            raise ConflictError(f"{method}() configures the session and must come before its first use")

    def _declare(self, method: str, spec: ContextSpec) -> ContextBlocks:
        if spec.cached_prompt and spec.prompt_store is None and self._storage is None:
            raise InvalidInputError(f"{method}() needs a provider when there is no storage", field="provider")
        self._spec = spec
        return self

    def with_state(self, state: Any) -> ContextBlocks:
        """Keep the loaded-skill set in ``state`` (see the ``state`` argument). Returns ``self``.

        Raises:
            ConflictError: the engine is in use.
        """
        self._check_unresolved("with_state")
        self._state = state
        return self

    def for_session(self, session_id: str) -> ContextBlocks:
        """Namespace auto-wired rows by ``session_id``. Returns ``self``."""
        self._check_unresolved("for_session")
        if not isinstance(session_id, str):
            raise InvalidInputError("session_id must be a string", field="session_id")
        self._session_id = _check_text(session_id, "session_id")
        return self

    def with_context(
        self, label: str, *, description: str | None = None, max_tokens: int | None = None, provider: Any = None
    ) -> ContextBlocks:
        """Declare a block (prompt order = call order; see :meth:`ContextSpec.with_block`). Returns ``self``.

        Raises:
            InvalidInputError: empty label, non-string description, negative
                ``max_tokens``, or a provider without ``get``.
            ConflictError: the label is already declared
                (``Block "<label>" already exists``), or the engine is in use.
        """
        self._check_unresolved("with_context")
        spec = self._spec.with_block(label, description=description, max_tokens=max_tokens, provider=provider)
        return self._declare("with_context", spec)

    def with_cached_prompt(self, provider: Any = None) -> ContextBlocks:
        """Persist the frozen prompt in ``provider`` (``get``/``set(content)``), or by
        default in the ``_system_prompt[_<session_id>]`` row. Returns ``self``.

        Raises:
            InvalidInputError: ``provider`` lacks ``get``/``set``, or no provider
                and no storage.
        """
        self._check_unresolved("with_cached_prompt")
        return self._declare("with_cached_prompt", self._spec.with_cached_prompt(provider))

    @property
    def session_id(self) -> str:
        return self._session_id

    def _auto_key(self, label: str) -> str:
        return f"{label}_{self._session_id}" if self._session_id else label

    def _wire(self, config: BlockSpec) -> BlockSpec:
        """``config`` with the provider this session reads: its own row for ``None``,
        a made one for a :class:`PerSession`, else the shared object."""
        if isinstance(config.provider, PerSession):
            return replace(config, provider=config.provider.make(self._storage))
        if config.provider is None and self._storage is not None:
            key = self._auto_key(config.label)
            self._auto_keys.append(key)
            return replace(config, provider=row_provider(self._storage, key))
        return config

    def _resolve(self) -> list[BlockSpec]:
        if self._configs is None:
            self._configs = [self._wire(c) for c in self._spec.all_blocks]
            if self._spec.prompt_store is not None:
                self._prompt_store = self._spec.prompt_store
            elif self._spec.cached_prompt:
                self._prompt_store = row_provider(self._storage, self._default_prompt_key())
            state = self._storage if isinstance(self._storage, SqlStorage) else self._state
            self._skills = SkillTracker(state, self._session_id, self._host)
        return self._configs

    def _default_prompt_key(self) -> str:
        return f"_system_prompt_{self._session_id}" if self._session_id else "_system_prompt"

    # -- loading --------------------------------------------------------------------

    async def _read(self, config: BlockSpec) -> ContextBlock:
        provider = config.provider
        content = _provider_text(await _call(provider.get) if provider is not None else None, config.label, "get")
        return ContextBlock(
            label=config.label,
            description=config.description,
            content=content,
            tokens=estimate_string_tokens(content),
            maxTokens=config.max_tokens,
            writable=is_writable_provider(provider),
            isSkill=is_skill_provider(provider),
            isSearchable=is_search_provider(provider),
        )

    async def _init_and_read(self, config: BlockSpec) -> ContextBlock:
        if has_method(config.provider, "init"):
            await _call(config.provider.init, config.label)
        return await self._read(config)

    async def _load_all(self) -> dict[str, ContextBlock]:
        """Full load: ``init`` + ``get`` of every provider, in config order."""
        seen = self._writes_signature()
        blocks = {}
        for config in list(self._resolve()):
            blocks[config.label] = await self._init_and_read(config)
        self._blocks, self._writes_seen = blocks, seen
        self._blocks_version += 1
        return blocks

    async def _loaded(self) -> dict[str, ContextBlock]:
        """The blocks, loaded on first use and re-read (``get()``) after a write
        through a shared provider or storage file (see :class:`_WriteCounts`)."""
        self._resolve()
        if self._blocks is None:
            return await self._load_all()
        generation = _WRITES.generation
        if generation == self._generation_seen:  # no block write anywhere since the last check
            return self._blocks
        seen = self._writes_signature()
        self._generation_seen = generation
        if seen != self._writes_seen:
            blocks = {}
            for config in list(self._resolve()):
                blocks[config.label] = await self._read(config)
            self._blocks, self._writes_seen = blocks, seen
            self._blocks_version += 1
        return self._blocks

    def _writes_signature(self) -> tuple[int, tuple[int, ...]]:
        return _WRITES.count(self._storage), tuple(_WRITES.count(c.provider) for c in self._configs or ())

    def _wrote(self, config: BlockSpec) -> None:
        """Record a successful write through ``config``'s provider (this engine's blocks stay current)."""
        if self._storage is not None:
            _WRITES.bump(self._storage)
        _WRITES.bump(config.provider)
        self._writes_seen = self._writes_signature()

    def _config(self, label: str) -> BlockSpec | None:
        return next((c for c in self._resolve() if c.label == label), None)

    def _block_config(self, label: str) -> BlockSpec:
        """The config of loaded block ``label`` (every loaded block has one)."""
        return next(c for c in self._resolve() if c.label == label)

    def _skill_tracker(self) -> SkillTracker:
        """The loaded-skill tracker, made with the configs (see :meth:`_resolve`)."""
        self._resolve()
        assert self._skills is not None  # _resolve() makes it together with the configs
        return self._skills

    def _may_scan(self) -> bool:
        return any(is_skill_provider(c.provider) for c in self._resolve())

    async def _tracker(self) -> SkillTracker:
        skills = self._skill_tracker()
        await skills.ensure(may_scan=self._may_scan())
        return skills

    # -- reading blocks -------------------------------------------------------------------

    async def get_context_block(self, label: str) -> ContextBlock | None:
        """A copy of block ``label`` (loading blocks if needed), or ``None`` if unknown."""
        block = (await self._loaded()).get(_check_label(label))
        return ContextBlock(**block) if block is not None else None

    async def get_context_blocks(self) -> list[ContextBlock]:
        """Copies of all blocks in declaration order (``add_context`` ones last)."""
        return [ContextBlock(**b) for b in (await self._loaded()).values()]

    # -- writing blocks ---------------------------------------------------------------------

    async def replace_context_block(self, label: str, content: str) -> ContextBlock:
        """Store ``content`` as the whole of block ``label``; returns the new record.

        The frozen prompt is not touched (call :meth:`refresh_system_prompt`).

        Raises (:class:`~common.errors.ContextBlockError`, nothing written):
            ``Block "<label>" is readonly`` -- unknown or not writable;
            ``Block "<label>" is a keyed provider. Use setSkill() or setSearchEntry() instead.``;
            ``Block "<label>" exceeds maxTokens: <tokens> > <maxTokens>``.
        """
        _check_label(label)
        _check_text(content, "content")
        blocks = await self._loaded()
        block = blocks.get(label)
        if block is None or not block["writable"]:
            raise ContextBlockError(f'Block "{label}" is readonly', field="label")
        if block["isSkill"] or block["isSearchable"]:
            raise ContextBlockError(
                f'Block "{label}" is a keyed provider. Use setSkill() or setSearchEntry() instead.', field="label"
            )
        config = self._block_config(label)
        tokens = estimate_string_tokens(content)
        if config.max_tokens is not None and tokens > config.max_tokens:
            message = f'Block "{label}" exceeds maxTokens: {tokens} > {config.max_tokens}'
            raise ContextBlockError(message, field="content")
        await _call(config.provider.set, content)
        blocks[label] = ContextBlock(**{**block, "content": content, "tokens": tokens})
        self._blocks_version += 1
        self._wrote(config)
        return ContextBlock(**blocks[label])

    async def append_context_block(self, label: str, content: str) -> ContextBlock:
        """Append ``content`` to block ``label``, with a ``"\\n"`` between when the block
        is non-empty and ``content`` does not start with one; the limit applies to the
        result.

        Raises:
            ContextBlockError: ``Block "<label>" not found``, or as :meth:`replace_context_block`.
        """
        _check_label(label)
        _check_text(content, "content")
        block = (await self._loaded()).get(label)
        if block is None:
            raise ContextBlockError(f'Block "{label}" not found', field="label")
        sep = "\n" if block["content"] and not content.startswith("\n") else ""
        return await self.replace_context_block(label, block["content"] + sep + content)

    async def _keyed(
        self, label: str, kind: Literal["isSkill", "isSearchable"], check: Any
    ) -> tuple[ContextBlock, Any]:
        block = (await self._loaded()).get(_check_label(label))
        if block is None or not block[kind]:
            noun = "skill" if kind == "isSkill" else "search"
            raise ContextBlockError(f'Block "{label}" is not a {noun} provider', field="label")
        provider = self._block_config(label).provider
        if not check(provider) or not is_writable_provider(provider):
            raise ContextBlockError(f'Block "{label}" does not support writes', field="label")
        return block, provider

    async def set_skill(self, label: str, key: str, content: str, description: str | None = None) -> None:
        """Write skill ``key`` of skill block ``label`` and re-read its listing.

        Raises:
            ContextBlockError: ``Block "<label>" is not a skill provider`` or
                ``Block "<label>" does not support writes``.
            InvalidInputError: ``key`` or ``content`` is not text, or
                ``description`` is neither text nor ``None`` (nothing written).
        """
        _check_text(key, "key")
        _check_text(content, "content")
        if description is not None:
            _check_text(description, "description")
        block, provider = await self._keyed(label, "isSkill", is_skill_provider)
        await _call(provider.set, key, content, description)
        listing = _provider_text(await _call(provider.get), label, "get")
        self._reread(label, block, listing)
        self._wrote(self._block_config(label))

    async def set_search_entry(self, label: str, key: str, content: str) -> None:
        """Index ``content`` under ``key`` in search block ``label`` and re-read its summary.

        Raises:
            ContextBlockError: ``Block "<label>" is not a search provider`` or
                ``Block "<label>" does not support writes``.
            InvalidInputError: ``key`` or ``content`` is not text (nothing written).
        """
        _check_text(key, "key")
        _check_text(content, "content")
        block, provider = await self._keyed(label, "isSearchable", is_search_provider)
        await _call(provider.set, key, content)
        summary = _provider_text(await _call(provider.get), label, "get")
        self._reread(label, block, summary)
        self._wrote(self._block_config(label))

    def _reread(self, label: str, block: ContextBlock, content: str) -> None:
        """Record ``content``, just read back from the provider, as keyed block ``label``'s content."""
        assert self._blocks is not None  # loaded by _keyed(); blocks are never unloaded
        self._blocks[label] = ContextBlock(**{**block, "content": content, "tokens": estimate_string_tokens(content)})
        self._blocks_version += 1

    async def search_context(self, label: str, query: str) -> str | None:
        """The search provider's answer for ``query``, or ``None`` for no results.

        Raises:
            ContextBlockError: ``Block "<label>" is not a search provider``.
            InvalidInputError: ``query`` is not a string.
        """
        if not isinstance(query, str):
            raise InvalidInputError(f"query must be a string, not {type(query).__name__}", field="query")
        _check_label(label)
        await self._loaded()
        config = self._config(label)
        if config is None or not is_search_provider(config.provider):
            raise ContextBlockError(f'Block "{label}" is not a search provider', field="label")
        return await _call(config.provider.search, query)

    # -- adding and removing blocks ------------------------------------------------------------

    async def add_context(
        self, label: str, *, description: str | None = None, max_tokens: int | None = None, provider: Any = None
    ) -> ContextBlock:
        """Add a block at runtime (last in order), load it, and return it.

        Without a provider it is auto-wired like a builder block. The frozen
        prompt is not refreshed. A skill block restores the loaded-skill set
        if that never happened.

        Raises:
            ConflictError: ``Block "<label>" already exists``.
            InvalidInputError: as :meth:`with_context`.
        """
        ContextSpec().with_block(label, description=description, max_tokens=max_tokens, provider=provider)
        blocks = await self._loaded()
        if self._config(label) is not None:
            raise ConflictError(f'Block "{label}" already exists')
        config = self._wire(BlockSpec(label, description, max_tokens, provider))
        block = await self._init_and_read(config)
        self._resolve().append(config)
        blocks[label] = block
        self._blocks_version += 1
        self._writes_seen = self._writes_signature()
        if block["isSkill"]:
            await self._tracker()
        return ContextBlock(**block)

    async def remove_context(self, label: str) -> bool:
        """Remove block ``label``; ``False`` if unknown. Its ``label:*`` skills are
        forgotten without rewriting history; the frozen prompt is not refreshed."""
        config = self._config(_check_label(label))
        if config is None:
            return False
        tracker = await self._tracker()
        self._resolve().remove(config)
        if self._blocks is not None:
            self._blocks.pop(label, None)
            self._blocks_version += 1
            self._writes_seen = self._writes_signature()
        await tracker.drop_label(label)
        return True

    # -- the system prompt ------------------------------------------------------------------------

    async def freeze_system_prompt(self) -> str:
        """The frozen prompt: the stored one when the prompt store holds one
        (``""`` counts); else the in-memory snapshot, rendered now if there is
        none; then persisted to the store. Block writes never change it."""
        self._resolve()
        stored = await self._stored_prompt()
        if stored is not None:
            return stored
        blocks = await self._loaded()
        if self._snapshot is None:
            self._snapshot = render_prompt(list(blocks.values()))
        await self._store_prompt(self._snapshot)
        return self._snapshot

    async def _store_prompt(self, prompt: str) -> None:
        """Persist ``prompt`` to the prompt store, if any; a held stored prompt is dropped."""
        if self._prompt_store is None:
            return
        try:
            await _call(self._prompt_store.set, prompt)
        finally:
            self._prompt_written()

    def _prompt_written(self) -> None:
        """The stored prompt may have changed: every engine on this file (or the store's) reads it again."""
        self._stored = None
        if self._storage is not None:
            _PROMPT_WRITES.bump(self._storage)
        store_file = getattr(self._prompt_store, "storage", None)
        if store_file is not None and store_file is not self._storage:
            _PROMPT_WRITES.bump(store_file)

    @staticmethod
    def _prompt_writes() -> tuple[int, int]:
        """What a held stored prompt depends on: every prompt write and block write of the process
        (a superset of this file's)."""
        return _PROMPT_WRITES.generation, _WRITES.generation

    def _may_hold_stored(self) -> bool:
        """Whether the stored prompt, once read, may be held in memory: it is this session's own row
        of a SQLite file this process holds exclusively, so every write of it is one of
        :meth:`_store_prompt` or :meth:`delete_stored_state` (of this engine or another on the file,
        counted in ``_PROMPT_WRITES``) or a block write (``_WRITES``: a block provider could name the
        row). A custom prompt store is asked every time."""
        if self._holds_stored is None:
            self._holds_stored = (
                self._spec.prompt_store is None and isinstance(self._storage, SqlStorage)
                and sql.held_exclusively(self._storage)
            )
        return self._holds_stored

    async def _stored_prompt(self) -> str | None:
        """The prompt store's prompt (``None``: none stored). Held in memory once read outside a
        transaction (a committed value) while no engine wrote the row since (see :meth:`_may_hold_stored`)."""
        if self._prompt_store is None:
            return None
        hold = self._may_hold_stored()
        written = (0, 0)
        if hold:
            written = self._prompt_writes()
            held = self._stored
            if held is not None and held[0] == written:
                return held[1]
        stored = await _call(self._prompt_store.get)
        if stored is not None and not isinstance(stored, str):
            raise TypeError(f"prompt store returned {type(stored).__name__} from get(), not str or None")
        if hold and isinstance(self._storage, SqlStorage) and not self._storage.in_transaction:
            self._stored = (written, stored)
        return stored

    async def refresh_system_prompt(self) -> str:
        """Reload every provider (``init`` + ``get``), re-render, replace the snapshot, persist."""
        blocks = await self._load_all()
        self._snapshot = render_prompt(list(blocks.values()))
        await self._store_prompt(self._snapshot)
        return self._snapshot

    async def prompt_for_estimate(self) -> str:
        """The prompt to count in token estimates: the snapshot, else the stored
        prompt, else a fresh render that is neither frozen nor stored."""
        self._resolve()
        if self._snapshot is not None:
            return self._snapshot
        stored = await self._stored_prompt()
        if stored is not None:
            return stored
        blocks = await self._loaded()
        rendered = self._rendered
        if rendered is None or rendered[0] != self._blocks_version:
            rendered = self._rendered = (self._blocks_version, render_prompt(list(blocks.values())))
        return rendered[1]

    # -- tools and skills -----------------------------------------------------------------------------

    async def tools(self) -> dict[str, Tool]:
        """The AI tools for the current blocks (see :func:`actors.tools.build_context_tools`)."""
        await self._loaded()
        await self._tracker()
        return await build_context_tools(self)

    async def load_skill(self, label: str, key: str) -> str | None:
        """Content of skill ``key`` in block ``label`` (``None``: not found). A
        non-``None`` result marks ``"label:key"`` loaded at once (persisted).

        Raises:
            ContextBlockError: ``Block "<label>" is not a skill provider``.
            InvalidInputError: ``key`` is not text.
        """
        _check_text(key, "key")
        _check_label(label)
        await self._loaded()
        config = self._config(label)
        if config is None or not is_skill_provider(config.provider):
            raise ContextBlockError(f'Block "{label}" is not a skill provider', field="label")
        content = await _call(config.provider.load, key)
        if content is not None and not isinstance(content, str):
            raise TypeError(
                f'skill provider of "{label}" returned {type(content).__name__} from load(), not str or None'
            )
        if content is not None:
            await (await self._tracker()).add(f"{label}:{key}")
        return content

    async def unload_skill(self, label: str, key: str) -> bool:
        """Unload ``label:key``. ``False`` if it was not loaded; otherwise its
        newest stored load output becomes ``[skill unloaded: <key>]`` (via the
        host's ``update_message``) and ``True`` is returned.

        Raises:
            InvalidInputError: ``label`` or ``key`` is not a string.
        """
        _check_text(label, "label")
        _check_text(key, "key")
        return await (await self._tracker()).remove(label, key)

    async def get_loaded_skill_keys(self) -> KeysView[str]:
        """Loaded skills as an ordered, set-like view of ``"label:key"`` (a snapshot)."""
        return (await self._tracker()).keys()

    async def clear_loaded_skills(self) -> None:
        """Forget every loaded skill (persisted), without touching history."""
        await self._skill_tracker().clear()

    # -- host notifications ----------------------------------------------------------------------------

    async def note_appended(self, message: dict[str, Any]) -> None:
        """Call after a message was stored: its finished load/unload tool parts
        update the loaded set. Costs nothing for a message without such parts."""
        skills = self._skill_tracker()
        if skill_events(message):  # else nothing to apply: may_scan is not even asked (every append comes here)
            await skills.note_appended(message, may_scan=self._may_scan())

    async def note_updated(self, message: dict[str, Any]) -> None:
        """Call after a message was updated (see :meth:`SkillTracker.note_updated`)."""
        await self._skill_tracker().note_updated(message, may_scan=self._may_scan())

    async def note_cleared(self) -> str:
        """Call after all messages were cleared: empties the loaded set and
        refreshes the prompt (returned). Block contents are kept."""
        await self.clear_loaded_skills()
        return await self.refresh_system_prompt()

    async def delete_stored_state(self) -> None:
        """Delete this session's auto-wired block rows, its default cached prompt
        row and its loaded-skill row (for a session being deleted). Shared
        search entries and explicit providers are left alone."""
        self._resolve()
        keys = list(self._auto_keys)
        if self._spec.cached_prompt and self._spec.prompt_store is None:
            keys.append(self._prompt_store.key)
        if isinstance(self._storage, SqlStorage):
            try:
                with self._storage.transaction():
                    sql.delete_blocks(self._storage, keys)
                    sql.delete_config(self._storage, self._session_id, SkillTracker.CONFIG_KEY)
            finally:
                self._prompt_written()
            return
        if self._storage is not None:
            await self._storage.delete_blocks(keys)
        if self._state is not None:
            await self._state.delete_config(SkillTracker.CONFIG_KEY)
