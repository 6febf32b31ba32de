"""Encryption at rest on cluster hosts: each host's files (its cache of the Postgres log) are encrypted with
the key every host is given, and a host that rebuilds an actor's file from a snapshot in Postgres writes it
encrypted too (:func:`storage.cipher.write_image`). Postgres itself is not encrypted by this key.

Real ``serve --cluster`` processes with the cipher build on ``PYTHONPATH`` (:mod:`tests.support.cipher`).
"""

from __future__ import annotations

import secrets
import zlib

import httpx
import psycopg

from storage.cipher import KEY_FILE_ENV, MARK_FILE
from tests.support.cipher import cipher_pythonpath
from tests.support.cluster_hosts import run_cluster

SQLITE_MAGIC = b"SQLite format 3\x00"


def message(mid: str, text: str) -> dict:
    return {"id": mid, "role": "user", "parts": [{"type": "text", "text": text}]}


def plaintext_files(folder, marker: bytes) -> list[str]:
    """The files under ``folder`` that hold ``marker`` or are unencrypted databases."""
    return sorted(str(path) for path in folder.rglob("*") if path.is_file()
                  and (marker in path.read_bytes() or path.read_bytes().startswith(SQLITE_MAGIC)))


def test_cluster_hosts_write_and_rebuild_encrypted_files(tmp_path, pg_empty_dsn, monkeypatch):
    pythonpath = cipher_pythonpath()
    if pythonpath:
        monkeypatch.setenv("PYTHONPATH", pythonpath)
    key = tmp_path / "cluster.key"
    key.write_text(secrets.token_hex(32) + "\n")
    key.chmod(0o600)
    monkeypatch.setenv(KEY_FILE_ENV, str(key))
    config = tmp_path / "cluster.toml"  # snapshots from the first write on: the next owner starts from an image
    config.write_text(f'[cluster]\npostgres = "{pg_empty_dsn}"\nsnapshot_bytes = 1\n')
    marker = f"marker-{secrets.token_hex(8)}"
    with run_cluster(tmp_path, pg_empty_dsn, hosts=2, lease_s=1.0, extra=["--config", str(config)]) as cluster:
        h1, h2 = cluster.hosts
        with httpx.Client(timeout=60) as http:
            for i in range(3):
                response = http.post(f"{h1.url}/v1/sessions/enc-chat/messages",
                                     json={"message": message(f"m{i}", f"{marker} number {i}")})
                assert response.status_code == 201, response.text
            assert cluster.owner_of("enc-chat", via=h1) is h1
            assert h1.stop() == 0  # h2 takes the session over and rebuilds its file from Postgres
            response = http.get(f"{h2.url}/v1/sessions/enc-chat/messages")
            assert response.status_code == 200, response.text
            assert [m["parts"][0]["text"] for m in response.json()["messages"]] == [
                f"{marker} number {i}" for i in range(3)]
            assert cluster.owner_of("enc-chat", via=h2) is h2
            rebuilt = list((h2.data_dir / "sessions").rglob("*.sqlite3"))
            assert rebuilt, sorted(h2.data_dir.rglob("*"))
    for host in (h1, h2):
        assert (host.data_dir / MARK_FILE).is_file()
        assert plaintext_files(host.data_dir, marker.encode()) == []
    with psycopg.connect(pg_empty_dsn) as conn:  # h2 rebuilt the file from a snapshot (plaintext, in Postgres)
        images = [zlib.decompress(image) for (image,) in conn.execute("SELECT image FROM ds_snapshots")]
    assert images and all(image.startswith(SQLITE_MAGIC) for image in images)
