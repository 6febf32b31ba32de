"""The transcript store served by a real ``durable-sessions serve`` process, through ``DurableSessionStore``.

One server process serves the whole module (a second one only for the
kill -9 test). The SDK's conformance suite needs an empty store per
contract: each factory call gets a store whose project keys carry a fresh
prefix, so contracts never see each other's sessions.
"""

import asyncio
import gc
import itertools
import json

import httpx
import pytest
from claude_agent_sdk import (
    SessionStore,
    delete_session_via_store,
    fork_session_via_store,
    get_subagent_messages_from_store,
    list_sessions_from_store,
    list_subagents_from_store,
    project_key_for_directory,
)
from claude_agent_sdk import fold_session_summary as sdk_fold
from claude_agent_sdk.testing import run_session_store_conformance

from common.errors import InvalidInputError, UnauthorizedError
from runtime import DurableSessionStore, open_host
from runtime.cli.formats.claude_code import find_claude_code_files, read_transcript_entries
from runtime.client import SessionsClient
from runtime.client.conformance import IsolatedSessionStore, PrefixedProjects, check_session_store_conformance
from runtime.host.ids import id_from_name
from runtime.server.transcripts import (
    TRANSCRIPTS_NAMESPACE,
    HostTranscriptStore,
    open_transcripts,
    transcript_actor_name,
)
from tests.support.processes import kill_hard, server_process

TOKEN = "transcripts-token"
OPTIONAL = ("list_sessions", "list_session_summaries", "delete", "list_subkeys")
SAMPLE = "-Users-user-workspace-claude-code-log-sample"
BRANCHING = "71c9afe9-d9cc-4583-86b3-e62ba682b83a"
WORKTREES = "ef958aa1-0e93-49f0-bb71-150f63befcd1"
_prefixes = itertools.count()


class _AnyInt:
    def __eq__(self, other):
        return isinstance(other, int)


ANY_INT = _AnyInt()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with server_process(tmp_path_factory.mktemp("transcripts") / "data", token=TOKEN) as running:
        yield running


@pytest.fixture
async def store(server):
    async with DurableSessionStore(server.url, token=TOKEN) as store:
        yield store


def fresh_project(name="proj"):
    return f"t{next(_prefixes)}-{name}"


class IsolatedHostStore(PrefixedProjects, HostTranscriptStore):
    """The in-process host store with the shipped fresh-store-per-contract isolation."""


# -- the SDK's conformance suite -------------------------------------------------------


def test_the_store_is_exported_from_runtime_and_runtime_client():
    import runtime.client
    import runtime.client.transcripts

    assert runtime.client.DurableSessionStore is DurableSessionStore is runtime.client.transcripts.DurableSessionStore
    assert "DurableSessionStore" in runtime.client.__all__


def test_durable_session_store_implements_every_optional_method():
    for name in OPTIONAL:
        assert getattr(DurableSessionStore, name) is not getattr(SessionStore, name), name


async def test_conformance_suite_passes_over_http_under_trio(server):
    # One store per contract plus the probe: no contract was skipped.
    assert await check_session_store_conformance(server.url, token=TOKEN) == 15


def test_conformance_suite_passes_over_http_under_asyncio(server):
    assert asyncio.run(check_session_store_conformance(server.url, token=TOKEN)) == 15


async def test_an_isolated_store_is_empty_and_purges_what_it_wrote(server, store):
    key = {"project_key": "proj", "session_id": "s"}
    await store.append(key, [{"type": "user", "uuid": "u1"}])
    async with IsolatedSessionStore(server.url, token=TOKEN) as isolated:
        assert await isolated.load(key) is None
        await isolated.append(key, [{"type": "user", "uuid": "i1"}])
        await isolated.append({**key, "subpath": "subagents/agent-1"}, [{"type": "user", "uuid": "i2"}])
        assert await isolated.list_sessions("proj") == [{"session_id": "s", "mtime": ANY_INT}]
        assert await isolated.purge() == 2
        assert await isolated.load(key) is None
        assert isolated.written == []
    assert await store.load(key) == [{"type": "user", "uuid": "u1"}]
    await store.delete(key)


async def test_conformance_suite_passes_on_the_in_process_host_store(tmp_path):
    async with open_host(tmp_path / "data") as host, open_transcripts(host) as base:
        stores = []

        def make_store():
            stores.append(IsolatedHostStore(base.namespace))
            return stores[-1]

        await run_session_store_conformance(make_store)
        assert len(stores) == 15


# -- the contract over HTTP --------------------------------------------------------------


async def test_a_retried_batch_loads_once(store):
    key = {"project_key": fresh_project(), "session_id": "s"}
    batch = [{"type": "user", "uuid": "u1", "n": 1}, {"type": "assistant", "uuid": "u2", "n": 2}, {"type": "x"}]
    assert await store.append(key, batch) == 3
    assert await store.append(key, batch[:2]) == 0
    assert await store.load(key) == batch


async def test_the_same_session_id_under_two_projects_is_two_transcripts(store):
    a, b = fresh_project("a"), fresh_project("b")
    await store.append({"project_key": a, "session_id": "s"}, [{"type": "x", "uuid": "1", "from": "A"}])
    await store.append({"project_key": b, "session_id": "s"}, [{"type": "x", "uuid": "1", "from": "B"}])
    assert await store.load({"project_key": a, "session_id": "s"}) == [{"type": "x", "uuid": "1", "from": "A"}]
    assert await store.load({"project_key": b, "session_id": "s"}) == [{"type": "x", "uuid": "1", "from": "B"}]


async def test_keys_are_free_form_strings_and_never_paths(store, server):
    project = fresh_project("../../etc/?a=1&b=%2F#x")
    keys = [
        {"project_key": project, "session_id": "/passwd\x00"},
        {"project_key": project, "session_id": "/passwd\x00", "subpath": "../../x y/é/%00"},
        {"project_key": project, "session_id": "日本語 セッション"},
    ]
    for n, key in enumerate(keys):
        await store.append(key, [{"type": "x", "n": n}])
    assert [await store.load(key) for key in keys] == [[{"type": "x", "n": n}] for n in range(3)]
    assert await store.list_subkeys(keys[0]) == ["../../x y/é/%00"]
    assert sorted(s["session_id"] for s in await store.list_sessions(project)) == ["/passwd\x00", "日本語 セッション"]
    actor_files = {p.stem for p in (server.data_dir / TRANSCRIPTS_NAMESPACE).glob("*/*.sqlite3")}
    for key in keys:
        assert id_from_name(TRANSCRIPTS_NAMESPACE, transcript_actor_name(key["project_key"], key["session_id"])).hex \
            in actor_files
    assert not any("passwd" in str(p) or "etc" in p.name for p in server.data_dir.rglob("*"))


async def test_reads_of_unknown_keys_create_no_actor(store, server):
    project = fresh_project()
    before = sorted((server.data_dir / TRANSCRIPTS_NAMESPACE).rglob("*.sqlite3"))
    assert await store.load({"project_key": project, "session_id": "never"}) is None
    assert await store.list_subkeys({"project_key": project, "session_id": "never"}) == []
    assert await store.delete({"project_key": project, "session_id": "never"}) == 0
    assert await store.list_sessions(project) == []
    assert sorted((server.data_dir / TRANSCRIPTS_NAMESPACE).rglob("*.sqlite3")) == before


async def test_summaries_are_the_sdk_fold_of_the_stored_main_transcript(store, test_data):
    project = fresh_project()
    key = {"project_key": project, "session_id": BRANCHING}
    entries = read_transcript_entries(test_data / "claude_code" / "projects" / SAMPLE / f"{BRANCHING}.jsonl")
    for start in range(0, len(entries), 7):
        await store.append(key, entries[start:start + 7])
    await store.append({**key, "subpath": "subagents/agent-1"}, [{"type": "user", "customTitle": "not main"}])
    expected = sdk_fold(None, key, entries)["data"]
    [summary] = await store.list_session_summaries(project)
    [listed] = await store.list_sessions(project)
    assert summary["data"] == expected
    assert summary["session_id"] == listed["session_id"] == BRANCHING
    assert summary["mtime"] == listed["mtime"]


async def test_a_batch_over_max_batch_bytes_is_sent_in_parts_and_stored_in_order(server):
    requests = []

    class Counting(httpx.AsyncHTTPTransport):
        async def handle_async_request(self, request):
            requests.append((request.method, request.url.path))
            return await super().handle_async_request(request)

    entries = [{"type": "x", "uuid": str(i), "pad": "p" * 200} for i in range(20)]
    key = {"project_key": fresh_project(), "session_id": "big"}
    async with DurableSessionStore(server.url, token=TOKEN, max_batch_bytes=1000, transport=Counting()) as store:
        assert await store.append(key, entries) == 20
        assert await store.load(key) == entries
    # about 235 bytes of JSON per entry: four per request
    assert requests == [("POST", "/v1/transcripts/entries")] * 5 + [("GET", "/v1/transcripts/entries")]


async def test_bad_input_is_refused_before_anything_is_stored(store, server):
    key = {"project_key": fresh_project(), "session_id": "s"}
    with pytest.raises(ValueError, match=r"entries\[1\] must be a JSON object"):
        await store.append(key, [{"type": "x"}, "line"])
    with pytest.raises(ValueError, match="subpath must be omitted or a non-empty string"):
        await store.append({**key, "subpath": ""}, [{"type": "x"}])
    with pytest.raises(ValueError, match="project_key must be a non-empty string"):
        await store.list_sessions("")
    async with SessionsClient(server.url, token=TOKEN) as client:
        with pytest.raises(InvalidInputError, match=r"entries\[0\] is not JSON") as caught:
            await client.request("POST", "/v1/transcripts/entries", body={"key": key, "entries": [{"n": float("nan")}]})
        assert caught.value.field == "entries"
        with pytest.raises(InvalidInputError, match="entries must be a list of JSON objects"):
            await client.request("POST", "/v1/transcripts/entries", body={"key": key, "entries": {"type": "x"}})
        with pytest.raises(InvalidInputError, match="key is missing"):
            await client.request("POST", "/v1/transcripts/entries", body={"entries": []})
        with pytest.raises(InvalidInputError, match="session key session_id must be a non-empty string, not None"):
            await client.request("GET", "/v1/transcripts/entries", params={"project_key": "p"})
    assert await store.load(key) is None


async def test_every_route_needs_the_token(server):
    async with DurableSessionStore(server.url, token="wrong") as store:
        with pytest.raises(UnauthorizedError, match="missing or wrong bearer token"):
            await store.load({"project_key": "p", "session_id": "s"})
        with pytest.raises(UnauthorizedError):
            await store.list_sessions("p")


async def test_load_answers_msgpack_when_asked(store, server):
    key = {"project_key": fresh_project(), "session_id": "s"}
    entries = [{"type": "x", "uuid": "a", "nested": {"list": [1, 2.5, None, True, "é"]}}]
    await store.append(key, entries)
    async with SessionsClient(server.url, token=TOKEN, encoding="msgpack") as client:
        reply = await client.request("GET", "/v1/transcripts/entries", params=key)
    assert reply == {"entries": entries}


# A call from a new loop makes a new pool and drops the old one unclosed (a pool cannot be closed from
# another loop); when the old sockets are collected, the stdlib (asyncio's selector transport and socket)
# warns "unclosed transport" / "unclosed <socket". This test does that on purpose, so it collects them
# itself and accepts that one warning.
@pytest.mark.filterwarnings("ignore:unclosed:ResourceWarning")
def test_one_store_serves_several_asyncio_loops(server):
    store = DurableSessionStore(server.url, token=TOKEN)
    key = {"project_key": fresh_project(), "session_id": "s"}
    asyncio.run(store.append(key, [{"type": "x", "uuid": "1"}]))
    asyncio.run(store.append(key, [{"type": "x", "uuid": "2"}]))

    async def load_and_close():
        try:
            return await store.load(key)
        finally:
            await store.aclose()

    assert asyncio.run(load_and_close()) == [{"type": "x", "uuid": "1"}, {"type": "x", "uuid": "2"}]
    gc.collect()  # the two abandoned pools, while this test's warning filter applies


async def test_the_sdk_store_helpers_work_over_http(store, test_data, tmp_path):
    project_dir = tmp_path / "project"
    project_dir.mkdir()
    directory = str(project_dir)
    project_key = project_key_for_directory(project_dir)
    for file in find_claude_code_files(test_data / "claude_code" / "projects"):
        await store.append({**file.transcript_key, "project_key": project_key}, read_transcript_entries(file.path))
    infos = await list_sessions_from_store(store, directory=directory)
    assert sorted((i.session_id, i.summary[:40]) for i in infos) == [
        ("4e27c414-a885-46a0-b5c8-d58e1417377d", "TUI Cache Handling: Empty State Fix"),
        (BRANCHING, "Please have a look at this patch diff, I"),
        ("94604a7b-062f-4369-bdf0-da948381c3e5", "What are the tools that are available to"),
    ]
    assert await list_subagents_from_store(store, WORKTREES, directory=directory) == ["aef063ba534d73153"]
    assert len(await get_subagent_messages_from_store(store, WORKTREES, "aef063ba534d73153", directory=directory)) == 16

    forked = await fork_session_via_store(store, BRANCHING, directory=directory, title="forked")
    source = await store.load({"project_key": project_key, "session_id": BRANCHING})
    copy = await store.load({"project_key": project_key, "session_id": forked.session_id})
    assert {e.get("sessionId") for e in copy if "sessionId" in e} == {forked.session_id}
    assert not {e["uuid"] for e in copy if "uuid" in e} & {e["uuid"] for e in source if "uuid" in e}
    await delete_session_via_store(store, forked.session_id, directory=directory)
    assert await store.load({"project_key": project_key, "session_id": forked.session_id}) is None
    assert len(await list_sessions_from_store(store, directory=directory)) == 3


# -- durability --------------------------------------------------------------------------


async def test_acknowledged_appends_survive_kill_9(tmp_path):
    key = {"project_key": "p", "session_id": "s"}
    sub = {**key, "subpath": "subagents/agent-1"}
    with server_process(tmp_path / "data", token=TOKEN) as first:
        async with DurableSessionStore(first.url, token=TOKEN) as store:
            await store.append(key, [{"type": "user", "uuid": "1", "customTitle": "kept"}])
            await store.append(sub, [{"type": "user", "uuid": "2"}])
            listed = await store.list_sessions("p")
        kill_hard(first)
    with server_process(tmp_path / "data", token=TOKEN) as second:
        async with DurableSessionStore(second.url, token=TOKEN) as store:
            assert await store.load(key) == [{"type": "user", "uuid": "1", "customTitle": "kept"}]
            assert await store.load(sub) == [{"type": "user", "uuid": "2"}]
            assert await store.list_sessions("p") == listed
            [summary] = await store.list_session_summaries("p")
            assert summary["data"]["custom_title"] == "kept"


# -- the in-process store and the actor ----------------------------------------------------


async def test_a_lost_catalog_row_is_rebuilt_from_the_stored_transcript(tmp_path):
    key = {"project_key": "p", "session_id": "s"}
    entries = [{"type": "user", "uuid": "1", "customTitle": "first", "cwd": "/w"},
               {"type": "user", "uuid": "2", "customTitle": "second"}]
    async with open_host(tmp_path / "data") as host, open_transcripts(host) as store:
        await store.append(key, entries)
        [before] = await store.list_session_summaries("p")
        store.catalog.forget("p", "s")  # as if the process died between the two commits
        assert await store.append(key, entries) == 0  # the SDK's retry
        [after] = await store.list_session_summaries("p")
    assert after["data"] == before["data"] == sdk_fold(None, key, entries)["data"]
    assert after["mtime"] > before["mtime"]


async def test_an_actor_refuses_a_key_of_another_pair(tmp_path):
    async with open_host(tmp_path / "data") as host, open_transcripts(host) as store:
        await store.append({"project_key": "p", "session_id": "s"}, [{"type": "x"}])
        stub = store.namespace.get(store.actor_id("p", "s"))
        with pytest.raises(Exception, match="holds project 'p' session 's', not project 'q' session 's'") as caught:
            await stub.call("append", {"project_key": "q", "session_id": "s"}, [{"type": "x"}])
        assert caught.value.status == 409
        assert await store.load({"project_key": "p", "session_id": "s"}) == [{"type": "x"}]


async def test_transcripts_survive_hibernation_and_deleting_a_session_empties_its_actor(tmp_path):
    key = {"project_key": "p", "session_id": "s"}
    async with open_host(tmp_path / "data") as host, open_transcripts(host) as store:
        await store.append(key, [{"type": "x", "uuid": "1"}])
        await store.append({**key, "subpath": "subagents/agent-1"}, [{"type": "x", "uuid": "2"}])
        assert await host.hibernate_all() == 1
        assert await store.load(key) == [{"type": "x", "uuid": "1"}]
        assert await store.delete(key) == 2
        assert await store.load(key) is None
        assert await store.list_subkeys(key) == []
        assert await store.list_sessions("p") == []
        # a deleted session starts over, under any key
        await store.append(key, [{"type": "x", "uuid": "1"}])
        assert await store.load(key) == [{"type": "x", "uuid": "1"}]


def test_actor_names_are_injective_json():
    assert transcript_actor_name("a", "b") == '["a","b"]'
    assert transcript_actor_name('a","b', "c") != transcript_actor_name("a", '"b","c')
    assert json.loads(transcript_actor_name("\ud800", "é")) == ["\ud800", "é"]
