"""Several hosts of one cluster: which URL a request goes to, and which calls are repeated elsewhere.

A :class:`~runtime.client.SessionsClient` given several URLs (a list, or a
comma-separated string such as ``$DURABLE_SESSIONS_URL``) keeps an
:class:`Endpoints`: the URLs in the order given, the ones that failed
recently, and for each session the owner's URL a host named in its answer
(the ``X-Durable-Sessions-Owner`` header, :data:`common.wire.OWNER_HEADER`),
so a session's requests go straight to its owner and no host has to
forward them.

When a host stops answering, a request moves to the next URL:

* the connection could not be made (refused, timed out): the request was
  never sent, so any call moves;
* the host answered 503 with ``Retry-After`` and an error whose class means
  the call did not run (:data:`NOT_RUN_ERRORS`: the host is shutting down,
  or it was asked as owner and is not one): any call moves -- at once, to
  another URL, when the host said it is shutting down
  (:data:`SHUTTING_DOWN_ERRORS`; a stopping cluster host hands its sessions
  over first), else after ``Retry-After``;
* the connection broke after the request was sent, or any other 503 with
  ``Retry-After`` (Postgres unreachable, a write whose outcome is unknown):
  only calls in :data:`RETRY_SAFE` move, because repeating them leaves the
  same state (reads, idempotent writes, and appends, which carry message
  ids: an id already stored is not stored again and answers ``inserted:
  false``).

Everything else (errors of the call itself, 429, a 503 without
``Retry-After``) is raised at once, as with one URL.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Sequence
from urllib.parse import urlsplit

__all__ = [
    "NOT_RETRY_SAFE", "NOT_RUN_ERRORS", "RETRY_SAFE", "SHUTTING_DOWN_ERRORS", "Endpoints", "parse_retry_after",
    "parse_urls",
]

#: Session API methods (:data:`runtime.api.METHODS`) that may be sent again when it is unknown whether
#: the first attempt ran: reads, writes that leave the same state when repeated, and appends
#: (deduplicated by message id).
RETRY_SAFE = frozenset({
    "append_message", "append_messages",
    "get_history", "get_latest_leaf", "get_path_length", "get_message", "get_branches", "search",
    "get_metadata", "set_metadata", "get_context_blocks", "get_context_block", "replace_context_block",
    "freeze_system_prompt", "refresh_system_prompt", "tools", "get_compactions", "estimate_tokens",
    "get_recent_history", "get_loaded_skill_keys", "search_status", "reembed",
    "update_message", "delete_messages", "clear_messages", "unload_skill",
})
#: Session API methods a repeat could apply twice (appending text to a block, running a tool,
#: compacting): never repeated unless the host said the first attempt did not run.
NOT_RETRY_SAFE = frozenset({"append_context_block", "execute_tool", "compact", "add_compaction"})
#: Error types of a 503 answer that mean the call did not run, or that nothing it wrote was kept (the
#: actor moved while it ran), so any call may be repeated.
NOT_RUN_ERRORS = frozenset({"NotOwnerError", "ServiceUnavailableError", "HostClosedError", "OwnershipLostError"})
#: Error types of a 503 answer that mean the host itself is stopping: with several URLs the next one is
#: tried at once (no ``Retry-After`` wait) and the stopping one is passed over for ``cooldown_s``.
SHUTTING_DOWN_ERRORS = frozenset({"ServiceUnavailableError", "HostClosedError"})
#: HTTP methods whose repeat leaves the same state (RFC 9110 idempotent methods).
IDEMPOTENT_HTTP = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
#: Most owner hints kept (one per session; the least recently used goes first).
MAX_HINTS = 10_000


def parse_urls(url: str | Sequence[str]) -> tuple[str, ...]:
    """The base URLs in ``url``: one URL, a comma-separated list, or a sequence of URLs.

    Trailing slashes are dropped; duplicates are kept once, in first-seen order.

    Raises:
        ValueError: no URL, or one that is not ``http(s)://host[:port][/path]``.
    """
    items = url.split(",") if isinstance(url, str) else list(url)
    found: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise ValueError(f"a server URL must be a string, not {item!r}")
        text = item.strip().rstrip("/")
        if not text:
            continue
        parts = urlsplit(text)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"not a server URL (http://host:port): {item!r}")
        if text not in found:
            found.append(text)
    if not found:
        raise ValueError("no server URL given")
    return tuple(found)


def parse_retry_after(value: str | None) -> float | None:
    """Seconds of a ``Retry-After`` header given as a number (``None``: absent or a date)."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return max(0.0, seconds) if math.isfinite(seconds) else None


class Endpoints:
    """The URLs of a cluster as one client sees them.

    Args:
        urls: base URLs, in order of preference.
        cooldown_s: seconds a URL that failed to connect is passed over
            (it is still used when every URL failed recently).
    """

    def __init__(self, urls: Sequence[str], *, cooldown_s: float = 2.0) -> None:
        self.urls = tuple(urls)
        self.cooldown_s = cooldown_s
        self._preferred = 0
        self._failed: dict[str, float] = {}  # url -> monotonic time of its last connect failure
        self._owners: OrderedDict[str, str] = OrderedDict()  # session key -> owner url

    def pick(self, key: str | None = None, *, avoid: str | None = None) -> str:
        """The URL for a request about session ``key`` (``None``: not about a session).

        The session's known owner when it is not cooling down, else the
        preferred URL, else the next one that is not; ``avoid`` (the URL that
        just failed) is skipped while another one is available.
        """
        now = time.monotonic()
        owner = self._owners.get(key) if key is not None else None
        if key is not None and owner is not None and owner != avoid and not self._cooling(owner, now):
            self._owners.move_to_end(key)
            return owner
        count = len(self.urls)
        for step in range(count):
            url = self.urls[(self._preferred + step) % count]
            if url != avoid and not self._cooling(url, now):
                return url
        # Every URL failed recently: the one that failed longest ago (not ``avoid`` when there is a choice).
        candidates = [u for u in self.urls if u != avoid] or list(self.urls)
        return min(candidates, key=lambda u: self._failed.get(u, 0.0))

    def all_failed(self) -> bool:
        """``True`` when every URL failed to connect within the last ``cooldown_s``."""
        now = time.monotonic()
        return all(self._cooling(url, now) for url in self.urls)

    def _cooling(self, url: str, now: float) -> bool:
        failed = self._failed.get(url)
        return failed is not None and now - failed < self.cooldown_s

    def failed(self, url: str, key: str | None = None) -> None:
        """``url`` did not answer: pass it over for a while; it stops being anyone's owner hint."""
        self._failed[url] = time.monotonic()
        if self.urls[self._preferred] == url and len(self.urls) > 1:
            self._preferred = (self._preferred + 1) % len(self.urls)
        for session, owner in list(self._owners.items()):
            if owner == url:
                del self._owners[session]

    def answered(self, url: str) -> None:
        """``url`` answered (any status): it is healthy again."""
        self._failed.pop(url, None)

    def learn_owner(self, key: str, owner: str | None) -> None:
        """Remember ``owner`` (a header value) for session ``key`` when it is one of our URLs."""
        if owner is None:
            return
        owner = owner.strip().rstrip("/")
        if owner not in self.urls:  # never send the token anywhere the caller did not list
            return
        self._owners[key] = owner
        self._owners.move_to_end(key)
        while len(self._owners) > MAX_HINTS:
            self._owners.popitem(last=False)

    def forget_owner(self, key: str) -> None:
        """Drop the owner hint of session ``key``."""
        self._owners.pop(key, None)

    def owner_of(self, key: str) -> str | None:
        """The remembered owner URL of session ``key``, if any."""
        return self._owners.get(key)
