"""What a real browser (headless Chromium) can do with the server: /docs behind a token, cross-origin calls
from a listed origin (preflight included), WebSockets with the token as a subprotocol, and refusals for a page
of another origin."""

import pytest

from runtime import open_host
from runtime.server.app import bind_sessions, bind_socket, serve
from runtime.server.browsers import bearer_protocol
from runtime.server.config import ServerSettings
from tests.support.chromium import open_chromium

TOKEN = "chromium-token"


@pytest.fixture
async def server(tmp_path, nursery):
    """A server on 127.0.0.1 with a token, allowing pages of ``http://localhost:<its port>``."""
    sock, bound = bind_socket("127.0.0.1:0")
    port = bound.rsplit(":", 1)[1]
    settings = ServerSettings(bind=bound, cors_origins=[f"http://localhost:{port}"])

    async def run(task_status):
        async with open_host(tmp_path / "data") as host:
            bind_sessions(host)
            await serve(host, settings, token=TOKEN, listen_socket=sock, task_status=task_status)

    await nursery.start(run)
    return port


async def test_docs_asks_for_the_token_and_then_shows_and_calls_the_api(server, tmp_path):
    async with open_chromium(tmp_path) as browser:
        page = await browser.page()
        await page.goto(f"http://127.0.0.1:{server}/docs")
        await page.wait_for("!document.getElementById('token-form').hidden")
        assert await page.evaluate("document.querySelector('.opblock') === null")
        await page.evaluate("document.getElementById('token').value = 'wrong'; "
                            "document.getElementById('token-form').requestSubmit()")
        await page.wait_for("document.getElementById('token-problem').textContent.includes('refused')")
        await page.evaluate(f"document.getElementById('token').value = '{TOKEN}'; "
                            "document.getElementById('token-form').requestSubmit()")
        await page.wait_for("document.querySelector('[data-path=\"/v1/sessions\"]') !== null")
        assert await page.evaluate("document.body.innerText.includes('Append a message under a parent')")
        # the token stays in the tab: a reload needs no form, and the page's own calls carry it
        await page.goto(f"http://127.0.0.1:{server}/docs")
        await page.wait_for("document.querySelector('.opblock') !== null")
        assert await page.evaluate("document.getElementById('token-form').hidden")
        assert "bearerAuth" in await page.evaluate("JSON.stringify(window.ui.authSelectors.authorized().toJS())")
        status = await page.evaluate(  # a request as Try it out sends it: through the page's interceptor
            "(() => { const req = window.ui.getConfigs().requestInterceptor({url: '/v1/sessions', headers: {}});"
            " return fetch(req.url, {headers: req.headers}).then(r => r.status); })()")
        assert status == 200


async def test_a_listed_origin_calls_across_origins_and_opens_a_websocket_with_its_token(server, tmp_path):
    api = f"http://127.0.0.1:{server}"
    async with open_chromium(tmp_path) as browser:
        page = await browser.page()
        await page.goto(f"http://localhost:{server}/docs")  # another origin than 127.0.0.1, and a listed one
        appended = await page.evaluate(f"""
            fetch("{api}/v1/sessions/web-1/messages", {{method: "POST",
                headers: {{"Authorization": "Bearer {TOKEN}", "Content-Type": "application/json"}},
                body: JSON.stringify({{message: {{id: "m1", role: "user", parts: [{{type: "text", text: "hi"}}]}}}})}})
            .then(r => r.json())""")
        assert appended == {"id": "m1", "inserted": True}
        listed = await page.evaluate(f"""
            fetch("{api}/v1/sessions", {{headers: {{"Authorization": "Bearer {TOKEN}"}}}}).then(r => r.json())""")
        assert [entry["id"] for entry in listed["sessions"]] == ["web-1"]
        reply = await page.evaluate(f"""
            new Promise((resolve, reject) => {{
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


async def test_a_page_of_another_origin_can_neither_call_nor_open_a_websocket(server, tmp_path):
    async with open_chromium(tmp_path) as browser:
        page = await browser.page()
        await page.goto(f"http://127.0.0.1:{server}/docs")  # localhost:<port> is not this page's origin
        fetched = await page.evaluate(f"""
            fetch("http://localhost:{server}/v1/sessions", {{headers: {{"Authorization": "Bearer {TOKEN}"}}}})
            .then(() => "read", (error) => "blocked")""")
        assert fetched == "blocked"
        opened = await page.evaluate(f"""
            new Promise((resolve) => {{
                const ws = new WebSocket("ws://localhost:{server}/v1/sessions/web-2/ws",
                                         ["durable-sessions", "{bearer_protocol(TOKEN)}"]);
                ws.onopen = () => {{ ws.close(); resolve("open"); }};
                ws.onerror = () => resolve("refused");
            }})""")
        assert opened == "refused"
