"""Claude Code transcript entries to Session messages: the conversion itself.

The rules are stated once, in :mod:`runtime.cli.formats.claude_code` (the public
module); this module implements them in three passes over one file's
entries: index (uuids, API response groups, tool calls and their first
result), build (messages in file order, bookkeeping entries as data parts),
finish (results into their call parts, parents before children).
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Iterable, Mapping
from typing import Any

from . import ImportedMessage, ImportedSession

SOURCE = "claude-code"
#: Part type of an entry kept verbatim.
ENTRY_PART = "data-claude-code"
#: Part type of a content block of a type this converter does not map.
BLOCK_PART = "data-claude-code-block"
#: Part type of a line that is not a JSON object (``data``: line number, text).
LINE_PART = "data-claude-code-line"

_DEFAULT_MEDIA_TYPE = {"image": "image/*", "document": "application/pdf"}


def convert_entries(lines: Iterable[str | Mapping[str, Any]], session_id: str) -> ImportedSession:
    """Convert one file's lines (JSON text or parsed entries); never raises on content."""
    entries = [(n, _parse_line(item)) for n, item in enumerate(lines, start=1)]
    return _Converter(session_id, [(n, e) for n, e in entries if e is not _BLANK]).run()


# -- pass 0: lines to entries ---------------------------------------------------

_BLANK = object()


class _BadLine:
    def __init__(self, text: str) -> None:
        self.text = text


def _parse_line(item: str | Mapping[str, Any]) -> Any:
    if isinstance(item, Mapping):
        return item
    if not isinstance(item, str):
        return _BadLine(repr(item))
    if not item.strip():
        return _BLANK
    try:
        entry = json.loads(item)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
        return _BadLine(item)
    return entry if isinstance(entry, dict) else _BadLine(item)


class _Converter:
    """One file's conversion: index the entries, build messages, fold results."""

    def __init__(self, session_id: str, entries: list[tuple[int, Any]]) -> None:
        self.session_id = session_id
        self.entries = entries
        self.by_uuid: dict[str, Mapping[str, Any]] = {}
        self.group_leader: dict[str, str] = {}  # API message id -> first entry uuid
        self.first_result: dict[Hashable, int] = {}  # tool_use_id -> id() of the block folded into it
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
                    if block.get("type") == "tool_result" and _hashable(call_id) and call_id in self.call_ids:
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
        if not isinstance(entry, Mapping) or not isinstance(entry.get("uuid"), str):
            return False
        return self.by_uuid.get(entry["uuid"]) is entry

    def _folds(self, block: Any) -> bool:
        if not isinstance(block, Mapping) or block.get("type") != "tool_result":
            return False
        call_id = block.get("tool_use_id")
        return _hashable(call_id) and self.first_result.get(call_id) == id(block)

    def _message_id(self, entry: Mapping[str, Any]) -> str | None:
        """Id of the message ``entry`` makes or joins, or ``None``."""
        if not self._canonical(entry):
            return None
        if _is_conversation(entry, "assistant"):
            api_id = _api_id(entry)
            return self.group_leader.get(api_id, entry["uuid"]) if api_id is not None else entry["uuid"]
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
            if isinstance(entry.get("leafUuid"), str) and entry["leafUuid"] in self.by_uuid:
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


def _hashable(value: Any) -> bool:
    """``True`` when ``value`` can be a dict key (JSON objects and arrays cannot name a call)."""
    try:
        hash(value)
    except TypeError:
        return False
    return True


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
    if isinstance(kind, str) and kind in _DEFAULT_MEDIA_TYPE:
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
