"""storage.cipher: the key file, the folder's mark, and the damage checks on encrypted files.

The checks on encrypted files run in a fresh interpreter with the cipher
build of apsw on ``PYTHONPATH`` (:mod:`tests.support.cipher`; skipped
without it, except in CI): the header check must take an encrypted page 1
for ciphertext, the WAL checks must still read the WAL's plain frame headers
and checksums (of the encrypted pages), and a damaged frame must still be found.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys

import pytest

from storage import cipher
from storage.cipher import MARK_FILE, EncryptionError, check_folder, read_key_file
from storage.sqlite import SqlStorage
from tests.support.cipher import cipher_pythonpath, is_cipher_build
from tests.support.data import REPO_ROOT


def key_file(path, text=None, mode=0o600):
    path.write_text(text if text is not None else secrets.token_hex(32) + "\n", encoding="ascii")
    path.chmod(mode)
    return path


def test_a_key_file_holds_64_hex_characters_readable_by_its_owner_only(tmp_path):
    hex_key = secrets.token_hex(32)
    assert read_key_file(key_file(tmp_path / "a", hex_key)) == bytes.fromhex(hex_key)
    assert read_key_file(key_file(tmp_path / "b", hex_key.upper() + "\r\n", 0o400)) == bytes.fromhex(hex_key)
    for text, mode, expected in [
        (hex_key, 0o640, "has mode 0640; only its owner may read it"),
        (hex_key, 0o604, "has mode 0604"),
        (hex_key[:-2], 0o600, "must hold 64 hexadecimal characters"),
        (hex_key + "00", 0o600, "must hold 64 hexadecimal characters"),
        ("z" * 64, 0o600, "must hold 64 hexadecimal characters"),
        ("é" * 32, 0o600, "must hold 64 hexadecimal characters"),
        ("", 0o600, "must hold 64 hexadecimal characters"),
    ]:
        path = tmp_path / "bad"
        path.unlink(missing_ok=True)
        path.write_text(text, encoding="utf-8")
        path.chmod(mode)
        with pytest.raises(EncryptionError, match=expected) as caught:
            read_key_file(path)
        assert hex_key not in str(caught.value)
    with pytest.raises(EncryptionError, match="cannot read the encryption key file .*: No such file"):
        read_key_file(tmp_path / "missing")
    with pytest.raises(EncryptionError, match="is not a regular file"):
        read_key_file(tmp_path)
    os.mkfifo(tmp_path / "fifo", 0o600)
    with pytest.raises(EncryptionError, match="is not a regular file"):
        read_key_file(tmp_path / "fifo")  # refused at once, not waiting for a writer


def test_the_folder_mark_binds_a_folder_to_one_key(tmp_path):
    key, other = os.urandom(32), os.urandom(32)
    data = tmp_path / "data"
    check_folder(data, None)  # no key, no folder: nothing happens
    assert not data.exists()
    check_folder(data, key, write_mark=False)
    assert not data.exists()
    check_folder(data, key)
    mark = (data / MARK_FILE).read_text()
    assert key.hex() not in mark and len(mark.strip()) == 64
    assert oct((data / MARK_FILE).stat().st_mode & 0o777) == "0o600"
    check_folder(data, key)  # the same key again
    assert (data / MARK_FILE).read_text() == mark
    with pytest.raises(EncryptionError, match="the encryption key does not open the data folder"):
        check_folder(data, other)
    with pytest.raises(EncryptionError, match="is encrypted; give its key file"):
        check_folder(data, None)


def test_a_key_on_a_folder_with_an_unencrypted_database_is_refused(tmp_path):
    data = tmp_path / "data"
    (data / "sessions" / "ab").mkdir(parents=True)
    (data / "notes.txt").write_text("not a database")
    check_folder(data, os.urandom(32), write_mark=False)  # files that are no database do not count
    SqlStorage.open(data / "sessions" / "ab" / "ab12.sqlite3").close()
    with pytest.raises(EncryptionError, match=r"holds unencrypted files \(.*ab12\.sqlite3\)"):
        check_folder(data, os.urandom(32))
    assert not (data / MARK_FILE).exists()
    check_folder(data, None)  # served without a key, as before


def test_use_key_on_a_plain_build_names_the_extra():
    if is_cipher_build(""):
        pytest.skip("this interpreter's apsw is the cipher build")
    with pytest.raises(EncryptionError, match=r"has no cipher; install the encryption extra: pip install "):
        cipher.use_key(os.urandom(32))
    assert not cipher.active()
    cipher.use_key(None)  # no key: nothing to refuse


#: Writes an encrypted actor file whose WAL stays (the connection is left open), checks it, damages a copy.
ENCRYPTED_FILE_CHECKS = r"""
import json, os, shutil, sys
from storage import cipher
from storage.integrity import check_files, examine, wal_checksum_problem
from storage.sqlite import SqlStorage

folder, marker = sys.argv[1], sys.argv[2]
cipher.use_key(os.urandom(32))
path = os.path.join(folder, "actor.sqlite3")
storage = SqlStorage.open(path)
for i in range(30):
    with storage.transaction():
        storage.exec("INSERT INTO assistant_config (session_id, key, value) VALUES ('', ?, ?)", f"k{i}", marker * 40)
content = open(path, "rb").read() + open(path + "-wal", "rb").read()
result = {"plain": marker.encode() in content, "wal_bytes": os.path.getsize(path + "-wal"),
          "headers": check_files(path), "checksums": wal_checksum_problem(path)}
damaged = os.path.join(folder, "damaged.sqlite3")
shutil.copyfile(path, damaged)
shutil.copyfile(path + "-wal", damaged + "-wal")
storage.close()
result["examine"] = examine(path)[0]
with open(damaged + "-wal", "r+b") as wal:  # one byte inside the second frame's page (ciphertext)
    wal.seek(32 + 24 + 4096 + 24 + 100)
    byte = wal.read(1)
    wal.seek(-1, 1)
    wal.write(bytes([byte[0] ^ 0xFF]))
result["damaged_headers"] = check_files(damaged)
result["damaged_checksums"] = wal_checksum_problem(damaged)
print(json.dumps(result))
"""


def run_with_cipher(script: str, *args: str) -> dict:
    """Run ``script`` with ``args`` in a fresh interpreter on the cipher build; the JSON it prints."""
    pythonpath = cipher_pythonpath()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (pythonpath, str(REPO_ROOT)) if p)}
    done = subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True, text=True,
                          timeout=120, cwd=REPO_ROOT)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_damage_checks_read_encrypted_files(tmp_path):
    result = run_with_cipher(ENCRYPTED_FILE_CHECKS, str(tmp_path), f"marker-{secrets.token_hex(6)}")
    assert result["plain"] is False and result["wal_bytes"] > 30 * 4096
    assert result["headers"] is None and result["checksums"] is None and result["examine"] is None
    assert result["damaged_headers"] is None  # a frame's page is not its header
    assert result["damaged_checksums"] == "WAL frame 2 fails its checksum; SQLite drops the commits after it"


#: Rebuilds an encrypted actor file from a snapshot image as a cluster host does (storage.cluster.restore).
SNAPSHOT_RESTORE = r"""
import json, os, sys
from storage import cipher
from storage.cluster.capture import Marker
from storage.cluster.restore import file_marker, restore_file
from storage.sqlite import SqlStorage

folder, marker = sys.argv[1], sys.argv[2]
cipher.use_key(os.urandom(32))
source = SqlStorage.open(os.path.join(folder, "source.sqlite3"))
with source.transaction():
    source.exec("INSERT INTO assistant_config (session_id, key, value) VALUES ('', 'note', ?)", marker)
image = source.connection.serialize("main")  # what a snapshot holds: plaintext pages
source.close()
for name in os.listdir(folder):
    os.unlink(os.path.join(folder, name))
rebuilt = os.path.join(folder, "actor.sqlite3")
restore_file(rebuilt, template=os.path.join(folder, "template.sqlite3"), image=image, tail=[],
             marker=Marker("cluster-1", 7, True))
files = sorted(os.listdir(folder))
plain = [name for name in files if marker.encode() in open(os.path.join(folder, name), "rb").read()]
with SqlStorage.open(rebuilt) as storage:
    note = storage.scalar("SELECT value FROM assistant_config WHERE key = 'note'")
print(json.dumps({"image_plain": marker.encode() in image, "files": files, "plain": plain, "note": note,
                  "marker": str(file_marker(rebuilt))}))
"""


def test_a_snapshot_image_is_written_encrypted(tmp_path):
    marker = f"marker-{secrets.token_hex(6)}"
    result = run_with_cipher(SNAPSHOT_RESTORE, str(tmp_path), marker)
    assert result["image_plain"] is True  # the image itself is plaintext (it goes to Postgres as such)
    assert result["plain"] == [] and "actor.sqlite3" in result["files"]
    assert result["note"] == marker
    assert result["marker"] == "Marker(cluster_id='cluster-1', last_seq=7, clean=True)"


def test_without_a_key_an_image_is_written_as_it_is(tmp_path):
    source = SqlStorage.open(tmp_path / "a.sqlite3")
    image = source.connection.serialize("main")
    source.close()
    cipher.write_image(tmp_path / "b.sqlite3", image)
    assert (tmp_path / "b.sqlite3").read_bytes() == image
