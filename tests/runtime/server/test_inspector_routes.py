"""``GET /inspect`` of a real server: the page and its files from the package, the token rule, the
Content-Security-Policy, the ``[server] inspector`` switch, and a script that never parses data as markup.

The page itself is driven in headless Chromium by ``test_inspector_browser.py``.
"""

import re
import subprocess
import sys
import zipfile
from contextlib import asynccontextmanager
from importlib import resources

import httpx
import pytest

from runtime import open_host
from runtime.server import inspector
from runtime.server.app import bind_sessions, serve
from runtime.server.config import ConfigError, ServerSettings, load_config
from tests.support.data import REPO_ROOT

TOKEN = "inspector-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
STATIC = resources.files("runtime.server.inspector").joinpath("static")


@asynccontextmanager
async def served(tmp_path, nursery, settings=None, token=None):
    """The URL of a real server (``serve``) over a fresh host."""
    async with open_host(tmp_path / "data") as host:
        bind_sessions(host)
        settings = settings or ServerSettings(bind="127.0.0.1:0")
        urls = await nursery.start(lambda task_status: serve(host, settings, token=token, task_status=task_status))
        yield urls[0]


@pytest.fixture
async def url(tmp_path, nursery):
    async with served(tmp_path, nursery, token=TOKEN) as found:
        yield found


async def test_the_page_and_its_files_come_from_the_package_with_their_types(url):
    async with httpx.AsyncClient(base_url=url, headers=AUTH) as http:
        page = await http.get("/inspect")
        files = {name: await http.get(f"/inspect/static/{name}") for name in inspector.ASSETS}
    assert (page.status_code, page.headers["Content-Type"]) == (200, "text/html; charset=utf-8")
    assert page.content == STATIC.joinpath("index.html").read_bytes()
    for name, response in files.items():
        assert (response.status_code, response.headers["Content-Type"]) == (200, inspector.ASSETS[name])
        assert response.content == STATIC.joinpath(name).read_bytes()
    assert sorted(p.name for p in STATIC.iterdir()) == sorted([inspector.PAGE, *inspector.ASSETS])


async def test_the_page_loads_only_files_of_this_server_and_no_inline_script_or_style(url):
    async with httpx.AsyncClient(base_url=url, headers=AUTH) as http:
        page = (await http.get("/inspect")).text
    assert "://" not in page  # no CDN, no absolute URL at all
    assert re.findall(r'<script\b[^>]*>', page) == ['<script src="inspect/static/inspector.js" defer>']
    assert re.findall(r'(?:src|href)="([^"#]+)"', page) == [
        "inspect/static/favicon.svg", "inspect/static/inspector.css", "inspect/static/inspector.js"]
    assert "<style" not in page and not re.search(r"\s(?:style|on\w+)=", page)  # no inline style or handler


async def test_every_answer_carries_the_policy_that_forbids_inline_script_and_markup_from_strings(url):
    async with httpx.AsyncClient(base_url=url, headers=AUTH) as http:
        answers = [await http.get("/inspect"), *[await http.get(f"/inspect/static/{n}") for n in inspector.ASSETS]]
    for answer in answers:
        assert answer.headers["Content-Security-Policy"] == inspector.CONTENT_SECURITY_POLICY
        assert answer.headers["X-Content-Type-Options"] == "nosniff"
    policy = dict(part.strip().split(" ", 1) for part in inspector.CONTENT_SECURITY_POLICY.split(";"))
    assert policy["script-src"] == "'self'" and policy["default-src"] == "'none'"
    assert policy["require-trusted-types-for"] == "'script'" and policy["frame-ancestors"] == "'none'"


async def test_like_docs_the_page_and_its_files_need_no_token_but_everything_it_reads_does(url):
    async with httpx.AsyncClient(base_url=url) as http:
        page = await http.get("/inspect")
        files = [await http.get(f"/inspect/static/{name}") for name in inspector.ASSETS]
        unknown = await http.get("/inspect/static/nothing.js")
        reads = [await http.get(path) for path in ("/v1/sessions", "/v1/sessions/s/messages", "/v1/sessions/s/context")]
        refused = await http.get("/v1/sessions", headers={"Authorization": "Bearer wrong"})
    assert [a.status_code for a in (page, *files)] == [200] * (1 + len(inspector.ASSETS))
    assert TOKEN not in page.text and all(TOKEN.encode() not in f.content for f in files)
    assert (unknown.status_code, unknown.json()["error"]["type"]) == (404, "RouteNotFoundError")
    for answer in (*reads, refused):
        assert (answer.status_code, answer.json()["error"]["type"]) == (401, "UnauthorizedError")


@pytest.mark.parametrize("name", ["nothing.js", "..%2F__init__.py", "index.html", "%2E%2E"])
async def test_only_the_listed_files_are_served(url, name):
    async with httpx.AsyncClient(base_url=url, headers=AUTH) as http:
        answer = await http.get(f"/inspect/static/{name}")
    assert (answer.status_code, answer.json()["error"]["type"]) == (404, "RouteNotFoundError")


async def test_inspector_false_in_the_configuration_removes_the_route_and_nothing_else(tmp_path, nursery):
    config = tmp_path / "sessions.toml"
    config.write_text('[server]\ninspector = false\nbind = "127.0.0.1:0"\n')
    settings = load_config(config).server
    assert settings.inspector is False
    async with served(tmp_path, nursery, settings) as url, httpx.AsyncClient(base_url=url) as http:
        page = await http.get("/inspect")
        script = await http.get("/inspect/static/inspector.js")
        history = await http.get("/v1/sessions/s/messages")
    assert (page.status_code, page.json()["error"]["type"]) == (404, "RouteNotFoundError")
    assert script.status_code == 404
    assert history.json() == {"messages": []}


def test_the_inspector_is_on_by_default_and_the_setting_takes_only_a_boolean(tmp_path):
    assert ServerSettings().inspector is True
    config = tmp_path / "sessions.toml"
    config.write_text('[server]\ninspector = "no"\n')
    with pytest.raises(ConfigError, match="server.inspector must be true or false, not 'no'"):
        load_config(config)


def test_the_script_never_turns_a_string_into_markup():
    source = STATIC.joinpath("inspector.js").read_text(encoding="utf-8")
    script = re.sub(r"/\*[\s\S]*?\*/|^\s*//.*$", "", source, flags=re.MULTILINE)  # code without comments
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function",
                 "createContextualFragment", "DOMParser", "srcdoc", "javascript:"):
        assert sink not in script, sink
    # attribute names are the script's own; links only ever point into the page itself (a fragment)
    names = re.findall(r"setAttribute\(([^,]+),", script)
    assert "key" in names and all(name == "key" or re.fullmatch(r'"[a-z-]+"', name) for name in names), names
    hrefs = re.findall(r"href: ([^,}]+)", script)
    assert hrefs and all(value.startswith(('"#"', "`#")) for value in hrefs), hrefs
    assert 'else if (key === "on") for (const [name, fn] of Object.entries(value)) el.addEventListener' in script


def test_a_wheel_ships_the_page_and_every_file_it_serves(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(tmp_path),
                    str(REPO_ROOT)], check=True, capture_output=True, timeout=300)
    [wheel] = tmp_path.glob("durable_sessions-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"runtime/server/inspector/static/{name}" for name in (inspector.PAGE, *inspector.ASSETS)} <= names


def test_the_readme_shows_the_page_opens_it_and_its_setting_switches_it_off(tmp_path):
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Looking at sessions: the inspector"):]
    section = section[:section.index("\n## ")]
    images = re.findall(r"!\[[^\]]+\]\(([^)]+)\)", section)
    assert images and all((REPO_ROOT / image).read_bytes().startswith(b"\x89PNG") for image in images)
    assert "xdg-open http://127.0.0.1:8787/inspect " in section
    [toml] = re.findall(r"```toml\n(.*?)```", section, re.DOTALL)
    (tmp_path / "sessions.toml").write_text(toml, encoding="utf-8")
    assert load_config(tmp_path / "sessions.toml").server.inspector is False
