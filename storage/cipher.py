"""Encryption at rest: every SQLite file of a data folder encrypted with one key (SQLite3 Multiple Ciphers).

The cipher-capable SQLite is the ``apsw-sqlite3mc`` build of apsw (the
``encryption`` extra): the same ``apsw`` module, linked with SQLite3 Multiple
Ciphers. Its default cipher, ChaCha20-Poly1305, encrypts every page of the
database and of its ``-wal``, the first page (and so the ``SQLite format 3``
header) included; only the WAL's own headers stay readable.

:func:`use_key` installs the key for the whole process: an apsw connection
hook (``apsw.connection_hooks``) keys each file connection as it opens,
before any other statement runs, so every place that opens a file (actor
files, the catalog, backups, restores, ``doctor``'s checks, a cluster host's
cache files) reads and writes it encrypted without knowing about it.

The key is 32 random bytes written as 64 hexadecimal characters in a file
only its owner may read (mode 0600: ``openssl rand -hex 32 > key && chmod 600
key``). Being random already, it is used with a single key-derivation round
(``kdf_iter=1``): a passphrase would need SQLite3 Multiple Ciphers' 64,007
rounds, about 30 ms at every open of every actor file. The key is never
logged, and no error message holds it.

:func:`check_folder` guards the folder against mixing: the first start with
a key writes the mark file ``<data>/_encrypted`` (a check value derived from
the key, never the key itself); a later start without the key, or with
another key, is refused, and so is a first start with a key on a folder that
already holds unencrypted SQLite files (there is no ``encrypt`` migration:
export the sessions and import them into a new, encrypted folder).

Everything here is synchronous and imports nothing of the runtime.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import stat
import urllib.parse
from pathlib import Path

import apsw

from .private_files import create_private_file, make_private_dirs

__all__ = [
    "EXTRA_HINT", "KEY_FILE_ENV", "MARK_FILE", "PAGE_SIZE", "EncryptionError", "active", "check_folder",
    "cipher_build", "is_plaintext_database", "read_key_file", "use_key", "write_image",
]

#: The environment variable naming the key file when the configuration gives none.
KEY_FILE_ENV = "DURABLE_SESSIONS_ENCRYPTION_KEY_FILE"
#: The mark of an encrypted data folder (``<data>/_encrypted``): a check value of its key, one line of text.
MARK_FILE = "_encrypted"
#: What to install for a cipher-capable apsw (the extra alone leaves plain apsw's files on top: see README).
EXTRA_HINT = ("pip install 'durable-sessions[encryption]' && "
              "pip install --force-reinstall --no-deps apsw-sqlite3mc")
#: The page size of encrypted files (SQLite's default; the header that would say so is encrypted too).
PAGE_SIZE = 4096

_MAGIC = b"SQLite format 3\x00"
_KEY_HEX_CHARS = 64
_CHECK_LABEL = b"durable-sessions encryption check v1"
_COMPANIONS = ("-wal", "-shm", "-journal")

_key_hex: str | None = None


class EncryptionError(Exception):
    """Encryption cannot be used as configured (one line naming the file or folder and what to do)."""


def cipher_build() -> str | None:
    """The SQLite3 Multiple Ciphers version of the loaded apsw (e.g. ``"SQLite3 Multiple Ciphers 2.6.1"``),
    or ``None`` for a plain apsw build, which cannot encrypt."""
    con = apsw.Connection(":memory:")
    try:
        row = con.execute("SELECT sqlite3mc_version()").fetchone()
    except apsw.SQLError:
        return None
    finally:
        con.close()
    return None if row is None else str(row[0])


def read_key_file(path: str | os.PathLike[str]) -> bytes:
    """The 32-byte key held (as 64 hexadecimal characters, one trailing newline allowed) in the file ``path``.

    Raises:
        EncryptionError: the file is missing or unreadable, group or others may read or write it (its
            mode must be 0600 or 0400), or it holds anything but 64 hexadecimal characters. The
            message names the file, never its content.
    """
    path = Path(path)
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # before opening: reading a FIFO would wait for a writer
            raise EncryptionError(f"the encryption key file {path} is not a regular file")
        with open(path, "rb") as file:
            mode = os.fstat(file.fileno()).st_mode
            if mode & 0o077:
                raise EncryptionError(f"the encryption key file {path} has mode {stat.S_IMODE(mode):04o}; "
                                      f"only its owner may read it (chmod 600 {path})")
            text = file.read(_KEY_HEX_CHARS + 3)
    except OSError as exc:
        raise EncryptionError(f"cannot read the encryption key file {path}: {exc.strerror or exc}") from None
    text = text.removesuffix(b"\n").removesuffix(b"\r")
    try:
        key = bytes.fromhex(text.decode("ascii")) if len(text) == _KEY_HEX_CHARS else b""
    except (UnicodeDecodeError, ValueError):
        key = b""
    if len(key) != _KEY_HEX_CHARS // 2:
        raise EncryptionError(f"the encryption key file {path} must hold 64 hexadecimal characters "
                              "(32 random bytes: openssl rand -hex 32)")
    return key


def use_key(key: bytes | None) -> None:
    """Encrypt every SQLite file this process opens from now on with ``key`` (``None``: stop).

    Raises:
        EncryptionError: ``key`` is given but the loaded apsw is a plain build (the message says what
            to install).
    """
    global _key_hex
    if key is None:
        _key_hex = None
        if _key_connection in apsw.connection_hooks:
            apsw.connection_hooks.remove(_key_connection)
        return
    if cipher_build() is None:
        raise EncryptionError(f"an encryption key is configured but this apsw ({apsw.apsw_version()}) has no "
                              f"cipher; install the encryption extra: {EXTRA_HINT}")
    _key_hex = key.hex()
    if _key_connection not in apsw.connection_hooks:
        apsw.connection_hooks.insert(0, _key_connection)  # before any other hook touches the file


def active() -> bool:
    """``True`` while :func:`use_key` has a key installed."""
    return _key_hex is not None


def _key_connection(con: apsw.Connection) -> None:
    """Key a newly opened file connection (memory and temporary databases have no key)."""
    key_hex = _key_hex
    if key_hex is None or not con.filename:
        return
    con.execute("PRAGMA cipher = 'chacha20'")
    con.execute("PRAGMA kdf_iter = 1")  # the key is random already: no stretching (see the module docs)
    con.execute(f"PRAGMA hexkey = '{key_hex}'")  # hexadecimal digits only: nothing to quote


def write_image(path: str | os.PathLike[str], image: bytes) -> None:
    """Write the database ``image`` (``sqlite3_serialize``'s bytes, always plaintext) as the new file ``path``:
    as is without a key; with one, encrypted on its way to the disk, where no plaintext page ever lands.

    With a key the image goes into an in-memory database (marked rollback mode: an in-memory copy of
    a WAL-mode file cannot be opened) and ``VACUUM INTO`` writes it out under the key; the new file is
    in rollback mode with its free pages dropped (:class:`~storage.sqlite.SqlStorage` puts it back in
    WAL mode when it opens it). SQLite's backup API cannot do this: it refuses to copy a plain
    database into an encrypted one.

    Raises:
        apsw.Error, OSError: the image is not a database, or ``path`` cannot be written (with a key: it exists).
    """
    key_hex = _key_hex
    if key_hex is None:
        with open(path, "wb") as out:
            out.write(image)
        return
    if image[18:20] == b"\x02\x02":  # the header's WAL mode: an in-memory database opens only in rollback mode
        image = image[:18] + b"\x01\x01" + image[20:]
    flags = apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE | apsw.SQLITE_OPEN_URI  # URI: VACUUM INTO's key
    con = apsw.Connection(":memory:", flags=flags)
    try:
        con.deserialize("main", image)
        target = urllib.parse.quote(os.path.abspath(path))
        con.execute("VACUUM INTO ?", (f"file:{target}?cipher=chacha20&kdf_iter=1&hexkey={key_hex}",))
    finally:
        con.close()


def is_plaintext_database(path: str | os.PathLike[str]) -> bool:
    """``True`` when the file starts with SQLite's plain header (an unencrypted database)."""
    try:
        with open(path, "rb") as file:
            return file.read(len(_MAGIC)) == _MAGIC
    except OSError:
        return False


def _check_value(key: bytes) -> str:
    return hmac.new(key, _CHECK_LABEL, hashlib.sha256).hexdigest()


def check_folder(data: str | os.PathLike[str], key: bytes | None, *, write_mark: bool = True) -> None:
    """Refuse a data folder whose encryption does not match ``key``; mark a folder a key starts using.

    With ``key``: a folder with the mark must carry this key's check value; a folder without it must
    hold no unencrypted SQLite file (then the mark is written, unless ``write_mark`` is false). Without ``key``: a folder with the
    mark is refused. The folder need not exist yet (nothing is created without a key).

    Raises:
        EncryptionError: the folder is encrypted with another key, needs a key, or holds
            unencrypted files (one line naming the folder and what to do).
    """
    data = Path(data)
    mark = data / MARK_FILE
    try:
        recorded: str | None = mark.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        recorded = None
    except (OSError, UnicodeDecodeError) as exc:
        raise EncryptionError(f"cannot read the encryption mark {mark}: {exc}") from None
    if key is None:
        if recorded is not None:
            raise EncryptionError(f"the data folder {data} is encrypted; give its key file ([storage] "
                                  f"encryption_key_file or ${KEY_FILE_ENV})")
        return
    if recorded is not None:
        if not hmac.compare_digest(recorded, _check_value(key)):
            raise EncryptionError(f"the encryption key does not open the data folder {data} (another key "
                                  f"encrypted it; {mark} holds that key's check value)")
        return
    plain = _first_plaintext_file(data)
    if plain is not None:
        raise EncryptionError(f"the data folder {data} holds unencrypted files ({plain}); a folder is either "
                              "all encrypted or not at all: export its sessions and import them into a new, "
                              "empty folder served with the key")
    if not write_mark:
        return
    make_private_dirs(data)
    partial = mark.with_name(mark.name + ".tmp")
    partial.unlink(missing_ok=True)
    create_private_file(partial)
    partial.write_text(_check_value(key) + "\n", encoding="ascii")
    os.replace(partial, mark)


def _first_plaintext_file(data: Path) -> Path | None:
    """The first unencrypted SQLite database under ``data`` (its companions not counted), or ``None``."""
    for folder, _, names in os.walk(data):
        for name in sorted(names):
            if not name.endswith(_COMPANIONS) and is_plaintext_database(os.path.join(folder, name)):
                return Path(folder, name)
    return None
