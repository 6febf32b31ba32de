"""User text -> safe FTS5 queries: one search syntax everywhere (docs/deviations.md #9, #10).

Every search in the project (``Session.search``, ``SessionManager.search``,
the ``search_context`` tool through :class:`AgentSearchProvider`,
``session_search``) parses its query with :func:`parse_query`:

* each whitespace-separated word must match, in any order;
* a ``"double-quoted part"`` must match as a phrase (adjacent tokens);
* nothing the user types is FTS5 syntax: ``OR``, ``NEAR``, ``*``, ``:``,
  ``-``, ``^``, parentheses and unbalanced quotes are plain text. Every
  term reaches SQLite as a quoted FTS5 string bound as a parameter;
* a term with no letter or digit (``#``, ``?``, ``""``) is dropped, and a
  query left with no term matches nothing (:func:`parse_query` returns
  ``None``): callers return ``[]`` without querying;
* NUL characters and lone UTF-16 surrogates (which no stored text can
  hold) separate words like spaces; a term repeated is kept once, so the
  query's size never depends on repetition;
* a term containing CJK text (Han, kana, Hangul) is looked up in the
  trigram index beside the porter one, because ``unicode61`` makes a whole
  run of CJK characters one token and would never find a word inside it.

The porter index is ``<table>`` and the trigram index ``<table>_cjk``; both
use the owning row's integer key as their rowid. Only text that contains
CJK characters is put in the trigram index (:func:`has_cjk`).

Text reaches a porter index through :func:`indexed_text`, which splits it
where CJK characters meet other letters or digits (``重跑gen-itgc后``
becomes ``重跑 gen-itgc 后`` to the tokenizer), so a word glued to Chinese or
Japanese text is found (``unicode61`` would make ``重跑gen`` one token).
The split is an invisible separator (:data:`INDEX_BOUNDARY`) that
:func:`stored_text` removes exactly. Hits never read text back from an
index: the message and search-entry indexes are contentless or read their
text from the owning row, which keeps it as written.

Messages have a third index, ``<table>_tools`` (columns ``content`` and
``tools``), holding the text *and* the tool calls of messages that have
tool calls; ``<table>`` itself holds the text of messages that have text,
and nothing else, as the original's does. FTS5's bm25 counts a row's
length over all its columns, so text matches (ranked in ``<table>``) rank
exactly as in the original; messages that need their tool calls to match
come after them (see :func:`matching_rowids_sql`).
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass
from typing import Any

_CJK_RANGES = (
    (0x1100, 0x11FF),  # Hangul Jamo
    (0x3005, 0x3007),  # ideographic iteration mark, closing mark, number zero (々〆〇)
    (0x3040, 0x30FF),  # Hiragana, Katakana
    (0x3100, 0x312F),  # Bopomofo
    (0x3130, 0x318F),  # Hangul compatibility Jamo
    (0x31A0, 0x31BF),  # Bopomofo extended
    (0x31F0, 0x31FF),  # Katakana phonetic extensions
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xA960, 0xA97F),  # Hangul Jamo extended-A
    (0xAC00, 0xD7AF),  # Hangul syllables
    (0xD7B0, 0xD7FF),  # Hangul Jamo extended-B
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xFF66, 0xFFDC),  # half-width Katakana and Hangul
    (0x1B000, 0x1B16F),  # Kana supplement and extensions (hentaigana, small kana)
    (0x20000, 0x2FA1F),  # CJK extensions B..F, compatibility supplement
    (0x30000, 0x323AF),  # CJK extensions G, H
)

#: A trigram index answers MATCH only for terms of at least this many characters.
TRIGRAM_MIN_CHARS = 3

#: Most terms one FTS5 MATCH gets; longer queries are split (see :func:`matching_rowids_sql`).
MATCH_CHUNK_TERMS = 256
#: Most MATCH texts of one index in a query (SQLite's expression depth limit is 1,000).
MAX_MATCH_CHUNKS = 400

_PHRASE = re.compile(r'"([^"]*)"')
# FTS5 ends a query string at NUL; SQLite cannot store a lone surrogate.
_SEPARATOR_CHARS = re.compile("[\x00\ud800-\udfff]")


# One character class of all the ranges: the regex engine scans text at C speed.
_CJK_CHAR = re.compile("[" + "".join(f"{chr(lo)}-{chr(hi)}" for lo, hi in _CJK_RANGES) + "]")


def is_cjk_char(ch: str) -> bool:
    """``True`` for a Han, kana or Hangul character."""
    return _CJK_CHAR.match(ch) is not None


def has_cjk(text: str) -> bool:
    """``True`` when ``text`` holds at least one CJK character (see :func:`is_cjk_char`).

    Linear in ``text`` at C speed (ASCII text is answered without a scan):
    it runs on every indexed message.
    """
    return not text.isascii() and _CJK_CHAR.search(text) is not None


def _has_token_char(text: str) -> bool:
    # unicode61 keeps letters, numbers and private-use characters as token characters.
    return any(unicodedata.category(ch)[0] in "LN" or unicodedata.category(ch) == "Co" for ch in text)


#: Suffix of a porter index's twin holding text and tool calls of messages with tool calls.
TOOLS_SUFFIX = "_tools"

#: Put between CJK and other letters or digits in text given to a porter index
#: (U+2063 INVISIBLE SEPARATOR: a separator to ``unicode61``). A boundary
#: character already in the text is doubled, so :func:`stored_text` is exact.
INDEX_BOUNDARY = "\u2063"

_CJK_RUN = re.compile(_CJK_CHAR.pattern + "+")
_STORED_BOUNDARY = re.compile(f"{INDEX_BOUNDARY}({INDEX_BOUNDARY}?)")


def indexed_text(text: str) -> str:
    """``text`` as given to a porter index: split where CJK meets other letters or digits.

    ASCII text comes back unchanged without a scan (the usual case); other
    text costs a C-speed scan, and text holding CJK a step per run of CJK
    characters. Reversed exactly by :func:`stored_text`.
    """
    if text.isascii():
        return text
    if INDEX_BOUNDARY in text:
        text = text.replace(INDEX_BOUNDARY, INDEX_BOUNDARY * 2)
    pieces: list[str] = []
    last, end = 0, len(text)
    for run in _CJK_RUN.finditer(text):
        start, stop = run.span()
        # A run is maximal, so its neighbours are not CJK; isalnum() is unicode61's letters and digits.
        if start and text[start - 1].isalnum():
            pieces += (text[last:start], INDEX_BOUNDARY)
            last = start
        if stop < end and text[stop].isalnum():
            pieces += (text[last:stop], INDEX_BOUNDARY)
            last = stop
    if not pieces:
        return text
    pieces.append(text[last:])
    return "".join(pieces)


def stored_text(indexed: str) -> str:
    """The text :func:`indexed_text` was given (a hit's ``content`` as written)."""
    if INDEX_BOUNDARY not in indexed:
        return indexed
    return _STORED_BOUNDARY.sub(r"\1", indexed)


@dataclass(frozen=True, slots=True)
class Term:
    """One required part of a query: a word or a quoted phrase, as typed."""

    text: str
    phrase: bool
    cjk: bool

    @property
    def fts_string(self) -> str:
        """The term as an FTS5 string literal: ``"…"`` with inner quotes doubled."""
        return '"' + self.text.replace('"', '""') + '"'


@dataclass(frozen=True, slots=True)
class ParsedQuery:
    """A query reduced to the terms that must all match."""

    terms: tuple[Term, ...]

    @property
    def porter_terms(self) -> tuple[Term, ...]:
        return tuple(t for t in self.terms if not t.cjk)

    @property
    def cjk_terms(self) -> tuple[Term, ...]:
        return tuple(t for t in self.terms if t.cjk)

    @property
    def match_expression(self) -> str | None:
        """FTS5 MATCH text for the porter index (implicit AND), or ``None``."""
        terms = self.porter_terms
        return " ".join(t.fts_string for t in terms) if terms else None


def parse_query(text: str) -> ParsedQuery | None:
    """Split user text into required terms; ``None`` when nothing can match.

    Args:
        text: anything a user typed (``str``). Quotes pair up left to right; a
            quote without a partner is plain text.

    Returns:
        A :class:`ParsedQuery`, or ``None`` for a blank query or one whose
        terms hold no letter or digit.

    Raises:
        TypeError: ``text`` is not a ``str``.
    """
    if not isinstance(text, str):
        raise TypeError(f"search query must be a string, not {type(text).__name__}")
    text = _SEPARATOR_CHARS.sub(" ", text)
    terms: list[Term] = []

    def add(raw: str, phrase: bool) -> None:
        raw = raw.strip() if phrase else raw
        if raw and _has_token_char(raw):
            terms.append(Term(raw, phrase, has_cjk(raw)))

    pos = 0
    for m in _PHRASE.finditer(text):
        for word in text[pos : m.start()].split():
            add(word, False)
        add(" ".join(m.group(1).split()), True)
        pos = m.end()
    for word in text[pos:].split():
        add(word, False)
    return ParsedQuery(tuple(dict.fromkeys(terms))) if terms else None


def _match_chunks(terms: tuple[Term, ...] | list[Term]) -> list[str]:
    """``terms`` as FTS5 MATCH texts of at most ``MATCH_CHUNK_TERMS`` terms each.

    FTS5's cost for one MATCH grows faster than its number of terms (20,000
    terms take seconds), so long queries are split; past
    ``MATCH_CHUNK_TERMS * MAX_MATCH_CHUNKS`` terms the chunks grow instead,
    keeping the statement within SQLite's expression-depth limit.
    """
    size = max(MATCH_CHUNK_TERMS, -(-len(terms) // MAX_MATCH_CHUNKS))
    return [" ".join(t.fts_string for t in terms[i : i + size]) for i in range(0, len(terms), size)]


def matching_rowids_sql(query: ParsedQuery, table: str, *, tools: bool = False) -> tuple[str, list[str]]:
    """SQL selecting ``(rowid, rank)`` of the rows of ``table`` matching every term.

    ``table`` is the porter FTS5 table; CJK terms are checked against
    ``<table>_cjk``: those of at least :data:`TRIGRAM_MIN_CHARS` characters
    by trigram ``MATCH``, shorter ones by substring search. ``rank`` is
    FTS5's bm25 rank (lower is better; always negative) of the first
    :data:`MATCH_CHUNK_TERMS` porter terms, else of the first long CJK
    terms, else ``0``. ``table`` must be a trusted identifier (a constant of
    this package), never user text.

    With ``tools`` (messages), a row also matches when its text and tool
    calls together hold every porter term (``<table>_tools``); such rows
    are not text matches and come after all of them, with a rank in
    ``(0, 1)`` that orders them by their bm25 in ``<table>_tools``. Text
    matches keep ``<table>``'s own bm25, so tool calls never change their
    order. (The CJK index already holds text and tool calls together.)

    Any number of terms works: the first chunk of terms drives the query and
    each further chunk is one ``+rowid IN (... MATCH ?)`` condition, which
    SQLite only evaluates when the first chunk matched something (a long
    query matching nothing costs one chunk). Short CJK terms are one
    condition with one parameter whatever their number. The unary ``+``
    keeps SQLite from planning a condition as the FTS5 table's rowid
    lookup, which would leave its ``MATCH`` unusable.

    Returns:
        ``(sql, params)`` -- every user string is a bound parameter.
    """
    cjk_table = f"{table}_cjk"
    porter = _match_chunks(query.porter_terms)
    trigram = _match_chunks([t for t in query.cjk_terms if len(t.text) >= TRIGRAM_MIN_CHARS])
    short_cjk = [t.text for t in query.cjk_terms if len(t.text) < TRIGRAM_MIN_CHARS]
    params: list[str] = []
    if porter:
        head = f"SELECT rowid, rank FROM {table} WHERE {table} MATCH ?"
        params.append(porter[0])
    elif trigram:
        head = f"SELECT rowid, rank FROM {cjk_table} WHERE {cjk_table} MATCH ?"
        params.append(trigram.pop(0))
    else:
        head = f"SELECT rowid, 0 AS rank FROM {cjk_table} WHERE 1"
    conditions = [f"+rowid IN (SELECT rowid FROM {table}(?))"] * (len(porter) - 1 if porter else 0)
    params += porter[1:]
    cjk_conditions, cjk_params = _cjk_conditions(cjk_table, trigram, short_cjk)
    sql = head + "".join(f" AND {c}" for c in conditions + cjk_conditions)
    params += cjk_params
    if tools and porter:
        tool_sql, tool_params = _tool_matches_sql(table, porter, cjk_conditions, cjk_params)
        sql = f"{sql} UNION ALL {tool_sql}"
        params += tool_params
    return sql, params


def _cjk_conditions(cjk_table: str, trigram: list[str], short_cjk: list[str]) -> tuple[list[str], list[str]]:
    """Conditions (and their parameters) requiring the CJK terms in ``cjk_table``."""
    conditions = [f"+rowid IN (SELECT rowid FROM {cjk_table}(?))"] * len(trigram)
    params = list(trigram)
    if short_cjk:
        conditions.append(
            f"+rowid IN (SELECT c.rowid FROM {cjk_table} AS c WHERE NOT EXISTS "
            "(SELECT 1 FROM json_each(?) AS t WHERE instr(c.content, t.value) = 0))"
        )
        params.append(json.dumps(short_cjk, ensure_ascii=False))
    return conditions, params


def _tool_matches_sql(
    table: str, porter: list[str], cjk_conditions: list[str], cjk_params: list[str]
) -> tuple[str, list[str]]:
    """``(rowid, rank)`` of rows of ``<table>_tools`` matching every term that are not text matches.

    A row of ``<table>_tools`` holds a message's text (``content``) as
    ``<table>`` does, so "every porter term is in ``content``" is exactly
    "a text match": for one chunk of terms that is excluded inside the FTS5
    query (``(terms) NOT content : (terms)``), for more by rowid.
    """
    tools_table = f"{table}{TOOLS_SUFFIX}"
    rank = "1.0 / (1.0 - rank)"  # bm25 ranks are negative: (0, 1), in the same order
    head = f"SELECT rowid, {rank} AS rank FROM {tools_table} WHERE {tools_table} MATCH ?"
    if len(porter) == 1:
        params = [f"({porter[0]}) NOT content : ({porter[0]})"]
        conditions: list[str] = []
    else:
        params = [porter[0], *porter[1:], *porter]
        conditions = [f"+rowid IN (SELECT rowid FROM {tools_table}(?))"] * (len(porter) - 1)
        text_match = f"SELECT rowid FROM {table} WHERE {table} MATCH ?" + "".join(
            f" AND +rowid IN (SELECT rowid FROM {table}(?))" for _ in porter[1:]
        )
        conditions.append(f"+rowid NOT IN ({text_match})")
    sql = head + "".join(f" AND {c}" for c in conditions + cjk_conditions)
    return sql, params + cjk_params


def index_rows(
    table: str,
    rowid: int,
    text: str,
    *,
    extra: dict[str, str] | None = None,
    tools: str | None = None,
) -> list[tuple[str, tuple[Any, ...]]]:
    """Statements that put ``text`` under ``rowid`` in ``table`` (and its twins).

    Args:
        table: porter FTS5 table (trusted identifier).
        rowid: the owning row's integer key.
        text: the text to index in the ``content`` column (``""``: no row).
        extra: other (UNINDEXED) columns of ``table`` and their values.
        tools: for tables with a ``<table>_tools`` twin (messages): the
            names and inputs of the message's tool calls; when not ``""``
            the twin gets a row with ``text`` and ``tools``.

    Porter rows get :func:`indexed_text`; the CJK twin gets ``text`` (and
    ``tools`` after it) unchanged, when it holds CJK characters. Nothing is
    indexed when ``text`` and ``tools`` are both ``""``.

    Returns:
        ``[(sql, params), ...]`` to run in the caller's transaction.
    """
    stmts: list[tuple[str, tuple[Any, ...]]] = []
    if text:
        if extra:
            cols = dict(extra)
            cols["content"] = indexed_text(text)
            stmts.append((_insert_sql(table, tuple(cols)), (rowid, *cols.values())))
        else:  # the hot path (every message append): no dict, the statement text made once
            stmts.append((_insert_sql(table, ("content",)), (rowid, indexed_text(text))))
    if tools:
        stmts.append((_insert_sql(table + TOOLS_SUFFIX, ("content", "tools")),
                      (rowid, indexed_text(text), indexed_text(tools))))
        twin = f"{text}\n{tools}" if text else tools
    else:
        twin = text
    if has_cjk(twin):
        stmts.append((_insert_sql(table + "_cjk", ("content",)), (rowid, twin)))
    return stmts


_INSERT_SQL: dict[tuple[str, tuple[str, ...]], str] = {}


def _insert_sql(table: str, columns: tuple[str, ...]) -> str:
    """``INSERT INTO <table> (rowid, <columns>) VALUES (?, ...)``, made once per table and columns
    (both trusted identifiers of this package: a handful of keys)."""
    sql = _INSERT_SQL.get((table, columns))
    if sql is None:
        marks = ", ".join("?" for _ in columns)
        sql = _INSERT_SQL[(table, columns)] = f"INSERT INTO {table} (rowid, {', '.join(columns)}) VALUES (?, {marks})"
    return sql


def unindex_rows(table: str, rowid: int, *, tools: bool = False) -> list[tuple[str, tuple[Any, ...]]]:
    """Statements removing ``rowid`` from ``table`` and its twins (no-op when absent).

    ``tools``: ``table`` has a ``<table>_tools`` twin (messages).
    """
    stmts = [
        (f"DELETE FROM {table} WHERE rowid = ?", (rowid,)),
        (f"DELETE FROM {table}_cjk WHERE rowid = ?", (rowid,)),
    ]
    if tools:
        stmts.append((f"DELETE FROM {table}{TOOLS_SUFFIX} WHERE rowid = ?", (rowid,)))
    return stmts
