"""Skills: which are loaded, how loads look in history, and a folder of skill files.

* :func:`skill_events` / :func:`rewrite_unloaded` read and rewrite the tool
  parts that record skill loads in assistant messages (docs/behaviours.md
  §7). A part counts by its ``toolName``, or by an AI SDK ``type`` of
  ``tool-load_context`` / ``tool-unload_context`` when it has no
  ``toolName``; ``dynamic-tool`` parts carry ``toolName`` (docs/deviations.md #12).
* :class:`SkillTracker` keeps the ordered set of loaded skills
  (``"label:key"``) and persists it in one ``assistant_config`` row per
  session (in the SQLite file, or in Postgres through the session's
  provider), updated on every change, so waking a session costs one row
  read -- O(loaded skills), whatever the history length. Only a session
  with no such row (an import, a fork, a file written before the row
  existed or by the original) walks its history once, and the result is
  stored. The walk goes latest leaf -> root a bounded chunk at a time, so
  its memory does not grow with the history; a failure raises
  :class:`~common.errors.SkillRestoreError` and the next call walks again.
* :class:`DirectorySkillProvider` -- a folder of Markdown files, one per
  skill: the local stand-in for the original's R2 bucket.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import re
import tempfile
from collections.abc import Iterable, KeysView, Mapping
from pathlib import Path
from typing import Any, Protocol

import anyio

from common.errors import InvalidInputError, SkillRestoreError
from storage.context import read_config, write_config
from storage.sqlite import SqlStorage

logger = logging.getLogger("actors.skills")

LOAD_TOOL = "load_context"
UNLOAD_TOOL = "unload_context"
UNLOADED_PREFIX = "[skill unloaded:"


def unloaded_marker(key: str) -> str:
    """The output a load part gets once its skill is unloaded: ``[skill unloaded: <key>]``."""
    return f"{UNLOADED_PREFIX} {key}]"


# -- tool parts in history -------------------------------------------------------


def part_tool_name(part: Mapping[str, Any]) -> str | None:
    """``toolName`` of a tool part, else the name in an AI SDK ``tool-<name>`` type."""
    name = part.get("toolName")
    if isinstance(name, str):
        return name
    kind = part.get("type")
    if isinstance(kind, str) and kind.startswith("tool-"):
        return kind[len("tool-") :]
    return None


def _skill_part(part: Any) -> tuple[str, str, str, str] | None:
    """``(tool, label, key, id)`` of a finished load/unload part, else ``None``."""
    if not isinstance(part, Mapping) or part.get("state") != "output-available":
        return None
    tool = part_tool_name(part)
    data = part.get("input")
    if tool not in (LOAD_TOOL, UNLOAD_TOOL) or not isinstance(data, Mapping):
        return None
    label, key = data.get("label"), data.get("key")
    if not (isinstance(label, str) and label and isinstance(key, str) and key):
        return None
    return tool, label, key, f"{label}:{key}"


def skill_events(message: Mapping[str, Any]) -> list[tuple[str, bool]]:
    """Skill changes recorded by an assistant ``message``, in part order.

    Returns ``[("label:key", loaded)]``: a finished ``load_context`` part
    loads, unless its output starts with ``[skill unloaded:``; a finished
    ``unload_context`` part unloads. Other roles and unfinished parts give
    nothing.
    """
    if message.get("role") != "assistant" or not isinstance(message.get("parts"), list):
        return []
    events = []
    for part in message["parts"]:
        found = _skill_part(part)
        if found is None:
            continue
        tool, _, _, skill_id = found
        output = part.get("output")
        unloaded = tool == UNLOAD_TOOL or (isinstance(output, str) and output.startswith(UNLOADED_PREFIX))
        events.append((skill_id, not unloaded))
    return events


def may_record_skills(stored: str) -> bool:
    """``False`` only when the stored JSON text of a message cannot hold a load or
    unload part, so the restore walk need not parse it.

    Both tool names contain ``load_context``, and JSON text can only hide a
    letter of it behind a ``\\u`` escape; a row with neither is skipped.
    """
    return LOAD_TOOL in stored or "\\u" in stored


def rewrite_unloaded(message: Mapping[str, Any], label: str, key: str) -> dict[str, Any] | None:
    """A copy of ``message`` whose finished ``load_context`` parts for
    ``(label, key)`` have the output ``[skill unloaded: <key>]``; ``None``
    when it is not an assistant message holding such a part."""
    if message.get("role") != "assistant" or not isinstance(message.get("parts"), list):
        return None
    parts, changed = [], False
    for part in message["parts"]:
        found = _skill_part(part)
        if found is not None and found[0] == LOAD_TOOL and found[1:3] == (label, key):
            part, changed = {**part, "output": unloaded_marker(key)}, True
        parts.append(part)
    return {**message, "parts": parts} if changed else None


# -- the loaded-skill set ------------------------------------------------------------


class SkillHost(Protocol):
    """What :class:`SkillTracker` needs from the session that hosts it.

    ``Session`` satisfies it with its own methods. These calls must not call
    back into the tracker's restore (a re-entrant call raises
    ``RuntimeError``).

    Optional, for the one-time walk of a session with no persisted set,
    the first one present: ``raw_path_chunks(keep=...)`` -> the stored
    messages latest leaf -> root *without* compaction overlays, as an
    iterable (or async iterable) of lists, leaf first; it may skip a row
    whose stored JSON fails ``keep`` (:func:`may_record_skills`).
    ``raw_path_messages()`` -> the same root -> latest leaf as one list (an
    iterable, or an awaitable of one). Else :meth:`get_history`.
    """

    async def get_history(self) -> list[dict[str, Any]]: ...
    async def get_message(self, message_id: str) -> dict[str, Any] | None: ...
    async def update_message(self, message: dict[str, Any]) -> Any: ...
    async def get_latest_leaf(self) -> dict[str, Any] | None: ...


class SkillTracker:
    """Ordered set of loaded skills (``"label:key"``) of one session, persisted.

    Each entry remembers the id of the newest message that loaded it (or
    ``None`` while the load is not in history yet), so unloading rewrites
    that message without walking history. The set is stored as JSON in
    ``assistant_config`` under ``(session_id, "loaded_skills")``: ``storage``
    is the SQLite file, or an object with ``async get_config(key)`` /
    ``set_config(key, value)`` already scoped to the session (a
    :class:`~storage.postgres.PostgresSessionProvider`). With no
    ``storage`` the set lives in memory and is rebuilt by a scan on each wake.

    Until :meth:`ensure` succeeds the set is *unknown*: nothing is written.
    """

    CONFIG_KEY = "loaded_skills"

    def __init__(self, storage: SqlStorage | Any | None, session_id: str, host: SkillHost | None) -> None:
        self._storage = storage
        self._session_id = session_id
        self._host = host
        self._loaded: dict[str, str | None] | None = None
        self._lock = anyio.Lock()  # anyio: the same Session runs under trio and asyncio

    @property
    def known(self) -> bool:
        """``True`` once the set was restored (or scanned, or cleared)."""
        return self._loaded is not None

    def keys(self) -> KeysView[str]:
        """A set-like, ordered snapshot of the loaded ids (empty while unknown)."""
        return dict(self._loaded or {}).keys()

    async def ensure(self, *, may_scan: bool) -> bool:
        """Restore the set if needed; ``True`` when it is known afterwards.

        Reads the persisted row. Without one: with no host there is no
        history, so the set starts empty (in memory only); with a host and
        ``may_scan`` (a skill block is configured) history is scanned once and
        the result persisted, so the next wake reads the row; otherwise the
        set stays unknown (a later skill block triggers the scan).
        """
        if self._loaded is not None:
            return True
        async with self._lock:
            if self._loaded is None:
                stored = await self._read_state()
                if stored is not None:
                    self._loaded = _decode(stored)
                elif self._host is None:
                    self._loaded = {}  # no history to restore from; nothing to pin in storage
                elif may_scan:
                    self._loaded = await self._restore(self._host)
                    await self._persist()
        return self._loaded is not None

    async def _restore(self, host: SkillHost) -> dict[str, str | None]:
        """The set as history records it; any failure of the walk -> :class:`SkillRestoreError`."""
        try:
            return await self._scan(host)
        except Exception as exc:
            logger.warning("session %r: restoring loaded skills from history failed", self._session_id, exc_info=True)
            raise SkillRestoreError(
                f"restoring the loaded skills of session {self._session_id!r} from its history failed "
                f"({type(exc).__name__}: {exc}); nothing was written, the next call tries again"
            ) from exc

    async def _scan(self, host: SkillHost) -> dict[str, str | None]:
        fold = _NewestFirst()
        chunks = getattr(host, "raw_path_chunks", None)
        if chunks is None:
            for message in reversed(list(await self._path_messages(host))):
                fold.add(message)
            return fold.result()
        walk = chunks(keep=may_record_skills)
        if hasattr(walk, "__aiter__"):
            async for chunk in walk:
                for message in chunk:
                    fold.add(message)
        else:
            for chunk in walk:
                for message in chunk:
                    fold.add(message)
        return fold.result()

    @staticmethod
    async def _path_messages(host: SkillHost) -> Iterable[Mapping[str, Any]]:
        raw = getattr(host, "raw_path_messages", None)
        if raw is None:
            return await host.get_history()
        result = raw()
        return await result if inspect.isawaitable(result) else result

    async def _read_state(self) -> str | None:
        if self._storage is None:
            return None
        if isinstance(self._storage, SqlStorage):
            return read_config(self._storage, self._session_id, self.CONFIG_KEY)
        return await self._storage.get_config(self.CONFIG_KEY)

    async def _persist(self) -> None:
        if self._storage is None or self._loaded is None:
            return
        if isinstance(self._storage, SqlStorage):
            write_config(self._storage, self._session_id, self.CONFIG_KEY, _encode(self._loaded))
        else:
            await self._storage.set_config(self.CONFIG_KEY, _encode(self._loaded))

    async def add(self, skill_id: str) -> None:
        """Mark ``skill_id`` loaded (``load_context`` ran); keeps its place and message if already loaded."""
        if self._loaded is not None and skill_id not in self._loaded:
            self._loaded[skill_id] = None
            await self._persist()

    async def drop_label(self, label: str) -> None:
        """Forget every ``label:*`` entry (the block was removed); no history rewrite."""
        if self._loaded is None:
            return
        prefix = f"{label}:"
        kept = {k: v for k, v in self._loaded.items() if not k.startswith(prefix)}
        if len(kept) != len(self._loaded):
            self._loaded = kept
            await self._persist()

    async def clear(self) -> None:
        """Empty the set (messages were cleared). The set becomes known."""
        self._loaded = {}
        await self._persist()

    async def remove(self, label: str, key: str) -> bool:
        """Unload ``label:key``: ``False`` if it was not loaded; otherwise drop it and
        rewrite the newest stored load to ``[skill unloaded: <key>]`` (if any)."""
        skill_id = f"{label}:{key}"
        if self._loaded is None or skill_id not in self._loaded:
            return False
        message_id = self._loaded.pop(skill_id)
        await self._persist()
        if self._host is not None:
            await self._rewrite(self._host, message_id, label, key)
        return True

    @staticmethod
    async def _rewrite(host: SkillHost, message_id: str | None, label: str, key: str) -> None:
        if message_id is not None:
            stored = await host.get_message(message_id)
            updated = rewrite_unloaded(stored, label, key) if stored else None
            if updated is not None:
                await host.update_message(updated)
                return
        for message in reversed(await host.get_history()):
            updated = rewrite_unloaded(message, label, key)
            if updated is not None:
                await host.update_message(updated)
                return

    async def _known_after_write(self, may_scan: bool) -> bool:
        """:meth:`ensure` for a write that already committed. A failed restore (logged)
        leaves the set unknown, and the walk that later restores it reads this write
        from storage; the write's own call does not fail for it."""
        try:
            return await self.ensure(may_scan=may_scan)
        except SkillRestoreError:
            return False

    async def note_appended(self, message: Mapping[str, Any], *, may_scan: bool) -> None:
        """Apply the skill changes a newly stored message records (no I/O when it has none)."""
        events = skill_events(message)
        if events and await self._known_after_write(may_scan):
            await self._apply(events, message.get("id"), allow_loads=True)

    async def note_updated(self, message: Mapping[str, Any], *, may_scan: bool) -> None:
        """Apply the changes an updated message records. Unloads always apply;
        loads only when it is the latest leaf (a streamed message finishing),
        so editing an old message cannot revive a skill unloaded since."""
        events = skill_events(message)
        if not events or not await self._known_after_write(may_scan):
            return
        allow = True
        if any(loaded for _, loaded in events) and self._host is not None:
            leaf = await self._host.get_latest_leaf()
            allow = leaf is not None and leaf.get("id") == message.get("id")
        await self._apply(events, message.get("id"), allow_loads=allow)

    async def _apply(self, events: list[tuple[str, bool]], message_id: Any, *, allow_loads: bool) -> None:
        loaded = self._loaded
        assert loaded is not None  # the callers' ensure() returned True, and a known set stays known
        before = list(loaded.items())
        self._fold(loaded, events, message_id, allow_loads=allow_loads)
        if before != list(loaded.items()):
            await self._persist()

    @staticmethod
    def _fold(
        loaded: dict[str, str | None], events: list[tuple[str, bool]], message_id: Any, *, allow_loads: bool
    ) -> None:
        """Apply events like a JS ``Set``: a re-load keeps its place, an unload-then-load moves to the end."""
        for skill_id, is_loaded in events:
            if not is_loaded:
                loaded.pop(skill_id, None)
            elif allow_loads:
                loaded[skill_id] = message_id if isinstance(message_id, str) else None


class _NewestFirst:
    """Folds the skill events of messages met newest first (the walk latest leaf -> root)
    into the set :meth:`SkillTracker._fold` makes of them oldest first.

    That set behaves like a JavaScript ``Set``: an entry is loaded when its
    newest event loads; it remembers its newest loading message; its place
    is that of the first load after its last unload (a re-load keeps the
    place). Walking backwards, each skill's record is fixed by its newest
    event and moved back over the loads before it until an unload closes
    it. Memory: one record per skill named, whatever the history length.
    """

    def __init__(self) -> None:
        # skill id -> [loaded, still open (loads before may move its place), message id, place]
        self._skills: dict[str, list[Any]] = {}
        self._place = 0

    def add(self, message: Mapping[str, Any]) -> None:
        message_id = message.get("id")
        for skill_id, loads in reversed(skill_events(message)):
            self._place -= 1
            record = self._skills.get(skill_id)
            if record is None:
                newest = message_id if loads and isinstance(message_id, str) else None
                self._skills[skill_id] = [loads, loads, newest, self._place]
            elif record[1]:
                if loads:
                    record[3] = self._place
                else:
                    record[1] = False

    def result(self) -> dict[str, str | None]:
        loaded = sorted((record[3], skill_id, record[2]) for skill_id, record in self._skills.items() if record[0])
        return {skill_id: message_id for _, skill_id, message_id in loaded}


def _encode(loaded: dict[str, str | None]) -> str:
    return json.dumps({"v": 1, "loaded": [[k, v] for k, v in loaded.items()]}, separators=(",", ":"))


def _decode(text: str) -> dict[str, str | None]:
    data = json.loads(text)
    return {str(k): (v if isinstance(v, str) else None) for k, v in data.get("loaded", [])}


# -- a folder of skill files ------------------------------------------------------------

_FRONT = "---"
_BAD_KEY = re.compile(r"[/\\\x00-\x1f\x7f]")
_MAX_KEY_CHARS = 200
#: Longest key in UTF-8 bytes: with the extension and the temporary-file affixes
#: of :meth:`DirectorySkillProvider.set` it stays under the usual 255-byte file-name limit.
_MAX_KEY_BYTES = 200
_PLAIN_VALUE = re.compile(r"[^\s\"'#&*!|>%@`\[\]{},?:-][^\n]*")


def validate_skill_key(key: Any) -> str:
    """Return ``key`` if it names a file directly inside the folder, else raise.

    Raises:
        InvalidInputError: (``field="key"``) not a string, empty, longer than
            200 characters or 200 UTF-8 bytes, starting with ``.``, or holding
            ``/``, ``\\``, a control character or a lone surrogate.
    """
    if not isinstance(key, str):
        raise InvalidInputError(f"skill key must be a string, not {type(key).__name__}", field="key")
    if not _valid_key(key):
        raise InvalidInputError(
            f"invalid skill key {key!r}: use 1-{_MAX_KEY_CHARS} characters (at most {_MAX_KEY_BYTES} UTF-8 "
            "bytes), no '/', '\\', control characters, lone surrogates, leading '.' or surrounding spaces",
            field="key",
        )
    return key


def _valid_key(key: str) -> bool:
    if not key or len(key) > _MAX_KEY_CHARS or key.startswith(".") or key != key.strip():
        return False
    try:
        if len(key.encode("utf-8")) > _MAX_KEY_BYTES:
            return False
    except UnicodeEncodeError:  # a lone surrogate names no file
        return False
    return _BAD_KEY.search(key) is None


def _first_line(text: str) -> str:
    """The first line of a skill file as front matter is read: up to ``\n``, one ``\r`` dropped."""
    return text.split("\n", 1)[0].removesuffix("\r")


def _read_text(file: Path) -> str:
    """A skill file's text exactly as written (no newline translation), without a leading BOM.

    Bytes that are not UTF-8 read as U+FFFD, so one damaged file cannot hide the others.
    """
    with open(file, encoding="utf-8", errors="replace", newline="") as handle:
        text = handle.read()
    return text.removeprefix("\ufeff")


def _split_front_matter(text: str) -> tuple[dict[str, str], str]:
    """``({name: value}, body)``; a file without a closed ``---`` block is all body.

    Lines end at ``\n`` only (``\r\n`` too); other Unicode line breaks are text.
    """
    if _first_line(text) != _FRONT:
        return {}, text
    lines = text.split("\n")
    fields: dict[str, str] = {}
    for i, line in enumerate(lines[1:], start=1):
        bare = line.removesuffix("\r")
        if bare == _FRONT:
            return fields, "\n".join(lines[i + 1 :])
        name, sep, value = bare.partition(":")
        if sep:
            fields[name.strip()] = _unquote(value.strip())
    return {}, text


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] == '"':
        try:
            return str(json.loads(value))
        except ValueError:
            return value[1:-1]
    if len(value) >= 2 and value[0] == value[-1] == "'":
        return value[1:-1].replace("''", "'")
    return value


def _yaml_value(value: str) -> str:
    plain = (
        _PLAIN_VALUE.fullmatch(value) and value == value.strip() and value.splitlines() == [value]
        and ": " not in value and " #" not in value
    )
    return value if plain else json.dumps(value, ensure_ascii=False)


class DirectorySkillProvider:
    """Skills as Markdown files in a folder: ``<folder>/<key>.md``.

    A file may open with front matter; its ``description:`` line is the
    skill's description::

        ---
        description: How to review code
        ---
        <body>

    * :meth:`get` lists ``- <key>: <description>`` lines (``- <key>`` with
      no description), sorted by key, or ``None`` for an empty or missing
      folder. Files starting with ``.`` and other extensions are ignored.
    * :meth:`load` returns the body with the front matter stripped, so it
      is exactly the ``content`` given to :meth:`set` (line endings and all;
      a BOM at the start of a hand-written file is ignored, and bytes that
      are not UTF-8 read as U+FFFD).
    * :meth:`set` replaces the whole file atomically (temporary file,
      ``fsync``, rename). Keys are checked by :func:`validate_skill_key`,
      so no key reaches outside the folder.

    File I/O is synchronous, like the rest of the actor's local storage.
    """

    def __init__(self, path: str | os.PathLike[str], *, extension: str = ".md") -> None:
        self.path = Path(path)
        self.extension = extension

    def _file(self, key: str) -> Path:
        return self.path / f"{validate_skill_key(key)}{self.extension}"

    def _entries(self) -> list[tuple[str, Path]]:
        if not self.path.is_dir():
            return []
        found = []
        for item in self.path.iterdir():
            name = item.name
            key = name[: len(name) - len(self.extension)] if name.endswith(self.extension) else None
            if key and _valid_key(key) and item.is_file():
                found.append((key, item))
        return sorted(found)

    async def get(self) -> str | None:
        """The listing shown in the prompt, e.g. ``- code-review: How to review code``."""
        lines = []
        for key, file in self._entries():
            description = _split_front_matter(_read_text(file))[0].get("description")
            lines.append(f"- {key}: {description}" if description else f"- {key}")
        return "\n".join(lines) if lines else None

    async def load(self, key: str) -> str | None:
        """The body of skill ``key``, or ``None`` when there is no such file.

        Raises:
            InvalidInputError: ``key`` is not a valid skill key.
        """
        file = self._file(key)
        try:
            text = _read_text(file)
        except FileNotFoundError:
            return None
        return _split_front_matter(text)[1]

    async def set(self, key: str, content: str, description: str | None = None) -> None:
        """Write skill ``key`` (creating the folder); ``description`` goes to the front matter.

        Raises:
            InvalidInputError: ``key`` is not a valid skill key, ``content``
                is not a string, or ``description`` neither a string nor ``None``.
        """
        file = self._file(key)
        if not isinstance(content, str):
            raise InvalidInputError(f"skill content must be a string, not {type(content).__name__}", field="content")
        if description is not None and not isinstance(description, str):
            raise InvalidInputError(
                f"skill description must be a string or None, not {type(description).__name__}", field="description"
            )
        head = ""
        if description is not None:
            head = f"{_FRONT}\ndescription: {_yaml_value(description)}\n{_FRONT}\n"
        elif _first_line(content) == _FRONT or content.startswith("\ufeff"):
            # keep a body starting with '---' from reading as front matter, and its BOM from being dropped
            head = f"{_FRONT}\n{_FRONT}\n"
        self.path.mkdir(parents=True, exist_ok=True)
        _atomic_write(file, head + content)


def _atomic_write(file: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{file.name}.", suffix=".tmp", dir=file.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, file)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(file.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
