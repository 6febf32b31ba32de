"""Readiness (``GET /v1/ready``) apart from liveness (``GET /v1/health``), against a real server: ready while
the host takes calls, 503 from the start of a shutdown while the drain lets everything else finish."""

import httpx
import trio

from runtime import open_host
from runtime.server.app import bind_sessions, serve
from runtime.server.config import ServerSettings

TOKEN = "ready-token"


async def test_ready_until_shutdown_begins_then_503_while_draining(tmp_path, nursery):
    stop = trio.Event()
    served = trio.Event()

    async def run(task_status):
        async with open_host(tmp_path / "data") as host:
            bind_sessions(host)
            await serve(host, ServerSettings(bind="127.0.0.1:0", drain_s=1.0), token=TOKEN,
                        shutdown_trigger=stop.wait, task_status=task_status)
        served.set()

    urls = await nursery.start(run)
    async with httpx.AsyncClient(base_url=urls[0]) as http:
        ready = await http.get("/v1/ready")  # no token needed, like the health check
        assert (ready.status_code, ready.json()) == (200, {"status": "ready"})
        stop.set()
        await trio.sleep(0.1)
        draining = await http.get("/v1/ready")
        alive = await http.get("/v1/health")
        working = await http.get("/v1/sessions/s/messages", headers={"Authorization": f"Bearer {TOKEN}"})
    assert draining.status_code == 503
    assert draining.json() == {"error": {"type": "ServiceUnavailableError", "message": "the server is shutting down"}}
    assert "Retry-After" in draining.headers
    assert alive.status_code == 200 and working.status_code == 200  # still serving during the drain
    with trio.fail_after(10):
        await served.wait()
