"""AI tools over context blocks: ``set_context``, ``load_context``,
``unload_context``, ``search_context`` (docs/behaviours.md §6).

:func:`build_context_tools` turns the current blocks into an ordered
``{name: Tool}`` mapping. Each :class:`Tool` carries the exact description
and the raw JSON Schema the original hands to its model SDK, and
:meth:`Tool.execute` validates the arguments (``jsonschema``, draft 7) before
running, so a model always gets a string back: the result, or an error
string naming the bad field -- never an exception.

Also here: :func:`context_entry_key` (the stable key of a keyed entry:
slug + 32-bit FNV-1a over UTF-16 code units, base 36), and the schema in
the forms agent builders pass to models: :func:`openai_tools`,
:func:`anthropic_tools`, and :func:`ai_sdk_schema` (what the AI SDK sends).
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from jsonschema import Draft7Validator

# -- keys of keyed entries ---------------------------------------------------

_FNV_OFFSET = 0x811C9DC5
_FNV_PRIME = 0x01000193
_SLUG_UNITS = 60
_NOT_SLUG = re.compile(r"[^a-z0-9]+")
_EDGE_DASH = re.compile(r"^-|-\Z")
_BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"


def _utf16_units(text: str) -> list[int]:
    data = text.encode("utf-16-le", "surrogatepass")
    return [int.from_bytes(data[i : i + 2], "little") for i in range(0, len(data), 2)]


def stable_hash(text: str) -> str:
    """32-bit FNV-1a of ``text``'s UTF-16 code units, in lowercase base 36.

    Example: ``stable_hash("x") == "1y7mkjr"``; ``stable_hash("") == "ztntfp"``.
    """
    h = _FNV_OFFSET
    for unit in _utf16_units(text):
        h = ((h ^ unit) * _FNV_PRIME) & 0xFFFFFFFF
    digits = ""
    while True:
        h, rem = divmod(h, 36)
        digits = _BASE36[rem] + digits
        if h == 0:
            return digits


def slugify(text: str) -> str:
    """First 60 UTF-16 units, lowercased, runs of ``[^a-z0-9]`` -> ``-``, one edge dash trimmed."""
    head = text.encode("utf-16-le", "surrogatepass")[: 2 * _SLUG_UNITS].decode("utf-16-le", "surrogatepass")
    return _EDGE_DASH.sub("", _NOT_SLUG.sub("-", head.lower()))


def context_entry_key(title: str | None, content: str) -> str:
    """The key a keyed entry is stored under (the original's ``contextEntryKey``).

    A non-blank ``title`` gives its slug (``"Be Concise!"`` -> ``be-concise``),
    or ``entry-<hash(title)>`` when the slug is empty. Otherwise the key is
    ``<slug(content) or "entry">-<hash(content)>``
    (``"x"`` -> ``x-1y7mkjr``, ``""`` -> ``entry-ztntfp``).
    """
    if title is not None and title.strip():
        return slugify(title) or f"entry-{stable_hash(title)}"
    return f"{slugify(content) or 'entry'}-{stable_hash(content)}"


# -- descriptions and schemas ------------------------------------------------

_KIND = {"skill": "skill collection, keyed entries", "search": "searchable, keyed entries", "plain": "writable"}
_METADATA_HINT = (
    "\n\nFor keyed blocks (skill collections / searchable), pass `metadata: { title, description }` "
    "— title stabilises updates, description helps the model pick entries. Metadata is optional; "
    "short content rarely needs it, long loadable entries benefit most."
)
_TITLE_DESCRIPTION = (
    "Short title. Used as a stable identifier — entries with the same title are updated in place, "
    "different titles create new entries."
)
_ENTRY_DESCRIPTION = (
    "One-line summary shown alongside the title in the system prompt so the model can decide "
    "when to load the entry."
)


def _quoted(labels: Iterable[str]) -> str:
    return ", ".join(f'"{label}"' for label in labels)


def _kind(block: Mapping[str, Any]) -> str:
    return _KIND["skill" if block["isSkill"] else "search" if block["isSearchable"] else "plain"]


def set_context_description(writable: Sequence[Mapping[str, Any]]) -> str:
    """Description of ``set_context`` for the writable blocks (records, config order)."""
    lines = [
        f'- "{b["label"]}" ({_kind(b)}): '
        + (b["description"] if b.get("description") is not None else "no description")
        for b in writable
    ]
    hint = _METADATA_HINT if any(b["isSkill"] or b["isSearchable"] for b in writable) else ""
    return (
        "Write to a context block. Available blocks:\n"
        + "\n".join(lines)
        + "\n\nWrites are durable and persist across sessions."
        + hint
    )


def set_context_schema(writable_labels: list[str], keyed_labels: list[str]) -> dict[str, Any]:
    """Raw input schema of ``set_context``; ``metadata`` only when a keyed block is writable."""
    properties: dict[str, Any] = {
        "label": {"type": "string", "enum": list(writable_labels), "description": "Block label to write to"},
        "content": {"type": "string", "description": "The main content to write to the block."},
        "action": {"type": "string", "enum": ["replace", "append"], "description": "replace (default) or append"},
    }
    if keyed_labels:
        properties["metadata"] = {
            "type": "object",
            "description": (
                "Optional metadata for keyed entries (skill collections, searchable blocks: "
                + _quoted(keyed_labels)
                + "). Short content doesn't need metadata; longer loadable entries (skills) benefit "
                "from a title and description so the model can pick the right one without loading it."
            ),
            "properties": {
                "title": {"type": "string", "description": _TITLE_DESCRIPTION},
                "description": {"type": "string", "description": _ENTRY_DESCRIPTION},
            },
        }
    return {"type": "object", "properties": properties, "required": ["label", "content"]}


def load_context_description(skill_labels: list[str]) -> str:
    return (
        "Load a document from a skill block by key. Available skill blocks: "
        + _quoted(skill_labels)
        + ". Check the system prompt for available keys."
    )


def unload_context_description(loaded: Iterable[str]) -> str:
    loaded = list(loaded)
    tail = f" Currently loaded: {', '.join(loaded)}." if loaded else " No skills currently loaded."
    return "Unload a previously loaded skill to free context space. The skill remains available for re-loading." + tail


def search_context_description(search_labels: list[str]) -> str:
    return (
        "Search for information in a searchable context block. ONLY these blocks are searchable: "
        + _quoted(search_labels)
        + ". Other blocks cannot be searched."
    )


def skill_schema(skill_labels: list[str], verb: str) -> dict[str, Any]:
    """Raw input schema of ``load_context`` (``verb="load"``) or ``unload_context`` (``"unload"``)."""
    return {
        "type": "object",
        "properties": {
            "label": {"type": "string", "enum": list(skill_labels), "description": "Skill block label"},
            "key": {"type": "string", "description": f"Skill key to {verb}"},
        },
        "required": ["label", "key"],
    }


def search_context_schema(search_labels: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "label": {"type": "string", "enum": list(search_labels), "description": "Searchable block label"},
            "query": {"type": "string", "description": "Search query"},
        },
        "required": ["label", "query"],
    }


# -- argument validation -------------------------------------------------------


def _js_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "array"
    return "object"


def _problems(validator: Draft7Validator, args: Any) -> list[tuple[str, str]]:
    """``[(field path, message)]`` as zod 4 reports them: one per field, in the schema's order.

    An ``enum`` field is checked as zod's ``z.enum`` (a one-value enum as
    ``z.literal``): missing or of any other type, it names its options
    (``Invalid option: expected one of "a"|"b"``, ``Invalid input: expected
    "a"``). Any other field reports its type (``Invalid input: expected
    string, received undefined``).
    """
    found: dict[tuple[str, ...], str] = {}
    for error in validator.iter_errors(args):
        path = tuple(str(p) for p in error.absolute_path)
        if error.validator == "required" and isinstance(error.instance, Mapping):
            props = error.schema.get("properties", {})
            for name in error.validator_value:
                if name not in error.instance:
                    found[(*path, name)] = _zod_message(props.get(name, {}), _UNDEFINED)
        elif error.validator in ("enum", "type"):
            found[path] = _zod_message(error.schema, error.instance)
        else:
            found.setdefault(path, error.message)
    ordered = sorted(found.items(), key=lambda item: _schema_order(validator.schema, item[0]))
    return [(".".join(path), message) for path, message in ordered]


_UNDEFINED = object()


def _zod_message(schema: Mapping[str, Any], value: Any) -> str:
    """zod's message for ``value`` (or :data:`_UNDEFINED`) failing the property ``schema``."""
    if "enum" in schema:
        options = list(schema["enum"])
        if len(options) == 1:
            return f"Invalid input: expected {_zod_literal(options[0])}"
        return "Invalid option: expected one of " + "|".join(_zod_literal(v) for v in options)
    received = "undefined" if value is _UNDEFINED else _js_type(value)
    return f"Invalid input: expected {schema.get('type', 'value')}, received {received}"


def _zod_literal(value: Any) -> str:
    return f'"{value}"' if isinstance(value, str) else _js_type(value) if value is None else str(value)


def _schema_order(schema: bool | Mapping[str, Any], path: tuple[str, ...]) -> tuple[int, ...]:
    """Where ``path`` comes in the schema's property order (zod checks properties in that order)."""
    order: list[int] = []
    for name in path:
        props = schema.get("properties", {}) if isinstance(schema, Mapping) else {}
        names = list(props)
        order.append(names.index(name) if name in props else len(names))
        schema = props.get(name, {})
    return tuple(order)


# -- the Tool record -----------------------------------------------------------


@dataclass(frozen=True)
class Tool:
    """One AI tool: what a model sees plus the code that runs it.

    Attributes:
        name: tool name (``"set_context"``, ...).
        description: text shown to the model (exact, docs/behaviours.md §6).
        input_schema: raw JSON Schema of the arguments (a fresh ``dict``).
        handler: ``async (args: dict) -> str``, called by :meth:`execute`
            with validated arguments.
    """

    name: str
    description: str
    input_schema: dict[str, Any]
    handler: Callable[[dict[str, Any]], Awaitable[str]] = field(repr=False, compare=False)

    async def execute(self, args: Any) -> str:
        """Validate ``args`` against :attr:`input_schema` and run the tool.

        Extra properties are allowed (and ignored). Invalid arguments give
        ``Error: invalid arguments for <name>: <field>: <problem>`` (problems
        joined with ``"; "``), e.g. ``...: label: Invalid option: expected one
        of "memory"|"skills"``. Errors raised while running become
        ``Error: <message>``. Never raises :class:`Exception`.
        """
        problems = _problems(Draft7Validator(self.input_schema), args)
        if problems:
            text = "; ".join(f"{path}: {msg}" if path else msg for path, msg in problems)
            return f"Error: invalid arguments for {self.name}: {text}"
        try:
            return await self.handler(dict(args))
        except Exception as exc:  # noqa: BLE001 -- the model gets a string, never a traceback
            return f"Error: {exc}"

    def openai_format(self) -> dict[str, Any]:
        """``{"type": "function", "function": {"name", "description", "parameters"}}``."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": copy.deepcopy(self.input_schema),
            },
        }

    def anthropic_format(self) -> dict[str, Any]:
        """``{"name", "description", "input_schema"}`` (Anthropic Messages API)."""
        return {"name": self.name, "description": self.description, "input_schema": copy.deepcopy(self.input_schema)}


def openai_tools(tools: Mapping[str, Tool]) -> list[dict[str, Any]]:
    """The tools as OpenAI's ``tools=[...]`` list, in mapping order."""
    return [tool.openai_format() for tool in tools.values()]


def anthropic_tools(tools: Mapping[str, Tool]) -> list[dict[str, Any]]:
    """The tools as Anthropic's ``tools=[...]`` list, in mapping order."""
    return [tool.anthropic_format() for tool in tools.values()]


def ai_sdk_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """``schema`` as the AI SDK sends it (docs/behaviours.md §6): draft-07 ``$schema`` first, every
    object with ``additionalProperties: {}``, a one-value ``enum`` as ``const``,
    keys ordered type, enum/const, properties, required, additionalProperties,
    description."""
    return {"$schema": "http://json-schema.org/draft-07/schema#", **_zodish(schema)}


def _zodish(schema: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "type" in schema:
        out["type"] = schema["type"]
    if "enum" in schema:
        values = list(schema["enum"])
        if len(values) == 1:
            out["const"] = values[0]
        else:
            out["enum"] = values
    if schema.get("type") == "object":
        if "properties" in schema:
            out["properties"] = {k: _zodish(v) for k, v in schema["properties"].items()}
        if "required" in schema:
            out["required"] = list(schema["required"])
        out["additionalProperties"] = {}
    for key, value in schema.items():
        if key not in out and key not in ("enum", "properties", "required"):
            out[key] = copy.deepcopy(value)
    return out


# -- building the four tools -----------------------------------------------------


class ToolBackend(Protocol):
    """What the tools need from the context engine (:class:`actors.context.ContextBlocks`)."""

    async def get_context_blocks(self) -> Sequence[Mapping[str, Any]]: ...
    async def get_context_block(self, label: str) -> Mapping[str, Any] | None: ...
    async def get_loaded_skill_keys(self) -> Iterable[str]: ...
    async def replace_context_block(self, label: str, content: str) -> Mapping[str, Any]: ...
    async def append_context_block(self, label: str, content: str) -> Mapping[str, Any]: ...
    async def set_skill(self, label: str, key: str, content: str, description: str | None = None) -> None: ...
    async def set_search_entry(self, label: str, key: str, content: str) -> None: ...
    async def load_skill(self, label: str, key: str) -> str | None: ...
    async def unload_skill(self, label: str, key: str) -> bool: ...
    async def search_context(self, label: str, query: str) -> str | None: ...


def percent(tokens: int, max_tokens: int) -> int:
    """``Math.round(tokens / max_tokens * 100)``: JavaScript rounds halves up
    (9/200 -> 5, 5/200 -> 3), which Python's :func:`round` does not."""
    return math.floor(tokens / max_tokens * 100 + 0.5)


def usage_text(block: Mapping[str, Any]) -> str:
    """``45% (495/1100 tokens)`` with a truthy ``maxTokens``, else ``3 tokens``."""
    if block.get("maxTokens"):
        return f"{percent(block['tokens'], block['maxTokens'])}% ({block['tokens']}/{block['maxTokens']} tokens)"
    return f"{block['tokens']} tokens"


async def build_context_tools(backend: ToolBackend) -> dict[str, Tool]:
    """The tools the current blocks call for, in the fixed order
    ``set_context``, ``load_context``, ``unload_context``, ``search_context``
    (``{}`` when no block is writable, a skill or searchable). Enums and the
    unload description are snapshots taken now."""
    blocks = await backend.get_context_blocks()
    tools: dict[str, Tool] = {}
    writable = [b for b in blocks if b["writable"]]
    skills = [b["label"] for b in blocks if b["isSkill"]]
    searchable = [b["label"] for b in blocks if b["isSearchable"]]
    if writable:
        tools["set_context"] = _set_context_tool(backend, writable)
    if skills:
        loaded = list(await backend.get_loaded_skill_keys())
        tools["load_context"] = _load_context_tool(backend, skills)
        tools["unload_context"] = _unload_context_tool(backend, skills, loaded)
    if searchable:
        tools["search_context"] = _search_context_tool(backend, searchable)
    return tools


def _set_context_tool(backend: ToolBackend, writable: Sequence[Mapping[str, Any]]) -> Tool:
    keyed = [b["label"] for b in writable if b["isSkill"] or b["isSearchable"]]

    async def run(args: dict[str, Any]) -> str:
        label, content = args["label"], args["content"]
        block = await backend.get_context_block(label)
        if block is None:
            return f'Error: block "{label}" not found'
        if block["isSkill"] or block["isSearchable"]:
            metadata = args.get("metadata") or {}
            title = metadata.get("title")
            key = context_entry_key(title, content)
            if block["isSkill"]:
                described = metadata.get("description")
                await backend.set_skill(label, key, content, described if described is not None else title)
            else:
                await backend.set_search_entry(label, key, content)
            return f'Indexed "{key}" in {label}.'
        write = backend.append_context_block if args.get("action") == "append" else backend.replace_context_block
        updated = await write(label, content)
        return f"Written to {label}. Usage: {usage_text(updated)}"

    return Tool(
        "set_context",
        set_context_description(writable),
        set_context_schema([b["label"] for b in writable], keyed),
        run,
    )


def _not_skill(label: str, skills: list[str]) -> str:
    return f'Error: "{label}" is not a skill block. Skill blocks: {", ".join(skills)}'


def _load_context_tool(backend: ToolBackend, skills: list[str]) -> Tool:
    async def run(args: dict[str, Any]) -> str:
        label, key = args["label"], args["key"]
        if label not in skills:
            return _not_skill(label, skills)
        content = await backend.load_skill(label, key)
        return f"Not found: {key}" if content is None else content

    return Tool("load_context", load_context_description(skills), skill_schema(skills, "load"), run)


def _unload_context_tool(backend: ToolBackend, skills: list[str], loaded: list[str]) -> Tool:
    async def run(args: dict[str, Any]) -> str:
        label, key = args["label"], args["key"]
        if label not in skills:
            return _not_skill(label, skills)
        if not await backend.unload_skill(label, key):
            return f'Skill "{key}" is not currently loaded in "{label}".'
        return f'Unloaded "{key}" from {label}. Context reclaimed.'

    return Tool("unload_context", unload_context_description(loaded), skill_schema(skills, "unload"), run)


def _search_context_tool(backend: ToolBackend, searchable: list[str]) -> Tool:
    async def run(args: dict[str, Any]) -> str:
        label, query = args["label"], args["query"]
        if label not in searchable:
            return f'Error: "{label}" is not searchable. Searchable blocks: {", ".join(searchable)}'
        results = await backend.search_context(label, query)
        return "No results found." if results is None else results

    return Tool("search_context", search_context_description(searchable), search_context_schema(searchable), run)
