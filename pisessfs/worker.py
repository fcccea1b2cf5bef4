"""A render worker: a process that renders and indexes sessions into the store for a mount.

A first mount parses and renders every session a walk reaches, on one core (the GIL): a
first ``grep -r`` of a year of sessions took 45 s where a later mount, served from the
store, took 5. The mount (``workers.Pool``) therefore starts as many of these processes as
the machine has cores and hands them the sessions, in the order a walk meets them, in two
passes. ``render``: do for a session what a walk of it would (every folder below it listed,
which renders its whole-session files), save that to the store exactly as a drop would
(``carry``), its usage counted by the parse, and let it go; the mount then answers it from
the store, as a later mount does. ``index``: index its messages for ``search/``.

Run as ``python -m pisessfs.worker --sessions ROOT --cache FOLDER --cache-mb N --mark M``.
It reads a line per session on its standard input, the pass and the path's bytes in hex
(``render 2f746d70…``), and answers a JSON line on its standard output: ``{"done": true}``
when the store holds the session as its file is now (made here or found there: with
``"bytes"``, what its entry takes) or it is indexed, else ``{"done": false, "why": …}``.
It holds one session at a time, ignores the terminal's signals (the mount's to handle), and
ends when its input closes, once it wrote what it holds. It is the core, in another
process: it never imports pyfuse3 or trio, and opens session files only through ``files``.
"""

from __future__ import annotations

import argparse
import logging
import os
import select
import signal
import stat
import sys
import time
from typing import IO

import orjson

from . import heap
from .errors import ViewError, settled
from .inodes import Key
from .kind import Kind
from .naming import file_ident
from .onefile import Conversation
from .sessions import Store, Unreadable
from .store import DiskStore, mark_for
from .view import View
from .workers import INDEX, RENDER

log = logging.getLogger(__name__)

#: The parse cache of a worker: one session at a time, and the biggest it renders
#: (``workers.MAX_BYTES``) fits with its renders.
CACHE_BYTES = 512 << 20
#: A worker's niceness: the mount answers other requests first when the cores are busy.
NICE = 5
#: Fault injection for the tests only (``_fault``).
FAULT_ENV = "PISESSFS_FAULT_WORKER"
#: A session file at least this big is followed by a trim of the C heap (``heap``).
TRIM_BYTES = 16 << 20
#: Seconds without a path after which a worker writes what it counted.
IDLE = 0.2


class Renderer:
    """What a worker does to one session in each pass (``workers``)."""

    def __init__(self, view: View, disk: DiskStore) -> None:
        self.view, self.disk = view, disk

    def one(self, phase: str, path: str) -> dict[str, object]:
        """Session ``path`` rendered into the store (``render``, its usage counted by the
        parse) or indexed (``index``); what to answer the mount."""
        _fault(path)
        store = self.view.store
        try:
            if phase == INDEX:
                self.view.search().add(path)  # (written in its batch: see idle)
                return {"done": True}
            if phase != RENDER:
                return {"done": False, "why": f"no pass {phase!r}"}
            if not self.disk.holds(path, file_ident(store.files.lstat(path))):
                self._list_below(self.view.ino(Key(Kind.SESSION, path)))
                if not self.view.carry.save_one(path) or not self.disk.settle():
                    return {"done": False, "why": "not saved"}
            size = self.disk.size_of(path)
            return {"done": True, "bytes": size} if size is not None else {"done": False}
        except (ViewError, Unreadable, OSError) as err:  # gone, unreadable: the mount's
            return {"done": False, "why": f"{type(err).__name__}: {err}"}
        except Exception as err:  # a bug: this session is the mount's, the others go on
            log.exception("%s: not rendered", path)
            return {"done": False, "why": f"{type(err).__name__}: {err}"}
        finally:
            self._let_go(path)

    def _let_go(self, path: str) -> None:
        """Drop session ``path``; after a big one, give back the pages glibc kept of it (a
        worker held what two sessions of 105 MB had left: 210 MiB, 77 MiB once trimmed)."""
        store = self.view.store
        leaving = store.leaving(path)
        if leaving is None:
            return
        big = leaving.state.size >= TRIM_BYTES
        store.let_go(leaving)
        del leaving  # (the state itself: before the trim)
        if big:
            heap.trim()

    def _list_below(self, ino: int) -> None:
        """List folder ``ino`` and every folder below it, not following links, as ``grep
        -r`` does (what ``warmup`` does through the mount)."""
        v = self.view
        settled(v.ready, ino, False, True, set())
        for _, a in settled(v.children, ino):
            if stat.S_ISDIR(a.mode):
                self._list_below(a.ino)

    def idle(self) -> None:
        """No session is waiting: write what was counted and indexed meanwhile."""
        self.view.usage().flush()
        self.view.search().flush()
        self.disk.settle()


def _fault(path: str) -> None:
    """Fault injection for the tests only (:data:`FAULT_ENV`): ``exit:<text>`` dies as a
    kill would when asked for a path holding the text, ``slow:<seconds>`` waits that long
    before each session."""
    how, _, arg = os.environ.get(FAULT_ENV, "").partition(":")
    if how == "exit" and arg and arg in path:
        os._exit(9)
    if how == "slow":
        time.sleep(float(arg))


def serve(renderer: Renderer, inp: IO[bytes], out: IO[bytes]) -> None:
    """Answer each line of ``inp`` (a pass and a path) on ``out`` until ``inp`` closes;
    what was counted and indexed is written once none came for :data:`IDLE` seconds (the
    mount sends the next as soon as it has an answer: a transaction a session slowed a
    later mount's reads)."""
    while True:
        if not select.select([inp], [], [], IDLE)[0]:
            renderer.idle()
        line = inp.readline()
        if not line:
            break
        phase, _, hexed = line.decode("ascii", "replace").strip().partition(" ")
        try:
            path = os.fsdecode(bytes.fromhex(hexed))
        except ValueError:
            reply: dict[str, object] = {"done": False, "why": "not a path"}
        else:
            reply = renderer.one(phase, path)
        out.write(_line(reply))
        out.flush()


def _line(reply: dict[str, object]) -> bytes:
    """``reply`` as a line of JSON. A reason that names a path no UTF-8 holds (any bytes
    make a file name) has it escaped: else the worker died on it, and three such sessions
    stopped every worker."""
    why = reply.get("why")
    if isinstance(why, str):
        reply = {**reply, "why": why.encode("utf-8", "backslashreplace").decode()}
    return orjson.dumps(reply) + b"\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pisessfs.worker", description=__doc__)
    parser.add_argument("--sessions", required=True)
    parser.add_argument("--cache", required=True, help="the cache folder")
    parser.add_argument("--cache-mb", type=int, required=True, help="the cache folder's cap")
    parser.add_argument("--mark", required=True, help="the mount's mark of its entries")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.nice(NICE)  # (the mount's requests first: they wait on no worker but their own)
    logging.basicConfig(level=logging.WARNING, format="pisessfs worker: %(message)s")
    store = Store(args.sessions, cache_bytes=CACHE_BYTES)
    mark = mark_for(store.files.reach)
    if mark != args.mark:  # (the code changed since the mount started: not its entries)
        log.warning("other code than the mount's (%s, not %s): stopped", mark, args.mark)
        return 2
    disk = DiskStore(args.cache, args.cache_mb << 20, mark, store.root)
    if not disk.open():
        return 2
    view = View(store)
    view.disk = store.disk = disk
    Conversation.held_bytes = CACHE_BYTES  # (each saved at once: none packed)
    renderer = Renderer(view, disk)
    try:
        serve(renderer, sys.stdin.buffer, sys.stdout.buffer)
    except BrokenPipeError:  # the mount is gone
        pass
    finally:
        renderer.idle()
        disk.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
