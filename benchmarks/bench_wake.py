"""Wake cost: reopen a session file -> first ``freeze_system_prompt()`` + ``get_loaded_skill_keys()``.

For sessions of 100, 10k and 100k messages with 5 skills loaded early in
the conversation, this reopens the file many times and reports the median
wake in milliseconds. The wake must stay flat as history grows: the
loaded-skill set is one ``assistant_config`` row, the cached prompt one
``cf_agents_context_blocks`` row. For reference it also times, once per
size, the one-time scan of a file that has no persisted set (a file written
by an older version), and a wake without a cached prompt (render from the
providers).

``--locking exclusive,normal`` also times the wake under each SQLite locking
mode, alternating wake by wake on the same files (exclusive: the WAL index in
heap memory, no ``-shm`` file, the default; normal: a shared, memory-mapped
``-shm`` file), and counts the files a woken session leaves on disk.

``--checks`` times back-to-back wakes through a host instead (issue 28): an
actor of the server's session class hibernated and woken by a read, again
and again, with the host's damage checks (:mod:`runtime.host.file_guard`:
symbolic links, file headers, the quick check of a small file, the
generation against the catalog) and with them turned off, alternating batch
by batch on the same file, and prints wakes per second of CPU time (wall
time in brackets) with ÷ without (goal >= 0.9: met / NOT MET). Then the same
when each wake also writes a message (its close cannot vouch for the file).

Run: ``.venv/bin/python benchmarks/bench_wake.py [--sizes 100,10000,100000] [--wakes 30] [--locking exclusive,normal]
[--checks]``

Everything goes through :class:`actors.session.Session` (``with_context``,
``with_cached_prompt``, ``tools()``), as an application would use it.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from actors.session import Session  # noqa: E402
from actors.skills import DirectorySkillProvider  # noqa: E402
from storage import SqlStorage  # noqa: E402
from storage.context import delete_config  # noqa: E402

SID = "bench"
SKILLS = ("deploy", "review", "pirate", "refunds", "baggage")
TEXT = ("I need to change my flight to Friday morning and keep the same seat if possible, "
        "the booking reference is in my email from last week")


class Life:
    """One activation: the file open and a freshly built Session."""

    def __init__(self, path: Path, skills_dir: Path, *, cached: bool = True, locking: str = "exclusive") -> None:
        self.storage = SqlStorage.open(path, locking=locking)
        self.session = (
            Session.create(self.storage)
            .for_session(SID)
            .with_context("soul", provider=_Soul())
            .with_context("memory", description="Learned facts", max_tokens=1100)
            .with_context("skills", description="Loadable skills", provider=DirectorySkillProvider(skills_dir))
        )
        if cached:
            self.session.with_cached_prompt()

    async def append(self, message: dict) -> None:
        await self.session.append_message(message)

    async def wake(self) -> set[str]:
        await self.session.freeze_system_prompt()
        return set(await self.session.get_loaded_skill_keys())

    def close(self) -> None:
        self.storage.close()


class _Soul:
    async def get(self) -> str:
        return "You are a helpful airline assistant."


async def build(path: Path, skills_dir: Path, size: int) -> None:
    life = Life(path, skills_dir)
    tools = await life.session.tools()
    for i, key in enumerate(SKILLS):
        output = await tools["load_context"].execute({"label": "skills", "key": key})
        part = {"type": "tool-load_context", "toolName": "load_context", "toolCallId": f"call{i}",
                "state": "output-available", "input": {"label": "skills", "key": key}, "output": output}
        await life.append({"id": f"load{i}", "role": "assistant", "parts": [part]})
    await life.session.freeze_system_prompt()
    for i in range(size - len(SKILLS)):
        role = "user" if i % 2 == 0 else "assistant"
        await life.append({"id": f"m{i}", "role": role, "parts": [{"type": "text", "text": f"{TEXT} ({i})"}]})
    life.close()


async def time_wake(path: Path, skills_dir: Path, *, cached: bool = True, locking: str = "exclusive") -> float:
    start = time.perf_counter()
    life = Life(path, skills_dir, cached=cached, locking=locking)
    loaded = await life.wake()
    elapsed = (time.perf_counter() - start) * 1000
    life.close()
    if loaded != {f"skills:{k}" for k in SKILLS}:
        raise SystemExit(f"wrong skills restored: {sorted(loaded)}")
    return elapsed


async def run(sizes: list[int], wakes: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="bench_wake_"))
    try:
        skills_dir = root / "skills"
        provider = DirectorySkillProvider(skills_dir)
        for key in SKILLS:
            await provider.set(key, f"How to handle {key}.\n" * 20, f"The {key} playbook")
        print(f"{'messages':>9} | {'wake ms (median)':>16} | {'no cached prompt':>16} | {'one-time scan ms':>16}")
        for size in sizes:
            path = root / f"s{size}.db"
            t0 = time.perf_counter()
            await build(path, skills_dir, size)
            built = time.perf_counter() - t0
            warm = [await time_wake(path, skills_dir) for _ in range(wakes)]
            rendered = [await time_wake(path, skills_dir, cached=False) for _ in range(wakes)]
            with SqlStorage.open(path) as storage:
                delete_config(storage, SID, "loaded_skills")
            scan = await time_wake(path, skills_dir)  # scans once, then stores the set again
            print(f"{size:>9} | {statistics.median(warm):>16.3f} | {statistics.median(rendered):>16.3f} | "
                  f"{scan:>16.1f}   (built in {built:.1f} s)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def compare_locking(sizes: list[int], wakes: int, modes: list[str]) -> None:
    """Median wake per locking mode, alternating mode by mode on the same file; files left on disk."""
    root = Path(tempfile.mkdtemp(prefix="bench_wake_locking_"))
    try:
        skills_dir = root / "skills"
        provider = DirectorySkillProvider(skills_dir)
        for key in SKILLS:
            await provider.set(key, f"How to handle {key}.\n" * 20, f"The {key} playbook")
        print(f"\n{'messages':>9} | " + " | ".join(f"{m + ' wake ms':>20}" for m in modes) + " | files on disk after a wake")
        for size in sizes:
            path = root / f"l{size}.db"
            await build(path, skills_dir, size)
            times: dict[str, list[float]] = {m: [] for m in modes}
            for _ in range(wakes):
                for mode in modes:
                    times[mode].append(await time_wake(path, skills_dir, locking=mode))
            counts = []
            for mode in modes:
                life = Life(path, skills_dir, locking=mode)
                await life.wake()
                counts.append(f"{mode} {len(list(root.glob(path.name + '*')))}")
                life.close()
            print(f"{size:>9} | " + " | ".join(f"{statistics.median(times[m]):>20.3f}" for m in modes)
                  + " | " + ", ".join(counts))
    finally:
        shutil.rmtree(root, ignore_errors=True)


#: Issue 28's goal: back-to-back wakes per second with the damage checks >= this share of those without.
CHECKS_GOAL = 0.9


class _Unchecked:
    """Turns the damage checks of every host off (and on again): the wake as it would be without them."""

    def __enter__(self) -> None:
        from runtime.host.file_guard import FileGuard

        self.saved = {name: getattr(FileGuard, name) for name in ("before_open", "after_open", "after_close")}
        after_open = self.saved["after_open"]
        FileGuard.before_open = lambda guard, actor_id: None  # no link, header, quick or catalog check
        # the commit hooks, without the generation check; nothing remembered of the closed files
        FileGuard.after_open = lambda guard, actor_id, storage, entry: after_open(guard, actor_id, storage, None)
        FileGuard.after_close = lambda guard, actor_id: None

    def __exit__(self, *exc) -> None:
        from runtime.host.file_guard import FileGuard

        for name, method in self.saved.items():
            setattr(FileGuard, name, method)


async def compare_checks(sizes: list[int], wakes: int) -> None:
    """Back-to-back wakes per second through a host, with the damage checks ÷ without (issue 28).

    Per second of this process's CPU time (the machine is shared: CPU time is steadier than wall
    time, printed in brackets); median of alternating batches.
    """
    from actors.session_agent import SessionAgent, SessionConfig
    from runtime import open_host

    root = Path(tempfile.mkdtemp(prefix="bench_wake_checks_"))
    try:
        print(f"{'messages':>12} | {'file KiB':>8} | {'wakes/s checked':>22} | {'wakes/s unchecked':>22} | "
              f"{'ratio':>11} | goal >= {CHECKS_GOAL}")
        async with open_host(root / "data") as host:
            ns = host.bind("sessions", SessionAgent, env=SessionConfig())
            for size in sizes:
                stub = ns.get_by_name(f"wake-{size}")
                await stub.append_messages([{"id": f"m{i}", "role": "user" if i % 2 == 0 else "assistant",
                                             "parts": [{"type": "text", "text": f"{TEXT} ({i})"}]}
                                            for i in range(size)])
                path = host.path_for(stub.id)
                for writes in (False, True):
                    cpu, wall = await _alternate_wakes(host, ns, stub, wakes, writes)
                    kib = sum(p.stat().st_size for p in path.parent.glob(path.name + "*")) / 1024
                    checked, unchecked = statistics.median(cpu[True]), statistics.median(cpu[False])
                    walls = statistics.median(wall[True]), statistics.median(wall[False])
                    ratio = checked / unchecked
                    print(f"{str(size) + (' +1 write' if writes else ''):>12} | {kib:>8.0f} | "
                          f"{checked:>9.0f} [{walls[0]:>5.0f} wall] | {unchecked:>9.0f} [{walls[1]:>5.0f} wall] | "
                          f"{ratio:>4.2f} [{walls[0] / walls[1]:.2f}] | {'met' if ratio >= CHECKS_GOAL else 'NOT MET'}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def _alternate_wakes(host, ns, stub, wakes: int, writes: bool,
                           rounds: int = 25) -> tuple[dict[bool, list[float]], dict[bool, list[float]]]:
    """Wakes per CPU second and per wall second, per round, with (``True``) and without (``False``) the
    checks, rounds alternating. ``writes``: each wake also appends a message (its close then cannot
    vouch for the file: it was written a moment ago)."""
    cpu: dict[bool, list[float]] = {True: [], False: []}
    wall: dict[bool, list[float]] = {True: [], False: []}
    counter = [0]

    async def wake() -> None:
        await host.hibernate(ns, stub.id)
        await stub.get_loaded_skill_keys()
        if writes:
            counter[0] += 1
            await stub.append_message({"id": f"w{counter[0]}", "role": "user",
                                       "parts": [{"type": "text", "text": TEXT}]})

    await wake()
    await trio.sleep(0.2)  # what was written before is old enough for a close to vouch for it
    for _ in range(rounds):
        for checked in (True, False):
            with contextlib.nullcontext() if checked else _Unchecked():
                await wake()  # untimed: the close before it ran in the other mode (and remembered nothing)
                started_cpu, started = time.process_time(), time.perf_counter()
                for _ in range(wakes):
                    await wake()
                cpu[checked].append(wakes / (time.process_time() - started_cpu))
                wall[checked].append(wakes / (time.perf_counter() - started))
    return cpu, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,10000,100000", help="comma-separated message counts")
    parser.add_argument("--wakes", type=int, default=30, help="wakes timed per size")
    parser.add_argument("--locking", help="compare locking modes, e.g. exclusive,normal (skips the main table)")
    parser.add_argument("--checks", action="store_true",
                        help="back-to-back wakes through a host with the damage checks / without (issue 28)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.checks:
        trio.run(compare_checks, sizes, args.wakes)
    elif args.locking:
        trio.run(compare_locking, sizes, args.wakes, args.locking.split(","))
    else:
        trio.run(run, sizes, args.wakes)


if __name__ == "__main__":
    main()
