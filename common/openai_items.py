"""OpenAI Agents SDK items as Session messages, and back (pure functions, no I/O).

The OpenAI Agents SDK (PyPI ``openai-agents``) keeps a conversation as a
list of Responses-API input items: messages (``{"role", "content"}``),
function calls and their outputs, reasoning items, hosted tool calls, ...
Its ``Session`` protocol stores that list. Here the list becomes messages
of the Session API that every other reader understands, and comes back
unchanged:

* Each user, system or developer message item is one stored message
  (role ``user``, or ``system`` for both of the others).
* The other items of one ``add_items`` batch that follow each other (what
  the model produced: assistant messages, reasoning, tool calls and their
  outputs, ...) share one ``assistant`` message, cut into several when their
  JSON passes :data:`GROUP_MAX_BYTES`.
* Text becomes ``text`` parts (so search finds it), reasoning summaries
  ``reasoning`` parts. A tool call becomes a tool part (``type``
  ``tool-<name>``, ``toolCallId``, ``toolName``, ``state``, ``input``) and
  its output, when it follows in the same message, is merged into that part
  (``state: "output-available"``, ``output``). Calls: ``function_call``
  (``input`` is the parsed ``arguments``), ``custom_tool_call``,
  ``computer_call``, ``shell_call``, ``apply_patch_call`` (see :data:`CALLS`).
* Anything else -- other item types, content that is not text (images,
  files, audio), an output whose call is not in the same message -- is kept
  whole in a ``data-openai-item`` (or ``data-openai-content``) part, the AI
  SDK's shape for custom data.
* The message's ``metadata.openaiAgents`` holds ``{"version": 1, "items":
  [...]}``: one entry per item, in order, naming the parts the item became
  (``"parts": [indices]``) and its *skeleton* -- the item with every value
  that moved into a part replaced by ``null``, so nothing is stored twice and
  the keys keep their order. Reading fills the skeleton from the parts, so
  an edit of a part (a tool output rewritten by ``unload_skill``, a text
  corrected by another client) shows in the items.
* Numbers the Session's JSON cannot keep exactly (it writes JSON as
  JavaScript does: ``1.0`` becomes ``1``, integers past 2**53 are rounded)
  make the entry keep the item's own JSON text too (``"exact"``); such an
  item comes back from that text.

Messages not written this way (by another client, an import, a compaction
overlay) are read as best they can be: text parts become ``{"role",
"content"}`` items, tool parts a ``function_call`` and, when finished, a
``function_call_output``, ``data-openai-item`` parts their data; other parts
(reasoning, files, steps) are left out. The same happens to a message
whose ``metadata.openaiAgents`` no longer matches its parts.

:class:`common.openai_session.AgentsItemsSession` runs the SDK's
``Session`` protocol on these functions.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .shapes import OVERLAY_PREFIX

__all__ = [
    "CALLS", "CONTENT_PART", "FORMAT_KEY", "FORMAT_VERSION", "GROUP_MAX_BYTES", "ITEM_PART", "AddPlan", "CallShape",
    "View", "items_of", "message_views", "needs_leaf", "plan_add", "plan_pop",
]

Item = dict[str, Any]
Message = dict[str, Any]

#: Key under a message's ``metadata`` holding the item entries.
FORMAT_KEY = "openaiAgents"
FORMAT_VERSION = 1
#: Part holding a whole item that has no part shape of its own (AI SDK data part).
ITEM_PART = "data-openai-item"
#: Part holding one non-text content entry of a message item (an image, a file, audio).
CONTENT_PART = "data-openai-content"
#: JSON bytes of items after which an assistant message is closed and the next item starts another.
GROUP_MAX_BYTES = 512 * 1024
#: Roles of message items that are stored as a message of their own, and the role stored.
INPUT_ROLES = {"user": "user", "system": "system", "developer": "system"}
#: Content entry types whose text becomes a ``text`` part, and the field holding it.
TEXT_CONTENT = {"input_text": "text", "output_text": "text", "refusal": "refusal"}
#: Largest integer a JavaScript number (an IEEE double) holds exactly.
_MAX_SAFE_INTEGER = 2**53 - 1


@dataclass(frozen=True)
class CallShape:
    """How a tool-call item type becomes a tool part.

    ``name``: the tool name (``None``: the item's own ``name``); ``input``:
    the item field that becomes the part's ``input``; ``output_type``: the
    item type of its output (merged into the part); ``json_input``: the
    field is JSON text (``function_call.arguments``), stored parsed.
    """

    name: str | None
    input: str
    output_type: str
    json_input: bool = False


CALLS: dict[str, CallShape] = {
    "function_call": CallShape(None, "arguments", "function_call_output", json_input=True),
    "custom_tool_call": CallShape(None, "input", "custom_tool_call_output"),
    "computer_call": CallShape("computer", "action", "computer_call_output"),
    "shell_call": CallShape("shell", "action", "shell_call_output"),
    "apply_patch_call": CallShape("apply_patch", "operation", "apply_patch_call_output"),
}
#: Output item type -> the call item type it answers.
OUTPUTS = {shape.output_type: call_type for call_type, shape in CALLS.items()}


class _Mismatch(Exception):
    """A message's entries do not match its parts: it is read as a foreign message."""


# -- small helpers ----------------------------------------------------------------------------


def _compact_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _unsafe_numbers(value: Any) -> bool:
    """``True`` when ``value`` holds a number JavaScript-style JSON would not give back as it is."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is float:
            if item.is_integer() or (item == 0 and math.copysign(1.0, item) < 0):
                return True
        elif kind is int:
            if not -_MAX_SAFE_INTEGER <= item <= _MAX_SAFE_INTEGER:
                return True
        elif kind is dict:
            stack.extend(item.values())
        elif kind is list:
            stack.extend(item)
    return False


def _tool_part(part: Any) -> bool:
    kind = part.get("type") if isinstance(part, Mapping) else None
    return isinstance(kind, str) and (kind.startswith("tool-") or kind == "dynamic-tool")


def _text_field(entry: Any) -> str | None:
    """The field of a content entry that becomes a ``text`` part, or ``None``."""
    if isinstance(entry, Mapping):
        kind: Any = entry.get("type")  # any JSON value; a str names a text field
        name = TEXT_CONTENT.get(kind)
        if name is not None and isinstance(entry.get(name), str):
            return name
    return None


def _is_message_item(item: Mapping[str, Any]) -> bool:
    return (
        (item.get("role") in INPUT_ROLES or item.get("role") == "assistant")
        and item.get("type", "message") == "message"
        and isinstance(item.get("content"), (str, list))
    )


def _is_reasoning(item: Mapping[str, Any]) -> bool:
    def texts(entries: Any) -> bool:
        return isinstance(entries, list) and all(
            isinstance(e, Mapping) and isinstance(e.get("text"), str) for e in entries)

    return item.get("type") == "reasoning" and texts(item.get("summary")) and (
        item.get("content") is None or texts(item.get("content")))


def _call_name(item: Mapping[str, Any]) -> str | None:
    """The tool name of a call item this module turns into a tool part, else ``None``."""
    kind: Any = item.get("type")
    shape = CALLS.get(kind)
    if shape is None or not (isinstance(item.get("call_id"), str) and item["call_id"]):
        return None
    if shape.json_input and not isinstance(item.get(shape.input, ""), str):
        return None
    name = shape.name or item.get("name")
    return name if isinstance(name, str) and name else None


def _parsed_arguments(text: str) -> tuple[Any, bool]:
    """``(input, moved)``: the parsed JSON (else ``text``), and whether writing it compactly
    gives ``text`` back exactly (then the skeleton need not keep ``text``)."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return text, False
    return value, _compact_json(value) == text and not _unsafe_numbers(value)


# -- items -> parts ---------------------------------------------------------------------------


def _message_parts(item: Item) -> tuple[list[dict[str, Any]], Item]:
    skeleton = dict(item)
    content = item["content"]
    if isinstance(content, str):
        skeleton["content"] = None
        return [{"type": "text", "text": content}], skeleton
    parts: list[dict[str, Any]] = []
    entries: list[dict[str, Any] | None] = []
    for entry in content:
        name = _text_field(entry)
        if name is None:
            parts.append({"type": CONTENT_PART, "data": entry})
            entries.append(None)
        else:
            parts.append({"type": "text", "text": entry[name]})
            entries.append({**entry, name: None})
    skeleton["content"] = entries
    return parts, skeleton


def _reasoning_parts(item: Item) -> tuple[list[dict[str, Any]], Item]:
    skeleton = dict(item)
    parts = []
    for key in ("summary", "content"):
        if isinstance(item.get(key), list):
            parts += [{"type": "reasoning", "text": e["text"]} for e in item[key]]
            skeleton[key] = [{**e, "text": None} for e in item[key]]
    return parts or [{"type": "reasoning", "text": ""}], skeleton


def _call_part(item: Item, name: str) -> tuple[dict[str, Any], Item]:
    shape = CALLS[item["type"]]
    skeleton = dict(item)
    value: Any = item.get(shape.input)  # JSON text when shape.json_input (_call_name checked it)
    if shape.input in item:
        moved = True
        if shape.json_input:
            value, moved = _parsed_arguments(value)
        if moved:
            skeleton[shape.input] = None
    part = {"type": f"tool-{name}", "toolCallId": item["call_id"], "toolName": name, "state": "input-available",
            "input": value}
    return part, skeleton


@dataclass
class _Group:
    """One message being built: its parts, item entries and the calls still waiting for an output."""

    role: str
    base: Message
    parts: list[dict[str, Any]] = field(default_factory=list)
    entries: list[dict[str, Any]] = field(default_factory=list)
    pending: dict[tuple[Any, Any], int] = field(default_factory=dict)  # (call type, call_id) as the items say
    size: int = 0
    changed: bool = False

    def add(self, item: Item, parts: list[dict[str, Any]], skeleton: Item | None, text: str) -> None:
        start = len(self.parts)
        self.parts.extend(parts)
        self._entry(list(range(start, len(self.parts))), item, skeleton, text)

    def _entry(self, indices: list[int], item: Item, skeleton: Item | None, text: str) -> None:
        entry: dict[str, Any] = {"parts": indices}
        if skeleton is not None:
            entry["item"] = skeleton
        if _unsafe_numbers(item):
            entry["exact"] = text
        self.entries.append(entry)
        self.size += len(text)
        self.changed = True

    def add_item(self, item: Item, text: str) -> None:
        kind = item.get("type")
        if _is_message_item(item):
            self.add(item, *_message_parts(item), text)
        elif _is_reasoning(item):
            self.add(item, *_reasoning_parts(item), text)
        elif (name := _call_name(item)) is not None:
            part, skeleton = _call_part(item, name)
            self.pending[(kind, item["call_id"])] = len(self.parts)
            self.add(item, [part], skeleton, text)
        elif kind in OUTPUTS and (OUTPUTS[kind], item.get("call_id")) in self.pending:
            index = self.pending.pop((OUTPUTS[kind], item["call_id"]))
            self.parts[index] = {**self.parts[index], "state": "output-available", "output": item.get("output")}
            skeleton = dict(item)
            if "output" in item:
                skeleton["output"] = None
            self._entry([index], item, skeleton, text)
        else:
            self.add(item, [{"type": ITEM_PART, "data": item}], None, text)

    def message(self) -> Message:
        metadata = dict(self.base.get("metadata") or {})
        metadata[FORMAT_KEY] = {"version": FORMAT_VERSION, "items": self.entries}
        return {**self.base, "role": self.role, "parts": self.parts, "metadata": metadata}


def _item_text(item: Any, index: int) -> str:
    """The item's JSON (what the size cap and ``"exact"`` use).

    Raises:
        TypeError: not a dict, or holds something that is not JSON data.
        ValueError: holds NaN or an infinity.
    """
    if not isinstance(item, dict):
        raise TypeError(f"items[{index}] must be a dict (a Responses input item), not {type(item).__name__}")
    try:
        return json.dumps(item, ensure_ascii=False, allow_nan=False)
    except TypeError as exc:
        raise TypeError(f"items[{index}] is not JSON data: {exc}") from exc
    except ValueError as exc:
        raise ValueError(f"items[{index}] is not JSON data: {exc}") from exc


def _leading_run(items: Sequence[Item]) -> list[Item]:
    run = []
    for item in items:
        if isinstance(item, Mapping) and _is_message_item(item) and item["role"] in INPUT_ROLES:
            break
        run.append(item)
    return run


def needs_leaf(items: Sequence[Item]) -> bool:
    """``True`` when :func:`plan_add` may continue the latest leaf: the batch opens with model
    items holding an output whose call came before the batch."""
    seen = set()
    for item in _leading_run(items):
        if not isinstance(item, Mapping):
            continue
        if item.get("type") in CALLS:
            seen.add((item["type"], item.get("call_id")))
        elif item.get("type") in OUTPUTS and (OUTPUTS[item["type"]], item.get("call_id")) not in seen:
            return True
    return False


@dataclass(frozen=True)
class AddPlan:
    """What :meth:`AgentsItemsSession.add_items` writes: ``update`` (the latest leaf, continued) first, then ``append``."""

    update: Message | None
    append: list[Message]


def plan_add(items: Sequence[Item], leaf: Message | None = None, *, new_id: Callable[[], str] | None = None) -> AddPlan:
    """The messages storing ``items`` (see the module docstring).

    ``leaf`` is the session's latest leaf when :func:`needs_leaf` asked for
    it: if it is an assistant message written here, the batch's first model
    items continue it, so an output joins the part of its call.

    Raises:
        TypeError, ValueError: an item is not a dict of JSON data (``items[<i>] ...``); nothing is planned.
    """
    make_id = new_id or (lambda: uuid.uuid4().hex)
    texts = [_item_text(item, index) for index, item in enumerate(items)]
    groups: list[_Group] = []
    current = _continued(leaf)
    if current is not None:
        groups.append(current)
    for item, text in zip(items, texts):
        if _is_message_item(item) and item["role"] in INPUT_ROLES:
            group = _Group(INPUT_ROLES[item["role"]], {"id": make_id()})
            group.add_item(item, text)
            groups.append(group)
            current = None
            continue
        if current is None or (current.entries and current.size + len(text) > GROUP_MAX_BYTES):
            current = _Group("assistant", {"id": make_id()})
            groups.append(current)
        current.add_item(item, text)
    update = None
    if groups and leaf is not None and groups[0].base is leaf:
        first = groups.pop(0)
        update = first.message() if first.changed else None
    return AddPlan(update, [group.message() for group in groups])


def _continued(leaf: Message | None) -> _Group | None:
    """The latest leaf as a group to continue, when it is an assistant message written here."""
    if leaf is None or leaf.get("role") != "assistant" or str(leaf.get("id", "")).startswith(OVERLAY_PREFIX):
        return None
    try:
        entries = _entries(leaf)
        items = [_rebuild(entry, leaf["parts"]) for entry in entries]
    except _Mismatch:
        return None
    group = _Group("assistant", leaf, parts=[dict(p) for p in leaf["parts"]], entries=[dict(e) for e in entries])
    for entry, item in zip(entries, items):
        kind = item.get("type")
        if kind in CALLS and entry.get("item") is not None:
            group.pending[(kind, item.get("call_id"))] = entry["parts"][0]
        elif kind in OUTPUTS and entry.get("item") is not None:
            group.pending.pop((OUTPUTS[kind], item.get("call_id")), None)
        group.size += len(_compact_json(item))
    return group


# -- parts -> items ---------------------------------------------------------------------------


@dataclass(frozen=True)
class View:
    """One item as a message holds it: the ``item``, the ``parts`` (indices) it came from, and
    ``output`` when it is an output merged into its call's part (popping it only reverts that part)."""

    item: Item
    parts: tuple[int, ...]
    output: bool = False
    entry: int | None = None


def _entries(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The item entries of a message written here, checked against its parts.

    Raises:
        _Mismatch: no entries, or they do not account for exactly its parts.
    """
    metadata = message.get("metadata")
    record = metadata.get(FORMAT_KEY) if isinstance(metadata, Mapping) else None
    parts = message.get("parts")
    if not (isinstance(record, Mapping) and record.get("version") == FORMAT_VERSION
            and isinstance(record.get("items"), list) and isinstance(parts, list)):
        raise _Mismatch
    used: set[Any] = set()
    for entry in record["items"]:
        indices = entry.get("parts") if isinstance(entry, Mapping) else None
        if not isinstance(indices, list) or not all(type(i) is int for i in indices):
            raise _Mismatch
        used.update(indices)
    if used != set(range(len(parts))):  # so every index is a valid one, and every part is some item's
        raise _Mismatch
    return record["items"]


def _rebuild(entry: Mapping[str, Any], parts: list[Any]) -> Item:
    """The item an entry stands for, from its skeleton and parts.

    Raises:
        _Mismatch: the parts are not of the shapes the skeleton needs.
    """
    mine = [parts[i] for i in entry["parts"]]
    skeleton = entry.get("item")
    if skeleton is None:
        if len(mine) != 1 or not isinstance(mine[0], Mapping) or mine[0].get("type") != ITEM_PART:
            raise _Mismatch
        item = mine[0].get("data")
    elif not isinstance(skeleton, Mapping):
        raise _Mismatch
    elif _is_message_skeleton(skeleton):
        item = _rebuild_message(skeleton, mine)
    elif skeleton.get("type") == "reasoning":
        item = _rebuild_reasoning(skeleton, mine)
    elif skeleton.get("type") in CALLS:
        item = _rebuild_call(skeleton, mine)
    elif skeleton.get("type") in OUTPUTS:
        item = _rebuild_output(skeleton, mine)
    else:
        raise _Mismatch
    exact = entry.get("exact")
    if isinstance(exact, str):
        return json.loads(exact)
    if not isinstance(item, dict):
        raise _Mismatch
    return item


def _is_message_skeleton(skeleton: Mapping[str, Any]) -> bool:
    return "role" in skeleton and skeleton.get("type", "message") == "message"


def _text_of(part: Any, kind: str = "text") -> str:
    if not (isinstance(part, Mapping) and part.get("type") == kind and isinstance(part.get("text"), str)):
        raise _Mismatch
    return part["text"]


def _rebuild_message(skeleton: Mapping[str, Any], parts: list[Any]) -> Item:
    content = skeleton.get("content")
    if content is None:
        if len(parts) != 1:
            raise _Mismatch
        return {**skeleton, "content": _text_of(parts[0])}
    if not isinstance(content, list) or len(content) != len(parts):
        raise _Mismatch
    rebuilt = []
    for entry, part in zip(content, parts):
        if entry is None:
            if not (isinstance(part, Mapping) and part.get("type") == CONTENT_PART and "data" in part):
                raise _Mismatch
            rebuilt.append(part["data"])
        elif isinstance(entry, Mapping) and entry.get("type") in TEXT_CONTENT:
            rebuilt.append({**entry, TEXT_CONTENT[entry["type"]]: _text_of(part)})
        else:
            raise _Mismatch
    return {**skeleton, "content": rebuilt}


def _rebuild_reasoning(skeleton: Mapping[str, Any], parts: list[Any]) -> Item:
    item = dict(skeleton)
    texts = [_text_of(p, "reasoning") for p in parts]
    lists = [key for key in ("summary", "content") if isinstance(skeleton.get(key), list)]
    if len(texts) != max(sum(len(skeleton[key]) for key in lists), 1):
        raise _Mismatch
    for key in lists:
        item[key] = [{**e, "text": texts.pop(0)} for e in skeleton[key]]
    return item


def _own_part(skeleton: Mapping[str, Any], parts: list[Any]) -> Mapping[str, Any]:
    if len(parts) != 1 or not _tool_part(parts[0]) or parts[0].get("toolCallId") != skeleton.get("call_id"):
        raise _Mismatch
    return parts[0]


def _rebuild_call(skeleton: Mapping[str, Any], parts: list[Any]) -> Item:
    part = _own_part(skeleton, parts)
    shape = CALLS[skeleton["type"]]
    item = dict(skeleton)
    if shape.input not in skeleton:
        return item
    if not shape.json_input:
        if skeleton[shape.input] is None:
            item[shape.input] = part.get("input")
    elif skeleton[shape.input] is None or _parsed_arguments(skeleton[shape.input])[0] != part.get("input"):
        # Moved, or kept verbatim but the part's input was edited since: the part wins.
        item[shape.input] = _compact_json(part.get("input"))
    return item


def _rebuild_output(skeleton: Mapping[str, Any], parts: list[Any]) -> Item:
    part = _own_part(skeleton, parts)
    if part.get("state") != "output-available":
        raise _Mismatch
    item = dict(skeleton)
    if "output" in skeleton and skeleton["output"] is None:
        item["output"] = part.get("output")
    return item


def message_views(message: Mapping[str, Any]) -> list[View]:
    """The items ``message`` holds, in order (see the module docstring for messages not written here)."""
    try:
        entries = _entries(message)
        parts = message["parts"]
        views = []
        for number, entry in enumerate(entries):
            item = _rebuild(entry, parts)
            merged = entry.get("item") is not None and item.get("type") in OUTPUTS
            views.append(View(item, tuple(entry["parts"]), merged, number))
        return views
    except _Mismatch:
        return _foreign_views(message)


def _foreign_views(message: Mapping[str, Any]) -> list[View]:
    parts = message.get("parts")
    if not isinstance(parts, list):
        return []
    role = message.get("role") if message.get("role") in ("user", "system", "assistant") else "user"
    views = []
    for index, part in enumerate(parts):
        if not isinstance(part, Mapping):
            continue
        if part.get("type") == "text" and isinstance(part.get("text"), str):
            views.append(View({"role": role, "content": part["text"]}, (index,)))
        elif part.get("type") == ITEM_PART and isinstance(part.get("data"), dict):
            views.append(View(part["data"], (index,)))
        elif _tool_part(part) and isinstance(part.get("toolCallId"), str):
            views += _foreign_tool_views(part, index)
    return views


def _foreign_tool_views(part: Mapping[str, Any], index: int) -> list[View]:
    name = part.get("toolName")
    if not isinstance(name, str):
        name = part["type"][len("tool-"):] if part["type"].startswith("tool-") else "tool"
    call_id = part["toolCallId"]
    arguments = part.get("input")
    call = {"type": "function_call", "call_id": call_id, "name": name,
            "arguments": arguments if isinstance(arguments, str) else _compact_json(arguments)}
    views = [View(call, (index,))]
    state = part.get("state")
    if state in ("output-available", "output-error"):
        output = part.get("output") if state == "output-available" else part.get("errorText", "")
        output = output if isinstance(output, str) else _compact_json(output)
        views.append(View({"type": "function_call_output", "call_id": call_id, "output": output}, (index,), True))
    return views


def items_of(messages: Sequence[Mapping[str, Any]]) -> list[Item]:
    """Every item the messages hold, in order."""
    return [view.item for message in messages for view in message_views(message)]


# -- pop ----------------------------------------------------------------------------------------


def plan_pop(message: Mapping[str, Any]) -> tuple[Item, Message | None] | None:
    """Remove the last item of ``message``: ``(item, what is left)``.

    What is left is the message to store instead (its parts and entries
    without that item), or ``None`` when nothing is left (delete the
    message). Returns ``None`` when the message holds no item.
    """
    views = message_views(message)
    if not views:
        return None
    last = views[-1]
    parts = [dict(p) if isinstance(p, Mapping) else p for p in message["parts"]]
    if last.output:
        part = parts[last.parts[0]]
        part["state"] = "input-available"
        part.pop("output", None)
        part.pop("errorText", None)
        removed: set[int] = set()
    else:
        removed = set(last.parts)
    kept = [p for i, p in enumerate(parts) if i not in removed]
    rest: Message = {**message, "parts": kept}
    if last.entry is not None:
        renumber = {old: new for new, old in enumerate(i for i in range(len(parts)) if i not in removed)}
        entries = [{**e, "parts": [renumber[i] for i in e["parts"]]} for e in _entries(message)[:last.entry]]
        if not entries:
            return last.item, None
        metadata = dict(message["metadata"])
        metadata[FORMAT_KEY] = {**metadata[FORMAT_KEY], "items": entries}
        rest["metadata"] = metadata
    elif not kept:
        return last.item, None
    return last.item, rest
