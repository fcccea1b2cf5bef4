"""Command line: ``pisessfs mount``, ``pisessfs umount``, ``pisessfs demo``.

This module owns argument parsing, logging setup (the only place that configures logging),
daemonizing, and the user-facing error messages. The mount itself is ``mount.run``.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path

log = logging.getLogger("pisessfs")

EXAMPLES = "examples/sessions"


def default_sessions() -> Path:
    """``$PI_CODING_AGENT_DIR/sessions``, else ``~/.pi/agent/sessions`` (as Pi finds it)."""
    agent = os.environ.get("PI_CODING_AGENT_DIR")
    base = Path(agent).expanduser() if agent else Path.home() / ".pi" / "agent"
    return base / "sessions"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pisessfs",
        description="Mount Pi coding-agent sessions as folders of Markdown message files.",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    m = sub.add_parser("mount", help="mount a sessions folder")
    m.add_argument("mountpoint", help="an empty folder to mount on")
    m.add_argument("--sessions", metavar="DIR", help="sessions folder (default: as Pi finds it)")
    _common(m)
    u = sub.add_parser("umount", help="unmount (also a stale mount)")
    u.add_argument("mountpoint")
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
        help="mount options; 'ro' makes the mount read-only",
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
    p.add_argument("--log", metavar="FILE", help="log file when running in the background")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "umount":
        return umount(args.mountpoint)
    if args.command == "demo":
        args.sessions = str(demo_sessions())
    return mount(args)


def mount(args: argparse.Namespace) -> int:
    from .mount import MountOptions, run  # pyfuse3 is imported only when mounting

    sessions = Path(args.sessions).expanduser() if args.sessions else default_sessions()
    if not sessions.is_dir():
        print(
            f"pisessfs: no sessions folder at {sessions} (try `pisessfs demo` to mount "
            "the example sessions, or --sessions DIR)",
            file=sys.stderr,
        )
        return 2
    mnt = Path(args.mountpoint).expanduser()
    if not mnt.is_dir():
        print(f"pisessfs: mountpoint {mnt} is not a folder (mkdir it first)", file=sys.stderr)
        return 2
    options = {o for opt in args.options for o in opt.split(",") if o}
    unknown = options - {"ro", "rw"}
    if unknown:
        print(f"pisessfs: unknown mount option(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    opts = MountOptions(
        sessions=str(sessions),
        mountpoint=str(mnt),
        read_only="ro" in options,
        allow_other=args.allow_other,
        debug_fuse=args.debug_fuse,
        cache_mb=args.cache_mb,
        max_message_bytes=int(args.max_message_mb * (1 << 20)),
    )
    if not args.foreground and _daemonize(mnt, args.log):
        if args.command == "demo":
            _demo_hints(mnt)
        return 0
    _logging(args.debug)
    try:
        run(opts)
    except RuntimeError as err:
        log.error(
            "cannot mount on %s: %s (is it already mounted? try `pisessfs umount %s`)",
            mnt,
            err,
            mnt,
        )
        return 1
    return 0


def _logging(debug: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def _daemonize(mnt: Path, logfile: str | None) -> bool:
    """Fork; the parent waits for the mount to appear and returns True, the child False."""
    pid = os.fork()
    if pid == 0:
        os.setsid()
        target = logfile or os.devnull
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        return False
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if os.path.ismount(mnt):
            return True
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            print(
                f"pisessfs: mounting failed (exit {os.waitstatus_to_exitcode(status)}); "
                "run with -f to see why",
                file=sys.stderr,
            )
            sys.exit(1)
        time.sleep(0.02)
    print("pisessfs: the mount did not appear within 30 s", file=sys.stderr)
    sys.exit(1)


def umount(mountpoint: str) -> int:
    """Unmount; a stale mount ("Transport endpoint is not connected") is detached lazily."""
    tool = shutil.which("fusermount3") or shutil.which("fusermount") or "fusermount3"
    first = subprocess.run([tool, "-u", mountpoint], capture_output=True, text=True)
    if first.returncode == 0:
        return 0
    lazy = subprocess.run([tool, "-u", "-z", mountpoint], capture_output=True, text=True)
    if lazy.returncode == 0:
        return 0
    print(f"pisessfs: cannot unmount {mountpoint}: {first.stderr.strip()}", file=sys.stderr)
    return 1


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
