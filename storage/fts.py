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
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass

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


def matching_rowids_sql(query: ParsedQuery, table: str) -> tuple[str, list[str]]:
    """SQL selecting ``(rowid, rank)`` of the rows of ``table`` matching every term.

    ``table`` is the porter FTS5 table; CJK terms are checked against
    ``<table>_cjk``: those of at least :data:`TRIGRAM_MIN_CHARS` characters
    by trigram ``MATCH``, shorter ones by substring search. ``rank`` is
    FTS5's bm25 rank (lower is better) of the first :data:`MATCH_CHUNK_TERMS`
    porter terms, else of the first long CJK terms, else ``0``. ``table``
    must be a trusted identifier (a constant of this package), never user text.

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
        params.append(porter.pop(0))
    elif trigram:
        head = f"SELECT rowid, rank FROM {cjk_table} WHERE {cjk_table} MATCH ?"
        params.append(trigram.pop(0))
    else:
        head = f"SELECT rowid, 0 AS rank FROM {cjk_table} WHERE 1"
    conditions = [f"+rowid IN (SELECT rowid FROM {table}(?))"] * len(porter)
    conditions += [f"+rowid IN (SELECT rowid FROM {cjk_table}(?))"] * len(trigram)
    params += porter + trigram
    if short_cjk:
        conditions.append(
            f"+rowid IN (SELECT c.rowid FROM {cjk_table} AS c WHERE NOT EXISTS "
            "(SELECT 1 FROM json_each(?) AS t WHERE instr(c.content, t.value) = 0))"
        )
        params.append(json.dumps(short_cjk, ensure_ascii=False))
    sql = head + "".join(f" AND {c}" for c in conditions)
    return sql, params


def index_rows(
    table: str,
    rowid: int,
    text: str,
    *,
    extra: dict[str, str] | None = None,
    indexed: dict[str, str] | None = None,
) -> list[tuple[str, tuple]]:
    """Statements that put ``text`` under ``rowid`` in ``table`` (and its CJK twin).

    Args:
        table: porter FTS5 table (trusted identifier).
        rowid: the owning row's integer key.
        text: the text to index in the ``content`` column.
        extra: other (UNINDEXED) columns of ``table`` and their values.
        indexed: other *indexed* columns of ``table`` and their text (e.g.
            ``assistant_fts.tools``); a MATCH finds a row through any of
            them. Their text also goes to the CJK twin (after ``text``).

    Nothing is indexed when ``text`` and every ``indexed`` value are ``""``.

    Returns:
        ``[(sql, params), ...]`` to run in the caller's transaction.
    """
    searchable = [text, *(indexed or {}).values()]
    if not any(searchable):
        return []
    cols = dict(extra or {})
    cols["content"] = text
    cols.update(indexed or {})
    names = ", ".join(cols)
    marks = ", ".join("?" for _ in cols)
    stmts: list[tuple[str, tuple]] = [
        (f"INSERT INTO {table} (rowid, {names}) VALUES (?, {marks})", (rowid, *cols.values()))
    ]
    twin = "\n".join(t for t in searchable if t)
    if has_cjk(twin):
        stmts.append((f"INSERT INTO {table}_cjk (rowid, content) VALUES (?, ?)", (rowid, twin)))
    return stmts


def unindex_rows(table: str, rowid: int) -> list[tuple[str, tuple]]:
    """Statements removing ``rowid`` from ``table`` and its CJK twin (no-op when absent)."""
    return [
        (f"DELETE FROM {table} WHERE rowid = ?", (rowid,)),
        (f"DELETE FROM {table}_cjk WHERE rowid = ?", (rowid,)),
    ]
