"""A real headless Chromium driven over the DevTools protocol, for tests of what a browser does.

::

    async with open_chromium(tmp_path) as browser:
        page = await browser.page()
        await page.goto(url)
        value = await page.evaluate("document.title")
        await page.wait_for("document.querySelector('.opblock') !== null")

``evaluate`` awaits promises and returns JSON values; an exception in the
page is raised as :class:`PageError`. The browser runs with a profile of its
own under ``tmp_path`` and no network but loopback.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from runtime.wsclient import WebSocketConnection

#: Seconds to wait for the browser to listen, and for a condition in a page.
START_TIMEOUT_S = 30.0
WAIT_TIMEOUT_S = 30.0


class PageError(Exception):
    """A script evaluated in the page threw."""


def chromium_binary() -> str:
    """The chromium executable; skips the test where none is installed (fails it in CI)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("CI must run the browser tests: chromium is not installed (.ci/run installs it)")
        pytest.skip("chromium is not installed")
    return found


class Page:
    """One tab, over its DevTools WebSocket."""

    def __init__(self, ws: WebSocketConnection) -> None:
        self.ws = ws
        self._next = 0

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        """One DevTools command; its result (events arriving meanwhile are dropped)."""
        self._next += 1
        call_id = self._next
        await self.ws.send(json.dumps({"id": call_id, "method": method, "params": params}))
        while True:
            frame = json.loads(await self.ws.receive())
            if frame.get("id") == call_id:
                if "error" in frame:
                    raise PageError(f"{method}: {frame['error']}")
                return frame.get("result", {})

    async def goto(self, url: str) -> None:
        """Open ``url`` and wait until its document has loaded."""
        await self.send("Page.navigate", url=url)
        await self.wait_for("document.readyState === 'complete' && location.href !== 'about:blank'")

    async def evaluate(self, expression: str) -> Any:
        """The JSON value of ``expression`` (a promise is awaited)."""
        result = await self.send("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            raise PageError(details.get("exception", {}).get("description") or details.get("text"))
        return result["result"].get("value")

    async def wait_for(self, condition: str, timeout_s: float = WAIT_TIMEOUT_S) -> None:
        """Poll ``condition`` (a JavaScript expression) until it is true.

        Raises:
            AssertionError: still false after ``timeout_s``.
        """
        with trio.move_on_after(timeout_s):
            while True:
                try:
                    if await self.evaluate(f"Boolean({condition})"):
                        return
                except PageError:
                    pass  # the page is still loading
                await trio.sleep(0.1)
        raise AssertionError(f"still false after {timeout_s} s: {condition}")


class Browser:
    """A running headless Chromium (see :func:`open_chromium`)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self._pages: list[Page] = []

    async def page(self) -> Page:
        """A new tab."""
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{self.port}") as http:
            target = (await http.put("/json/new?about:blank")).json()
        ws = await WebSocketConnection.connect(target["webSocketDebuggerUrl"], max_message_bytes=64 << 20)
        page = Page(ws)
        self._pages.append(page)
        return page

    async def aclose(self) -> None:
        for page in self._pages:
            with trio.move_on_after(2):
                await page.ws.aclose()


@asynccontextmanager
async def open_chromium(tmp_path: Path) -> AsyncIterator[Browser]:
    """Start headless Chromium with a fresh profile under ``tmp_path``; stop it on exit."""
    binary = chromium_binary()
    profile = tmp_path / "chromium-profile"
    profile.mkdir(parents=True, exist_ok=True)
    command = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
               f"--user-data-dir={profile}", "--remote-debugging-port=0",
               "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1, EXCLUDE localhost", "about:blank"]
    process = await trio.lowlevel.open_process(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    browser = None
    try:
        port_file = profile / "DevToolsActivePort"
        with trio.fail_after(START_TIMEOUT_S):
            while not port_file.exists() or not port_file.read_text().strip():
                if process.poll() is not None:
                    raise AssertionError(f"chromium exited with {process.returncode}")
                await trio.sleep(0.05)
        browser = Browser(int(port_file.read_text().split()[0]))
        yield browser
    finally:
        if browser is not None:
            await browser.aclose()
        with trio.CancelScope(shield=True):
            process.terminate()
            with trio.move_on_after(10) as waited:
                await process.wait()
            if waited.cancelled_caught:
                process.kill()
                await process.wait()
