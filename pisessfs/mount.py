"""Running a mount: init, the watchdog, the trio loop, signals, and a clean close.

This module owns the lifecycle of one mount (pyfuse3 allows one per process): it builds the
store, view and adapter, mounts with ``auto_unmount`` and starts the ``watchdog`` process, the
two of which see that a killed daemon leaves no dead mountpoint, and the ``appender``
process (on the first save), which sees that it leaves no half line, turns SIGINT/SIGTERM into
``pyfuse3.terminate()`` and always closes. It keeps the mount's ``status`` file (written before
the mount is reported up, rewritten now and then and on SIGUSR2, removed at a clean exit).
A failed mount raises ``MountError`` with libfuse's own reason. Argument parsing, the checks
before mounting and logging setup belong to ``cli``.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import stat
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import pyfuse3
import trio

from . import collector, heap, mountpoint, status
from .appender import Appender
from .fuse_ops import Asked, Operations
from .reads import OPEN_FLAGS
from .sessions import MIN_IDLE, Store, Unreadable
from .store import DiskStore, mark_for
from .view import View
from .warmup import WarmUp
from .watch import Watcher
from .watchdog import Guard
from .watchdog import start as start_watchdog
from .workers import Pool

log = logging.getLogger(__name__)


SWITCH_INTERVAL = 0.0005  # seconds
TRIM_AFTER = 2.0  # seconds between looks at whether work was done since the last trim
SAVE_SECONDS = 45.0  # the disk cache's save at unmount, at most
#: The pyfuse3 of ``scripts/install`` (with the walks patch): a plain ``pip install`` gets the
#: stock one, which works, with a request more per file a walk reads and four per folder.
FAST = OPEN_FLAGS
#: Idle request readers pyfuse3 keeps waiting (its ``min_tasks``). Its default, 1, suits a
#: loop that waits for every request; the patched one reads a queued request at once, so a
#: reader seldom waits, and a cold ``rg`` made it start a reader and end another every six
#: requests: 8 took a sixth off that walk's time (500 sessions, 7 rounds).
READERS_KEPT = 8


@dataclass(frozen=True, slots=True)
class MountOptions:
    sessions: str
    mountpoint: str
    read_only: bool = False
    allow_other: bool = False
    debug_fuse: bool = False
    cache_mb: int = 1024
    cache_idle: float = MIN_IDLE
    max_message_bytes: int = 8 << 20
    log_file: str | None = None  # where the watchdog logs; None: the inherited stderr
    flags: frozenset[str] = frozenset()  # kernel mount flags asked for: nosuid, nodev, noexec
    warm: bool = False  # render every session in the background (``warmup``)
    disk_cache: str | None = None  # the folder of the disk cache (``disk``); None: none
    disk_cache_mb: int = 4096
    workers: int = 0  # render workers (``workers``); none without a disk cache


class MountError(Exception):
    """Mounting failed; the message says why in one line (libfuse's words when it gave any)."""


def fuse_options(opts: MountOptions) -> set[str]:
    options = set(pyfuse3.default_options)
    options |= {"fsname=pisessfs", "subtype=pisessfs", "auto_unmount", "noatime"}
    if opts.read_only:
        options.add("ro")
    if opts.allow_other:
        options.add("allow_other")
    if opts.debug_fuse:
        options.add("debug")
    return options | (opts.flags & {"nosuid", "nodev", "noexec"})


def run(opts: MountOptions, ready: Callable[[], None] | None = None) -> None:
    """Mount and serve until unmounted or signalled; ``ready`` is called once the mount is up.

    Raises MountError if mounting fails."""
    store = Store(opts.sessions, cache_bytes=opts.cache_mb << 20, min_idle=opts.cache_idle)
    view = View(store)
    cache = _kept(opts, store)
    view.disk = store.disk = cache
    appender = Appender()
    ops = Operations(view, read_only=opts.read_only, cap=opts.max_message_bytes, put=appender.put)
    watcher = Watcher(store, view)
    ops.reads.watched = view.watched = lambda: not watcher.blind
    warmup = WarmUp(ops)
    # Block the signals until the loop runs: a SIGINT between init and main would otherwise
    # leave the mount behind (s3ql's lesson).
    blocked = _hold_signals()
    signal.signal(status.ASK, signal.SIG_IGN)  # before the status file names this pid
    _init(ops, opts)
    here = mountpoint.top(opts.mountpoint)  # which descriptors are of this mount (rm -r)
    ops.actions.walks.mount_id = here.mount_id if here is not None else None
    log.info("mounted %s on %s", store.root, opts.mountpoint)
    faulthandler.register(signal.SIGUSR1)  # dump stacks of a stuck mount: kill -USR1 <pid>
    # A request on the loop gives up the GIL at each syscall, and while a big session is
    # parsed or rendered in a thread it waits a whole switch interval to get it back: at
    # the default 5 ms, a lookup of three syscalls took 15 ms, a listing seconds.
    sys.setswitchinterval(SWITCH_INTERVAL)
    if not FAST:  # (once: status says it too)
        log.warning("%s", status.SLOW_PYFUSE3)
    refusals = status.LastRefusal()
    logging.getLogger("pisessfs").addHandler(refusals)
    clean = False
    guard: Guard | None = None
    state: status.Writer | None = None
    try:
        guard = _watchdog(opts)
        state = status.Writer(
            opts.mountpoint,
            sessions=store.root,
            log_file=opts.log_file,
            read_only=opts.read_only,
            cache_bytes=opts.cache_mb << 20,
            parsed=lambda: _parsed(store),
            kept=lambda: (len(cache), cache.total_bytes()) if cache.memory else (0, 0),
            held=lambda: (len(store.answers), store.held()),
            disk=lambda: _on_disk(cache),
            warm=lambda: warmup.state,
            workers=lambda: view.workers.said() if view.workers else "",
            search=view.search().said,
            requests=lambda: (Asked.requests, Asked.at_once),
            shown=lambda: _shown(store, cache),
            refused=lambda: refusals.last,
            fast=FAST,
        )
        state.write()
        view.workers = _pool(opts, view, cache)
        if ready is not None:
            ready()
        # After the loop a late SIGINT/SIGTERM (systemd's, after its ExecStop unmounted) stays
        # pending in the main thread (_stop_on), and meets _late in any other.
        trio.run(_serve, ops, watcher, blocked, state, warmup if opts.warm else None)
        clean = True
    finally:
        if state is not None:
            state.remove()
        pyfuse3.close(unmount=clean)
        if cache.memory:
            cache.close(SAVE_SECONDS)
        else:
            _save(view, cache, clean)
        appender.close()  # after the last request: it finishes the line it holds, then exits
        watcher.close()
        if guard is not None:
            guard.release()  # it sees the mount gone (or detaches what close left) and exits
        log.info("unmounted %s", opts.mountpoint)
        for signum in blocked:  # (Python's exit puts back the default action of a handler)
            signal.signal(signum, signal.SIG_IGN)


def _hold_signals() -> set[signal.Signals]:
    """SIGINT and SIGTERM blocked until the loop's receiver takes them (``_stop_on``), and
    :func:`_late` what that receiver puts back when the loop ends."""
    blocked = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
    for signum in blocked:
        signal.signal(signum, _late)
    return blocked


def _late(signum: int, frame: object) -> None:
    """A SIGINT/SIGTERM after the loop ended, while the mount closes (systemd sends SIGTERM
    right after its ExecStop unmounted): nothing to do, the close goes on. The main thread
    has them blocked then, but not the threads the loop started (they took its mask, with
    them let through): the default action there killed the daemon before its cache was
    saved. A handler, not SIG_IGN: setting SIG_IGN drops one pending since before the loop."""
    log.info("signal %d while closing: the close goes on", signum)


def _init(ops: Operations, opts: MountOptions) -> None:
    """``pyfuse3.init``, keeping what libfuse and fusermount3 print to make MountError's
    message (on success it is passed on to stderr unchanged)."""
    saved = os.dup(2)
    failure: RuntimeError | None = None
    with tempfile.TemporaryFile() as said:
        os.dup2(said.fileno(), 2)
        try:
            pyfuse3.init(ops, opts.mountpoint, fuse_options(opts))
        except RuntimeError as err:
            failure = err
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        said.seek(0)
        text = said.read()
    if failure is None:
        if text:
            os.write(2, text)
        return
    lines = [ln.strip() for ln in text.decode(errors="replace").splitlines() if ln.strip()]
    raise MountError("; ".join(lines) or str(failure))


def _kept(opts: MountOptions, store: Store) -> DiskStore:
    """Where what the parse cache drops is kept: the disk cache, else (none asked for, or
    its folder may not be used) a store in memory."""
    cache = _disk_cache(opts, store)
    if cache is None:
        cache = store.in_memory_store()
        cache.open()
    return cache


def _disk_cache(opts: MountOptions, store: Store) -> DiskStore | None:
    """The disk cache, when asked for and usable; its entries of sessions that are gone
    are removed in a thread meanwhile."""
    if opts.disk_cache is None:
        return None
    mark = mark_for(store.files.reach)
    cache = DiskStore(opts.disk_cache, opts.disk_cache_mb << 20, mark, store.root)
    if not cache.open():
        return None

    def gone(path: str) -> bool:
        try:
            return not stat.S_ISREG(store.files.lstat(path).st_mode)
        except (Unreadable, ValueError):
            return True

    def prune() -> None:
        removed, names = cache.prune(gone), cache.names.prune_heads(gone)
        if removed or names:
            log.info("disk cache: %d entries and %d names of sessions that are gone removed",
                     removed, names)  # fmt: skip

    threading.Thread(target=prune, name="disk-prune", daemon=True).start()
    log.info("disk cache in %s (%d entries)", opts.disk_cache, len(cache))
    return cache


def _pool(opts: MountOptions, view: View, cache: DiskStore) -> Pool | None:
    """The render workers (``workers``), started: none without a cache folder (what they
    make would have nowhere to go: the mount renders in-process) or with ``--workers 0``."""
    if cache.memory or opts.workers <= 0:
        return None
    pool = Pool.of(view.store, cache, view.search(), opts.workers)
    pool.start()
    return pool


def _on_disk(cache: DiskStore) -> tuple[str, int, int]:
    """The disk cache's folder, entries and bytes (for ``status``)."""
    return ("", 0, 0) if cache.memory else (cache.folder, len(cache), cache.total_bytes())


def _save(view: View, cache: DiskStore, clean: bool) -> None:
    """At unmount: what this mount made of the sessions still parsed, for the next one,
    for :data:`SAVE_SECONDS` at most (a service manager kills a daemon that takes long to
    stop: systemd after 90 s)."""
    start = time.monotonic()
    until = start + SAVE_SECONDS
    if view.workers is not None:
        view.workers.close()  # (what they do now is not waited for)
    try:
        cache.names.keep_heads(view.store.heads_to_keep())  # (the names: a few ms)
        if clean:
            view.carry.save_all(until)
    except Exception:  # the unmount itself is done: a cache not saved is only slower
        log.exception("disk cache: saving at unmount failed")
    finally:
        done = cache.close(max(0.0, until - time.monotonic()))  # (what was queued is written)
    said = "" if done else ", the rest given up"
    took = time.monotonic() - start
    log.info("disk cache: %d entries saved (%.1f s%s)", cache.saved, took, said)


def _watchdog(opts: MountOptions) -> Guard | None:
    try:
        return start_watchdog(opts.mountpoint, opts.log_file)
    except (OSError, LookupError) as err:
        log.warning("no watchdog (auto_unmount alone guards the mount): %s", err)
        return None


def _parsed(store: Store) -> tuple[int, int]:
    """How many sessions are parsed in memory and their size as files (for ``status``)."""
    for _ in range(5):  # a worker thread may load one meanwhile
        try:
            held = [store.known(path) for path in store.loaded_paths()]
        except RuntimeError:
            continue
        loaded = [sf.loaded for sf in held if sf is not None and sf.loaded is not None]
        return len(loaded), sum(f.size for f in loaded)
    return 0, 0


def _shown(store: Store, cache: DiskStore) -> tuple[int, int, int]:
    """Sessions shown, in how many projects, and how many of them the disk cache holds."""
    paths, projects = store.session_paths()
    kept = 0 if cache.memory else sum(cache.has(p) for p in paths)
    return len(paths), projects, kept


async def _serve(
    ops: Operations,
    watcher: Watcher,
    blocked: set[signal.Signals],
    state: status.Writer,
    warmup: WarmUp | None,
) -> None:
    async with trio.open_nursery() as nursery:
        await nursery.start(_stop_on, blocked)
        nursery.start_soon(ops.invalidator.run)
        nursery.start_soon(_watch, watcher, ops)
        nursery.start_soon(_refresh, state)
        nursery.start_soon(_trim, ops.view)
        nursery.start_soon(collector.run, lambda: Asked.last)
        if warmup is not None:
            nursery.start_soon(warmup.run)
        await pyfuse3.main(min_tasks=READERS_KEPT)
        nursery.cancel_scope.cancel()


async def _stop_on(
    blocked: set[signal.Signals], task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    """End the FUSE loop on SIGINT/SIGTERM (one that came before the loop ran, too: they were
    blocked until now).

    A task and not a signal handler: a handler runs between any two bytecodes of trio's own
    loop, and ``pyfuse3.terminate()`` there reschedules the task that waits on /dev/fuse,
    perhaps one trio is rescheduling at that moment (a crash, and exit code 1, on a busy
    machine)."""
    with trio.open_signal_receiver(*blocked) as signals:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, blocked)
        try:
            task_status.started()
            async for signum in signals:
                log.info("signal %d: unmounting", signum)
                pyfuse3.terminate()
        finally:
            # Blocked again before the receiver puts back the default handlers: a late
            # SIGTERM would otherwise kill the daemon before it unmounts.
            signal.pthread_sigmask(signal.SIG_BLOCK, blocked)


async def _watch(watcher: Watcher, ops: Operations) -> None:
    """The live view: what inotify reports drops the kernel's caches of what changed; the
    requests that follow read the sessions again (in steps, big work off the loop)."""
    while True:
        await trio.lowlevel.wait_readable(watcher.fd)
        try:
            watcher.handle(watcher.read())
        except Exception:
            log.exception("the live view failed on an event; it goes on with the next")
        ops.drain()


async def _trim(view: View) -> None:
    """Give back what the C heap kept of the parses and renders of a walk (``heap``), every
    ``TRIM_AFTER`` seconds in which some were made: the last trim of a walk comes at most that
    long after it. In a thread: it takes milliseconds."""
    made = view.wholes.made
    while True:
        await trio.sleep(TRIM_AFTER)
        if view.wholes.made != made:
            made = view.wholes.made
            said = log.isEnabledFor(logging.DEBUG)
            before = (status.rss(os.getpid()) or 0) if said else 0
            if await trio.to_thread.run_sync(heap.trim, abandon_on_cancel=True) and said:
                after = status.rss(os.getpid()) or 0
                log.debug("heap trimmed: %d -> %d MiB resident", before >> 20, after >> 20)


async def _refresh(state: status.Writer) -> None:
    """Rewrite the status file every ``status.REFRESH`` seconds, and when asked (SIGUSR2),
    in a thread (it counts the sessions shown: a scan of every project folder)."""
    with trio.open_signal_receiver(status.ASK) as asked:
        while True:
            with trio.move_on_after(status.REFRESH):
                await asked.__anext__()
            await trio.to_thread.run_sync(state.write, abandon_on_cancel=True)
