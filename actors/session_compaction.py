"""A Session's compaction settings, token estimate and status broadcasts.

:class:`SessionCompaction` is the part of :class:`actors.session.Session`
behind ``on_compaction``, ``compact_after``, ``on_compaction_error``,
``compact()`` and ``estimate_tokens()``, and the ``cf_agent_session``
broadcasts (docs/behaviours.md §8, §9, §12; docs/deviations.md #13, #14, #16).

The token estimate. Without a ``token_counter`` it is the heuristic of docs/behaviours.md §9
over the history as ``get_history()`` returns it plus the prompt used for
estimates -- computed without reading the history: every stored row keeps
the running token total of its path (``path_tokens``), so the estimate is
the leaf's total, minus what the overlays on this path hide, plus the
overlays' own tokens, plus the prompt's tokens (cached per prompt text).
Its cost follows the number of compactions, not the history length. A
custom session counter gets what its contract promises -- the whole
history, the prompt and the blocks -- on every estimate.

When an estimate is made (docs/behaviours.md §9, §12): only when the session has a
broadcaster, or both a threshold and a compaction function; otherwise the
payload's ``tokenEstimate`` would be 0 and nothing is broadcast anyway.
"""

from __future__ import annotations

import inspect
import logging
import math
import numbers
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from storage.errors import CompactionError, InvalidInputError

from .compaction import (
    CompactResult,
    SessionCounter,
    call_compaction_function,
    count_session_tokens,
    error_broadcast,
    error_text,
    noop_compaction_warning,
    plan_compaction,
    status_broadcast,
)
from .tokens import TOKENS_PER_MESSAGE, estimate_string_tokens

if TYPE_CHECKING:
    from .session import Session

logger = logging.getLogger("actors.session")

#: Message of :class:`CompactionError` when ``compact()`` runs with no function.
NO_FUNCTION = "No compaction function registered. Call on_compaction() first."

CompactionFunction = Callable[..., "CompactResult | None | Awaitable[CompactResult | None]"]
ErrorHandler = Callable[[BaseException], "Any | Awaitable[Any]"]


async def _resolve(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


class SessionCompaction:
    """Compaction state of one Session; every method is called by that Session."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self.function: CompactionFunction | None = None
        self.threshold: float | None = None
        self.token_counter: SessionCounter | None = None
        self.error_handler: ErrorHandler | None = None
        self._warned_noop = False
        self._running = False
        self._prompt: tuple[str, int] = ("", 0)
        self._overlay_tokens: dict[str, int] = {}

    # -- settings (builders) --------------------------------------------------------

    def set_function(self, fn: CompactionFunction) -> None:
        if not callable(fn):
            raise InvalidInputError("the compaction function must be callable", field="fn")
        self.function = fn

    def set_threshold(self, threshold: float, token_counter: SessionCounter | None) -> None:
        if (
            isinstance(threshold, bool)
            or not isinstance(threshold, numbers.Real)
            or (not isinstance(threshold, numbers.Integral) and not math.isfinite(threshold))
            or threshold < 0
        ):
            raise InvalidInputError(f"threshold must be a finite number >= 0, not {threshold!r}", field="threshold")
        if token_counter is not None and not callable(token_counter):
            raise InvalidInputError("token_counter must be callable", field="token_counter")
        self.threshold = threshold
        self.token_counter = token_counter

    def set_error_handler(self, handler: ErrorHandler) -> None:
        if not callable(handler):
            raise InvalidInputError("the compaction error handler must be callable", field="handler")
        self.error_handler = handler

    # -- the estimate ------------------------------------------------------------------

    async def estimate(self) -> int:
        """The Session's token estimate (see the module docstring)."""
        context = self._session._context
        prompt = await context.prompt_for_estimate()
        if self.token_counter is not None:
            history = await self._session.get_history()
            blocks = await context.get_context_blocks()
            return await count_session_tokens(history, prompt, blocks, token_counter=self.token_counter)
        return self._history_tokens() + self._prompt_tokens(prompt)

    def _history_tokens(self) -> int:
        store = self._session._messages
        leaf = store.latest_leaf()
        totals = None if leaf is None else store.path_tokens(leaf)
        if totals is None:
            return 0
        tokens = totals.total
        for row, hidden in totals.hidden:
            tokens += self._overlay_cost(row.id, row.summary) - hidden
        return tokens

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

    def _should_estimate(self) -> bool:
        return self._session.broadcaster is not None or (self.threshold is not None and self.function is not None)

    async def _send(self, text: str) -> None:
        """Send ``text`` through the session's broadcaster, if any; a failure is logged."""
        broadcaster = self._session.broadcaster
        if broadcaster is None:
            return
        try:
            await _resolve(broadcaster(text))
        except Exception:  # a broadcast never undoes a committed write
            logger.warning("session %r: broadcast failed", self._session.session_id, exc_info=True)

    async def emit_status(self, phase: str, *, tokens_before: int | None = None) -> int:
        """Broadcast a ``cf_agent_session`` status; returns the estimate it carried.

        An estimate that fails (a custom counter raising) is reported like
        an auto-compaction error and counts 0.
        """
        estimate = 0
        if self._should_estimate():
            try:
                estimate = await self.estimate()
            except Exception as exc:
                await self.report_error(exc)
        if self._session.broadcaster is not None:
            payload = status_broadcast(
                phase=phase,
                token_estimate=estimate,
                token_threshold=self.threshold,
                session_id=self._session.broadcast_id,
                tokens_before=tokens_before,
            )
            await self._send(payload)
        return estimate

    async def report_error(self, error: BaseException) -> None:
        """Hand an automatic-compaction error to the handler (its own errors are logged), then
        broadcast ``cf_agent_session_error``."""
        await self._call_handler(error)
        await self._send(error_broadcast(error, session_id=self._session.broadcast_id))

    async def _call_handler(self, error: BaseException) -> None:
        if self.error_handler is None:
            logger.warning("session %r: auto-compaction failed: %s", self._session.session_id, error_text(error))
            return
        try:
            await _resolve(self.error_handler(error))
        except Exception:
            logger.warning("session %r: compaction error handler failed", self._session.session_id, exc_info=True)

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
        if self.function is None:
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
                logger.warning("session %r: compaction failed: %s", self._session.session_id, error_text(exc))
            await self._send(error_broadcast(exc, session_id=self._session.broadcast_id))
            return None, True
        if planned is None:
            await self.emit_status("idle")
            return None, False
        await self._session.add_compaction(planned["summary"], planned["fromMessageId"], planned["toMessageId"])
        await self._session._context.refresh_system_prompt()
        await self.emit_status("idle", tokens_before=before)
        return planned, False

    async def _plan(self) -> CompactResult | None:
        session = self._session
        leaf = session._messages.latest_leaf()
        history = [] if leaf is None else await session.get_history(leaf)
        result = await call_compaction_function(self.function, history, token_counter=self.token_counter)
        return plan_compaction(
            result,
            history=history,
            path_ids=[] if leaf is None else session._messages.path_ids(leaf),
            compactions=await session.get_compactions(),
        )

    async def after_append(self) -> None:
        """What follows a new message (docs/behaviours.md §12): ``idle`` with the estimate, then
        auto-compaction when it exceeds the threshold. Never raises for a
        compaction problem: the message is already stored."""
        estimate = await self.emit_status("idle")
        if self.threshold is None or self.function is None or estimate <= self.threshold or self._running:
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
            logger.warning(
                noop_compaction_warning(estimate, self.threshold, has_token_counter=self.token_counter is not None)
            )
