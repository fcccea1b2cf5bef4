#!/usr/bin/env python3
"""Attack a real pisessfs mount and count what issue 7's closing note must report as 0.

Every part mounts its own sessions folder (``.venv/bin/python -m pisessfs.cli mount -f``, run
from a snapshot of the package taken at start) under one base folder every user can reach
(default ``/var/tmp/pisessfs-attack-PID``, outside /tmp), attacks it with real programs, and
counts:

1. fuzz: N seeded hostile session files (tests/fuzzgen.py) in one mount; every folder listed,
   every file read, every link read and resolved, every xattr read (then ``getfattr -R -d``
   over the whole mount), while a probe lists a good session: EIO and other errno answers,
   operations over 1 s, dangling links, tracebacks / "unexpected error" log lines, mount death.
2. soak: saves through the mount (shell ``echo >``, ``sed -i`` through ``current/`` and through
   the leaf folder it points at, Python writes whose dup'd descriptor is closed from two
   threads) while a child process appends Pi-shaped lines (60 B to 24 KB) to the same file:
   every line JSON, none glued, none blank, none duplicated, every save that said success
   (and every direct append) there exactly once; the mount's ``session.jsonl`` and ``current``
   agree with the file; the real Pi (tests/pi/oracle.mjs, when node is there) loads every line.
   A save is timed from its open (or sed's start) to its close; finding the file it edits (a
   listing of a leaf folder that grows by an entry every few ms) is timed apart, as a read.
3. kill: rounds of ``kill -9`` of the daemon while a Python writer saves, a shell loops over
   ``cat``/``ls`` and a ``sleep`` has its cwd inside (every other round on a loaded CPU):
   dead mounts left after 5 s ("Transport endpoint is not connected", seen in
   /proc/self/mounts; each is cleared with ``fusermount3 -u -z`` and counted), helpers left
   running, remount failures; then the lines of the session file as in 2.
4. escape: session files swapped for links out of the root (unlink+symlink, rename over,
   relative, to /etc/shadow, a rename race flipping for a while), a project folder swapped for
   a link, a FIFO, while readers hold directory descriptors into the session and read and save
   relative to them: reads returning outside bytes, saves reaching outside files, opens of
   outside files (inotify), operations over 1 s, EIO.
5. other: a second local user (``useradd -M -r``), sessions 0600, 0640, 0644 and 0644 in a 0700
   project, ``--allow-other``; as that user ``ls -laR``, ``grep -r``, ``getfattr -R -d``,
   ``find -exec cat``, and cat/ls/readlink/getfattr of every path: reads that returned bytes of
   the sessions that user cannot read; saves they made; public files they could not read.
6. scale: thousands of tiny sessions in 50 projects, the daemon under ``prlimit --nofile=1024``,
   ``grep -r`` over the mount: sessions found vs expected, EMFILE in the log and in grep's
   errors, the daemon's descriptors after the walk, a save after it.
7. hang: a big generated session entered (``ls leaves``, ``tree.txt``), then a session grown at
   several MB/s by a child process while a reader reads its ``tree.txt`` in a loop; all along a
   probe lists the root and another session: probe median / p99 / max, waits over 1 s, how far
   ``current`` lags the last appended entry (median, max).

A save is known by a token in its text (``QPY0000012Q``); a line's token is the last one in
it (an edit keeps the old text). An operation over 1 s counts as a hang; one still blocked
after its limit gets the daemon killed (so that the harness goes on) and counts as a death.

Ends with the notes (slow operations, first errors, log tracebacks, bad lines) and one table
(part, what was checked, count, expected) and exits 1 when a count that must be 0 is not.
Run as root from the repository (2 cores; the full size is issue 7's):

    .venv/bin/python scripts/attack.py --quick          # about 3 minutes
    .venv/bin/python scripts/attack.py                  # full: about 30 minutes, 40 at most
    .venv/bin/python scripts/attack.py --parts kill,escape --keep
    .venv/bin/python scripts/attack.py --quick --code 8cd7005   # an older commit
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import dataclasses
import errno
import functools
import itertools
import json
import os
import pwd
import random
import re
import shutil
import stat
import subprocess
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attack_helpers import (
    REPO,
    Clock,
    Daemon,
    Inotify,
    Lines,
    Probe,
    Row,
    appender,
    check_lines,
    children,
    cpu_load,
    daemon_fds,
    end_child,
    header,
    info,
    is_mounted,
    last_id,
    lazy_unmount,
    log,
    pi_line,
    pid_alive,
    poll,
    probe_rows,
    recorded,
    run_as,
    small_session,
    snapshot_code,
    start_child,
    state,
    stop_all,
    table,
    token,
    zero,
)


@dataclass(frozen=True)
class Scale:
    fuzz_files: int
    soak_seconds: float
    kill_rounds: int
    scale_sessions: int
    big_mb: int
    grow_mb_s: float
    grow_seconds: float


QUICK = Scale(200, 30, 12, 3000, 100, 5, 10)
FULL = Scale(1000, 300, 120, 10_000, 1024, 10, 60)


@dataclass
class Ctx:
    base: Path
    scale: Scale
    seed: int
    notes: list[str] = field(default_factory=list)

    def dir(self, name: str) -> Path:
        p = self.base / name
        p.mkdir(parents=True, exist_ok=True)
        return p

    def daemon(self, sessions: Path, part: str, *extra: str, nofile: int | None = None) -> Daemon:
        d = Daemon(sessions, self.dir(part) / "mnt", *extra, nofile=nofile)
        d.start()
        return d

    def note(self, part: str, text: str) -> None:
        self.notes.append(f"{part}: {text}")
        log(f"{part}: {text}")


def end_rows(part: str, d: Daemon, clock: Clock | None, ctx: Ctx) -> list[Row]:
    """What every part reports about its daemon: death, tracebacks (and slow operations)."""
    deaths = int(not d.alive())
    rows = [
        zero(part, "mount deaths", deaths),
        zero(part, "tracebacks / unexpected errors in log", d.faults()),
    ]
    if d.faults():
        ctx.note(part, "log faults:\n" + fault_lines(d.log_text()))
    if clock:
        clock.close()
        for what, took in sorted(clock.slow, key=lambda x: -x[1])[:5]:
            ctx.note(part, f"slow: {what} took {took:.2f} s")
        for s in clock.samples:
            ctx.note(part, f"error: {s}")
    d.stop()
    return rows


def fault_lines(text: str, limit: int = 60) -> str:
    """The log lines around the first faults (a traceback and the line before it)."""
    lines = text.splitlines()
    hits = [i for i, x in enumerate(lines) if "Traceback" in x or "unexpected error" in x]
    out: list[str] = []
    for i in hits[:3]:
        out += [*lines[max(0, i - 1) : i + 25], "..."]
    return "\n".join(out[:limit])


# -- reading a tree ----------------------------------------------------------------------------


def read_file(p: Path | str) -> bytes:
    with open(p, "rb") as f:
        return f.read()


def xattrs(p: Path) -> dict[str, bytes]:
    return {
        n: os.getxattr(p, n, follow_symlinks=False) for n in os.listxattr(p, follow_symlinks=False)
    }


@dataclass
class Walk:
    dirs: int = 0
    files: int = 0
    links: int = 0
    dangling: int = 0
    data: list[bytes] = field(default_factory=list)
    keep: bool = False  # keep what was read (to look for markers)


def walk(top: Path, clock: Clock, keep: bool = False) -> Walk:
    """List every folder, read every file, readlink and resolve every link, read every xattr,
    each operation timed by ``clock``; links are not followed."""
    w, stack = Walk(keep=keep), [top]
    while stack:
        d = stack.pop()
        w.dirs += 1
        for e in clock(f"listdir {d}", lambda d: list(os.scandir(d)), d) or []:
            visit(Path(e.path), clock, w, stack)
    return w


def visit(p: Path, clock: Clock, w: Walk, stack: list[Path]) -> None:
    st = clock(f"lstat {p}", os.lstat, p)
    if st is None:
        return
    clock(f"xattrs {p}", xattrs, p)
    if stat.S_ISLNK(st.st_mode):
        w.links += 1
        clock(f"readlink {p}", os.readlink, p)
        if not os.path.exists(p):
            w.dangling += 1
            clock.fail(f"resolve {p}", "dangling")
    elif stat.S_ISDIR(st.st_mode):
        stack.append(p)
    else:
        w.files += 1
        data = clock(f"read {p}", read_file, p)
        if w.keep and data:
            w.data.append(data)


def getfattr_all(top: Path) -> tuple[int, int, list[str]]:
    """``getfattr -R -d`` over ``top``: (EIO lines, other error lines, first errors)."""
    done = subprocess.run(
        ["getfattr", "-R", "-d", "--absolute-names", str(top)], capture_output=True, text=True,
        errors="replace", timeout=3600,
    )  # fmt: skip
    errs = [x for x in done.stderr.splitlines() if x.strip()]
    eio = [x for x in errs if "Input/output error" in x]
    return len(eio), len(errs) - len(eio), errs[:5]


# -- 1. fuzz ---------------------------------------------------------------------------------


def fuzz_bytes(seed: int) -> bytes:
    try:
        from tests import fuzzgen
    except ImportError:
        return own_fuzz(seed)
    return fuzzgen.session(seed)


def own_fuzz(seed: int) -> bytes:
    """A fallback generator: damaged cases with random bytes and lines mixed in."""
    from tests import damaged

    r = random.Random(seed)
    cases = list(damaged.cases().values())
    data = bytearray(r.choice(cases)[0][: 1 << 20])
    for _ in range(r.randint(0, 5)):
        at = r.randint(0, len(data))
        data[at:at] = r.choice([b"\n", b"\xff", b'{"type":', b"null\n", b'"\\ud83d"', b"}{"])
    return bytes(data)


def part_fuzz(ctx: Ctx) -> list[Row]:
    root = ctx.dir("fuzz/sessions")
    (root / "--home-fuzz--").mkdir(exist_ok=True)
    (root / "--probe--").mkdir(exist_ok=True)
    (root / "--probe--" / "p.jsonl").write_bytes(small_session("probe", ["hello", "hi"]))
    n = ctx.scale.fuzz_files
    for seed in range(ctx.seed, ctx.seed + n):
        folder = root if seed % 50 == 0 else root / "--home-fuzz--"
        (folder / f"f{seed:05d}.jsonl").write_bytes(fuzz_bytes(seed))
    d = ctx.daemon(root, "fuzz")
    clock = Clock(d, abort=60)
    probe = Probe([d.mnt / "probe" / "p", d.mnt / "probe" / "p" / "leaves"])
    probe.start()
    w = walk(d.mnt, clock)
    eio, other, first = getfattr_all(d.mnt)
    probe.finish()
    for x in first:
        ctx.note("fuzz", f"getfattr: {x}")
    return [
        info("fuzz", "hostile session files", n),
        info("fuzz", "folders / files / links visited", f"{w.dirs} / {w.files} / {w.links}"),
        zero("fuzz", "EIO answers", clock.eio() + eio),
        zero("fuzz", "other errno answers", clock.unexpected(["dangling"]) + other),
        zero("fuzz", "links that do not resolve", w.dangling),
        zero("fuzz", "operations over 1 s", len(clock.slow)),
        *probe_rows("fuzz", probe),
        *end_rows("fuzz", d, clock, ctx),
    ]


# -- saves through the mount ------------------------------------------------------------------


class ShellError(OSError):
    pass


def sh(cmd: list[str], cwd: Path) -> None:
    """Run ``cmd`` in ``cwd``; a failure raises OSError with the errno its message names."""
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        code = next(
            (c for c in errno.errorcode if os.strerror(c) in done.stderr), errno.EPROTO
        )  # fmt: skip
        raise ShellError(code, done.stderr.strip()[:200])


def save_echo(folder: Path, tok: str) -> bool:
    sh(["sh", "-c", f"echo '{tok} via echo' > current/new-{tok}.md"], folder)
    return True


SaveTarget = tuple[Path, str]  # the folder a save runs in, and the file it edits there


def in_current(folder: Path) -> SaveTarget:
    return folder, ""


def last_user(folder: Path, sub: str = "current") -> SaveTarget | None:
    """The last user message of ``folder/sub`` (a listing: timed as a read, not a save)."""
    users = sorted(n for n in os.listdir(folder / sub) if re.fullmatch(r"\d{4}-user\.md", n))
    return (folder, f"{sub}/{users[-1]}") if users else None


def last_user_of_leaf(folder: Path) -> SaveTarget | None:
    """The same in the leaf folder ``current`` points at now (``current`` itself moves
    under sed's feet when Pi appends: sed's rename then fails, loudly)."""
    return last_user(folder / os.readlink(folder / "current"), ".")


def save_sed(target: SaveTarget, tok: str) -> bool:
    """``sed -i`` appending ``tok`` to the first line of the target file."""
    folder, name = target
    sh(["sed", "-i", f"1s/$/ {tok}/", name], folder)
    return True


def save_dup(folder: Path, tok: str) -> bool:
    """A Python save whose descriptor was dup'd; both closed at once from two threads."""
    size = random.Random(tok).choice([10, 100, 1000, 20_000, 200_000])
    fd = os.open(folder / "current" / f"py-{tok}.md", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, f"{tok} via python {'x' * size}\n".encode())
    fd2, gate, errs = os.dup(fd), threading.Barrier(2), list[OSError]()

    def close(x: int) -> None:
        gate.wait()
        try:
            os.close(x)
        except OSError as err:
            errs.append(err)

    threads = [threading.Thread(target=close, args=(x,)) for x in (fd, fd2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errs:
        raise errs[0]
    return True


def save_in(save: Callable[[Path, str], bool]) -> Callable[[SaveTarget, str], bool]:
    return lambda target, tok: save(target[0], tok)


#: (kind, how it finds its target: timed as a read, how it saves: timed as a save)
SAVES: list[tuple[str, Callable[[Path], SaveTarget | None], Callable[[SaveTarget, str], bool]]] = [
    ("SH", in_current, save_in(save_echo)),
    ("SED", last_user, save_sed),
    ("SEDL", last_user_of_leaf, save_sed),
    ("PY", in_current, save_in(save_dup)),
]


def checked(ctx: Ctx, part: str, session: Path, succeeded: list[str]) -> Lines:
    """The session file's lines checked against the saves that said success; the first lost
    ones and bad lines go to the notes."""
    lines = check_lines(session.read_bytes(), succeeded)
    ctx.notes += [f"{part}: lost {t}" for t in lines.lost_tokens[:10]] + lines.samples
    return lines


def mount_saves(folder: Path, clock: Clock, reads: Clock, seconds: float) -> tuple[list[str], int]:
    """Saves of every kind in turn for ``seconds``: (tokens of the saves that said success,
    how many were tried). Finding the file a save edits (a listing of the leaf folder) is
    timed by ``reads``, the save itself by ``clock``."""
    ok: list[str] = []
    n, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        kind, find, save = SAVES[n % len(SAVES)]
        tok = token(kind, n)
        n += 1
        target = reads(f"list the folder {kind} {tok} saves in", find, folder)
        if target is not None and clock(f"save {kind} {tok}", save, target, tok):
            ok.append(tok)
    return ok, n


def pi_loads(path: Path, tmp: Path) -> tuple[int, str] | None:
    """(entries the real Pi loads, its leaf id) from a copy of ``path``; None without node."""
    oracle = REPO / "tests" / "pi" / "oracle.mjs"
    if shutil.which("node") is None or not (REPO / "node_modules").is_dir():
        return None
    copy = tmp / f"pi-{path.name}"
    shutil.copyfile(path, copy)
    done = subprocess.run(
        ["node", str(oracle), str(copy)], capture_output=True, text=True, timeout=600, cwd=REPO
    )
    doc = json.loads(done.stdout) if done.returncode == 0 else {"error": done.stderr}
    if "error" in doc:
        return -1, str(doc["error"])[:200]
    return len(doc["entries"]), str(doc.get("leafId"))


def pi_rows(part: str, path: Path, tmp: Path, lines: int, ctx: Ctx) -> list[Row]:
    got = pi_loads(path, tmp)
    if got is None:
        return [info(part, "real Pi check", "skipped: no node / node_modules")]
    entries, leaf = got
    if entries < 0:
        ctx.note(part, f"Pi cannot open the file: {leaf}")
    return [
        zero(
            part,
            "lines the real Pi does not load",
            max(0, lines - 1 - entries) if entries >= 0 else lines,
        ),
        zero(part, "Pi's resume leaf is not the last line", int(leaf != last_id(path))),
    ]


# -- 2. soak ---------------------------------------------------------------------------------


def part_soak(ctx: Ctx) -> list[Row]:
    root = ctx.dir("soak/sessions")
    real = root / "--soak--" / "s.jsonl"
    real.parent.mkdir(exist_ok=True)
    real.write_bytes(small_session("soak", ["start here", "ok", "and go on", "fine"]))
    d = ctx.daemon(root, "soak")
    folder = d.mnt / "soak" / "s"
    clock, reads = Clock(d), Clock(d)
    rec = ctx.dir("soak") / "appended.txt"
    child, stop = start_child(appender, real, rec, 0.005)
    ok, tried = mount_saves(folder, clock, reads, ctx.scale.soak_seconds)
    end_child(child, stop)
    longest = max((t for _, t in reads.slow), default=0.0)
    lines = checked(ctx, "soak", real, ok + recorded(rec))
    return [
        info(
            "soak",
            "saves tried / said success / direct appends",
            f"{tried} / {len(ok)} / {len(recorded(rec))}",
        ),
        *lines.rows("soak"),
        zero("soak", "EIO answers", clock.eio()),
        info(
            "soak", "saves refused (errno: count)", str(dict(clock.errors)) if clock.errors else 0
        ),
        zero("soak", "saves over 1 s", len(clock.slow)),
        info(
            "soak",
            "listings of the leaf folder over 1 s / the longest (s)",
            f"{len(reads.slow)} / {longest:.1f}",
        ),
        *view_rows("soak", folder, real),
        *pi_rows("soak", real, ctx.dir("soak"), lines.lines - lines.blank, ctx),
        *end_rows("soak", d, clock, ctx),
    ]


def view_rows(part: str, folder: Path, real: Path) -> list[Row]:
    """Once the file is quiet: the mount's session.jsonl and current agree with it."""
    want = real.read_bytes()
    same = poll(quietly(lambda: read_file(folder / "session.jsonl") == want), 15, 0.1)
    leaf = (last_id(real) or "?")[:8]
    follows = poll(
        quietly(lambda: os.readlink(folder / "current").startswith(f"leaves/{leaf}")), 15, 0.1
    )
    return [
        zero(part, "session.jsonl differs from the file 15 s after", int(not same)),
        zero(part, "current not at the last line 15 s after", int(not follows)),
    ]


def quietly(cond: Callable[[], bool]) -> Callable[[], bool]:
    """``cond``, answering False where it raises OSError."""

    def run() -> bool:
        try:
            return cond()
        except OSError:
            return False

    return run


# -- 3. kill ---------------------------------------------------------------------------------

READ_LOOP = "while :; do cat tree.txt session.json >/dev/null; ls -l current/ >/dev/null; done"
WALK_LOOP = "while :; do ls -lR .. >/dev/null 2>&1; done"


def kill_writer(folder: Path, rec: Path, rnd: int, stop: Any) -> None:
    """A child process: Python saves in a loop; a save whose close() returned is recorded."""
    out = os.open(rec, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    r, n = random.Random(rnd), 0
    while not stop.is_set():
        tok = token("K", rnd * 100_000 + n)
        n += 1
        try:
            fd = os.open(folder / "current" / f"k-{tok}.md", os.O_WRONLY | os.O_CREAT, 0o644)
            os.write(fd, f"{tok} {'k' * r.choice([5, 500, 5000, 70_000])}\n".encode())
            os.close(fd)
        except OSError:
            time.sleep(0.02)
            continue
        os.write(out, tok.encode() + b"\n")


@dataclass
class Round:
    dead: bool = False
    cleared: bool = False
    helpers_left: int = 0
    remount_failed: bool = False


def kill_round(d: Daemon, rnd: int, rec: Path) -> Round:
    res = Round()
    try:
        d.start()
    except RuntimeError as err:
        log(f"kill: round {rnd}: remount failed: {err}")
        res.remount_failed, res.cleared = True, lazy_unmount(d.mnt)
        return res
    folder = d.mnt / "kill" / "k"
    helpers = children(d.pid)
    inside = [
        subprocess.Popen(c, cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for c in (["sleep", "600"], ["sh", "-c", READ_LOOP], ["sh", "-c", WALK_LOOP])
    ]
    writer, stop = start_child(kill_writer, folder, rec, rnd)
    time.sleep(random.Random(rnd).uniform(0.3, 1.5))
    d.kill9()
    res.dead = not poll(lambda: not is_mounted(d.mnt), 5.0)
    if res.dead:
        log(f"kill: round {rnd}: mount still there 5 s after kill -9: {state(d.mnt)}")
        res.cleared = lazy_unmount(d.mnt)
    for p in inside:
        p.kill()
        p.wait()
    end_child(writer, stop)
    d.stop()
    poll(lambda: not any(pid_alive(p) for p in helpers), 5.0)
    res.helpers_left = sum(pid_alive(p) for p in helpers)
    return res


def part_kill(ctx: Ctx) -> list[Row]:
    root = ctx.dir("kill/sessions")
    real = root / "--kill--" / "k.jsonl"
    real.parent.mkdir(exist_ok=True)
    real.write_bytes(small_session("kill", ["a session to kill under", "sure"]))
    d = Daemon(root, ctx.dir("kill") / "mnt")
    rec = ctx.dir("kill") / "saved.txt"
    rounds: list[Round] = []
    for rnd in range(ctx.scale.kill_rounds):
        with cpu_load((os.cpu_count() or 2) if rnd % 2 else 0):
            rounds.append(kill_round(d, rnd, rec))
    lines = checked(ctx, "kill", real, recorded(rec))
    return [
        info(
            "kill",
            "kill -9 rounds (half on a loaded CPU) / saves that said success",
            f"{len(rounds)} / {len(recorded(rec))}",
        ),
        zero("kill", "dead mounts 5 s after kill -9", sum(r.dead for r in rounds)),
        zero("kill", "dead mounts cleared with fusermount3 -u -z", sum(r.cleared for r in rounds)),
        zero("kill", "helper processes left running", sum(r.helpers_left for r in rounds)),
        zero("kill", "remount failures", sum(r.remount_failed for r in rounds)),
        *lines.rows("kill"),
        *pi_rows("kill", real, ctx.dir("kill"), lines.lines - lines.blank, ctx),
        zero("kill", "tracebacks / unexpected errors in log", d.faults()),
    ]


# -- 4. escape -------------------------------------------------------------------------------


def link_swap(victim: Path, target: Path) -> None:
    victim.unlink()
    victim.symlink_to(target)


def rename_swap(victim: Path, target: Path) -> None:
    tmp = victim.with_name(".swap-link")
    tmp.symlink_to(target)
    tmp.rename(victim)


def relative_swap(victim: Path, target: Path) -> None:
    victim.unlink()
    victim.symlink_to(os.path.relpath(target, victim.parent))


def fifo_swap(victim: Path, _target: Path) -> None:
    victim.unlink()
    os.mkfifo(victim)
    os.mkfifo(victim.with_name("new-fifo.jsonl"))
    os.mkfifo(victim.parent.parent / "flat-fifo.jsonl")


def project_swap(victim: Path, target: Path) -> None:
    project = victim.parent
    project.rename(project.with_name("moved-away"))
    project.symlink_to(target.parent)


class Flipper(threading.Thread):
    """Swaps ``victim`` between its real file and a link out of the root by rename, in a
    loop: a check-then-open that follows the path can be raced into the outside file."""

    def __init__(self, victim: Path, target: Path) -> None:
        super().__init__(daemon=True)
        self.victim, self.target, self.halt = victim, target, threading.Event()
        self.keep = victim.with_name(".keep")
        os.link(victim, self.keep)

    def run(self) -> None:
        link, real = self.victim.with_name(".link"), self.victim.with_name(".real")
        while not self.halt.is_set():
            link.symlink_to(self.target)
            link.rename(self.victim)
            time.sleep(0.002)
            os.link(self.keep, real)
            real.rename(self.victim)
            time.sleep(0.002)


def flip_race(victim: Path, target: Path) -> Flipper:
    f = Flipper(victim, target)
    f.start()
    return f


ATTACKS: list[tuple[str, Callable[[Path, Path], Any]]] = [
    ("session file -> link out (unlink+symlink)", link_swap),
    ("session file -> link out (rename over)", rename_swap),
    ("session file -> relative link out", relative_swap),
    ("session file -> link to /etc/shadow", lambda v, _t: link_swap(v, Path("/etc/shadow"))),
    ("session file <-> link out, rename race", flip_race),
    ("session file -> FIFO (and new FIFOs)", fifo_swap),
    ("project folder -> link out", project_swap),
]


def list_at(fd: int, name: str) -> list[str]:
    f = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
    try:
        return os.listdir(f)
    finally:
        os.close(f)


def open_at(fd: int, name: str) -> bytes:
    f = os.open(name, os.O_RDONLY | os.O_NONBLOCK, dir_fd=fd)
    try:
        return os.read(f, 8 << 20)
    finally:
        os.close(f)


def save_at(fd: int, name: str, text: bytes) -> None:
    f = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644, dir_fd=fd)
    try:
        os.write(f, text)
    finally:
        os.close(f)


def hammer(fd: int, folder: Path, clock: Clock, markers: list[bytes], seconds: float) -> int:
    """Read and save relative to ``fd`` (and by path) for ``seconds``: reads with a marker."""
    leaks, n, deadline = 0, 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        names = ["session.jsonl", "tree.txt", "session.json"]
        names += [f"current/{m}" for m in clock("listdir current", list_at, fd, "current") or []]
        for name in names:
            data = clock(f"read {name}", open_at, fd, name) or b""
            data += clock(f"read {folder / name}", read_file, folder / name) or b""
            leaks += any(m in data for m in markers)
        clock("save current/esc.md", save_at, fd, f"current/esc-{n}.md", b"escape attempt\n")
        n += 1
        time.sleep(0.05)
    return leaks


def part_escape(ctx: Ctx) -> list[Row]:
    base = ctx.dir("escape")
    root, out = base / "sessions", base / "outside"
    marker = f"OUTSIDE-MARKER-{os.getpid()}"
    markers = [marker.encode(), *shadow_marker()]
    setup_escape(root, out, marker)
    before = {p: p.read_bytes() for p in out.rglob("*.jsonl")}
    d = ctx.daemon(root, "escape")
    clock = Clock(d, abort=20)
    watch = Inotify([out, out / "proj"])
    leaks, deaths = run_attacks(ctx, Target(d, clock, markers))
    w = walk(d.mnt, clock, keep=True)
    leaks += sum(any(m in b for m in markers) for b in w.data)
    events = watch.events()
    watch.close()
    ctx.notes += [f"escape: outside file touched: {e}" for e in events[:10]]
    changed = sum(p.read_bytes() != data for p, data in before.items())
    return [
        info("escape", "attacks", len(ATTACKS)),
        zero("escape", "reads that returned outside bytes", leaks),
        zero("escape", "saves that reached an outside file", changed),
        zero("escape", "opens/reads of outside files (inotify)", len(events)),
        zero("escape", "operations over 1 s", len(clock.slow)),
        zero("escape", "EIO answers", clock.eio()),
        info("escape", "refusals (errno: count)", str(dict(clock.errors)) if clock.errors else 0),
        zero("escape", "mount deaths during attacks", deaths),
        *end_rows("escape", d, clock, ctx),
    ]


def shadow_marker() -> list[bytes]:
    with contextlib.suppress(OSError):
        first = read_file("/etc/shadow").split(b"\n", 1)[0]
        if len(first) > 8:
            return [first]
    return []


def setup_escape(root: Path, out: Path, marker: str) -> None:
    (root / "--proj--").mkdir(parents=True, exist_ok=True)
    for i in range(len(ATTACKS)):
        (root / "--proj--" / f"s{i}.jsonl").write_bytes(small_session(f"in{i}", ["inside", "yes"]))
    (root / "--proj2--").mkdir(exist_ok=True)
    (out / "proj").mkdir(parents=True, exist_ok=True)
    secret = small_session("secret", [marker, f"reply {marker}"])
    (out / "secret.jsonl").write_bytes(secret)
    for i in range(len(ATTACKS)):
        (out / "proj" / f"s{i}.jsonl").write_bytes(secret)


@dataclass
class Target:
    d: Daemon
    clock: Clock
    markers: list[bytes]


def run_attacks(ctx: Ctx, t: Target) -> tuple[int, int]:
    """Every attack in turn, the mount restarted after one that killed it: (leaks, deaths)."""
    leaks = deaths = 0
    for i, (label, attack) in enumerate(ATTACKS):
        leaks += run_attack(ctx, t, i, label, attack)
        if not t.d.alive():
            deaths += 1
            ctx.note("escape", f"the mount died during: {label}")
            t.d.stop()
            t.d.start()
    return leaks, deaths


def run_attack(ctx: Ctx, t: Target, i: int, label: str, attack: Callable[[Path, Path], Any]) -> int:
    """Enter session ``i`` through a folder descriptor, attack its file, hammer it."""
    d, clock = t.d, t.clock
    project = "proj2" if attack is project_swap else "proj"
    victim = d.sessions / f"--{project}--" / f"s{i}.jsonl"
    if attack is project_swap:
        victim.parent.mkdir(exist_ok=True)
        victim.write_bytes(small_session(f"in{i}", ["inside", "yes"]))
        time.sleep(1.5)  # the new project folder is seen
    folder = d.mnt / project / f"s{i}"
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        clock("enter", open_at, fd, "session.jsonl")
        out = d.sessions.parent / "outside"
        target = out / "proj" / victim.name if attack is project_swap else out / "secret.jsonl"
        running = attack(victim, target)
        leaks = hammer(fd, folder, clock, t.markers, 2.0)
        if isinstance(running, Flipper):
            running.halt.set()
            running.join()
    finally:
        os.close(fd)
    log(f"escape: {label}: {leaks} leaking reads")
    if leaks:
        ctx.note("escape", f"{label}: {leaks} reads returned outside bytes")
    return leaks


# -- 5. another user -------------------------------------------------------------------------

OTHER = "pisessfs-attack"


def other_user(ctx: Ctx) -> pwd.struct_passwd | None:
    with contextlib.suppress(KeyError):
        return pwd.getpwnam(OTHER)
    if os.getuid() != 0 or shutil.which("useradd") is None:
        return None
    made = subprocess.run(
        ["useradd", "-M", "-r", "-s", "/bin/sh", OTHER], capture_output=True, text=True
    )
    if made.returncode != 0:
        ctx.note("other", f"useradd failed: {made.stderr.strip()}")
        return None
    return pwd.getpwnam(OTHER)


# (project, stem, mode, project mode, private to the other user)
OTHER_FILES = [
    ("mixed", "priv", 0o600, 0o755, True),
    ("mixed", "grp", 0o640, 0o755, True),
    ("mixed", "pub", 0o644, 0o755, False),
    ("closed", "hid", 0o644, 0o700, True),
    ("open", "q", 0o644, 0o755, False),
]


def setup_other(root: Path) -> dict[str, bytes]:
    """The sessions, each with its own marker; returns stem -> marker."""
    markers = {}
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o755)
    for project, stem, mode, pmode, _ in OTHER_FILES:
        folder = root / f"--{project}--"
        folder.mkdir(exist_ok=True)
        marker = f"MARK{stem.upper()}{os.getpid()}"
        f = folder / f"{stem}.jsonl"
        f.write_bytes(small_session(f"sid-{marker}", [f"text {marker}", f"reply {marker}"]))
        os.chmod(f, mode)
        os.chmod(folder, pmode)
        markers[stem] = marker.encode()
    return markers


def part_other(ctx: Ctx) -> list[Row]:
    who = other_user(ctx)
    if who is None:
        return [
            Row("other", "second local user (needs root and useradd)", "skipped", "run", ok=False)
        ]
    base = ctx.dir("other")
    os.chmod(base, 0o755)
    markers = setup_other(base / "sessions")
    private = [markers[s] for _, s, _, _, p in OTHER_FILES if p]
    d = ctx.daemon(base / "sessions", "other", "--allow-other")
    as_other = functools.partial(run_as, who.pw_uid, who.pw_gid)
    tools = tool_leaks(d.mnt, as_other, private)
    files, public_refused = per_path_leaks(d.mnt, as_other, private)
    saves = other_saves(d, as_other)
    return [
        info(
            "other",
            "user / sessions (private to them)",
            f"{OTHER} / {len(OTHER_FILES)} ({len(private)})",
        ),
        zero(
            "other", "ls -laR/grep -r/getfattr -R/find -exec cat outputs with private bytes", tools
        ),
        zero("other", "paths whose cat/ls/readlink/getfattr returned private bytes", files),
        zero("other", "public files the other user could not read (control)", public_refused),
        zero("other", "lines appended by the other user's saves", saves),
        *end_rows("other", d, None, ctx),
    ]


def tool_leaks(mnt: Path, as_other: Callable[..., Any], private: list[bytes]) -> int:
    cmds = [
        ["ls", "-laR", str(mnt)],
        ["grep", "-r", "-a", "MARK", str(mnt)],
        ["getfattr", "-R", "-d", "--absolute-names", str(mnt)],
        ["find", str(mnt), "-type", "f", "-exec", "cat", "{}", "+"],
        ["rg", "-uu", "-a", "MARK", str(mnt)],
    ]
    n = 0
    for cmd in cmds:
        if shutil.which(cmd[0]):
            out = as_other(*cmd).stdout
            n += any(m.lower() in out.lower() for m in private)
    return n


def per_path_leaks(
    mnt: Path, as_other: Callable[..., Any], private: list[bytes]
) -> tuple[int, int]:
    """Every path under the mount (as root sees it), tried as the other user:
    (private paths that gave anything, public files they could not read)."""
    private_stems = {(p, s) for p, s, _, _, priv in OTHER_FILES if priv}
    hidden = set()  # (project, session folder): folders are named for people, not stems
    for folder in mnt.glob("*/*"):
        if folder.parent.is_symlink() or folder.parent.name in ("search", "usage"):
            continue  # (the root's latest, and the folders of no project)
        if folder.is_dir() and not folder.is_symlink():
            stem = Path(os.getxattr(folder, "user.pi.file").decode()).stem
            if (folder.parent.name, stem) in private_stems:
                hidden.add((folder.parent.name, folder.name))
    leaks = refused = tried = public = 0
    for p in all_paths(mnt):
        rel = p.relative_to(mnt).parts
        outs = [as_other(*c) for c in path_commands(p)]
        if rel[:1] == ("closed",) or rel[:2] in hidden:
            tried += 1
            leaks += leaked(outs, private)
        elif rel[0] in ("usage", "search"):
            continue  # (sums and finds over every session, the private ones too: their mode)
        elif p.is_file() and not p.is_symlink():
            public += 1
            if outs[0].returncode != 0:
                refused += 1
                log(f"other: {OTHER} could not read public {p.relative_to(mnt)}")
    log(f"other: {tried} private paths and {public} public files tried as {OTHER}")
    return leaks, refused


def leaked(outs: list[subprocess.CompletedProcess[bytes]], private: list[bytes]) -> bool:
    """A private path gave something: its contents or listing, an xattr, a marker."""
    text = b"".join(o.stdout for o in outs).lower()
    first = outs[0].returncode == 0 and bool(outs[0].stdout.strip())
    return first or b"user.pi" in text or any(m.lower() in text for m in private)


def path_commands(p: Path) -> list[list[str]]:
    if p.is_symlink():
        return [["readlink", str(p)], ["getfattr", "-h", "-d", str(p)]]
    if p.is_dir():
        return [["ls", "-la", str(p)], ["getfattr", "-d", str(p)]]
    return [["cat", str(p)], ["getfattr", "-d", str(p)]]


def all_paths(top: Path) -> list[Path]:
    out = []
    for dirpath, dirs, files in os.walk(top):
        out += [Path(dirpath) / n for n in dirs + files]
    return out


def other_saves(d: Daemon, as_other: Callable[..., Any]) -> int:
    files = sorted(d.sessions.rglob("*.jsonl"))
    before = {f: f.read_bytes().count(b"\n") for f in files}
    for _, stem, *_ in OTHER_FILES:
        for s in d.mnt.glob(f"*/{stem}"):
            as_other("sh", "-c", f"echo 'other user was here' > '{s}/current/other.md'")
    return sum(f.read_bytes().count(b"\n") - n for f, n in before.items())


# -- 6. scale --------------------------------------------------------------------------------


def part_scale(ctx: Ctx) -> list[Row]:
    root = ctx.dir("scale/sessions")
    n = ctx.scale.scale_sessions
    write_many(root, n)
    d = ctx.daemon(root, "scale", nofile=1024)
    probe = Probe([d.mnt / "proj-00" / "s00000" / "leaves"])
    probe.start()
    t0 = time.monotonic()
    done = subprocess.run(
        ["grep", "-r", "-l", "-F", "needle-", str(d.mnt)],
        capture_output=True,
        text=True,
        errors="replace",
    )
    took = time.monotonic() - t0
    probe.finish()
    found = {tuple(Path(x).relative_to(d.mnt).parts[:2]) for x in done.stdout.splitlines()}
    errs = done.stderr.splitlines()
    ctx.notes += [f"scale: grep: {e}" for e in errs[:5]]
    fds = daemon_fds(d.pid)
    return [
        info("scale", "sessions / grep -r seconds", f"{n} / {took:.1f}"),
        zero("scale", "sessions grep -r did not find", n - len(found)),
        zero("scale", "grep errors (EMFILE, EIO, ...)", len(errs)),
        zero("scale", "EMFILE / 'Too many open files' in the log", emfile(d.log_text())),
        Row("scale", "daemon descriptors after the walk", fds, "< 64", ok=fds < 64),
        zero("scale", "a save after the walk failed", save_fails(d)),
        *probe_rows("scale", probe),
        *end_rows("scale", d, None, ctx),
    ]


def write_many(root: Path, n: int) -> None:
    """``n`` tiny sessions in 50 projects, session i saying ``needle-i``."""
    for i in range(n):
        folder = root / f"--proj-{i % 50:02d}--"
        folder.mkdir(exist_ok=True)
        (folder / f"s{i:05d}.jsonl").write_bytes(small_session(f"s{i}", [f"needle-{i} here", "ok"]))


def emfile(text: str) -> int:
    return sum("EMFILE" in x or "Too many open files" in x for x in text.splitlines())


def save_fails(d: Daemon) -> int:
    real = d.sessions / "--proj-07--" / "s00007.jsonl"
    try:
        (d.mnt / "proj-07" / "s00007" / "current" / "after.md").write_text("after the walk\n")
    except OSError as err:
        log(f"scale: save after the walk: {err}")
        return 1
    return int(b"after the walk" not in real.read_bytes())


# -- 7. hang ---------------------------------------------------------------------------------

WORDS = ["the", "parser", "fails", "on", "mixed", "numbers", "so", "we", "split", "it"]


def write_big(path: Path, mb: int) -> int:
    """A session of about ``mb`` MiB: a chain of long user/assistant messages, a fork every
    1000 entries. Returns the number of entries."""
    r = random.Random(mb)
    texts = [" ".join(r.choice(WORDS) for _ in range(r.randint(100, 500))) for _ in range(64)]
    want, size, i, parent = mb << 20, 0, 0, None
    with path.open("wb") as f:
        f.write(header("big"))
        chunk: list[bytes] = []
        while size < want:
            eid = f"{0xC0000000 + i:08x}"
            fork = f"{0xC0000000 + i - 10:08x}" if i % 1000 == 999 else parent
            line = pi_line(
                eid, fork, "user" if i % 2 == 0 else "assistant", f"entry {i} {texts[i % 64]}"
            )
            chunk.append(line)
            size, i, parent = size + len(line), i + 1, eid
            if len(chunk) >= 4096:
                f.write(b"".join(chunk))
                chunk = []
        f.write(b"".join(chunk))
    return i


GROW_BASE = 0xB0000000


def grower(path: Path, rec: Path, rate: float, stop: Any) -> None:
    """A child process: append a chain of ~1.5 KB messages at ``rate`` bytes/s, one write per
    line; after each 10 ms tick it records (monotonic time, last index written)."""
    text = " ".join(WORDS * 10)
    parent, i, sent, t0 = last_id(path), 0, 0, time.monotonic()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    with rec.open("w") as out:
        while not stop.is_set():
            while sent < rate * (time.monotonic() - t0):
                eid = f"{GROW_BASE + i:08x}"
                line = pi_line(
                    eid, parent, "user" if i % 2 == 0 else "assistant", f"grow {i} {text}"
                )
                sent += os.write(fd, line)
                parent, i = eid, i + 1
            out.write(f"{time.monotonic()} {i - 1}\n")
            out.flush()
            time.sleep(0.01)
    os.close(fd)


class Watcher(threading.Thread):
    """Reads ``current`` every 20 ms: (monotonic time, index of the grown entry it shows)."""

    def __init__(self, link: Path) -> None:
        super().__init__(daemon=True)
        self.link, self.seen, self.halt = link, list[tuple[float, int]](), threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            with contextlib.suppress(OSError):
                m = re.match(r"leaves/(b[0-9a-f]{7})", os.readlink(self.link))
                self.seen.append((time.monotonic(), int(m.group(1), 16) - GROW_BASE if m else -1))
            time.sleep(0.02)


class Looper(threading.Thread):
    """Reads paths of the growing session that exist all along, in a loop (tree.txt,
    session.json, conversation.md, the first entry's folder, file and leaf link, the first
    message through ``current``); keeps times and errors (ENOENT and ESTALE included: none
    of them may fail)."""

    def __init__(self, folder: Path, first: str) -> None:
        super().__init__(daemon=True)
        files = ["tree.txt", "session.json", "conversation.md", f"nodes/{first}.md"]
        files.append("current/0001-user.md")  # (past 9,999 entries it is 00001-user.md too)
        folders = [f"nodes/{first}", f"leaves/{first}"]
        self.reads: list[tuple[Path, Callable[[Path], object]]] = [
            (folder / f, read_file) for f in files
        ]
        self.reads += [(folder / f, os.listdir) for f in folders]
        self.times, self.errors = list[float](), Counter[str]()
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            for path, read in self.reads:
                t = time.monotonic()
                try:
                    read(path)
                except OSError as err:
                    self.errors[errno.errorcode.get(err.errno or 0, "?")] += 1
                    time.sleep(0.05)
                self.times.append(time.monotonic() - t)


def lags(
    appends: list[tuple[float, int]], seen: list[tuple[float, int]], end: float
) -> tuple[list[float], int]:
    """For each recorded append (time, index): how long until ``current`` showed that entry
    or a later one; (lags, appends never shown, counted as lagging until ``end``)."""
    times = [t for t, _ in seen]
    best = list(itertools.accumulate((i for _, i in seen), max))
    out, never = [], 0
    for t_append, idx in appends:
        k = bisect.bisect_left(times, t_append)
        if k > 0 and best[k - 1] >= idx:  # shown before the append was even recorded
            out.append(0.0)
            continue
        k = bisect.bisect_left(best, idx, lo=k)
        if k < len(seen):
            out.append(times[k] - t_append)
        else:
            never += 1
            out.append(end - t_append)
    return out, never


def lag_rows(appends: list[tuple[float, int]], seen: list[tuple[float, int]]) -> list[Row]:
    got, never = lags([a for a in appends if a[1] >= 0], seen, time.monotonic())
    got.sort()
    lag = f"{got[len(got) // 2]:.3f} / {got[-1]:.3f}" if got else "-"
    return [
        info("hang", "current lag behind the last append, s (median / max)", lag),
        zero("hang", "appends current never showed (30 s after the end)", never),
    ]


def grow_phase(ctx: Ctx, d: Daemon, real: Path) -> list[Row]:
    folder = d.mnt / "grow" / "g"
    rec = ctx.dir("hang") / "grown.txt"
    first = json.loads(real.read_bytes().splitlines()[1])["id"]
    reader, watcher = Looper(folder, first), Watcher(folder / "current")
    reader.start()
    watcher.start()
    child, stop = start_child(grower, real, rec, ctx.scale.grow_mb_s * (1 << 20))
    time.sleep(ctx.scale.grow_seconds)
    end_child(child, stop)
    appends = [(float(t), int(i)) for t, i in (x.split() for x in rec.read_text().splitlines())]
    last = appends[-1][1] if appends else -1
    poll(lambda: bool(watcher.seen) and watcher.seen[-1][1] >= last, 30, 0.1)
    for th in (reader, watcher):
        th.halt.set()
        th.join(60)
    mb = real.stat().st_size / (1 << 20)
    return [
        *lag_rows(appends, watcher.seen),
        info(
            "hang",
            f"grown session: MiB at the end (at {ctx.scale.grow_mb_s:g} MB/s) / reads",
            f"{mb:.0f} / {len(reader.times)}",
        ),
        zero("hang", "readers of paths there all along: EIO answers", reader.errors["EIO"]),
        zero("hang", "... ENOENT answers", reader.errors["ENOENT"]),
        zero("hang", "... any error", sum(reader.errors.values())),
        info(
            "hang",
            "... errors / max read s",
            f"{dict(reader.errors) or 0} / {max(reader.times, default=0):.2f}",
        ),
    ]


def enter_big(folder: Path, clock: Clock, mb: int) -> list[Row]:
    """``ls leaves/``, ``stat`` and read ``tree.txt`` of the big session, each given 60 s
    plus 0.5 s per MiB (about 8x what a 300 MiB session takes) before the daemon is
    killed and the operation counted as never answered."""
    limit = 60 + 0.5 * mb
    took = []
    for what, fn in (
        ("ls leaves/", os.listdir),
        ("stat tree.txt", os.stat),
        ("read tree.txt", read_file),
    ):
        t = time.monotonic()
        target = folder / ("leaves" if what.startswith("ls") else "tree.txt")
        clock(f"big session: {what}", fn, target, abort=limit)
        took.append(f"{time.monotonic() - t:.1f}")
    log(f"hang: big session: {' / '.join(took)} s")
    return [
        info("hang", "big session: s for ls leaves/ / stat / read tree.txt", " / ".join(took)),
        zero("hang", f"big session: operations not answered in {limit:.0f} s", len(clock.aborted)),
        zero("hang", "big session: EIO answers", clock.eio()),
    ]


def part_hang(ctx: Ctx) -> list[Row]:
    root = ctx.dir("hang/sessions")
    for p in ("big", "grow", "probe"):
        (root / f"--{p}--").mkdir(exist_ok=True)
    entries = write_big(root / "--big--" / "big.jsonl", ctx.scale.big_mb)
    (root / "--grow--" / "g.jsonl").write_bytes(small_session("grow", ["grow me", "ok"]))
    (root / "--probe--" / "p.jsonl").write_bytes(small_session("probe", ["probe me", "ok"]))
    log(f"hang: wrote a {ctx.scale.big_mb} MiB session of {entries} entries")
    d = ctx.daemon(root, "hang")
    clock = Clock(d, limit=1e9)  # the big session's own work may take long: probes judge
    rows = [info("hang", "big session: MiB / entries", f"{ctx.scale.big_mb} / {entries}")]
    probe = hang_probe(d)
    rows += enter_big(d.mnt / "big" / "big", clock, ctx.scale.big_mb)
    probe.finish()
    rows += probe_rows("hang", probe, "big")
    if not d.alive():  # killed by the clock: the growing session gets a fresh mount
        d.stop()
        d.start()
    probe = hang_probe(d)
    rows += grow_phase(ctx, d, root / "--grow--" / "g.jsonl")
    probe.finish()
    return rows + probe_rows("hang", probe, "grow") + end_rows("hang", d, clock, ctx)


def hang_probe(d: Daemon) -> Probe:
    """Lists the root, another session and its leaves in a loop."""
    probe = Probe([d.mnt, d.mnt / "probe" / "p", d.mnt / "probe" / "p" / "leaves"])
    probe.start()
    return probe


# -- main ------------------------------------------------------------------------------------

PARTS: dict[str, Callable[[Ctx], list[Row]]] = {
    "fuzz": part_fuzz,
    "soak": part_soak,
    "kill": part_kill,
    "escape": part_escape,
    "other": part_other,
    "scale": part_scale,
    "hang": part_hang,
}


def run_part(name: str, ctx: Ctx) -> list[Row]:
    log(f"== {name}")
    t0 = time.monotonic()
    try:
        rows = PARTS[name](ctx)
    except Exception:
        traceback.print_exc()
        ctx.note(name, "the part stopped on an exception:\n" + traceback.format_exc(limit=6))
        rows = [zero(name, "part stopped on an exception (see notes)", 1)]
    finally:
        stop_all()
    rows.append(info(name, "seconds", round(time.monotonic() - t0)))
    for r in rows:
        log(f"{name}: {r.what}: {r.value}" + ("" if r.ok is not False else "   <-- FAIL"))
    return rows


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Attack a real pisessfs mount; count what issue 7 must report as 0. "
        "Full size (1,000 fuzzed files, 10,000 sessions, a 1 GiB session, 120 kill -9 "
        "rounds) takes about 30 minutes on 2 cores, 40 at most; --quick about 3 minutes. "
        "Needs root, /dev/fuse, fusermount3, useradd; node for the Pi check.",
    )
    p.add_argument("--quick", action="store_true", help="small sizes: a few minutes in all")
    p.add_argument(
        "--parts", default=",".join(PARTS), help=f"comma-separated, of: {','.join(PARTS)}"
    )
    p.add_argument("--base", type=Path, help="work folder (default /var/tmp/pisessfs-attack-PID)")
    p.add_argument("--seed", type=int, default=0, help="first fuzz seed (default 0)")
    p.add_argument("--code", metavar="REV", help="attack this commit instead of the work tree")
    p.add_argument("--keep", action="store_true", help="keep the work folder (sessions, logs)")
    p.add_argument(
        "--grow",
        metavar="MBPS,SECONDS",
        help="the hang part's growing session: its rate and how long (default 5,10 with "
        "--quick, else 10,60)",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    base = args.base or Path("/var/tmp") / f"pisessfs-attack-{os.getpid()}"
    base.mkdir(parents=True, exist_ok=True)
    os.chmod(base, 0o755)
    scale = QUICK if args.quick else FULL
    if args.grow:
        rate, seconds = (float(x) for x in args.grow.split(","))
        scale = dataclasses.replace(scale, grow_mb_s=rate, grow_seconds=seconds)
    ctx = Ctx(base, scale, args.seed)
    log(f"code: {snapshot_code(base / 'code', args.code)}; work folder {base}")
    rows: list[Row] = []
    try:
        for name in args.parts.split(","):
            rows += run_part(name.strip(), ctx)
    finally:
        stop_all()
        cleanup(base, args.keep)
    print("\n".join(["", "Notes:", *ctx.notes, "", table(rows)]))
    bad = [r for r in rows if r.ok is False]
    print(f"\n{len(bad)} failing row(s)" if bad else "\nall counts as expected")
    return 1 if bad else 0


def cleanup(base: Path, keep: bool) -> None:
    mounted = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()
               if line.split()[1].startswith(str(base))]  # fmt: skip
    for m in mounted:
        lazy_unmount(Path(m))
    if keep or mounted:
        log(f"kept {base}" + (f" (mounts were left: {mounted})" if mounted else ""))
        return
    shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
