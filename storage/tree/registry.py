"""The session registry's rules, the same on both databases.

A registry row (``assistant_sessions``) is a plain ``dict`` with the spec's
column names, in the order of :data:`SESSION_COLUMNS`; times are UTC text
with milliseconds (``YYYY-MM-DD HH:MM:SS.SSS``); the internal columns
``seq`` and ``updated_seq`` are never returned.
"""

from __future__ import annotations

__all__ = ["SESSION_COLUMNS"]

#: Columns of a registry row, in the order rows are returned.
SESSION_COLUMNS = (
    "id",
    "name",
    "parent_session_id",
    "model",
    "source",
    "input_tokens",
    "output_tokens",
    "estimated_cost",
    "end_reason",
    "created_at",
    "updated_at",
)
