"""The session-summary fold of the Claude Agent SDK, without the SDK.

A ``SessionStore`` that implements ``list_session_summaries`` keeps one
summary per main transcript, updated inside every ``append`` by folding the
new entries into the previous summary (the contract: :mod:`storage.transcripts`).
The SDK ships that fold as ``claude_agent_sdk.fold_session_summary``; the server must
not depend on the SDK (it bundles a whole CLI), so this module carries the
same rule. ``tests/storage/test_transcripts_store.py`` pins it against the SDK's own
function on every real transcript we have, so an SDK upgrade that changes
the rule fails loudly.

A summary is ``{"session_id": str, "mtime": int, "data": dict}``. ``data`` is
SDK-owned state: stores persist it verbatim and never read it. The fold never
touches ``mtime`` (a new summary starts at ``0``); the store stamps it with
its own write time after persisting.

Every field of ``data`` is set-once or last-wins, so folding needs only the
previous summary and the new batch, never the transcript itself:

* set once: ``is_sidechain`` (from the first entry), ``created_at`` (epoch ms
  of the first parseable ``timestamp``), ``cwd`` (first non-empty),
  ``first_prompt`` + ``first_prompt_locked`` (first real user prompt, one
  line, at most 200 characters plus an ellipsis), ``command_fallback`` (the
  first ``<command-name>`` seen before a real prompt);
* last wins: ``custom_title``, ``ai_title``, ``last_prompt``,
  ``summary_hint``, ``git_branch`` (from ``customTitle``, ``aiTitle``,
  ``lastPrompt``, ``summary``, ``gitBranch``);
* ``tag``: set by a ``type == "tag"`` entry, cleared by an empty one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

__all__ = ["FIRST_PROMPT_MAX_CHARS", "fold_session_summary"]

#: Longest first prompt kept, in characters, before the ellipsis.
FIRST_PROMPT_MAX_CHARS = 200

#: Transcript entry key -> summary ``data`` key, for the last-wins strings.
_LAST_WINS_FIELDS = (
    ("customTitle", "custom_title"),
    ("aiTitle", "ai_title"),
    ("lastPrompt", "last_prompt"),
    ("summary", "summary_hint"),
    ("gitBranch", "git_branch"),
)

_COMMAND_NAME = re.compile(r"<command-name>(.*?)</command-name>")

#: Prompts Claude Code writes itself; they never count as the first prompt.
_NOT_A_PROMPT = re.compile(
    r"^(?:<local-command-stdout>|<session-start-hook>|<tick>|<goal>|"
    r"\[Request interrupted by user[^\]]*\]|"
    r"\s*<ide_opened_file>[\s\S]*</ide_opened_file>\s*$|"
    r"\s*<ide_selection>[\s\S]*</ide_selection>\s*$)"
)


def fold_session_summary(
    prev: Mapping[str, Any] | None, session_id: str, entries: Iterable[Mapping[str, Any]]
) -> dict[str, Any]:
    """Fold a batch of main-transcript entries into the running summary.

    Args:
        prev: the summary returned by the previous fold for this session, or
            ``None`` for the first batch. It is not modified.
        session_id: the session's id (used only when ``prev`` is ``None``).
        entries: the batch, in append order (JSON objects). Never pass a
            sub-transcript's entries: they must not shape the main summary.

    Returns:
        A new ``{"session_id", "mtime", "data"}`` dict; ``mtime`` is copied
        from ``prev`` (``0`` for a new summary) for the caller to stamp.
    """
    summary: dict[str, Any]
    if prev is None:
        summary = {"session_id": session_id, "mtime": 0, "data": {}}
    else:
        summary = {"session_id": prev["session_id"], "mtime": prev["mtime"], "data": dict(prev["data"])}
    data = summary["data"]
    for entry in entries:
        _fold_entry(data, entry)
    return summary


def _fold_entry(data: dict[str, Any], entry: Mapping[str, Any]) -> None:
    if "is_sidechain" not in data:
        data["is_sidechain"] = entry.get("isSidechain") is True
    if "created_at" not in data:
        created = _iso_to_epoch_ms(entry.get("timestamp"))
        if created is not None:
            data["created_at"] = created
    if "cwd" not in data:
        cwd = entry.get("cwd")
        if isinstance(cwd, str) and cwd:
            data["cwd"] = cwd
    _fold_first_prompt(data, entry)
    for source, target in _LAST_WINS_FIELDS:
        value = entry.get(source)
        if isinstance(value, str):
            data[target] = value
    if entry.get("type") == "tag":
        tag = entry.get("tag")
        if isinstance(tag, str) and tag:
            data["tag"] = tag
        else:
            data.pop("tag", None)


def _iso_to_epoch_ms(value: Any) -> int | None:
    """Epoch milliseconds of an ISO-8601 string (``Z`` accepted), else ``None``.

    A string without a UTC offset is read as local time, as the SDK does.
    """
    if not isinstance(value, str):
        return None
    text = value.replace("Z", "+00:00") if value.endswith("Z") else value
    try:
        return int(datetime.fromisoformat(text).timestamp() * 1000)
    except ValueError:
        return None


def _fold_first_prompt(data: dict[str, Any], entry: Mapping[str, Any]) -> None:
    if data.get("first_prompt_locked") or not _may_hold_prompt(entry):
        return
    for raw in _user_texts(entry):
        text = raw.replace("\n", " ").strip()
        if not text:
            continue
        command = _COMMAND_NAME.search(text)
        if command:
            if not data.get("command_fallback"):
                data["command_fallback"] = command.group(1)
            continue
        if _NOT_A_PROMPT.match(text):
            continue
        if len(text) > FIRST_PROMPT_MAX_CHARS:
            text = text[:FIRST_PROMPT_MAX_CHARS].rstrip() + "\u2026"
        data["first_prompt"] = text
        data["first_prompt_locked"] = True
        return


def _may_hold_prompt(entry: Mapping[str, Any]) -> bool:
    """A user entry that is not meta, not a compact summary, not a tool result."""
    if entry.get("type") != "user":
        return False
    if entry.get("isMeta") is True or entry.get("isCompactSummary") is True:
        return False
    message = entry.get("message")
    if isinstance(message, Mapping):
        content = message.get("content")
        if isinstance(content, list) and any(
            isinstance(block, Mapping) and block.get("type") == "tool_result" for block in content
        ):
            return False
    return True


def _user_texts(entry: Mapping[str, Any]) -> list[str]:
    message = entry.get("message")
    if not isinstance(message, Mapping):
        return []
    content = message.get("content")
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        return []
    return [
        block["text"]
        for block in content
        if isinstance(block, Mapping) and block.get("type") == "text" and isinstance(block.get("text"), str)
    ]
