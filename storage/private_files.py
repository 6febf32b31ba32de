"""Files and folders only their owner may read: the data folder 0700, every file in it 0600.

Actor files hold people's conversations, and the host's own files (catalog,
alarm index, lock) say whose sessions exist. So everything this package
creates under a data folder is private to the user the server runs as,
whatever the process's umask: folders are made with :func:`make_private_dirs`,
database files are created empty with :func:`create_private_file` (or
``chmod``-ed with :func:`make_private` right after a copy) *before* SQLite
opens them, and SQLite creates each ``-wal``, ``-shm`` and ``-journal`` file
with the mode of its database file.

A folder or file that already exists keeps its mode (an operator may have
widened it on purpose, for a backup group).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["DIR_MODE", "FILE_MODE", "create_private_file", "make_private", "make_private_dirs"]

#: Mode of every folder created under (and including) a data folder.
DIR_MODE = 0o700

#: Mode of every file created in a data folder.
FILE_MODE = 0o600


def make_private_dirs(folder: str | os.PathLike[str]) -> None:
    """Create ``folder`` and its missing parents, each mode 0700 (folders that exist are left alone).

    Raises:
        OSError: a folder cannot be created (e.g. a part of the path is a file).
    """
    missing: list[Path] = []
    current = Path(folder)
    while not os.path.lexists(current) and current.parent != current:
        missing.append(current)
        current = current.parent
    for path in reversed(missing):
        try:
            os.mkdir(path, DIR_MODE)
        except FileExistsError:
            continue  # made meanwhile by another thread or process: its mode is its maker's business
        os.chmod(path, DIR_MODE)  # the umask may have taken bits away (never adds them: 0700 exactly)


def create_private_file(path: str | os.PathLike[str]) -> bool:
    """Create ``path`` empty with mode 0600 unless something exists there; whether it created it.

    Never follows a symbolic link at ``path`` (that counts as existing).

    Raises:
        OSError: the file cannot be created (missing folder, no permission, full disk).
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
    except FileExistsError:
        return False
    try:
        os.fchmod(fd, FILE_MODE)
    finally:
        os.close(fd)
    return True


def make_private(path: str | os.PathLike[str]) -> None:
    """``chmod 0600`` a file this process just created (a copy, a download).

    Raises:
        OSError: it is gone, or not this process user's.
    """
    os.chmod(path, FILE_MODE)
