"""The one-time restore of the loaded-skill set walks history in bounded chunks.

A session with no saved set (an import, a fork, a file written before the
row existed) rebuilds it from history on first use. The walk goes latest
leaf -> root a chunk at a time (``Session.raw_path_chunks``), folding the
skill events newest first into the set the oldest-first fold gives; its
memory does not grow with the history. A failing walk raises
``SkillRestoreError`` and leaves nothing behind, so the next call walks again.
"""

import json
import random
import tracemalloc

import pytest

from actors import SessionManager
from actors.session import Session
from actors.skills import DirectorySkillProvider, SkillTracker, _NewestFirst, may_record_skills, skill_events
from storage import SqlStorage
from storage.context import delete_config, read_config

pytestmark = pytest.mark.both_storages


SID = "s1"


def load_part(key, output=None, *, tool="load_context", call=None):
    return {"type": f"tool-{tool}", "toolName": tool, "toolCallId": call or f"c-{key}",
            "state": "output-available", "input": {"label": "skills", "key": key},
            "output": f"How to {key}." if output is None else output}


def assistant(mid, *parts):
    return {"id": mid, "role": "assistant", "parts": list(parts)}


def user(mid, text="hello"):
    return {"id": mid, "role": "user", "parts": [{"type": "text", "text": text}]}


@pytest.fixture
async def skills(tmp_path):
    provider = DirectorySkillProvider(tmp_path / "skills")
    for key in ("deploy", "review", "pirate", "refunds"):
        await provider.set(key, f"How to {key}.", f"The {key} skill")
    return provider


def open_session(storage, skills):
    return Session.create(storage).for_session(SID).with_context("skills", provider=skills)


def forget_saved_set(storage):
    """Make the file look like one written without the loaded-skill row."""
    delete_config(storage, SID, SkillTracker.CONFIG_KEY)


# -- the newest-first fold ------------------------------------------------------------------------


def test_the_newest_first_fold_equals_the_oldest_first_fold_on_random_histories():
    rng = random.Random(13)
    for _ in range(3000):
        history = []
        for i in range(rng.randint(0, 12)):
            parts = []
            for _ in range(rng.randint(0, 3)):
                key = rng.choice("abcd")
                if rng.random() < 0.3:
                    parts.append(load_part(key, tool="unload_context"))
                elif rng.random() < 0.15:
                    parts.append(load_part(key, f"[skill unloaded: {key}]"))
                else:
                    parts.append(load_part(key))
            history.append(assistant(f"m{i}", *parts) if rng.random() < 0.9 else {**assistant(f"m{i}", *parts),
                                                                                 "role": "user"})
        forward = {}
        for message in history:
            SkillTracker._fold(forward, skill_events(message), message["id"], allow_loads=True)
        fold = _NewestFirst()
        for message in reversed(history):
            fold.add(message)
        result = fold.result()
        assert list(result.items()) == list(forward.items()), history


def test_a_reload_keeps_its_place_and_an_unload_then_load_moves_to_the_end():
    history = [
        assistant("a1", load_part("deploy"), load_part("review")),
        assistant("a2", load_part("pirate")),
        assistant("a3", load_part("deploy")),  # already loaded: keeps its place, newest message a3
        assistant("a4", load_part("review", tool="unload_context")),
        assistant("a5", load_part("review")),  # unloaded, then loaded again: last
    ]
    fold = _NewestFirst()
    for message in reversed(history):
        fold.add(message)
    assert fold.result() == {"skills:deploy": "a3", "skills:pirate": "a2", "skills:review": "a5"}
    assert list(fold.result()) == ["skills:deploy", "skills:pirate", "skills:review"]


def test_only_rows_that_can_name_the_tools_are_parsed():
    assert may_record_skills(json.dumps(assistant("a", load_part("x"))))
    assert may_record_skills('{"parts":[{"type":"tool-unload_context"}]}')
    assert not may_record_skills(json.dumps(user("u", "load context please")))
    # JSON may spell a letter as an escape: such a row is parsed too.
    assert may_record_skills('{"toolName":"load\\u005fcontext"}')


# -- a real session without its saved set -------------------------------------------------------------


async def test_a_session_without_a_saved_set_restores_it_from_history_and_saves_it(tmp_path, skills):
    path = tmp_path / "actor.sqlite3"
    with SqlStorage.open(path) as storage:
        session = open_session(storage, skills)
        await session.append_message(user("u1"))
        await session.append_message(assistant("a1", load_part("deploy"), load_part("review")))
        await session.append_message(assistant("a2", load_part("pirate")))
        await session.append_message(assistant("a3", load_part("review", tool="unload_context")))
        await session.append_message(assistant("a4", load_part("refunds")))
        await session.append_message(assistant("a5", load_part("review")))
        await session.add_compaction("the start", "u1", "a2")  # loads inside a compacted range count
        expected = list(await session.get_loaded_skill_keys())
        assert expected == ["skills:deploy", "skills:pirate", "skills:refunds", "skills:review"]
        saved = read_config(storage, SID, SkillTracker.CONFIG_KEY)
        # A row written by another program, its tool name spelled with an escape.
        escaped = '{"id":"a6","role":"assistant","parts":[{"type":"tool-x","toolName":"unload\\u005fcontext",' \
                  '"state":"output-available","input":{"label":"skills","key":"refunds"},"output":""}]}'
        await session.append_message({"id": "a6", "role": "assistant", "parts": []})
        storage.exec("UPDATE assistant_messages SET content = ? WHERE session_id = ? AND id = 'a6'", escaped, SID)
        forget_saved_set(storage)

    with SqlStorage.open(path) as storage:
        session = open_session(storage, skills)
        assert list(await session.get_loaded_skill_keys()) == ["skills:deploy", "skills:pirate", "skills:review"]
        assert read_config(storage, SID, SkillTracker.CONFIG_KEY) == saved.replace(',["skills:refunds","a4"]', "")


async def test_a_fork_restores_the_skills_its_copies_loaded(recording_agent, skills):
    manager = SessionManager.create(recording_agent).with_context("skills", provider=skills)
    sid = (await manager.create("source"))["id"]
    await manager.append_all(sid, [user("u1"), assistant("a1", load_part("deploy")), assistant("a2",
                             load_part("review")), assistant("a3", load_part("deploy", tool="unload_context"))])
    fork = await manager.fork(sid, "a2", "before the unload")
    assert list(await (await manager.get_session(fork["id"])).get_loaded_skill_keys()) == [
        "skills:deploy", "skills:review"
    ]
    assert list(await (await manager.get_session(sid)).get_loaded_skill_keys()) == ["skills:review"]


# -- memory ----------------------------------------------------------------------------------------------------


async def restore_peak(path, skills):
    """``(restored keys, peak bytes Python allocated while restoring)`` on a fresh open of ``path``."""
    with SqlStorage.open(path) as storage:
        session = open_session(storage, skills)
        tracemalloc.start()
        try:
            tracemalloc.reset_peak()
            keys = list(await session.get_loaded_skill_keys())
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        return keys, peak


async def write_tool_heavy_history(path, skills, outputs_mb):
    """Two skills loaded first, then ~``outputs_mb`` MB of tool outputs (200 KB each)."""
    with SqlStorage.open(path) as storage:
        session = open_session(storage, skills)
        await session.append_message(assistant("a1", load_part("deploy"), load_part("review")))
        for i in range(outputs_mb * 5):
            words = "load_context " if i % 10 == 0 else ""  # some outputs name the tool: parsed, not skipped
            output = (words + f"line {i} of a long file listing\n") * 6250  # ~200 KB
            part = {"type": "tool-read_file", "toolName": "read_file", "toolCallId": f"r{i}",
                    "state": "output-available", "input": {"path": f"src/f{i}.py"}, "output": output}
            await session.append_message(user(f"u{i}", "next file"))
            await session.append_message(assistant(f"t{i}", part))
        await session.append_message(assistant("a2", load_part("review", tool="unload_context")))
        forget_saved_set(storage)


async def test_restore_memory_does_not_grow_with_the_history(tmp_path, skills):
    peaks = {}
    for outputs_mb in (8, 32):
        path = tmp_path / f"s{outputs_mb}.sqlite3"
        await write_tool_heavy_history(path, skills, outputs_mb)
        keys, peaks[outputs_mb] = await restore_peak(path, skills)
        assert keys == ["skills:deploy"]
    # Reading the 32 MB history at once took over 64 MB (its text, then its parsed copy).
    # A walk holds one chunk: at most 1 MiB of stored JSON, and its parsed rows.
    assert peaks[32] < 6 * 2**20, peaks
    assert peaks[32] < peaks[8] * 1.5, peaks
