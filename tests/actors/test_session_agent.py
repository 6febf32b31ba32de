"""SessionAgent: the Session API as stub methods, configured by SessionConfig."""

import random

import pytest

from actors.session_agent import BlockConfig, CompactionConfig, SessionAgent, SessionConfig, resolve_summarizer
from actors.summary import extractive_summarize
from common.errors import (
    CompactionError,
    ContextBlockError,
    InvalidInputError,
    InvalidMessageError,
    MessageNotFoundError,
    NotFoundError,
)
from runtime import open_host

SEP = "═" * 46
DEFAULT_PROMPT = (
    f"{SEP}\nSOUL [readonly]\n{SEP}\nYou are a helpful assistant.\n\n"
    f"{SEP}\nMEMORY (Learned facts) [0% — 0/1100 tokens] [writable]\n{SEP}\n"
)


def text(message_id, words, role="user"):
    return {"id": message_id, "role": role, "parts": [{"type": "text", "text": words}]}


def skill_load(message_id, key, output):
    part = {"type": "tool-load_context", "toolName": "load_context", "toolCallId": f"call-{message_id}",
            "state": "output-available", "input": {"label": "skills", "key": key}, "output": output}
    return {"id": message_id, "role": "assistant", "parts": [part]}


@pytest.fixture
async def host(tmp_path):
    async with open_host(tmp_path / "data") as host:
        yield host


async def stub_for(host, config=None, name="chat-1"):
    if "sessions" not in host.namespaces:
        host.bind("sessions", SessionAgent, env=config)
    return host.namespace("sessions").get_by_name(name)


@pytest.fixture
def rich_config(tmp_path):
    skills = tmp_path / "skills"
    skills.mkdir()
    (skills / "pirate.md").write_text("---\ndescription: Talk like a pirate\n---\nSay arr.\n", encoding="utf-8")
    soul = tmp_path / "soul.md"
    soul.write_text("You help airline customers.", encoding="utf-8")
    return SessionConfig(blocks=(
        BlockConfig("soul", "readonly", description="Identity", file=soul),
        BlockConfig("memory", "writable", description="Learned facts", max_tokens=20),
        BlockConfig("skills", "skills", description="Loadable skills", path=skills),
        BlockConfig("knowledge", "searchable", description="Searchable knowledge base"),
    ))


# -- configuration ------------------------------------------------------------------------------


def test_default_config_is_a_soul_and_a_memory_block_with_cached_prompt_and_compaction():
    config = SessionConfig()
    assert [(b.label, b.kind, b.max_tokens) for b in config.blocks] == [("soul", "readonly", None),
                                                                          ("memory", "writable", 1100)]
    assert config.cached_prompt is True
    assert config.compaction == CompactionConfig(threshold=100_000, summarizer="extractive")


@pytest.mark.parametrize(("kwargs", "field", "message"), [
    ({"label": ""}, "label", "a block label must be a non-empty string"),
    ({"label": "x", "kind": "magic"}, "kind",
     "block 'x': kind must be one of readonly, writable, skills, searchable, not 'magic'"),
    ({"label": "x", "kind": "readonly"}, "text", "readonly block 'x' needs exactly one of text or file"),
    ({"label": "x", "kind": "readonly", "text": "a", "max_tokens": 5}, "max_tokens",
     "block 'x': max_tokens does not apply to a readonly block"),
    ({"label": "x", "max_tokens": -1}, "max_tokens", "block 'x': max_tokens must be an integer >= 0"),
    ({"label": "x", "kind": "skills"}, "path", "skills block 'x' needs a folder path"),
    ({"label": "x", "kind": "searchable", "text": "a"}, "text", "block 'x': text does not apply to a searchable block"),
])
def test_block_config_rejects_options_that_do_not_fit(kwargs, field, message):
    with pytest.raises(InvalidInputError) as caught:
        BlockConfig(**kwargs)
    assert (caught.value.field, str(caught.value)) == (field, message)


def test_session_config_rejects_duplicate_labels_and_bad_compaction():
    with pytest.raises(InvalidInputError, match='Block "memory" already exists'):
        SessionConfig(blocks=(BlockConfig("memory"), BlockConfig("memory")))
    with pytest.raises(InvalidInputError) as caught:
        CompactionConfig(threshold=0)
    assert caught.value.field == "threshold"


def test_summarizer_names_resolve_to_functions():
    assert resolve_summarizer("extractive") is extractive_summarize
    assert resolve_summarizer("textwrap:dedent")("  a") == "a"
    for bad, reason in [("nope", "must be 'extractive' or 'module:function'"),
                        ("no_such_module_xyz:f", "cannot be loaded"),
                        ("textwrap:nothing_here", "cannot be loaded"),
                        ("os:sep", "is not callable")]:
        with pytest.raises(InvalidInputError, match=reason) as caught:
            resolve_summarizer(bad)
        assert caught.value.field == "summarizer"


def test_session_agent_refuses_an_env_that_is_not_a_session_config():
    with pytest.raises(TypeError, match="SessionAgent needs a SessionConfig as env, not dict"):
        SessionAgent(ctx=None, env={"blocks": []})


# -- messages ----------------------------------------------------------------------------------------


async def test_default_session_freezes_the_documented_prompt(host):
    stub = await stub_for(host)
    assert await stub.freeze_system_prompt() == DEFAULT_PROMPT
    assert [b["label"] for b in await stub.get_context_blocks()] == ["soul", "memory"]


async def test_append_messages_chains_after_the_latest_leaf_and_reports_each_insert(host):
    stub = await stub_for(host)
    assert await stub.append_message(text("m1", "hello")) is True
    assert await stub.append_messages([text("m2", "a", "assistant"), text("m1", "dup"), text("m3", "b")]) == [
        True, False, True]
    # m1 was a duplicate, so the chain goes on from m1: m3 is m2's sibling and the latest leaf.
    assert [m["id"] for m in await stub.get_history()] == ["m1", "m3"]
    assert [m["id"] for m in await stub.get_branches("m1")] == ["m2", "m3"]


async def test_append_messages_with_a_null_parent_starts_a_new_root(host):
    stub = await stub_for(host)
    await stub.append_messages([text("a1", "x"), text("a2", "y")])
    assert await stub.append_messages([text("b1", "z"), text("b2", "w")], None) == [True, True]
    assert [m["id"] for m in await stub.get_history()] == ["b1", "b2"]
    assert [m["id"] for m in await stub.get_history("a2")] == ["a1", "a2"]


async def test_a_bad_message_in_a_batch_writes_nothing(host):
    stub = await stub_for(host)
    with pytest.raises(InvalidMessageError) as caught:
        await stub.append_messages([text("m1", "ok"), {"id": "m2", "role": 7, "parts": []}])
    assert (caught.value.field, str(caught.value)) == ("messages[1].role", "messages[1].role must be a string, not int")
    with pytest.raises(InvalidMessageError) as caught:
        await stub.append_messages([text("m1", "ok"), {"id": "m2", "role": "user", "parts": [{"x": {1, 2}}]}])
    assert caught.value.field == "messages[1]"
    with pytest.raises(InvalidInputError) as caught:
        await stub.append_messages({"id": "m1"})
    assert caught.value.field == "messages"
    assert await stub.get_path_length() == 0


async def test_update_delete_and_clear_follow_the_session(host):
    stub = await stub_for(host)
    await stub.append_messages([text("m1", "one"), text("m2", "two"), text("m3", "three")])
    await stub.update_message(text("m2", "deux"))
    assert (await stub.get_message("m2"))["parts"][0]["text"] == "deux"
    with pytest.raises(MessageNotFoundError):
        await stub.update_message(text("zz", "x"))
    assert await stub.delete_messages(["m2", "nope"]) == 1
    assert [m["id"] for m in await stub.get_history()] == ["m1", "m3"]
    assert (await stub.get_latest_leaf())["id"] == "m3"
    await stub.clear_messages()
    assert (await stub.get_history(), await stub.get_latest_leaf(), await stub.get_path_length()) == ([], None, 0)


async def test_search_finds_a_booking_code(host):
    stub = await stub_for(host)
    await stub.append_messages([text("m1", "My reservation is ZFA04Y."), text("m2", "Thanks", "assistant")])
    hits = await stub.search("zfa04y")
    assert [(h["id"], h["role"], h["content"]) for h in hits] == [("m1", "user", "My reservation is ZFA04Y.")]
    assert await stub.search("ZFA04Y", 0) == []


# -- context, tools, skills ------------------------------------------------------------------------------


async def test_configured_blocks_render_in_order_with_their_providers(host, rich_config):
    stub = await stub_for(host, rich_config)
    assert await stub.freeze_system_prompt() == (
        f"{SEP}\nSOUL (Identity) [readonly]\n{SEP}\nYou help airline customers.\n\n"
        f"{SEP}\nMEMORY (Learned facts) [0% — 0/20 tokens] [writable]\n{SEP}\n\n\n"
        f"{SEP}\nSKILLS (Loadable skills) [loadable]\n{SEP}\n- pirate: Talk like a pirate\n\n"
        f"{SEP}\nKNOWLEDGE (Searchable knowledge base) [searchable]\n{SEP}\n"
    )


async def test_tools_come_in_three_formats(host, rich_config):
    stub = await stub_for(host, rich_config)
    raw = await stub.tools()
    assert list(raw) == ["set_context", "load_context", "unload_context", "search_context"]
    assert raw["load_context"]["inputSchema"]["required"] == ["label", "key"]
    assert [t["function"]["name"] for t in await stub.tools("openai")] == list(raw)
    anthropic = await stub.tools(format="anthropic")
    assert [t["name"] for t in anthropic] == list(raw)
    assert anthropic[0]["input_schema"] == raw["set_context"]["inputSchema"]
    with pytest.raises(InvalidInputError) as caught:
        await stub.tools("xml")
    assert caught.value.field == "format"


async def test_execute_tool_writes_loads_and_searches(host, rich_config):
    stub = await stub_for(host, rich_config)
    assert await stub.execute_tool("set_context", {"label": "memory", "content": "Likes aisle seats"}) == (
        "Written to memory. Usage: 25% (5/20 tokens)")
    assert (await stub.get_context_block("memory"))["content"] == "Likes aisle seats"
    assert await stub.execute_tool("set_context", {"label": "memory", "content": "x " * 30}) == (
        'Error: Block "memory" exceeds maxTokens: 39 > 20')
    assert await stub.execute_tool("load_context", {"label": "skills", "key": "pirate"}) == "Say arr.\n"
    assert await stub.get_loaded_skill_keys() == ["skills:pirate"]
    assert await stub.execute_tool(
        "set_context", {"label": "knowledge", "content": "Gate B12 opens early", "metadata": {"title": "Gates"}}
    ) == 'Indexed "gates" in knowledge.'
    assert await stub.execute_tool("search_context", {"label": "knowledge", "query": "gate"}) == (
        "[gates]\nGate B12 opens early")
    with pytest.raises(NotFoundError) as caught:
        await stub.execute_tool("session_search", {"query": "x"})
    assert (caught.value.kind, str(caught.value)) == ("tool", "no tool named 'session_search'")


async def test_block_writes_raise_the_spec_messages(host):
    stub = await stub_for(host)
    assert await stub.freeze_system_prompt() == DEFAULT_PROMPT
    with pytest.raises(ContextBlockError, match='Block "soul" is readonly'):
        await stub.replace_context_block("soul", "x")
    with pytest.raises(ContextBlockError, match='Block "nope" not found'):
        await stub.append_context_block("nope", "x")
    assert (await stub.append_context_block("memory", "a"))["content"] == "a"
    assert (await stub.append_context_block("memory", "b"))["content"] == "a\nb"
    assert await stub.get_context_block("nope") is None
    assert await stub.freeze_system_prompt() == DEFAULT_PROMPT  # writes never change the frozen prompt
    assert "MEMORY (Learned facts) [0% — 3/1100 tokens] [writable]" in await stub.refresh_system_prompt()


async def test_loaded_skills_and_frozen_prompt_survive_hibernation(host, rich_config):
    stub = await stub_for(host, rich_config)
    frozen = await stub.freeze_system_prompt()
    await stub.append_messages([text("m1", "be a pirate"), skill_load("m2", "pirate", "Say arr.\n")])
    await stub.replace_context_block("memory", "changed")
    assert await host.hibernate("sessions", stub.id) is True
    assert await stub.get_loaded_skill_keys() == ["skills:pirate"]
    assert await stub.freeze_system_prompt() == frozen
    assert await stub.unload_skill("skills", "pirate") is True
    assert (await stub.get_message("m2"))["parts"][0]["output"] == "[skill unloaded: pirate]"
    assert await stub.unload_skill("skills", "pirate") is False


# -- compaction --------------------------------------------------------------------------------------------


async def test_compact_summarizes_the_middle_with_the_extractive_summarizer(host):
    config = SessionConfig(compaction=CompactionConfig(threshold=None, protect_head=1, tail_token_budget=10,
                                                       min_tail_messages=1))
    stub = await stub_for(host, config)
    words = ["I need to change flight HAT170 to Friday.", "Your reservation ZFA04Y is on HAT170.",
             "Please move it to Friday morning.", "Done, the new flight is HAT176.", "Thanks, bye."]
    await stub.append_messages([text(f"m{i}", w, "user" if i % 2 == 0 else "assistant") for i, w in enumerate(words)])
    result = await stub.compact()
    assert (result["fromMessageId"], result["toMessageId"]) == ("m1", "m3")
    assert "HAT176" in result["summary"] and result["summary"].startswith("## Topic")
    compactions = await stub.get_compactions()
    assert [(c["fromMessageId"], c["toMessageId"], c["summary"]) for c in compactions] == [
        ("m1", "m3", result["summary"])]
    history = await stub.get_history()
    assert [m["id"] for m in history] == ["m0", f"compaction_{compactions[0]['id']}", "m4"]
    assert await stub.get_path_length() == 5  # stored messages are kept
    assert [h["id"] for h in await stub.search("HAT176")] == ["m3"]


async def test_compact_without_compaction_configured_raises(host):
    stub = await stub_for(host, SessionConfig(compaction=None))
    with pytest.raises(CompactionError, match="No compaction function registered"):
        await stub.compact()


# -- hibernation is invisible (docs/deviations.md #3) -------------------------------------------------------


def _without_times(value):
    if isinstance(value, dict):
        return {k: _without_times(v) for k, v in value.items() if k != "createdAt"}
    if isinstance(value, list):
        return [_without_times(v) for v in value]
    return value


async def _run_script(host, name, seed, hibernate_at):
    rng = random.Random(seed)
    stub = await stub_for(host, name=name)
    ids, results = [], []
    for step in range(120):
        if step in hibernate_at:
            await host.hibernate("sessions", stub.id)
        try:
            results.append(await _step(stub, rng, step, ids))
        except Exception as exc:  # errors are results too
            results.append(("error", type(exc).__name__, str(exc)))
    return _without_times(results)


async def _step(stub, rng, step, ids):
    op = rng.choice(["append", "append", "append", "branch", "update", "delete", "history", "search",
                     "leaf", "block", "prompt", "count", "branches"])
    if op == "append" or (op != "branch" and not ids):
        ids.append(f"m{step}")
        return await stub.append_message(text(ids[-1], f"flight {rng.choice(['HAT1', 'ZFA4', 'Q9'])} {step}"))
    if op == "branch":
        parent = rng.choice([None, *ids])
        ids.append(f"b{step}")
        return await stub.append_message(text(ids[-1], f"branch {step}"), parent)
    if op == "update":
        return await stub.update_message(text(rng.choice(ids), f"edited {step}"))
    if op == "delete":
        return await stub.delete_messages([rng.choice(ids)])
    if op == "history":
        return await stub.get_history(rng.choice([None, *ids]))
    if op == "search":
        return await stub.search(rng.choice(["flight", "HAT1", "edited", "branch"]))
    if op == "block":
        return await stub.append_context_block("memory", f"fact {step}")
    calls = {"leaf": stub.get_latest_leaf, "prompt": stub.freeze_system_prompt, "count": stub.get_path_length}
    if op in calls:
        return await calls[op]()
    return await stub.get_branches(rng.choice(ids))


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_a_random_script_gives_the_same_results_with_hibernations(host, seed):
    hibernations = set(random.Random(seed * 7).sample(range(1, 120), 25))
    plain = await _run_script(host, f"plain-{seed}", seed, set())
    sleepy = await _run_script(host, f"sleepy-{seed}", seed, hibernations)
    assert sleepy == plain
    assert host.statistics().hibernations == 25
