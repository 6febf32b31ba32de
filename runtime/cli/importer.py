"""Loading converted conversations into sessions (``durable-sessions import``).

:func:`read_conversations` turns a file or folder into
:class:`runtime.cli.formats.ImportedSession` values with the converters of
:mod:`runtime.cli.formats` (OpenAI chat / tau-bench JSON, Claude Code
transcripts). :func:`import_sessions` appends them to sessions through
anything with the Session's ``append_messages(messages, parent_id)`` -- a
client :class:`~runtime.client.SessionHandle` or an in-process actor stub.

Each conversation is cut into chains (runs of messages where each one's
parent is the message before): one ``append_messages`` call per chain, so a
linear conversation is one request, and branches keep their parents. Chains
are split further so no request body passes ``max_batch_bytes``. Importing
the same file twice stores nothing new (duplicate ids are skipped).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import anyio

from common.wire import JSON, encode_body
from runtime.cli.formats import ImportedMessage, ImportedSession
from runtime.cli.formats.claude_code import iter_claude_code_sessions
from runtime.cli.formats.openai_chat import load_openai_chat

__all__ = ["FORMATS", "ImportReport", "detect_format", "import_sessions", "plan_batches", "read_conversations"]

#: Formats ``read_conversations`` understands.
FORMATS = ("openai-chat", "claude-code")
#: Default limit of one batch request (half the server's default body limit).
DEFAULT_MAX_BATCH_BYTES = 4 * 1024 * 1024


class SessionSink(Protocol):
    async def append_messages(self, messages: list[dict[str, Any]], parent_id: str | None = ...) -> list[bool]: ...


@dataclass
class ImportReport:
    """What an import did.

    Attributes:
        sessions: conversations imported without error.
        messages: messages sent.
        inserted: messages stored (the rest were already there).
        failures: ``(session_id, error message)`` of conversations that failed.
    """

    sessions: int = 0
    messages: int = 0
    inserted: int = 0
    failures: list[tuple[str, str]] = field(default_factory=list)


def detect_format(path: Path) -> str:
    """``"claude-code"`` for a folder or a ``.jsonl`` of transcript entries, else ``"openai-chat"``."""
    if path.is_dir():
        return "claude-code"
    if path.suffix == ".jsonl":
        with path.open(encoding="utf-8") as handle:
            first = next((line for line in handle if line.strip()), "")
        try:
            entry = json.loads(first)
        except ValueError:
            return "openai-chat"
        if isinstance(entry, dict) and ("uuid" in entry or "sessionId" in entry or "leafUuid" in entry):
            return "claude-code"
    return "openai-chat"


def read_conversations(
    path: str | os.PathLike[str], *, format: str = "auto", prefix: str = ""
) -> list[ImportedSession]:
    """Convert ``path`` to sessions (ids prefixed with ``prefix``).

    Raises:
        FormatError: the input is not in the format (the message says where).
        ValueError: an unknown ``format``.
        OSError: the path cannot be read.
    """
    path = Path(path)
    kind = detect_format(path) if format == "auto" else format
    if kind == "openai-chat":
        return load_openai_chat(path, session_prefix=prefix)
    if kind == "claude-code":
        sessions = list(iter_claude_code_sessions(path))
        for session in sessions:
            session.session_id = prefix + session.session_id
        return sessions
    raise ValueError(f"unknown format {format!r}; use auto, {', '.join(FORMATS)}")


def plan_batches(
    messages: list[ImportedMessage], *, max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES
) -> list[tuple[str | None, list[dict[str, Any]]]]:
    """``[(parent_id, chain)]``: the calls that store ``messages`` with their parents.

    A new chain starts wherever a message's parent is not the message
    before it, and wherever the chain's JSON would pass ``max_batch_bytes``.
    """
    batches: list[tuple[str | None, list[dict[str, Any]]]] = []
    size = 0
    previous: str | None = None
    for item in messages:
        cost = len(encode_body(item.message, JSON)) + 1  # its bytes in the request body
        if not batches or item.parent_id != previous or size + cost > max_batch_bytes:
            batches.append((item.parent_id, []))
            size = 0
        batches[-1][1].append(item.message)
        size += cost
        previous = item.message["id"]
    return batches


async def import_sessions(
    sessions: Iterable[ImportedSession],
    open_session: Callable[[str], SessionSink],
    *,
    concurrency: int = 8,
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
    on_progress: Callable[[int], Any] | None = None,
) -> ImportReport:
    """Append every session's messages, ``concurrency`` sessions at a time (trio or asyncio).

    ``open_session(session_id)`` gives the target (e.g. ``client.session``).
    ``on_progress(n)`` is called after each batch with its message count. A
    conversation that fails is recorded in :attr:`ImportReport.failures` and
    the others go on; messages of its earlier batches stay stored.
    """
    report = ImportReport()
    limiter = anyio.CapacityLimiter(max(1, concurrency))

    async def one(session: ImportedSession) -> None:
        async with limiter:
            try:
                await _import_one(session, open_session(session.session_id), report, max_batch_bytes, on_progress)
            except Exception as exc:  # noqa: BLE001 - recorded; the import goes on
                report.failures.append((session.session_id, f"{type(exc).__name__}: {exc}"))
            else:
                report.sessions += 1

    async with anyio.create_task_group() as group:
        for session in sessions:
            group.start_soon(one, session)
    return report


async def _import_one(
    session: ImportedSession, sink: SessionSink, report: ImportReport, max_batch_bytes: int,
    on_progress: Callable[[int], Any] | None,
) -> None:
    for parent_id, chain in plan_batches(session.messages, max_batch_bytes=max_batch_bytes):
        flags = await sink.append_messages(chain, parent_id)
        report.messages += len(chain)
        report.inserted += sum(bool(flag) for flag in flags)
        if on_progress is not None:
            on_progress(len(chain))
