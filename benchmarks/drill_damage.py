"""Damage drill: what a restarted server answers for a session whose file was damaged while it was stopped.

For each kind of damage -- the file cut to 0 bytes, its ``-wal`` deleted,
random bytes written into its ``-wal``, a data page overwritten, the files
deleted -- it writes 3,000 messages to one session (and 10 to another),
stops the server, damages the first session's files, starts a server on
the folder again (``--repo`` picks whose code, to compare versions) and
reports what a read and a write of the damaged session get, whether its
files were moved to ``_quarantine``, and whether the other session works.

Run: ``.venv/bin/python benchmarks/drill_damage.py [--repo PATH] [--messages 3000]``
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import tempfile
from pathlib import Path

import apsw
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from drill_flood import start_server  # noqa: E402

from runtime.host.ids import id_from_name  # noqa: E402

PAGE = 4096


def msg(message_id: str) -> dict:
    return {"id": message_id, "role": "user", "parts": [{"type": "text", "text": f"fact {message_id} about Lisbon"}]}


def actor_file(data: Path, session_id: str) -> Path:
    actor = id_from_name("sessions", session_id)
    return data / "sessions" / actor.shard / f"{actor.hex}.sqlite3"


def wal(path: Path) -> Path:
    return path.with_name(path.name + "-wal")


def cut_to_zero(path: Path) -> None:
    path.write_bytes(b"")


def delete_wal(path: Path) -> None:
    wal(path).unlink()


def random_bytes_in_wal(path: Path) -> None:
    frames = (wal(path).stat().st_size - 32) // (PAGE + 24)
    with wal(path).open("r+b") as file:
        file.seek(32 + (frames * 2 // 3) * (PAGE + 24) + 24 + 1000)
        file.write(random.Random(7).randbytes(200))


def damaged_data_page(path: Path) -> None:
    con = apsw.Connection(str(path))
    try:
        con.pragma("wal_checkpoint(TRUNCATE)")
        pages = [row[0] for row in con.execute(
            "SELECT pageno FROM dbstat WHERE name = 'assistant_messages' AND pagetype = 'leaf' ORDER BY pageno")]
    finally:
        con.close()
    with path.open("r+b") as file:
        file.seek((pages[len(pages) // 2] - 1) * PAGE)
        file.write(b"\x00" + random.Random(7).randbytes(63))


def files_deleted(path: Path) -> None:
    for file in path.parent.glob(path.name + "*"):
        file.unlink()


DAMAGE = {
    "cut to 0 bytes": cut_to_zero,
    "-wal deleted": delete_wal,
    "random bytes in the -wal": random_bytes_in_wal,
    "a data page overwritten": damaged_data_page,
    "files deleted": files_deleted,
}


def stop(process) -> None:
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=60)


def describe(reply: httpx.Response, written: int) -> str:
    if reply.status_code == 200:
        body = reply.json()
        if "messages" in body:
            return f"200 with {len(body['messages'])} of {written} messages"
        return f"200 {json.dumps(body)[:60]}"
    error = reply.json().get("error", {})
    return f"{reply.status_code} {error.get('type')}"


def drill(repo: Path, folder: Path, name: str, harm, messages: int) -> None:
    data = folder / name.replace(" ", "_") / "data"
    data.mkdir(parents=True)
    process, url = start_server(repo, data, None)
    with httpx.Client(base_url=url, timeout=60) as http:
        for start in range(0, messages, 250):
            batch = [msg(f"m{i}") for i in range(start, min(messages, start + 250))]
            http.post("/v1/sessions/victim/messages:batch", json={"messages": batch}).raise_for_status()
        for i in range(10):
            http.post("/v1/sessions/bystander/messages", json={"message": msg(f"b{i}")}).raise_for_status()
    stop(process)
    harm(actor_file(data, "victim"))
    data.with_name("ready.json").unlink()
    process, url = start_server(repo, data, None)
    with httpx.Client(base_url=url, timeout=60) as http:
        read = describe(http.get("/v1/sessions/victim/messages"), messages)
        write = http.post("/v1/sessions/victim/messages", json={"message": msg("after")})
        write_text = "accepted" if write.status_code == 201 else describe(write, messages)
        other = http.get("/v1/sessions/bystander/messages:count").json()
    stop(process)
    quarantined = (data / "_quarantine").exists()
    print(f"{name:<26} | {read:<36} | {write_text:<28} | {'yes' if quarantined else 'no':<11} | {other}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", default=str(Path(__file__).resolve().parent.parent))
    parser.add_argument("--messages", type=int, default=3000)
    args = parser.parse_args()
    print(f"server: {args.repo}")
    print(f"{'damage':<26} | {'read after restart':<36} | {'a new write':<28} | quarantined | other session")
    with tempfile.TemporaryDirectory(prefix="drill_damage_") as folder:
        for name, harm in DAMAGE.items():
            drill(Path(args.repo).resolve(), Path(folder), name, harm, args.messages)


if __name__ == "__main__":
    main()
