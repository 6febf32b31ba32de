"""OpenAI chat messages (and tau-bench trajectories) as Sessions.

Input shapes accepted by :func:`convert_openai_chat`:

* one conversation: a list of messages ``{"role", "content", ...}``;
* a conversation object ``{"messages": [...], "id"?: str}`` (the fine-tuning
  and request shape);
* a list of conversations (lists or conversation objects);
* tau-bench trajectories: a list of ``{"task_id", "trial", "reward",
  "info", "traj"}``.

How messages map (see :mod:`runtime.cli.formats` for the part shapes):

* ``system`` (and ``developer``), ``user`` and ``assistant`` messages become
  Session messages with the same role, in order, each the child of the one
  before. System messages stay messages (not context blocks) so that the
  history equals the input; an importer that wants the prompt elsewhere can
  take it from the first message.
* Message ids are ``"<id_prefix>-<i>"`` where ``i`` is the message's index
  in the input list, so an id points back at its source line.
* Text content becomes a ``text`` part; content-part lists map ``text`` and
  ``refusal`` to ``text``, ``image_url``/``input_audio``/``file`` data to
  ``file`` parts, anything else to a ``data-openai-chat`` part (verbatim).
  An assistant's ``reasoning_content`` (or ``reasoning``) string becomes a
  leading ``reasoning`` part, its ``refusal`` string a ``text`` part.
* Each assistant ``tool_calls`` entry becomes a ``tool-<name>`` part on that
  assistant message with ``input`` = the parsed JSON ``arguments`` (the raw
  string when it is not valid JSON). The matching ``tool`` message is folded
  into the part (``state: "output-available"``, ``output`` = its content,
  unchanged) and is not a message of its own. A call never answered stays
  ``input-available``. The legacy ``function_call`` / ``function`` pair is
  handled the same way (call id ``"<message id>-function_call"``).
* Keys of a message this mapping does not use (e.g. ``name``) are kept in
  ``metadata.openai``.

No timestamps exist in the format, so messages carry no ``createdAt``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from . import FormatError, ImportedMessage, ImportedSession

SOURCE = "openai-chat"
#: Part type of a content part kept verbatim.
DATA_PART = "data-openai-chat"

_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
_MAPPED_KEYS = {
    "role", "content", "tool_calls", "function_call", "tool_call_id", "refusal", "reasoning_content", "reasoning",
}
_TAU_FIELDS = ("task_id", "trial", "reward", "info")


def load_openai_chat(path: str | os.PathLike[str], *, session_prefix: str = "") -> list[ImportedSession]:
    """Read a ``.json`` file (any accepted shape) or a ``.jsonl`` file (one
    conversation per line) and convert it.

    A BOM at the start is ignored; ``.jsonl`` lines end at ``\n`` only, so
    an unescaped U+2028 inside a JSON string does not split a line.

    Raises:
        FormatError: the file is not UTF-8, not JSON (or nests too deeply),
            or not an accepted shape.
        OSError: the file cannot be read.
    """
    with open(path, "rb") as handle:
        raw = handle.read()
    try:
        text = raw.decode("utf-8-sig")
        if os.fspath(path).endswith(".jsonl"):
            data: Any = [json.loads(line) for line in text.split("\n") if line.strip()]
        else:
            data = json.loads(text)
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError
        raise FormatError(f"{path}: not JSON: {exc}") from None
    except RecursionError:
        raise FormatError(f"{path}: not JSON: nested too deeply") from None
    return convert_openai_chat(data, session_prefix=session_prefix)


def convert_openai_chat(data: Any, *, session_prefix: str = "") -> list[ImportedSession]:
    """Convert any accepted shape (see the module docstring) to sessions.

    Session ids: tau-bench ``"<prefix>task-<task_id>-trial-<trial>"`` (a field
    the trajectory lacks is left out; no task id: ``conversation-<i>``); a
    conversation object's own string ``id``; else
    ``"<prefix>conversation-<i>"``. A repeated id gets ``-2``, ``-3``, ...

    Raises:
        FormatError: the shape is not recognised, or a message is malformed
            (the message names the conversation and message index).
    """
    conversations = _conversations(data)
    sessions = []
    taken: dict[str, int] = {}
    for index, (suggested, messages, metadata) in enumerate(conversations):
        session_id = _unique(session_prefix + (suggested or f"conversation-{index}"), taken)
        try:
            session = convert_openai_conversation(messages, session_id=session_id)
        except FormatError as exc:
            raise FormatError(f"conversation {index}: {exc}") from None
        session.metadata.update(metadata)
        sessions.append(session)
    return sessions


def convert_openai_conversation(
    messages: Sequence[Mapping[str, Any]], *, session_id: str, id_prefix: str = "msg"
) -> ImportedSession:
    """Convert one conversation (a list of OpenAI messages) to a session.

    Raises:
        FormatError: a message is not an object, has an unknown role,
            malformed tool calls, or a ``tool`` message answers no call.
    """
    if not isinstance(messages, Sequence) or isinstance(messages, (str, bytes)):
        raise FormatError(f"a conversation must be a list of messages, not {type(messages).__name__}")
    builder = _Builder(id_prefix)
    for index, message in enumerate(messages):
        try:
            builder.add(index, message)
        except FormatError as exc:
            raise FormatError(f"message {index}: {exc}") from None
    return ImportedSession(session_id, builder.messages, SOURCE)


# -- shapes -------------------------------------------------------------------


def _conversations(data: Any) -> list[tuple[str | None, Any, dict[str, Any]]]:
    """``(suggested id, messages, metadata)`` per conversation in ``data``."""
    if isinstance(data, Mapping):
        return [_one_of_many(0, data)]
    if not isinstance(data, list):
        raise FormatError(f"expected a list or an object with 'messages', not {type(data).__name__}")
    if not data:
        return []
    if isinstance(data[0], Mapping) and "role" in data[0]:
        return [(None, data, {})]
    return [_one_of_many(i, item) for i, item in enumerate(data)]


def _one_of_many(index: int, item: Any) -> tuple[str | None, Any, dict[str, Any]]:
    if isinstance(item, list):
        return None, item, {}
    if isinstance(item, Mapping) and "traj" in item:
        metadata = {field: item[field] for field in _TAU_FIELDS if field in item}
        return _tau_bench_id(index, item), item["traj"], {"tauBench": metadata}
    if isinstance(item, Mapping) and "messages" in item:
        return _conversation_object(item)
    raise FormatError(f"item {index}: not a conversation (a list of messages, or an object with 'messages' or 'traj')")


def _tau_bench_id(index: int, item: Mapping[str, Any]) -> str:
    """``task-<task_id>-trial-<trial>``, leaving out a field the trajectory lacks (or holds as null);
    ``conversation-<index>`` stands in for a missing task id."""
    task, trial = item.get("task_id"), item.get("trial")
    name = f"conversation-{index}" if task is None else f"task-{task}"
    return name if trial is None else f"{name}-trial-{trial}"


def _conversation_object(item: Mapping[str, Any]) -> tuple[str | None, Any, dict[str, Any]]:
    if "messages" not in item:
        raise FormatError("a conversation object needs a 'messages' list")
    suggested = item.get("id") if isinstance(item.get("id"), str) and item.get("id") else None
    return suggested, item["messages"], {}


def _unique(session_id: str, taken: dict[str, int]) -> str:
    count = taken.get(session_id, 0) + 1
    taken[session_id] = count
    return session_id if count == 1 else f"{session_id}-{count}"


# -- messages -------------------------------------------------------------------


class _Builder:
    """Messages of one conversation, with tool results folded into calls.

    A ``tool`` message answers the oldest unanswered call with its
    ``tool_call_id``. Real logs reuse an id once its call was answered
    (tau-bench does), so ids are matched in order, not globally.
    """

    def __init__(self, id_prefix: str) -> None:
        self.id_prefix = id_prefix
        self.messages: list[ImportedMessage] = []
        self.unanswered: dict[tuple[str, Any], list[dict[str, Any]]] = {}

    def add(self, index: int, message: Any) -> None:
        if not isinstance(message, Mapping):
            raise FormatError(f"a message must be an object, not {type(message).__name__}")
        role = message.get("role")
        if "parts" in message and "content" not in message:  # a stored message (``history --json``), not chat
            raise FormatError(
                "it holds stored session messages (with parts, as `history --json` prints them), not OpenAI "
                "chat messages: importing them as chat would lose their parts and ids; copy a session with "
                "`durable-sessions export ID -o FILE` and `durable-sessions import FILE`")
        if role == "tool":
            self._fold(("tool", message.get("tool_call_id")), message)
        elif role == "function":
            self._fold(("function", message.get("name")), message)
        elif isinstance(role, str) and role in _ROLES:
            self._append(index, _ROLES[role], message)
        else:
            raise FormatError(f"unknown role {role!r}")

    def _append(self, index: int, role: str, message: Mapping[str, Any]) -> None:
        message_id = f"{self.id_prefix}-{index}"
        parts = _leading_reasoning(message) if role == "assistant" else []
        parts += _content_parts(message.get("content"))
        if role == "assistant":
            if isinstance(message.get("refusal"), str) and message["refusal"]:
                parts.append({"type": "text", "text": message["refusal"]})
            parts += self._tool_parts(message_id, message)
        converted: dict[str, Any] = {"id": message_id, "role": role, "parts": parts}
        extra = {key: value for key, value in message.items() if key not in _MAPPED_KEYS}
        if extra:
            converted["metadata"] = {"openai": extra}
        parent = self.messages[-1].message["id"] if self.messages else None
        self.messages.append(ImportedMessage(converted, parent))

    def _tool_parts(self, message_id: str, message: Mapping[str, Any]) -> list[dict[str, Any]]:
        calls = message.get("tool_calls") or []
        if not isinstance(calls, list):
            raise FormatError("tool_calls must be a list")
        parts = []
        for call in calls:
            function = call.get("function") if isinstance(call, Mapping) else None
            if not isinstance(function, Mapping) or not isinstance(call.get("id"), str):
                raise FormatError("each tool call needs an 'id' and a 'function'")
            parts.append(self._await(("tool", call["id"]), call["id"], function))
        legacy = message.get("function_call")
        if isinstance(legacy, Mapping):
            parts.append(self._await(("function", legacy.get("name")), f"{message_id}-function_call", legacy))
        return parts

    def _await(self, key: tuple[str, Any], call_id: str, function: Mapping[str, Any]) -> dict[str, Any]:
        part = _tool_part(call_id, function.get("name"), function.get("arguments"))
        self.unanswered.setdefault(key, []).append(part)
        return part

    def _fold(self, key: tuple[str, Any], message: Mapping[str, Any]) -> None:
        waiting = self.unanswered.get(key) if isinstance(key[1], (str, type(None))) else None
        if not waiting:
            what = "tool_call_id" if key[0] == "tool" else "function"
            raise FormatError(f"{key[0]} message for {what} {key[1]!r} answers no open call")
        part = waiting.pop(0)
        part["state"] = "output-available"
        part["output"] = message.get("content")


def _tool_part(call_id: str, name: Any, arguments: Any) -> dict[str, Any]:
    if not isinstance(name, str) or not name:
        raise FormatError(f"tool call {call_id!r} has no function name")
    return {
        "type": f"tool-{name}",
        "toolCallId": call_id,
        "toolName": name,
        "state": "input-available",
        "input": _parse_arguments(arguments),
    }


def _parse_arguments(arguments: Any) -> Any:
    """Parsed JSON arguments; a non-JSON string stays as it is."""
    if not isinstance(arguments, str):
        return {} if arguments is None else arguments
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments


def _leading_reasoning(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    for key in ("reasoning_content", "reasoning"):
        if isinstance(message.get(key), str) and message[key]:
            return [{"type": "reasoning", "text": message[key]}]
    return []


def _content_parts(content: Any) -> list[dict[str, Any]]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [_content_part(item) for item in content]
    raise FormatError(f"content must be a string, a list of parts or null, not {type(content).__name__}")


def _content_part(item: Any) -> dict[str, Any]:
    kind = item.get("type") if isinstance(item, Mapping) else None
    if kind == "text" and isinstance(item.get("text"), str):
        return {"type": "text", "text": item["text"]}
    if kind == "refusal" and isinstance(item.get("refusal"), str):
        return {"type": "text", "text": item["refusal"]}
    if kind == "image_url":
        url = _nested_str(item, "image_url", "url")
        if url is not None:
            return {"type": "file", "mediaType": _data_url_media_type(url) or "image/*", "url": url}
    if kind == "input_audio":
        data, fmt = _nested_str(item, "input_audio", "data"), _nested_str(item, "input_audio", "format")
        if data is not None and fmt is not None:
            return {"type": "file", "mediaType": f"audio/{fmt}", "url": f"data:audio/{fmt};base64,{data}"}
    if kind == "file":
        url = _nested_str(item, "file", "file_data")
        media_type = _data_url_media_type(url) if url else None
        if url is not None and media_type is not None:
            part = {"type": "file", "mediaType": media_type, "url": url}
            filename = _nested_str(item, "file", "filename")
            return {**part, "filename": filename} if filename else part
    return {"type": DATA_PART, "data": item}


def _nested_str(item: Mapping[str, Any], outer: str, inner: str) -> str | None:
    value = item.get(outer)
    value = value.get(inner) if isinstance(value, Mapping) else None
    return value if isinstance(value, str) else None


def _data_url_media_type(url: str) -> str | None:
    if not url.startswith("data:") or ";" not in url:
        return None
    media_type = url[len("data:"):url.index(";")]
    return media_type or None
