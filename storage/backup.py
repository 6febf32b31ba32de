"""Copies and removals of whole SQLite files: online backups, restores and erasure (the files of the data lifecycle).

* :func:`copy_database` copies an open database, consistent as of the
  moment it starts, into a new file through SQLite's online backup API
  (apsw ``Connection.backup``), in one step: the source connection (the
  actor's own, which holds its file's exclusive lock) stays usable before
  and after, and the copy is a plain database file in rollback-journal mode
  with no ``-wal`` beside it.
* :func:`check_database` opens a copied file read-only and runs
  ``PRAGMA quick_check``: a restore refuses a file that does not open cleanly.
* :func:`remove_database` deletes a database and its companions
  (``-wal``, ``-shm``, ``-journal``) and syncs the folder.
"""

from __future__ import annotations

import os
from pathlib import Path

import apsw

from .integrity import companion_files
from .private_files import make_private_dirs
from .sqlite import SqlStorage

__all__ = ["check_database", "copy_closed_file", "copy_database", "remove_database"]


def copy_database(source: SqlStorage, target: str | os.PathLike[str]) -> int:
    """Copy ``source`` into ``target`` (a new file; its folder is created 0700) and sync it; returns its bytes.

    Runs on the caller's thread, holding ``source``'s connection for the copy
    (no transaction of its own may be open on it).

    Raises:
        FileExistsError: ``target`` exists already.
        apsw.Error: SQLite failed (the partial copy is removed).
    """
    path = Path(target)
    if path.exists():
        raise FileExistsError(f"{path} exists already")
    make_private_dirs(path.parent)
    copy = apsw.Connection(str(path))
    try:
        with copy.backup("main", source.connection, "main") as backup:
            backup.step(-1)
        copy.pragma("journal_mode", "DELETE")
    except BaseException:
        copy.close()
        remove_database(path)
        raise
    copy.close()
    with open(path, "rb+") as handle:
        os.fsync(handle.fileno())
    return path.stat().st_size


def copy_closed_file(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> int:
    """Copy the database file ``source``, which no connection holds, into the new file ``target`` as
    :func:`copy_database` does; returns its bytes. Nothing of ``source`` changes: its connection takes
    the exclusive lock (no ``-shm``), only reads, and leaves the WAL in place when it closes.

    Raises:
        FileExistsError: ``target`` exists already.
        apsw.Error: SQLite failed (``apsw.BusyError``: a connection holds ``source`` after all).
    """
    con = apsw.Connection(str(source), flags=apsw.SQLITE_OPEN_READWRITE)
    try:
        con.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
        con.pragma("locking_mode", "EXCLUSIVE")
        return copy_database(SqlStorage(con, str(source), "normal"), target)
    finally:
        con.close()


def check_database(path: str | os.PathLike[str]) -> str | None:
    """``None`` when ``path`` opens read-only and passes ``PRAGMA quick_check``, else the problem found."""
    try:
        con = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    except apsw.Error as exc:
        return f"{type(exc).__name__}: {exc}"
    try:
        rows = [row[0] for row in con.execute("PRAGMA quick_check")]
    except apsw.Error as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        con.close()
    return None if rows == ["ok"] else "; ".join(str(row) for row in rows[:3])


def remove_database(path: str | os.PathLike[str]) -> list[Path]:
    """Delete the database ``path`` and its companions, then sync the folder; returns the files removed."""
    removed = []
    for file in companion_files(path):
        try:
            os.unlink(file)
        except FileNotFoundError:
            continue
        removed.append(file)
    if removed:
        folder = os.open(Path(path).parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)
    return removed
