"""Claude Code transcripts into a durable-sessions host (``durable-sessions import``).

A Claude Code ``projects`` folder, one project folder, or single ``.jsonl``
files (:func:`runtime.cli.formats.claude_code.find_claude_code_files`) go to
one of two places:

* **sessions** (the default): each file becomes one session, converted by
  :mod:`runtime.cli.formats.claude_code` (message tree from
  ``uuid``/``parentUuid`` with its branches, tool results folded into their
  calls, unknown entries kept as data parts). Messages are appended in
  chains (:func:`runtime.cli.importer.plan_batches`), then the session's
  metadata is set (``set_metadata``: ``source``, ``name``,
  ``parentSessionId`` for a sub-agent, ``projectKey``, ``transcriptKey``,
  ...; see :mod:`actors.session_metadata`). Metadata is written last, so a
  session that has it holds every message of its file. An empty file
  becomes a session with metadata and no messages. Sub-agent sessions are
  ``"<parent>:agent-<id>"`` and name their parent in ``parentSessionId``.
* **transcripts** (``--as transcripts``): each file's lines are appended
  unchanged to a transcript store (the Claude Agent SDK ``SessionStore``
  protocol: :class:`~runtime.client.transcripts.DurableSessionStore` or an
  in-process store) under the key the SDK itself would use
  (:attr:`~runtime.cli.formats.claude_code.ClaudeCodeFile.transcript_key`), so
  ``load`` gives back the file's lines, and the SDK can resume the session
  from the store. An empty file stores nothing (``load`` gives ``None``).

Both are idempotent: importing the same files again stores nothing new
(a message id already stored is skipped; a transcript is sent only past
the lines the store already holds). A file that fails is reported and the
others go on.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import anyio
from tqdm import tqdm

from common.errors import ConflictError
from runtime.cli.formats import ImportedSession
from runtime.cli.formats.claude_code import (
    ClaudeCodeFile,
    find_claude_code_files,
    read_claude_code_session,
    read_transcript_entries,
)
from runtime.cli.importer import DEFAULT_MAX_BATCH_BYTES, plan_batches

__all__ = [
    "TARGETS",
    "ClaudeImportReport",
    "ImportUsageError",
    "import_claude_code_sessions",
    "push_claude_code_transcripts",
    "run_import_command",
    "session_metadata",
]

#: Where ``--as`` can send Claude Code files.
TARGETS = ("sessions", "transcripts")


class SessionTarget(Protocol):
    """A session to import into: a client ``SessionHandle`` or an in-process actor stub."""

    async def append_messages(self, messages: list[dict[str, Any]], parent_id: str | None = ...) -> list[bool]: ...

    async def call(self, method: str, /, *args: Any) -> Any: ...


class TranscriptTarget(Protocol):
    """What ``--as transcripts`` needs of a ``SessionStore``."""

    async def append(self, key: Mapping[str, Any], entries: Sequence[Mapping[str, Any]]) -> Any: ...

    async def load(self, key: Mapping[str, Any]) -> list[dict[str, Any]] | None: ...


class ImportUsageError(ValueError):
    """The command line does not describe a possible import (the CLI exits with status 2)."""


@dataclass
class ClaudeImportReport:
    """What an import did.

    Attributes:
        files: files imported without error.
        sent: messages (sessions) or entries (transcripts) sent.
        stored: how many of them were stored; the rest were already there.
        warnings: ``(file, warning)`` for content the converter tolerated.
        failures: ``(file, error)`` for files that failed (the others went on).
    """

    files: int = 0
    sent: int = 0
    stored: int = 0
    warnings: list[tuple[str, str]] = field(default_factory=list)
    failures: list[tuple[str, str]] = field(default_factory=list)


def session_metadata(session: ImportedSession, *, prefix: str = "") -> dict[str, Any]:
    """The metadata object stored for an imported session (``source`` first).

    ``parentSessionId`` carries the same ``prefix`` as the session ids.
    """
    metadata: dict[str, Any] = {"source": session.source, **session.metadata}
    if session.name is not None:
        metadata["name"] = session.name
    if session.parent_session_id is not None:
        metadata["parentSessionId"] = prefix + session.parent_session_id
    return metadata


async def import_claude_code_sessions(
    files: Iterable[ClaudeCodeFile],
    open_session: Callable[[str], SessionTarget],
    *,
    prefix: str = "",
    concurrency: int = 8,
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
    on_progress: Callable[[int], Any] | None = None,
) -> ClaudeImportReport:
    """Import each file as one session (trio or asyncio), ``concurrency`` files at a time.

    Args:
        files: the transcripts (see :func:`find_claude_code_files`).
        open_session: session id -> target (``client.session`` or ``namespace.get_by_name``).
        prefix: added to every session id (and ``parentSessionId``).
        on_progress: called with ``1`` after each file, imported or failed.
    """

    async def one(file: ClaudeCodeFile, report: ClaudeImportReport) -> None:
        session = await anyio.to_thread.run_sync(read_claude_code_session, file)
        report.warnings.extend((str(file.path), warning) for warning in session.warnings)
        target = open_session(prefix + session.session_id)
        for parent_id, chain in plan_batches(session.messages, max_batch_bytes=max_batch_bytes):
            flags = await target.append_messages(chain, parent_id)
            report.sent += len(chain)
            report.stored += sum(bool(flag) for flag in flags)
        await target.call("set_metadata", session_metadata(session, prefix=prefix))

    return await _each_file(files, one, concurrency, on_progress)


async def push_claude_code_transcripts(
    files: Iterable[ClaudeCodeFile],
    store: TranscriptTarget,
    *,
    concurrency: int = 8,
    on_progress: Callable[[int], Any] | None = None,
) -> ClaudeImportReport:
    """Append each file's lines, unchanged and in order, to ``store`` under the file's SDK key.

    The key's transcript is loaded first: when it already holds the file's
    first lines, only the lines after them are sent (entries without a
    ``uuid`` are not de-duplicated by the store, so sending them again would
    store them twice). Pushing a file again thus stores nothing, and pushing
    a file Claude Code has since appended to stores only the new lines.

    A file fails as a whole, with nothing of it sent, when a line is not a
    JSON object, or when the stored transcript is not a prefix of the file
    (:class:`~common.errors.ConflictError`; delete the key to push it again).
    """

    async def one(file: ClaudeCodeFile, report: ClaudeImportReport) -> None:
        entries = await anyio.to_thread.run_sync(read_transcript_entries, file.path)
        held = await store.load(file.transcript_key) or []
        if entries[: len(held)] != held:
            raise ConflictError(
                f"the store holds {len(held)} entries under {file.transcript_key} that are not the "
                "first lines of this file; delete that transcript to push the file again"
            )
        if len(entries) > len(held):
            await store.append(file.transcript_key, entries[len(held):])
        report.sent += len(entries)
        report.stored += len(entries) - len(held)

    return await _each_file(files, one, concurrency, on_progress)


async def _each_file(
    files: Iterable[ClaudeCodeFile],
    work: Callable[[ClaudeCodeFile, ClaudeImportReport], Any],
    concurrency: int,
    on_progress: Callable[[int], Any] | None,
) -> ClaudeImportReport:
    report = ClaudeImportReport()
    limiter = anyio.CapacityLimiter(max(1, concurrency))

    async def guarded(file: ClaudeCodeFile) -> None:
        async with limiter:
            try:
                await work(file, report)
            except Exception as exc:  # noqa: BLE001 - recorded; the import goes on
                report.failures.append((str(file.path), f"{type(exc).__name__}: {exc}"))
            else:
                report.files += 1
            if on_progress is not None:
                on_progress(1)

    async with anyio.create_task_group() as group:
        for file in files:
            group.start_soon(guarded, file)
    return report


# -- the command line ---------------------------------------------------------------------


async def run_import_command(args: argparse.Namespace) -> int:
    """``durable-sessions import`` of Claude Code files; returns the exit status (0, or 1 on failures).

    Uses ``args.file``, ``args.target`` (``sessions`` / ``transcripts``),
    ``args.prefix``, ``args.data`` (import into a data folder no server is
    using) or ``args.url``/``args.token``, ``args.concurrency`` and
    ``args.no_progress``. The progress bar (one step per file) goes to
    stderr, also when it is not a terminal; the summary to stdout.

    Raises:
        ImportUsageError: the path does not exist (or holds a symbolic link), or ``--prefix`` with
            ``--as transcripts``.
    """
    if args.target == "transcripts" and args.prefix:
        raise ImportUsageError("--prefix does not apply to --as transcripts: keys come from the files")
    try:
        files = find_claude_code_files(args.file)
    except OSError as exc:
        raise ImportUsageError(str(exc)) from None
    with tqdm(total=len(files), unit="file", desc="import", disable=args.no_progress or None,  # None: a terminal only
              file=sys.stderr) as bar:
        report = await _run(args, files, bar.update)
    _print_report(report, len(files), args.target)
    return 1 if report.failures else 0


async def _run(args: argparse.Namespace, files: list[ClaudeCodeFile], progress: Callable[[int], Any]) -> ClaudeImportReport:
    options = {"concurrency": args.concurrency, "on_progress": progress}
    if args.data is not None:  # the host's modules only here: the client path loads no server (runtime.cli.main)
        from runtime.host.actor_host import open_host
        from runtime.server.app import bind_sessions
        from runtime.server.transcripts import open_transcripts

        async with open_host(Path(args.data)) as host:
            if args.target == "transcripts":
                async with open_transcripts(host) as store:
                    return await push_claude_code_transcripts(files, store, **options)
            namespace = bind_sessions(host)
            return await import_claude_code_sessions(files, namespace.get_by_name, prefix=args.prefix, **options)
    from runtime.client import DurableSessionStore, SessionsClient

    async with SessionsClient(args.url, token=args.token) as client:
        await client.health()  # no server: one line and a hint (runtime.cli.main), not one failure per file
    if args.target == "transcripts":
        async with DurableSessionStore(args.url, token=args.token) as store:
            return await push_claude_code_transcripts(files, store, **options)
    async with SessionsClient(args.url, token=args.token) as client:
        return await import_claude_code_sessions(files, client.session, prefix=args.prefix, **options)


def _print_report(report: ClaudeImportReport, total: int, target: str) -> None:
    unit = "entries" if target == "transcripts" else "messages"
    verb = "pushed" if target == "transcripts" else "imported"
    print(f"{verb} {report.files} of {total} Claude Code files as {target}: "
          f"{report.stored} {unit} stored, {report.sent - report.stored} already there")
    for path, warning in report.warnings:
        print(f"warning: {path}: {warning}", file=sys.stderr)
    for path, error in report.failures:
        print(f"failed: {path}: {error}", file=sys.stderr)
