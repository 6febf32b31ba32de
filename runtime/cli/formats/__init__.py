"""Converters from foreign conversation formats to Session messages.

Each converter reads a format and returns :class:`ImportedSession` values:
messages in the Session's JSON shape (AI SDK ``UIMessage`` compatible:
``{"id", "role", "parts", "createdAt"?, "metadata"?}``), each paired with
its parent's id so branches survive. Nothing here writes anything: the
importer appends ``messages`` in list order (a parent always comes before
its children) with ``Session.append_message(message, parent_id)``.

Part shapes produced (the AI SDK's):

* ``{"type": "text", "text"}``, ``{"type": "reasoning", "text"}``,
  ``{"type": "file", "mediaType", "url"}``;
* tool calls ``{"type": "tool-<name>", "toolCallId", "toolName", "state",
  "input", "output"?, "errorText"?}`` with the call's result folded in:
  ``state`` is ``"output-available"`` (``output`` set), ``"output-error"``
  (``errorText`` set; the tool reported failure) or ``"input-available"``
  (no result was found);
* ``{"type": "data-<format>", "data"}`` for anything the format holds that
  has no part of its own, kept verbatim so nothing is lost (model
  converters skip data parts).

Modules: :mod:`runtime.cli.formats.claude_code` (Claude Code ``.jsonl``
transcripts) and :mod:`runtime.cli.formats.openai_chat` (OpenAI chat messages,
tau-bench trajectories).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

#: Part states that mean a tool call got its result.
RESULT_STATES = frozenset({"output-available", "output-error"})


class FormatError(ValueError):
    """The input is not in the expected format.

    The message names the place (file, line, conversation, message index)
    and what is wrong. Raised before anything is returned, so an importer
    that converts first writes nothing.
    """


@dataclass(frozen=True, slots=True)
class ImportedMessage:
    """One message and the id of its parent (``None`` for a root)."""

    message: dict[str, Any]
    parent_id: str | None


@dataclass(slots=True)
class ImportedSession:
    """A converted conversation, ready to append to one Session.

    Attributes:
        session_id: the suggested session id (deterministic).
        messages: in append order: every parent precedes its children.
        source: the format, e.g. ``"claude-code"`` or ``"openai-chat"``.
        name: a human title when the input has one, else ``None``.
        parent_session_id: for a sub-agent transcript, the session that
            spawned it; else ``None``.
        metadata: facts about the conversation as a whole (JSON values).
        warnings: problems tolerated while converting (e.g. an unreadable
            line kept as a data part), one sentence each.
    """

    session_id: str
    messages: list[ImportedMessage]
    source: str
    name: str | None = None
    parent_session_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def is_tool_part(part: Mapping[str, Any]) -> bool:
    """``True`` for a tool-call part (``tool-<name>`` or ``dynamic-tool``)."""
    kind = part.get("type")
    return isinstance(kind, str) and (kind.startswith("tool-") or kind == "dynamic-tool")


def iter_tool_parts(session: ImportedSession) -> Iterator[dict[str, Any]]:
    """Every tool-call part of every message, in order."""
    for item in session.messages:
        for part in item.message["parts"]:
            if is_tool_part(part):
                yield part


__all__ = [
    "RESULT_STATES",
    "FormatError",
    "ImportedMessage",
    "ImportedSession",
    "is_tool_part",
    "iter_tool_parts",
]
