"""The mount's render workers: processes that render and index sessions into the store, so
that a first walk is answered from there, as a later mount's is, on every core.

The mount hands :class:`Pool` every session file at its start, in the order a walk meets
them (``Store.session_paths``). A thread per worker process (``worker``) takes the next one
and waits for the answer. Two passes:

1. **render**: each session the store does not hold as its file is now (and the mount has
   not parsed) is rendered and saved there, and its usage counted; the store is then told
   the entry is there (``DiskStore.learn``). A walk that asks for a session first asks
   :meth:`Pool.claim`: one a worker renders now is waited for (then read from the store),
   one no worker has started is the mount's to parse (taken out of the queue): nothing is
   rendered twice, and a walk never waits on work queued behind it.
2. **index**: each session the search index lacks is parsed again and indexed. Not in the
   same pass: SQLite writes FTS5 rows one writer at a time, 25 to 30 s a GB, and a walk
   that waited on a pass that indexed too took 65 s instead of 34 (2 cores, 1 GB).
   One worker: its parses and renders take a third of the time SQLite takes to write what
   they give, and two wrote no faster, waiting on each other's transactions (some gave up:
   "database is locked"). Meanwhile the mount's index leaves these sessions to the worker
   (``SearchIndex.share``) and answers from what it indexed so far.

A worker that dies is started again and its session left to the mount; after
:data:`RESTARTS` deaths, or when one cannot be started, the pool stops, with one line in the
log, and the mount renders in-process, as it does without a cache folder (``--disk-cache
off``: no workers, what they make has nowhere to go) or with ``--workers 0``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import orjson

from .appender import package_env
from .naming import file_ident
from .search import SearchIndex
from .sessions import Store, Unreadable
from .store import DiskStore

log = logging.getLogger(__name__)

#: A session file bigger than this is left to the mount (a worker holds one session at a
#: time, parsed and rendered: its memory is bounded by this, not by the biggest session).
MAX_BYTES = 128 << 20
#: Times a worker is started again after it died before the pool stops.
RESTARTS = 3
#: Seconds a worker may take to write what it holds once told to stop (the end of a pass).
FINISH = 120.0
#: The passes, in order (what a worker is asked to do with each session of the pass).
RENDER, INDEX = "render", "index"

#: Why a session is not given to a worker when its turn comes (the mount does it), if so.
Skip = Callable[[str, str], str | None]
#: The sessions of a pass the store holds as their files are now (asked once per pass).
Held = Callable[[str, list[str]], set[str]]


@dataclass(frozen=True, slots=True)
class Config:
    """What a worker is started with: the mount's sessions root, cache folder and its cap,
    and the mark of the mount's entries (a worker of other code makes none)."""

    sessions: str
    cache: str
    cache_mb: int
    mark: str

    def argv(self) -> list[str]:
        return [
            sys.executable, "-m", "pisessfs.worker", "--sessions", self.sessions,
            "--cache", self.cache, "--cache-mb", str(self.cache_mb), "--mark", self.mark,
        ]  # fmt: skip


class Pass:
    """One pass over the sessions: what is queued, what a worker does now, what is done."""

    def __init__(self, phase: str, paths: list[str], held: set[str]) -> None:
        self.phase = phase
        self.queue = OrderedDict.fromkeys(p for p in paths if p not in held)
        self.running: dict[str, threading.Event] = {}
        self.left: set[str] = set()  # left to the mount after all
        self.done = {"held": len(held)}  # how many, by how: "done", "held", "left"
        self.started = time.monotonic()
        self.took: float | None = None  # seconds, once it ended

    def count(self, path: str, how: str) -> None:
        self.done[how] = self.done.get(how, 0) + 1
        if how == "left":
            self.left.add(path)

    def said(self, total: int) -> str:
        """Where it is, for ``pisessfs status``."""
        d, n = self.done, sum(self.done.values())
        what = f"{d.get('held', 0):,} held, {d.get('left', 0):,} left to the mount"
        if self.took is not None:
            return f"{self.phase}ed in {self.took:.1f} s ({what})"
        spent = time.monotonic() - self.started
        rate = d.get("done", 0) / spent if spent > 0 else 0.0
        if rate <= 0:  # (none done yet: no rate to say)
            return f"{self.phase}ing {n:,} of {total:,} ({what})"
        togo = f", about {(total - n) / rate:.0f} s to go"
        return f"{self.phase}ing {n:,} of {total:,} ({what}), {rate:.0f} a second{togo}"


class Pool:
    """Render workers and the sessions they are to render and index."""

    def __init__(
        self, config: Config, size: int, order: Callable[[], list[str]], held: Held, skip: Skip
    ) -> None:
        """``size`` workers; ``order()``: every session file, in a walk's order;
        ``held(phase, paths)``: those the store holds for that pass (blocking: one look at
        them all, not a look each: a later mount's walk waited on those);
        ``skip(path, phase)``: ``"left"`` when the mount does session ``path`` (it parsed
        it, or it is too big or unreadable), else None."""
        self.config, self.size, self.order, self.skip = config, size, order, skip
        self.held = held
        self._lock = threading.Lock()
        self._passes: dict[str, Pass] = {}
        self._procs: list[subprocess.Popen[bytes]] = []
        self._given: set[str] = set()  # handed to the pool
        self._total = -1  # how many (-1: not listed yet)
        self._asked = threading.Event()  # the index is wanted now (a query came)
        self._stopped = False
        self._ended = False
        # a worker rendered ``path`` into an entry of that many bytes
        self.learn: Callable[[str, int], None] = lambda path, size: None
        self.on_end: Callable[[], None] = lambda: None  # told once every worker is done

    @classmethod
    def of(cls, store: Store, cache: DiskStore, index: SearchIndex, size: int) -> Pool:
        """The pool of a mount: its sessions, its store and the store's index (which leaves
        the sessions the workers index to them, meanwhile)."""
        config = Config(store.root, cache.folder, cache.cap >> 20, cache.mark)

        def held(phase: str, paths: list[str]) -> set[str]:
            return _held(store, cache, index, phase, paths)

        def skip(path: str, phase: str) -> str | None:
            sf = store.known(path)
            if phase == RENDER and sf is not None and sf.loaded is not None:
                return "left"  # (the mount parsed it: a walk came first)
            try:
                return "left" if store.files.lstat(path).st_size > MAX_BYTES else None
            except Unreadable:
                return "left"

        pool = cls(config, size, lambda: store.session_paths()[0], held, skip)
        pool.learn = cache.learn
        index.share(pool.covers, pool.want_index)
        pool.on_end = lambda: index.share(None)
        return pool

    def start(self) -> None:
        """List the sessions and run the passes (in a thread: the listing is a scan of
        every project folder)."""
        threading.Thread(target=self._run, name="workers", daemon=True).start()

    def want_index(self) -> None:
        """A query came: the index pass starts now, beside the render pass, if it has not."""
        self._asked.set()

    def said(self) -> str:
        """Where the passes are (``pisessfs status``)."""
        if self._total < 0:
            return "listing the sessions"
        with self._lock:  # (the feeders count under it; the passes in their order, whichever
            # started first: a query may start the index pass before the render pass's thread)
            said = ", ".join(
                self._passes[p].said(self._total) for p in (RENDER, INDEX) if p in self._passes
            )
        head = "done: " if self._ended else ""
        return f"{head}{self._total:,} sessions: {said or 'starting'}"

    def _run(self) -> None:
        try:
            paths = self.order()
            with self._lock:
                self._given, self._total = set(paths), len(paths)
            render = threading.Thread(
                target=self._pass, args=(RENDER, paths, self.size), name="render", daemon=True
            )
            render.start()
            while render.is_alive() and not self._asked.wait(0.1):
                pass
            if not self._stopped:
                self._pass(INDEX, paths, 1)
            render.join()
            if not self._stopped:
                log.info("workers: %s", self.said())
        except Exception:  # (a bug: the mount does what is asked, as without workers)
            log.exception("workers: stopped")
        finally:
            with self._lock:
                self._ended = True
            try:
                self.on_end()
            except Exception:
                log.exception("workers: telling their end failed")

    def _pass(self, phase: str, paths: list[str], size: int) -> None:
        one = Pass(phase, paths, self.held(phase, paths))
        with self._lock:
            self._passes[phase] = one
        feeders = [
            threading.Thread(target=self._feed, args=(one,), name=f"{phase}-{n}", daemon=True)
            for n in range(size)
        ]
        for t in feeders:
            t.start()
        for t in feeders:
            t.join()
        one.took = time.monotonic() - one.started

    def claim(self, path: str) -> Callable[[], None] | None:
        """A walk asks for session ``path``, which the mount has not parsed: what to wait for
        first when a worker renders it now (then the store holds it), else None, and it is
        the mount's to parse."""
        with self._lock:
            one = self._passes.get(RENDER)
            if one is None or one.took is not None:
                return None
            running = one.running.get(path)
            if running is not None:
                return functools.partial(_wait, running)
            if one.queue.pop(path, 0) is None:
                one.count(path, "left")
        return None

    def covers(self, path: str) -> bool:
        """Whether the workers index (and count) session ``path``, until they are done: it
        was handed to them, and not left to the mount."""
        with self._lock:
            one = self._passes.get(INDEX)
            left = one is not None and path in one.left
            return not self._ended and path in self._given and not left

    def close(self) -> None:
        """Stop the workers (at unmount): what they do now is not waited for."""
        with self._lock:
            self._stopped = True
            for one in self._passes.values():
                one.queue.clear()
            procs = list(self._procs)
        self._asked.set()
        for proc in procs:
            with contextlib.suppress(OSError):
                proc.kill()

    def _next(self, one: Pass) -> str | None:
        with self._lock:
            if self._stopped or not one.queue:
                return None
            path, _ = one.queue.popitem(last=False)
            one.running[path] = threading.Event()
            return path

    def _done(self, one: Pass, path: str, how: str) -> None:
        with self._lock:
            ev = one.running.pop(path)
            one.count(path, how)
        ev.set()

    def _feed(self, one: Pass) -> None:
        """One worker: started, given one session at a time until none is left."""
        proc: subprocess.Popen[bytes] | None = None
        deaths = 0
        try:
            while (path := self._next(one)) is not None:
                how = "left"
                try:
                    skipped = self.skip(path, one.phase)
                    if skipped is not None:
                        how = skipped
                        continue
                    proc = proc or self._spawn()
                    answer = _ask(proc, path, one.phase)
                    if answer is None and self._stopped:
                        break  # (killed at unmount)
                    if answer is None:  # it died (killed, out of memory): another one
                        deaths += 1
                        then = "another one starts" if deaths <= RESTARTS else "stopping"
                        log.warning("workers: a worker died on %s; %s", path, then)
                        self._reap(proc, 0)
                        proc = None
                        if deaths > RESTARTS:
                            self._stop()
                        continue
                    how = self._answered(one, path, answer)
                except OSError as err:
                    log.warning("workers: no worker could be started (%s); the mount renders", err)
                    self._stop()
                finally:
                    self._done(one, path, how)
        finally:
            if proc is not None:
                self._reap(proc, FINISH)

    def _answered(self, one: Pass, path: str, answer: dict[str, object]) -> str:
        """What a worker's answer for ``path`` says: "done" (a render's entry is told to the
        store), or "left" to the mount."""
        if answer.get("done") is not True:
            log.debug("workers: %s left to the mount: %s", path, answer.get("why"))
            return "left"
        made = answer.get("bytes")
        if one.phase == RENDER and isinstance(made, int):
            self.learn(path, made)
        return "done"

    def _spawn(self) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            self.config.argv(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            close_fds=True,
            start_new_session=True,  # not in the terminal's process group: no Ctrl-C
            cwd="/",
            env=package_env(),
        )
        with self._lock:
            self._procs.append(proc)
            if self._stopped:
                proc.kill()
        return proc

    def _reap(self, proc: subprocess.Popen[bytes], timeout: float) -> None:
        """End worker ``proc``: its input closed, it writes what it holds and exits, in
        ``timeout`` seconds, else it is killed."""
        with contextlib.suppress(OSError):
            assert proc.stdin is not None
            proc.stdin.close()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        with self._lock:
            self._procs.remove(proc)
        if proc.returncode not in (0, -9) and not self._stopped:
            log.warning("workers: a worker ended with %s", proc.returncode)

    def _stop(self) -> None:
        """No more sessions to the workers: the mount does what is left."""
        with self._lock:
            self._stopped = True
            for one in self._passes.values():
                for path in one.queue:
                    one.count(path, "left")
                one.queue.clear()
        self._asked.set()


def _held(
    store: Store, cache: DiskStore, index: SearchIndex, phase: str, paths: list[str]
) -> set[str]:
    """The sessions of ``paths`` the store holds for ``phase`` as their files are now (one
    read of its rows, a stat each)."""
    if phase == RENDER:
        entries = cache.idents()  # (each file's identity, as JSON)

        def holds(path: str, st: os.stat_result) -> bool:
            return entries.get(path) == orjson.dumps(file_ident(st)).decode()
    else:
        indexed = index.indexed()

        def holds(path: str, st: os.stat_result) -> bool:
            return path in indexed and indexed[path].holds(st)

    out = set()
    for path in paths:
        with contextlib.suppress(Unreadable):
            if holds(path, store.files.lstat(path)):
                out.add(path)
    return out


def _wait(event: threading.Event) -> None:
    event.wait()


def _ask(proc: subprocess.Popen[bytes], path: str, phase: str) -> dict[str, object] | None:
    """Worker ``proc``'s answer for session ``path`` in pass ``phase``; None when it died."""
    inp, out = proc.stdin, proc.stdout
    assert inp is not None and out is not None
    try:
        inp.write(f"{phase} {os.fsencode(path).hex()}\n".encode())
        inp.flush()
        line = out.readline()
    except (BrokenPipeError, ConnectionResetError):
        return None
    if not line:
        return None
    try:
        got = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return got if isinstance(got, dict) else None
