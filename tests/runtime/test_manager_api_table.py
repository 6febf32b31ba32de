"""The manager table (runtime.manager_api) against everything that spells it: SessionManager, the manager
actor, its managed sessions, the server routes and the client handles; every method in process and over HTTP."""

import inspect
import re

import jsonschema
import pytest

from actors.agent import callable_method
from actors.manager import SessionManager
from actors.manager_agent import MANAGED_METHODS, ManagedSession, ManagerAgent
from actors.session_agent import BlockConfig, SessionConfig
from common import errors
from runtime import api, open_host
from runtime.api import METHODS, SESSION_API
from runtime.client import ManagedSessionHandle, ManagerHandle, SessionsClient
from runtime.manager_api import (
    MANAGER_API,
    MANAGER_EMPTY_READS,
    MANAGER_EXCLUDED,
    MANAGER_METHODS,
)
from runtime.server import managers as manager_routes
from runtime.server import routes
from runtime.server.app import bind_sessions, serve
from runtime.server.config import ServerSettings
from runtime.server.managers import MANAGER_ROUTES, bind_managers
from runtime.testing import run_in_actor
from storage import SqlStorage

TOKEN = "manager-table-token"
VALIDATOR = jsonschema.Draft202012Validator


def text(message_id, words, role="user"):
    return {"id": message_id, "role": role, "parts": [{"type": "text", "text": words}]}


def public_methods(cls):
    """Public callables of ``cls`` read from the class (functions, and ``create``'s class-or-instance method)."""
    return {name for name in dir(cls) if not name.startswith("_") and callable(getattr(cls, name))}


def shape(signature, *, drop_self=False):
    params = list(signature.parameters.values())[1 if drop_self else 0:]
    return [(p.name, p.kind, p.default) for p in params]


# -- the table itself ------------------------------------------------------------------------------------


def test_names_are_unique_and_every_schema_is_valid_json_schema():
    assert len(MANAGER_METHODS) == len(MANAGER_API)
    for method in MANAGER_API:
        schemas = [method.result, *(p.schema for p in method.params)]
        for route in method.http:
            schemas += [api.response_schema(method, route), api.body_schema(method, route) or {}]
        for schema in schemas:
            VALIDATOR.check_schema(schema)
        assert all(issubclass(e, errors.DurableSessionsError) and 400 <= e.status <= 599 for e in method.errors)


# -- SessionManager --------------------------------------------------------------------------------------


def test_every_public_manager_method_is_in_the_table_or_excluded_with_a_reason():
    manager = public_methods(SessionManager)
    served = {m.name for m in MANAGER_API if not m.actor_only}
    assert manager - set(MANAGER_EXCLUDED) == served
    assert set(MANAGER_EXCLUDED) <= manager, "an exclusion names no SessionManager method"
    assert all(MANAGER_EXCLUDED.values())
    assert {m.name for m in MANAGER_API if m.actor_only}.isdisjoint(manager)


@pytest.fixture
def manager(tmp_path):
    storage = SqlStorage.open(tmp_path / "m.sqlite3")
    yield SessionManager.create(storage)
    storage.close()


@pytest.mark.parametrize("method", [m for m in MANAGER_API if not m.actor_only], ids=lambda m: m.name)
def test_the_manager_takes_the_table_parameters(manager, method):
    own = inspect.signature(getattr(manager, method.name)).parameters
    for param in method.params:
        if param.actor_only:
            assert param.name not in own
            continue
        assert param.name in own
        assert own[param.name].default == (inspect.Parameter.empty if param.default is api.REQUIRED else param.default)
        assert (own[param.name].kind == inspect.Parameter.KEYWORD_ONLY) == param.keyword_only
    required = {name for name, p in own.items() if p.default is inspect.Parameter.empty}
    assert required <= {p.name for p in method.params}


# -- the manager actor and its managed sessions ------------------------------------------------------------


def test_the_manager_actor_serves_exactly_the_table_and_call_session():
    served = {name for name in dir(ManagerAgent) if callable_method(ManagerAgent, name) is not None}
    assert served == set(MANAGER_METHODS) | {"call_session"}


@pytest.mark.parametrize("method", MANAGER_API, ids=lambda m: m.name)
def test_each_manager_actor_method_has_the_table_signature(method):
    function = getattr(ManagerAgent, method.name)
    assert inspect.iscoroutinefunction(function)
    assert shape(inspect.signature(function), drop_self=True) == shape(method.signature())


def test_the_manager_empty_reads_are_the_table_defaults():
    assert dict(ManagerAgent.EMPTY_READS) == dict(MANAGER_EMPTY_READS) == {"list": [], "get": None, "search": []}


async def test_each_empty_read_default_is_what_a_new_manager_answers(tmp_path):
    arguments = {"list": {}, "get": {"session_id": "nope"}, "search": {"query": "tea"}}
    async with open_host(tmp_path / "data") as host:
        stub = bind_managers(host).get_by_name("fresh")
        answers = {name: await stub.call(name, **arguments[name]) for name in MANAGER_EMPTY_READS}
    assert answers == dict(MANAGER_EMPTY_READS)


def test_a_managed_session_serves_exactly_the_session_api_with_its_signatures():
    assert MANAGED_METHODS == set(METHODS)
    for method in SESSION_API:
        function = getattr(ManagedSession, method.name)
        assert inspect.iscoroutinefunction(function)
        assert shape(inspect.signature(function), drop_self=True) == shape(method.signature())


async def test_the_manager_is_configured_from_the_same_session_config(tmp_path):
    config = SessionConfig(blocks=(BlockConfig("soul", "readonly", text="Be brief."),
                                   BlockConfig("notes", "writable", max_tokens=50)))
    async with open_host(tmp_path / "data") as host:
        stub = bind_managers(host, config).get_by_name("u")
        spec = await run_in_actor(stub, lambda agent: agent.manager.spec)
        row = await stub.create("chat")
        blocks = await stub.call_session(row["id"], "get_context_blocks")
    assert spec == config.spec
    assert [(b["label"], b["content"], b["maxTokens"]) for b in blocks] == [("soul", "Be brief.", None),
                                                                           ("notes", "", 50)]


def test_a_manager_actor_refuses_a_foreign_env():
    with pytest.raises(TypeError, match="ManagerAgent needs a SessionConfig as env, not dict"):
        ManagerAgent(None, {})


# -- the server routes and the client handles --------------------------------------------------------------


def test_the_server_serves_the_manager_table_routes_in_order_then_rpc():
    expected = [(route.verb, route.pattern) for _, route in api.http_routes(MANAGER_API)] + [("POST", ("rpc",))]
    assert [(r.method, r.pattern) for r in MANAGER_ROUTES] == expected


def test_the_manager_route_table_in_the_docstring_is_the_table():
    assert api.describe_routes(MANAGER_API, "/v1/managers/{id}") in manager_routes.__doc__


@pytest.mark.parametrize(("segments", "allowed"), [
    (["sessions"], ["POST", "GET"]),
    (["sessions", "s1"], ["GET", "PATCH", "DELETE"]),
    (["sessions", "s1:fork"], ["GET", "PATCH", "DELETE", "POST"]),
    (["tools", "session_search"], ["POST"]),
])
def test_a_wrong_verb_learns_the_verbs_of_its_manager_path_in_table_order(segments, allowed):
    assert routes.match("PUT", segments, MANAGER_ROUTES) == (None, allowed)


def test_the_manager_handle_offers_exactly_the_table():
    offered = {n for n in dir(ManagerHandle) if not n.startswith("_") and inspect.isfunction(getattr(ManagerHandle, n))}
    assert offered - {"call", "session", "get_session"} == set(MANAGER_METHODS)


@pytest.mark.parametrize("method", MANAGER_API, ids=lambda m: m.name)
def test_each_manager_handle_method_has_the_table_signature(method):
    function = getattr(ManagerHandle, method.name)
    assert inspect.iscoroutinefunction(function)
    assert shape(inspect.signature(function), drop_self=True) == shape(method.signature(client=True))


def test_a_managed_session_handle_is_a_session_handle_under_the_manager_path():
    client = SessionsClient("http://127.0.0.1:1")
    handle = client.manager("user 7").session("a/b")
    assert isinstance(handle, ManagedSessionHandle)
    assert handle.path == "/v1/managers/user%207/sessions/a%2Fb"
    assert repr(handle) == "<ManagedSessionHandle 'user 7'/'a/b'>"
    with pytest.raises(NotImplementedError, match="managed sessions have no WebSocket route yet"):
        handle.events()


# -- every method in process and over HTTP ------------------------------------------------------------------


#: One call of every manager method, in an order where each succeeds; "<a>" / "<b>" stand for created ids.
SCRIPT = [
    ("create", {"name": "Lisbon", "model": "gpt-x", "source": "web"}),
    ("create", {"name": "Porto"}),
    ("append", {"session_id": "<a>", "message": text("m1", "Booking ZFA04Y please")}),
    ("append_all", {"session_id": "<a>", "messages": [text("m2", "Sure", "assistant"), text("m3", "Thanks")]}),
    ("upsert", {"session_id": "<a>", "message": text("m2", "Sure thing", "assistant")}),
    ("get_history", {"session_id": "<a>"}),
    ("get_message_count", {"session_id": "<a>"}),
    ("get_branches", {"session_id": "<a>", "message_id": "m1"}),
    ("search", {"query": "zfa04y", "limit": 5}),
    ("tools", {"format": "anthropic"}),
    ("execute_tool", {"name": "session_search", "args": {"query": "booking"}}),
    ("add_compaction", {"session_id": "<a>", "summary": "booked", "from_id": "m1", "to_id": "m2"}),
    ("get_compactions", {"session_id": "<a>"}),
    ("add_usage", {"session_id": "<a>", "input_tokens": 10, "output_tokens": 5, "cost": 0.25}),
    ("rename", {"session_id": "<a>", "name": "Lisbon trip"}),
    ("get", {"session_id": "<a>"}),
    ("fork", {"session_id": "<a>", "at_message_id": "m2", "name": "Lisbon, plan B"}),
    ("compact_and_split", {"session_id": "<b>", "summary": "Porto was discussed"}),
    ("delete_messages", {"session_id": "<a>", "message_ids": ["m3", "zz"]}),
    ("clear_messages", {"session_id": "<a>"}),
    ("delete", {"session_id": "<b>"}),
    ("list", {}),
]


def test_the_script_calls_every_manager_method():
    assert {name for name, _ in SCRIPT} == set(MANAGER_METHODS)


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _stable(value):
    """``value`` without what differs between runs: times, and random ids (kept as ``<uuid>``)."""
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if k not in ("createdAt", "created_at", "updated_at")}
    if isinstance(value, (list, tuple)):
        return [_stable(v) for v in value]
    if isinstance(value, str):
        return _UUID.sub("<uuid>", value)
    return value


async def _run(call):
    results, ids = [], []
    for name, kwargs in SCRIPT:
        kwargs = {k: {"<a>": ids[0] if ids else None, "<b>": ids[1] if len(ids) > 1 else None}.get(v, v)
                  if isinstance(v, str) else v for k, v in kwargs.items()}
        result = await call(name, kwargs)
        jsonschema.validate(result, MANAGER_METHODS[name].result, cls=VALIDATOR)
        if name == "create":
            ids.append(result["id"])
        results.append((name, result))
    return results


async def test_every_manager_method_answers_alike_in_process_and_over_http(tmp_path, nursery):
    async with open_host(tmp_path / "data") as host:
        bind_sessions(host)
        bind_managers(host)
        urls = await nursery.start(lambda task_status: serve(host, ServerSettings(bind="127.0.0.1:0"), token=TOKEN,
                                                             task_status=task_status))
        stub = host.namespace("managers").get_by_name("in-process")
        in_process = await _run(lambda name, kwargs: stub.call(name, **kwargs))
        async with SessionsClient(urls[0], token=TOKEN) as client:
            handle = client.manager("over-http")
            over_http = await _run(lambda name, kwargs: getattr(handle, name)(**kwargs))
    assert _stable(over_http) == _stable(in_process)
    answers = dict(in_process)
    assert [m["id"] for m in answers["get_history"]] == ["m1", "m2", "m3"]
    assert answers["get_history"][1] == text("m2", "Sure thing", "assistant")
    assert answers["execute_tool"] == "[user] Booking ZFA04Y please"
    assert (answers["get"]["name"], answers["get"]["input_tokens"], answers["get"]["estimated_cost"]) == (
        "Lisbon trip", 10, 0.25)
    assert [(row["name"], row["parent_session_id"] is not None) for row in answers["list"]] == [
        ("Lisbon trip", False), ("Porto", True), ("Lisbon, plan B", True)]


async def test_every_session_method_answers_alike_on_a_managed_session_and_a_session_actor(tmp_path, nursery):
    from tests.runtime.test_api_table import SCRIPT as SESSION_SCRIPT
    from tests.runtime.test_api_table import _no_times

    async def run(handle):
        results = []
        for name, kwargs in SESSION_SCRIPT:
            result = await getattr(handle, name)(**kwargs)
            jsonschema.validate(result, METHODS[name].result, cls=VALIDATOR)
            results.append((name, result))
        return results

    async with open_host(tmp_path / "data") as host:
        bind_sessions(host)
        bind_managers(host)
        urls = await nursery.start(lambda task_status: serve(host, ServerSettings(bind="127.0.0.1:0"), token=TOKEN,
                                                             task_status=task_status))
        async with SessionsClient(urls[0], token=TOKEN) as client:
            manager = client.manager("user-7")
            managed = await run(await manager.get_session((await manager.create("chat"))["id"]))
            plain = await run(client.session("plain"))
    assert _no_times(managed) == _no_times(plain)
    assert dict(managed)["get_metadata"] == {"title": "Booking"}
