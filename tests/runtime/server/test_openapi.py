"""``GET /openapi.json`` and ``GET /docs`` of a real server: a valid OpenAPI 3.1 document generated from the
tables (every route, body, reply and error status), the token rule, and Swagger UI served from package files."""

import httpx
import jsonschema
import pytest
import trio
from openapi_spec_validator import OpenAPIV31SpecValidator

from runtime import api, open_host
from runtime.manager_api import MANAGER_API
from runtime.server import app as app_module
from runtime.server.app import bind_sessions, serve
from runtime.server.config import ServerSettings
from runtime.server.managers import bind_managers
from runtime.server.openapi import DOCS_ASSETS, assets_folder, openapi_document
from runtime.server.transcripts import open_transcripts
from storage import errors
from tests.support.browser import chromium_binary

TOKEN = "openapi-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
VERBS = ("get", "post", "put", "patch", "delete")


@pytest.fixture
async def served(tmp_path, nursery):
    """``(url, host)`` of a server with sessions, managers and transcripts bound and a token."""
    async with open_host(tmp_path / "data") as host, open_transcripts(host):
        bind_sessions(host)
        bind_managers(host)
        urls = await nursery.start(lambda task_status: serve(host, ServerSettings(bind="127.0.0.1:0"), token=TOKEN,
                                                             task_status=task_status))
        yield urls[0], host


@pytest.fixture
async def document(served):
    async with httpx.AsyncClient(base_url=served[0], headers=AUTH) as http:
        response = await http.get("/openapi.json")
    assert (response.status_code, response.headers["Content-Type"]) == (200, "application/json")
    return response.json()


def resolve(document, schema):
    """``schema`` with every ``$ref`` into ``components/schemas`` replaced by what it names."""
    if isinstance(schema, list):
        return [resolve(document, item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if set(schema) == {"$ref"}:
        return resolve(document, document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]])
    return {key: resolve(document, value) for key, value in schema.items()}


def without_titles(schema):
    if isinstance(schema, list):
        return [without_titles(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    return {k: without_titles(v) for k, v in schema.items() if not (k == "title" and isinstance(v, str))}


def operations(document):
    for path, item in document["paths"].items():
        for verb, operation in item.items():
            yield path, verb, operation


# -- the document ------------------------------------------------------------------------------------------


async def test_the_served_document_is_valid_openapi_3_1(document):
    OpenAPIV31SpecValidator(document).validate()
    assert (document["openapi"], document["info"]["title"], document["info"]["license"]) == (
        "3.1.0", "durable-sessions", {"name": "MIT", "identifier": "MIT"})


@pytest.mark.parametrize(("token", "managers", "transcripts"), [(False, False, False), (True, True, True),
                                                                (False, True, False)])
def test_every_variant_of_the_document_is_valid(token, managers, transcripts):
    document = openapi_document(token=token, managers=managers, transcripts=transcripts, version="1.2.3")
    OpenAPIV31SpecValidator(document).validate()
    assert any(p.startswith("/v1/managers/") for p in document["paths"]) is managers
    assert any(p.startswith("/v1/transcripts/") for p in document["paths"]) is transcripts
    assert ("security" in document) is token


TABLES = [
    (api.SESSION_API, "/v1/sessions/{session_id}", "session"),
    (MANAGER_API, "/v1/managers/{manager_id}", "manager"),
    (api.SESSION_API, "/v1/managers/{manager_id}/sessions/{session_id}", "managed_session"),
]


@pytest.mark.parametrize(("table", "base", "prefix"), TABLES, ids=[t[2] for t in TABLES])
async def test_every_route_of_the_tables_is_described_with_its_bodies(document, table, base, prefix):
    for method, route in api.http_routes(table):
        operation = document["paths"][f"{base}/{route.path}"][route.verb.lower()]
        assert operation["operationId"].startswith(f"{prefix}.{method.name}")
        assert operation["summary"] == method.summary
        success = operation["responses"]["201" if route.created else "200"]
        for kind in ("application/json", "application/msgpack"):
            described = resolve(document, success["content"][kind]["schema"])
            assert without_titles(described) == without_titles(api.response_schema(method, route))
        sent = api.body_schema(method, route)
        if sent is None:
            assert "requestBody" not in operation
        else:
            described = resolve(document, operation["requestBody"]["content"]["application/json"]["schema"])
            assert without_titles(described) == without_titles(sent)
        queried = {p["name"]: p["required"] for p in operation["parameters"] if p["in"] == "query"}
        assert queried == {f.wire: f.absent is api.REQUIRED for f in route.fields if f.source == "query"}


async def test_each_operation_lists_the_statuses_of_the_errors_its_method_raises(document):
    for table, base, _ in TABLES:
        for method, route in api.http_routes(table):
            responses = document["paths"][f"{base}/{route.path}"][route.verb.lower()]["responses"]
            for cls in (*method.errors, errors.UnauthorizedError, errors.ActorOverloadedError):
                assert cls.__name__ in responses[str(cls.status)]["description"], (method.name, cls)
            if route.has_body:
                assert {"413", "415"} <= set(responses)
            for status, response in responses.items():
                if int(status) >= 400:
                    assert response["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Error"}


async def test_the_history_route_declares_the_404_of_a_before_no_message_has(document):
    responses = document["paths"]["/v1/sessions/{session_id}/messages"]["get"]["responses"]
    assert "MessageNotFoundError" in responses["404"]["description"]
    assert "InvalidInputError" in responses["400"]["description"]


async def test_the_managed_session_routes_declare_the_404_of_an_unknown_session(document):
    responses = document["paths"]["/v1/managers/{manager_id}/sessions/{session_id}/messages"]["get"]["responses"]
    assert "NotFoundError" in responses["404"]["description"]


async def test_a_real_error_body_fits_the_error_schema(served, document):
    async with httpx.AsyncClient(base_url=served[0], headers=AUTH) as http:
        bodies = [(await http.get("/v1/sessions/s/messages/m9")).json(),
                  (await http.post("/v1/sessions/s/messages", json={"message": {"id": 1}})).json(),
                  (await http.get("/v1/managers/u/sessions/nope")).json()]
    error_schema = document["components"]["schemas"]["Error"]
    for body in bodies:
        jsonschema.validate(body, error_schema, cls=jsonschema.Draft202012Validator)
    assert [b["error"]["type"] for b in bodies] == ["MessageNotFoundError", "InvalidMessageError", "NotFoundError"]


async def test_every_plain_route_of_the_app_is_in_the_document(served, document):
    app = app_module.SessionsServer(served[1], namespace="sessions", token=TOKEN, max_body_bytes=1024).app
    described = {(path, verb.upper()) for path, verb, _ in operations(document)}
    for rule in app.url_map.iter_rules():
        if "<rest" in rule.rule or rule.rule == "/docs/static/<name>":
            continue  # the table routes (checked above) and the page's own files
        for verb in rule.methods - {"HEAD", "OPTIONS"}:
            assert (rule.rule, verb) in described, rule.rule


async def test_the_websocket_route_is_described_as_one(document):
    operation = document["paths"]["/v1/sessions/{session_id}/ws"]["get"]
    assert operation["x-websocket"] is True
    assert set(operation["responses"]) >= {"101", "400", "404"}


async def test_links_lead_from_created_sessions_and_messages_to_the_routes_that_name_them(document):
    created = document["paths"]["/v1/managers/{manager_id}/sessions"]["post"]["responses"]["201"]["links"]
    assert created["managed_session.get_history"] == {"operationId": "managed_session.get_history", "parameters": {
        "manager_id": "$request.path.manager_id", "session_id": "$response.body#/session/id"}}
    assert "session.get_history" not in created
    appended = document["paths"]["/v1/sessions/{session_id}/messages"]["post"]["responses"]["201"]["links"]
    assert sorted(appended) == ["session.delete_messages_2", "session.get_branches", "session.get_message",
                                "session.update_message"]


# -- the token, the page and its files ------------------------------------------------------------------------------


async def test_the_document_needs_the_token_like_every_route_but_health_and_the_page(served):
    async with httpx.AsyncClient(base_url=served[0]) as http:
        refused = await http.get("/openapi.json")
        allowed = await http.get("/openapi.json", headers=AUTH)
    assert (refused.status_code, refused.json()["error"]["type"]) == (401, "UnauthorizedError")
    assert allowed.status_code == 200


@pytest.mark.parametrize("path", ["/docs", "/docs/static/swagger-ui.css"])
async def test_the_page_and_its_files_need_no_token_the_page_asks_for_it(served, path):
    async with httpx.AsyncClient(base_url=served[0]) as http:
        answer = await http.get(path)
    assert answer.status_code == 200
    if path == "/docs":
        assert '<body data-needs-token="true">' in answer.text
        assert '<input id="token" type="password"' in answer.text
        assert answer.headers["Cache-Control"] == "no-store"


async def test_the_document_says_which_routes_need_the_token(document):
    assert document["security"] == [{"bearerAuth": []}]
    assert document["components"]["securitySchemes"]["bearerAuth"] == {"type": "http", "scheme": "bearer"}
    assert document["paths"]["/v1/health"]["get"]["security"] == []
    assert "401" not in document["paths"]["/v1/health"]["get"]["responses"]
    assert "401" not in document["paths"]["/docs"]["get"]["responses"]
    assert document["paths"]["/docs"]["get"]["security"] == []
    assert "401" in document["paths"]["/openapi.json"]["get"]["responses"]


async def test_the_page_loads_only_files_of_this_server(served):
    async with httpx.AsyncClient(base_url=served[0], headers=AUTH) as http:
        page = await http.get("/docs")
        script = await http.get("/docs/static/docs.js")
        files = {name: await http.get(f"/docs/static/{name}") for name in DOCS_ASSETS}
        unknown = await http.get("/docs/static/..%2F..%2Fsetup.py")
    assert page.headers["Content-Type"] == "text/html; charset=utf-8"
    assert "://" not in page.text  # no CDN, no absolute URL at all
    assert '<script src="docs/static/docs.js"></script>' in page.text and "<script>" not in page.text
    assert 'url: "openapi.json"' in script.text and "validatorUrl: null" in script.text
    for name, response in files.items():
        assert (response.status_code, response.headers["Content-Type"]) == (200, DOCS_ASSETS[name])
        assert response.content == (assets_folder() / name).read_bytes()
    assert (unknown.status_code, unknown.json()["error"]["type"]) == (404, "RouteNotFoundError")


# -- Swagger UI in a real browser ------------------------------------------------------------------------------------


@pytest.fixture
def chromium() -> str:
    """The browser, looked up before the test runs: a skip raised inside trio loses its reason."""
    return chromium_binary()


async def test_swagger_ui_renders_the_document_in_headless_chromium_with_no_other_host(tmp_path, nursery, chromium):
    browser = chromium
    async with open_host(tmp_path / "data") as host:
        bind_sessions(host)
        bind_managers(host)
        urls = await nursery.start(lambda task_status: serve(host, ServerSettings(bind="127.0.0.1:0"),
                                                             task_status=task_status))
        command = [browser, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'profile'}",
                   "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", "--virtual-time-budget=10000",
                   "--dump-dom", f"{urls[0]}/docs"]
        result = await trio.run_process(command, capture_stdout=True, capture_stderr=True, check=False)
    dom = result.stdout.decode("utf-8")
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    assert 'data-path="/v1/sessions/{session_id}/messages"' in dom
    assert 'data-path="/v1/managers/{manager_id}/sessions/{session_id}/search"' in dom
    assert "Append a message under a parent" in dom
    assert "Unable to render this definition" not in dom
