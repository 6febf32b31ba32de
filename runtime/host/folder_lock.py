"""One process per data folder: an exclusive lock held for the process's life.

Two hosts writing the same actor files would each believe it owns every
actor (two live instances of one id, two WAL indexes, writes lost). So
:func:`runtime.host.actor_host.open_host` (and with it ``serve``,
``import --data`` and ``doctor``) first takes ``<data_dir>/_host.lock``
(:data:`LOCK_FILE`) with ``flock(LOCK_EX | LOCK_NB)``. A second taker is
refused at once with :class:`~common.errors.DataFolderLockedError`, whose
message names the holder by pid and start time -- the only two things the
lock file holds (never the command line: it may carry ``--token`` or a
password in a ``--postgres``/``--cluster`` URL). The file is created mode
0600 (``fchmod`` after opening, whatever the umask), and a clean release
deletes it while still holding the lock. The kernel drops the lock when its
holder exits, however it exits (``kill -9`` included), so a stale lock file
never blocks a restart.

Deleting a lock file invites a race: a taker that opened the old file just
before the delete could lock the deleted inode while a third process locks
a new file of the same name. So a taker, once it holds the ``flock``,
checks that the path still names the file it locked, and starts again when
it does not.

``flock`` locks belong to an open file, so a second lock in the same
process is refused too. On NFS, Linux turns ``flock`` into a POSIX lock
held per process; keep data folders on local disks.
"""

from __future__ import annotations

import datetime
import fcntl
import json
import os
from pathlib import Path

from common.errors import DataFolderLockedError

__all__ = ["LOCK_FILE", "DataFolderLock"]

#: Name of the lock file inside the data folder.
LOCK_FILE = "_host.lock"

#: Mode of the lock file (owner only).
LOCK_MODE = 0o600


class DataFolderLock:
    """The lock on one data folder; :meth:`acquire` it, :meth:`release` it when the folder is closed.

    Attributes:
        path: the lock file.
    """

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, data_dir: str | os.PathLike[str]) -> DataFolderLock:
        """Take the folder's lock without waiting (the folder must exist).

        The lock file then holds ``{"pid": ..., "since": ...}`` (this process's
        pid and the ISO-8601 UTC time it took the lock) and nothing else.

        Raises:
            DataFolderLockedError: another process (or another host in this one) holds it.
            OSError: the lock file cannot be created (or is a symbolic link).
        """
        path = Path(data_dir) / LOCK_FILE
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, LOCK_MODE)
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
            if _still_named(fd, path):
                break
            os.close(fd)  # the holder released (and deleted) it between our open and our flock: again
        try:
            os.fchmod(fd, LOCK_MODE)  # a file left by an older version may be 0644
        except OSError:
            pass
        _write_holder(fd)
        return cls(path, fd)

    @property
    def held(self) -> bool:
        """``True`` until :meth:`release`."""
        return self._fd is not None

    def release(self) -> None:
        """Delete the lock file and drop the lock (idempotent)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                if _still_named(fd, self.path):
                    self.path.unlink()  # still holding the flock: no taker can be between
            except OSError:
                pass
            os.close(fd)  # closing the only descriptor of the open file releases the flock


def _still_named(fd: int, path: Path) -> bool:
    """Whether ``path`` is still the file open as ``fd`` (not deleted or replaced)."""
    try:
        named = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


def _write_holder(fd: int) -> None:
    """Write this process's pid and start time, for whoever is refused (best effort: a full disk
    leaves it blank). Nothing else: the command line may carry secrets."""
    started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    text = json.dumps({"pid": os.getpid(), "since": started})
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, text.encode("utf-8") + b"\n", 0)
    except OSError:
        pass


def _describe_holder(fd: int) -> str:
    try:
        holder = json.loads(os.pread(fd, 4096, 0).decode("utf-8"))
        return f" (pid {int(holder['pid'])}, since {str(holder['since'])[:40]})"
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return ""
