"""The output gate of a cluster actor's WebSocket frames: none leaves before the writes before it are durable.

In a cluster (:mod:`runtime.host.cluster`) an actor's writes become durable
when its log entry is in Postgres, a moment after they commit to its file.
A broadcast or reply frame sent meanwhile must not reach a client before
that: :class:`FrameGate` holds each frame until the log's barrier taken when
it was sent is durable, in order, and drops the frames whose writes never
become durable (the log failed). The actor sees its peers wrapped in a
:class:`GatedConnection` (``placement.gate_peers``).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from actors.agent import ConnectionLike

if TYPE_CHECKING:
    from storage.cluster import ActorLog

__all__ = ["FrameGate", "GatedConnection"]

logger = logging.getLogger(__name__)


class FrameGate:
    """Holds an actor's outgoing WebSocket frames until the writes before each are durable."""

    __slots__ = ("_frames", "_log", "_running", "_spawn")

    def __init__(self, log: ActorLog, spawn: Callable[..., object]) -> None:
        self._log = log
        self._spawn = spawn
        self._frames: deque[tuple[int, ConnectionLike, str | bytes]] = deque()
        self._running = False

    def send(self, conn: ConnectionLike, message: str | bytes) -> None:
        """Send ``message`` to ``conn`` once the writes committed so far are durable.

        Raises:
            the log's poisoning error (the frame is dropped), or what ``conn.send`` raises.
        """
        target = self._log.barrier()
        if not self._frames and self._log.is_durable(target):
            conn.send(message)
            return
        self._frames.append((target, conn, message))
        if not self._running:
            self._running = True
            self._spawn(self._release)

    def flush(self) -> None:
        """Send every held frame whose writes are durable (in order)."""
        frames = self._frames
        while frames and self._log.is_durable(frames[0][0]):
            _target, conn, message = frames.popleft()
            try:
                conn.send(message)
            except Exception:
                logger.warning("frame to connection %s failed", getattr(conn, "id", "?"), exc_info=True)

    def drop(self) -> None:
        """Forget held frames (their writes will never be durable)."""
        if self._frames:
            logger.warning("cluster: %d WebSocket frames dropped: their writes are not durable", len(self._frames))
        self._frames.clear()

    async def _release(self) -> None:
        try:
            while self._frames:
                try:
                    await self._log.wait(self._frames[0][0])
                except Exception:  # noqa: BLE001 - the log failed: these frames never become durable
                    self.drop()
                    return
                if self._log.closed and not self._log.is_durable(self._frames[0][0]):
                    self.drop()
                    return
                self.flush()
        finally:
            self._running = False


class GatedConnection:
    """A WebSocket peer as an actor sees it in cluster mode: its frames pass the output gate.

    Compares equal to (and hashes as) the peer it wraps, so ``broadcast(exclude=[conn])`` works.
    """

    __slots__ = ("_conn", "_gate", "id")

    def __init__(self, conn: ConnectionLike, gate: FrameGate) -> None:
        self.id = conn.id
        self._conn = conn
        self._gate = gate

    @property
    def peer(self) -> ConnectionLike:
        """The connection this one wraps."""
        return self._conn

    def send(self, message: str | bytes) -> None:
        self._gate.send(self._conn, message)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, GatedConnection):
            return other._conn is self._conn
        return other is self._conn

    def __hash__(self) -> int:
        return hash(id(self._conn))

    def __repr__(self) -> str:
        return f"<GatedConnection {self.id}>"
