"""Running a mount: init, the trio loop, signals, and a clean close.

This module owns the lifecycle of one mount (pyfuse3 allows one per process): it builds the
store, view and adapter, mounts with ``auto_unmount`` so a killed daemon leaves no dead
mountpoint, turns SIGINT/SIGTERM into ``pyfuse3.terminate()`` and always closes. Argument
parsing and logging setup belong to ``cli``.
"""

from __future__ import annotations

import faulthandler
import functools
import logging
import signal
from dataclasses import dataclass
from types import FrameType

import pyfuse3
import trio

from .fuse_ops import Operations
from .sessions import Store, Unreadable
from .view import View
from .watch import Watcher

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class MountOptions:
    sessions: str
    mountpoint: str
    read_only: bool = False
    allow_other: bool = False
    debug_fuse: bool = False
    cache_mb: int = 1024
    max_message_bytes: int = 8 << 20


def fuse_options(opts: MountOptions) -> set[str]:
    options = set(pyfuse3.default_options)
    options |= {"fsname=pisessfs", "subtype=pisessfs", "auto_unmount", "noatime"}
    if opts.read_only:
        options.add("ro")
    if opts.allow_other:
        options.add("allow_other")
    if opts.debug_fuse:
        options.add("debug")
    return options


def run(opts: MountOptions) -> None:
    """Mount and serve until unmounted or signalled; raises RuntimeError if mounting fails."""
    store = Store(opts.sessions, cache_bytes=opts.cache_mb << 20)
    view = View(store)
    ops = Operations(view, read_only=opts.read_only, cap=opts.max_message_bytes)
    watcher = Watcher(store, view)
    # Block the signals until the loop runs: a SIGINT between init and main would otherwise
    # leave the mount behind (s3ql's lesson).
    blocked = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
    pyfuse3.init(ops, opts.mountpoint, fuse_options(opts))
    log.info("mounted %s on %s", store.root, opts.mountpoint)
    faulthandler.register(signal.SIGUSR1)  # dump stacks of a stuck mount: kill -USR1 <pid>
    clean = False
    try:
        trio.run(_serve, ops, watcher, blocked)
        clean = True
    finally:
        pyfuse3.close(unmount=clean)
        watcher.close()
        log.info("unmounted %s", opts.mountpoint)


async def _serve(ops: Operations, watcher: Watcher, blocked: set[signal.Signals]) -> None:
    def stop(signum: int, frame: FrameType | None) -> None:
        log.info("signal %d: unmounting", signum)
        pyfuse3.terminate()

    for sig in blocked:
        signal.signal(sig, stop)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, blocked)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ops.invalidator)
        nursery.start_soon(_watch, watcher, ops)
        await pyfuse3.main()
        nursery.cancel_scope.cancel()


async def _watch(watcher: Watcher, ops: Operations) -> None:
    """The live view: apply what inotify reports, reading big files off the loop."""
    while True:
        await trio.lowlevel.wait_readable(watcher.fd)
        try:
            for sf in watcher.handle(watcher.read()):
                try:
                    await trio.to_thread.run_sync(functools.partial(sf.load, whole_only=True))
                    sf.load()  # anything appended since: here, on the loop's thread
                except Unreadable as err:
                    log.warning("cannot read %s: %s", sf.path, err)
                ops.view.changed_session(sf.path)
        except Exception:
            log.exception("the live view failed on an event; it goes on with the next")
        ops.drain()
