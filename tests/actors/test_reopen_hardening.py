"""Hibernation is invisible to context, skill and compaction operations (docs/deviations.md #3), randomized.

Two worlds run the same seeded sequence of calls on the same configuration
(every block kind, a folder of skills, a cached prompt, a compaction
function with an automatic threshold):

* ``steady`` -- one Session on one open file for the whole sequence;
* ``waking`` -- the file is closed and reopened, and a new Session built,
  before EVERY call (the actor hibernated between any two calls).

Every call's result (or error) must be the same in both, up to what is
random by design: compaction ids (uuid4) are renamed in order of
appearance and ``createdAt`` stamps are dropped. ``add_context`` and
``remove_context`` are left out: they change the in-memory configuration,
which a wake rebuilds from the builder, as the original's constructor does.
"""

import random
import re

import pytest

from actors.compaction import create_compact_function, extractive_summarize
from actors.context import search_provider_for
from actors.manager import SessionManager
from actors.session import Session
from actors.skills import DirectorySkillProvider
from storage.kv import ActorStorage
from tests.support.agents import RecordingAgent, RecordingConnection

pytestmark = pytest.mark.both_storages

WORDS = ("flight", "refund", "booking", "seat", "Paris", "東京", "予約", "café", "naïve", "AB-123", "😀", "policy")
SKILL_KEYS = ("pirate", "code-review", "missing", "日本語")


class Static:
    def __init__(self, value):
        self.value = value

    async def get(self):
        return self.value


class World:
    """One file and its skill folder; ``session()`` gives the Session for the next call.

    The Session is created on a new :class:`RecordingAgent` per activation,
    all sharing one peer (the host keeps peers across hibernation), so status
    broadcasts -- which carry the token estimate -- are compared too.
    """

    def __init__(self, tmp_path, name, reopen, session_id=""):
        self.path = tmp_path / f"{name}.sqlite3"
        self.skills_dir = tmp_path / f"{name}-skills"
        self.reopen = reopen
        self.session_id = session_id
        self.peer = RecordingConnection()
        self.skills_dir.mkdir()
        (self.skills_dir / "pirate.md").write_text("---\ndescription: Talk like a pirate\n---\nArr, matey.")
        (self.skills_dir / "code-review.md").write_text("Read the diff twice.")
        self.storage = self._open()
        self.current = self._build()
        self.ids = {}

    def _open(self):
        # As the runtime hibernates an actor: no checkpoint (and no fsync) on close.
        storage = ActorStorage.open(self.path)
        storage.skip_checkpoint_on_close()
        return storage

    @property
    def agent(self):
        """A new activation's Agent on the current file, broadcasting to the world's one peer."""
        return RecordingAgent(self.storage, self.peer)

    def _build(self):
        return (Session.create(self.agent).for_session(self.session_id)
                .with_context("soul", provider=Static("You are a careful travel agent."))
                .with_context("memory", description="Learned facts", max_tokens=60)
                .with_context("skills", description="Loadable skills", provider=DirectorySkillProvider(self.skills_dir))
                .with_context("kb", description="Searchable knowledge base", provider=search_provider_for(self.storage))
                .with_cached_prompt()
                .on_compaction(create_compact_function(
                    summarize=extractive_summarize, protect_head=1, tail_token_budget=60, min_tail_messages=2))
                .compact_after(250))

    async def session(self, which=0):
        if self.reopen:
            self.storage.close()
            self.storage = self._open()
            self.current = self._build()
        return self.current

    def close(self):
        self.storage.close()

    def normalize(self, value):
        """Rename compaction uuids in order of appearance; drop ``createdAt``."""
        if isinstance(value, dict):
            return {k: self.normalize(v) for k, v in value.items() if k != "createdAt"}
        if isinstance(value, (list, tuple)):
            return [self.normalize(v) for v in value]
        if isinstance(value, str):
            return re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", self._rename, value)
        return value

    def _rename(self, match):
        return self.ids.setdefault(match.group(0), f"<uuid {len(self.ids)}>")


async def outcome(world, call, which=0):
    world.peer.sent.clear()
    try:
        result = await call(await world.session(which))
    except Exception as exc:  # the error is part of the behaviour compared
        return ("raised", type(exc).__name__, world.normalize(str(exc)), world.normalize(world.peer.sent))
    return ("returned", world.normalize(result), world.normalize(world.peer.sent))


def text(rng, n=None):
    return " ".join(rng.choice(WORDS) for _ in range(n or rng.randint(1, 8)))


def skill_part(rng, call_id):
    tool = rng.choice(["load_context", "load_context", "unload_context"])
    key = rng.choice(SKILL_KEYS)
    output = rng.choice([f"body of {key}", f"[skill unloaded: {key}]", "x"])
    state = rng.choice(["output-available"] * 3 + ["input-available"])
    part = {"type": f"tool-{tool}", "toolCallId": call_id, "state": state,
            "input": {"label": "skills", "key": key}, "output": output}
    if rng.random() < 0.5:
        part["toolName"] = tool  # both AI SDK shapes (docs/deviations.md #12)
    return part


def random_call(rng, step, ids):
    """One call, as ``(name, async fn(session))``; ``ids`` are message ids appended so far."""
    choice = rng.choices(
        ["user", "assistant", "tool", "block", "unload", "prompt", "compact", "update", "delete", "clear", "read"],
        weights=[14, 8, 16, 5, 3, 4, 3, 2, 2, 1, 14],
    )[0]
    if choice in ("user", "assistant"):
        mid = f"m{step}"
        parts = [{"type": "text", "text": text(rng)}]
        if choice == "assistant" and rng.random() < 0.7:
            parts.append(skill_part(rng, f"call{step}"))
        parent = rng.choice([None, rng.choice(ids)]) if ids and rng.random() < 0.15 else Session.LATEST_LEAF
        ids.append(mid)
        message = {"id": mid, "role": choice, "parts": parts}
        return choice, lambda s: s.append_message(message, parent)
    if choice == "tool":
        return tool_call(rng)
    if choice == "block":
        content = text(rng, rng.choice([3, 30]))
        write = rng.choice(["replace_context_block", "append_context_block"])
        label = rng.choice(["memory", "memory", "soul", "kb", "nope"])
        return write, lambda s: getattr(s, write)(label, content)
    if choice == "unload":
        key = rng.choice(SKILL_KEYS)
        return "unload", lambda s: s.unload_skill("skills", key)
    if choice == "prompt":
        method = rng.choice(["freeze_system_prompt", "freeze_system_prompt", "refresh_system_prompt"])
        return method, lambda s: getattr(s, method)()
    if choice == "compact":
        return "compact", lambda s: s.compact()
    if choice == "update" and ids:
        target = rng.choice(ids)
        replacement = {"id": target, "role": "assistant", "parts": [{"type": "text", "text": text(rng)},
                                                                    skill_part(rng, f"u{step}")]}
        return "update", lambda s: s.update_message(replacement)
    if choice == "delete" and ids:
        target = rng.choice(ids)
        return "delete", lambda s: s.delete_messages([target])
    if choice == "clear":
        return "clear", lambda s: s.clear_messages()
    return read_call(rng)


def tool_call(rng):
    name, args = rng.choice([
        ("set_context", {"label": "memory", "content": text(rng, rng.choice([2, 5, 40])),
                         "action": rng.choice(["replace", "append"])}),
        ("set_context", {"label": "skills", "content": text(rng),
                         "metadata": {"title": rng.choice(SKILL_KEYS), "description": text(rng, 2)}}),
        ("set_context", {"label": "kb", "content": text(rng)}),
        ("load_context", {"label": "skills", "key": rng.choice(SKILL_KEYS)}),
        ("load_context", {"label": "skills", "key": rng.choice(SKILL_KEYS[:2])}),
        ("unload_context", {"label": "skills", "key": rng.choice(SKILL_KEYS)}),
        ("search_context", {"label": "kb", "query": text(rng, 1)}),
    ])

    async def run(session):
        tools = await session.tools()
        return await tools[name].execute(args)

    return name, run


def read_call(rng):
    query = text(rng, rng.choice([1, 2]))
    reads = {
        "blocks": lambda s: s.get_context_blocks(),
        "skills": lambda s: _list(s.get_loaded_skill_keys()),
        "tools": lambda s: _tool_shapes(s),
        "history": lambda s: s.get_history(),
        "estimate": lambda s: s.estimate_tokens(),
        "compactions": lambda s: s.get_compactions(),
        "search": lambda s: s.search(query),
        "leaf": lambda s: s.get_latest_leaf(),
        "recent": lambda s: s.get_recent_history(300, 2),
        "path": lambda s: s.get_path_length(),
        "prompt": lambda s: s.freeze_system_prompt(),
    }
    name = rng.choice(sorted(reads))
    return f"read {name}", reads[name]


class ManagedWorld(World):
    """The same blocks through a SessionManager: two sessions share the explicit providers."""

    def __init__(self, tmp_path, name, reopen):
        super().__init__(tmp_path, name, reopen)
        self.manager = self._manager()
        self.session_ids = None

    def _manager(self):
        return (SessionManager.create(self.agent)
                .with_context("soul", provider=Static("You are a careful travel agent."))
                .with_context("memory", description="Learned facts", max_tokens=60)
                .with_context("skills", provider=DirectorySkillProvider(self.skills_dir))
                .with_context("kb", provider=search_provider_for(self.storage))
                .with_cached_prompt()
                .on_compaction(create_compact_function(
                    summarize=extractive_summarize, protect_head=1, tail_token_budget=60, min_tail_messages=2))
                .compact_after(250))

    async def session(self, which=0):
        if self.reopen:
            self.storage.close()
            self.storage = self._open()
            self.manager = self._manager()
        if self.session_ids is None:
            self.session_ids = [(await self.manager.create(f"s{i}"))["id"] for i in range(2)]
        return await self.manager.get_session(self.session_ids[which])


async def _list(awaitable):
    return list(await awaitable)


async def _tool_shapes(session):
    return {name: (tool.description, tool.input_schema) for name, tool in (await session.tools()).items()}


async def final_state(session):
    return {
        "blocks": await session.get_context_blocks(),
        "skills": list(await session.get_loaded_skill_keys()),
        "tools": await _tool_shapes(session),
        "history": await session.get_history(),
        "compactions": await session.get_compactions(),
        "prompt": await session.freeze_system_prompt(),
        "estimate": await session.estimate_tokens(),
    }


@pytest.mark.parametrize("seed, session_id", [(2, "s-1"), (3, ""), (4, "s-2"), (5, ""), (6, "日本"), (7, "")])
async def test_random_context_skill_and_compaction_calls_give_the_same_results_across_wakes(
    tmp_path, seed, session_id
):
    rng = random.Random(seed)
    steady = World(tmp_path, "steady", reopen=False, session_id=session_id)
    waking = World(tmp_path, "waking", reopen=True, session_id=session_id)
    ids: list[str] = []
    compactions = skill_loads = 0
    try:
        for step in range(120):
            name, call = random_call(rng, step, ids)
            left, right = await outcome(steady, call), await outcome(waking, call)
            assert left == right, f"seed {seed}, step {step}: {name} differs after a wake"
            compactions += sum('"compacted"' in payload for payload in left[-1])
            skill_loads += name == "load_context" and left[1] in ("Arr, matey.", "Read the diff twice.")
        final = [await outcome(world, final_state) for world in (steady, waking)]
        assert final[0] == final[1]
        assert final[0][0] == "returned"
        assert compactions >= 1 and skill_loads >= 1  # the sequence really exercised both
    finally:
        steady.close()
        waking.close()


@pytest.mark.parametrize("seed", [11, 13])
async def test_random_calls_on_two_managed_sessions_give_the_same_results_across_wakes(tmp_path, seed):
    rng = random.Random(seed)
    steady, waking = ManagedWorld(tmp_path, "steady", reopen=False), ManagedWorld(tmp_path, "waking", reopen=True)
    ids: list[str] = []
    try:
        for step in range(100):
            which = rng.randrange(2)
            name, call = random_call(rng, step, ids)
            left, right = await outcome(steady, call, which), await outcome(waking, call, which)
            assert left == right, f"seed {seed}, step {step}: {name} on session {which} differs after a wake"
        for which in (0, 1):
            final = [await outcome(world, final_state, which) for world in (steady, waking)]
            assert final[0] == final[1] and final[0][0] == "returned"
    finally:
        steady.close()
        waking.close()
