"""One process per data folder: an exclusive lock held for the process's life.

Two hosts writing the same actor files would each believe it owns every
actor (two live instances of one id, two WAL indexes, writes lost). So
:func:`runtime.host.actor_host.open_host` (and with it ``serve``,
``import --data`` and ``doctor``) first takes ``<data_dir>/_host.lock``
(:data:`LOCK_FILE`) with ``flock(LOCK_EX | LOCK_NB)``. A second taker is
refused at once with :class:`~common.errors.DataFolderLockedError`, whose
message names the holder (pid, command, start time, written into the lock
file). The kernel drops the lock when its holder exits, however it exits
(``kill -9`` included), so a stale lock file never blocks a restart. The
lock file itself is never deleted (deleting it would let two processes
lock two different files of the same name).

``flock`` locks belong to an open file, so a second lock in the same
process is refused too. On NFS, Linux turns ``flock`` into a POSIX lock
held per process; keep data folders on local disks.
"""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import sys
from pathlib import Path

from common.errors import DataFolderLockedError

__all__ = ["LOCK_FILE", "DataFolderLock"]

#: Name of the lock file inside the data folder.
LOCK_FILE = "_host.lock"


class DataFolderLock:
    """The lock on one data folder; :meth:`acquire` it, :meth:`release` it when the folder is closed.

    Attributes:
        path: the lock file.
    """

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, data_dir: str | os.PathLike[str], *, purpose: str | None = None) -> DataFolderLock:
        """Take the folder's lock without waiting (the folder must exist).

        Args:
            purpose: what holds it, written for whoever is refused (default: the command line).

        Raises:
            DataFolderLockedError: another process (or another host in this one) holds it.
            OSError: the lock file cannot be created.
        """
        path = Path(data_dir) / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _describe_holder(fd)
            os.close(fd)
            raise DataFolderLockedError(
                f"the data folder {Path(data_dir)} is in use by another process{holder}; "
                "stop it first, or give this one another data folder"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        _write_holder(fd, purpose)
        return cls(path, fd)

    @property
    def held(self) -> bool:
        """``True`` until :meth:`release`."""
        return self._fd is not None

    def release(self) -> None:
        """Drop the lock (idempotent). The file stays."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the only descriptor of the open file releases the flock


def _write_holder(fd: int, purpose: str | None) -> None:
    """Say who holds the lock, for whoever is refused (best effort: a full disk leaves it blank)."""
    started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    text = json.dumps({"pid": os.getpid(), "command": purpose or " ".join(sys.argv), "since": started})
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, text.encode("utf-8") + b"\n", 0)
    except OSError:
        pass


def _describe_holder(fd: int) -> str:
    try:
        holder = json.loads(os.pread(fd, 4096, 0).decode("utf-8"))
        return f" (pid {int(holder['pid'])}: {holder['command']}, since {holder['since']})"
    except (OSError, ValueError, KeyError, TypeError):
        return ""
