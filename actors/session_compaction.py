"""A Session's compaction, token estimate and status broadcasts.

:class:`SessionCompaction` is the part of :class:`actors.session.Session`
behind ``compact()`` and ``estimate_tokens()`` and the ``cf_agent_session``
broadcasts (docs/behaviours.md §8, §9, §12; docs/deviations.md #13, #14, #16);
its settings are a frozen :class:`~actors.session_spec.CompactionSpec`
(what ``on_compaction``, ``compact_after`` and ``on_compaction_error``
declare). It does not know the Session: it gets the session's message
store (:class:`~actors.session_store.HistoryStore`, synchronous or
``async``; it is always awaited), its context engine
(:class:`PromptSource`), where broadcasts go (:class:`BroadcastChannel`)
and a callback for "a compaction row was stored".

The token estimate. Without a ``token_counter`` it is the heuristic of docs/behaviours.md §9
over the history as ``get_history()`` returns it plus the prompt used for
estimates -- computed without reading the history: every stored row keeps
the running token total of its path (``path_tokens``), so the estimate is
the leaf's total, minus what the overlays on this path hide, plus the
overlays' own tokens, plus the prompt's tokens (cached per prompt text).
Its cost follows the number of compactions, not the history length. A
custom session counter gets what its contract promises -- the whole
history, the prompt and the blocks -- on every estimate.

The history part is held between estimates (:class:`KnownPath`), as
:mod:`storage.carried` holds the latest leaf: it is trusted only while the
file's data version is the one it was read or last extended at (``version``:
the Session's SQLite file, held exclusively, outside a caller's
transaction; anything else holds nothing), so any commit not told here --
another Session, the host, raw SQL -- makes the next estimate read the
totals again: every write commits, so an update, delete, clear, batch
append, compaction, or rows stored in a caller's transaction
(``prepared_rows``) all do. One append under the latest leaf, told through
:meth:`SessionCompaction.appended` with the versions around its commit,
extends it instead: the new row's own tokens are added (what its
``path_tokens`` adds; the overlays on the path stay those of its parent,
unless the new id is an end of a stored overlay) and the version moves to
the one after that commit; an append under another parent (a branch
switch) forgets it. The prompt part is the context engine's (held by it;
block writes and prompt refreshes move it).

When an estimate is made (docs/behaviours.md §9, §12): only when someone
listens to the broadcasts (see :class:`BroadcastChannel`), or the session
has both a threshold and a compaction function (auto-compaction compares
the estimate after every new message whoever listens), or a custom
``token_counter`` and a broadcaster (user code is called as it always
was, peers or not); otherwise the
payload's ``tokenEstimate`` would be 0 and nothing is sent anyway. A
status no one listens to is not encoded either: an actor's
:meth:`~actors.agent.Agent.broadcast` with no WebSocket peer connected
sends nothing, so skipping it changes nothing anyone can observe.
"""

from __future__ import annotations

import inspect
import logging
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from common.errors import CompactionError

from .agent import Agent
from .compaction import (
    CompactResult,
    call_compaction_function,
    count_session_tokens,
    error_broadcast,
    error_text,
    noop_compaction_warning,
    plan_compaction,
    status_broadcast,
)
from .session_spec import CompactionFunction, CompactionSpec, ErrorHandler
from .session_store import AsyncHistoryStore, HistoryStore, as_async_store, compaction_records, read_history
from .tokens import TOKENS_PER_MESSAGE, estimate_string_tokens

if TYPE_CHECKING:
    from .context import ContextBlock

__all__ = [
    "NO_FUNCTION", "BroadcastChannel", "CompactionFunction", "ErrorHandler", "KnownPath", "PromptSource",
    "SessionCompaction",
]

logger = logging.getLogger("actors.session")

#: Message of :class:`CompactionError` when ``compact()`` runs with no function.
NO_FUNCTION = "No compaction function registered. Call on_compaction() first."


async def _resolve(value: Any) -> Any:
    if value is None:  # a broadcaster returning nothing (Agent.broadcast): no awaitable check
        return None
    return await value if inspect.isawaitable(value) else value


class PromptSource(Protocol):
    """What compaction needs of the context engine (:class:`actors.context.ContextBlocks`)."""

    async def prompt_for_estimate(self) -> str: ...
    async def get_context_blocks(self) -> list[ContextBlock]: ...
    async def refresh_system_prompt(self) -> str: ...


class BroadcastChannel:
    """Where one session's ``cf_agent_session`` payloads go and whom they name.

    Attributes:
        broadcaster: ``send(text)`` (sync or async), or ``None`` for no broadcasts.
        session_id: the session's id (named in log lines).
        name: the ``sessionId`` of broadcasts when it differs from
            ``session_id`` (docs/deviations.md #16), else ``None``.
    """

    __slots__ = ("_broadcaster", "_peers_of", "name", "session_id")

    def __init__(self, broadcaster: Callable[[str], Any] | None, session_id: str, name: str | None = None) -> None:
        self.broadcaster = broadcaster
        self.session_id = session_id
        self.name = name

    @property
    def broadcaster(self) -> Callable[[str], Any] | None:
        return self._broadcaster

    @broadcaster.setter
    def broadcaster(self, value: Callable[[str], Any] | None) -> None:
        self._broadcaster = value
        # Agent.broadcast itself (not an override) sends to the actor's peers and to no one else.
        owner = getattr(value, "__self__", None)
        if isinstance(owner, Agent) and getattr(value, "__func__", None) is Agent.broadcast:
            self._peers_of: Callable[[], Any] | None = owner.ctx.get_connections
        else:
            self._peers_of = None

    @property
    def listening(self) -> bool:
        """``True`` when a payload sent now would reach someone: there is a broadcaster and,
        for an actor's own :meth:`~actors.agent.Agent.broadcast`, a WebSocket peer is connected
        (any other broadcaster always counts as listening)."""
        if self._broadcaster is None:
            return False
        return self._peers_of is None or bool(self._peers_of())

    @property
    def broadcast_id(self) -> str:
        """The ``sessionId`` payloads carry: :attr:`name`, else :attr:`session_id`."""
        return self.session_id if self.name is None else self.name

    async def send(self, text: str) -> None:
        """Send ``text`` through the broadcaster, if any; a failure is logged, never raised."""
        if self._broadcaster is None:
            return
        try:
            await _resolve(self._broadcaster(text))
        except Exception:  # a broadcast never undoes a committed write
            logger.warning("session %r: broadcast failed", self.session_id, exc_info=True)


class KnownPath:
    """The heuristic history tokens of the latest leaf's path, as the last estimate found them.

    Attributes:
        version: the file's data version they are true at.
        leaf_id: the latest leaf they were computed for.
        tokens: ``path_tokens`` of the leaf, minus what the overlays on the path
            hide, plus the overlays' own tokens.
        ends: the ``fromMessageId``/``toMessageId`` of every stored overlay (a new
            message with one of these ids may bring an overlay onto the path).
    """

    __slots__ = ("ends", "leaf_id", "tokens", "version")

    def __init__(self, version: int, leaf_id: str, tokens: int, ends: frozenset[str]) -> None:
        self.version = version
        self.leaf_id = leaf_id
        self.tokens = tokens
        self.ends = ends


class SessionCompaction:
    """Compaction, token estimate and status broadcasts of one session.

    Args:
        store: the session's message store (synchronous or ``async``).
        context: its context engine (the prompt and blocks an estimate counts).
        channel: where its status broadcasts go.
        spec: the compaction settings; :attr:`spec` may be replaced at any time.
        on_stored: called (and awaited when it returns an awaitable) after a
            compaction row is stored (the Session's "history changed"
            notice), or ``None``.
        version: the data version of the store's file when the history
            tokens may be held now (see the module docstring), else ``None``;
            ``None`` for this argument: never held.
    """

    def __init__(
        self,
        store: HistoryStore | AsyncHistoryStore,
        context: PromptSource,
        channel: BroadcastChannel,
        *,
        spec: CompactionSpec | None = None,
        on_stored: Callable[[], Any] | None = None,
        version: Callable[[], int | None] | None = None,
    ) -> None:
        self._store = as_async_store(store)
        self._context = context
        self._channel = channel
        self.spec = CompactionSpec() if spec is None else spec
        self._on_stored = on_stored
        self._warned_noop = False
        self._running = False
        self._prompt: tuple[str, int] = ("", 0)
        self._overlay_tokens: dict[str, int] = {}
        self._version = version
        self._known: KnownPath | None = None

    # -- the estimate ------------------------------------------------------------------

    async def estimate(self) -> int:
        """The Session's token estimate (see the module docstring)."""
        prompt = await self._context.prompt_for_estimate()
        counter = self.spec.token_counter
        if counter is not None:
            history = await read_history(self._store, await self._store.latest_leaf())
            blocks = await self._context.get_context_blocks()
            return await count_session_tokens(history, prompt, blocks, token_counter=counter)
        return await self._history_tokens() + self._prompt_tokens(prompt)

    async def _history_tokens(self) -> int:
        version = None if self._version is None else self._version()
        known = self._known
        if known is not None and known.version == version:
            return known.tokens
        self._known = None
        leaf = await self._store.latest_leaf() if version is not None else None
        totals = await self._store.latest_path_tokens()  # one statement without compactions
        if totals is None:
            return 0
        tokens = totals.total
        for row, hidden in totals.hidden:
            tokens += self._overlay_cost(row.id, row.summary) - hidden
        if leaf is not None and version is not None:
            ends = frozenset(end for row in await self._store.compactions()
                             for end in (row.from_message_id, row.to_message_id))
            self._known = KnownPath(version, leaf, tokens, ends)
        return tokens

    def appended(self, message_id: str, parent_id: str | None, tokens: int, before: int | None,
                 after: int | None) -> None:
        """Message ``message_id`` (its own ``tokens``, as stored) was just stored under ``parent_id``
        and is the latest leaf; ``before``/``after``: the file's data version just before and just
        after that commit (``None``: not holdable). The held history tokens grow by ``tokens`` when
        the commit was the only one since they were true and it extends their path; else they are
        forgotten."""
        known = self._known
        if known is None:
            return
        if (before is None or after is None or known.version != before or parent_id is None
                or parent_id != known.leaf_id or message_id in known.ends):
            self._known = None
            return
        known.version = after
        known.leaf_id = message_id
        known.tokens += tokens

    def _overlay_cost(self, compaction_id: str, summary: str) -> int:
        cost = self._overlay_tokens.get(compaction_id)
        if cost is None:
            cost = self._overlay_tokens[compaction_id] = TOKENS_PER_MESSAGE + estimate_string_tokens(summary)
        return cost

    def _prompt_tokens(self, prompt: str) -> int:
        cached, tokens = self._prompt
        if prompt is not cached and prompt != cached:
            tokens = estimate_string_tokens(prompt)
            self._prompt = (prompt, tokens)
        return tokens

    # -- broadcasts ---------------------------------------------------------------------

    async def emit_status(self, phase: str, *, tokens_before: int | None = None) -> int:
        """Broadcast a ``cf_agent_session`` status; returns the estimate it carried.

        No payload is made when no one listens
        (:attr:`BroadcastChannel.listening`), and no heuristic estimate
        either unless auto-compaction needs it (a threshold and a
        function); a custom ``token_counter`` is still called whenever
        there is a broadcaster, as before. An estimate that fails (a custom
        counter raising) is reported like an auto-compaction error and
        counts 0.
        """
        estimate = 0
        channel, spec = self._channel, self.spec
        listening = channel.listening
        if listening or (spec.threshold is not None and spec.function is not None) or (
            spec.token_counter is not None and channel.broadcaster is not None  # user code: called as before
        ):
            try:
                estimate = await self.estimate()
            except Exception as exc:
                await self.report_error(exc)
        if listening:
            payload = status_broadcast(
                phase=phase,
                token_estimate=estimate,
                token_threshold=self.spec.threshold,
                session_id=self._channel.broadcast_id,
                tokens_before=tokens_before,
            )
            await self._channel.send(payload)
        return estimate

    async def report_error(self, error: BaseException) -> None:
        """Hand an automatic-compaction error to the handler (its own errors are logged), then
        broadcast ``cf_agent_session_error``."""
        await self._call_handler(error)
        await self._channel.send(error_broadcast(error, session_id=self._channel.broadcast_id))

    async def _call_handler(self, error: BaseException) -> None:
        handler = self.spec.error_handler
        if handler is None:
            logger.warning("session %r: auto-compaction failed: %s", self._channel.session_id, error_text(error))
            return
        try:
            await _resolve(handler(error))
        except Exception:
            logger.warning("session %r: compaction error handler failed", self._channel.session_id, exc_info=True)

    # -- compacting ------------------------------------------------------------------

    async def compact(self, *, auto: bool = False) -> CompactResult | None:
        """Run the compaction function once (docs/behaviours.md §8; docs/deviations.md #13, #14).

        Broadcasts ``compacting``, asks the function for a range of the
        current path (overlays applied), stores the row (iterative and
        branch-local: see :func:`actors.compaction.plan_compaction`),
        refreshes the prompt and broadcasts ``idle`` with ``compacted``.
        Nothing to compact -> ``idle`` and ``None``. A function that raises
        or names a range off the path -> ``cf_agent_session_error`` and
        ``None``; with ``auto`` the error also goes to the error handler.

        Raises:
            CompactionError: no compaction function is registered.
        """
        if self.spec.function is None:
            raise CompactionError(NO_FUNCTION)
        return (await self._run(auto))[0]

    async def _run(self, auto: bool) -> tuple[CompactResult | None, bool]:
        """``(stored range or None, whether the function failed)``."""
        self._running = True
        try:
            return await self._compact(auto)
        finally:
            self._running = False

    async def _compact(self, auto: bool) -> tuple[CompactResult | None, bool]:
        before = await self.emit_status("compacting")
        try:
            planned = await self._plan()
        except Exception as exc:
            if auto:
                await self._call_handler(exc)
            else:
                logger.warning("session %r: compaction failed: %s", self._channel.session_id, error_text(exc))
            await self._channel.send(error_broadcast(exc, session_id=self._channel.broadcast_id))
            return None, True
        if planned is None:
            await self.emit_status("idle")
            return None, False
        summary, first, last = planned["summary"], planned["fromMessageId"], planned["toMessageId"]
        await self._store.add_compaction(str(uuid.uuid4()), summary, first, last)
        if self._on_stored is not None:
            await _resolve(self._on_stored())
        await self._context.refresh_system_prompt()
        await self.emit_status("idle", tokens_before=before)
        return planned, False

    async def _plan(self) -> CompactResult | None:
        store = self._store
        leaf = await store.latest_leaf()
        history = await read_history(store, leaf)
        spec = self.spec
        if spec.function is None:  # unregistered while the history was read
            raise CompactionError(NO_FUNCTION)
        result = await call_compaction_function(spec.function, history, token_counter=spec.token_counter)
        return plan_compaction(
            result,
            history=history,
            path_ids=[] if leaf is None else await store.path_ids(leaf),
            compactions=await compaction_records(store),
        )

    async def after_append(self) -> None:
        """What follows a new message (docs/behaviours.md §12): ``idle`` with the estimate, then
        auto-compaction when it exceeds the threshold. Never raises for a
        compaction problem: the message is already stored."""
        estimate = await self.emit_status("idle")
        spec = self.spec
        threshold = spec.threshold
        if threshold is None or spec.function is None or estimate <= threshold or self._running:
            return
        try:
            result, failed = await self._run(auto=True)
        except Exception as exc:  # storing the row or refreshing the prompt failed
            await self.report_error(exc)
            return
        if result is not None:
            self._warned_noop = False
        elif not failed and not self._warned_noop:
            self._warned_noop = True
            spec = self.spec
            logger.warning(
                noop_compaction_warning(estimate, threshold, has_token_counter=spec.token_counter is not None)
            )
