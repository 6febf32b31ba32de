"""The latest leaf's place, carried by a SQLite message store from its own last append.

An append under the latest leaf needs the leaf's id and its link row (its
``seq``, depth, running totals and the depths along its jump chain,
:data:`storage.tree.places.Link`): read, that is one seek on
``idx_assistant_msg_seq`` and three rowid lookups. The store that wrote the
leaf already knows all of it, so :class:`CarriedLeaf` keeps it in memory,
with the skew-binary jump chain above the leaf as linked :class:`JumpNode`
objects (O(log depth) of them live; a node whose target was never seen is
read once, one rowid lookup), and the token estimate's two facts (the
leaf's ``path_tokens`` and whether the session has any compaction row).

It is trusted only while the file is exactly as that append's commit left
it: SQLite's data version of the file (``apsw.Connection.data_version``:
it changes at every commit of any connection, this one included) must be
the one read just after that commit, the write must have been a
transaction of its own (a savepoint inside a caller's transaction may
still be rolled back), and the connection must hold the file exclusively
(``locking_mode=EXCLUSIVE``, the host's default: another process cannot
commit unseen between two of our transactions). Anything else -- another
write of any kind, by any store or the host -- makes it stale, and the next
append reads the leaf as before. Nothing is written to carry it, so
durability and what every call answers are unchanged.
"""

from __future__ import annotations

from collections.abc import Callable

import apsw

from .tree.places import Link
from .tree.steps import Place

__all__ = ["CarriedLeaf", "JumpNode", "exclusive"]

#: ``(depth, jump target's seq or itself)`` of a row (``storage.tree.sqlite.DEPTH_JUMP``).
DepthJump = Callable[[int], tuple[int, int]]


class JumpNode:
    """A row on the jump chain above the latest leaf: its ``seq``, ``depth`` and jump target.

    ``jump_seq`` is the target's ``seq`` (its own for a root); ``jump`` the
    target's node once known (``None``: not read yet).
    """

    __slots__ = ("depth", "jump", "jump_seq", "seq")

    def __init__(self, seq: int, depth: int, jump_seq: int, jump: JumpNode | None = None) -> None:
        self.seq = seq
        self.depth = depth
        self.jump_seq = jump_seq
        self.jump = jump

    def target(self, read: DepthJump) -> JumpNode:
        """The node this row's jump pointer names (itself for a root); read once when unknown."""
        if self.jump_seq == self.seq:
            return self
        if self.jump is None:
            depth, jump_seq = read(self.jump_seq)
            self.jump = JumpNode(self.jump_seq, depth, jump_seq)
        return self.jump


class CarriedLeaf:
    """The latest leaf of one session as its store's last append left it (see the module docstring).

    Attributes:
        version: the file's data version just after that append committed.
        leaf_id: the leaf's message id.
        node: its place on the jump chain.
        path_bytes, path_tokens: its running totals.
        compacted: whether the session has a compaction row (``None``: not known).
    """

    __slots__ = ("compacted", "leaf_id", "node", "path_bytes", "path_tokens", "version")

    def __init__(self, version: int, leaf_id: str, node: JumpNode, path_bytes: int, path_tokens: int,
                 compacted: bool | None) -> None:
        self.version = version
        self.leaf_id = leaf_id
        self.node = node
        self.path_bytes = path_bytes
        self.path_tokens = path_tokens
        self.compacted = compacted

    def link(self, read: DepthJump) -> tuple[Link, tuple[JumpNode, ...]]:
        """The leaf's link row, as ``storage.tree.sqlite.LATEST_LINK`` reads it (without its id), and
        the nodes it was made from: the leaf's, its jump target's and that one's target."""
        parent = self.node
        jump = parent.target(read)
        jump_jump = jump.target(read)
        link = (parent.seq, parent.depth, self.path_bytes, self.path_tokens, jump.depth, jump_jump.seq,
                jump_jump.depth)
        return link, (parent, jump_jump)

    @staticmethod
    def after_append(version: int, leaf_id: str, seq: int, place: Place, above: tuple[JumpNode, ...],
                     compacted: bool | None) -> CarriedLeaf:
        """The new leaf ``leaf_id`` (row ``seq``, ``place``), just stored; ``above`` holds nodes it
        may jump to (from :meth:`link`; empty when the parent was read, not carried)."""
        depth, path_bytes, _tokens, path_tokens, jump_seq = place
        target = next((node for node in above if node.seq == jump_seq), None)
        node = JumpNode(seq, depth, seq if jump_seq is None else jump_seq, target)
        return CarriedLeaf(version, leaf_id, node, path_bytes, path_tokens, compacted)


def exclusive(connection: apsw.Connection) -> bool:
    """Whether ``connection`` holds its file exclusively (no other connection can commit to it)."""
    return str(connection.pragma("locking_mode")).lower() == "exclusive"
