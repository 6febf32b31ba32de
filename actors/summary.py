"""The summary prompt of compaction: how it is written and how it is read back.

:func:`build_summary_prompt` writes the prompt a summarizer gets, with the
exact text of the original (docs/behaviours.md §8), except that object and
list tool outputs are shown as compact JSON (docs/deviations.md #17).

:func:`extractive_summarize` is a summarizer for people with no model at
hand: deterministic, offline, and fast. It parses a prompt written by
:func:`build_summary_prompt` (first or iterative form) and answers with the
four requested sections, filled with the conversation's own sentences:

* **Topic** - the first substantive user sentence (kept from the previous
  summary when updating one);
* **Key Points** - the most informative sentences and tool calls: those with
  ids, codes, amounts, numbers and decisions score highest; bullets of the
  previous summary are kept ahead of new ones while the budget allows;
* **Current State** - the last user and assistant turns and the last tool
  call;
* **Open Items** - questions asked in the last turns (and the previous
  summary's open items, budget permitting).

The answer stays within the prompt's ``Target ~N tokens`` as measured by
:func:`actors.tokens.estimate_string_tokens` (unless N is smaller than the
four headings themselves). It never invents text: every line is a sentence,
or a clipped sentence, of the prompt.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .tokens import estimate_string_tokens, js_number, js_stringify, message_parts

_SECTIONS = (
    "## Topic\n[What the conversation is about]\n\n"
    "## Key Points\n[Important information, decisions, and conclusions from the conversation]\n\n"
    "## Current State\n[Where things stand now — what has been done, what is in progress]\n\n"
    "## Open Items\n[Unresolved questions, pending tasks, or next steps discussed]\n\n"
)
_TAIL = (
    "Target ~{budget} tokens. Be factual — only include information that was explicitly "
    "discussed in the conversation. Do NOT invent file paths, commands, or details that were "
    "not mentioned. Write only the summary body."
)
_FIRST_OPENING = (
    "Create a concise summary of this conversation that preserves the important information "
    "for future context.\n\nCONVERSATION TO SUMMARIZE:\n"
)
_FIRST_CLOSING = "\n\nUse this structure:\n\n"
_ITERATIVE_OPENING = (
    "You are updating a conversation summary. A previous summary exists below. New conversation "
    "turns have occurred since then and need to be incorporated.\n\nPREVIOUS SUMMARY:\n"
)
_ITERATIVE_MIDDLE = "\n\nNEW TURNS TO INCORPORATE:\n"
_ITERATIVE_CLOSING = (
    "\n\nUpdate the summary. PRESERVE existing information that is still relevant. ADD new "
    "information. Remove information only if it is clearly obsolete.\n\n"
)
#: Separator between two messages in the prompt.
MESSAGE_SEPARATOR = "\n\n---\n\n"
#: Characters kept of each tool input / output in the prompt.
TOOL_PREVIEW_CHARS = 500


# ── Writing the prompt (docs/behaviours.md §8) ───────────────────────────


def build_summary_prompt(
    messages: Sequence[Mapping[str, Any]], previous_summary: str | None, budget: int
) -> str:
    """The prompt asking a summarizer for a ``budget``-token summary of ``messages``.

    Each message renders as ``"[role]\\n"`` + its text parts joined by
    ``"\\n"``, then one block per tool part: ``"[Tool: name]"``, plus
    ``"Input: <JSON, first 500 chars>"`` and ``"Output: <first 500 chars>"``
    when those are truthy (in the JavaScript sense: ``{}`` and ``[]`` count).
    Object and list outputs are compact JSON (docs/deviations.md #17); other outputs
    their string form. Messages are joined by ``"\\n\\n---\\n\\n"``.

    A non-empty ``previous_summary`` selects the iterative form (update that
    summary); otherwise the first form. Text exactly as docs/behaviours.md §8.
    """
    content = MESSAGE_SEPARATOR.join(_render_message(message) for message in messages)
    tail = _SECTIONS + _TAIL.format(budget=budget)
    if previous_summary:
        return (
            _ITERATIVE_OPENING + previous_summary + _ITERATIVE_MIDDLE + content
            + _ITERATIVE_CLOSING + tail
        )
    return _FIRST_OPENING + content + _FIRST_CLOSING + tail


def _render_message(message: Mapping[str, Any]) -> str:
    parts = [part for part in message_parts(message) if isinstance(part, Mapping)]
    text = "\n".join(
        _js_string(part.get("text")) for part in parts if part.get("type") == "text"
    )
    tools = "\n".join(_render_tool(part) for part in parts if _is_tool_part(part))
    rendered = f"[{_js_string(message.get('role'))}]\n{text}"
    return rendered + ("\n" + tools if tools else "")


def _render_tool(part: Mapping[str, Any]) -> str:
    name = part.get("toolName")
    lines = [f"[Tool: {'unknown' if name is None else _js_string(name)}]"]
    if _js_truthy(part.get("input")):
        lines.append("Input: " + _preview(js_stringify(part["input"])))
    if _js_truthy(part.get("output")):
        output = part["output"]
        shown = js_stringify(output) if isinstance(output, (Mapping, list, tuple)) else _js_string(output)
        lines.append("Output: " + _preview(shown))
    return "\n".join(lines)


def _is_tool_part(part: Mapping[str, Any]) -> bool:
    kind = part.get("type")
    return isinstance(kind, str) and (kind.startswith("tool-") or kind == "dynamic-tool")


def _js_truthy(value: Any) -> bool:
    if value is None or value is False or value == "":
        return False
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value != 0 and not math.isnan(value)
    return True


def _js_string(value: Any) -> str:
    """``String(value)`` for JSON scalars (``null`` and ``undefined`` join as ``""``)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return js_number(value)
    return str(value)


def _preview(text: str) -> str:
    from .truncation import js_prefix  # local: truncation is the heavier module

    return js_prefix(text, TOOL_PREVIEW_CHARS)


# ── Reading the prompt back ─────────────────────────────────────────────

_TARGET = re.compile(r"Target ~(\d+) tokens\.")
_ROLE_HEADER = re.compile(r"\[([A-Za-z0-9_-]{1,40})\]\n")
_TOOL_HEADER = re.compile(r"^\[Tool: (.*)\]$")
_HEADING = re.compile(r"^## (Topic|Key Points|Current State|Open Items)\s*$")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[A-Z0-9])")
_MARKDOWN = re.compile(r"\*\*|__|`")
_LIST_MARK = re.compile(r"^\s*(?:[-*•]|\d{1,3}[.)]|#{1,6})\s+")
_CODE = re.compile(r"\b(?=[\w-]*\d)(?=[\w-]*[A-Za-z])[\w-]{3,}\b")
_UPPER_CODE = re.compile(r"\b[A-Z]{3,}\b")
_MONEY = re.compile(r"[$€£¥]\s?\d|\d\s?(?:USD|EUR|dollars?)\b")
_NUMBER = re.compile(r"\d+(?:[.,:/-]\d+)*")
_JSON_PAIR = re.compile(r'"([A-Za-z_]\w*)":\s*("(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?|true|false)')
_DECISION_WORDS = frozenset(
    "confirm confirmed confirms book booked booking cancel cancelled canceled cancellation "
    "refund refunded upgrade upgraded change changed modify modified update updated decided "
    "decide agree agreed approve approved proceed total paid pay payment prefer want need "
    "must cannot can't unable policy deadline error failed success successfully done "
    "chose choose selected reserved issued transfer".split()
)
_STATE_LABEL = re.compile(r"^(?:Last ([A-Za-z0-9_-]+) turn: |Last tool call: )")
_ASKER = re.compile(r"^([A-Za-z0-9_-]+) (?:asked|requested): ")
_REQUEST_WORDS = frozenset("want wants need needs like please prefer".split())
_PLEASANTRY = re.compile(
    r"^(thanks?\b|thank you|you're welcome|you are welcome|hi\b|hello\b|hey\b|great\b|sure\b|"
    r"ok\b|okay\b|glad\b|feel free|if you have any|have a (great|nice|good)|goodbye|bye\b)",
    re.IGNORECASE,
)
_WORD_LIMIT = 40
_TOPIC_WORD_LIMIT = 30
_DEFAULT_BUDGET = 500


@dataclass
class _Tool:
    name: str
    input: str = ""
    output: str = ""


@dataclass
class _Turn:
    role: str
    text: str
    tools: list[_Tool] = field(default_factory=list)


@dataclass
class _Prompt:
    turns: list[_Turn]
    previous: dict[str, list[str]]
    budget: int


def extractive_summarize(prompt: str) -> str:
    """A summary of the conversation in ``prompt``, built from its own sentences.

    ``prompt`` is normally written by :func:`build_summary_prompt`; any other
    text is summarized as one user turn with a 500-token target. Same input,
    same output. See the module docstring for what each section holds.
    """
    parsed = _parse_prompt(prompt)
    return _Writer(parsed).write()


def _parse_prompt(prompt: str) -> _Prompt:
    targets = _TARGET.findall(prompt)
    budget = int(targets[-1]) if targets else _DEFAULT_BUDGET
    previous: dict[str, list[str]] = {}
    if prompt.startswith(_ITERATIVE_OPENING) and _ITERATIVE_MIDDLE in prompt:
        body = prompt[len(_ITERATIVE_OPENING):]
        summary, _, rest = body.partition(_ITERATIVE_MIDDLE)
        end = rest.rfind(_ITERATIVE_CLOSING)
        content = rest[:end] if end >= 0 else rest
        previous = _parse_sections(summary)
    elif prompt.startswith(_FIRST_OPENING):
        body = prompt[len(_FIRST_OPENING):]
        end = body.rfind(_FIRST_CLOSING + "## Topic")
        content = body[:end] if end >= 0 else body
    else:
        content = "[user]\n" + prompt
    return _Prompt(_parse_turns(content), previous, budget)


def _parse_sections(summary: str) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    current = "Key Points"
    for raw in summary.splitlines():
        heading = _HEADING.match(raw.strip())
        if heading:
            current = heading.group(1)
            continue
        line = _LIST_MARK.sub("", raw).strip()
        if line and not (line.startswith("[") and line.endswith("]")):
            sections.setdefault(current, []).append(line)
    return sections


def _parse_turns(content: str) -> list[_Turn]:
    turns: list[_Turn] = []
    for chunk in content.split(MESSAGE_SEPARATOR):
        header = _ROLE_HEADER.match(chunk)
        if header is None and turns:
            turns[-1].text += MESSAGE_SEPARATOR + chunk
            continue
        role = header.group(1) if header else "user"
        turns.append(_parse_body(role, chunk[header.end():] if header else chunk))
    return turns


def _parse_body(role: str, body: str) -> _Turn:
    turn = _Turn(role, "")
    text_lines: list[str] = []
    tool: _Tool | None = None
    target = "text"
    for line in body.split("\n"):
        header = _TOOL_HEADER.match(line)
        if header:
            tool = _Tool(header.group(1))
            turn.tools.append(tool)
            target = "name"
        elif tool is not None and line.startswith("Input: ") and target == "name":
            tool.input, target = line[len("Input: "):], "input"
        elif tool is not None and line.startswith("Output: ") and target in ("name", "input"):
            tool.output, target = line[len("Output: "):], "output"
        elif tool is not None and target == "output":
            tool.output += "\n" + line
        elif tool is not None and target == "input":
            tool.input += "\n" + line
        else:
            text_lines.append(line)
    turn.text = "\n".join(text_lines).strip()
    return turn


# ── Choosing sentences ──────────────────────────────────────────────────


def _sentences(text: str) -> list[str]:
    found = []
    for line in text.splitlines():
        line = _MARKDOWN.sub("", _LIST_MARK.sub("", line)).strip()
        for sentence in _SENTENCE_END.split(line):
            sentence = " ".join(sentence.split())
            if sentence:
                found.append(sentence)
    return found


def _clip(text: str, words: int) -> str:
    tokens = text.split()
    if len(tokens) <= words:
        return text
    return " ".join(tokens[:words]) + " …"


def _score(sentence: str) -> int:
    words = sentence.split()
    score = 3 * min(3, len(_CODE.findall(sentence)))
    score += min(2, len(_UPPER_CODE.findall(sentence)))
    score += 2 * min(1, len(_MONEY.findall(sentence)))
    score += min(3, len(_NUMBER.findall(sentence)))
    lowered = {word.strip(".,;:!?\"'()").lower() for word in words}
    score += 2 * min(2, len(lowered & _DECISION_WORDS))
    if _PLEASANTRY.match(sentence):
        score -= 4
    return score


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def _label(role: str) -> str:
    return role[:1].upper() + role[1:]


def _tool_line(tool: _Tool) -> str:
    """``Tool name(key=value, ...) -> key=value, ...`` from a tool block of the prompt."""
    args = _pairs(tool.input, 6, {})
    line = f"Tool {tool.name}"
    if args:
        line += "(" + ", ".join(f"{k}={v}" for k, v in args.items()) + ")"
    result = _pairs(tool.output, 6, args)
    shown = ", ".join(f"{k}={v}" for k, v in result.items()) or _clip(" ".join(tool.output.split()), 12)
    return _clip(line + (f" -> {shown}" if shown else ""), _WORD_LIMIT)


def _pairs(text: str, limit: int, known: dict[str, str]) -> dict[str, str]:
    """The first ``limit`` ``key=value`` scalars of JSON-ish ``text``, skipping ``known`` ones."""
    seen: dict[str, str] = {}
    for key, value in _JSON_PAIR.findall(text):
        value = _clip(value.strip('"'), 12)
        if key not in seen and known.get(key) != value:
            seen[key] = value
        if len(seen) == limit:
            break
    return seen


@dataclass(order=True)
class _Candidate:
    priority: int
    order: int
    text: str = field(compare=False)


class _Budget:
    """The token estimate of the text written so far (its chars and words add up)."""

    def __init__(self, limit: int) -> None:
        self.limit, self.chars, self.words = limit, 0, 0

    @staticmethod
    def _tokens(chars: int, words: int) -> int:
        return math.ceil(max(chars / 4, words * 1.3))

    def fits(self, line: str, cap: int | None, used: list[int]) -> bool:
        chars, words = len(line) + 1, len(line.split())
        if self._tokens(self.chars + chars, self.words + words) > self.limit:
            return False
        return cap is None or self._tokens(used[0] + chars, used[1] + words) <= cap

    def take(self, line: str, used: list[int]) -> None:
        chars, words = len(line) + 1, len(line.split())
        self.chars, self.words = self.chars + chars, self.words + words
        used[0], used[1] = used[0] + chars, used[1] + words


_PLACEHOLDERS = {
    "Topic": "Not stated.",
    "Key Points": "- None recorded.",
    "Current State": "- Not stated.",
    "Open Items": "- None stated.",
}
_SECTION_NAMES = ("Topic", "Key Points", "Current State", "Open Items")
_MIN_CLIPPED_WORDS = 6


def _render(sections: dict[str, list[_Candidate]]) -> str:
    blocks = []
    for name in _SECTION_NAMES:
        chosen = sorted(sections[name], key=lambda c: c.order)
        bullet = "" if name == "Topic" else "- "
        body = "\n".join(bullet + c.text for c in chosen) or _PLACEHOLDERS[name]
        blocks.append(f"## {name}\n{body}")
    return "\n\n".join(blocks)


def _is_placeholder(line: str) -> bool:
    return any(line == text.removeprefix("- ") for text in _PLACEHOLDERS.values())


class _Writer:
    def __init__(self, prompt: _Prompt) -> None:
        self.turns = prompt.turns
        self.previous = {
            name: [line for line in lines if not _is_placeholder(line)]
            for name, lines in prompt.previous.items()
        }
        self.budget = _Budget(prompt.budget)
        self.used_norms: set[str] = set()

    def write(self) -> str:
        self.budget.take("## Topic\n\n## Key Points\n\n## Current State\n\n## Open Items", [0, 0])
        limit = self.budget.limit
        state_cap, open_cap = limit * 25 // 100, limit * 15 // 100
        topic = self._select([self._topic()], cap=limit * 15 // 100, remember=False)
        # Key points first, leaving room for the two short sections; then the
        # key points that did not fit may use what those sections left over.
        reserve = self.budget.limit - state_cap - open_cap
        candidates = self._key_point_candidates()
        points = self._select(candidates, cap=None, stop_at=reserve)
        state = self._select(self._state_candidates(), cap=state_cap)
        open_items = self._select(self._open_candidates(), cap=open_cap)
        points += self._select(candidates, cap=None)
        sections = {"Topic": topic, "Key Points": points, "Current State": state, "Open Items": open_items}
        text = _render(sections)
        # The running estimate is close but not exact (placeholders, JS word
        # splitting): drop the least important lines until the text fits.
        for name in ("Key Points", "Open Items", "Current State", "Topic"):
            while estimate_string_tokens(text) > limit and sections[name]:
                sections[name].remove(max(sections[name]))
                text = _render(sections)
        return text

    def _select(
        self, candidates: Sequence[_Candidate | None], *, cap: int | None,
        stop_at: int | None = None, remember: bool = True,
    ) -> list[_Candidate]:
        """Take candidates best first while they fit; a long one may be clipped to fit.

        ``cap`` bounds this call's own tokens, ``stop_at`` the running total.
        Chosen lines are remembered so no later line repeats them.
        """
        chosen: list[_Candidate] = []
        used = [0, 0]
        saved_limit = self.budget.limit
        if stop_at is not None:
            self.budget.limit = min(saved_limit, stop_at)
        for candidate in sorted(c for c in candidates if c is not None):
            norm = _norm(candidate.text)
            if not norm or norm in self.used_norms or any(norm in used for used in self.used_norms):
                continue
            text = self._fitting(candidate.text, cap, used)
            if text is not None:
                self.budget.take("- " + text, used)
                chosen.append(_Candidate(candidate.priority, candidate.order, text))
                if remember:
                    self.used_norms.add(norm)
        self.budget.limit = saved_limit
        return chosen

    def _fitting(self, text: str, cap: int | None, used: list[int]) -> str | None:
        if self.budget.fits("- " + text, cap, used):
            return text
        words = text.split()
        low, high = _MIN_CLIPPED_WORDS, len(words) - 1
        best = None
        while low <= high:  # the longest clipped prefix that still fits
            middle = (low + high) // 2
            clipped = " ".join(words[:middle]) + " …"
            if self.budget.fits("- " + clipped, cap, used):
                best, low = clipped, middle + 1
            else:
                high = middle - 1
        return best

    def _topic(self) -> _Candidate | None:
        kept = self.previous.get("Topic")
        if kept:
            return _Candidate(0, 0, _clip(" ".join(kept), _TOPIC_WORD_LIMIT))
        ordered = [t for t in self.turns if t.role == "user"] + self.turns
        for turn in ordered:
            useful = [s for s in _sentences(turn.text) if len(s.split()) >= 3 and not _PLEASANTRY.match(s)]
            if useful:
                text = " ".join(useful[:2])
                return _Candidate(0, 0, _clip(f"{_label(turn.role)}: {text}", _TOPIC_WORD_LIMIT))
        return None

    def _key_point_candidates(self) -> list[_Candidate]:
        found: list[_Candidate] = []
        for index, line in enumerate(self.previous.get("Key Points", [])):
            found.append(_Candidate(-(_score(line) + 6), index - 100_000, line))
        for index, line in enumerate(self.previous.get("Current State", [])):
            line = _STATE_LABEL.sub(lambda m: _label(m.group(1)) + ": " if m.group(1) else "", line)
            found.append(_Candidate(-(_score(line) + 1), index - 50_000, line))
        order = 0
        for turn in self.turns:
            for sentence in _sentences(turn.text):
                order += 1
                if sentence.endswith("?") or len(sentence.split()) < 4:
                    continue
                score = _score(sentence) + (1 if turn.role == "user" else 0)
                if score > 0:
                    text = _clip(f"{_label(turn.role)}: {sentence}", _WORD_LIMIT)
                    found.append(_Candidate(-score, order, text))
            for tool in turn.tools:
                order += 1
                line = _tool_line(tool)
                found.append(_Candidate(-(min(_score(line), 8) - 1), order, line))
        return found

    def _state_candidates(self) -> list[_Candidate]:
        """The latest tool call and the latest user and assistant turns, most recent first."""
        found: list[_Candidate] = []
        seen: set[str] = set()
        for position, turn in enumerate(reversed(self.turns)):
            order = (len(self.turns) - position) * 2
            if turn.tools and "tool" not in seen:
                seen.add("tool")
                line = "Last tool call: " + _tool_line(turn.tools[-1])
                found.append(_Candidate(len(found), order + 1, line))
            sentences = [s for s in _sentences(turn.text) if len(s.split()) >= 3]
            if sentences and turn.role not in seen:
                seen.add(turn.role)
                best = sorted(sentences, key=lambda s: (-_score(s), sentences.index(s)))[:2]
                text = " ".join(s for s in sentences if s in best)
                line = _clip(f"Last {turn.role} turn: {text}", _WORD_LIMIT)
                found.append(_Candidate(len(found), order, line))
            if len(seen) >= 3:
                break
        return found

    def _open_candidates(self) -> list[_Candidate]:
        """Questions nobody answered yet, and requests of a last user turn left unanswered."""
        found: list[_Candidate] = []
        for index, turn in enumerate(self.turns):
            if any(later.role != turn.role for later in self.turns[index + 1:]):
                continue  # someone spoke or acted after this turn: treat it as answered
            for sentence in _sentences(turn.text):
                words = sentence.split()
                asked = sentence.endswith("?")
                requested = turn.role == "user" and {w.lower().strip(".,!") for w in words} & _REQUEST_WORDS
                if len(words) < 3 or not (asked or requested):
                    continue
                text = _clip(f"{_label(turn.role)} {'asked' if asked else 'requested'}: {sentence}", _WORD_LIMIT)
                found.append(_Candidate(-(index + 10), index * 1000 + len(found), text))
        roles_since = {turn.role.lower() for turn in self.turns}
        for index, line in enumerate(self.previous.get("Open Items", [])):
            asker = _ASKER.match(line)
            if asker and roles_since - {asker.group(1).lower()}:
                continue  # the other side has spoken since: no longer open
            found.append(_Candidate(0, index - 100_000, line))
        return found
