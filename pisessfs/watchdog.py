"""The guard against a dead mount: a small process that outlives a killed daemon.

``auto_unmount`` is not enough: fusermount3 3.14's helper opens the mountpoint when the daemon
dies and unmounts only if that open fails with ENOTCONN; when the daemon dies with requests in
flight it fails with ECONNABORTED and the mount stays dead ("Transport endpoint is not
connected"), more often on a busy machine. So ``mount.run`` starts this module as a process of
its own right after the mount is up (``start``): fork+exec, in a new session, holding no
``/dev/fuse`` descriptor, its cwd ``/``, and only the read end of a pipe whose write end only
the daemon holds. EOF on that pipe means the daemon is gone (killed, crashed, or done and
closing it on purpose). Then, if the path still shows the very mount the daemon made (same
mount id, device, path and type in mountinfo, and not covered by a later mount), it detaches it
and logs one line; otherwise it exits quietly. It never stats or opens anything under the
mountpoint, and never prints a traceback.

Run as ``python -m pisessfs.watchdog --fd N --mount-id ID --dev MAJ:MIN --type TYPE --pid PID
[--log FILE] MOUNTPOINT``; it imports only the standard library and ``mountpoint``.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys

from . import mountpoint
from .appender import package_env

log = logging.getLogger("pisessfs.watchdog")

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class Guard:
    """The daemon's side: the pipe's write end and the watchdog process."""

    def __init__(self, proc: subprocess.Popen[bytes], fd: int) -> None:
        self.proc = proc
        self._fd: int | None = fd

    def release(self, timeout: float = 5.0) -> None:
        """Tell the watchdog the daemon is done (it checks the mount is gone) and reap it."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            log.warning("the watchdog (pid %d) did not exit; leaving it", self.proc.pid)


def start(mnt: str, log_file: str | None = None) -> Guard:
    """Start the watchdog of the mount now on ``mnt`` (canonical). Raises OSError, or
    LookupError when mountinfo does not show a mount there."""
    here = mountpoint.top(mnt)
    if here is None:
        raise LookupError(f"{mnt} is not in {mountpoint.MOUNTINFO}")
    read_end, write_end = os.pipe()  # both close-on-exec: no other child inherits them
    cmd = [sys.executable, "-m", "pisessfs.watchdog", "--fd", str(read_end)]
    cmd += ["--mount-id", str(here.mount_id), "--dev", here.dev, "--type", here.fstype]
    cmd += ["--pid", str(os.getpid())]
    cmd += ["--log", log_file] if log_file else []
    try:
        proc = subprocess.Popen(
            [*cmd, "--", mnt],
            stdin=subprocess.DEVNULL,
            close_fds=True,
            pass_fds=(read_end,),
            start_new_session=True,
            cwd="/",
            env=package_env(),
        )
    except BaseException:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)
    return Guard(proc, write_end)


def guard(mnt: str, ours: mountpoint.Mount, fd: int, daemon: int) -> int:
    """Wait for EOF on ``fd``, then detach ``mnt`` if it still shows ``ours``."""
    while os.read(fd, 4096):
        pass
    here = mountpoint.top(mnt)
    if here is None:
        return 0
    if not here.same(ours):
        if any(m.same(ours) for m in mountpoint.table()):
            log.error(
                "the daemon (pid %d) is gone but a later mount covers its mount on %s; "
                "not touching either",
                daemon,
                mnt,
            )
            return 1
        return 0  # a later mount on the same path: not ours
    try:
        mountpoint.unmount(mnt, lazy=True)
    except OSError as err:
        now = mountpoint.top(mnt)
        if now is None or not now.same(ours):
            return 0  # someone (fusermount3's auto_unmount helper) was quicker
        log.error(
            "the daemon (pid %d) is gone; cannot detach its dead mount on %s: %s",
            daemon,
            mnt,
            err.strerror,
        )
        return 1
    log.warning("the daemon (pid %d) is gone and left %s mounted: detached it", daemon, mnt)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="pisessfs.watchdog")
    p.add_argument("--fd", type=int, required=True)
    p.add_argument("--mount-id", type=int, required=True)
    p.add_argument("--dev", required=True)
    p.add_argument("--type", required=True)
    p.add_argument("--pid", type=int, required=True)
    p.add_argument("--log")
    p.add_argument("mountpoint")
    args = p.parse_args(argv)
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)  # only the daemon's end matters; SIGTERM still ends it
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})  # the daemon had it blocked
    logging.raiseExceptions = False  # a closed log is no reason for a traceback
    handler: logging.Handler = (
        logging.FileHandler(args.log, delay=True) if args.log else logging.StreamHandler()
    )
    handler.setFormatter(logging.Formatter(FORMAT))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    ours = mountpoint.Mount(args.mount_id, args.dev, args.mountpoint, args.type, "")
    try:
        return guard(args.mountpoint, ours, args.fd, args.pid)
    except BaseException as err:  # a guard never prints a traceback
        log.error("watchdog of %s failed: %r", args.mountpoint, err)
        return 1


if __name__ == "__main__":
    sys.exit(main())
