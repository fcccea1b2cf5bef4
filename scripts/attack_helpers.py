"""The machinery of scripts/attack.py: daemons, clocks and probes, line checks, generators.

Nothing here knows about a particular attack. A :class:`Daemon` is one ``pisessfs mount -f``
process (run from a snapshot of the package, so that edits made meanwhile do not mix two
versions into one run); a :class:`Clock` times operations and, should one block for good,
kills the daemon so that the harness always goes on; a :class:`Probe` lists folders of an
unrelated session in a loop and keeps every latency; :func:`check_lines` says what is wrong
with the lines of a session file; :class:`Inotify` sees every open of a file outside the root.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import multiprocessing
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any, TypeVar

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from pisessfs import mountpoint  # noqa: E402
from tests import damaged  # noqa: E402
from tests.conftest import is_mounted  # noqa: E402

PYTHON = str(REPO / ".venv" / "bin" / "python")
DAEMON_ENV = dict(os.environ)
FAULTS = ("Traceback", "unexpected error")
T = TypeVar("T")
FORK = multiprocessing.get_context("fork")

__all__ = ["damaged", "is_mounted"]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# -- the table ---------------------------------------------------------------------------------


@dataclass
class Row:
    """One line of the summary: ``ok`` is None for a figure that is only reported."""

    part: str
    what: str
    value: float | int | str
    target: str = "0"
    ok: bool | None = None

    def __post_init__(self) -> None:
        if self.ok is None and self.target == "0":
            self.ok = self.value == 0


def zero(part: str, what: str, value: int) -> Row:
    return Row(part, what, value)


def info(part: str, what: str, value: float | int | str, target: str = "-") -> Row:
    return Row(part, what, value, target, ok=None if target == "-" else True)


def table(rows: list[Row]) -> str:
    head = ("part", "what was checked", "count", "expected", "")
    cells = [head] + [
        (
            r.part,
            r.what,
            _fmt(r.value),
            r.target,
            "" if r.ok is None else ("ok" if r.ok else "FAIL"),
        )
        for r in rows
    ]
    widths = [max(len(c[i]) for c in cells) for i in range(len(head))]
    lines = ["  ".join(c[i].ljust(widths[i]) for i in range(len(head))).rstrip() for c in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _fmt(v: float | int | str) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


# -- the code under attack -------------------------------------------------------------------


def snapshot_code(dst: Path, rev: str | None = None) -> str:
    """Copy the package aside (the work tree, or ``git archive`` of commit ``rev``); every
    daemon runs from the copy. Returns where it came from."""
    DAEMON_ENV["PYTHONPATH"] = str(dst)
    if rev:
        dst.mkdir(parents=True, exist_ok=True)
        tar = subprocess.run(
            ["git", "-C", str(REPO), "archive", rev, "pisessfs"], capture_output=True, check=True
        )
        subprocess.run(["tar", "-x", "-C", str(dst)], input=tar.stdout, check=True)
        return f"commit {rev} (git archive), not the work tree"
    shutil.copytree(
        REPO / "pisessfs", dst / "pisessfs", ignore=shutil.ignore_patterns("__pycache__")
    )
    head = subprocess.run(
        ["git", "-C", str(REPO), "log", "-1", "--format=%h %s"], capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(REPO), "status", "--short", "pisessfs"], capture_output=True, text=True
    ).stdout.count("\n")
    return f"{head} (+{dirty} changed files in pisessfs/), snapshot {time.strftime('%H:%M:%S')}"


LIVE: list[Daemon] = []


class Daemon:
    """One ``pisessfs mount -f`` process, its log in a file beside the mountpoint."""

    def __init__(self, sessions: Path, mnt: Path, *extra: str, nofile: int | None = None) -> None:
        self.sessions, self.mnt, self.extra, self.nofile = sessions, mnt, extra, nofile
        self.log = mnt.with_name(mnt.name + ".log")
        self.proc: subprocess.Popen[bytes] | None = None
        self.logs: list[str] = []  # the logs of earlier runs of this daemon

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = 60.0) -> None:
        self.mnt.mkdir(parents=True, exist_ok=True)
        limit = [] if self.nofile is None else ["prlimit", f"--nofile={self.nofile}:{self.nofile}"]
        cmd = [*limit, PYTHON, "-m", "pisessfs.cli", "mount", "-f", "--sessions"]
        cmd += [str(self.sessions), *self.extra, str(self.mnt)]
        with self.log.open("a") as out:
            self.proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, cwd=DAEMON_ENV["PYTHONPATH"],
                env=DAEMON_ENV,
            )  # fmt: skip
        LIVE.append(self)
        proc = self.proc
        if not poll(lambda: os.path.ismount(self.mnt) or proc.poll() is not None, timeout):
            raise RuntimeError(f"no mount on {self.mnt} after {timeout} s:\n{self.log_text()}")
        if proc.poll() is not None:
            raise RuntimeError(f"the mount exited early:\n{self.log_text()}")

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def faults(self) -> int:
        """Tracebacks and "unexpected error" lines in the log (every run of this daemon)."""
        text = self.log_text()
        return sum(text.count(f) for f in FAULTS)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and state(self.mnt) == "up"

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> bool:
        """Unmount; True when it needed ``fusermount3 -u -z`` (the mount was dead or stuck)."""
        if is_mounted(self.mnt):
            subprocess.run(["fusermount3", "-u", str(self.mnt)], capture_output=True)
        if self.proc is not None:
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill9()
        if self in LIVE:
            LIVE.remove(self)
        return lazy_unmount(self.mnt)


def lazy_unmount(mnt: Path) -> bool:
    """``fusermount3 -u -z`` when ``mnt`` is still in the mount table; True if it was."""
    if not is_mounted(mnt):
        return False
    subprocess.run(["fusermount3", "-u", "-z", str(mnt)], capture_output=True)
    return True


def stop_all() -> None:
    for d in list(LIVE):
        with contextlib.suppress(Exception):
            d.stop()


def state(mnt: Path, timeout: float = 3.0) -> str:
    """The mount's state: "gone" (not in the mount table), "dead" (ENOTCONN/ECONNABORTED),
    "stuck" (no answer within ``timeout``) or "up"."""
    if not is_mounted(mnt):
        return "gone"
    answer = mountpoint.probe(str(mnt), timeout)
    if answer is None:
        return "stuck"
    return "dead" if answer in mountpoint.DEAD else "up"


def poll(cond: Callable[[], bool], timeout: float, step: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(step)
    return True


def daemon_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def children(pid: int) -> list[int]:
    """The direct children of ``pid`` (its watchdog and fusermount3)."""
    out: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            text = Path(f"/proc/{pid}/task/{task}/children").read_text()
            out += [int(x) for x in text.split()]
    return out


def pid_alive(pid: int) -> bool:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return text.rsplit(")", 1)[1].split()[0] != "Z"


# -- timing ----------------------------------------------------------------------------------


class Clock:
    """Times operations. One over ``limit`` is slow (a hang); one still running after
    ``abort`` seconds gets its daemon killed (so the syscall returns) and is recorded."""

    def __init__(self, daemon: Daemon | None, limit: float = 1.0, abort: float = 30.0) -> None:
        self.daemon, self.limit, self.abort = daemon, limit, abort
        self.slow: list[tuple[str, float]] = []
        self.aborted: list[str] = []
        self.errors: Counter[str] = Counter()
        self.samples: list[str] = []  # the first few failures, for the report
        self._running: dict[int, tuple[str, float, float]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._watch = threading.Thread(target=self._watcher, daemon=True)
        self._watch.start()

    def __call__(
        self, what: str, fn: Callable[..., T], *args: Any, abort: float | None = None
    ) -> T | None:
        """``fn(*args)``, timed; an OSError is counted by errno and answered None."""
        key = threading.get_ident()
        start = time.monotonic()
        with self._lock:
            self._running[key] = (what, start, abort or self.abort)
        try:
            return fn(*args)
        except OSError as err:
            self.fail(what, errno.errorcode.get(err.errno or 0, str(err)), str(err))
            return None
        finally:
            took = time.monotonic() - start
            with self._lock:
                del self._running[key]
                if took > self.limit:
                    self.slow.append((what, took))

    def fail(self, what: str, code: str, detail: str = "") -> None:
        with self._lock:
            self.errors[code] += 1
            if len(self.samples) < 8:
                self.samples.append(f"{what}: {code} {detail}"[:300])

    def _watcher(self) -> None:
        while not self._stop.wait(0.5):
            now = time.monotonic()
            with self._lock:
                late = [w for w, s, a in self._running.values() if now - s > a]
            for what in late:
                if what not in self.aborted:
                    log(f"HANG: {what} blocked for good; killing the daemon to go on")
                    self.aborted.append(what)
                    if self.daemon is not None:
                        self.daemon.kill9()

    def close(self) -> None:
        self._stop.set()

    def eio(self) -> int:
        return self.errors["EIO"]

    def unexpected(self, allowed: Iterable[str] = ()) -> int:
        return sum(n for code, n in self.errors.items() if code != "EIO" and code not in allowed)


class Probe(threading.Thread):
    """Lists ``paths`` (another session's folders) in a loop and keeps every latency."""

    def __init__(self, paths: list[Path]) -> None:
        super().__init__(daemon=True)
        self.paths = paths
        self.latencies: list[float] = []
        self.errors: Counter[str] = Counter()
        self.halt = threading.Event()
        self._since = 0.0

    def run(self) -> None:
        while not self.halt.is_set():
            for p in self.paths:
                self._since = time.perf_counter()
                try:
                    os.listdir(p)
                except OSError as err:
                    self.errors[errno.errorcode.get(err.errno or 0, "?")] += 1
                took = time.perf_counter() - self._since
                self.latencies.append(took)
                self._since = 0.0
                if took > 1.0:
                    log(f"probe: listing {p} took {took:.2f} s")
            time.sleep(0.002)

    def finish(self, timeout: float = 5.0) -> None:
        self.halt.set()
        self.join(timeout)
        if self.is_alive() and self._since:  # still blocked: that wait counts too
            self.latencies.append(time.perf_counter() - self._since)

    def stats(self) -> dict[str, float]:
        lat = sorted(self.latencies) or [0.0]
        return {
            "n": len(lat),
            "median": lat[len(lat) // 2],
            "p99": lat[min(len(lat) - 1, int(len(lat) * 0.99))],
            "max": lat[-1],
            "over_1s": sum(x > 1.0 for x in lat),
            "over_50ms": sum(x > 0.05 for x in lat),
        }


def probe_rows(part: str, probe: Probe, during: str = "") -> list[Row]:
    s = probe.stats()
    ms = f"median {s['median'] * 1000:.1f} / p99 {s['p99'] * 1000:.1f} / max {s['max'] * 1000:.0f}"
    at = f"{during}: " if during else ""
    return [
        zero(part, f"{at}probe waits over 1 s (another session's listing)", int(s["over_1s"])),
        info(part, f"{at}probe latency ms ({int(s['n'])} listings)", ms),
        info(part, f"{at}probe waits over 50 ms (DESIGN target: none)", int(s["over_50ms"])),
        zero(part, f"{at}probe errors", sum(probe.errors.values())),
    ]


# -- session lines ---------------------------------------------------------------------------

TOKEN = re.compile(rb"Q([A-Z]+)(\d{7})Q")


def token(kind: str, n: int) -> str:
    """A marker unique to one save: every save's text carries one, the newest last."""
    return f"Q{kind}{n:07d}Q"


def iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"


def pi_line(eid: str, parent: str | None, role: str, text: str) -> bytes:
    """One message line as Pi writes it (one JSON object, ``type`` first, a newline)."""
    ms = int(time.time() * 1000)
    msg: dict[str, Any] = {"role": role, "content": [{"type": "text", "text": text}]}
    if role == "assistant":
        msg |= {"api": "anthropic-messages", "provider": "anthropic"}
        msg |= {"model": "claude-sonnet-4-5", "stopReason": "stop"}
        msg["usage"] = {"input": 10, "output": 20, "totalTokens": 30}
    msg["timestamp"] = ms
    entry = {"type": "message", "id": eid, "parentId": parent, "timestamp": iso(ms)}
    return damaged.line(entry | {"message": msg})


def header(sid: str) -> bytes:
    return damaged.line({**damaged.HEADER, "id": sid})


def small_session(sid: str, texts: list[str], prefix: int = 0xA0000000) -> bytes:
    """A v3 session: one chain of user/assistant messages with ``texts``."""
    out, parent = [header(sid)], None
    for i, text in enumerate(texts):
        eid = f"{prefix + i:08x}"
        out.append(pi_line(eid, parent, "user" if i % 2 == 0 else "assistant", text))
        parent = eid
    return b"".join(out)


def last_id(path: Path) -> str | None:
    for raw in reversed(path.read_bytes().splitlines()):
        with contextlib.suppress(ValueError):
            obj = json.loads(raw)
            if isinstance(obj, dict) and isinstance(obj.get("id"), str) and "parentId" in obj:
                return str(obj["id"])
    return None


@dataclass
class Lines:
    """What is wrong with the lines of a session file, given the saves that said success."""

    lines: int = 0
    torn: int = 0
    glued: int = 0
    blank: int = 0
    duplicated: int = 0
    lost: int = 0
    lost_tokens: list[str] = field(default_factory=list)
    samples: list[str] = field(default_factory=list)  # the first bad lines, for the report

    def add(self, other: Lines) -> None:
        for f in ("lines", "torn", "glued", "blank", "duplicated", "lost"):
            setattr(self, f, getattr(self, f) + getattr(other, f))
        self.lost_tokens += other.lost_tokens
        self.samples += other.samples

    def rows(self, part: str) -> list[Row]:
        return [
            info(part, "session lines checked", self.lines),
            zero(part, "lines torn (not JSON)", self.torn),
            zero(part, "lines glued to another", self.glued),
            zero(part, "blank lines (a newline added before a save)", self.blank),
            zero(part, "lines duplicated", self.duplicated),
            zero(part, "successful saves lost", self.lost),
        ]


def check_lines(data: bytes, succeeded: Iterable[str]) -> Lines:
    raw = data.split(b"\n")
    tail = raw.pop()
    out = Lines(lines=len(raw), torn=int(tail != b""))
    keys: Counter[bytes] = Counter()
    for no, line in enumerate(raw, 1):
        kind = classify(line)
        out.torn += kind == "torn"
        out.glued += kind == "glued"
        out.blank += kind == "blank"
        if kind != "ok" and len(out.samples) < 5:
            out.samples.append(f"line {no} {kind} ({len(line)} bytes): {line[:300]!r}")
        found = TOKEN.findall(line)
        keys[b"".join(found[-1]) if found else line] += 1
    out.duplicated = sum(n - 1 for k, n in keys.items() if n > 1 and k)
    for tok in succeeded:
        m = TOKEN.fullmatch(tok.encode())
        if m and keys[m.group(1) + m.group(2)] == 0:
            out.lost += 1
            out.lost_tokens.append(tok)
    return out


def classify(line: bytes) -> str:
    """A line's kind: "ok", "blank", "glued" (two objects on one line, or a torn one run
    into the next) or "torn"."""
    if not line.strip():
        return "blank"
    try:
        json.loads(line)
        return "ok"
    except ValueError:
        return "glued" if line.find(b'{"type"', 1) > 0 else "torn"


# -- background processes --------------------------------------------------------------------


def appender(path: Path, record: Path, interval: float, stop: Event) -> None:
    """Pi's side (a child process): append one message line (60 B to 24 KB) every
    ``interval`` seconds with one O_APPEND write each, a chain of its own; every write that
    returned is recorded."""
    parent = last_id(path)
    rec = os.open(record, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    n = 0
    while not stop.is_set():
        eid = f"{0xD0000000 + n:08x}"  # unique: random ids collide over 50,000 lines
        tok = token("APP", n)
        filler = "pi " * (20, 200, 2000, 8000)[n % 4]  # tool output sized lines cross pages
        data = pi_line(eid, parent, "user" if n % 2 else "assistant", f"{tok} {filler}")
        if os.write(fd, data) == len(data):
            os.write(rec, tok.encode() + b"\n")
        parent, n = eid, n + 1
        time.sleep(interval)
    os.close(fd)


def start_child(target: Callable[..., None], *args: Any) -> tuple[Any, Event]:
    stop = FORK.Event()
    proc = FORK.Process(target=target, args=(*args, stop), daemon=True)
    proc.start()
    return proc, stop


def end_child(proc: Any, stop: Event, timeout: float = 10.0) -> None:
    stop.set()
    proc.join(timeout)
    if proc.is_alive():
        proc.kill()
        proc.join()


def recorded(record: Path) -> list[str]:
    return record.read_text().split() if record.exists() else []


@contextlib.contextmanager
def cpu_load(n: int) -> Iterator[None]:
    """``n`` busy processes for the duration (a loaded machine)."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


# -- opens outside the root ------------------------------------------------------------------

IN_ACCESS, IN_MODIFY, IN_OPEN = 0x1, 0x2, 0x20
_EVENT = struct.Struct("iIII")


class Inotify:
    """Every open, read or write of anything in ``folders`` (through any path or link)."""

    def __init__(self, folders: list[Path]) -> None:
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self.names: dict[int, Path] = {}
        for f in folders:
            wd = self.libc.inotify_add_watch(
                self.fd, os.fsencode(f), IN_OPEN | IN_ACCESS | IN_MODIFY
            )
            self.names[wd] = f

    def events(self) -> list[str]:
        out: list[str] = []
        while True:
            try:
                buf = os.read(self.fd, 65536)
            except BlockingIOError:
                return out
            i = 0
            while i < len(buf):
                wd, mask, _cookie, size = _EVENT.unpack_from(buf, i)
                name = buf[i + 16 : i + 16 + size].rstrip(b"\0").decode(errors="replace")
                out.append(f"{self.names.get(wd, '?')}/{name} mask={mask:#x}")
                i += 16 + size

    def close(self) -> None:
        os.close(self.fd)


# -- users -----------------------------------------------------------------------------------


def run_as(
    uid: int, gid: int, *cmd: str, timeout: float = 120
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        list(cmd), user=uid, group=gid, extra_groups=[], capture_output=True, timeout=timeout,
        cwd="/",
    )  # fmt: skip
