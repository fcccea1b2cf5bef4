#!/usr/bin/env python3
"""A digest of everything a walk of each session shows: the guard of a faster render.

For each session file under SESSIONS (every ``--every``-th, in a walk's order), the core
(no FUSE, no disk cache) lists every folder below its session folder, as ``grep -r`` does,
and reads every file and link: names, modes, sizes, link targets and bytes go into one
SHA-256 per session. It prints ``<digest> <session path>`` lines and, on standard error,
how long the renders took (CPU seconds, a rough figure: use ``scripts/bench_first`` for
the walk's).

A change that makes rendering faster must not change what it shows. Run this on a corpus
with the code before the change and after, and compare::

    git worktree add /tmp/before HEAD~1
    PYTHONPATH=/tmp/before .venv/bin/python scripts/render_digest.py CORPUS > before.txt
    .venv/bin/python scripts/render_digest.py CORPUS > after.txt
    diff before.txt after.txt && echo same

``PYTHONPATH`` picks which code runs: this script imports ``pisessfs`` and nothing else of
the checkout it lives in.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import stat
import sys
import time

from pisessfs.errors import settled
from pisessfs.inodes import Key
from pisessfs.kind import Kind
from pisessfs.sessions import Store
from pisessfs.view import View


def digest(view: View, path: str) -> str:
    """One session's digest: each folder below its session folder, in order, with what
    each of its items shows."""
    h = hashlib.sha256()
    todo = [(b"", view.ino(Key(Kind.SESSION, path)))]
    while todo:
        where, ino = todo.pop()
        settled(view.ready, ino, False, True, set())
        for name, a in sorted(settled(view.children, ino)):
            shown = where + b"/" + os.fsencode(name)
            h.update(b"%s\0%o\0%d\0" % (shown, a.mode, a.size))
            if stat.S_ISDIR(a.mode):
                todo.append((shown, a.ino))  # (made ready when it is listed)
                continue
            settled(view.ready, a.ino, False, False, set())
            read = view.readlink if stat.S_ISLNK(a.mode) else view.content
            h.update(settled(read, a.ino))
    leaving = view.store.leaving(path)  # (one session held at a time, as a worker does)
    if leaving is not None:
        view.store.let_go(leaving)
    return h.hexdigest()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sessions", help="a sessions folder (only read: nothing is written to it)")
    ap.add_argument("--every", type=int, default=1, help="every N-th session only")
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)  # (each problem of a file is logged: not here)
    store = Store(args.sessions)
    view = View(store)
    paths = store.session_paths()[0][:: args.every]
    started = time.process_time()
    for p in paths:
        try:
            print(digest(view, p), p)
        except Exception as err:  # (the digest of a failure: it must fail the same way)
            print(f"{type(err).__name__}: {err}", p)
    took = time.process_time() - started
    print(f"{len(paths)} sessions, {took:.1f} s of CPU", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
