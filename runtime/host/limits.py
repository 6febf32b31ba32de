"""How many actor files the host may keep open.

Each active actor holds two file descriptors (the database and its WAL; its
files are opened in exclusive locking mode, so the WAL index lives in heap
memory, not in a third ``-shm`` file) and about 0.2 MB of SQLite memory
(schema, page cache, the WAL index). The host raises the soft open-files limit to the hard
limit at start, lets actors use half of it (sockets and the rest keep the
other half) and caps the result at :data:`MAX_ACTIVE_CAP` so memory stays
bounded however high the limit is.
"""

from __future__ import annotations

FDS_PER_ACTOR = 2
#: Share of the open-files limit actor files may use.
ACTOR_FD_SHARE = 0.5
#: Upper bound of the default ``max_active`` (~0.25 GB of open actors).
MAX_ACTIVE_CAP = 1024
#: ``max_active`` when the platform does not report an open-files limit.
FALLBACK_MAX_ACTIVE = 128


def raise_open_file_limit() -> int | None:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit; return the soft limit now in force.

    Returns ``None`` where the platform has no ``resource`` module. A refusal
    by the OS keeps the previous limit.
    """
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and (soft == resource.RLIM_INFINITY or soft < hard):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return None if soft == resource.RLIM_INFINITY else soft


def default_max_active(open_files_limit: int | None) -> int:
    """``min(MAX_ACTIVE_CAP, limit * ACTOR_FD_SHARE // FDS_PER_ACTOR)``, at least 1."""
    if open_files_limit is None:
        return FALLBACK_MAX_ACTIVE
    return max(1, min(MAX_ACTIVE_CAP, int(open_files_limit * ACTOR_FD_SHARE) // FDS_PER_ACTOR))
