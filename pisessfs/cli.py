"""Command line: ``pisessfs mount``, ``pisessfs umount``, ``pisessfs demo``.

This module owns argument parsing, logging setup (the only place that configures logging), the
checks before mounting, daemonizing, and the user-facing error messages. The mount itself is
``mount.run``; what a mountpoint is and holds is ``mountpoint``.
"""

from __future__ import annotations

import argparse
import errno
import logging
import logging.handlers
import os
import select
import shutil
import sys
import threading
import time
from importlib import resources
from pathlib import Path

from . import __version__, mountpoint

log = logging.getLogger("pisessfs")

EXAMPLES = "examples/sessions"
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LOG_BYTES = 8 << 20  # a log file is rotated past this size ...
LOG_BACKUPS = 2  # ... and keeps this many old ones: at most 24 MiB per mountpoint
MOUNT_OPTIONS = {"ro", "rw", "nonempty"}
FSTYPE = "fuse.pisessfs"  # what mountinfo says of our mounts (subtype=pisessfs)


def default_sessions() -> Path:
    """``$PI_CODING_AGENT_DIR/sessions``, else ``~/.pi/agent/sessions`` (as Pi finds it)."""
    agent = os.environ.get("PI_CODING_AGENT_DIR")
    base = Path(agent).expanduser() if agent else Path.home() / ".pi" / "agent"
    return base / "sessions"


def default_log(mnt: str) -> Path:
    """``$XDG_STATE_HOME/pisessfs/<mountpoint with / as ->.log``, else under ~/.local/state."""
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    name = mnt.strip("/").replace("/", "-") or "root"
    return Path(state) / "pisessfs" / f"{name}.log"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pisessfs",
        description="Mount Pi coding-agent sessions as folders of Markdown message files.",
    )
    p.add_argument("--version", action="version", version=f"pisessfs {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    m = sub.add_parser("mount", help="mount a sessions folder")
    m.add_argument("mountpoint", help="an empty folder to mount on")
    m.add_argument("--sessions", metavar="DIR", help="sessions folder (default: as Pi finds it)")
    _common(m)
    u = sub.add_parser("umount", help="unmount (also a stale mount)")
    u.add_argument("mountpoint")
    u.add_argument(
        "--lazy", action="store_true", help="detach even if busy (gone once its users leave)"
    )
    d = sub.add_parser("demo", help="mount the example sessions shipped with pisessfs")
    d.add_argument(
        "mountpoint",
        nargs="?",
        default=str(Path.home() / "pisessfs-demo"),
        help="where to mount (default: ~/pisessfs-demo)",
    )
    _common(d)
    return p


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("-f", "--foreground", action="store_true", help="stay in the foreground")
    p.add_argument(
        "-o",
        dest="options",
        action="append",
        default=[],
        metavar="OPT",
        help="mount options: 'ro' read-only, 'nonempty' mount over a folder that is not empty",
    )
    p.add_argument("--allow-other", action="store_true", help="let other users see the mount")
    p.add_argument("--debug", action="store_true", help="log every request")
    p.add_argument("--debug-fuse", action="store_true", help="libfuse's own debug output")
    p.add_argument(
        "--cache-mb",
        type=int,
        default=1024,
        metavar="N",
        help="parsed sessions kept in memory, in MiB of session files (default 1024)",
    )
    p.add_argument(
        "--max-message-mb",
        type=float,
        default=8,
        metavar="N",
        help="largest message a save may append, in MiB (default 8)",
    )
    p.add_argument(
        "--log",
        metavar="FILE",
        help="log file, '-' for stderr (default: stderr with -f, else "
        "$XDG_STATE_HOME/pisessfs/<mountpoint>.log)",
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "umount":
        return umount(args.mountpoint, lazy=args.lazy)
    return mount(args)


def mount(args: argparse.Namespace) -> int:
    from .mount import MountError, MountOptions, run  # pyfuse3 is imported only when mounting

    options = {o for opt in args.options for o in opt.split(",") if o}
    unknown = options - MOUNT_OPTIONS
    if unknown:
        return _fail(f"unknown mount option(s): {', '.join(sorted(unknown))}", 2)
    mnt = mountpoint.canonical(args.mountpoint)
    why = mountpoint.problem(mnt, allow_other=args.allow_other, nonempty="nonempty" in options)
    if why:
        return _fail(why)
    if args.command == "demo":
        args.sessions = str(demo_sessions())
    sessions = Path(args.sessions).expanduser() if args.sessions else default_sessions()
    if not sessions.is_dir():
        return _fail(
            f"no sessions folder at {sessions} (try `pisessfs demo` to mount "
            "the example sessions, or --sessions DIR)",
            2,
        )
    logfile = _log_path(args, mnt)
    opts = MountOptions(
        sessions=str(sessions.resolve()),
        mountpoint=mnt,
        read_only="ro" in options,
        allow_other=args.allow_other,
        debug_fuse=args.debug_fuse,
        cache_mb=args.cache_mb,
        max_message_bytes=int(args.max_message_mb * (1 << 20)),
        log_file=str(logfile) if logfile else None,
    )
    report = _Report(None)
    if not args.foreground:
        child = _daemonize(mnt, logfile, opts.sessions)
        if child is None:  # the parent: the daemon reported the mount up
            if args.command == "demo":
                _demo_hints(Path(mnt))
            return 0
        report = child
    elif logfile:
        print(f"pisessfs: logging to {logfile}", file=sys.stderr)
    _logging(args.debug, logfile, redirect=not args.foreground)
    log.info(
        "pisessfs %s (pid %d): mounting %s on %s", __version__, os.getpid(), opts.sessions, mnt
    )
    try:
        run(opts, ready=lambda: report("ok"))
    except MountError as err:
        log.error("cannot mount on %s: %s", mnt, err)
        report(f"cannot mount on {mnt}: {err}")
        return 1
    return 0


def _fail(message: str, code: int = 1) -> int:
    print(f"pisessfs: {message}", file=sys.stderr)
    return code


def _log_path(args: argparse.Namespace, mnt: str) -> Path | None:
    """The log file, or None for stderr: ``--log``, else stderr in the foreground, else the
    default file (its folder made)."""
    if args.log == "-" or (args.foreground and not args.log):
        return None
    path = Path(args.log).expanduser().resolve() if args.log else default_log(mnt)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


class _LogFile(logging.handlers.RotatingFileHandler):
    """The daemon's log, capped at LOG_BYTES x (1 + LOG_BACKUPS). With ``redirect``, fd 2
    follows it across rotations, so that libfuse, fusermount3 and faulthandler write there too.
    """

    def __init__(self, path: Path, redirect: bool) -> None:
        super().__init__(path, maxBytes=LOG_BYTES, backupCount=LOG_BACKUPS, encoding="utf-8")
        self.redirect = redirect
        self._point_stderr()

    def doRollover(self) -> None:  # noqa: N802 (logging's name)
        super().doRollover()
        self._point_stderr()

    def _point_stderr(self) -> None:
        if self.redirect and self.stream is not None:
            os.dup2(self.stream.fileno(), 2)


def _logging(debug: bool, logfile: Path | None = None, redirect: bool = False) -> None:
    handler = _LogFile(logfile, redirect) if logfile else logging.StreamHandler()
    handler.setFormatter(logging.Formatter(FORMAT))
    logging.basicConfig(level=logging.DEBUG if debug else logging.INFO, handlers=[handler])


class _Report:
    """The daemon's one report to the parent waiting for the mount ("ok", or why it failed)."""

    def __init__(self, fd: int | None) -> None:
        self.fd = fd

    def __call__(self, message: str) -> None:
        if self.fd is None:
            return
        fd, self.fd = self.fd, None
        try:
            os.write(fd, message.encode(errors="replace") + b"\n")
        except OSError:
            pass
        finally:
            os.close(fd)


def _daemonize(mnt: str, logfile: Path | None, sessions: str) -> _Report | None:
    """Fork. The parent waits for the child's report, says where the log is and returns None
    (or exits 1 with the child's reason); the child returns its ``_Report``."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        os.setsid()
        os.chdir("/")
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        if logfile is not None:  # stdout and stderr go to the log (stderr: see _LogFile)
            os.dup2(null, 1)
        os.close(null)
        return _Report(write_end)
    os.close(write_end)
    said = _wait_report(read_end, 30)
    os.close(read_end)
    if said == "ok":
        where = f" (log: {logfile})" if logfile else ""
        print(f"pisessfs: mounted {sessions} on {mnt}{where}")
        return None
    if said is None:
        said = "the mount did not appear within 30 s"
    elif not said:  # it exited: only its exit closes the pipe without a report
        code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        said = f"the mount process exited (code {code}) before mounting"
        said += f"; see {logfile}" if logfile else ""
    print(f"pisessfs: {said}", file=sys.stderr)
    sys.exit(1)


def _wait_report(fd: int, timeout: float) -> str | None:
    """The child's first line; "" if it exited without one, None on timeout."""
    deadline = time.monotonic() + timeout
    data = b""
    while b"\n" not in data:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
    return data.split(b"\n", 1)[0].decode(errors="replace")


def umount(path: str, lazy: bool = False) -> int:
    """Unmount; a stale mount ("Transport endpoint is not connected") is cleared even when a
    process is inside; a busy live mount is reported with its holders unless ``lazy``."""
    mnt = mountpoint.canonical(path)
    here = mountpoint.top(mnt)
    if here is None:
        return _fail(f"{mnt} is not mounted")
    if here.fstype != FSTYPE:
        return _fail(f"{mnt} is not a pisessfs mount (it is {here.fstype}); not touching it")
    try:
        mountpoint.unmount(mnt, lazy=lazy)
        return 0
    except OSError as err:
        if err.errno != errno.EBUSY:
            return _fail(f"cannot unmount {mnt}: {err.strerror}")
    if _stale(mnt):
        try:
            mountpoint.unmount(mnt, lazy=True)
        except OSError as err:
            return _fail(f"cannot clear the stale mount on {mnt}: {err.strerror}")
        print(f"pisessfs: cleared the stale mount on {mnt} (its daemon was gone)", file=sys.stderr)
        return 0
    held = mountpoint.holders(mnt)
    who = ", ".join(f"pid {pid} ({name})" for pid, name in held[:10]) or "unknown processes"
    more = f" and {len(held) - 10} more" if len(held) > 10 else ""
    return _fail(
        f"{mnt} is busy, in use by {who}{more}; "
        f"close them, or `pisessfs umount --lazy {mnt}` to detach it anyway"
    )


def _stale(mnt: str, timeout: float = 2.0) -> bool:
    """Whether the mount's daemon is gone: opening its root answers ENOTCONN or ECONNABORTED
    (an open always reaches the daemon; a stat may be answered from the kernel's cache). Asked
    in a thread, so that a live but stuck mount cannot hang the command (it counts as live)."""
    answer: list[int] = []

    def probe() -> None:
        try:
            os.close(os.open(mnt, os.O_RDONLY | os.O_DIRECTORY))
            answer.append(0)
        except OSError as err:
            answer.append(err.errno or 0)

    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(timeout)
    return bool(answer) and answer[0] in (errno.ENOTCONN, errno.ECONNABORTED)


def demo_sessions() -> Path:
    """A fresh, writable copy of the bundled example sessions."""
    src = resources.files("pisessfs").joinpath(EXAMPLES)
    dst = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "pisessfs" / "demo"
    if dst.exists():
        shutil.rmtree(dst)
    with resources.as_file(src) as path:
        shutil.copytree(path, dst)
    return dst


def _demo_hints(mnt: Path) -> None:
    session = next(iter(sorted(mnt.glob("*/*/current"))), mnt / "PROJECT" / "SESSION").parent
    print(f"""The example sessions are mounted on {mnt}. Try:

  cd {mnt}
  ls                          # projects, then sessions: ls */
  S={session.relative_to(mnt)}
  ls $S/leaves                # one folder per branch
  cat $S/tree.txt             # every entry of the session
  ls -l $S/current/           # the branch Pi resumes, as numbered messages
  cat $S/current/0002-user.md
  grep -r "unicode fractions" .
  getfattr -d $S/current/0002-user.md

Unmount with: {_me()} umount {mnt}""")


def _me() -> str:
    """How to call this program again: ``pisessfs`` when that is on PATH, else its path."""
    me = os.path.abspath(sys.argv[0])
    found = shutil.which("pisessfs")
    return "pisessfs" if found and os.path.abspath(found) == me else me


if __name__ == "__main__":
    sys.exit(main())
