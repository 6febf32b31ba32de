"""The Session API table (runtime.api) against everything that spells the API: the Session, the actor
class, the HTTP routes, the client handle and the RPC of ``/rpc`` and WebSocket frames."""

import inspect
import json
import re
from types import FunctionType

import jsonschema
import pytest

from actors.agent import callable_method
from actors.session import Session
from actors.session_agent import TOOL_FORMATS, SessionAgent
from common import errors
from common.shapes import LATEST_LEAF
from runtime import api, open_host
from runtime.api import METHODS, SESSION_API, SESSION_EXCLUDED, ApiMethod, HttpRoute, Param
from runtime.client import SessionsClient
from runtime.client.http import SessionHandle
from runtime.server import routes
from runtime.server.app import bind_sessions, create_app, serve
from runtime.server.config import ServerSettings

TOKEN = "table-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
VALIDATOR = jsonschema.Draft202012Validator


def text(message_id, words, role="user"):
    return {"id": message_id, "role": role, "parts": [{"type": "text", "text": words}]}


#: One call of every method, in an order where each succeeds.
SCRIPT = [
    ("append_message", {"message": text("m1", "Booking ZFA04Y please")}),
    ("append_messages", {"messages": [text("m2", "Sure", "assistant"), text("m3", "Thanks")]}),
    ("get_history", {}),
    ("get_latest_leaf", {}),
    ("get_path_length", {"leaf_id": "m2"}),
    ("get_message", {"message_id": "m2"}),
    ("get_branches", {"message_id": "m1"}),
    ("update_message", {"message": text("m2", "Sure thing", "assistant")}),
    ("search", {"query": "zfa04y", "limit": 5}),
    ("search_status", {}),
    ("reembed", {}),
    ("set_metadata", {"metadata": {"title": "Booking"}}),
    ("get_metadata", {}),
    ("get_context_blocks", {}),
    ("get_context_block", {"label": "memory"}),
    ("replace_context_block", {"label": "memory", "content": "Likes tea"}),
    ("append_context_block", {"label": "memory", "content": "Window seat"}),
    ("freeze_system_prompt", {}),
    ("refresh_system_prompt", {}),
    ("tools", {"format": "openai"}),
    ("execute_tool", {"name": "set_context", "args": {"label": "memory", "content": "x", "action": "append"}}),
    ("add_compaction", {"summary": "booked", "from_id": "m1", "to_id": "m2"}),
    ("get_compactions", {}),
    ("compact", {}),
    ("estimate_tokens", {}),
    ("get_recent_history", {"max_bytes": 10_000}),
    ("get_loaded_skill_keys", {}),
    ("unload_skill", {"label": "skills", "key": "nope"}),
    ("delete_messages", {"message_ids": ["m3", "zz"]}),
    ("clear_messages", {}),
]
ARGS = dict(SCRIPT)


def test_the_script_calls_every_method_of_the_table_once():
    assert sorted(name for name, _ in SCRIPT) == sorted(METHODS)


# -- the table itself ------------------------------------------------------------------------------------


def test_names_are_unique_and_every_schema_is_valid_json_schema():
    assert len(METHODS) == len(SESSION_API)
    for method in SESSION_API:
        schemas = [method.result, *(p.schema for p in method.params)]
        for route in method.http:
            schemas += [api.response_schema(method, route), api.body_schema(method, route) or {}]
            schemas += [f.schema for f in route.fields if f.schema is not None]
        for schema in schemas:
            VALIDATOR.check_schema(schema)
        assert all(issubclass(e, errors.DurableSessionsError) and 400 <= e.status <= 599 for e in method.errors)


def test_a_route_must_fill_each_parameter_exactly_once():
    with pytest.raises(ValueError, match=r"x x: fills \[\], not each of \['a'\] once"):
        ApiMethod("x", "", (Param("a", api.STRING),), api.NULL, (), (HttpRoute("GET", "x"),))
    with pytest.raises(ValueError, match="x x: b fills no parameter"):
        ApiMethod("x", "", (), api.NULL, (), (HttpRoute("GET", "x", (api.query("b"),)),))


def test_the_tool_formats_are_the_actors():
    assert tuple(METHODS["tools"].params[0].schema["enum"]) == TOOL_FORMATS


# -- the Session and the actor class ---------------------------------------------------------------------


def public_methods(cls):
    return {
        name for name in dir(cls)
        if not name.startswith("_")
        and isinstance(inspect.getattr_static(cls, name), (FunctionType, classmethod, staticmethod))
    }


def shape(signature, *, drop_self=False):
    params = list(signature.parameters.values())[1 if drop_self else 0:]
    return [(p.name, p.kind, p.default) for p in params]


def test_every_public_session_method_is_in_the_table_or_excluded_with_a_reason():
    session = public_methods(Session)
    served = {m.name for m in SESSION_API if not m.actor_only}
    assert session - set(SESSION_EXCLUDED) == served
    assert set(SESSION_EXCLUDED) <= session, "an exclusion names no Session method"
    assert all(SESSION_EXCLUDED.values())
    assert {m.name for m in SESSION_API if m.actor_only}.isdisjoint(session)


@pytest.mark.parametrize("method", [m for m in SESSION_API if not m.actor_only], ids=lambda m: m.name)
def test_the_session_takes_the_table_parameters(method):
    own = inspect.signature(getattr(Session, method.name)).parameters
    for param in method.params:
        if param.actor_only:
            assert param.name not in own
            continue
        assert param.name in own
        assert own[param.name].default == (inspect.Parameter.empty if param.default is api.REQUIRED else param.default)
        assert (own[param.name].kind == inspect.Parameter.KEYWORD_ONLY) == param.keyword_only
    required = {name for name, p in own.items() if name != "self" and p.default is inspect.Parameter.empty}
    assert required <= {p.name for p in method.params}


def test_the_actor_serves_exactly_the_table():
    served = {name for name in dir(SessionAgent) if callable_method(SessionAgent, name) is not None}
    assert served == set(METHODS)


@pytest.mark.parametrize("method", SESSION_API, ids=lambda m: m.name)
def test_each_actor_method_has_the_table_signature(method):
    function = getattr(SessionAgent, method.name)
    assert inspect.iscoroutinefunction(function)
    assert shape(inspect.signature(function), drop_self=True) == shape(method.signature())


def test_the_actor_empty_reads_are_the_table_defaults():
    assert dict(SessionAgent.EMPTY_READS) == dict(api.EMPTY_READS)
    assert set(api.EMPTY_READS) == {"get_history", "get_message", "get_branches", "get_latest_leaf",
                                    "get_path_length", "search", "get_compactions", "get_loaded_skill_keys"}


async def test_each_empty_read_default_is_what_a_new_session_answers(tmp_path):
    async with open_host(tmp_path / "data") as host:
        bind_sessions(host)
        stub = host.namespace("sessions").get_by_name("fresh")
        answers = {name: await stub.call(name, **ARGS[name]) for name in api.EMPTY_READS}
    assert answers == dict(api.EMPTY_READS)


# -- the server routes -------------------------------------------------------------------------------------


def test_the_server_serves_the_table_routes_in_order_then_rpc():
    expected = [(route.verb, route.pattern) for _, route in api.http_routes()] + [("POST", ("rpc",))]
    assert [(r.method, r.pattern) for r in routes.ROUTES] == expected


@pytest.mark.parametrize(("segments", "allowed"), [
    (["messages"], ["POST", "GET", "DELETE"]),
    (["messages", "m1"], ["GET", "PUT", "DELETE"]),
    (["context", "memory"], ["GET", "PUT"]),
    (["context", "memory:append"], ["GET", "PUT", "POST"]),
    (["skills", "a", "b"], ["DELETE"]),
    (["rpc"], ["POST"]),
])
def test_a_wrong_verb_learns_the_verbs_of_its_path_in_table_order(segments, allowed):
    assert routes.match("PATCH", segments) == (None, allowed)


def test_the_route_table_in_the_docstring_is_the_table():
    assert api.describe_routes() in routes.__doc__


# -- the client handle ------------------------------------------------------------------------------------


def test_the_client_handle_offers_exactly_the_table():
    offered = {n for n in dir(SessionHandle) if not n.startswith("_") and inspect.isfunction(getattr(SessionHandle, n))}
    assert offered - {"call", "websocket", "events"} == set(METHODS)


@pytest.mark.parametrize("method", SESSION_API, ids=lambda m: m.name)
def test_each_client_method_has_the_table_signature(method):
    function = getattr(SessionHandle, method.name)
    assert inspect.iscoroutinefunction(function)
    assert shape(inspect.signature(function), drop_self=True) == shape(method.signature(client=True))


def test_requests_omit_an_absent_parent_and_fall_back_to_rpc_for_ids_no_path_can_carry():
    append = METHODS["append_message"]
    assert api.request_for(append, append.client_route, {"message": text("m1", "x")}) == (
        "POST", "messages", {"message": text("m1", "x")}, {})
    assert api.request_for(append, append.client_route, {"message": text("m1", "x"), "parent_id": None}).body == {
        "message": text("m1", "x"), "parentId": None}
    update, get = METHODS["update_message"], METHODS["get_message"]
    assert api.request_for(update, update.client_route, {"message": text("a/b", "x")}).path == "messages/a%2Fb"
    assert api.request_for(update, update.client_route, {"message": {"role": "user"}}) is None
    assert api.request_for(get, get.client_route, {"message_id": ""}) is None
    search = METHODS["search"]
    assert api.request_for(search, search.client_route, {"query": "tea"}) == ("GET", "search", None,
                                                                            {"q": "tea", "limit": 20, "mode": "text"})


# -- every method over every transport --------------------------------------------------------------------


def _random(key, value):
    return key == "createdAt" or (key == "id" and isinstance(value, str) and (
        value.startswith("compaction_") or re.fullmatch(r"[0-9a-f]{8}-[0-9a-f-]{27}", value)))


def _no_times(value):
    if isinstance(value, dict):
        return {k: _no_times(v) for k, v in value.items() if not _random(k, v)}
    if isinstance(value, (list, tuple)):
        return [_no_times(v) for v in value]
    return value


async def _run(call):
    results = []
    for name, kwargs in SCRIPT:
        result = await call(name, kwargs)
        jsonschema.validate(result, METHODS[name].result, cls=VALIDATOR)
        results.append((name, result))
    return results


@pytest.fixture
async def host(tmp_path):
    async with open_host(tmp_path / "data") as host:
        bind_sessions(host)
        yield host


async def test_every_method_answers_alike_in_process_over_http_and_over_websocket_rpc(host, nursery):
    urls = await nursery.start(lambda task_status: serve(host, ServerSettings(bind="127.0.0.1:0"), token=TOKEN,
                                                         task_status=task_status))
    stub = host.namespace("sessions").get_by_name("in-process")
    in_process = await _run(lambda name, kwargs: getattr(stub, name)(**kwargs))
    async with SessionsClient(urls[0], token=TOKEN) as client:
        handle = client.session("over-http")
        over_http = await _run(lambda name, kwargs: getattr(handle, name)(**kwargs))
        async with client.session("over-websocket").websocket() as socket:
            over_websocket = await _run(lambda name, kwargs: socket.call(name, **kwargs))
    assert _no_times(over_http) == _no_times(in_process) == _no_times(over_websocket)
    assert dict(in_process)["get_history"] == [text("m1", "Booking ZFA04Y please"), text("m2", "Sure", "assistant"),
                                               text("m3", "Thanks")]


#: Arguments for a route that the method's script call would not suit.
ROUTE_ARGS = {("DELETE", "messages/{message_id}"): {"message_ids": ["m2"]}}


async def test_every_route_answers_the_shape_and_status_the_table_declares(host):
    app = create_app(host, token=TOKEN)
    client = app.test_client()
    seen = []
    for method, route in api.http_routes():
        args = ROUTE_ARGS.get((route.verb, route.path), ARGS[method.name])
        request = api.request_for(method, route, args)
        if request.body is not None:
            jsonschema.validate(request.body, api.body_schema(method, route), cls=VALIDATOR)
        status, reply = await _send(client, request)
        jsonschema.validate(reply, api.response_schema(method, route), cls=VALIDATOR)
        seen.append((route.verb, route.path, status))
    created = [(verb, path) for verb, path, status in seen if status == 201]
    assert created == [("POST", "messages"), ("POST", "messages:batch")]
    assert all(status in (200, 201) for _, _, status in seen)


async def _send(client, request):
    path = f"/v1/sessions/routes/{request.path}"
    options = {"headers": dict(AUTH), "scope_base": {"raw_path": path.encode("ascii")},
               "query_string": {k: v for k, v in request.query.items() if v is not None}}
    if request.body is not None:
        options["data"] = json.dumps(request.body)
        options["headers"]["Content-Type"] = "application/json"
    response = await client.open(path, method=request.verb, **options)
    return response.status_code, json.loads(await response.get_data())


def test_the_parent_default_is_the_shared_latest_leaf():
    assert METHODS["append_message"].params[1].default is LATEST_LEAF
