"""A parsed query (:func:`storage.fts.parse_query`) as Postgres conditions: one search syntax everywhere.

The query language is the one of :mod:`storage.fts` (docs/deviations.md #9, #10):
every word must match, in any order; a ``"quoted part"`` must match as a
phrase; nothing typed is query syntax (every term reaches Postgres as a
bound parameter, never as ``tsquery`` text). How a term matches a row:

* a term without CJK characters is read like SQLite's FTS5 reads a
  quoted string: its ASCII punctuation becomes spaces and the words left
  must appear in that order, adjacent (``phraseto_tsquery``), after
  English stemming, in the row's ``search_tsv`` (built the same way, see
  :mod:`storage.postgres.schema`). So ``running`` finds ``run``,
  ``gen-itgc`` finds ``gen itgc``, ``setup.md`` finds ``docs/setup.md``;
* a term with CJK characters must appear in the row's text as a
  substring, case-insensitively (``ILIKE`` on ``cjk_content``, served by
  the ``pg_trgm`` index for terms of three characters or more).

Terms are sent as ``text[]`` arrays, :data:`TERMS_PER_CONDITION` to one
condition, so a query of any length is a handful of conditions (a single
``tsquery`` of thousands of terms would nest too deep). Rank: ``ts_rank``
of the first chunk of terms, divided by ``1 + log(length)`` so that, as
with FTS5's bm25, a shorter text with the same matches ranks higher
(higher is better); ``0`` for a query of CJK terms only. Callers order by
rank, then insertion order.

A term whose words Postgres' parser drops entirely (no lexeme) is ignored
rather than required.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Any

from ..fts import ParsedQuery
from .schema import TS_CONFIG

#: Terms per ``tsquery`` condition (each condition is one ``text[]`` parameter).
TERMS_PER_CONDITION = 256
#: CJK terms tested one by one with ``ILIKE`` (index-assisted); the rest in one array test.
INDEXED_CJK_TERMS = 16

_PUNCTUATION = str.maketrans({c: " " for c in string.punctuation})

# The AND of the terms of one array, each term a phrase of its words; NULL when none has a lexeme.
_TSQUERY = (
    "(SELECT string_agg('(' || q::text || ')', ' & ')::tsquery FROM unnest(%({name})s::text[]) AS t, "
    f"LATERAL phraseto_tsquery('{TS_CONFIG}'::regconfig, t) AS q WHERE numnode(q) > 0)"
)


@dataclass(frozen=True, slots=True)
class Match:
    """SQL of one query against a table with ``search_tsv`` and ``cjk_content``.

    ``where`` is a boolean expression (``AND``-ed by the caller), ``rank``
    a numeric expression (higher is better), ``params`` their values.
    """

    where: str
    rank: str
    params: dict[str, Any]


def _like_pattern(term: str) -> str:
    escaped = term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def match(query: ParsedQuery) -> Match:
    """The conditions and rank of ``query`` (parameters are named ``q_*``)."""
    params: dict[str, Any] = {}
    where: list[str] = []
    words = [" ".join(t.text.translate(_PUNCTUATION).split()) for t in query.porter_terms]
    words = [w for w in words if w]
    rank = "0::real"
    for i in range(0, len(words), TERMS_PER_CONDITION):
        name = f"q_w{i // TERMS_PER_CONDITION}"
        params[name] = words[i : i + TERMS_PER_CONDITION]
        tsquery = _TSQUERY.format(name=name)
        where.append(f"search_tsv @@ {tsquery}")
        if i == 0:
            rank = f"ts_rank(search_tsv, {tsquery}, 1)"
    cjk = [_like_pattern(t.text) for t in query.cjk_terms]
    if cjk:
        where.append("cjk_content <> ''")
    for i, pattern in enumerate(cjk[:INDEXED_CJK_TERMS]):
        params[f"q_c{i}"] = pattern
        where.append(f"cjk_content ILIKE %(q_c{i})s")
    if len(cjk) > INDEXED_CJK_TERMS:
        params["q_cjk_rest"] = cjk[INDEXED_CJK_TERMS:]
        where.append("cjk_content ILIKE ALL (%(q_cjk_rest)s::text[])")
    if not where:  # parse_query never returns a query without terms; stay safe anyway
        where.append("FALSE")
    return Match(" AND ".join(where), rank, params)
