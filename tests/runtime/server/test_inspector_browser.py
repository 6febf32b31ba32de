"""The inspector page in headless Chromium against a real ``durable-sessions serve`` process.

The server is loaded with ``durable-sessions import`` (tau-bench trajectories and Claude Code transcripts);
each test opens the page and checks what a person would look for: the tree and its branches, an overlay after
a compaction, the prompt as the model gets it, broadcasts as they happen, search hits leading into the tree,
and stored markup that stays text. Screenshots go to a folder named at the end of the run
(``DURABLE_SESSIONS_SCREENSHOTS`` to choose it).

Needs Chromium and chromedriver (Debian: ``chromium``, ``chromium-driver``; see ``tests/support/browser.py``);
without them the tests are skipped, except under ``CI=1`` where they fail (``.ci/run`` installs both).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import httpx
import pytest

from tests.support.browser import browser_binaries, headless_chromium, wait_until
from tests.support.data import TEST_DATA
from tests.support.processes import cli_command, cli_env, server_process

TAU_BENCH = TEST_DATA / "tau-bench" / "airline-sample.json"
CLAUDE_CODE = TEST_DATA / "claude_code" / "projects"
#: The Claude Code session with a branch (a second prompt on the first message) in the fixtures.
CLAUDE_BRANCHED = "71c9afe9-d9cc-4583-86b3-e62ba682b83a"
SKILL = "---\ndescription: Talk like a pirate\n---\nSay arr.\n"
#: The host's configuration: three kinds of blocks, and compaction that can cut a short trajectory.
CONFIG = """
[[session.blocks]]
label = "soul"
kind = "readonly"
text = "You help travellers."

[[session.blocks]]
label = "memory"
kind = "writable"
description = "Learned facts"
max_tokens = 1100

[[session.blocks]]
label = "skills"
kind = "skills"
description = "Loadable skills"
path = "skills"
writable = true                 # the markup test writes a skill (read-only by default)

[session.compaction]
threshold = 100000
protect_head = 2
tail_token_budget = 200
"""


# -- the server, its data, the browser ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    browser_binaries()  # skip before starting anything
    root = tmp_path_factory.mktemp("inspector")
    (root / "skills").mkdir()
    (root / "skills" / "pirate.md").write_text(SKILL, encoding="utf-8")
    config = root / "sessions.toml"
    config.write_text(CONFIG, encoding="utf-8")
    with server_process(root / "data", extra=("--config", str(config))) as process:
        for source in (TAU_BENCH, CLAUDE_CODE):
            done = _run_cli(["import", "--url", process.url, "--no-progress", str(source)])
            assert "imported" in done, done
        yield process


def _run_cli(arguments: list[str]) -> str:
    result = subprocess.run([*cli_command(), *arguments], env=cli_env(None), capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def http(server: Any) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=10) as client:
        yield client


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Path]:
    """The folder screenshots go to (named in the terminal at the end of the module)."""
    chosen = os.environ.get("DURABLE_SESSIONS_SCREENSHOTS")
    folder = Path(chosen) if chosen else tmp_path_factory.mktemp("inspector-screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    yield folder
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and any(folder.iterdir()):
        reporter.write_line(f"\ninspector screenshots: {folder}")


@pytest.fixture(scope="module")
def driver(server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with headless_chromium(tmp_path_factory.mktemp("chromium-profile")) as browser:
        yield browser


@pytest.fixture
def page(driver: Any, server: Any) -> Iterator[Page]:
    """The inspector in the module's browser; the test fails on a script error or a refused resource."""
    driver.get_log("browser")  # drop what earlier tests left
    opened = Page(driver, server.url)
    yield opened
    assert opened.script_errors() == []


class Page:
    """The page as a test sees it: open a view, wait for something, read text."""

    def __init__(self, driver: Any, url: str) -> None:
        self.driver = driver
        self.url = url

    def open(self, **fragment: str) -> Page:
        self.driver.get("about:blank")
        self.driver.get(f"{self.url}/inspect#{urlencode(fragment, quote_via=quote)}")
        return self

    def go(self, **fragment: str) -> None:
        self.js("location.hash = arguments[0]", urlencode(fragment, quote_via=quote))

    def js(self, script: str, *args: Any) -> Any:
        return self.driver.execute_script(script, *args)

    def wait(self, check: Callable[[], Any], timeout: float = 10.0, what: str = "") -> Any:
        """``check()``'s first true value; an element replaced while it was read counts as not yet."""
        return wait_until(check, timeout, what)

    def shown(self, tab: str, timeout: float = 10.0) -> None:
        """Wait until ``tab`` is rendered (its first render done)."""
        self.wait(lambda: self.attr("#tab-body", "data-tab") == tab and self.attr("#tab-body", "data-shown") == tab,
                  timeout, f"the {tab} tab")

    def all(self, selector: str) -> list[Any]:
        from selenium.webdriver.common.by import By
        return self.driver.find_elements(By.CSS_SELECTOR, selector)

    def one(self, selector: str, timeout: float = 10.0) -> Any:
        return self.wait(lambda: (self.all(selector) or [None])[0], timeout, selector)

    def attr(self, selector: str, name: str) -> str | None:
        """An attribute of the first element ``selector`` finds now (``None``: no such element or attribute)."""
        return self.js("const e = document.querySelector(arguments[0]); return e && e.getAttribute(arguments[1])",
                       selector, name)

    def click(self, element: Any) -> None:
        """Click ``element`` in the middle of the window (the sticky top bar would take a click at the top)."""
        self.js("arguments[0].scrollIntoView({block: 'center'})", element)
        element.click()

    def text(self, selector: str) -> str:
        """The element's textContent, exactly (Selenium's ``.text`` folds whitespace)."""
        return self.one(selector).get_property("textContent")

    def messages_ready(self) -> list[Any]:
        """The message cards once the list and its branch look-ups are done."""
        self.one("#messages[data-branch-points]")
        return self.all("#messages > li.message")

    def overflowing(self) -> list[str]:
        """Elements reaching past the window's right edge (the page should never scroll sideways)."""
        return self.js("""return [...document.querySelectorAll('body *')]
            .filter(e => e.getBoundingClientRect().right > document.documentElement.clientWidth + 1)
            .map(e => e.tagName + '.' + e.className).slice(0, 5)""")

    def shot(self, folder: Path, name: str, selector: str | None = None) -> Path:
        """Save a screenshot (after checking nothing sticks out sideways)."""
        assert self.overflowing() == []
        path = folder / f"{name}.png"
        if selector is None:
            self.driver.save_screenshot(str(path))
        else:
            self.one(selector).screenshot(str(path))
        assert path.stat().st_size > 1000
        return path

    def script_errors(self) -> list[str]:
        """Console errors other than failed loads the page expects (``GET /v1/sessions`` on a server without it)."""
        return [entry["message"] for entry in self.driver.get_log("browser")
                if entry["level"] == "SEVERE" and "Failed to load resource" not in entry["message"]]


def session_url(session_id: str, rest: str) -> str:
    return f"/v1/sessions/{quote(session_id, safe='')}/{rest}"


def history(http: httpx.Client, session_id: str, **query: str) -> list[dict[str, Any]]:
    answer = http.get(session_url(session_id, "messages"), params=query)
    assert answer.status_code == 200, answer.text
    return answer.json()["messages"]


def rpc(http: httpx.Client, session_id: str, method: str, *params: Any) -> Any:
    answer = http.post(session_url(session_id, "rpc"), json={"method": method, "params": list(params)})
    assert answer.status_code == 200, answer.text
    return answer.json()["result"]


def text_message(message_id: str, role: str, text: str) -> dict[str, Any]:
    return {"id": message_id, "role": role, "parts": [{"type": "text", "text": text}]}


# -- the session list ------------------------------------------------------------------------------------------------------


def listed(http: httpx.Client, **query: Any) -> list[dict[str, Any]]:
    answer = http.get("/v1/sessions", params={"limit": 50, **query})
    assert answer.status_code == 200, answer.text
    return answer.json()["sessions"]


def test_the_imported_sessions_are_listed_with_their_counts_and_a_prefix_narrows_them(page, http, shots):
    sessions = listed(http)
    assert {"task-0", "task-11", CLAUDE_BRANCHED} <= {s["id"] for s in sessions}
    page.open()
    page.wait(lambda: len(page.all("#session-list > li")) == len(sessions), what="the list")
    rows = page.js("return [...document.querySelectorAll('#session-list > li')].map(li => "
                   "[li.dataset.session, li.querySelector('.count').textContent])")
    assert rows == [[s["id"], f"{s['messages']} message{'' if s['messages'] == 1 else 's'}"] for s in sessions]
    assert page.text("#sessions-note") == f"{len(sessions)} sessions"

    page.one("#prefix").send_keys("task-1")
    narrowed = [s["id"] for s in listed(http, prefix="task-1")]
    assert sorted(narrowed) == ["task-1", "task-10", "task-11"]
    page.wait(lambda: page.js("return [...document.querySelectorAll('#session-list > li')].map(li => "
                              "li.dataset.session)") == narrowed, what="the narrowed list")
    page.click(page.one("#session-list li[data-session='task-11'] a"))
    page.messages_ready()
    assert page.text("#session-id") == "task-11"
    assert "current" in page.one("#session-list li[data-session='task-11']").get_attribute("class")
    page.shot(shots, "session-list")


def test_opening_a_mistyped_session_id_says_so_and_creates_nothing(page, http):
    page.open(s="task-00")
    page.wait(lambda: page.all("#tab-body > p.error"), what="the refusal")
    assert page.text("#tab-body > p.error") == 'SessionNotFoundError: There is no session "task-00" on this server.'
    assert page.attr("#live-pill", "data-state") == "closed"
    assert listed(http, prefix="task-00") == []
    assert http.get(session_url("task-00", "")[:-1]).status_code == 404


# -- the tree ------------------------------------------------------------------------------------------------------------


def test_a_tau_bench_trajectory_shows_its_whole_path_with_tool_calls_folded(page, http, shots):
    stored = history(http, "task-0")
    tool_parts = [part for m in stored for part in m["parts"] if part["type"].startswith("tool-")]
    page.open(s="task-0")
    cards = page.messages_ready()
    assert [card.get_attribute("data-id") for card in cards] == [m["id"] for m in stored]
    assert page.text("#fact-path-length .fact-value") == str(len(stored))
    folded = page.all("#messages details.part.tool")
    assert len(folded) == len(tool_parts) > 0
    assert not any(d.get_property("open") for d in folded)
    first = folded[0]
    page.click(first.find_element("css selector", "summary"))
    assert first.get_property("open")
    shown_input = first.find_element("css selector", "pre.tool-input").get_property("textContent")
    shown_output = first.find_element("css selector", "pre.tool-output").get_property("textContent")
    assert json.loads(shown_input) == tool_parts[0]["input"]
    assert shown_output == tool_parts[0]["output"]
    assert "tool-get_user_details" in page.text("#messages")  # the folded JSON of the message
    page.js("arguments[0].scrollIntoView({block: 'start'})", first)
    page.shot(shots, "messages-tool-call")


def test_a_regeneration_shows_two_branches_and_either_leaf_can_be_selected(page, http, shots):
    session = "task-2"
    stored = history(http, session)
    last_assistant = max(i for i, m in enumerate(stored) if m["role"] == "assistant")
    original = stored[last_assistant]
    regenerated = text_message("regenerated-1", "assistant", "A second answer to the same question.")
    answer = http.post(session_url(session, "messages"),
                       json={"message": regenerated, "parentId": stored[last_assistant - 1]["id"]})
    assert answer.status_code == 201
    active = history(http, session)
    assert active[-1]["id"] == "regenerated-1" and len(active) == last_assistant + 1

    page.open(s=session)
    cards = page.messages_ready()
    assert [c.get_attribute("data-id") for c in cards] == [m["id"] for m in active]
    switches = page.all("#messages .branches")
    assert [(s.get_attribute("data-index"), s.get_attribute("data-of")) for s in switches] == [("2", "2")]
    assert page.one("#path-note").get_attribute("data-active") == "true"
    page.js("arguments[0].scrollIntoView({block: 'center'})", switches[0])
    page.shot(shots, "branches-active")

    page.click(switches[0].find_element("css selector", "button.prev"))
    page.wait(lambda: page.attr("#path-note", "data-active") == "false", what="the other branch")
    cards = page.messages_ready()
    other = history(http, session, leaf=stored[-1]["id"])
    assert [c.get_attribute("data-id") for c in cards] == [m["id"] for m in other]
    assert original["id"] in [c.get_attribute("data-id") for c in cards]
    assert "regenerated-1" not in [c.get_attribute("data-id") for c in cards]
    off = [c.get_attribute("data-id") for c in page.all("#messages > li.message.off-active")]
    assert off == [m["id"] for m in stored[last_assistant:]]  # the rest of the old branch is off the active path
    assert page.text("#messages .branches .branch-label") == "branch 1 of 2 · the active path takes 2"
    page.shot(shots, "branches-other")

    page.click(page.one("#to-active"))
    page.wait(lambda: page.attr("#path-note", "data-active") == "true", what="the active path")
    assert [c.get_attribute("data-id") for c in page.messages_ready()] == [m["id"] for m in active]


def test_a_claude_code_transcript_with_a_second_prompt_shows_the_branch(page, http):
    active = history(http, CLAUDE_BRANCHED)
    root = active[0]["id"]
    children = http.get(session_url(CLAUDE_BRANCHED, f"messages/{root}/branches")).json()["messages"]
    assert len(children) == 2
    page.open(s=CLAUDE_BRANCHED)
    cards = page.messages_ready()
    assert [c.get_attribute("data-id") for c in cards] == [m["id"] for m in active]
    [switch] = page.all("#messages .branches")
    index = [c["id"] for c in children].index(active[1]["id"]) + 1
    assert (switch.get_attribute("data-index"), switch.get_attribute("data-of")) == (str(index), "2")
    assert cards[1].get_attribute("data-id") == active[1]["id"]
    assert switch in cards[1].find_elements("css selector", ".branches")


def test_a_compaction_added_through_the_api_appears_as_an_overlay_where_it_cuts(page, http, shots):
    session = "task-3"
    stored = history(http, session)
    summary = "The traveller wants to change a reservation; the agent checked the booking."
    record = rpc(http, session, "add_compaction", summary, stored[2]["id"], stored[6]["id"])
    model_view = history(http, session)
    assert model_view[2]["id"] == f"compaction_{record['id']}" and len(model_view) == len(stored) - 4

    page.open(s=session)
    cards = page.messages_ready()
    assert [c.get_attribute("data-id") for c in cards] == [m["id"] for m in model_view]
    [overlay] = page.all("#messages > li.message.overlay")
    assert overlay.get_attribute("data-id") == f"compaction_{record['id']}"
    assert overlay.find_element("css selector", ".part.text").get_property("textContent") == summary
    note = overlay.find_element("css selector", ".cut-note").get_property("textContent")
    assert f"{stored[2]['id']} … {stored[6]['id']}" in note
    assert page.text("#fact-compaction-count .fact-value") == "1"
    page.js("arguments[0].scrollIntoView({block: 'center'})", overlay)
    page.shot(shots, "compaction-overlay")

    question = text_message("after-cut", "user", "Can I have a window seat on the new flight?")
    http.post(session_url(session, "messages"), json={"message": question})  # from another client, seen live
    page.one("#messages > li.message.new[data-id='after-cut']")
    page.wait(lambda: page.text("#token-meter .meter-label").endswith("/ 100,000 tokens before auto-compaction"),
              what="the estimate against the threshold")
    page.js("window.scrollTo(0, 0)")
    page.shot(shots, "overview")
    stored.append(question)

    overlay = page.one("#messages > li.message.overlay")
    page.click(overlay.find_element("css selector", "a.show-stored"))  # the stored messages behind it
    page.wait(lambda: page.attr("#messages", "data-view") == "stored", what="the stored view")
    cards = page.messages_ready()
    assert [c.get_attribute("data-id") for c in cards] == [m["id"] for m in stored]
    compacted = page.js("return [...document.querySelectorAll('#messages > li.message.compacted')].map(e => e.dataset.id)")
    assert compacted == [m["id"] for m in stored[2:7]]
    assert page.text("#messages > li.cut-start .summary") == summary
    assert page.js("const s = document.querySelector('#messages > li.cut-start');"
                   "return s.nextElementSibling.dataset.id") == stored[2]["id"]
    assert page.js("const e = document.querySelector('#messages > li.cut-end');"
                   "return e.previousElementSibling.dataset.id") == stored[6]["id"]
    page.js("document.querySelector('#messages > li.cut-start').scrollIntoView({block: 'start'});"
            "window.scrollBy(0, -120)")
    page.shot(shots, "compaction-stored")


def test_a_long_history_is_read_in_pages_newest_first(page, http):
    session = "long-history"
    messages = [text_message(f"m{i:03d}", "user" if i % 2 == 0 else "assistant", f"message number {i}")
                for i in range(250)]
    assert http.post(session_url(session, "messages:batch"), json={"messages": messages}).status_code == 201
    ids = [m["id"] for m in messages]
    page.open(s=session)

    def shown() -> list[str]:
        return page.js("return [...document.querySelectorAll('#messages > li.message')].map(e => e.dataset.id)")

    page.messages_ready()
    assert shown() == ids[-100:]
    page.click(page.one("#older"))
    page.wait(lambda: shown() == ids[-200:], what="the second page")
    page.click(page.one("#older"))
    page.wait(lambda: shown() == ids, what="the last page")
    assert page.all("#older") == []
    page.open(s=session, focus="m020")  # a message on an older page: pages are read until it is found
    page.wait(lambda: page.all("#messages > li.message.focus[data-id='m020']"), what="the focused message")
    assert shown() == ids




# -- context, prompt, skills, tools -------------------------------------------------------------------------------------------


def test_the_prompt_is_exactly_what_the_model_gets_and_the_blocks_show_their_usage(page, http, shots):
    session = "task-4"
    http.put(session_url(session, "context/memory"), json={"content": "Prefers aisle seats.\nFlies on Fridays."})
    loaded = http.post(session_url(session, "tools/load_context"), json={"label": "skills", "key": "pirate"})
    assert loaded.json() == {"result": "Say arr.\n"}
    prompt = http.get(session_url(session, "system-prompt")).json()["prompt"]
    blocks = http.get(session_url(session, "context")).json()["blocks"]

    page.open(s=session, tab="context")
    page.one("#system-prompt")
    assert page.text("#system-prompt") == prompt
    assert "\n\n\n" in prompt or prompt.count("═") >= 46  # the text as rendered, separators and blank lines kept
    shown = page.all("#blocks > li.block")
    assert [b.get_attribute("data-label") for b in shown] == [b["label"] for b in blocks] == ["soul", "memory", "skills"]
    memory = next(b for b in blocks if b["label"] == "memory")
    assert shown[1].find_element("css selector", ".block-usage").get_property("textContent") == (
        f"{memory['tokens']} / 1100 tokens")
    assert shown[1].find_element("css selector", ".block-content").get_property("textContent") == memory["content"]
    assert [s.get_attribute("data-key") for s in page.all("#skills > li.skill")] == ["skills:pirate"]
    assert page.all("button.unload") == [] and page.all("button.edit") == []  # read-only until switched on
    page.shot(shots, "context-and-prompt")

    page.open(s=session, tab="tools")
    tools = http.get(session_url(session, "tools")).json()["tools"]
    page.one("#tools")
    assert [t.get_attribute("data-name") for t in page.all("#tools > li")] == list(tools)
    assert page.text("#tools > li[data-name='set_context'] .tool-description") == tools["set_context"]["description"]


def test_changes_need_the_switch_and_go_through_the_api(page, http):
    session = "task-5"
    http.post(session_url(session, "tools/load_context"), json={"label": "skills", "key": "pirate"})
    page.open(s=session, tab="context")
    page.one("#blocks")
    assert page.all("button.edit") == []
    page.click(page.one("#writes"))
    try:
        edit = page.one("#blocks li[data-label='memory'] button.edit")
        assert page.all("#blocks li[data-label='soul'] button.edit") == []  # a readonly block has no editor
        page.click(edit)
        editor = page.one("textarea.block-editor")
        editor.clear()
        editor.send_keys("Seat 12A, always.")
        page.click(page.one("#blocks li[data-label='memory'] button.save"))
        page.wait(lambda: http.get(session_url(session, "context/memory")).json()["block"]["content"]
                  == "Seat 12A, always.", what="the block write")
        page.wait(lambda: page.js("const e = document.querySelector(\"li[data-label='memory'] pre.block-content\");"
                                  "return e && e.textContent") == "Seat 12A, always.", what="the page to show it")
        page.click(page.one("li.skill[data-key='skills:pirate'] button.unload"))
        page.wait(lambda: http.get(session_url(session, "skills")).json()["loaded"] == [], what="the unload")
        page.wait(lambda: page.all("#skills li.skill") == [], what="the skill list to refresh")

        assert "Seat 12A" not in page.text("#system-prompt")  # frozen before the write
        page.click(page.one("#refresh-prompt"))
        page.wait(lambda: "Seat 12A, always." in page.text("#system-prompt"), what="the refreshed prompt")
        assert page.text("#system-prompt") == http.get(session_url(session, "system-prompt")).json()["prompt"]

        page.go(s=session, tab="live")
        page.shown("live")
        page.wait(lambda: page.attr("#live-pill", "data-state") == "open", what="the WebSocket")
        page.click(page.one("#compact-now"))
        page.wait(lambda: len(http.get(session_url(session, "compactions")).json()["compactions"]) == 1,
                  what="the compaction")
        page.wait(lambda: [e.get_attribute("data-phase") for e in page.all("#live-log > li")] == ["idle", "compacting"],
                  what="compacting, then idle")
        assert page.text("#live-log > li[data-phase='idle'] .compacted").startswith("compacted from ")
        page.wait(lambda: page.text("#fact-compaction-count .fact-value") == "1", what="the header's count")
    finally:
        page.click(page.one("#writes"))


# -- live -------------------------------------------------------------------------------------------------------------------


def test_a_broadcast_shows_within_a_second_of_an_append_from_another_client(page, http, shots):
    session = "task-6"
    page.open(s=session, tab="live")
    page.wait(lambda: page.attr("#live-pill", "data-state") == "open", what="the WebSocket")
    assert page.all("#live-log > li") == []
    started = time.monotonic()
    answer = http.post(session_url(session, "messages"), json={"message": text_message("live-1", "user", "Still there?")})
    assert answer.status_code == 201
    page.wait(lambda: page.all("#live-log > li"), timeout=1.0, what="the broadcast")
    assert time.monotonic() - started < 1.0
    estimate = rpc(http, session, "estimate_tokens")
    [entry] = page.all("#live-log > li")
    assert entry.get_attribute("data-phase") == "idle"
    assert entry.find_element("css selector", ".estimate").get_property("textContent") == f"{estimate} tokens"
    assert "threshold 100000" in entry.get_property("textContent")
    assert page.text("#token-meter .meter-label") == f"{estimate:,} / 100,000 tokens before auto-compaction"

    page.go(s=session, tab="messages")
    page.messages_ready()
    http.post(session_url(session, "messages"), json={"message": text_message("live-2", "assistant", "Yes, here.")})
    card = page.one("#messages > li.message[data-id='live-2']", timeout=2.0)
    assert "new" in card.get_attribute("class").split()
    page.go(s=session, tab="live")
    page.wait(lambda: len(page.all("#live-log > li")) == 2, what="both broadcasts in the log")
    page.shot(shots, "live")


def test_a_broadcast_arriving_while_another_tab_opens_does_not_leave_it_loading(page, http):
    session = "task-7"
    page.open(s=session, tab="live")
    page.wait(lambda: page.attr("#live-pill", "data-state") == "open", what="the WebSocket")
    tabs = ["search", "live"] * 6 + ["tools", "context", "messages"]
    for round, tab in enumerate(tabs):  # the page reads the session again ~0.1 s after a broadcast: switch around it
        page.go(s=session, tab="live" if tab == "search" else "search")
        page.shown("live" if tab == "search" else "search")
        http.post(session_url(session, "messages"), json={"message": text_message(f"race-{round}", "user", "Hi")})
        time.sleep(0.01 * round)
        page.go(s=session, tab=tab)
        page.shown(tab, timeout=5)


# -- a server with a token ----------------------------------------------------------------------------------------------------


def test_on_a_server_with_a_token_the_page_asks_for_it_and_sends_it_with_every_call(driver, tmp_path, shots):
    token = "inspector-browser-token"
    with server_process(tmp_path / "data", token=token) as secured, \
            httpx.Client(base_url=secured.url, headers={"Authorization": f"Bearer {token}"}, timeout=10) as http:
        http.post(session_url("secret-chat", "messages"), json={"message": text_message("s1", "user", "Top secret.")})
        page = Page(driver, secured.url)
        page.open(s="secret-chat")
        page.wait(lambda: page.js("return !document.getElementById('token-form').hidden"), what="the token form")
        assert "Top secret." not in page.js("return document.body.textContent")
        assert page.text("#notice") == "This server needs its bearer token."

        page.one("#token-input").send_keys("wrong\n")
        page.wait(lambda: page.text("#notice") == "The server refused that token.", what="the refusal")
        assert page.js("return sessionStorage.getItem('durable-sessions-token')") is None

        page.one("#token-input").send_keys(token + "\n")
        page.messages_ready()
        assert page.js("return document.getElementById('token-form').hidden") is True
        assert page.js("return [...document.querySelectorAll('#session-list > li')].map(e => e.dataset.session)") == [
            "secret-chat"]
        page.go(s="secret-chat", tab="live")
        page.wait(lambda: page.attr("#live-pill", "data-state") == "open", what="the WebSocket, with the token")
        started = time.monotonic()
        http.post(session_url("secret-chat", "messages"), json={"message": text_message("s2", "assistant", "Noted.")})
        page.wait(lambda: page.all("#live-log > li"), timeout=1.0, what="the broadcast")
        assert time.monotonic() - started < 1.0

        page.js("sessionStorage.clear()")  # a link that hands the token over in the fragment
        page.open(s="secret-chat", token=token)
        page.messages_ready()
        assert "token" not in page.js("return location.hash")
        urls = page.js("return performance.getEntriesByType('resource').map(e => e.name)")
        assert urls and not any(token in url for url in urls)
        assert page.script_errors() == []


# -- search -----------------------------------------------------------------------------------------------------------------


def test_search_hits_lead_to_their_message_in_the_tree(page, http, shots):
    session = "task-0"
    hits = http.get(session_url(session, "search"), params={"q": "certificate", "limit": 50}).json()["results"]
    assert len(hits) >= 2
    page.open(s=session, tab="search")
    box = page.one("#search-query")
    box.send_keys("certificate\n")
    page.wait(lambda: page.attr("#search-results", "data-count") == str(len(hits)), what="the hits")
    shown = page.all("#search-results > li.hit")
    assert [h.get_attribute("data-id") for h in shown] == [h["id"] for h in hits]
    assert all(m.get_property("textContent").lower() == "certificate" for m in page.all("#search-results mark"))
    page.shot(shots, "search")
    target = hits[-1]["id"]
    page.click(shown[-1].find_element("css selector", "a"))
    page.wait(lambda: page.js("return location.hash").find("tab=messages") >= 0, what="the tree")
    card = page.one(f"#messages > li.message.focus[data-id='{target}']")
    assert page.js("const r = arguments[0].getBoundingClientRect(); return r.top >= 0 && r.top < innerHeight", card)


# -- stored markup stays text ----------------------------------------------------------------------------------------------

#: Markup that would run if the page parsed it: each variant bumps ``window.__probe`` and retitles the page.
RUN = "window.__probe=(window.__probe||0)+1;document.title='probed'"
PROBE = (f"<script>{RUN}</script><img src=x onerror=\"{RUN}\"><svg onload=\"{RUN}\"></svg>"
         f"<a href=\"javascript:{RUN}\">x</a><iframe srcdoc=\"<script>parent.{RUN}</script>\"></iframe>")
TITLE = "durable-sessions inspector"


def probe_session(http: httpx.Client) -> str:
    """A session holding the probe in every field the API lets a client fill; its id holds it too.

    Its tree: 1 -> 2 -> 3 -> {4, 4b (the latest leaf)}, 1..2 compacted, 3 holding the tool parts.
    """
    session = f"probe {PROBE}"
    first, second, third = f"{PROBE} 1", f"{PROBE} 2", f"{PROBE} 3"
    messages = [
        {"id": first, "role": "user", "createdAt": PROBE, "metadata": {PROBE: PROBE},
         "parts": [{"type": "text", "text": f"probe words {PROBE}"}]},
        text_message(second, "assistant", f"before the cut {PROBE}"),
        {"id": third, "role": "assistant", "parts": [
            {"type": "reasoning", "text": PROBE},
            {"type": f"tool-{PROBE}", "toolName": PROBE, "toolCallId": PROBE, "state": PROBE,
             "input": {PROBE: [PROBE]}, "output": PROBE, "errorText": PROBE},
            {"type": "dynamic-tool", "toolName": PROBE, "toolCallId": "c2", "state": "output-available",
             "input": PROBE, "output": {PROBE: PROBE}},
            {"type": PROBE, "data": PROBE},
        ]},
        {"id": f"{PROBE} 4", "role": PROBE, "parts": [{"type": "text", "text": f"after the cut {PROBE}"}]},
    ]
    answer = http.post(session_url(session, "messages:batch"), json={"messages": messages})
    assert answer.status_code == 201, answer.text
    sibling = text_message(f"{PROBE} 4b", "assistant", f"a branch {PROBE}")
    assert http.post(session_url(session, "messages"), json={"message": sibling, "parentId": third}).status_code == 201
    rpc(http, session, "set_metadata", {"name": PROBE, "source": PROBE})
    assert http.put(session_url(session, "context/memory"), json={"content": PROBE}).status_code == 200
    indexed = http.post(session_url(session, "tools/set_context"), json={
        "label": "skills", "content": PROBE, "metadata": {"title": "probe skill", "description": PROBE}})
    assert indexed.json()["result"] == 'Indexed "probe-skill" in skills.'
    assert http.post(session_url(session, "tools/load_context"),
                     json={"label": "skills", "key": "probe-skill"}).json()["result"] == PROBE
    rpc(http, session, "add_compaction", PROBE, first, second)
    return session


def assert_inert(page: Page) -> None:
    assert page.js("return window.__probe") is None
    assert page.js("return document.title") == TITLE
    assert page.js("return document.querySelectorAll('img, svg, iframe, a[href^=javascript]').length") == 0
    assert page.js("return [...document.scripts].map(s => s.getAttribute('src'))") == ["inspect/static/inspector.js"]


def test_markup_stored_in_every_field_is_shown_as_text_and_never_runs(page, http, shots):
    session = probe_session(http)
    compaction = rpc(http, session, "get_compactions")[0]["id"]
    page.open(s=session)
    page.messages_ready()
    assert_inert(page)
    assert page.text("#session-id") == session and page.text("#session-name") == PROBE
    ids = page.js("return [...document.querySelectorAll('#messages > li.message')].map(e => e.dataset.id)")
    assert ids == [f"compaction_{compaction}", f"{PROBE} 3", f"{PROBE} 4b"]
    assert len(page.all("#messages .branches")) == 1
    page.js("document.querySelectorAll('details').forEach(d => d.open = true)")
    texts = page.js("return Object.fromEntries(['.tool-name', '.tool-input', '.tool-output', '.tool-error', "
                    "'.reasoning .part-body', '.part.other > summary', '.message-head .role'].map(s => "
                    "[s, [...document.querySelectorAll('#messages ' + s)].map(e => e.textContent)]))")
    assert texts == {
        ".tool-name": [PROBE, PROBE], ".tool-input": [json.dumps({PROBE: [PROBE]}, indent=2), PROBE],
        ".tool-output": [PROBE, json.dumps({PROBE: PROBE}, indent=2)], ".tool-error": [PROBE],
        ".reasoning .part-body": [PROBE], ".part.other > summary": [PROBE],
        ".message-head .role": ["assistant", "assistant", "assistant"],
    }
    assert f"a branch {PROBE}" in page.text("#messages")
    assert_inert(page)
    page.shot(shots, "probe-messages")

    page.go(s=session, leaf=f"{PROBE} 4", focus=f"{PROBE} 4")
    page.wait(lambda: page.attr("#path-note", "data-active") == "false", what="the other branch")
    page.messages_ready()
    assert f"after the cut {PROBE}" in page.text("#messages")
    assert page.js("return [...document.querySelectorAll('#messages .role')].map(e => e.textContent)")[-1] == PROBE
    page.go(s=session, view="stored")  # the compacted messages too
    page.wait(lambda: page.attr("#messages", "data-view") == "stored", what="the stored view")
    page.messages_ready()
    page.js("document.querySelectorAll('details').forEach(d => d.open = true)")
    assert page.js("return [...document.querySelectorAll('#messages > li.message')].map(e => e.dataset.id)") == [
        f"{PROBE} {n}" for n in ("1", "2", "3", "4b")]
    assert f"probe words {PROBE}" in page.text("#messages") and PROBE in page.text("#messages .created")
    assert page.text("#messages > li.cut-start .summary") == PROBE
    listed_row = page.js("const li = [...document.querySelectorAll('#session-list > li')]"
                         ".find(e => e.dataset.session === arguments[0]); return li && li.textContent", session)
    assert listed_row.startswith(session)
    assert_inert(page)

    for tab in ("context", "tools", "live", "search"):
        page.go(s=session, tab=tab)
        page.shown(tab)
        if tab == "context":
            assert page.text("#blocks li[data-label='memory'] pre.block-content") == PROBE
            assert PROBE in page.text("#system-prompt")
            assert page.js("return [...document.querySelectorAll('#skills li')].map(e => e.dataset.key)") == [
                "skills:probe-skill"]
        if tab == "live":
            page.wait(lambda: page.attr("#live-pill", "data-state") == "open", what="the WebSocket")
            http.post(session_url(session, "messages"), json={"message": text_message(f"{PROBE} 5", "user", PROBE)})
            page.wait(lambda: page.all("#live-log > li"), what="the broadcast")
        if tab == "search":
            page.one("#search-query").send_keys("probe words\n")
            page.wait(lambda: page.attr("#search-results", "data-count") == "1", what="the hit")
            assert PROBE in page.text("#search-results")
        assert_inert(page)
    page.go(s=session, tab="context")
    page.one("#system-prompt")
    page.shot(shots, "probe-context")
    assert_inert(page)
