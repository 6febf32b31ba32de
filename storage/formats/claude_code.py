"""Claude Code transcripts (``~/.claude/projects/<encoded-cwd>/*.jsonl``) as Sessions.

A transcript holds one JSON entry per line. ``user`` and ``assistant``
entries carry an Anthropic API ``message``; every entry with a ``uuid``
names its ``parentUuid``, which makes the file a tree (edits and retries
are branches). Other entry types (``system``, ``attachment``, ``progress``,
``summary``, ``file-history-snapshot``, ``queue-operation``, ...) are Claude
Code's own bookkeeping.

How a file becomes Session messages (see :mod:`storage.formats` for the
part shapes):

* All ``assistant`` entries of one API response (same ``message.id``;
  Claude Code writes one entry per content block, sometimes interleaved
  with tool results) become ONE assistant message whose id is the first
  entry's ``uuid``. text -> ``text``, thinking -> ``reasoning`` (the
  signature in ``providerMetadata.anthropic``), tool_use -> a tool part.
* A ``user`` entry becomes a user message (id = its ``uuid``), except that
  each ``tool_result`` block is folded into the part of its call (matched by
  ``tool_use_id`` anywhere in the file; ``is_error`` gives
  ``output-error``). A user entry holding only folded results makes no
  message. Images and documents become ``file`` parts (data URLs).
* A message's parent is the message standing for the nearest ancestor
  entry that made or joined one, so bookkeeping entries and folded results
  in between do not break the chain and do not invent branches.
* Every other entry is kept verbatim as a ``{"type": "data-claude-code",
  "id"?: uuid, "data": entry}`` part (not a message of its own, so a model
  replaying the history never sees it). It goes to the message of its
  parent entry, or of the uuid it names (``messageId``, ``leafUuid``), else
  to the message of the latest conversation entry; with none of these yet,
  to the next message made; in a file with no conversation at all, to a
  single ``system`` message. Unknown content blocks are kept the same way as
  ``data-claude-code-block`` parts and lines that are not JSON objects as
  ``data-claude-code-line`` parts (with a warning), so conversion never
  fails on content. ``isCompactSummary`` user entries stay user messages
  (flagged in ``metadata.claudeCode``).

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

from . import FormatError, ImportedMessage, ImportedSession

SOURCE = "claude-code"
#: Part type of an entry kept verbatim.
ENTRY_PART = "data-claude-code"
#: Part type of a content block of a type this converter does not map.
BLOCK_PART = "data-claude-code-block"
#: Part type of a line that is not a JSON object (``data``: line number, text).
LINE_PART = "data-claude-code-line"

_SUBAGENT_PREFIX = "agent-"
_SUBAGENTS_DIR = "subagents"
_DEFAULT_MEDIA_TYPE = {"image": "image/*", "document": "application/pdf"}


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

    Raises:
        FileNotFoundError: ``path`` does not exist.
    """
    path = Path(path)
    if path.is_file():
        return [ClaudeCodeFile.from_path(path)]
    if not path.is_dir():
        raise FileNotFoundError(f"no Claude Code transcript or folder at {path}")
    return [ClaudeCodeFile.from_path(p) for p in sorted(path.rglob("*.jsonl")) if p.is_file()]


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
    lines = file.path.read_bytes().decode("utf-8", errors="replace").splitlines()
    session = convert_claude_code_entries(lines, session_id=file.session_id)
    session.metadata = {"projectKey": file.project_key, "transcriptKey": file.transcript_key, **session.metadata}
    if file.agent_id is not None:
        _mark_subagent(session, file)
    return session


def convert_claude_code_entries(
    lines: Iterable[str | Mapping[str, Any]], *, session_id: str
) -> ImportedSession:
    """Convert transcript lines (JSON text, or already parsed entries) to a session.

    The rules are in the module docstring. Never raises on content.
    """
    entries = [(n, _parse_line(item)) for n, item in enumerate(lines, start=1)]
    converter = _Converter(session_id, [(n, e) for n, e in entries if e is not _BLANK])
    return converter.run()


def read_transcript_entries(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The file's lines as transcript entries, in order (blank lines skipped).

    For pushing a file into a transcript store unchanged (``--as transcripts``).

    Raises:
        FormatError: a line is not a JSON object (``<path>:<line>: ...``).
        OSError: the file cannot be read.
    """
    entries = []
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except ValueError as exc:
                raise FormatError(f"{path}:{number}: not JSON: {exc}") from None
            if not isinstance(entry, dict):
                raise FormatError(f"{path}:{number}: a transcript entry must be a JSON object")
            entries.append(entry)
    return entries


# -- conversion -------------------------------------------------------------

_BLANK = object()


class _BadLine:
    def __init__(self, text: str) -> None:
        self.text = text


def _parse_line(item: str | Mapping[str, Any]) -> Any:
    if isinstance(item, Mapping):
        return item
    if not item.strip():
        return _BLANK
    try:
        entry = json.loads(item)
    except ValueError:
        return _BadLine(item)
    return entry if isinstance(entry, dict) else _BadLine(item)


class _Converter:
    """One file's conversion: index the entries, build messages, fold results."""

    def __init__(self, session_id: str, entries: list[tuple[int, Any]]) -> None:
        self.session_id = session_id
        self.entries = entries
        self.by_uuid: dict[str, Mapping[str, Any]] = {}
        self.group_leader: dict[str, str] = {}  # API message id -> first entry uuid
        self.first_result: dict[str, int] = {}  # tool_use_id -> id() of the block folded into it
        self.call_ids: set[str] = set()
        self.owner_cache: dict[str, str | None] = {}
        self.messages: dict[str, dict[str, Any]] = {}
        self.parents: dict[str, str | None] = {}
        self.calls: dict[str, dict[str, Any]] = {}
        self.results: list[tuple[str, Mapping[str, Any]]] = []
        self.waiting: dict[str | None, list[dict[str, Any]]] = {}
        self.current: str | None = None
        self.warnings: list[str] = []
        self.titles: dict[str, str] = {}
        self.facts: dict[str, str] = {}
        self._index()

    # pass 1: what each entry is

    def _index(self) -> None:
        for _, entry in self.entries:
            uuid = entry.get("uuid") if isinstance(entry, Mapping) else None
            if isinstance(uuid, str) and uuid not in self.by_uuid:
                self.by_uuid[uuid] = entry
                self._index_calls(uuid, entry)
            for field in ("sessionId", "cwd"):
                if isinstance(entry, Mapping) and isinstance(entry.get(field), str):
                    self.facts.setdefault(field, entry[field])
        for _, entry in self.entries:
            if self._canonical(entry):
                for block in _blocks(entry, "user"):
                    call_id = block.get("tool_use_id")
                    if block.get("type") == "tool_result" and call_id in self.call_ids:
                        self.first_result.setdefault(call_id, id(block))

    def _index_calls(self, uuid: str, entry: Mapping[str, Any]) -> None:
        for block in _blocks(entry, "assistant"):
            part = _block_part(block)
            if part is not None and "toolCallId" in part:
                self.call_ids.add(part["toolCallId"])
        api_id = _api_id(entry)
        if api_id is not None:
            self.group_leader.setdefault(api_id, uuid)

    def _canonical(self, entry: Any) -> bool:
        """``entry`` has a uuid and is that uuid's first entry in the file."""
        return isinstance(entry, Mapping) and self.by_uuid.get(entry.get("uuid")) is entry

    def _folds(self, block: Mapping[str, Any]) -> bool:
        return block.get("type") == "tool_result" and self.first_result.get(block.get("tool_use_id")) == id(block)

    def _message_id(self, entry: Mapping[str, Any]) -> str | None:
        """Id of the message ``entry`` makes or joins, or ``None``."""
        if not self._canonical(entry):
            return None
        if _is_conversation(entry, "assistant"):
            return self.group_leader.get(_api_id(entry), entry["uuid"])
        if _is_conversation(entry, "user") and not all(self._folds(b) for b in _content_blocks(entry)):
            return entry["uuid"]
        return None

    def _only_results(self, entry: Mapping[str, Any]) -> bool:
        """A user entry whose blocks all fold into their calls."""
        if not self._canonical(entry) or not _is_conversation(entry, "user"):
            return False
        blocks = _content_blocks(entry)
        return bool(blocks) and all(self._folds(b) for b in blocks)

    def _owner(self, uuid: Any) -> str | None:
        """The message standing for entry ``uuid``: its own, or its nearest ancestor's."""
        chain: list[str] = []
        found: str | None = None
        while isinstance(uuid, str) and uuid in self.by_uuid and uuid not in chain:
            if uuid in self.owner_cache:
                found = self.owner_cache[uuid]
                break
            chain.append(uuid)
            entry = self.by_uuid[uuid]
            found = self._message_id(entry)
            if found is not None:
                break
            uuid = entry.get("parentUuid")
        for seen in chain:
            self.owner_cache[seen] = found
        return found

    # pass 2: messages in file order

    def run(self) -> ImportedSession:
        for number, entry in self.entries:
            if isinstance(entry, _BadLine):
                self.warnings.append(f"line {number}: not a JSON object; kept as a {LINE_PART} part")
                self._keep({"type": LINE_PART, "data": {"line": number, "text": entry.text}}, self.current)
            else:
                self._take(entry)
        self._fold_results()
        ordered = self._ordered()
        name = self.titles.get("customTitle") or self.titles.get("aiTitle") or self.titles.get("summary")
        return ImportedSession(
            self.session_id, ordered, SOURCE, name=name, metadata=dict(self.facts), warnings=self.warnings
        )

    def _take(self, entry: Mapping[str, Any]) -> None:
        self._note_title(entry)
        message_id = self._message_id(entry)
        if message_id is not None:
            self._add_content(message_id, entry)
            self.current = message_id
        elif self._only_results(entry):
            self._collect_results(entry)
        else:
            self._keep(_entry_part(entry), self._home(entry))

    def _home(self, entry: Mapping[str, Any]) -> str | None:
        if "parentUuid" in entry and self._canonical(entry):
            return self._owner(entry.get("parentUuid"))
        for field in ("messageId", "leafUuid", "uuid"):
            owner = self._owner(entry.get(field))
            if owner is not None:
                return owner
        return self.current

    def _add_content(self, message_id: str, entry: Mapping[str, Any]) -> None:
        message = self.messages.get(message_id)
        if message is None:
            message = self._new_message(message_id, entry)
        else:
            message["metadata"]["claudeCode"]["uuids"].append(entry["uuid"])
        for block in _content_blocks(entry):
            if self._folds(block):
                self.results.append((block["tool_use_id"], block))
            else:
                message["parts"].append(self._part(block))

    def _new_message(self, message_id: str, entry: Mapping[str, Any]) -> dict[str, Any]:
        role = entry["type"]
        message: dict[str, Any] = {"id": message_id, "role": role, "parts": self.waiting.pop(message_id, [])}
        if None in self.waiting:
            message["parts"][:0] = self.waiting.pop(None)
        if isinstance(entry.get("timestamp"), str):
            message["createdAt"] = entry["timestamp"]
        message["metadata"] = {"claudeCode": _message_facts(entry)}
        self.messages[message_id] = message
        self.parents[message_id] = self._owner(entry.get("parentUuid"))
        return message

    def _collect_results(self, entry: Mapping[str, Any]) -> None:
        for block in _content_blocks(entry):
            self.results.append((block["tool_use_id"], block))

    def _keep(self, part: dict[str, Any], home: str | None) -> None:
        if home in self.messages:
            self.messages[home]["parts"].append(part)
        else:
            self.waiting.setdefault(home, []).append(part)

    def _part(self, block: Any) -> dict[str, Any]:
        part = _block_part(block)
        if part is None:
            return {"type": BLOCK_PART, "data": block}
        call_id = part.get("toolCallId")
        if call_id is not None and call_id not in self.calls:
            self.calls[call_id] = part
        return part

    def _note_title(self, entry: Mapping[str, Any]) -> None:
        for field in ("customTitle", "aiTitle"):
            if isinstance(entry.get(field), str) and entry[field]:
                self.titles[field] = entry[field]
        if entry.get("type") == "summary" and isinstance(entry.get("summary"), str):
            if entry.get("leafUuid") in self.by_uuid:
                self.titles["summary"] = entry["summary"]

    # pass 3: results into calls, parents before children

    def _fold_results(self) -> None:
        for call_id, block in self.results:
            part = self.calls.get(call_id)
            if part is not None:
                _attach_result(part, block)

    def _ordered(self) -> list[ImportedMessage]:
        leftovers = [part for parts in self.waiting.values() for part in parts]
        if leftovers and self.messages:
            self.messages[next(reversed(self.messages))]["parts"].extend(leftovers)
        elif leftovers:
            first = leftovers[0].get("id") or f"{self.session_id}:entries"
            self.messages[first] = {"id": first, "role": "system", "parts": leftovers}
            self.parents[first] = None
        ordered: list[ImportedMessage] = []
        emitted: set[str] = set()
        blocked: dict[str, list[str]] = {}
        for message_id in self.messages:
            parent = self.parents[message_id]
            if parent is not None and parent in self.messages and parent not in emitted:
                blocked.setdefault(parent, []).append(message_id)
                continue
            self._emit(message_id, ordered, emitted, blocked)
        for message_id in self.messages:
            if message_id not in emitted:  # a parent cycle: break it at a root
                self.warnings.append(f"message {message_id}: parent cycle; stored as a root")
                self.parents[message_id] = None
                self._emit(message_id, ordered, emitted, blocked)
        return ordered

    def _emit(self, message_id: str, ordered: list, emitted: set[str], blocked: dict[str, list[str]]) -> None:
        stack = [message_id]
        while stack:
            current = stack.pop()
            if current in emitted:
                continue
            emitted.add(current)
            parent = self.parents[current]
            ordered.append(ImportedMessage(self.messages[current], parent if parent in self.messages else None))
            stack.extend(reversed(blocked.pop(current, [])))


# -- entries and blocks -----------------------------------------------------


def _is_conversation(entry: Any, role: str) -> bool:
    return isinstance(entry, Mapping) and entry.get("type") == role and isinstance(entry.get("message"), Mapping)


def _api_id(entry: Any) -> str | None:
    if not _is_conversation(entry, "assistant"):
        return None
    api_id = entry["message"].get("id")
    return api_id if isinstance(api_id, str) else None


def _content_blocks(entry: Mapping[str, Any]) -> list[Any]:
    content = entry["message"].get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content) if isinstance(content, list) else []


def _blocks(entry: Any, role: str) -> list[Mapping[str, Any]]:
    if not _is_conversation(entry, role):
        return []
    return [b for b in _content_blocks(entry) if isinstance(b, Mapping)]


def _entry_part(entry: Mapping[str, Any]) -> dict[str, Any]:
    part: dict[str, Any] = {"type": ENTRY_PART}
    if isinstance(entry.get("uuid"), str):
        part["id"] = entry["uuid"]
    part["data"] = entry
    return part


def _message_facts(entry: Mapping[str, Any]) -> dict[str, Any]:
    facts: dict[str, Any] = {"uuids": [entry["uuid"]]}
    for flag in ("isSidechain", "isMeta", "isCompactSummary"):
        if entry.get(flag) is True:
            facts[flag] = True
    model = entry["message"].get("model")
    if entry["type"] == "assistant" and isinstance(model, str):
        facts["model"] = model
    return facts


def _block_part(block: Any) -> dict[str, Any] | None:
    """The part for a content block, or ``None`` when it has no mapping."""
    if not isinstance(block, Mapping):
        return None
    kind = block.get("type")
    if kind == "text" and isinstance(block.get("text"), str):
        return {"type": "text", "text": block["text"]}
    if kind == "thinking" and isinstance(block.get("thinking"), str):
        return _reasoning(block["thinking"], "signature", block.get("signature"))
    if kind == "redacted_thinking" and isinstance(block.get("data"), str):
        return _reasoning("", "redactedData", block["data"])
    if kind == "tool_use" and isinstance(block.get("id"), str) and isinstance(block.get("name"), str):
        return {
            "type": f"tool-{block['name']}",
            "toolCallId": block["id"],
            "toolName": block["name"],
            "state": "input-available",
            "input": block.get("input", {}),
        }
    if kind in _DEFAULT_MEDIA_TYPE:
        return _file_part(block.get("source"), _DEFAULT_MEDIA_TYPE[kind])
    return None


def _reasoning(text: str, key: str, value: Any) -> dict[str, Any]:
    part: dict[str, Any] = {"type": "reasoning", "text": text}
    if isinstance(value, str) and value:
        part["providerMetadata"] = {"anthropic": {key: value}}
    return part


def _file_part(source: Any, default_media_type: str) -> dict[str, Any] | None:
    if not isinstance(source, Mapping):
        return None
    media_type = source.get("media_type") if isinstance(source.get("media_type"), str) else default_media_type
    if source.get("type") == "base64" and isinstance(source.get("data"), str):
        return {"type": "file", "mediaType": media_type, "url": f"data:{media_type};base64,{source['data']}"}
    if source.get("type") == "url" and isinstance(source.get("url"), str):
        return {"type": "file", "mediaType": media_type, "url": source["url"]}
    return None


def _attach_result(part: dict[str, Any], block: Mapping[str, Any]) -> None:
    content = block.get("content")
    if block.get("is_error") is True:
        part["state"] = "output-error"
        part["errorText"] = _result_text(content)
    else:
        part["state"] = "output-available"
        part["output"] = content


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b["text"] for b in content if isinstance(b, Mapping) and isinstance(b.get("text"), str))
    return "" if content is None else json.dumps(content, ensure_ascii=False)


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
