"""A real headless Chromium driven through Selenium and chromedriver, for tests of what a browser does.

::

    with headless_chromium(tmp_path / "profile") as driver:
        driver.get(url)                  # returns once the document has loaded
        wait_for_js(driver, "document.querySelector('.opblock') !== null")
        title = driver.execute_script("return document.title")

``execute_script`` runs a function body: its ``return`` value comes back as
JSON values (a returned promise is awaited); an exception in the page is
raised as ``selenium.common.exceptions.JavascriptException``. The browser
runs with a profile of its own and resolves no host names but ``127.0.0.1``
and ``localhost``.

Needs Chromium and chromedriver (Debian: ``chromium``, ``chromium-driver``);
without them a test is skipped, except under ``CI`` where it fails
(``.ci/run`` installs both).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.common.exceptions import JavascriptException, StaleElementReferenceException
from selenium.webdriver.chrome.service import Service

#: Chromium's command line: headless, nothing fetched in the background, no host but loopback.
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-extensions", "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--window-size=1400,1000",
                  "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1, EXCLUDE localhost")
#: Seconds :func:`wait_until` and :func:`wait_for_js` wait by default, and between two checks.
WAIT_TIMEOUT_S = 10.0
JS_WAIT_TIMEOUT_S = 30.0
POLL_S = 0.02


def _missing(what: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the browser tests: {what} is not installed (.ci/run installs it)")
    pytest.skip(f"{what} is not installed")


def chromium_binary() -> str:
    """The chromium executable; skips the test where none is installed (fails it under ``CI``)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        _missing("chromium")
    return found


def browser_binaries() -> tuple[str, str]:
    """``(chromium, chromedriver)``; skips the test without them (fails it under ``CI``)."""
    chromium = chromium_binary()
    driver = shutil.which("chromedriver") or next((p for p in ("/usr/bin/chromedriver",) if Path(p).exists()), None)
    if driver is None:
        _missing("chromedriver")
    return chromium, driver


def chrome_options(chromium: str, profile: Path) -> webdriver.ChromeOptions:
    """:data:`CHROMIUM_FLAGS`, a user profile in ``profile``, and the page's console kept for ``get_log("browser")``."""
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return options


@contextmanager
def headless_chromium(profile: Path) -> Iterator[webdriver.Chrome]:
    """A headless Chromium (under chromedriver) with a fresh profile in ``profile``; quit on exit."""
    chromium, chromedriver = browser_binaries()
    profile.mkdir(parents=True, exist_ok=True)
    driver = webdriver.Chrome(options=chrome_options(chromium, profile), service=Service(chromedriver))
    try:
        yield driver
    finally:
        driver.quit()


def wait_until(check: Callable[[], Any], timeout: float = WAIT_TIMEOUT_S, what: str = "",
               ignore: tuple[type[Exception], ...] = (StaleElementReferenceException,)) -> Any:
    """``check()``'s first true value, polled every :data:`POLL_S` seconds.

    An exception of a type in ``ignore`` (by default: an element replaced
    while it was read) counts as not yet.

    Raises:
        AssertionError: no true value within ``timeout`` seconds (naming ``what`` and the last ignored error).
    """
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            found = check()
        except ignore as exc:
            found, last_error = None, exc
        if found:
            return found
        if time.monotonic() > deadline:
            detail = f" (last: {type(last_error).__name__}: {last_error})" if last_error is not None else ""
            raise AssertionError(f"timed out after {timeout} s waiting for {what or check}{detail}")
        time.sleep(POLL_S)


def wait_for_js(driver: webdriver.Chrome, condition: str, timeout: float = JS_WAIT_TIMEOUT_S) -> None:
    """Wait until ``condition`` (a JavaScript expression) is true in the page; one that throws is not yet true.

    Raises:
        AssertionError: still false after ``timeout`` seconds.
    """
    wait_until(lambda: driver.execute_script(f"return Boolean({condition})"), timeout, condition,
               ignore=(JavascriptException, StaleElementReferenceException))
