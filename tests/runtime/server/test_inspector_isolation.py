"""The inspector and /docs against a page or a message that misbehaves (issue 26): no ``//inspect``,
the ``#token=`` read before the first call, long messages rendered a slice at a time, and /docs with
the inspector's kind of policy and no framing. Headless Chromium against a real server process."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from runtime.server.openapi import DOCS_CONTENT_SECURITY_POLICY
from tests.support.browser import browser_binaries, headless_chromium, wait_for_js
from tests.support.processes import server_process

TOKEN = "inspector-t0ken"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
PARTS = 5000
LONG_TEXT = 123_456


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with server_process(tmp_path_factory.mktemp("inspector") / "data", token=TOKEN) as running:
        with httpx.Client(base_url=running.url, headers=AUTH, timeout=60) as http:
            parts = [{"type": "text", "text": f"p{i}"} for i in range(PARTS)]
            for session, message in (
                    ("listed", {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}),
                    ("many-parts", {"id": "big", "role": "user", "parts": parts}),
                    ("long-text", {"id": "long", "role": "user",
                                   "parts": [{"type": "text", "text": "x" * LONG_TEXT}]})):
                answer = http.post(f"/v1/sessions/{session}/messages", json={"message": message})
                assert answer.status_code == 201, answer.text
        yield running


@pytest.fixture
def driver(server: Any, tmp_path: Any) -> Iterator[Any]:
    browser_binaries()
    with headless_chromium(tmp_path / "profile") as browser:  # a fresh profile: nothing in sessionStorage
        yield browser


def test_a_path_starting_with_two_slashes_is_not_the_page(server):
    """``//inspect`` was served, and its relative API calls went to ``http://v1/...`` (another host)."""
    for path in ("//inspect", "///inspect", "//inspect/static/inspector.js", "//docs"):
        answer = httpx.get(server.url + path, timeout=30)
        assert answer.status_code == 404, path
        assert answer.json()["error"]["type"] == "RouteNotFoundError"
    assert httpx.get(server.url + "/inspect", timeout=30).status_code == 200


def test_a_token_in_the_address_is_used_by_the_first_call(server, driver):
    """Before, the session list was asked for before the token was read: 401, nothing listed."""
    driver.get(f"{server.url}/inspect#token={TOKEN}")
    wait_for_js(driver, "document.querySelectorAll('#session-list li').length === 3")
    assert driver.execute_script("return document.getElementById('token-form').hidden")
    assert "token" not in driver.execute_script("return location.hash")  # removed from the address at once
    assert driver.execute_script("return sessionStorage.getItem('durable-sessions-token')") == TOKEN
    errors = [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
    assert not any("401" in error for error in errors), errors


def _open(server, driver, session):
    driver.get(f"{server.url}/inspect#token={TOKEN}&s={session}")
    wait_for_js(driver, "document.querySelector('#messages li.message') !== null")


def test_a_message_of_thousands_of_parts_is_rendered_a_slice_at_a_time(server, driver):
    _open(server, driver, "many-parts")
    shown = "return document.querySelectorAll('#messages li.message .parts > .part').length"
    assert driver.execute_script(shown) == 50
    button = "document.querySelector('#messages .parts > button.show-more')"
    assert driver.execute_script(f"return {button}.textContent") == f"Show more ({PARTS - 50:,} more parts)"
    driver.execute_script(f"{button}.click()")
    assert driver.execute_script(shown) == 100
    texts = driver.execute_script("return [...document.querySelectorAll('#messages .parts > .part')]"
                                  ".slice(48, 52).map((e) => e.textContent)")
    assert texts == ["p48", "p49", "p50", "p51"]  # in order, none lost at the seam
    # the message's JSON is built only when its fold is opened
    assert driver.execute_script("return document.querySelector('#messages details.raw pre') === null")
    driver.execute_script("document.querySelector('#messages details.raw').open = true")
    wait_for_js(driver, "document.querySelector('#messages details.raw pre.json') !== null")
    assert driver.execute_script("return document.querySelector('#messages details.raw pre.json')"
                                 ".textContent.length") == 20000


def test_a_long_text_is_rendered_a_slice_at_a_time(server, driver):
    _open(server, driver, "long-text")
    length = "return document.querySelector('#messages .part.text').textContent.length"
    assert driver.execute_script(length) == 20000
    button = "document.querySelector('#messages .parts .long > button.show-more')"
    assert driver.execute_script(f"return {button}.textContent") == \
        f"Show more ({LONG_TEXT - 20000:,} more characters)"
    for _ in range(6):
        driver.execute_script(f"{button}.click()")
    assert driver.execute_script(length) == LONG_TEXT
    assert driver.execute_script(f"return {button}") is None  # all shown: the button is gone


def test_docs_carries_a_policy_and_may_not_be_framed(server, driver):
    answer = httpx.get(f"{server.url}/docs", timeout=30)
    policy = answer.headers["content-security-policy"]
    assert policy == DOCS_CONTENT_SECURITY_POLICY
    assert "frame-ancestors 'none'" in policy and "script-src 'self';" in policy
    assert answer.headers["x-frame-options"] == "DENY"
    assert "<script>" not in answer.text  # no inline script: the page's own is a file of the server
    for name in ("docs.js", "docs.css", "swagger-ui-bundle.js"):
        asset = httpx.get(f"{server.url}/docs/static/{name}", timeout=30)
        assert asset.status_code == 200 and asset.headers["x-frame-options"] == "DENY"
    inspector = httpx.get(f"{server.url}/inspect", timeout=30)
    assert inspector.headers["x-frame-options"] == "DENY"
    # the page works under its policy: Swagger UI renders the API once given the token
    driver.get(f"{server.url}/docs")
    driver.execute_script(f"sessionStorage.setItem('durable-sessions-token', '{TOKEN}')")
    driver.get(f"{server.url}/docs")
    wait_for_js(driver, "document.querySelector('.opblock') !== null")
    violations = [entry["message"] for entry in driver.get_log("browser")
                  if "Content Security Policy" in entry["message"]]
    assert violations == []
