"""What ``pisessfs status`` knows of each mount, found without ever asking the mount.

A daemon writes a small JSON status file (``Writer``): ``$XDG_RUNTIME_DIR/pisessfs/`` (else
``/run/user/UID/pisessfs/`` when that is ours, else ``$XDG_STATE_HOME/pisessfs/run/``), named
``<mountpoint>.<pid>.json``. It is written before the mount is reported up, rewritten every
``REFRESH`` seconds and on SIGUSR2, and removed at a clean exit; a daemon killed with -9 leaves
it behind. ``collect`` pairs the ``fuse.pisessfs`` rows of mountinfo that belong to this user
with these files by mount id and device (a file left by a dead daemon never describes a later
mount on the same path) and asks the live daemons for fresh numbers (SIGUSR2, only to a pid
whose start time matches the file's: never to a recycled pid). The files of daemons gone with
their mounts are removed by the next ``status`` or the next daemon's start (``sweep``).
Nothing under a mountpoint is ever stat'ed or opened: a dead or stuck mount answers ``status``
as quickly as a live one. Standard library only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import signal
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from . import __version__, mountpoint
from .mountpoint import Mount

log = logging.getLogger(__name__)

FSTYPE = "fuse.pisessfs"  # what mountinfo says of our mounts (subtype=pisessfs)
FORMAT = 1  # the status file's format
REFRESH = 30.0  # seconds between the daemon's rewrites of its status file
#: What the log and ``status`` say of a mount without the pyfuse3 of ``scripts/install``.
SLOW_PYFUSE3 = (
    "this pyfuse3 is the stock one: grep -r and rg over the mount take about three times as "
    "long; scripts/install from a clone of pisessfs installs the fast one"
)
ASK = signal.SIGUSR2  # "write your status file now"


def slug(mnt: str) -> str:
    """A mountpoint as one file name: ``/home/ana/pi`` is ``home-ana-pi``."""
    return mnt.strip("/").replace("/", "-") or "root"


def state_home() -> Path:
    return Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")


def dirs(uid: int | None = None) -> list[Path]:
    """Where status files are, the one a daemon writes first: the runtime dir, else the
    state dir. ``status`` reads them all (a daemon started by mount(8) or systemd may have
    seen another environment than the shell asking)."""
    uid = os.getuid() if uid is None else uid
    out = []
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        out.append(Path(runtime) / "pisessfs")
    default = Path(f"/run/user/{uid}")
    with contextlib.suppress(OSError):
        if default.stat().st_uid == uid and default / "pisessfs" not in out:
            out.append(default / "pisessfs")
    out.append(state_home() / "pisessfs" / "run")
    return out


def start_ticks(pid: int) -> int | None:
    """When ``pid`` started (clock ticks after boot), None if there is no such process: with
    the pid, it names one process for good (pids are reused, start times are not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return None if fields[0] == b"Z" else int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def rss(pid: int) -> int | None:
    """Resident memory of ``pid`` in bytes (VmRSS)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def stderr_label() -> str:
    """Where a daemon without a log file writes: the journal (as a systemd unit) or stderr."""
    stream = os.environ.get("JOURNAL_STREAM", "")
    try:
        st = os.fstat(2)
        journal = stream == f"{st.st_dev}:{st.st_ino}"
    except OSError:
        journal = False
    if not journal:
        return "stderr"
    unit, user = _unit()
    if unit is None:
        return "the journal"
    return f"the journal: journalctl {'--user ' if user else ''}-u {unit}"


def _unit() -> tuple[str | None, bool]:
    """This process's systemd service and whether a user manager runs it, from its cgroup."""
    try:
        with open("/proc/self/cgroup", encoding="utf-8", errors="replace") as f:
            paths = [line.rstrip("\n").split(":", 2)[-1] for line in f]
    except OSError:
        return None, False
    for path in paths:
        parts = path.split("/")
        services = [p for p in parts if p.endswith(".service")]
        if services:
            return services[-1], any(p.startswith("user@") for p in parts[:-1])
    return None, False


@dataclass(slots=True)
class Record:
    """A status file's content."""

    pid: int
    start_ticks: int
    started: float  # time.time() when the mount came up
    updated: float
    mountpoint: str
    mount_id: int
    dev: str
    sessions: str
    log: str  # a file, or where stderr goes
    read_only: bool
    parsed: int  # sessions parsed and held in memory
    parsed_bytes: int  # ... their size as session files
    cache_bytes: int  # the cap of that
    kept: int = 0  # dropped sessions kept in memory (``--disk-cache off``: the store)
    kept_bytes: int = 0  # ... what they take (counted against the cap too)
    answered: int = 0  # sessions whose answers are kept (``kept``)
    held_bytes: int = 0  # all of it, as counted against the cap (``cache_bytes``)
    disk_cache: str = ""  # the disk cache's folder ("": none)
    disk_entries: int = 0  # sessions it holds
    disk_bytes: int = 0  # ... what they take
    warm_up: str = ""  # where ``--warm`` is ("": not asked for)
    search: str = ""  # where the search index's build is
    workers: str = ""  # where the render workers are ("": none)
    requests: int = 0  # requests answered since the mount
    at_once: int = 0  # ... of them, from what is kept, without a coroutine (``fuse_ops.now``)
    shown: int = -1  # sessions the mount shows (-1: not counted yet)
    projects: int = 0  # ... in this many project folders
    disk_mine: int = 0  # of them, kept in the disk cache
    refused: str = ""  # the last request refused, as the log said it
    refused_at: float = 0.0  # ... when (time.time())
    fast: bool = True  # the pyfuse3 with the walks patch (else walks are slower)
    version: str = __version__
    format: int = FORMAT

    @classmethod
    def load(cls, path: Path) -> Record | None:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            names = {f.name for f in dataclasses.fields(cls)}
            rec = cls(**{k: v for k, v in data.items() if k in names})
        except (OSError, ValueError, TypeError):
            return None
        return rec if rec.format == FORMAT else None

    def alive(self) -> bool:
        return start_ticks(self.pid) == self.start_ticks

    def describes(self, m: Mount) -> bool:
        return (self.mount_id, self.dev, self.mountpoint) == (m.mount_id, m.dev, m.path)


class LastRefusal(logging.Handler):
    """The last request the mount refused, from its log: every refusal logs one line that
    says what was refused and why ("save refused (not-utf8): …")."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.last: tuple[str, float] = ("", 0.0)

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):  # (a status line is never a reason to fail)
            message = record.getMessage()
            if "refused" in message:
                self.last = (message, record.created)


class Writer:
    """The daemon's side: its status file, written and rewritten, never a reason to fail."""

    def __init__(
        self,
        mnt: str,
        *,
        sessions: str,
        log_file: str | None,
        read_only: bool,
        cache_bytes: int,
        parsed: Callable[[], tuple[int, int]],
        kept: Callable[[], tuple[int, int]] = lambda: (0, 0),
        held: Callable[[], tuple[int, int]] = lambda: (0, 0),
        disk: Callable[[], tuple[str, int, int]] = lambda: ("", 0, 0),
        warm: Callable[[], str] = lambda: "",
        search: Callable[[], str] = lambda: "",
        workers: Callable[[], str] = lambda: "",
        requests: Callable[[], tuple[int, int]] = lambda: (0, 0),
        shown: Callable[[], tuple[int, int, int]] = lambda: (-1, 0, 0),
        refused: Callable[[], tuple[str, float]] = lambda: ("", 0.0),
        fast: bool = True,
    ) -> None:
        here = mountpoint.top(mnt)
        pid = os.getpid()
        now = time.time()
        self.parsed, self.kept, self.disk, self.warm = parsed, kept, disk, warm
        self.held, self.search, self.workers = held, search, workers
        self.requests, self.shown, self.refused = requests, shown, refused
        self.record = Record(
            pid=pid,
            start_ticks=start_ticks(pid) or 0,
            started=now,
            updated=now,
            mountpoint=mnt,
            mount_id=here.mount_id if here else -1,
            dev=here.dev if here else "",
            sessions=sessions,
            log=log_file or stderr_label(),
            read_only=read_only,
            parsed=0,
            parsed_bytes=0,
            cache_bytes=cache_bytes,
            fast=fast,
        )
        self.path = dirs()[0] / f"{slug(mnt)}.{pid}.json"
        self._warned = False
        with contextlib.suppress(OSError):
            sweep([m for m in mountpoint.table() if m.fstype == FSTYPE], [self.path.parent])

    def write(self) -> None:
        rec = self.record
        try:
            rec.parsed, rec.parsed_bytes = self.parsed()
            rec.kept, rec.kept_bytes = self.kept()
            rec.answered, rec.held_bytes = self.held()
            rec.disk_cache, rec.disk_entries, rec.disk_bytes = self.disk()
            rec.warm_up = self.warm()
            rec.search = self.search()
            rec.workers = self.workers()
            rec.requests, rec.at_once = self.requests()
            rec.refused, rec.refused_at = self.refused()
            rec.shown, rec.projects, rec.disk_mine = self.shown()
        except Exception:  # the numbers are a courtesy: the file is still written
            log.debug("counting parsed sessions failed", exc_info=True)
        rec.updated = time.time()
        data = json.dumps(dataclasses.asdict(rec), indent=1) + "\n"
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".", suffix=".tmp", dir=self.path.parent)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    f.write(data)
                os.replace(tmp, self.path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        except OSError as err:
            if not self._warned:
                self._warned = True
                log.warning("cannot write the status file %s: %s", self.path, err)

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            self.path.unlink()


@dataclass(frozen=True, slots=True)
class Entry:
    """One mount as ``status`` shows it."""

    mount: Mount
    record: Record | None  # None: no status file describes it
    alive: bool  # its daemon runs
    fresh: bool  # the daemon answered the request for fresh numbers
    rss: int | None


def sweep(rows: list[Mount], folders: list[Path]) -> list[tuple[Path, Record]]:
    """The status files in ``folders`` that still mean something (their daemon runs, or its
    mount is still in ``rows``: a dead mount); the others, left by a kill -9, are removed."""
    found = []
    for path, rec in _records(folders):
        if rec.alive() or any(rec.describes(m) for m in rows):
            found.append((path, rec))
        else:
            with contextlib.suppress(OSError):
                path.unlink()
    return found


def _records(folders: list[Path]) -> Iterator[tuple[Path, Record]]:
    seen: set[Path] = set()
    for folder in folders:
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        for name in names:
            path = folder / name
            if not name.endswith(".json") or name.startswith(".") or path in seen:
                continue
            seen.add(path)
            rec = Record.load(path)
            if rec is not None:
                yield path, rec


def collect(
    uid: int | None = None, *, ask: bool = True, wait: float = 1.0, source: str | None = None
) -> list[Entry]:
    """This user's pisessfs mounts, in mount order, with what their status files say.
    ``ask``: signal each live daemon and wait up to ``wait`` s for its fresh file."""
    uid = os.getuid() if uid is None else uid
    rows = [
        m
        for m in mountpoint.table(source or mountpoint.MOUNTINFO)
        if m.fstype == FSTYPE and m.owner() == uid
    ]
    found = sweep(rows, dirs(uid))
    asked: dict[Path, float] = {}
    if ask:
        for path, rec in found:
            if rec.alive() and any(rec.describes(m) for m in rows):
                with contextlib.suppress(OSError):
                    os.kill(rec.pid, ASK)
                    asked[path] = rec.updated
    fresh = _await(asked, wait)
    records = {path: fresh.get(path, rec) for path, rec in found}
    out = []
    for m in rows:
        mine = [(p, r) for p, r in records.items() if r.describes(m)]
        if not mine:
            out.append(Entry(m, None, False, False, None))
            continue
        path, rec = max(mine, key=lambda pr: pr[1].updated)
        alive = rec.alive()
        out.append(Entry(m, rec, alive, path in fresh, rss(rec.pid) if alive else None))
    return out


def _await(asked: dict[Path, float], wait: float) -> dict[Path, Record]:
    """The records rewritten after ``asked`` (path: its time before asking), within ``wait``."""
    done: dict[Path, Record] = {}
    deadline = time.monotonic() + wait
    while len(done) < len(asked):
        for path, before in asked.items():
            if path not in done:
                rec = Record.load(path)
                if rec is not None and rec.updated > before:
                    done[path] = rec
        if len(done) == len(asked) or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    return done


# -- what `pisessfs status` prints ------------------------------------------------------------


def _state(e: Entry) -> str:
    if e.record is None:
        return "unknown"
    return "running" if e.alive else "dead"


def as_json(e: Entry, now: float) -> dict[str, object]:
    """A mount as ``pisessfs status --json`` shows it."""
    r = e.record
    return {
        "mountpoint": e.mount.path,
        "state": _state(e),
        "pid": r.pid if r else None,
        "uptime": round(now - r.started, 1) if r and e.alive else None,
        "sessions": r.sessions if r else None,
        "log": r.log if r else None,
        "read_only": r.read_only if r else None,
        "parsed": r.parsed if r else None,
        "parsed_bytes": r.parsed_bytes if r else None,
        "kept": r.kept if r else None,
        "kept_bytes": r.kept_bytes if r else None,
        "answered": r.answered if r else None,
        "held_bytes": r.held_bytes if r else None,
        "cache_bytes": r.cache_bytes if r else None,
        "disk_cache": (r.disk_cache or None) if r else None,
        "disk_entries": r.disk_entries if r else None,
        "disk_bytes": r.disk_bytes if r else None,
        "warm_up": (r.warm_up or None) if r else None,
        "search": (r.search or None) if r else None,
        "workers": (r.workers or None) if r else None,
        "shown": r.shown if r and r.shown >= 0 else None,
        "projects": r.projects if r else None,
        "disk_mine": r.disk_mine if r else None,
        "refused": (r.refused or None) if r else None,
        "refused_at": (r.refused_at or None) if r else None,
        "fast": r.fast if r else None,
        "requests": r.requests if r else None,
        "at_once": r.at_once if r else None,
        "rss": e.rss,
        "fresh": e.fresh,
        "updated": r.updated if r else None,
        "version": r.version if r else None,
    }


def as_text(e: Entry, now: float) -> str:
    """A mount as ``pisessfs status`` shows it, in words a user knows."""
    r, mnt = e.record, e.mount.path
    if r is None:
        return (
            f"{mnt}: mounted, no status file (an older pisessfs, or a daemon with another "
            "$XDG_RUNTIME_DIR)"
        )
    if not e.alive:
        return f"{mnt}: dead, its daemon (pid {r.pid}) is gone; clear it: pisessfs umount {mnt}"
    head = f"{mnt}: mounted, " + ("read-only" if r.read_only else "read-write")
    age = "" if e.fresh else f" (as of {_duration(now - r.updated)} ago: no answer now)"
    rows = [("sessions", _shown_text(r) + age)]
    memory = f"{_mib(e.rss)} of memory" if e.rss is not None else "memory unknown"
    rows.append(("daemon", f"pid {r.pid}, up {_duration(now - r.started)}, {memory}"))
    rows.append(("log", r.log))
    rows.append(
        (
            "in memory",
            _in_memory(r),
        )
    )
    disk = "off"
    if r.disk_cache:
        disk = f"{r.disk_cache}: {_count(r.disk_mine, 'session')} of this mount kept"
        disk += f" ({_mib(r.disk_bytes)} for all mounts)"
    rows.append(("disk cache", disk))
    if r.warm_up:
        rows.append(("warm-up", r.warm_up))
    if r.workers:
        rows.append(("workers", r.workers))
    if r.search:
        rows.append(("search", r.search))
    refused = "nothing"
    if r.refused:
        refused = f"{time.strftime('%H:%M:%S', time.localtime(r.refused_at))} {r.refused}"
    rows.append(("refused", refused))
    if not r.fast:
        rows.append(("slower", SLOW_PYFUSE3))
    return "\n".join([head, *(f"  {k:<10} {v}" for k, v in rows)])


def _shown_text(r: Record) -> str:
    if r.shown < 0:
        return f"{r.sessions} (not counted yet)"
    return f"{r.sessions}: {_count(r.shown, 'session')} in {_count(r.projects, 'project')}"


def _in_memory(r: Record) -> str:
    """The ``in memory`` line: what the cache's one cap counts, part by part."""
    parts = [f"{_count(r.parsed, 'session')} read ({_mib(r.parsed_bytes)} of session files)"]
    if r.answered:
        parts.append(f"the answers of {_count(r.answered, 'session')}")
    if r.kept:
        parts.append(f"the files of {_count(r.kept, 'dropped session')}")
    return f"{', '.join(parts)}: {_mib(r.held_bytes)} of up to {_mib(r.cache_bytes)}"


def _count(n: int, what: str) -> str:
    return f"{n:,} {what}{'' if n == 1 else 's'}"


def _duration(seconds: float) -> str:
    s = max(0, int(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


def _mib(n: int | None) -> str:
    """A size as people read it: 840 KiB, 3.2 MiB, 1,024 MiB."""
    if n is None:
        return "?"
    if n < 1 << 20:
        return f"{n / 1024:.0f} KiB"
    return f"{n / (1 << 20):.1f} MiB" if n < 10 << 20 else f"{n / (1 << 20):,.0f} MiB"
