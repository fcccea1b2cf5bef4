"""What the kernel must drop of what it keeps, when a session file grows, comes, goes or
changes mode, or a folder lists other names: a queue of invalidations the core fills and
the adapter drains (``invalidator``), never from inside a request.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable

from .inodes import Inodes, Key
from .layout import KINDS
from .nodekind import Growth
from .sessions import Store

#: An invalidation's "name" that asks the kernel to drop an inode's cached bytes as well as
#: its attributes (no name has a NUL in it).
PAGES = "\0pages"
#: The kinds of node a session has one of that its file's growth changes, and how
_GROWING = [(k, node.grows) for k, node in KINDS.items() if node.grows is not Growth.NOTHING]
#: The kinds of node of a fork that a session file coming or going changes
_FOLLOWING = [k for k, node in KINDS.items() if node.follows_parent]


class Changes:
    """The invalidations to send: (inode, None), (inode, PAGES) or (folder, name)."""

    def __init__(self, inodes: Inodes, store: Store, forget_answers: Callable[[str], None]) -> None:
        """``forget_answers(path)``: the answers kept of session ``path`` no longer hold."""
        self.inodes, self.store, self.forget_answers = inodes, store, forget_answers
        # (a deque: render threads add to it while the loop drains it)
        self.invalidations: deque[tuple[int, str | None]] = deque()
        self.forks: set[str] = set()  # sessions whose header names a parent session
        self.moved = -math.inf  # when a session file last came or went (time.monotonic)

    def came_or_went(self) -> None:
        """A session file came or went: a fork's ``parent`` link may have too, and the
        kernel keeps the fork's listing."""
        self.moved = time.monotonic()
        for path in list(self.forks):  # (a thread may add one meanwhile)
            for kind in _FOLLOWING:
                n = self.inodes.known(Key(kind, path))
                if n is not None:
                    self.contents(n)

    def resized(self, key: Key) -> None:
        """A whole-session file was rendered anew: the kernel drops the size it keeps."""
        known = self.inodes.known(key)
        if known is not None:
            self.invalidations.append((known, None))

    def entry(self, parent: int, name: str) -> None:
        self.invalidations.append((parent, name))

    def contents(self, ino: int) -> None:
        """Folder ``ino`` lists other names, or link ``ino`` leads elsewhere: the kernel
        drops the listing or target it keeps (and the attributes)."""
        self.invalidations.append((ino, PAGES))

    def session(self, path: str) -> None:
        """The session file changed: drop the kernel's view of what depends on the whole."""
        self.forget_answers(path)
        self.store.changed(path)
        for kind, grows in _GROWING:
            n = self.inodes.known(Key(kind, path))
            if n is not None:
                self.invalidations.append((n, PAGES if grows is Growth.PAGES else None))

    def everything_of(self, path: str) -> None:
        """The session file's owner or mode changed: every node of it shows other bits.
        A scan of every inode: chmod and chown are rare."""
        self.store.changed(path)
        sf = self.store.known(path)
        if sf is not None:
            sf.recheck = True  # entry nodes look at the file again, once
        for key, n in self.inodes.all_named():
            if key.path == path:
                self.invalidations.append((n, None))

    def inode(self, ino: int) -> None:
        self.invalidations.append((ino, None))
