"""What a real browser (headless Chromium, through Selenium) can do with a ``durable-sessions serve`` process:
/docs behind a token, cross-origin calls from a listed origin (preflight included), WebSockets with the token as
a subprotocol, and refusals for a page of another origin."""

import pytest

from runtime.server.browsers import bearer_protocol
from tests.support.browser import browser_binaries, headless_chromium, wait_for_js
from tests.support.postgres import free_port
from tests.support.processes import server_process

TOKEN = "chromium-token"


@pytest.fixture
def server(tmp_path):
    """The port of a server on 127.0.0.1 with a token, allowing pages of ``http://localhost:<its port>``."""
    browser_binaries()  # skip before starting anything
    port = free_port()  # the listed origin names the port: chosen before the server starts
    config = tmp_path / "sessions.toml"
    config.write_text(f'[server]\ncors_origins = ["http://localhost:{port}"]\n', encoding="utf-8")
    with server_process(tmp_path / "data", token=TOKEN, bind=f"127.0.0.1:{port}", extra=("--config", str(config))):
        yield port


@pytest.fixture
def browser(server, tmp_path):
    with headless_chromium(tmp_path / "chromium-profile") as driver:
        yield driver


def test_docs_asks_for_the_token_and_then_shows_and_calls_the_api(server, browser):
    browser.get(f"http://127.0.0.1:{server}/docs")
    wait_for_js(browser, "!document.getElementById('token-form').hidden")
    assert browser.execute_script("return document.querySelector('.opblock') === null")
    browser.execute_script("document.getElementById('token').value = 'wrong'; "
                           "document.getElementById('token-form').requestSubmit()")
    wait_for_js(browser, "document.getElementById('token-problem').textContent.includes('refused')")
    browser.execute_script(f"document.getElementById('token').value = '{TOKEN}'; "
                           "document.getElementById('token-form').requestSubmit()")
    wait_for_js(browser, "document.querySelector('[data-path=\"/v1/sessions\"]') !== null")
    assert browser.execute_script("return document.body.innerText.includes('Append a message under a parent')")
    # the token stays in the tab: a reload needs no form, and the page's own calls carry it
    browser.get(f"http://127.0.0.1:{server}/docs")
    wait_for_js(browser, "document.querySelector('.opblock') !== null")
    assert browser.execute_script("return document.getElementById('token-form').hidden")
    assert "bearerAuth" in browser.execute_script(
        "return JSON.stringify(window.ui.authSelectors.authorized().toJS())")
    status = browser.execute_script(  # a request as Try it out sends it: through the page's interceptor
        "const req = window.ui.getConfigs().requestInterceptor({url: '/v1/sessions', headers: {}});"
        " return fetch(req.url, {headers: req.headers}).then(r => r.status);")
    assert status == 200


def test_a_listed_origin_calls_across_origins_and_opens_a_websocket_with_its_token(server, browser):
    api = f"http://127.0.0.1:{server}"
    # a document of another origin than 127.0.0.1, and a listed one (/docs would not do: its policy allows
    # calls to its own origin only)
    browser.get(f"http://localhost:{server}/v1/health")
    appended = browser.execute_script(f"""
        return fetch("{api}/v1/sessions/web-1/messages", {{method: "POST",
            headers: {{"Authorization": "Bearer {TOKEN}", "Content-Type": "application/json"}},
            body: JSON.stringify({{message: {{id: "m1", role: "user", parts: [{{type: "text", text: "hi"}}]}}}})}})
        .then(r => r.json())""")
    assert appended == {"id": "m1", "inserted": True}
    listed = browser.execute_script(f"""
        return fetch("{api}/v1/sessions", {{headers: {{"Authorization": "Bearer {TOKEN}"}}}}).then(r => r.json())""")
    assert [entry["id"] for entry in listed["sessions"]] == ["web-1"]
    reply = browser.execute_script(f"""
        return new Promise((resolve, reject) => {{
            const ws = new WebSocket("ws://127.0.0.1:{server}/v1/sessions/web-1/ws",
                                     ["durable-sessions", "{bearer_protocol(TOKEN)}"]);
            ws.onopen = () => ws.send(JSON.stringify({{id: 1, method: "get_path_length"}}));
            ws.onmessage = (event) => {{
                const frame = JSON.parse(event.data);
                if (frame.id === 1) {{ ws.close(); resolve([ws.protocol, frame.result]); }}
            }};
            ws.onerror = () => reject(new Error("the socket failed"));
        }})""")
    assert reply == ["durable-sessions", 1]


def test_a_page_of_another_origin_can_neither_call_nor_open_a_websocket(server, browser):
    browser.get(f"http://127.0.0.1:{server}/v1/health")  # localhost:<port> is not this page's origin (no CSP here)
    fetched = browser.execute_script(f"""
        return fetch("http://localhost:{server}/v1/sessions", {{headers: {{"Authorization": "Bearer {TOKEN}"}}}})
        .then(() => "read", (error) => "blocked")""")
    assert fetched == "blocked"
    opened = browser.execute_script(f"""
        return new Promise((resolve) => {{
            const ws = new WebSocket("ws://localhost:{server}/v1/sessions/web-2/ws",
                                     ["durable-sessions", "{bearer_protocol(TOKEN)}"]);
            ws.onopen = () => {{ ws.close(); resolve("open"); }};
            ws.onerror = () => resolve("refused");
        }})""")
    assert opened == "refused"
