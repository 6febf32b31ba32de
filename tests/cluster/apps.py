"""Actor classes the cluster tests serve (``serve --app tests.cluster.apps:Recorder``).

:class:`Recorder` is the session actor with its activations and alarm
deliveries (and the start of :meth:`Recorder.slow_append`) written down,
one line per event (``<pid> <actor hex> ...``) appended to
``$DS_TEST_EVENTS/<kind>.txt`` (see :mod:`tests.support.cluster_hosts`): the
hosts are separate processes, so the count of activations cluster-wide is
the number of lines.
"""

from __future__ import annotations

import json
import os

import trio

from actors.agent import AlarmInfo
from actors.session_agent import SessionAgent


def _record(kind: str, *fields: object) -> None:
    folder = os.environ.get("DS_TEST_EVENTS")
    if folder:
        path = os.path.join(folder, f"{kind}.txt")
        line = " ".join(str(f) for f in (os.getpid(), *fields)) + "\n"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


class Recorder(SessionAgent):
    """A session actor that records each activation and each alarm it runs."""

    async def on_start(self) -> None:
        _record("activations", self.ctx.id.hex)
        await super().on_start()

    async def schedule(self, seconds: float) -> int:
        """Set the alarm ``seconds`` from now; the epoch ms it is due."""
        due = self.ctx.now_ms() + seconds * 1000
        self.ctx.storage.set_alarm(due)
        return int(due)

    async def alarm(self, info: AlarmInfo) -> None:
        _record("alarms", self.ctx.id.hex, info.scheduled_ms)

    async def shout(self, text: str) -> str:
        """Broadcast ``{"type": "shout", "text"}`` to every socket of the session."""
        self.broadcast(json.dumps({"type": "shout", "text": text}))
        return text

    async def pid(self) -> int:
        """The process running this actor."""
        return os.getpid()

    async def slow(self, seconds: float) -> float:
        await trio.sleep(seconds)
        return seconds

    async def slow_append(self, message: dict, seconds: float) -> bool:
        """Record ``started <id>``, wait ``seconds``, then append ``message`` (a write late in a call)."""
        _record("started", self.ctx.id.hex, message.get("id"))
        await trio.sleep(seconds)
        return await self.append_message(message)
