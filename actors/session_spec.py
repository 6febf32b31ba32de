"""A Session's configuration as one frozen value: :class:`SessionSpec`.

What the chainable builders declare -- context blocks, the cached prompt,
compaction, the row limit -- is kept in frozen dataclasses, each builder
step checking its arguments and returning a *new* value:

* :class:`ContextSpec` -- the blocks (:class:`BlockSpec`, prompt order), the
  searchable-history block a :class:`~actors.manager.SessionManager` puts
  after them, and where the frozen prompt is kept;
* :class:`CompactionSpec` -- the compaction function, the automatic
  threshold and its token counter, the error handler;
* :class:`SessionSpec` -- both, plus the row limit, with one method per
  builder (``with_context``, ``with_cached_prompt``, ``on_compaction``,
  ``compact_after``, ``on_compaction_error``, ``with_row_limit``,
  ``with_history_block``).

One spec can configure any number of sessions: ``Session(storage,
spec=spec, session_id=...)`` reads it and keeps it, nothing is replayed. A
:class:`~actors.session.Session` built with its own builders keeps its
spec in its parts (:attr:`actors.context.ContextBlocks.spec`,
:attr:`actors.session_compaction.SessionCompaction.spec`) and shows the
whole of it as :attr:`actors.session.Session.spec`.

A block's ``provider`` is shared by every session the spec configures (as
the original does with an explicit provider), except:

* ``None`` -- the block is a writable row of the session's own file
  (``<label>_<session id>``, auto-wired by the session);
* a :class:`PerSession` -- a provider made for each session from the
  storage it runs on (the searchable and skills blocks of
  :class:`~actors.session_agent.SessionConfig`).

Errors are the builders' (and the original's) errors:
:class:`~common.errors.InvalidInputError` for a bad argument (``.field``
names it), :class:`~common.errors.ConflictError` for a label declared twice.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from common.errors import ConflictError, InvalidInputError

from .truncation import ROW_MAX_BYTES

if TYPE_CHECKING:
    from storage.sqlite import SqlStorage

    from .compaction import CompactResult, SessionCounter

__all__ = [
    "BlockSpec",
    "CompactionFunction",
    "CompactionSpec",
    "ContextSpec",
    "ErrorHandler",
    "PerSession",
    "SessionSpec",
]

#: ``fn(messages, *, token_counter=None)`` -> a range to compact, or ``None`` (sync or async).
CompactionFunction = Callable[..., "CompactResult | None | Awaitable[CompactResult | None]"]
#: ``handler(exception)`` (sync or async), told about failed automatic compactions.
ErrorHandler = Callable[[BaseException], "Any | Awaitable[Any]"]


# -- argument checks (shared with actors.context) -------------------------------------


def has_method(obj: Any, name: str) -> bool:
    """``True`` when ``obj`` is not ``None`` and has a callable ``name``."""
    return obj is not None and callable(getattr(obj, name, None))


def check_text(value: Any, name: str) -> str:
    """``value`` if it is a ``str`` SQLite can store (no lone surrogate), else InvalidInputError."""
    if not isinstance(value, str):
        raise InvalidInputError(f"{name} must be a string, not {type(value).__name__}", field=name)
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidInputError(
                f"{name} is not valid Unicode text (lone surrogate at index {exc.start})", field=name
            ) from None
    return value


def _check_block(label: Any, description: Any, max_tokens: Any, provider: Any) -> None:
    if not isinstance(label, str) or not label:
        raise InvalidInputError("context block label must be a non-empty string", field="label")
    check_text(label, "label")  # it names a row and goes into the prompt: valid Unicode only
    if description is not None and not isinstance(description, str):
        raise InvalidInputError("description must be a string or None", field="description")
    if description is not None:
        check_text(description, "description")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0):
        raise InvalidInputError("max_tokens must be an integer >= 0 or None", field="max_tokens")
    if provider is not None and not isinstance(provider, PerSession) and not has_method(provider, "get"):
        raise InvalidInputError("provider must have an async get() method", field="provider")


# -- context blocks ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PerSession:
    """A block provider made anew for every session: ``make(storage)`` -> the provider.

    ``storage`` is the :class:`~storage.SqlStorage` the session runs on (or
    ``None`` for an engine without one). The provider it returns must have
    ``get`` (and may have ``set``/``load``/``search``, see :mod:`actors.context`).

    Raises:
        InvalidInputError: ``make`` is not callable.
    """

    make: Callable[[SqlStorage | None], Any]

    def __post_init__(self) -> None:
        if not callable(self.make):
            raise InvalidInputError("PerSession needs a callable make(storage)", field="provider")


@dataclass(frozen=True, slots=True)
class BlockSpec:
    """One declared context block (its arguments are checked by :meth:`ContextSpec.with_block`).

    Attributes:
        label: the block label (non-empty, valid Unicode).
        description: shown in the block header, or ``None``.
        max_tokens: limit on the block's estimated tokens, or ``None``.
        provider: a provider object shared by every session; ``None``: a
            writable row of each session's own file; a :class:`PerSession`:
            made for each session.
    """

    label: str
    description: str | None = None
    max_tokens: int | None = None
    provider: Any = None


@dataclass(frozen=True, slots=True)
class ContextSpec:
    """Declared context blocks and the prompt store of a session.

    Attributes:
        blocks: the blocks in prompt order (labels unique).
        history_block: a block kept after every other one (the searchable
            history of :meth:`~actors.manager.SessionManager.with_searchable_history`),
            or ``None``.
        cached_prompt: keep the frozen system prompt so it survives hibernation.
        prompt_store: where it is kept (``get``/``set(content)``); ``None``:
            the session's own row ``_system_prompt[_<session id>]``.
    """

    blocks: tuple[BlockSpec, ...] = ()
    history_block: BlockSpec | None = None
    cached_prompt: bool = False
    prompt_store: Any = None

    @property
    def all_blocks(self) -> tuple[BlockSpec, ...]:
        """Every declared block in prompt order: :attr:`blocks`, then :attr:`history_block`."""
        return self.blocks if self.history_block is None else (*self.blocks, self.history_block)

    def _check_new(self, label: Any, description: Any, max_tokens: Any, provider: Any) -> BlockSpec:
        _check_block(label, description, max_tokens, provider)
        if any(block.label == label for block in self.all_blocks):
            raise ConflictError(f'Block "{label}" already exists')
        return BlockSpec(label, description, max_tokens, provider)

    def with_block(
        self, label: str, *, description: str | None = None, max_tokens: int | None = None, provider: Any = None
    ) -> ContextSpec:
        """This spec with block ``label`` declared last among :attr:`blocks`.

        Raises:
            InvalidInputError: empty or non-text label, non-text description,
                negative ``max_tokens``, or a provider without ``get``.
            ConflictError: ``Block "<label>" already exists``.
        """
        block = self._check_new(label, description, max_tokens, provider)
        return replace(self, blocks=(*self.blocks, block))

    def with_history_block(self, label: str, *, description: str | None, provider: Any) -> ContextSpec:
        """This spec with the history block ``label`` (see :attr:`history_block`).

        Raises:
            ConflictError: a history block is already declared
                (``Block "<label>" already holds the searchable history``), or
                ``Block "<label>" already exists``.
            InvalidInputError: as :meth:`with_block`.
        """
        if self.history_block is not None:
            raise ConflictError(f'Block "{self.history_block.label}" already holds the searchable history')
        return replace(self, history_block=self._check_new(label, description, None, provider))

    def with_cached_prompt(self, provider: Any = None) -> ContextSpec:
        """This spec keeping the frozen prompt in ``provider`` (``None``: the session's own row).

        Raises:
            InvalidInputError: ``provider`` lacks ``get``/``set``.
        """
        if provider is not None and not (has_method(provider, "get") and has_method(provider, "set")):
            raise InvalidInputError("a prompt store needs get() and set(content)", field="provider")
        return replace(self, cached_prompt=True, prompt_store=provider)


# -- compaction ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CompactionSpec:
    """How a session compacts (spec: Compaction; docs/behaviours.md §8, §12).

    Attributes:
        function: the compaction function, or ``None`` (``compact()`` then raises).
        threshold: compact automatically after a new message once the
            estimate exceeds this many tokens; ``None``: only on request.
        token_counter: replaces the heuristic estimate, or ``None``.
        error_handler: told about automatic-compaction errors, or ``None`` (logged).
    """

    function: CompactionFunction | None = None
    threshold: float | None = None
    token_counter: SessionCounter | None = None
    error_handler: ErrorHandler | None = None

    def with_function(self, fn: CompactionFunction) -> CompactionSpec:
        """This spec compacting with ``fn``.

        Raises:
            InvalidInputError: ``fn`` is not callable.
        """
        if not callable(fn):
            raise InvalidInputError("the compaction function must be callable", field="fn")
        return replace(self, function=fn)

    def with_threshold(self, threshold: float, token_counter: SessionCounter | None = None) -> CompactionSpec:
        """This spec with the automatic ``threshold`` and ``token_counter`` (both replaced).

        Raises:
            InvalidInputError: ``threshold`` is not a finite number >= 0, or
                ``token_counter`` is not callable.
        """
        if (
            isinstance(threshold, bool)
            or not isinstance(threshold, numbers.Real)
            or (not isinstance(threshold, numbers.Integral) and not math.isfinite(threshold))
            or threshold < 0
        ):
            raise InvalidInputError(f"threshold must be a finite number >= 0, not {threshold!r}", field="threshold")
        if token_counter is not None and not callable(token_counter):
            raise InvalidInputError("token_counter must be callable", field="token_counter")
        return replace(self, threshold=threshold, token_counter=token_counter)

    def with_error_handler(self, handler: ErrorHandler) -> CompactionSpec:
        """This spec handing automatic-compaction errors to ``handler``.

        Raises:
            InvalidInputError: ``handler`` is not callable.
        """
        if not callable(handler):
            raise InvalidInputError("the compaction error handler must be callable", field="handler")
        return replace(self, error_handler=handler)


def check_row_limit(max_bytes: Any) -> int:
    """``max_bytes`` if it is a positive ``int`` (not a bool), else InvalidInputError."""
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
        raise InvalidInputError(f"max_bytes must be a positive integer, not {max_bytes!r}", field="max_bytes")
    return max_bytes


# -- the whole --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SessionSpec:
    """Everything declared about a session, as one frozen value.

    Build it with the methods below (each checks its arguments as the
    Session builder of the same name does and returns a new spec), or take
    :attr:`actors.session.Session.spec` of a built Session. Hand it to
    ``Session(storage, spec=...)`` or ``Session.create(target, spec=...)``.

    Attributes:
        context: the blocks and the prompt store.
        compaction: the compaction settings.
        row_max_bytes: the largest message row stored, in UTF-8 bytes of JSON
            (docs/deviations.md #8).
    """

    context: ContextSpec = field(default_factory=ContextSpec)
    compaction: CompactionSpec = field(default_factory=CompactionSpec)
    row_max_bytes: int = ROW_MAX_BYTES

    def with_context(
        self, label: str, *, description: str | None = None, max_tokens: int | None = None, provider: Any = None
    ) -> SessionSpec:
        """With block ``label`` (see :meth:`ContextSpec.with_block`)."""
        block = self.context.with_block(label, description=description, max_tokens=max_tokens, provider=provider)
        return replace(self, context=block)

    def with_history_block(self, label: str, *, description: str | None, provider: Any) -> SessionSpec:
        """With the history block ``label`` (see :meth:`ContextSpec.with_history_block`)."""
        return replace(self, context=self.context.with_history_block(label, description=description, provider=provider))

    def with_cached_prompt(self, provider: Any = None) -> SessionSpec:
        """Keeping the frozen prompt (see :meth:`ContextSpec.with_cached_prompt`)."""
        return replace(self, context=self.context.with_cached_prompt(provider))

    def on_compaction(self, fn: CompactionFunction) -> SessionSpec:
        """Compacting with ``fn`` (see :meth:`CompactionSpec.with_function`)."""
        return replace(self, compaction=self.compaction.with_function(fn))

    def compact_after(self, threshold: float, *, token_counter: SessionCounter | None = None) -> SessionSpec:
        """Compacting automatically above ``threshold`` (see :meth:`CompactionSpec.with_threshold`)."""
        return replace(self, compaction=self.compaction.with_threshold(threshold, token_counter))

    def on_compaction_error(self, handler: ErrorHandler) -> SessionSpec:
        """Handing automatic-compaction errors to ``handler`` (see :meth:`CompactionSpec.with_error_handler`)."""
        return replace(self, compaction=self.compaction.with_error_handler(handler))

    def with_row_limit(self, max_bytes: int) -> SessionSpec:
        """Storing no row over ``max_bytes`` UTF-8 bytes of JSON.

        Raises:
            InvalidInputError: ``max_bytes`` is not a positive integer.
        """
        return replace(self, row_max_bytes=check_row_limit(max_bytes))
