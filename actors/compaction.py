"""Compaction: choosing what to summarize, and the pieces a Session needs to store it.

Macro-compaction replaces a range of old messages by a summary overlay at read
time (docs/behaviours.md §8). This module holds:

* the helpers of the original, same names in snake_case:
  :data:`COMPACTION_PREFIX`, :func:`is_compaction_message`,
  :func:`sanitize_tool_pairs`, :func:`align_boundary_forward`,
  :func:`align_boundary_backward`, :func:`find_tail_cut_by_tokens`,
  :func:`compute_summary_budget`, :func:`build_summary_prompt`;
* :func:`create_compact_function`, the reference compaction function, and
  :func:`extractive_summarize`, a summarizer that needs no model;
* what ``Session.compact()`` and auto-compaction use to stay short:
  :func:`call_compaction_function`, :func:`plan_compaction` (validation and
  the iterative, branch-local row to store: docs/deviations.md #13, #14),
  :func:`count_session_tokens` / :func:`normalize_token_count`, and the
  broadcast payloads :func:`status_broadcast` / :func:`error_broadcast`
  (docs/behaviours.md §12, docs/deviations.md #16).

Token counters come in two shapes, both sync or async:

* a **message counter** ``counter(messages: list[Message]) -> number`` counts
  exactly the messages it is given. ``create_compact_function(token_counter=)``
  takes one and calls it with one message at a time;
  :func:`actors.tokens.estimate_message_tokens` is one.
* a **session counter** ``counter(request: TokenCountRequest) -> number``, as
  given to ``Session.compact_after(threshold, token_counter=)``, where
  ``request`` is ``{"messages": [...], "systemPrompt": str, "contextBlocks":
  [...]}`` (the original's keys). When a compaction function has no counter
  of its own, the Session's flows in and is called per message with an empty
  prompt and no blocks.
"""

from __future__ import annotations

import inspect
import math
import numbers
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, TypedDict

from common.errors import CompactionError, InvalidInputError

from .summary import build_summary_prompt, extractive_summarize
from .tokens import MAX_SAFE_INTEGER, estimate_message_tokens, estimate_string_tokens, js_stringify, message_parts

__all__ = [
    "COMPACTION_PREFIX",
    "CF_AGENT_SESSION",
    "CF_AGENT_SESSION_ERROR",
    "STUB_RESULT",
    "CompactResult",
    "TokenCountRequest",
    "align_boundary_backward",
    "align_boundary_forward",
    "build_summary_prompt",
    "call_compaction_function",
    "compactions_on_path",
    "compute_summary_budget",
    "count_session_tokens",
    "create_compact_function",
    "error_broadcast",
    "error_text",
    "extractive_summarize",
    "find_tail_cut_by_tokens",
    "is_compaction_message",
    "noop_compaction_warning",
    "normalize_token_count",
    "plan_compaction",
    "sanitize_tool_pairs",
    "status_broadcast",
]

#: Id prefix of compaction overlay messages (``"compaction_<row id>"``).
COMPACTION_PREFIX = "compaction_"
#: ``type`` of status broadcasts.
CF_AGENT_SESSION = "cf_agent_session"
# ``tokenThreshold`` texts of status payloads, by (type, value): a config holds one or two thresholds.
_THRESHOLD_TEXT: dict[tuple[type, Any], str] = {}
#: ``type`` of compaction-failure broadcasts.
CF_AGENT_SESSION_ERROR = "cf_agent_session_error"
#: Result text of the stub inserted for a tool call whose result was compacted away.
STUB_RESULT = "[Result from earlier conversation — see context summary above]"

Message = Mapping[str, Any]


class CompactResult(TypedDict):
    """What a compaction function returns: the range to hide and its summary."""

    fromMessageId: str
    toMessageId: str
    summary: str


class TokenCountRequest(TypedDict):
    """The argument of a session token counter (keys as in the original)."""

    messages: list[Message]
    systemPrompt: str
    contextBlocks: list[Any]


MessageCounter = Callable[[list[Message]], "float | Awaitable[float]"]
SessionCounter = Callable[[TokenCountRequest], "float | Awaitable[float]"]


# ── Message helpers ─────────────────────────────────────────────────────


def is_compaction_message(message: Message) -> bool:
    """True when ``message`` is a compaction overlay (its id starts with ``compaction_``)."""
    message_id = message.get("id")
    return isinstance(message_id, str) and message_id.startswith(COMPACTION_PREFIX)


def _tool_parts(message: Message) -> list[Mapping[str, Any]]:
    return [
        part for part in message_parts(message)
        if isinstance(part, Mapping) and isinstance(part.get("type"), str)
        and (part["type"].startswith("tool-") or part["type"] == "dynamic-tool")
    ]


def _has_tool_calls(message: Message) -> bool:
    return bool(_tool_parts(message))


def _pairable(part: Mapping[str, Any]) -> bool:
    """``True`` when the part's ``toolCallId`` can name a call (a hashable value).

    JSON allows an object or array there; like two distinct JavaScript
    objects in a ``Set``, such an id pairs with nothing.
    """
    try:
        hash(part.get("toolCallId"))
    except TypeError:
        return False
    return True


def _tool_call_ids(message: Message) -> list[Any]:
    return list(dict.fromkeys(
        p["toolCallId"] for p in _tool_parts(message) if "toolCallId" in p and _pairable(p)
    ))


def _is_result_for(message: Message, call_ids: Sequence[Any]) -> bool:
    return any(p.get("toolCallId") in call_ids for p in _tool_parts(message) if "toolCallId" in p)


def _calls_tools(message: Message) -> bool:
    return message.get("role") == "assistant" and _has_tool_calls(message)


def align_boundary_forward(messages: Sequence[Message], index: int) -> int:
    """Move a range start past the results of the tool calls just before it.

    When ``messages[index - 1]`` is an assistant message with tool parts,
    the messages holding tool parts with one of its call ids are skipped, so
    a call and its results stay on the same side. ``index`` outside
    ``1..len-1`` is returned as is.
    """
    if index <= 0 or index >= len(messages):
        return index
    previous = messages[index - 1]
    if _calls_tools(previous):
        call_ids = _tool_call_ids(previous)
        while index < len(messages) and _is_result_for(messages[index], call_ids):
            index += 1
    return index


def align_boundary_backward(messages: Sequence[Message], index: int) -> int:
    """Move a range end back so it does not split a tool call from its results.

    Walking back from ``index``: stop at an assistant message with tool
    parts (the call stays after the boundary); step back over a message that
    holds results for the calls of the message before it.
    """
    if index <= 0 or index >= len(messages):
        return index
    while index > 0:
        message = messages[index]
        if _calls_tools(message):
            break
        previous = messages[index - 1]
        if _calls_tools(previous) and _is_result_for(message, _tool_call_ids(previous)):
            index -= 1
            continue
        break
    return index


def sanitize_tool_pairs(messages: Sequence[Message], *, created_at: str | None = None) -> list[Message]:
    """Repair tool calls and results separated by compaction.

    * Tool parts carrying an ``output`` whose call id no assistant message
      makes are dropped.
    * After each assistant message making a call that has no result, a stub
      ``{"id": "stub-<callId>", "role": "assistant", "parts": [{"type":
      "tool-result", "toolCallId", "toolName", "result": STUB_RESULT}],
      "createdAt": created_at}`` is inserted (``toolName`` from the call part,
      else ``"unknown"``; ``created_at`` defaults to now, ISO 8601 UTC).
    * Messages left without parts are removed.

    Returns a new list; unchanged messages are the same objects.
    """
    surviving = dict.fromkeys(
        call_id for m in messages if m.get("role") == "assistant" for call_id in _tool_call_ids(m)
    )
    results = dict.fromkeys(
        p["toolCallId"] for m in messages for p in _tool_parts(m)
        if "toolCallId" in p and "output" in p and _pairable(p)
    )
    orphaned = [call_id for call_id in results if call_id not in surviving]
    fixed = [_drop_results(m, orphaned) for m in messages] if orphaned else list(messages)
    missing = [call_id for call_id in surviving if call_id not in results]
    if missing:
        stamp = created_at or _now_iso()
        patched: list[Message] = []
        for message in fixed:
            patched.append(message)
            if message.get("role") == "assistant":
                patched.extend(
                    _stub(message, call_id, stamp)
                    for call_id in _tool_call_ids(message) if call_id in missing
                )
        fixed = patched
    return [m for m in fixed if m.get("parts")]


def _drop_results(message: Message, orphaned: Sequence[Any]) -> Message:
    parts = message.get("parts") or []
    dropped = [
        p for p in _tool_parts(message)
        if "toolCallId" in p and "output" in p and p["toolCallId"] in orphaned
    ]
    if not dropped:
        return message
    return {**message, "parts": [p for p in parts if not any(p is d for d in dropped)]}


def _stub(message: Message, call_id: Any, created_at: str) -> Message:
    call = next(
        (p for p in message_parts(message) if isinstance(p, Mapping)
         and "toolCallId" in p and p["toolCallId"] == call_id),
        {},
    )
    name = call.get("toolName")
    return {
        "id": f"stub-{call_id}",
        "role": "assistant",
        "parts": [{
            "type": "tool-result",
            "toolCallId": call_id,
            "toolName": "unknown" if name is None else name,
            "result": STUB_RESULT,
        }],
        "createdAt": created_at,
    }


def _now_iso() -> str:
    now = datetime.now(timezone.utc)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"


# ── Budgets ─────────────────────────────────────────────────────────────


def find_tail_cut_by_tokens(
    messages: Sequence[Message],
    head_end: int,
    tail_token_budget: float = 20000,
    min_tail_messages: int = 2,
) -> int:
    """Index where the compacted range ends: everything from it on is kept as the tail.

    Walks back from the last message to ``head_end``, adding each message's
    :func:`estimate_message_tokens`, and stops before the message that would
    push the tail over ``tail_token_budget`` (the last message is always
    taken). At least ``min_tail_messages`` stay in the tail when the head
    allows it; the result is then aligned with :func:`align_boundary_backward`.
    """
    costs = (estimate_message_tokens([m]) for m in reversed(messages[head_end:]))
    return _cut_from_costs(messages, head_end, tail_token_budget, min_tail_messages, costs)


def _cut_from_costs(messages, head_end, budget, min_tail, costs) -> int:
    count = len(messages)
    token_cut = count
    accumulated = 0.0
    for index, cost in zip(range(count - 1, head_end - 1, -1), costs):
        if accumulated + cost > budget and token_cut < count:
            break
        accumulated += cost
        token_cut = index
    return _finish_cut(messages, head_end, min_tail, token_cut)


def _finish_cut(messages, head_end, min_tail, token_cut) -> int:
    min_cut = len(messages) - min_tail
    cut = min(token_cut, min_cut) if min_cut >= head_end else token_cut
    return align_boundary_backward(messages, cut)


async def _find_tail_cut_counted(messages, head_end, budget, min_tail, count) -> int:
    total = len(messages)
    token_cut = total
    accumulated = 0.0
    for index in range(total - 1, head_end - 1, -1):
        cost = await count(messages[index])
        if accumulated + cost > budget and token_cut < total:
            break
        accumulated += cost
        token_cut = index
    return _finish_cut(messages, head_end, min_tail, token_cut)


def compute_summary_budget(messages: Sequence[Message]) -> int:
    """Target size (tokens) of a summary: 20% of the messages' estimate, at least 100."""
    return max(100, math.floor(estimate_message_tokens(messages) * 0.2))


# ── Token counts ────────────────────────────────────────────────────────


def normalize_token_count(value: Any) -> int:
    """A counter's answer as a token count: ceiling, at least 0; 0 if not a finite number.

    Any real number is accepted (``bool`` too, as JavaScript would); ``None``,
    strings and other objects count 0.
    """
    if not isinstance(value, numbers.Real):
        return 0
    try:
        number = float(value)
    except OverflowError:  # an int (or fraction) beyond float range is still a finite count
        return max(0, int(math.ceil(value)))  # an int already: numbers.Real only promises an Integral
    if not math.isfinite(number):
        return 0
    return max(0, math.ceil(number))


async def _resolve(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


async def count_session_tokens(
    messages: Sequence[Message],
    system_prompt: str,
    context_blocks: Sequence[Any] = (),
    *,
    token_counter: SessionCounter | None = None,
) -> int:
    """The Session estimate: ``token_counter`` if given, else the heuristic.

    Without a counter: ``estimate_message_tokens(messages) +
    estimate_string_tokens(system_prompt)`` (docs/behaviours.md §9). With one, it is called
    with a :class:`TokenCountRequest` (awaited when it returns an awaitable)
    and its answer goes through :func:`normalize_token_count`. Exceptions of
    the counter propagate (a Session sends them to ``on_compaction_error``).
    """
    if token_counter is None:
        return estimate_message_tokens(messages) + estimate_string_tokens(system_prompt)
    request: TokenCountRequest = {
        "messages": list(messages),
        "systemPrompt": system_prompt,
        "contextBlocks": list(context_blocks),
    }
    return normalize_token_count(await _resolve(token_counter(request)))


def _per_message_counter(message_counter, session_counter):
    """An async ``count(message) -> float`` from whichever counter applies, or ``None``."""
    if message_counter is not None:
        async def count(message):
            return _clamp(await _resolve(message_counter([message])))
    elif session_counter is not None:
        async def count(message):
            request = {"messages": [message], "systemPrompt": "", "contextBlocks": []}
            return _clamp(await _resolve(session_counter(request)))
    else:
        return None
    return count


def _clamp(value: Any) -> float:
    # Per-message counts keep their fractions (the walk compares sums) but
    # never go negative or non-finite; a count beyond float range is the largest float.
    if not isinstance(value, numbers.Real):
        return 0.0
    try:
        number = float(value)
    except OverflowError:
        return 0.0 if value <= 0 else sys.float_info.max  # (numbers.Real declares <= but not >)
    return max(0.0, number) if math.isfinite(number) else 0.0


# ── The reference compaction function ───────────────────────────────────


def create_compact_function(
    *,
    summarize: Callable[[str], "str | Awaitable[str]"],
    protect_head: int = 3,
    tail_token_budget: float = 20000,
    min_tail_messages: int = 2,
    token_counter: MessageCounter | None = None,
) -> Callable[..., Awaitable[CompactResult | None]]:
    """Build ``async fn(messages, *, token_counter=None) -> CompactResult | None``.

    ``fn`` gets the history with overlays applied and picks a middle range:
    after the first ``protect_head`` messages (aligned forward past tool
    results) and before a tail of about ``tail_token_budget`` tokens (at
    least ``min_tail_messages`` messages, aligned back to keep tool pairs
    whole), overlay messages left out. It asks ``summarize(prompt)`` (sync
    or async) for a summary of that range, passing the first overlay's text
    as the previous summary, and returns ``{"fromMessageId", "toMessageId",
    "summary"}``.

    It returns ``None`` (nothing to compact) when the history has at most
    ``protect_head + min_tail_messages`` messages, the range is empty, or
    the summary is blank. Tail tokens are counted with ``token_counter``
    (a message counter), else with the Session counter passed to ``fn``
    (called per message as ``{"messages": [m], "systemPrompt": "",
    "contextBlocks": []}``), else with :func:`estimate_message_tokens`.

    Raises:
        InvalidInputError: bad options (at build time).
        CompactionError: ``summarize`` returned something other than a
            string, or a message of the range has no string ``id``.
        Exception: whatever ``summarize`` or a counter raises propagates.
    """
    if not callable(summarize):
        raise InvalidInputError("summarize must be callable", field="summarize")
    for name, value in (("protect_head", protect_head), ("min_tail_messages", min_tail_messages)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidInputError(f"{name} must be an integer >= 0, got {value!r}", field=name)
    if isinstance(tail_token_budget, bool) or not isinstance(tail_token_budget, numbers.Real) \
            or tail_token_budget < 0:
        raise InvalidInputError(
            f"tail_token_budget must be a number >= 0, got {tail_token_budget!r}",
            field="tail_token_budget",
        )
    if token_counter is not None and not callable(token_counter):
        raise InvalidInputError("token_counter must be callable", field="token_counter")

    message_counter = token_counter

    async def compact(messages: Sequence[Message], *, token_counter: SessionCounter | None = None):
        messages = list(messages)
        if len(messages) <= protect_head + min_tail_messages:
            return None
        start = align_boundary_forward(messages, protect_head)
        count = _per_message_counter(message_counter, token_counter)
        if count is None:
            end = find_tail_cut_by_tokens(messages, start, tail_token_budget, min_tail_messages)
        else:
            end = await _find_tail_cut_counted(messages, start, tail_token_budget, min_tail_messages, count)
        if end <= start:
            return None
        middle = [m for m in messages[start:end] if not is_compaction_message(m)]
        if not middle:
            return None
        if not all(isinstance(m.get("id"), str) for m in middle):
            raise CompactionError("every message to compact needs a string id")
        prompt = build_summary_prompt(middle, _previous_summary(messages), compute_summary_budget(middle))
        summary = await _resolve(summarize(prompt))
        if not isinstance(summary, str):
            raise CompactionError(f"summarize() returned {type(summary).__name__}, expected str")
        if not summary.strip():
            return None
        return {"fromMessageId": middle[0]["id"], "toMessageId": middle[-1]["id"], "summary": summary}

    return compact


def _previous_summary(messages: Sequence[Message]) -> str | None:
    overlay = next((m for m in messages if is_compaction_message(m)), None)
    if overlay is None:
        return None
    texts = [p.get("text") for p in message_parts(overlay) if isinstance(p, Mapping) and p.get("type") == "text"]
    return "\n".join("" if t is None else str(t) for t in texts)


# ── Session wiring ──────────────────────────────────────────────────────


async def call_compaction_function(
    fn: Callable[..., Any], messages: Sequence[Message], *, token_counter: SessionCounter | None = None
) -> Any:
    """Call a registered compaction function the way ``Session.compact()`` must.

    ``token_counter`` is passed as a keyword only when ``fn`` accepts it (a
    parameter of that name, or ``**kwargs``), so plain ``fn(messages)``
    functions work too; an awaitable result is awaited. Returns what ``fn``
    returned (check it with :func:`plan_compaction`); exceptions propagate.
    """
    if token_counter is not None and _accepts_token_counter(fn):
        return await _resolve(fn(list(messages), token_counter=token_counter))
    return await _resolve(fn(list(messages)))


def _accepts_token_counter(fn: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(
        p.kind is p.VAR_KEYWORD
        or (p.name == "token_counter" and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD))
        for p in parameters
    )


def compactions_on_path(compactions: Sequence[Mapping[str, Any]], path_ids: Sequence[str]) -> list:
    """The compaction rows whose whole range lies on this path (branch-local, docs/deviations.md #13).

    ``compactions`` are stored rows ``{"id", "summary", "fromMessageId",
    "toMessageId", ...}`` in creation order; ``path_ids`` the raw message ids
    root to leaf (no overlays). A row is kept when both ends are on the path,
    ``from`` not after ``to``; the order is kept.
    """
    position = {message_id: index for index, message_id in enumerate(path_ids)}
    return [
        row for row in compactions
        if row.get("fromMessageId") in position and row.get("toMessageId") in position
        and position[row["fromMessageId"]] <= position[row["toMessageId"]]
    ]


def plan_compaction(
    result: Any,
    *,
    history: Sequence[Message],
    path_ids: Sequence[str],
    compactions: Sequence[Mapping[str, Any]],
) -> CompactResult | None:
    """Check a compaction function's result and return the row ``compact()`` stores.

    ``history`` is what the function was given (overlays applied),
    ``path_ids`` the raw path root to leaf, ``compactions`` all stored rows
    of the session in creation order.

    Returns ``None`` when there is nothing to store: ``result`` is ``None``
    or its summary is blank. Otherwise ``{"fromMessageId", "toMessageId",
    "summary"}`` (that key order, what ``compact()`` returns): iterative and
    single-overlay (docs/behaviours.md §8), ``from`` is the oldest compaction on this path's
    ``from`` (:func:`compactions_on_path`) when it starts no later than the
    result's end, else the result's own ``from``. An end naming an overlay
    message (``compaction_<row id>``) stands for that overlay's range.

    Raises:
        CompactionError: (for ``on_compaction_error``, docs/deviations.md #14) the
            result is not a mapping, its summary is not a string, or its
            range is not visible on the current path (unknown id, a message
            hidden inside an overlay, another branch) or ends before it starts.
    """
    if result is None:
        return None
    if not isinstance(result, Mapping):
        raise CompactionError(
            f"compaction function returned {type(result).__name__}; expected None or "
            "{fromMessageId, toMessageId, summary}"
        )
    summary = result.get("summary")
    if not isinstance(summary, str):
        raise CompactionError(f"compaction summary must be a string, got {type(summary).__name__}")
    if not summary.strip():
        return None
    from_id = _resolve_end(result.get("fromMessageId"), history, compactions, "fromMessageId")
    to_id = _resolve_end(result.get("toMessageId"), history, compactions, "toMessageId")
    position = {message_id: index for index, message_id in enumerate(path_ids)}
    if from_id not in position or to_id not in position or position[from_id] > position[to_id]:
        raise CompactionError(
            f"compaction range {result.get('fromMessageId')!r}..{result.get('toMessageId')!r} "
            "is not a range of the current path"
        )
    on_path = compactions_on_path(compactions, path_ids)
    if on_path and position[on_path[0]["fromMessageId"]] <= position[to_id]:
        from_id = on_path[0]["fromMessageId"]
    return {"fromMessageId": from_id, "toMessageId": to_id, "summary": summary}


def _resolve_end(message_id: Any, history, compactions, key: str) -> str:
    visible = {m.get("id") for m in history}
    if not isinstance(message_id, str) or message_id not in visible:
        raise CompactionError(
            f"compaction {key} {message_id!r} is not a message of the current history"
        )
    if not message_id.startswith(COMPACTION_PREFIX):
        return message_id
    row_id = message_id[len(COMPACTION_PREFIX):]
    row = next((r for r in compactions if str(r.get("id")) == row_id), None)
    if row is None:
        raise CompactionError(f"compaction {key} {message_id!r} names no stored compaction")
    return row[key]


# ── Broadcasts (docs/behaviours.md §12, docs/deviations.md #16) ─────────


def status_broadcast(
    *,
    phase: str,
    token_estimate: int,
    token_threshold: float | None,
    session_id: str,
    tokens_before: int | None = None,
) -> str:
    """The ``cf_agent_session`` status payload as compact JSON.

    Keys in order: ``type``, ``phase`` (``"idle"`` or ``"compacting"``),
    ``tokenEstimate``, ``tokenThreshold`` (``null`` without a threshold),
    ``compacted: {"tokensBefore"}`` only after a successful compaction
    (``tokens_before`` given), then ``sessionId`` (``""`` for a session
    that is not namespaced).

    Raises:
        InvalidInputError: ``phase`` is neither ``"idle"`` nor ``"compacting"``.
    """
    if phase not in ("idle", "compacting"):
        raise InvalidInputError(f"phase must be 'idle' or 'compacting', got {phase!r}", field="phase")
    if (tokens_before is None and type(token_estimate) is int
            and -MAX_SAFE_INTEGER <= token_estimate <= MAX_SAFE_INTEGER
            and (token_threshold is None or type(token_threshold) in (int, float))):
        # The payload after every append: each value as js_stringify writes it, the threshold's text
        # made once (a float costs a digits search), the object around them as the dict below is written.
        key = (type(token_threshold), token_threshold)
        threshold = _THRESHOLD_TEXT.get(key)
        if threshold is None:
            threshold = js_stringify(token_threshold)
            if len(_THRESHOLD_TEXT) >= 16:
                _THRESHOLD_TEXT.clear()
            _THRESHOLD_TEXT[key] = threshold
        return (f'{{"type":"{CF_AGENT_SESSION}","phase":"{phase}","tokenEstimate":{token_estimate},'
                f'"tokenThreshold":{threshold},"sessionId":{js_stringify(session_id)}}}')
    payload: dict[str, Any] = {
        "type": CF_AGENT_SESSION,
        "phase": phase,
        "tokenEstimate": token_estimate,
        "tokenThreshold": token_threshold,
    }
    if tokens_before is not None:
        payload["compacted"] = {"tokensBefore": tokens_before}
    payload["sessionId"] = session_id
    return js_stringify(payload)


def error_text(error: BaseException | str) -> str:
    """The message of ``error`` as broadcast: ``str(error)``, or its class name when empty."""
    if isinstance(error, str):
        return error
    return str(error) or type(error).__name__


def error_broadcast(error: BaseException | str, *, session_id: str) -> str:
    """The ``cf_agent_session_error`` payload as compact JSON: ``type``, ``error``, ``sessionId``."""
    return js_stringify({"type": CF_AGENT_SESSION_ERROR, "error": error_text(error), "sessionId": session_id})


def noop_compaction_warning(estimate: int, threshold: float, *, has_token_counter: bool) -> str:
    """Text of the one-time warning when auto-compaction fired but stored nothing."""
    advice = (
        "A token counter is configured; it reaches the boundary walk one message at a time, "
        "so a whole-prompt counter can still leave nothing to compact. Give "
        "create_compact_function(token_counter=...) a per-message counter."
        if has_token_counter else
        "For tool-heavy histories, give compact_after() a token_counter; it also drives "
        "create_compact_function's boundary walk."
    )
    return (
        f"[Session] Auto-compaction fired (~{estimate} tokens > {js_stringify(threshold)}) but the compaction "
        f"function returned null, so history was not shortened. {advice}"
    )
