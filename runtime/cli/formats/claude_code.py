"""Claude Code transcripts (``~/.claude/projects/<encoded-cwd>/*.jsonl``) as Sessions.

A transcript holds one JSON entry per line. ``user`` and ``assistant``
entries carry an Anthropic API ``message``; every entry with a ``uuid``
names its ``parentUuid``, which makes the file a tree (edits and retries
are branches). Other entry types (``system``, ``attachment``, ``progress``,
``summary``, ``file-history-snapshot``, ``queue-operation``, ...) are Claude
Code's own bookkeeping.

How a file becomes Session messages (see :mod:`runtime.cli.formats` for the
part shapes):

* All ``assistant`` entries of one API response (same ``message.id``;
  Claude Code writes one entry per content block, sometimes interleaved
  with tool results) become ONE assistant message whose id is the first
  entry's ``uuid``. text -> ``text``, thinking -> ``reasoning`` (the
  signature in ``providerMetadata.anthropic``), tool_use -> a tool part.
* A ``user`` entry becomes a user message (id = its ``uuid``), except that
  each ``tool_result`` block is folded into the part of its call (matched by
  ``tool_use_id`` anywhere in the file; ``is_error`` gives
  ``output-error`` with ``errorText``). A user entry holding only folded
  results makes no message. Images and documents become ``file`` parts.
* A message's parent is the message standing for the nearest ancestor
  entry that made or joined one, so bookkeeping entries and folded results
  in between neither break the chain nor invent branches. Real branches
  (two prompts on one message) are kept. Messages are returned parents
  first, even when the file names a parent on a later line.
* Every other entry -- and a conversation entry without a ``uuid``, or
  repeating one -- is kept verbatim as a ``{"type": "data-claude-code",
  "id"?: uuid, "data": entry}`` part, not as a message of its own, so a
  model replaying the history never sees it. It goes to the message of its
  parent entry, or of the uuid it names (``messageId``, ``leafUuid``, its
  own repeated ``uuid``), else to the message of the latest conversation
  entry; with none of these yet, to the next message made; in a file with
  no conversation at all, to one ``system`` message. Unknown content blocks
  (and a second result for one call) are kept as ``data-claude-code-block``
  parts, lines that are not JSON objects as ``data-claude-code-line`` parts
  (with a warning), so conversion never fails on content.
* Compaction: the ``compact_boundary`` system entry is kept as a data part
  (with its ``logicalParentUuid``) and the ``isCompactSummary`` user entry
  stays a user message starting a new root, as in the file.
* ``metadata.claudeCode`` of a message: ``uuids`` (the entries merged into
  it), ``model`` (assistant), and ``isSidechain``/``isMeta``/
  ``isCompactSummary`` when true. ``createdAt`` is the first entry's
  ``timestamp``. Session ``metadata``: ``projectKey``, ``transcriptKey``,
  ``sessionId`` and ``cwd`` (first seen), and for sub-agents ``agentId``
  plus ``agentType``/``description`` from the ``.meta.json`` beside it.
  Session ``name``: the last ``customTitle``, else ``aiTitle``, else the
  last ``summary`` of a leaf in this file.

Sub-agent transcripts (``<session>/subagents/agent-<id>.jsonl``, or the older
``agent-<id>.jsonl`` beside the sessions) become their own sessions, id
``"<parent session>:agent-<id>"``, with ``parent_session_id`` set.
:func:`read_transcript_entries` is the raw mode: the lines as transcript
entries, for the transcript store (key: :attr:`ClaudeCodeFile.transcript_key`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import FormatError, ImportedSession
from ._claude_code_messages import BLOCK_PART, ENTRY_PART, LINE_PART, SOURCE, convert_entries

__all__ = [
    "BLOCK_PART",
    "ENTRY_PART",
    "LINE_PART",
    "SOURCE",
    "ClaudeCodeFile",
    "convert_claude_code_entries",
    "find_claude_code_files",
    "iter_claude_code_sessions",
    "read_claude_code_session",
    "read_transcript_entries",
]

_SUBAGENT_PREFIX = "agent-"
_SUBAGENTS_DIR = "subagents"


@dataclass(frozen=True, slots=True)
class ClaudeCodeFile:
    """One transcript file and where it sits.

    Attributes:
        path: the ``.jsonl`` file.
        project_key: the project folder's name (Claude Code's encoded cwd).
        session_id: the transcript-store session id, as the Claude Agent SDK
            derives it: the file name for files directly in the project
            folder, the session folder's name for nested sub-agent files.
        subpath: ``"subagents/agent-<id>"`` (the path below the session
            folder, without ``.jsonl``) for nested sub-agent files, else ``None``.
    """

    path: Path
    project_key: str
    session_id: str
    subpath: str | None = None

    @classmethod
    def from_path(cls, path: str | os.PathLike[str]) -> ClaudeCodeFile:
        """Classify ``path`` by its place in the ``projects`` layout."""
        path = Path(path)
        if path.stem.startswith(_SUBAGENT_PREFIX):
            for ancestor in list(path.parents)[:4]:
                if ancestor.name == _SUBAGENTS_DIR:
                    session_dir = ancestor.parent
                    subpath = path.relative_to(session_dir).with_suffix("").as_posix()
                    return cls(path, session_dir.parent.name, session_dir.name, subpath)
        return cls(path, path.parent.name, path.stem)

    @property
    def agent_id(self) -> str | None:
        """The sub-agent's id for a sub-agent transcript, else ``None``."""
        return self.path.stem[len(_SUBAGENT_PREFIX):] if self.path.stem.startswith(_SUBAGENT_PREFIX) else None

    @property
    def transcript_key(self) -> dict[str, str]:
        """The SDK ``SessionKey`` this file mirrors to in a transcript store."""
        key = {"project_key": self.project_key, "session_id": self.session_id}
        if self.subpath:
            key["subpath"] = self.subpath
        return key


def find_claude_code_files(path: str | os.PathLike[str]) -> list[ClaudeCodeFile]:
    """The transcripts at ``path``: one ``.jsonl`` file, or every ``.jsonl``
    below a folder (a project folder or the whole ``projects`` folder), sorted.

    Symbolic links are never followed: a link below the folder (a ``.jsonl``
    file or a folder on the way to one) is refused, so a shared folder cannot
    make an import read files elsewhere.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        OSError: a ``.jsonl`` file, or a folder below ``path``, is a symbolic link (the message names it).
    """
    path = Path(path)
    if path.is_file():
        return [ClaudeCodeFile.from_path(path)]
    if not path.is_dir():
        raise FileNotFoundError(f"no Claude Code transcript or folder at {path}")
    found: list[Path] = []
    for folder, folders, files in os.walk(path):  # os.walk never descends into a linked folder
        for name in sorted([*folders, *files]):
            entry = Path(folder) / name
            if entry.is_symlink() and (name in folders or name.endswith(".jsonl")):
                raise OSError(f"{entry} is a symbolic link; import follows no links (copy the file itself)")
        found.extend(Path(folder) / name for name in files if name.endswith(".jsonl"))
    return [ClaudeCodeFile.from_path(p) for p in sorted(found) if p.is_file()]


def iter_claude_code_sessions(path: str | os.PathLike[str]) -> Iterator[ImportedSession]:
    """Convert every transcript at ``path`` (see :func:`find_claude_code_files`), lazily."""
    for file in find_claude_code_files(path):
        yield read_claude_code_session(file)


def read_claude_code_session(file: ClaudeCodeFile | str | os.PathLike[str]) -> ImportedSession:
    """Convert one transcript file into a session (an empty file gives no messages).

    Raises:
        OSError: the file cannot be read. Content never raises.
    """
    if not isinstance(file, ClaudeCodeFile):
        file = ClaudeCodeFile.from_path(file)
    session = convert_claude_code_entries(_jsonl_lines(file.path.read_bytes()), session_id=file.session_id)
    session.metadata = {"projectKey": file.project_key, "transcriptKey": file.transcript_key, **session.metadata}
    if file.agent_id is not None:
        _mark_subagent(session, file)
    return session


def convert_claude_code_entries(
    lines: Iterable[str | Mapping[str, Any]], *, session_id: str
) -> ImportedSession:
    """Convert transcript lines (JSON text, or already parsed entries) to a session.

    The rules are in the module docstring. Never raises on content: what
    cannot be read is kept and reported in ``warnings``.
    """
    return convert_entries(lines, session_id)


def read_transcript_entries(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The file's lines as transcript entries, in order (blank lines skipped).

    For pushing a file into a transcript store unchanged (``--as transcripts``).
    Lines end at ``\n`` (``\r\n`` too); a BOM at the start is ignored.

    Raises:
        FormatError: a line is not UTF-8 or not a JSON object (``NaN`` and
            infinities, which a store refuses, included), or nests too
            deeply (``<path>:<line>: ...``).
        OSError: the file cannot be read.
    """
    with open(path, "rb") as handle:
        data = handle.read()
    entries = []
    for number, raw in enumerate(data.split(b"\n"), start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FormatError(f"{path}:{number}: not UTF-8: {exc}") from None
        line = line.removeprefix("\ufeff") if number == 1 else line
        if not line.strip():
            continue
        try:
            entry = json.loads(line, parse_constant=_no_constant)
        except ValueError as exc:
            raise FormatError(f"{path}:{number}: not JSON: {exc}") from None
        except RecursionError:
            raise FormatError(f"{path}:{number}: not JSON: nested too deeply") from None
        if not isinstance(entry, dict):
            raise FormatError(f"{path}:{number}: a transcript entry must be a JSON object")
        entries.append(entry)
    return entries


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _jsonl_lines(data: bytes) -> list[str]:
    """A JSONL file's lines: split at ``\n`` only (``\r\n`` too), a leading BOM dropped.

    Never :meth:`str.splitlines`: JSON strings may hold U+2028, U+2029 or
    U+0085 unescaped, and those must not cut an entry in two. Bytes that are
    not UTF-8 read as U+FFFD.
    """
    text = data.decode("utf-8", errors="replace").removeprefix("\ufeff")
    return [line.removesuffix("\r") for line in text.split("\n")]


def _mark_subagent(session: ImportedSession, file: ClaudeCodeFile) -> None:
    """Name a sub-agent session after its parent and link it."""
    parent = file.session_id if file.subpath else session.metadata.get("sessionId")
    meta_path = file.path.with_name(f"{file.path.stem}.meta.json")
    if meta_path.is_file():
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            session.warnings.append(f"{meta_path.name}: unreadable ({exc}); ignored")
        else:
            if isinstance(meta, dict):
                session.metadata.update({k: v for k, v in meta.items() if k in ("agentType", "description")})
    session.metadata["agentId"] = file.agent_id
    if parent is not None and parent != file.path.stem:
        session.parent_session_id = parent
        session.session_id = f"{parent}:{_SUBAGENT_PREFIX}{file.agent_id}"
    if session.name is None and isinstance(session.metadata.get("description"), str):
        session.name = session.metadata["description"]
