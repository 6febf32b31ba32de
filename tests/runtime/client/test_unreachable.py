"""No server answers: the client raises one typed error naming the URL, with a hint, under trio and asyncio,
and a program that does not catch it ends with a short traceback, not a page of httpx frames."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import httpx
import pytest

from common.errors import DurableSessionsError, ServerUnreachableError
from runtime.client import SessionsClient
from tests.support.data import REPO_ROOT
from tests.support.postgres import free_port

pytestmark = pytest.mark.anyio


def dead_url() -> str:
    return f"http://127.0.0.1:{free_port()}"  # nothing listens there


async def test_a_call_names_the_url_and_says_what_to_try():
    url = dead_url()
    async with SessionsClient(url) as client:
        with pytest.raises(ServerUnreachableError) as raised:
            await client.session("chat-1").get_history()
    error = raised.value
    assert error.urls == (url,)
    assert str(error).startswith(f"no server answered at {url} (")
    assert str(error).endswith("Start one with `durable-sessions serve`, or pass its URL "
                               "(SessionsClient(url), $DURABLE_SESSIONS_URL)")
    assert isinstance(error, DurableSessionsError) and isinstance(error, ConnectionError) and error.retryable
    assert isinstance(error.__context__, httpx.ConnectError) and error.__suppress_context__


async def test_several_urls_are_all_named_and_every_kind_of_call_says_it():
    urls = [dead_url(), dead_url()]
    async with SessionsClient(urls, retries=2) as client:
        for call in (client.statistics, client.metrics, lambda: client.manager("user-7").list()):
            with pytest.raises(ServerUnreachableError, match=f"no server answered at {urls[0]}, {urls[1]} "):
                await call()
        with pytest.raises(ServerUnreachableError) as raised:
            async with client.session("chat-1").events():
                pass
    assert raised.value.urls == tuple(urls)


def test_an_uncaught_error_is_a_short_traceback_ending_in_the_hint():
    url = dead_url()
    program = textwrap.dedent(f"""
        import trio
        from runtime.client import SessionsClient

        async def main():
            async with SessionsClient({url!r}) as client:
                await client.session("chat-1").get_history()

        trio.run(main)
    """)
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60,
                            cwd=REPO_ROOT)
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert lines[-1].startswith(f"common.errors.ServerUnreachableError: no server answered at {url} (")
    assert lines[-1].endswith("(SessionsClient(url), $DURABLE_SESSIONS_URL)")
    assert "httpx" not in result.stderr and "During handling" not in result.stderr  # no transport chain
    assert len(lines) < 30  # was 75 lines ending in httpx.ConnectError
