"""Command line: ``pisessfs mount``, ``umount``, ``demo``, ``status``, ``install-unit``, and
``pisessfs SESSIONS MOUNTPOINT -o OPTIONS``, the shape in which mount(8) runs it through
mount.fuse3 for an /etc/fstab line of type ``fuse.pisessfs``.

This module owns argument parsing, logging setup (the only place that configures logging), the
checks before mounting, daemonizing, telling systemd the mount is up (``sd_notify``, by hand),
the systemd unit, and the user-facing messages. The mount itself is ``mount.run``; what a
mountpoint is and holds is ``mountpoint``; what ``status`` shows is ``status``.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import logging
import logging.handlers
import math
import os
import pwd
import select
import shutil
import socket
import sys
import textwrap
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from . import __version__, mountpoint, status, store, unit
from .unit import UNIT

log = logging.getLogger("pisessfs")

EXAMPLES = "examples/sessions"
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LOG_BYTES = 8 << 20  # a log file is rotated past this size ...
LOG_BACKUPS = 2  # ... and keeps this many old ones: at most 24 MiB per mountpoint
FSTYPE = status.FSTYPE  # what mountinfo says of our mounts (subtype=pisessfs)
COMMANDS = ("mount", "umount", "demo", "status", "install-unit")
MAX_MESSAGE_MB = 1024  # --max-message-mb at most
MAX_WORKERS = 64  # --workers at most
# -o options: what they set, the kernel flags passed on, and those with nothing to do here
# (mount(8) and mount.fuse3 pass some on: rw, nosuid, nodev, noexec with "user", dev, suid).
OPTION_FLAGS = {"ro", "nonempty", "allow_other", "debug", "warm"}
OPTION_VALUES = {
    *("log", "cache_mb", "cache_idle", "max_message_mb", "disk_cache", "disk_cache_mb"),
    "workers",
}
KERNEL_FLAGS = {"nosuid", "nodev", "noexec"}
IGNORED = {
    *("rw", "suid", "dev", "exec", "defaults", "auto", "noauto", "user", "users", "nouser"),
    *("owner", "group", "_netdev", "nofail", "async", "sync", "dirsync", "atime", "noatime"),
    *("relatime", "norelatime", "strictatime", "nodiratime", "lazytime", "silent", "loud"),
}
IGNORED_PREFIXES = ("x-", "user=", "comment=")


def default_sessions() -> Path:
    """Where Pi keeps its sessions, found as Pi 1.6 finds it: ``$PI_CODING_AGENT_SESSION_DIR``,
    else the ``sessionDir`` of Pi's user settings (``<agent dir>/settings.json``), else
    ``<agent dir>/sessions``; the agent dir is ``$PI_CODING_AGENT_DIR``, else ``~/.pi/agent``.
    A relative ``sessionDir`` is not used: Pi reads it from each project's folder."""
    env = os.environ.get("PI_CODING_AGENT_SESSION_DIR")
    if env:
        return _pi_path(env)
    agent_env = os.environ.get("PI_CODING_AGENT_DIR")
    agent = _pi_path(agent_env) if agent_env else Path.home() / ".pi" / "agent"
    return _configured_sessions(agent / "settings.json") or agent / "sessions"


def _pi_path(text: str) -> Path:
    """A path as Pi reads one from its settings or environment (``~`` and ``~/`` only, and
    a ``file://`` URL)."""
    if text == "~" or text.startswith("~/"):
        return Path.home() / text[2:]
    if text.startswith("file://"):
        return Path(unquote(urlsplit(text).path))
    return Path(text)


def _configured_sessions(settings: Path) -> Path | None:
    """The absolute ``sessionDir`` of Pi's settings file, if it names one."""
    try:
        value = json.loads(settings.read_bytes()).get("sessionDir")
    except (OSError, ValueError, AttributeError, RecursionError):  # none, not JSON, not {}
        return None
    if not isinstance(value, str) or not value:
        return None
    found = _pi_path(value)
    return found if found.is_absolute() else None


def default_log(mnt: str) -> Path:
    """``$XDG_STATE_HOME/pisessfs/<mountpoint with / as ->.log``, else under ~/.local/state."""
    return status.state_home() / "pisessfs" / f"{status.slug(mnt)}.log"


@dataclass
class Options:
    """What ``-o`` asked for (comma-separated, as mount(8) writes them; repeatable)."""

    ro: bool = False
    nonempty: bool = False
    allow_other: bool = False
    debug: bool = False
    warm: bool = False
    kernel: set[str] = field(default_factory=set)
    log: str | None = None
    cache_mb: int | None = None
    cache_idle: float | None = None
    max_message_mb: float | None = None
    disk_cache: str | None = None
    disk_cache_mb: int | None = None
    workers: int | None = None


def parse_options(values: list[str]) -> Options:
    """``-o`` values as ``Options``; raises ValueError with the one line to show."""
    out = Options()
    unknown = []
    for raw in (o.strip() for value in values for o in value.split(",")):
        key, eq, value = raw.partition("=")
        key = key.replace("-", "_")
        if not raw or raw in IGNORED or raw.startswith(IGNORED_PREFIXES):
            continue
        if key in KERNEL_FLAGS and not eq:
            out.kernel.add(key)
        elif key in OPTION_FLAGS and not eq:
            setattr(out, key, True)
        elif key in OPTION_VALUES and eq:
            if not value:
                raise ValueError(f"mount option {key}= needs a value")
            if key in ("log", "disk_cache"):
                setattr(out, key, value)
                continue
            try:
                whole = key.endswith("cache_mb") or key == "workers"
                number = int(value) if whole else float(value)
            except ValueError:
                raise ValueError(f"mount option {raw}: not a number") from None
            setattr(out, key, number)
        else:
            unknown.append(raw)
    if unknown:
        raise ValueError(
            f"unknown mount option(s): {', '.join(unknown)} (pisessfs takes ro, nonempty, "
            "allow_other, debug, warm, log=FILE, cache_mb=N, cache_idle=S, max_message_mb=N, "
            "disk_cache=DIR|off, disk_cache_mb=N, workers=N, and mount's own)"
        )
    return out


#: What ``--help`` and the man page show as examples (command, what it does).
USAGE_EXAMPLES = [
    ("pisessfs demo", "mount the example sessions on ~/pisessfs-demo"),
    ("pisessfs mount ~/pi", "mount Pi's sessions on ~/pi (in the background)"),
    ("grep -r docker ~/pi", "every message that says it, once (conversation.md)"),
    ("ls ~/pi/search/'docker leak*'", "messages with both words, best first, as links"),
    ("echo 'and tests' > ~/pi/P/S/current/next.md", "a new message after the last one"),
    ("vim ~/pi/P/S/current/0004-user.md", "edit a message: saving it forks, as in Pi"),
    ("pisessfs status", "this user's mounts, their logs, what they refused"),
    ("pisessfs umount ~/pi", "unmount"),
]
#: Where the log goes, and how mount(8) runs pisessfs (``--help`` and the man page).
LOG_NOTE = (
    "The daemon logs to $XDG_STATE_HOME/pisessfs/<mountpoint>.log (else ~/.local/state/...; "
    "--log FILE for another, stderr with -f); `pisessfs status` names each mount's log. "
    "mount(8) runs `pisessfs SESSIONS MOUNTPOINT -o OPTIONS` (through mount.fuse3) for an "
    "/etc/fstab line of type fuse.pisessfs."
)


def _help_epilog() -> str:
    rows = [f"  {cmd:<44} {what}" for cmd, what in USAGE_EXAMPLES]
    note = textwrap.fill(LOG_NOTE + " `man pisessfs` has all of it.", 88)
    return "\n".join(["examples:", *rows, "", note])


def _sessions_help(for_man: bool) -> str:
    """What ``--sessions`` defaults to: the folder itself on this machine, or how it is
    found (the man page, the same on every machine)."""
    how = "as Pi finds it: $PI_CODING_AGENT_SESSION_DIR, Pi's sessionDir setting, else "
    how += "$PI_CODING_AGENT_DIR/sessions, else ~/.pi/agent/sessions"
    return f"sessions folder (default: {how if for_man else default_sessions()})"


def build_parser(for_man: bool = False) -> argparse.ArgumentParser:
    """The command line. ``for_man``: help texts that do not depend on this machine."""
    p = argparse.ArgumentParser(
        prog="pisessfs",
        description="Mount Pi coding-agent sessions as folders of Markdown message files.",
        epilog=_help_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"pisessfs {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    m = sub.add_parser(
        "mount",
        help="mount a sessions folder",
        description="Mount a sessions folder on MOUNTPOINT, in the background (-f: in the "
        "foreground), and return once it is up.",
        epilog="mount(8) runs it as `pisessfs SESSIONS MOUNTPOINT -o OPTIONS` for an /etc/fstab "
        "line of type fuse.pisessfs (docs/guide.md, 'Mount it at login').",
    )
    m.add_argument("mountpoint", help="an empty folder to mount on")
    m.add_argument("--sessions", metavar="DIR", help=_sessions_help(for_man))
    _common(m)
    u = sub.add_parser(
        "umount",
        help="unmount (also a stale mount)",
        description='Unmount a pisessfs mount; also one whose daemon died ("Transport '
        'endpoint is not connected"). A busy mount is reported with what holds it.',
    )
    u.add_argument("mountpoint", help="where it is mounted (a folder given to mount or demo)")
    u.add_argument(
        "--lazy", action="store_true", help="detach even if busy (gone once its users leave)"
    )
    d = sub.add_parser(
        "demo",
        help="mount the example sessions shipped with pisessfs",
        description="Mount a writable copy of the example sessions shipped with pisessfs, "
        "and print what to try. The copy is kept across demos (--reset starts over).",
    )
    d.add_argument(
        "mountpoint",
        nargs="?",
        default=str(Path.home() / "pisessfs-demo"),
        help="where to mount (default: ~/pisessfs-demo)",
    )
    d.add_argument(
        "--reset",
        action="store_true",
        help="start again from the shipped sessions (what you saved in the demo is lost)",
    )
    _common(d)
    s = sub.add_parser(
        "status",
        help="this user's mounts: sessions shown, read-only or not, log, last refusal",
        description="This user's pisessfs mounts: where, of which sessions folder, how many "
        "sessions they show, read-only or not, the daemon's pid, memory and log, and the last "
        "save it refused and why.",
    )
    s.add_argument("--json", action="store_true", help="one JSON list, for scripts")
    i = sub.add_parser(
        "install-unit",
        help=f"write the systemd user unit {UNIT} (start a mount at login)",
        description=f"Write ~/.config/systemd/user/{UNIT}, a template whose instance is the "
        "escaped mountpoint: systemctl --user enable --now "
        "pisessfs@$(systemd-escape --path ~/pi).service",
    )
    i.add_argument("--sessions", metavar="DIR", help=_sessions_help(for_man))
    i.add_argument(
        "-o",
        dest="options",
        action="append",
        default=[],
        metavar="OPT",
        help="mount options for the unit's mounts, as for `pisessfs mount -o`",
    )
    i.add_argument("--allow-other", action="store_true", help="let other users see the mounts")
    i.add_argument("--print", action="store_true", help="print the unit instead of writing it")
    return p


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("-f", "--foreground", action="store_true", help="stay in the foreground")
    p.add_argument(
        "-o",
        dest="options",
        action="append",
        default=[],
        metavar="OPT",
        help="mount options, comma-separated: 'ro' read-only, 'nonempty' mount over a folder "
        "that is not empty, allow_other, debug, warm, log=FILE, cache_mb=N, cache_idle=S, "
        "max_message_mb=N, disk_cache=DIR|off, disk_cache_mb=N, workers=N (mount's own, "
        "such as rw, nosuid, noauto, user, are accepted)",
    )
    p.add_argument("--allow-other", action="store_true", help="let other users see the mount")
    p.add_argument("--debug", action="store_true", help="log every request")
    p.add_argument("--debug-fuse", action="store_true", help="libfuse's own debug output")
    p.add_argument(
        "--warm",
        action="store_true",
        help="render every session in the background after mounting, while nothing is asked, "
        "into the disk cache (those it lacks; with --disk-cache off, until the memory cache is "
        "full): the first grep -r is then as fast as a repeated one (about 40 s of one core "
        "per GB of sessions, once; pisessfs status shows where it is)",
    )
    p.add_argument(
        "--cache-mb",
        type=int,
        metavar="N",
        help="parsed sessions kept in memory, in MiB of session files (default 1024)",
    )
    p.add_argument(
        "--disk-cache",
        metavar="DIR",
        help="keep what the mount made of each session across mounts in DIR, so the first "
        "grep -r after a mount does not parse every session again; 'off' for none "
        "(default $XDG_CACHE_HOME/pisessfs, else ~/.cache/pisessfs)",
    )
    p.add_argument(
        "--disk-cache-mb",
        type=int,
        metavar="N",
        help="the disk cache's size at most, in MiB (default 4096; oldest entries out first)",
    )
    p.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="processes that render the sessions the disk cache lacks into it from the mount's "
        "start, in the order a walk meets them, so the first grep -r uses every core (default: "
        "one per core; 0 for none: the mount renders what is asked, in-process; none with "
        "--disk-cache off)",
    )
    p.add_argument(
        "--cache-idle",
        type=float,
        metavar="S",
        help="seconds a parsed session stays after its last use, even past the cap (default 5)",
    )
    p.add_argument(
        "--max-message-mb",
        type=float,
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
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] not in COMMANDS and not argv[0].startswith("-") and os.sep in argv[0]:
        return mount(_helper_args(argv))  # mount(8) through mount.fuse3: SESSIONS MNT -o ...
    args = build_parser().parse_args(argv)
    if args.command == "umount":
        return umount(args.mountpoint, lazy=args.lazy)
    if args.command == "status":
        return show_status(as_json=args.json)
    if args.command == "install-unit":
        return install_unit(args)
    return mount(args)


def _disk_folder(asked: str | None) -> str | None:
    """The disk cache's folder: the one asked for, none for ``off``, else the default."""
    if asked == "off":
        return None
    return os.path.abspath(os.path.expanduser(asked)) if asked else store.default_folder()


def _helper_args(argv: list[str]) -> argparse.Namespace:
    """``pisessfs SESSIONS MOUNTPOINT [-o OPTIONS]``: what mount.fuse3 runs for ``mount -t
    fuse.pisessfs SESSIONS MOUNTPOINT`` (it drops noauto, user, _netdev and such, and adds
    dev,suid or mount's nosuid,nodev,noexec). It mounts in the background and says nothing
    unless it fails, as mount(8) expects. mount(8) clears $HOME and mount.fuse3 sets it to
    /root, so HOME is taken from the password database."""
    p = argparse.ArgumentParser(
        prog="pisessfs",
        usage="pisessfs SESSIONS MOUNTPOINT [-o OPTIONS]",
        description="The shape mount(8) runs for an /etc/fstab line of type fuse.pisessfs: "
        "mount SESSIONS on MOUNTPOINT in the background.",
    )
    p.add_argument("sessions")
    p.add_argument("mountpoint")
    p.add_argument("-o", dest="options", action="append", default=[], metavar="OPTIONS")
    args = p.parse_args(argv)
    vars(args).update(
        command="mount",
        foreground=False,
        allow_other=False,
        debug=False,
        debug_fuse=False,
        cache_mb=None,
        cache_idle=None,
        max_message_mb=None,
        warm=False,
        log=None,
        disk_cache=None,
        disk_cache_mb=None,
        workers=None,
        quiet=True,
    )
    with contextlib.suppress(KeyError):
        os.environ["HOME"] = pwd.getpwuid(os.getuid()).pw_dir
    return args


def mount(args: argparse.Namespace) -> int:
    try:
        o = parse_options(args.options)
    except ValueError as err:
        return _fail(str(err), 2)
    allow_other = args.allow_other or o.allow_other
    mnt = mountpoint.canonical(args.mountpoint)
    made = args.command == "demo" and _make_folder(mnt)
    why = mountpoint.problem(mnt, allow_other=allow_other, nonempty=o.nonempty)
    if why:
        if made:
            with contextlib.suppress(OSError):
                os.rmdir(mnt)
        return _fail(why)
    try:  # pyfuse3 is imported only when mounting
        from .mount import MountError, MountOptions, run
        from .sessions import MIN_IDLE
    except ImportError as err:
        if (err.name or "").startswith(__package__ or "pisessfs"):
            raise  # a fault of pisessfs itself, not of the FUSE install: show where
        return _fail(_no_pyfuse3(err))
    said = _demo_copy(args)
    sessions = Path(args.sessions).expanduser() if args.sessions else default_sessions()
    if not sessions.is_dir():
        return _fail(
            _a_file(sessions)
            or f"no sessions folder at {sessions} (try `pisessfs demo` to mount "
            "the example sessions, or --sessions DIR)",
            2,
        )
    args.log = args.log or o.log
    try:
        logfile = _log_path(args, mnt)
    except OSError as err:
        return _fail(f"cannot write the log in {err.filename}: {err.strerror} (--log FILE)")
    try:
        tunables = _tunables(args, o, MIN_IDLE)
    except ValueError as err:
        return _fail(str(err), 2)
    _cache_said(tunables["disk_cache"], quiet=getattr(args, "quiet", False))
    opts = MountOptions(
        sessions=str(sessions.resolve()),
        mountpoint=mnt,
        read_only=o.ro,
        allow_other=allow_other,
        debug_fuse=args.debug_fuse,
        log_file=str(logfile) if logfile else None,
        flags=frozenset(o.kernel),
        warm=args.warm or o.warm,
        **tunables,
    )
    notify = _Notify(os.environ.pop("NOTIFY_SOCKET", None))
    report = _Report(None)
    if not args.foreground:
        child = _daemonize(mnt, logfile, opts.sessions, quiet=getattr(args, "quiet", False))
        if child is None:  # the parent: the daemon reported the mount up
            if args.command == "demo":
                _demo_hints(Path(mnt), said)
            return 0
        report = child
    elif logfile:
        print(f"pisessfs: logging to {logfile}", file=sys.stderr)
    _logging(args.debug or o.debug, logfile, redirect=not args.foreground)
    log.info(
        "pisessfs %s (pid %d): mounting %s on %s", __version__, os.getpid(), opts.sessions, mnt
    )

    def ready() -> None:
        report("ok")
        notify(f"READY=1\nMAINPID={os.getpid()}\nSTATUS=mounted {opts.sessions} on {mnt}")

    try:
        run(opts, ready=ready)
    except MountError as err:
        log.error("cannot mount on %s: %s", mnt, err)
        report(f"cannot mount on {mnt}: {err}")
        return 1
    return 0


def _tunables(args: argparse.Namespace, o: Options, min_idle: float) -> dict[str, Any]:
    """The caches' and the writes' settings, from the flags or else ``-o`` (ValueError: the
    one line to show)."""

    def pick(name: str) -> Any:
        given = getattr(args, name)
        return given if given is not None else getattr(o, name)

    idle, disk_mb, max_mb = pick("cache_idle"), pick("disk_cache_mb"), pick("max_message_mb")
    cache_mb = pick("cache_mb")
    if idle is not None and not 0 <= idle < math.inf:
        raise ValueError(f"--cache-idle {idle:g}: must be a number of seconds >= 0")
    for flag, mb in (("--disk-cache-mb", disk_mb), ("--cache-mb", cache_mb)):
        if mb is not None and mb < 0:
            raise ValueError(f"{flag} {mb}: must be a number of MiB >= 0")
    workers = pick("workers")
    if workers is not None and not 0 <= workers <= MAX_WORKERS:
        raise ValueError(f"--workers {workers}: must be a number from 0 to {MAX_WORKERS}")
    if max_mb is not None and not 0 < max_mb <= MAX_MESSAGE_MB:
        raise ValueError(
            f"--max-message-mb {max_mb:g}: must be a number of MiB above 0, at most "
            f"{MAX_MESSAGE_MB} (Pi reads a session line by line into memory)"
        )
    return {
        "cache_mb": 1024 if cache_mb is None else cache_mb,
        "cache_idle": min_idle if idle is None else idle,
        "max_message_bytes": int((8 if max_mb is None else max_mb) * (1 << 20)),
        "disk_cache": _disk_folder(pick("disk_cache")),
        "disk_cache_mb": 4096 if disk_mb is None else disk_mb,
        "workers": (os.cpu_count() or 1) if workers is None else workers,
    }


def _demo_copy(args: argparse.Namespace) -> str:
    """For ``demo``: its sessions folder in ``args``; what was done to it, in words."""
    if args.command != "demo":
        return ""
    copy, said = demo_sessions(args.reset)
    args.sessions = str(copy)
    return said


def _cache_said(folder: str | None, quiet: bool) -> None:
    """Say on the terminal when the disk cache asked for cannot be used (the mount runs
    without it, and its log says so too)."""
    why = store.unusable(folder) if folder else None
    if why and not quiet:
        print(f"pisessfs: no disk cache: {why}; mounting without it", file=sys.stderr)


def _make_folder(mnt: str) -> bool:
    """The demo's mountpoint, made when nothing is there (never over a mount, even a dead one);
    whether it was made."""
    if mountpoint.top(mnt) is not None or os.path.lexists(mnt):
        return False
    try:
        os.makedirs(mnt)
    except OSError:
        return False
    return True


def _no_pyfuse3(err: ImportError) -> str:
    if isinstance(err, ModuleNotFoundError) and err.name == "pyfuse3":
        return "pyfuse3 is not installed in this Python (run ./scripts/setup, or pip install .)"
    return f"FUSE's library does not load ({err}); install it: sudo apt install fuse3"


class _Notify:
    """sd_notify(3) by hand: one datagram to $NOTIFY_SOCKET (a path, or @ for an abstract
    socket), for a ``Type=notify`` unit; nothing without it."""

    def __init__(self, address: str | None) -> None:
        self.address = address

    def __call__(self, message: str) -> None:
        if not self.address:
            return
        where = "\0" + self.address[1:] if self.address.startswith("@") else self.address
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
                s.connect(where)
                s.send(message.encode(errors="replace"))
        except OSError as err:
            log.warning("cannot notify systemd at %s: %s", self.address, err)


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


def _daemonize(
    mnt: str, logfile: Path | None, sessions: str, quiet: bool = False
) -> _Report | None:
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
        if not quiet:
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
    """Whether the mount's daemon is gone (a live but stuck one counts as live)."""
    return mountpoint.probe(mnt, timeout) in mountpoint.DEAD


def show_status(as_json: bool = False) -> int:
    """Each pisessfs mount of this user, from mountinfo and the daemons' status files."""
    entries = status.collect()
    now = time.time()
    if as_json:
        text = json.dumps([status.as_json(e, now) for e in entries], indent=1)
    else:
        text = "\n\n".join(status.as_text(e, now) for e in entries) or "pisessfs: nothing mounted"
    try:
        print(text, flush=True)
    except BrokenPipeError:  # `pisessfs status | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    return 0


def install_unit(args: argparse.Namespace) -> int:
    try:
        o = parse_options(args.options)
    except ValueError as err:
        return _fail(str(err), 2)
    options = [x for value in args.options for x in value.split(",") if x]
    sessions = Path(args.sessions).expanduser() if args.sessions else default_sessions()
    if a_file := _a_file(sessions):
        return _fail(a_file, 2)
    if not sessions.is_dir():  # (Pi makes it at its first session: the unit can come first)
        print(
            f"pisessfs: note: no sessions folder at {sessions} yet; the unit's mount starts "
            "once Pi has made it",
            file=sys.stderr,
        )
    try:
        text = unit.unit_text(sessions.resolve(), options, args.allow_other or o.allow_other)
    except ValueError as err:
        return _fail(str(err), 2)
    if args.print:
        sys.stdout.write(text)
        return 0
    path = unit.unit_dir() / UNIT
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as err:
        return _fail(f"cannot write {path}: {err.strerror}")
    print(f"""pisessfs: wrote {path}; to mount ~/pi now and at every login:
  mkdir -p ~/pi
  systemctl --user daemon-reload
  systemctl --user enable --now pisessfs@$(systemd-escape --path ~/pi).service""")
    return 0


def _a_file(sessions: Path) -> str | None:
    """The one line for a sessions folder given as one of its files."""
    if not sessions.is_file():
        return None
    return f"{sessions} is a file: give the folder it is in (--sessions {sessions.parent})"


def demo_sessions(reset: bool = False) -> tuple[Path, str]:
    """The demo's writable copy of the bundled example sessions, made when missing (or
    ``reset``): what was saved in it is kept across demos. Also what was done, in words."""
    dst = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "pisessfs" / "demo"
    if dst.exists() and not reset:
        return dst, f"the demo sessions in {dst} are kept as you left them (--reset: start over)"
    if dst.exists():
        shutil.rmtree(dst)
    src = resources.files("pisessfs").joinpath(EXAMPLES)
    with resources.as_file(src) as path:
        shutil.copytree(path, dst)
    return dst, f"a fresh copy of the example sessions is in {dst}"


def _demo_hints(mnt: Path, said: str) -> None:
    found = sorted(mnt.glob("*/*/current"))
    session = next(iter(found), mnt / "PROJECT" / "SESSION").parent
    print(f"""The example sessions are mounted on {mnt}; {said}. Try:

  cd {mnt}
  ls                          # projects, then sessions: ls */
  S={session.relative_to(mnt)}
  less $S/current.md          # the branch Pi resumes, as one file
  ls -l $S/leaves             # every branch: a folder link and a one-file view each
  cat $S/tree.txt             # every entry of the session, as a tree
  ls -l $S/current/           # the same branch as numbered messages
  cat $S/current/0002-user.md
  grep -r "unicode fractions" .   # each message once: in conversation.md
  ls "search/unicode fraction*"   # messages by their words, best first: links to their files
  cat usage/models.csv        # tokens and cost by model (daily.csv, usage.md, ...)
  getfattr -d $S/current/0002-user.md

Write, as Pi would (each save is one line appended to the session file):

  echo "Please also handle 2 3/4." > $S/current/next.md   # a new message after the last
  vim $S/current/0002-user.md     # edit a message: saving it forks, as editing in Pi does
  setfattr -n user.pi.name -v "Fix fraction parsing" $S   # name the session

Unmount with: {_me()} umount {mnt}""")


def _me() -> str:
    """How to call this program again: ``pisessfs`` when that is on PATH, else its path."""
    me = os.path.abspath(sys.argv[0])
    found = shutil.which("pisessfs")
    return "pisessfs" if found and os.path.abspath(found) == me else me


if __name__ == "__main__":
    sys.exit(main())
