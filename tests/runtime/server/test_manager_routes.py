"""The manager routes served by a real hypercorn server on loopback: statuses, bodies, errors, no stray files."""

import httpx
import pytest

from actors.session_agent import BlockConfig, SessionConfig
from actors.session_metadata import read_metadata
from runtime import open_host
from runtime.server.app import bind_sessions, serve
from runtime.server.config import ServerSettings
from runtime.server.managers import bind_managers
from runtime.testing import run_in_actor
from tests.support.processes import server_process

TOKEN = "manager-routes-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
M = "/v1/managers/user-7"
CONFIG = SessionConfig(blocks=(BlockConfig("soul", "readonly", text="You help travellers."),
                               BlockConfig("memory", "writable", max_tokens=200)))


def text(message_id, words, role="user"):
    return {"id": message_id, "role": role, "parts": [{"type": "text", "text": words}]}


def error(error_type, message, field=None):
    body = {"type": error_type, "message": message}
    if field is not None:
        body["field"] = field
    return {"error": body}


@pytest.fixture
async def host(tmp_path):
    async with open_host(tmp_path / "data") as host:
        bind_sessions(host, CONFIG)
        bind_managers(host, CONFIG)
        yield host


@pytest.fixture
async def http(host, nursery):
    urls = await nursery.start(lambda task_status: serve(host, ServerSettings(bind="127.0.0.1:0"), token=TOKEN,
                                                         task_status=task_status))
    async with httpx.AsyncClient(base_url=urls[0], headers=AUTH) as client:
        yield client


async def create(http, name="Lisbon", **options):
    response = await http.post(f"{M}/sessions", json={"name": name, **options})
    assert response.status_code == 201
    return response.json()["session"]


def manager_exists(host, name):
    namespace = host.namespace("managers")
    return namespace.exists(namespace.id_from_name(name))


# -- the registry -------------------------------------------------------------------------------------


async def test_create_answers_201_with_the_row_and_list_and_get_find_it(http):
    row = await create(http, "Lisbon", model="gpt-x", source="web", parentSessionId="earlier")
    assert {k: row[k] for k in ("name", "model", "source", "parent_session_id", "input_tokens", "end_reason")} == {
        "name": "Lisbon", "model": "gpt-x", "source": "web", "parent_session_id": "earlier", "input_tokens": 0,
        "end_reason": None}
    assert (await http.get(f"{M}/sessions")).json() == {"sessions": [row]}
    assert (await http.get(f"{M}/sessions/{row['id']}")).json() == {"session": row}


async def test_an_unknown_session_is_404_on_every_route_that_names_it(http):
    await create(http)
    for verb, path in [("GET", "sessions/nope"), ("PATCH", "sessions/nope"), ("DELETE", "sessions/nope"),
                       ("GET", "sessions/nope/messages"), ("GET", "sessions/nope/context"),
                       ("POST", "sessions/nope:add-usage")]:
        body = {"name": "x"} if verb == "PATCH" else {"inputTokens": 1, "outputTokens": 1, "cost": 0}
        response = await http.request(verb, f"{M}/{path}", json=body if verb in ("PATCH", "POST") else None)
        assert (response.status_code, response.json()) == (404, error("NotFoundError", "session 'nope' not found")), path


async def test_a_manager_never_written_answers_reads_without_creating_its_file(http, host):
    fresh = "/v1/managers/nobody"
    assert (await http.get(f"{fresh}/sessions")).json() == {"sessions": []}
    assert (await http.get(f"{fresh}/search", params={"q": "tea"})).json() == {"results": []}
    for path in ("sessions/s1", "sessions/s1/messages", "sessions/s1/system-prompt"):
        response = await http.get(f"{fresh}/{path}")
        assert (response.status_code, response.json()) == (404, error("NotFoundError", "session 's1' not found"))
    assert (await http.delete(f"{fresh}/sessions/s1")).status_code == 404
    assert not manager_exists(host, "nobody")


async def test_rename_delete_and_the_errors_of_missing_or_wrong_fields(http):
    row = await create(http)
    renamed = await http.patch(f"{M}/sessions/{row['id']}", json={"name": "Lisbon trip"})
    assert renamed.json()["session"]["name"] == "Lisbon trip"
    missing = await http.patch(f"{M}/sessions/{row['id']}", json={})
    assert (missing.status_code, missing.json()) == (400, error("InvalidInputError", "name is missing", "name"))
    wrong = await http.post(f"{M}/sessions", json={"name": 7})
    assert (wrong.status_code, wrong.json()) == (400, error("InvalidInputError", "name must be a string, not int",
                                                            "name"))
    assert (await http.delete(f"{M}/sessions/{row['id']}")).json() == {"deleted": True}
    assert (await http.get(f"{M}/sessions")).json() == {"sessions": []}


async def test_add_usage_sums_and_names_the_wire_field_it_refuses(http):
    row = await create(http)
    path = f"{M}/sessions/{row['id']}:add-usage"
    await http.post(path, json={"inputTokens": 10, "outputTokens": 4, "cost": 0.5})
    after = (await http.post(path, json={"inputTokens": 1, "outputTokens": 2, "cost": 0.25})).json()["session"]
    assert (after["input_tokens"], after["output_tokens"], after["estimated_cost"]) == (11, 6, 0.75)
    refused = await http.post(path, json={"inputTokens": -1, "outputTokens": 0, "cost": 0})
    assert (refused.status_code, refused.json()) == (
        400, error("InvalidInputError", "inputTokens must be an int >= 0, not -1", "inputTokens"))


async def test_fork_copies_the_path_with_new_ids_and_refuses_an_unknown_message(http):
    row = await create(http)
    session = f"{M}/sessions/{row['id']}"
    await http.post(f"{session}/messages:batch", json={"messages": [text("m1", "Hi"), text("m2", "Hello", "assistant"),
                                                                    text("m3", "Bye")]})
    forked = await http.post(f"{session}:fork", json={"atMessageId": "m2", "name": "plan B"})
    assert forked.status_code == 201
    fork = forked.json()["session"]
    assert (fork["name"], fork["parent_session_id"]) == ("plan B", row["id"])
    copied = (await http.get(f"{M}/sessions/{fork['id']}/messages")).json()["messages"]
    assert [m["parts"][0]["text"] for m in copied] == ["Hi", "Hello"]
    assert not {m["id"] for m in copied} & {"m1", "m2"}
    unknown = await http.post(f"{session}:fork", json={"atMessageId": "m9", "name": "x"})
    assert (unknown.status_code, unknown.json()) == (404, error("MessageNotFoundError", "message 'm9' not found"))


async def test_compact_and_split_ends_the_session_and_starts_one_from_the_summary(http):
    row = await create(http, "Porto", model="gpt-x")
    await http.post(f"{M}/sessions/{row['id']}/messages", json={"message": text("m1", "Plan Porto")})
    split = await http.post(f"{M}/sessions/{row['id']}:compact-and-split", json={"summary": "Porto planned"})
    assert split.status_code == 201
    new = split.json()["session"]
    assert (new["name"], new["parent_session_id"], new["model"]) == ("Porto", row["id"], "gpt-x")
    old = (await http.get(f"{M}/sessions/{row['id']}")).json()["session"]
    assert old["end_reason"] == "compaction"
    [message] = (await http.get(f"{M}/sessions/{new['id']}/messages")).json()["messages"]
    assert (message["role"], message["parts"]) == (
        "assistant", [{"type": "text", "text": "[Context from previous session]\n\nPorto planned"}])


# -- search and tools --------------------------------------------------------------------------------------


async def test_search_finds_messages_of_every_session_with_their_session_id(http):
    a, b = await create(http, "a"), await create(http, "b")
    await http.post(f"{M}/sessions/{a['id']}/messages", json={"message": text("m1", "Booking ZFA04Y")})
    await http.post(f"{M}/sessions/{b['id']}/messages", json={"message": text("m1", "Another ZFA04Y question")})
    hits = (await http.get(f"{M}/search", params={"q": "zfa04y", "limit": 5})).json()["results"]
    assert sorted((h["sessionId"], h["content"]) for h in hits) == sorted(
        [(a["id"], "Booking ZFA04Y"), (b["id"], "Another ZFA04Y question")])
    bad = await http.get(f"{M}/search", params={"q": "x", "limit": "many"})
    assert (bad.status_code, bad.json()) == (400, error("InvalidInputError", "limit must be an integer, not 'many'",
                                                        "limit"))


async def test_the_manager_tool_session_search_lists_and_runs(http):
    a = await create(http)
    await http.post(f"{M}/sessions/{a['id']}/messages", json={"message": text("m1", "Window seat please")})
    tools = (await http.get(f"{M}/tools")).json()["tools"]
    assert list(tools) == ["session_search"]
    assert tools["session_search"]["inputSchema"]["required"] == ["query"]
    ran = await http.post(f"{M}/tools/session_search", json={"query": "window"})
    assert ran.json() == {"result": "[user] Window seat please"}
    nothing = await http.post(f"{M}/tools/session_search", json={"query": "aisle"})
    assert nothing.json() == {"result": "No results found."}
    unknown = await http.post(f"{M}/tools/set_context", json={})
    assert (unknown.status_code, unknown.json()) == (404, error("NotFoundError", "no tool named 'set_context'"))


# -- managed sessions: the Session API under the manager ------------------------------------------------------


async def test_each_managed_session_has_its_own_blocks_prompt_and_metadata(http):
    a, b = await create(http, "a"), await create(http, "b")
    sa, sb = f"{M}/sessions/{a['id']}", f"{M}/sessions/{b['id']}"
    await http.put(f"{sa}/context/memory", json={"content": "Prefers aisle seats."})
    assert (await http.get(f"{sb}/context/memory")).json()["block"]["content"] == ""
    prompt = (await http.post(f"{sa}/system-prompt:refresh")).json()["prompt"]
    assert "You help travellers." in prompt and "Prefers aisle seats." in prompt
    await http.post(f"{sa}/rpc", json={"method": "set_metadata", "params": [{"title": "A"}]})
    assert (await http.post(f"{sb}/rpc", json={"method": "get_metadata"})).json() == {"result": {}}
    assert (await http.post(f"{sa}/rpc", json={"method": "get_metadata"})).json() == {"result": {"title": "A"}}


async def test_deleting_a_managed_session_deletes_its_metadata(http, host):
    a = await create(http)
    await http.post(f"{M}/sessions/{a['id']}/rpc", json={"method": "set_metadata", "params": [{"title": "A"}]})
    await http.delete(f"{M}/sessions/{a['id']}")
    stub = host.namespace("managers").get_by_name("user-7")
    assert await run_in_actor(stub, lambda agent: read_metadata(agent.storage, a["id"])) == {}


async def test_managed_sessions_survive_hibernation(http, host):
    a = await create(http)
    await http.post(f"{M}/sessions/{a['id']}/messages", json={"message": text("m1", "Remember ZFA04Y")})
    assert (await http.post("/v1/actors:hibernate")).json() == {"hibernated": 1}
    assert not host.is_active(host.namespace("managers"), host.namespace("managers").id_from_name("user-7"))
    assert (await http.get(f"{M}/sessions/{a['id']}/messages/m1")).json()["message"] == text("m1", "Remember ZFA04Y")


async def test_a_verb_no_route_takes_gets_the_paths_own_methods_over_a_real_server(http):
    a = await create(http)
    for path, allowed in [(f"{M}/sessions/{a['id']}/search", "GET"), (f"{M}/sessions", "POST, GET"),
                          ("/v1/sessions/x/search", "GET"), ("/v1/sessions/x/messages", "POST, GET, DELETE")]:
        for verb in ("MADEUP", "PATCH", "PUT"):
            answer = await http.request(verb, path)
            assert (answer.status_code, answer.headers["Allow"]) == (405, allowed), (verb, path)
            assert answer.json()["error"]["message"] == f"{verb} is not allowed on {path}; use {allowed}"
    assert (await http.request("MADEUP", f"{M}/sessions/{a['id']}/nothing")).status_code == 404


async def test_wrong_verbs_unknown_routes_and_bad_ids(http):
    a = await create(http)
    wrong = await http.patch(f"{M}/sessions/{a['id']}/messages")
    assert (wrong.status_code, wrong.headers["Allow"]) == (405, "POST, GET, DELETE")
    on_manager = await http.put(f"{M}/sessions")
    assert (on_manager.status_code, on_manager.headers["Allow"]) == (405, "POST, GET")
    unknown = await http.get(f"{M}/sessions/{a['id']}/nothing")
    assert (unknown.status_code, unknown.json()["error"]["type"]) == (404, "RouteNotFoundError")
    bad = await http.get("/v1/managers/%FF/sessions")
    assert (bad.status_code, bad.json()) == (400, error("InvalidInputError", "manager_id is not valid UTF-8",
                                                        "manager_id"))
    long = await http.get(f"/v1/managers/{'x' * 513}/sessions")
    assert (long.status_code, long.json()) == (
        400, error("InvalidInputError", "manager_id is 513 UTF-8 bytes; the limit is 512", "manager_id"))
    empty = await http.get("/v1/managers//sessions")
    assert (empty.status_code, empty.json()) == (400, error("InvalidInputError", "manager_id must not be empty",
                                                            "manager_id"))


async def test_rpc_of_a_managed_session_refuses_unknown_methods_and_bad_arguments(http):
    a = await create(http)
    rpc = f"{M}/sessions/{a['id']}/rpc"
    unknown = await http.post(rpc, json={"method": "call_session"})
    assert (unknown.status_code, unknown.json()) == (
        404, error("UnknownMethodError", "actor class ManagedSession has no callable method 'call_session'"))
    bad = await http.post(rpc, json={"method": "get_message", "params": []})
    assert bad.status_code == 400
    assert bad.json()["error"]["type"] == "InvalidArgumentsError"
    assert "missing a required argument: 'message_id'" in bad.json()["error"]["message"]


async def test_the_manager_routes_need_the_token(http):
    response = await http.get(f"{M}/sessions", headers={"Authorization": "Bearer wrong"})
    assert (response.status_code, response.json()["error"]["type"]) == (401, "UnauthorizedError")


async def test_metrics_label_manager_routes_by_their_template(http):
    a = await create(http)
    await http.get(f"{M}/sessions/{a['id']}/messages")
    metrics = (await http.get("/metrics")).text
    assert 'route="GET /v1/managers/{id}/sessions/{session_id}/messages"' in metrics
    assert 'route="POST /v1/managers/{id}/sessions"' in metrics


# -- the served command ---------------------------------------------------------------------------------


def test_durable_sessions_serve_binds_managers_and_their_sessions_outlive_a_restart(tmp_path):
    data = tmp_path / "data"
    with server_process(data, token=TOKEN) as server, httpx.Client(base_url=server.url, headers=AUTH) as http:
        row = http.post(f"{M}/sessions", json={"name": "Lisbon"}).json()["session"]
        http.post(f"{M}/sessions/{row['id']}/messages", json={"message": text("m1", "Remember ZFA04Y")})
    with server_process(data, token=TOKEN) as server, httpx.Client(base_url=server.url, headers=AUTH) as http:
        [listed] = http.get(f"{M}/sessions").json()["sessions"]
        assert (listed["id"], listed["name"]) == (row["id"], "Lisbon")
        assert http.get(f"{M}/search", params={"q": "zfa04y"}).json()["results"][0]["sessionId"] == row["id"]
