#!/usr/bin/env python3
"""Measure pisessfs against the performance targets of DESIGN.md ("Performance targets").

Four parts, every figure a median of several runs, every ratio against a baseline measured in
the same run:

1. Tree walks (``grep -r``, ``rg``, ``cat`` of every file, ``ls -lR``), warm and cold, over
   the pisessfs mount of a sessions folder, a native on-disk copy of the rendered tree, and a
   bare pyfuse3 filesystem serving the same bytes from memory (scripts/bench_barefs.py, the
   floor). Warm: one untimed run, then N timed runs, the three trees interleaved. Cold: before
   each run the FUSE daemon is started afresh (unmount + remount) and the page cache, dentries
   and inodes are dropped (``sync; echo 3 > /proc/sys/vm/drop_caches``) for every tree alike.
2. First listing of a big generated session (``ls MNT/<session>/leaves/`` on a fresh mount)
   against the real Pi ``SessionManager.open()`` + ``getTree()`` (scripts/bench_pi.mjs).
3. Peak memory of the pisessfs process after that listing, over an idle mount.
4. Writes and the live view (scripts/bench_live.py): open -> close() of a new message with its
   line fsynced; the real Pi appending (scripts/bench_live.mjs) until the mount shows it, on a
   small and on the big session, with the daemon's CPU per append on each.

    scripts/bench [--quick] [--json FILE] [--scale N] [--sessions DIR] [--big-mb N]

Must run as root for the cold runs (drop_caches); without it only warm figures are reported.
Every daemon runs from a snapshot of the pisessfs package taken at start (so that edits made
meanwhile do not mix two versions into one run). The report says how much CPU other processes
took while each part ran; ``--wait-quiet S`` waits for a quiet machine before each part.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import math
import os
import platform
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
BAREFS = ROOT / "scripts" / "bench_barefs.py"
BENCH_PI = ROOT / "scripts" / "bench_pi.mjs"
SESSION_MANAGER = (
    ROOT / "node_modules" / "@earendil-works" / "pi-coding-agent" / "dist" / "core"
) / "session-manager.js"
FIXTURES = ROOT.parent / "shared" / "fixtures" / "generated"
EXAMPLES = ROOT / "pisessfs" / "examples" / "sessions"
ENV = {**os.environ, "LC_ALL": "C"}  # the same, fast, locale for every tool and tree
#: The daemons' environment: PYTHONPATH points at a snapshot of the package (snapshot_code).
DAEMON_ENV = dict(ENV)

#: DESIGN.md targets.
TARGET_MOUNT_BARE = 1.25
TARGET_MOUNT_NATIVE_COLD = 2.0
TARGET_LISTING_VS_PI = 0.5
TARGET_MEMORY = 1.2

TREES = ("native", "bare", "mount")
FUSE_TREES = ("bare", "mount")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


# -- machine -------------------------------------------------------------------------------


def _first_line(argv: list[str]) -> str:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "absent"
    return (p.stdout or p.stderr).strip().splitlines()[0] if (p.stdout or p.stderr) else "?"


def _fstype(path: Path) -> str:
    best = ("", "?")
    try:
        with open("/proc/self/mounts") as f:
            for line in f:
                parts = line.split()
                mnt = parts[1].replace("\\040", " ")
                inside = str(path) == mnt or str(path).startswith(mnt.rstrip("/") + "/")
                if inside and len(mnt) >= len(best[0]):
                    best = (mnt, f"{parts[2]} ({parts[0]} on {mnt})")
    except OSError:
        pass
    return best[1]


def loadavg() -> float:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return float("nan")


class Noise:
    """How much CPU other processes (and the hypervisor: steal) took while a part ran.

    System-wide busy time from /proc/stat minus the CPU time of this process and its waited-for
    children (every tool and daemon is waited for before a part ends).
    """

    def __init__(self) -> None:
        self.parts: dict[str, dict[str, float]] = {}
        self._start = self._snap()

    @staticmethod
    def _snap() -> tuple[float, float, float, float]:
        tick = os.sysconf("SC_CLK_TCK")
        try:
            with open("/proc/stat") as f:
                v = [int(x) for x in f.readline().split()[1:9]]
        except (OSError, ValueError):
            v = [0] * 8
        busy = (v[0] + v[1] + v[2] + v[5] + v[6]) / tick  # user nice system irq softirq
        steal = v[7] / tick
        t = os.times()
        ours = t.user + t.system + t.children_user + t.children_system
        return time.perf_counter(), busy, steal, ours

    def mark(self, part: str) -> None:
        now = self._snap()
        wall = now[0] - self._start[0]
        foreign = max(0.0, (now[1] - self._start[1]) - (now[3] - self._start[3]))
        self.parts[part] = {
            "wall_s": wall,
            "foreign_cpu_s": foreign,
            "foreign_cpus": foreign / wall if wall > 0 else 0.0,
            "steal_s": now[2] - self._start[2],
        }
        self._start = now


def wait_quiet(limit_s: float, threshold: float = 0.1) -> float:
    """Wait (at most ``limit_s``) until other processes use under ``threshold`` CPUs for 2 s.

    Returns the seconds waited. For shared machines, where someone's test run would add
    its noise to ours.
    """
    t0 = time.perf_counter()
    if limit_s <= 0:
        return 0.0
    said = False
    while True:
        n = Noise()
        time.sleep(2)
        n.mark("probe")
        busy = n.parts["probe"]["foreign_cpus"]
        waited = time.perf_counter() - t0
        if busy < threshold or waited >= limit_s:
            if said:
                log(f"  waited {waited:.0f} s for quiet (other processes now {busy:.2f} CPUs)")
            return waited
        if not said:
            log(f"other processes use {busy:.2f} CPUs: waiting up to {limit_s:.0f} s for quiet")
            said = True


def machine_facts(tmp: Path) -> dict[str, Any]:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_kb = _proc_status_kb(Path("/proc/meminfo"), "MemTotal")
    import pyfuse3  # only to print its version

    return {
        "nproc": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)),
        "cpu": cpu,
        "mem_gb": round(mem_kb / 2**20, 1) if mem_kb else None,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "pyfuse3": pyfuse3.__version__,
        "fusermount3": _first_line(["fusermount3", "-V"]),
        "grep": _first_line(["grep", "--version"]),
        "rg": _first_line(["rg", "--version"]),
        "node": _first_line(["node", "--version"]),
        "tmp_fs": _fstype(tmp),
        "uid": os.getuid(),
        "loadavg_start": loadavg(),
    }


def _proc_status_kb(path: Path, field: str) -> int:
    try:
        for line in path.read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


# -- mounts --------------------------------------------------------------------------------

LIVE: list[Mount] = []


def mounted(mnt: Path) -> bool:
    """From /proc/self/mountinfo: never touches the mount itself (it may be dead)."""
    target = str(mnt).replace(" ", "\\040")
    try:
        with open("/proc/self/mountinfo") as f:
            return any(line.split()[4] == target for line in f)
    except OSError:
        return False


def fusermount(mnt: Path) -> None:
    """Unmount, lazily if a plain unmount fails (busy, or a dead daemon)."""
    if not mounted(mnt):
        return
    p = subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True, text=True)
    if p.returncode != 0 and mounted(mnt):
        subprocess.run(["fusermount3", "-u", "-z", str(mnt)], capture_output=True, text=True)


class Mount:
    """One FUSE daemon (pisessfs or the bare fs) in the foreground, as our child."""

    def __init__(self, kind: str, source: Path, mnt: Path, logfile: Path) -> None:
        self.kind = kind
        self.source = source
        self.mnt = mnt
        self.logfile = logfile
        self.proc: subprocess.Popen[bytes] | None = None
        self.extra: list[str] = []  # more options of pisessfs mount

    def argv(self) -> list[str]:
        if self.kind == "mount":
            return [PYTHON, "-m", "pisessfs.cli", "mount", "-f"]
        return [PYTHON, str(BAREFS)]

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = 60.0) -> float:
        """Start the daemon; the seconds until the mount answers a stat of its root."""
        self.mnt.mkdir(parents=True, exist_ok=True)
        if mounted(self.mnt):
            raise RuntimeError(f"{self.mnt} is already mounted")
        if self.kind == "mount":
            argv = [*self.argv(), "--sessions", str(self.source), *self.extra, str(self.mnt)]
        else:
            argv = [*self.argv(), str(self.source), str(self.mnt)]
        with open(self.logfile, "ab") as logf:
            t0 = time.perf_counter()
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=logf,
                cwd=DAEMON_ENV.get("PYTHONPATH", ROOT),  # not ROOT: sys.path[0] is the cwd
                env=DAEMON_ENV,
            )
        LIVE.append(self)
        deadline = t0 + timeout
        while time.perf_counter() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.kind} daemon exited with {self.proc.returncode}: {self.log_tail()}"
                )
            if mounted(self.mnt):
                os.stat(self.mnt)  # answered by the daemon: it serves
                return time.perf_counter() - t0
            time.sleep(0.002)
        self.stop()
        raise RuntimeError(f"{self.kind} did not mount within {timeout:.0f} s: {self.log_tail()}")

    def log_tail(self) -> str:
        try:
            return self.logfile.read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def stop(self) -> None:
        try:
            fusermount(self.mnt)
        finally:
            proc = self.proc
            if proc is not None:
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.terminate()
                    try:
                        proc.wait(timeout=5)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait()
                self.proc = None
            if self in LIVE:
                LIVE.remove(self)
            fusermount(self.mnt)  # auto_unmount should have done it; make sure


def stop_all() -> None:
    for m in list(LIVE):
        try:
            m.stop()
        except Exception as err:
            log(f"could not stop {m.kind} on {m.mnt}: {err}")


def snapshot_code(tmp: Path) -> dict[str, str]:
    """Copy the pisessfs package aside and run every daemon from the copy.

    pisessfs may be edited while the benchmark runs (cold runs start a fresh daemon each
    time): all figures of one run then come from one version of the code.
    """
    dst = tmp / "code"
    shutil.copytree(
        ROOT / "pisessfs", dst / "pisessfs", ignore=shutil.ignore_patterns("__pycache__")
    )
    h = hashlib.sha256()
    newest = 0.0
    for f in sorted((dst / "pisessfs").rglob("*.py")):
        h.update(f.relative_to(dst).as_posix().encode() + b"\0" + f.read_bytes())
        newest = max(newest, (ROOT / f.relative_to(dst)).stat().st_mtime)
    DAEMON_ENV["PYTHONPATH"] = str(dst)
    probe = subprocess.run(
        [PYTHON, "-c", "import pisessfs; print(pisessfs.__file__)"],
        capture_output=True,
        text=True,
        cwd=dst,
        env=DAEMON_ENV,
    )
    if not probe.stdout.startswith(str(dst)):
        raise RuntimeError(f"the code snapshot is not what Python imports: {probe.stdout}")
    return {
        "sha256": h.hexdigest()[:12],
        "newest_source": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(newest)),
        "snapshot_at": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


# -- caches --------------------------------------------------------------------------------


def drop_caches() -> str | None:
    """Drop page cache, dentries and inodes; the reason when that is not possible."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError as err:
        return f"cannot write /proc/sys/vm/drop_caches: {err.strerror}"
    return None


# -- the sessions tree ---------------------------------------------------------------------


def build_sessions(src: list[Path], dst: Path, scale: int) -> dict[str, int]:
    """Copy the session folders into ``dst``; ``scale`` copies of each project folder."""
    dst.mkdir(parents=True)
    for s in src:
        for item in sorted(s.iterdir()):
            if item.is_dir():
                shutil.copytree(item, dst / item.name, dirs_exist_ok=True)
            elif item.suffix == ".jsonl":
                shutil.copy2(item, dst / item.name)
    base = sorted(dst.iterdir())
    for k in range(2, scale + 1):
        for item in base:
            if item.is_dir():
                name = item.name
                if len(name) > 4 and name.startswith("--") and name.endswith("--"):
                    new = f"{name[:-2]}-r{k}--"
                else:
                    new = f"{name}-r{k}"
                shutil.copytree(item, dst / new)
            else:
                shutil.copy2(item, dst / f"{item.stem}-r{k}{item.suffix}")
    files = list(dst.rglob("*.jsonl"))
    return {"session_files": len(files), "session_bytes": sum(f.stat().st_size for f in files)}


def tree_facts(root: Path) -> dict[str, int]:
    files = dirs = links = nbytes = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirs += 1
        for name in filenames:
            st = os.lstat(os.path.join(dirpath, name))
            if os.path.islink(os.path.join(dirpath, name)):
                links += 1
            else:
                files += 1
                nbytes += st.st_size
        for name in dirnames:
            if os.path.islink(os.path.join(dirpath, name)):
                links += 1
    return {"files": files, "dirs": dirs, "symlinks": links, "bytes": nbytes}


# -- tree walks ----------------------------------------------------------------------------

WORKLOADS: dict[str, Callable[[Path, str], list[str]]] = {
    "grep -r": lambda d, w: ["grep", "-r", "--", w, str(d)],
    "rg": lambda d, w: ["rg", "--no-config", "--", w, str(d)],
    "cat all": lambda d, w: ["find", str(d), "-type", "f", "-exec", "cat", "--", "{}", "+"],
    "ls -lR": lambda d, w: ["ls", "-lR", str(d)],
}
_BINARIES = {"cat all": ["find", "cat"]}
#: What must agree between the trees for a run to count: output lines, or bytes for cat.
_CHECK_BYTES = {"cat all"}


def run_timed(argv: list[str]) -> tuple[float, int, int, int, bytes]:
    t0 = time.perf_counter()
    p = subprocess.run(argv, capture_output=True, env=ENV)
    dt = time.perf_counter() - t0
    return dt, len(p.stdout), p.stdout.count(b"\n"), p.returncode, p.stderr[-500:]


class WalkBench:
    def __init__(
        self,
        args: argparse.Namespace,
        tmp: Path,
        sessions: Path,
        native: Path,
        result: dict[str, Any],
    ) -> None:
        self.args = args
        self.tmp = tmp
        self.sessions = sessions
        self.native = native
        self.mnt = {"bare": tmp / "mnt-bare", "mount": tmp / "mnt-pisessfs"}
        self.result = result
        self.warnings: list[str] = result.setdefault("warnings", [])
        self.shape: dict[str, dict[str, int]] = {}  # workload -> tree -> output size

    def mount_for(self, tree: str) -> Mount:
        source = self.native if tree == "bare" else self.sessions
        return Mount(tree, source, self.mnt[tree], self.tmp / f"{tree}.log")

    def dir_of(self, tree: str) -> Path:
        return self.native if tree == "native" else self.mnt[tree]

    def _run(self, wl: str, tree: str, cpu: list[float] | None = None, pid: int = 0) -> float:
        """One timed run; with ``cpu``, also the CPU seconds daemon ``pid`` spent in it."""
        argv = WORKLOADS[wl](self.dir_of(tree), self.args.word)
        before = cpu_seconds(pid) if cpu is not None else 0.0
        dt, nbytes, nlines, rc, err = run_timed(argv)
        if cpu is not None:
            cpu.append(cpu_seconds(pid) - before)
        ok = {0, 1} if wl in ("grep -r", "rg") else {0}
        if rc not in ok:
            self._warn(f"{wl} on {tree}: exit {rc}: {err.decode(errors='replace').strip()}")
        size = nbytes if wl in _CHECK_BYTES else nlines
        seen = self.shape.setdefault(wl, {})
        if tree in seen and seen[tree] != size:
            self._warn(f"{wl} on {tree}: output changed between runs ({seen[tree]} -> {size})")
        seen[tree] = size
        return dt

    def _warn(self, msg: str) -> None:
        if msg not in self.warnings:
            self.warnings.append(msg)
            log("WARNING: " + msg)

    def check_shapes(self) -> None:
        for wl, seen in self.shape.items():
            if len(set(seen.values())) > 1:
                unit = "bytes" if wl in _CHECK_BYTES else "lines"
                self._warn(f"{wl}: the trees disagree ({unit}: {seen})")

    def warm(self) -> dict[str, Any]:
        runs = self.args.runs
        out: dict[str, Any] = {}
        mounts = [self.mount_for(t) for t in FUSE_TREES]
        try:
            for m in mounts:
                m.start()
            pids = {m.kind: m.pid for m in mounts}
            for wl in WORKLOADS:
                times: dict[str, list[float]] = {t: [] for t in TREES}
                cpu: dict[str, list[float]] = {t: [] for t in FUSE_TREES}
                for t in TREES:
                    self._run(wl, t)  # warm-up, untimed
                for r in range(runs):
                    for t in _rotate(TREES, r):
                        c = cpu.get(t)
                        times[t].append(self._run(wl, t, c, pids.get(t, 0)))
                out[wl] = _summarise(times)
                out[wl]["daemon_cpu_s"] = {t: median(v) for t, v in cpu.items()}
                out[wl]["daemon_cpu_runs_s"] = cpu
                log(f"warm {wl}: " + _brief(out[wl]))
        finally:
            for m in mounts:
                m.stop()
        return out

    def cold(self) -> dict[str, Any]:
        runs = self.args.runs
        out: dict[str, Any] = {}
        startup: dict[str, list[float]] = {t: [] for t in FUSE_TREES}
        for wl in WORKLOADS:
            times: dict[str, list[float]] = {t: [] for t in TREES}
            tools = _BINARIES.get(wl, [WORKLOADS[wl](Path("."), "x")[0]])
            for r in range(runs):
                for t in _rotate(TREES, r):
                    m = self.mount_for(t) if t in FUSE_TREES else None
                    try:
                        if m is not None:
                            startup[t].append(m.start())
                        why = drop_caches()
                        if why:
                            raise RuntimeError(why)
                        for tool in tools:  # the tools' binaries back in the page cache
                            subprocess.run([tool, "--version"], capture_output=True)
                        times[t].append(self._run(wl, t))
                    finally:
                        if m is not None:
                            m.stop()
            out[wl] = _summarise(times)
            log(f"cold {wl}: " + _brief(out[wl]))
        out["_startup_s"] = {t: median(v) for t, v in startup.items()}
        return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far (all its threads)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rotate(items: tuple[str, ...], r: int) -> list[str]:
    k = r % len(items)
    return [*items[k:], *items[:k]]


def _summarise(times: dict[str, list[float]]) -> dict[str, Any]:
    med = {t: median(v) for t, v in times.items()}
    # Each run times the three trees back to back: the ratio within a run is immune to the
    # machine getting slower or faster between runs; its spread shows how noisy the run was.
    paired = [m / b for m, b in zip(times["mount"], times["bare"], strict=True)]
    return {
        "runs_s": times,
        "median_s": med,
        "mount/bare": med["mount"] / med["bare"],
        "mount/bare_per_run": paired,
        "mount/bare_per_run_range": [min(paired), max(paired)] if paired else [],
        "mount/native": med["mount"] / med["native"],
        "bare/native": med["bare"] / med["native"],
    }


def _brief(s: dict[str, Any]) -> str:
    m = s["median_s"]
    return (
        f"native {m['native']:.3f}s bare {m['bare']:.3f}s mount {m['mount']:.3f}s "
        f"mount/bare {s['mount/bare']:.2f} mount/native {s['mount/native']:.2f}"
    )


# -- the big session -----------------------------------------------------------------------

_WORDS = (  # noqa: SIM905 (a word list reads best as text)
    "the a to of and in is for that it with on as be this by not are from or at an was "
    "file test tests function return value error list dict string path session entry "
    "parent leaf branch tree mount kernel cache timeout buffer parse render index json "
    "line bytes offset update fix refactor module import class method argument config "
    "build check lint type async await thread lock queue retry flaky memory leak grep "
    "docker kubernetes deploy ünïcödé 日本語 naïve café résumé"
).split()
_IDENTS = (  # noqa: SIM905 (a word list reads best as text)
    "parse_line render_tree load_session build_index read_bytes walk_path make_entry "
    "SessionFile Index Parser Store View Entry Header fuse_ops lookup getattr readdir "
    "open read release flush self.cache self.index self.buf os.path.join orjson.loads "
    "len range"
).split()


def _sentence(rng: random.Random, lo: int, hi: int) -> str:
    words = rng.choices(_WORDS, k=rng.randint(lo, hi))
    words[0] = words[0].capitalize()
    return " ".join(words) + rng.choice((".", ".", ".", "?", "!"))


def _paragraph(rng: random.Random, sentences: int) -> str:
    return " ".join(_sentence(rng, 5, 16) for _ in range(sentences))


def _line_pool(rng: random.Random, n: int) -> list[str]:
    """Lines that look like tool output: code, logs, test runs, diffs, JSON."""
    out: list[str] = []
    for i in range(n):
        kind = rng.random()
        if kind < 0.35:
            ind = " " * (4 * rng.randint(0, 3))
            a, b, c = rng.choices(_IDENTS, k=3)
            out.append(f'{ind}{a} = {b}({c}, "{rng.choice(_WORDS)}")  # {_sentence(rng, 2, 6)}')
        elif kind < 0.55:
            lvl = rng.choice(("INFO", "DEBUG", "WARNING", "ERROR"))
            out.append(
                f"2026-11-29 10:{i % 60:02d}:{(i * 7) % 60:02d},{i % 1000:03d} {lvl} "
                f"pisessfs.{rng.choice(_IDENTS)}: {_sentence(rng, 4, 12)}"
            )
        elif kind < 0.7:
            res = rng.choice(("PASSED", "PASSED", "PASSED", "FAILED", "SKIPPED"))
            out.append(
                f"tests/test_{rng.choice(_WORDS)}.py::test_{rng.choice(_IDENTS).lower()}"
                f"_{i} {res} [{i % 100:3d}%]"
            )
        elif kind < 0.85:
            sign = rng.choice("+- ")
            out.append(f"{sign}    {rng.choice(_IDENTS)}({rng.choice(_IDENTS)}) \\t '\"quoted\"'")
        else:
            out.append(
                orjson.dumps(
                    {"id": f"{rng.getrandbits(32):08x}", "n": i, "msg": _sentence(rng, 3, 8)}
                ).decode()
            )
    return out


class SessionWriter:
    """Writes a v3 session the way Pi shapes it: a long chain with branches."""

    def __init__(self, path: Path, seed: int) -> None:
        self.rng = random.Random(seed)
        self.f = open(path, "wb")  # noqa: SIM115 (closed in close())
        self.size = 0
        self.lines = 0
        self.ids: set[str] = set()
        self.t_ms = 1_795_946_400_000  # 2026-11-29T10:00:00Z
        self.pool = _line_pool(self.rng, 6000)
        self.buf: list[bytes] = []
        self.counts: dict[str, int] = {}

    def close(self) -> None:
        self._flush()
        self.f.close()

    def _flush(self) -> None:
        self.f.write(b"".join(self.buf))
        self.buf.clear()

    def new_id(self) -> str:
        while True:
            i = f"{self.rng.getrandbits(32):08x}"
            if i not in self.ids:
                self.ids.add(i)
                return i

    def tick(self, lo: int = 50, hi: int = 20_000) -> tuple[str, int]:
        self.t_ms += self.rng.randint(lo, hi)
        ms = self.t_ms
        iso = datetime.fromtimestamp(ms // 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        return f"{iso}.{ms % 1000:03d}Z", ms

    def write(self, d: dict[str, Any]) -> None:
        line = orjson.dumps(d) + b"\n"
        self.buf.append(line)
        self.size += len(line)
        self.lines += 1
        key = str(d.get("type"))
        if key == "message":
            key = "message/" + str(d["message"].get("role"))
        self.counts[key] = self.counts.get(key, 0) + 1
        if len(self.buf) >= 2000:
            self._flush()

    def entry(self, etype: str, parent: str | None, **payload: Any) -> str:
        eid = self.new_id()
        ts, _ = self.tick()
        self.write({"type": etype, "id": eid, "parentId": parent, "timestamp": ts, **payload})
        return eid

    def message(self, parent: str | None, msg: dict[str, Any], lo: int = 50) -> str:
        eid = self.new_id()
        ts, ms = self.tick(lo)
        msg["timestamp"] = ms
        self.write(
            {"type": "message", "id": eid, "parentId": parent, "timestamp": ts, "message": msg}
        )
        return eid

    def output(self, lo: int = 15, hi: int = 110) -> str:
        n = self.rng.randint(lo, hi)
        i = self.rng.randrange(0, len(self.pool) - n)
        return "\n".join(self.pool[i : i + n])

    def _usage(self) -> dict[str, Any]:
        r = self.rng
        inp, out, cr, cw = r.randint(5, 60), r.randint(20, 900), r.randint(2000, 90000), 500
        return {
            "input": inp,
            "output": out,
            "cacheRead": cr,
            "cacheWrite": cw,
            "totalTokens": inp + out + cr + cw,
            "cost": {
                "input": inp * 3e-6,
                "output": out * 15e-6,
                "cacheRead": cr * 3e-7,
                "cacheWrite": cw * 3.75e-6,
                "total": inp * 3e-6 + out * 15e-6 + cr * 3e-7 + cw * 3.75e-6,
            },
        }

    def assistant(self, parent: str, content: list[dict[str, Any]], stop: str) -> str:
        return self.message(
            parent,
            {
                "role": "assistant",
                "content": content,
                "api": "anthropic-messages",
                "provider": "anthropic",
                "model": "claude-sonnet-4-5",
                "responseId": f"msg_{self.rng.getrandbits(96):024x}",
                "thinkingLevel": "medium",
                "usage": self._usage(),
                "stopReason": stop,
                "durationMs": self.rng.randint(800, 30000),
            },
            lo=2000,
        )

    def tool_round(self, parent: str) -> str:
        """An assistant turn with a tool call and its result; returns the result's id."""
        r = self.rng
        tool = r.choice(("bash", "bash", "read", "read", "edit"))
        call_id = "toolu_" + base64.b32encode(r.randbytes(15)).decode().lower()
        path = f"src/{r.choice(_WORDS)}/{r.choice(_IDENTS).lower()}.py"
        if tool == "bash":
            args: dict[str, Any] = {"command": f"python -m pytest -q tests/ -k {r.choice(_WORDS)}"}
        elif tool == "read":
            args = {"path": path}
        else:
            args = {
                "path": path,
                "edits": [{"oldText": self.output(2, 4), "newText": self.output(2, 5)}],
            }
        sig = base64.b64encode(r.randbytes(r.randint(40, 150))).decode()
        content: list[dict[str, Any]] = [
            {
                "type": "thinking",
                "thinking": _paragraph(r, r.randint(1, 4)),
                "thinkingSignature": sig,
            }
        ]
        if r.random() < 0.6:
            content.append({"type": "text", "text": _paragraph(r, r.randint(1, 3))})
        content.append({"type": "toolCall", "id": call_id, "name": tool, "arguments": args})
        a = self.assistant(parent, content, "toolUse")
        result: dict[str, Any] = {
            "role": "toolResult",
            "toolCallId": call_id,
            "toolName": tool,
            "content": [{"type": "text", "text": self.output()}],
            "isError": r.random() < 0.05,
            "durationMs": r.randint(10, 9000),
        }
        if tool == "edit":
            result["content"] = [
                {"type": "text", "text": f"Successfully replaced 1 block(s) in {path}."}
            ]
            diff = self.output(8, 40)
            result["details"] = {
                "diff": diff,
                "patch": f"--- {path}\n+++ {path}\n{diff}",
                "firstChangedLine": r.randint(1, 400),
            }
        return self.message(a, result)

    def turn(self, parent: str, text: str | None = None) -> tuple[str, str]:
        """A user prompt, tool rounds, a final answer; returns (user id, last id)."""
        r = self.rng
        text = text or _paragraph(r, r.randint(1, 5))
        u = self.message(
            parent, {"role": "user", "content": [{"type": "text", "text": text}]}, lo=10_000
        )
        cur = u
        for _ in range(r.choice((0, 1, 1, 2, 2, 3, 4, 6))):
            cur = self.tool_round(cur)
        if r.random() < 0.05:
            cur = self.message(
                cur,
                {
                    "role": "bashExecution",
                    "command": "git diff --stat",
                    "output": self.output(3, 12),
                    "exitCode": 0,
                    "cancelled": False,
                    "truncated": False,
                },
            )
        final = [{"type": "text", "text": _paragraph(r, r.randint(2, 8))}]
        cur = self.assistant(cur, final, "stop")
        return u, cur


def generate_session(path: Path, target_bytes: int, seed: int = 1) -> dict[str, Any]:
    """A realistic v3 session of about ``target_bytes``: Pi's shapes, written by us."""
    w = SessionWriter(path, seed)
    r = w.rng
    ts, _ = w.tick()
    w.write(
        {
            "type": "session",
            "version": 3,
            "id": str(uuid.UUID(int=r.getrandbits(128), version=4)),
            "timestamp": ts,
            "cwd": "/home/ana/src/big-project",
        }
    )
    cur = w.entry("model_change", None, provider="anthropic", modelId="claude-sonnet-4-5")
    cur = w.entry("thinking_level_change", cur, thinkingLevel="medium")
    users: list[tuple[str, str]] = []  # (user id, its parent) along the main chain
    turns = branches = 0
    while w.size < target_bytes:
        prev = cur
        u, cur = w.turn(cur)
        users.append((u, prev))
        turns += 1
        if turns == 3:
            cur = w.entry("session_info", cur, name="Big refactor of the parser")
        if r.random() < 1 / 40 and len(users) > 3:
            # Edit an earlier prompt (a sibling of it: a new branch), work a little there,
            # then go back to the main leaf, sometimes leaving a branch summary.
            _, parent = users[-r.randint(1, min(8, len(users)))]
            side = parent
            for i in range(r.randint(1, 3)):
                _, side = w.turn(side, _paragraph(r, 2) + (" (edited)" if i == 0 else ""))
            branches += 1
            if r.random() < 0.5:
                cur = w.entry(
                    "branch_summary", cur, fromId=side, summary=_paragraph(r, 6), fromHook=False
                )
        if r.random() < 1 / 60:
            cur = w.entry("label", cur, targetId=cur, label=f"checkpoint-{turns}")
        if r.random() < 1 / 250:
            summary = "## Goal\n" + _paragraph(r, 4) + "\n\n## Progress\n" + w.output(10, 30)
            cur = w.entry(
                "compaction",
                cur,
                summary=summary,
                firstKeptEntryId=users[-1][0],
                tokensBefore=r.randint(50_000, 180_000),
                details={"readFiles": ["a.py", "b.py"], "modifiedFiles": ["a.py"]},
            )
        if r.random() < 1 / 400:
            cur = w.entry("model_change", cur, provider="anthropic", modelId="claude-opus-4-5")
    w.close()
    return {
        "bytes": path.stat().st_size,
        "lines": w.lines,
        "turns": turns,
        "side_branches": branches,
        "by_type": w.counts,
    }


def vm_kb(pid: int) -> dict[str, int]:
    status = Path(f"/proc/{pid}/status")
    return {k: _proc_status_kb(status, k) for k in ("VmRSS", "VmHWM")}


def run_pi(file: Path) -> tuple[dict[str, Any], float]:
    """One Node process timing Pi; retries while node_modules is being reinstalled."""
    argv = ["node", str(BENCH_PI), str(file), str(SESSION_MANAGER)]
    for attempt in range(12):
        t0 = time.perf_counter()
        p = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
        wall = time.perf_counter() - t0
        if p.returncode == 0:
            data: dict[str, Any] = orjson.loads(p.stdout)
            return data, wall
        missing = "ERR_MODULE_NOT_FOUND" in p.stderr or "Cannot find" in p.stderr
        if not missing or attempt == 11:
            raise RuntimeError(f"bench_pi.mjs failed ({p.returncode}): {p.stderr[-1500:]}")
        log("node_modules incomplete (an `npm ci` running?): retrying in 5 s")
        time.sleep(5)
    raise AssertionError("unreachable")


def _prepare_big(args: argparse.Namespace, base: Path, file: Path) -> dict[str, Any]:
    log(f"generating a {args.big_mb} MiB session")
    t0 = time.perf_counter()
    gen = generate_session(file, args.big_mb << 20)
    gen["generate_s"] = time.perf_counter() - t0
    log(
        f"  {gen['bytes'] / 2**20:.1f} MiB, {gen['lines']} lines, {gen['turns']} turns, "
        f"{gen['side_branches']} side branches, {gen['generate_s']:.1f} s"
    )
    return gen


def _idle_memory(runs: int, empty: Path, mnt: Path, logfile: Path) -> dict[str, list[float]]:
    """VmRSS and VmHWM of a pisessfs mount of an empty folder after an ``ls`` of its root."""
    idle: dict[str, list[float]] = {"VmRSS": [], "VmHWM": []}
    for _ in range(runs):
        m = Mount("mount", empty, mnt, logfile)
        try:
            m.start()
            subprocess.run(["ls", str(mnt)], capture_output=True, env=ENV)
            for k, v in vm_kb(m.pid).items():
                idle[k].append(v * 1024)
        finally:
            m.stop()
    return idle


def _first_listing(sessions: Path, stem: str, mnt: Path, logfile: Path) -> dict[str, float]:
    """A fresh mount, then ``ls <session>/leaves/``: startup, listing, memory after it."""
    m = Mount("mount", sessions, mnt, logfile)
    try:
        startup = m.start()
        dt, _, nlines, rc, err = run_timed(["ls", str(mnt / stem / "leaves")])
        if rc != 0:
            raise RuntimeError(f"ls leaves/ failed: {err.decode(errors='replace')}")
        mem = vm_kb(m.pid)
    finally:
        m.stop()
    return {
        "startup_s": startup,
        "listing_s": dt,
        "listed": nlines,
        "VmRSS": mem["VmRSS"] * 1024,
        "VmHWM": mem["VmHWM"] * 1024,
    }


def big_bench(args: argparse.Namespace, tmp: Path, result: dict[str, Any]) -> None:
    runs = args.runs
    base = tmp / "big"
    sessions = base / "sessions"
    empty = base / "empty"
    sessions.mkdir(parents=True)
    empty.mkdir()
    stem = "2026-11-29T10-00-00-000Z_019d0000-0000-7000-8000-000000000000"
    file = sessions / f"{stem}.jsonl"
    gen = _prepare_big(args, base, file)
    pi_copy = base / "pi-copy.jsonl"
    shutil.copyfile(file, pi_copy)
    for f in (file, pi_copy):  # both read from the page cache, like a second open
        with open(f, "rb") as fh:
            while fh.read(1 << 24):
                pass
    mnt = base / "mnt"
    idle = _idle_memory(max(2, runs // 2), empty, mnt, base / "idle.log")
    pis: dict[str, list[float]] = {k: [] for k in ("startup_s", "listing_s", "VmRSS", "VmHWM")}
    pi_keys = ("pi_ms", "open_ms", "tree_ms", "import_ms", "rss_bytes")
    pi: dict[str, list[float]] = {k: [] for k in (*pi_keys, "process_s")}
    listed = 0
    pi_facts: dict[str, Any] = {}
    for r in range(runs):
        data, wall = run_pi(pi_copy)
        for k in pi_keys:
            pi[k].append(float(data[k]))
        pi["process_s"].append(wall)
        pi_facts = {k: data[k] for k in ("entries", "nodes", "roots", "leaves")}
        one = _first_listing(sessions, stem, mnt, base / "big.log")
        for k, values in pis.items():
            values.append(one[k])
        listed = int(one["listed"])
        log(
            f"  run {r + 1}: pisessfs ls leaves/ {one['listing_s']:.3f} s "
            f"(startup {one['startup_s']:.3f} s), Pi open+getTree {data['pi_ms'] / 1000:.3f} s"
            f" (process {wall:.3f} s)"
        )
    size = gen["bytes"]
    med_idle = {k: median(v) for k, v in idle.items()}
    med_pis = {k: median(v) for k, v in pis.items()}
    med_pi = {k: median(v) for k, v in pi.items()}
    pi_s = med_pi["pi_ms"] / 1000
    result["big"] = {
        "session": gen,
        "pisessfs": {"runs": pis, "median": med_pis, "leaves_listed": listed},
        "pi": {"runs": pi, "median": med_pi, **pi_facts},
        "listing/pi": med_pis["listing_s"] / pi_s,
        "listing/pi_process": med_pis["listing_s"] / med_pi["process_s"],
        "startup+listing/pi": (med_pis["startup_s"] + med_pis["listing_s"]) / pi_s,
    }
    result["memory"] = {
        "file_bytes": size,
        "idle": {"runs": idle, "median": med_idle},
        "rss_delta_bytes": med_pis["VmRSS"] - med_idle["VmRSS"],
        "hwm_delta_bytes": med_pis["VmHWM"] - med_idle["VmHWM"],
        "rss_delta/file": (med_pis["VmRSS"] - med_idle["VmRSS"]) / size,
        "hwm_delta/file": (med_pis["VmHWM"] - med_idle["VmHWM"]) / size,
        "pi_rss/file": med_pi["rss_bytes"] / size,
    }


# -- report --------------------------------------------------------------------------------


def _mark(value: float, target: float) -> str:
    if math.isnan(value):
        return "  "
    return "ok" if value <= target else "MISS"


def report(result: dict[str, Any]) -> str:
    out: list[str] = []
    mf = result["machine"]
    out.append(
        f"machine: {mf['nproc']} CPUs ({mf['cpu']}), {mf['mem_gb']} GB, kernel {mf['kernel']}, "
        f"Python {mf['python']}, pyfuse3 {mf['pyfuse3']}, node {mf['node']}; "
        f"temp on {mf['tmp_fs']}"
    )
    out.append(
        f"load average: {mf['loadavg_start']:.2f} at start, "
        f"{result.get('loadavg_end', float('nan')):.2f} at end"
    )
    c = result.get("code")
    if c:
        out.append(
            f"code: pisessfs/*.py sha256 {c['sha256']} (newest file {c['newest_source']}), "
            f"snapshot taken {c['snapshot_at']}"
        )
    s = result["settings"]
    out.append(
        f"settings: runs={s['runs']} scale={s['scale']} word={s['word']!r} big={s['big_mb']} MiB"
        f"{' (quick)' if s['quick'] else ''}"
    )
    if result.get("walk"):
        out.extend(_report_walk(result))
    if result.get("big"):
        out.extend(_report_big(result))
    if result.get("memory"):
        out.extend(_report_memory(result["memory"]))
    if result.get("noise"):
        out.append("")
        out.append("other processes' CPU while each part ran (noise; 1.00 = a whole CPU):")
        out.extend(
            f"  {part:<12} {n['foreign_cpus']:.2f} CPUs ({n['foreign_cpu_s']:.1f} CPU-s in "
            f"{n['wall_s']:.0f} s), steal {n['steal_s']:.1f} s"
            for part, n in result["noise"].items()
            if part != "setup"
        )
    if result.get("warnings"):
        out.append("")
        out.append("warnings:")
        out.extend(f"  - {w}" for w in result["warnings"])
    out.append("")
    out.append(f"total time: {result['elapsed_s']:.0f} s")
    return "\n".join(out)


def _report_walk(result: dict[str, Any]) -> list[str]:
    walk = result["walk"]
    t = result["tree"]
    runs = result["settings"]["runs"]
    out = [
        "",
        f"1. tree walks: {t['files']} files, {t['dirs']} dirs, {t['symlinks']} symlinks, "
        f"{t['bytes'] / 2**20:.1f} MiB rendered from {t['session_files']} sessions "
        f"({t['session_bytes'] / 2**20:.1f} MiB); median seconds of {runs} runs",
        f"{'workload':<9} {'mode':<5} {'native':>8} {'bare':>8} {'mount':>8}  "
        f"{'mount/bare':>13} {'(per run)':>11}  {'mount/native':>14}  {'bare/native':>11}",
    ]
    for mode in ("warm", "cold"):
        block = walk.get(mode)
        if not block:
            continue
        for wl in WORKLOADS:
            b = block[wl]
            m = b["median_s"]
            mb = b["mount/bare"]
            mn = b["mount/native"]
            mn_mark = _mark(mn, TARGET_MOUNT_NATIVE_COLD) if mode == "cold" else ""
            lo, hi = b["mount/bare_per_run_range"]
            spread = f"{lo:.2f}-{hi:.2f}"
            out.append(
                f"{wl:<9} {mode:<5} {m['native']:8.3f} {m['bare']:8.3f} {m['mount']:8.3f}  "
                f"{mb:8.2f} {_mark(mb, TARGET_MOUNT_BARE):>4} {spread:>11}  {mn:9.2f} "
                f"{mn_mark:>4}  {b['bare/native']:11.2f}"
            )
    warm = walk.get("warm") or {}
    cpu = [
        f"{wl} {warm[wl]['daemon_cpu_s']['bare']:.2f}/{warm[wl]['daemon_cpu_s']['mount']:.2f}"
        for wl in WORKLOADS
        if wl in warm
    ]
    if cpu:
        out.append("daemon CPU s per warm run, bare/pisessfs: " + ", ".join(cpu))
    out.append("(per run): min-max of mount/bare within each run (trees timed back to back)")
    cold = walk.get("cold")
    if cold:
        st = cold["_startup_s"]
        out.append(
            f"mount startup (median, until the root answers): pisessfs {st['mount']:.3f} s, "
            f"bare {st['bare']:.3f} s (bare loads the whole tree into memory first)"
        )
    elif walk.get("cold_skipped"):
        out.append(f"cold runs skipped: {walk['cold_skipped']}")
    out.append(
        f"targets: mount/bare <= {TARGET_MOUNT_BARE} warm and cold; "
        f"mount/native <= {TARGET_MOUNT_NATIVE_COLD} cold"
    )
    return out


def _report_big(result: dict[str, Any]) -> list[str]:
    big = result["big"]
    g = big["session"]
    p = big["pisessfs"]["median"]
    pi = big["pi"]["median"]
    ratio = big["listing/pi"]
    return [
        "",
        f"2. first listing of a {g['bytes'] / 2**20:.1f} MiB session ({g['lines']} lines, "
        f"{big['pi']['leaves']} leaves in Pi's tree, {big['pisessfs']['leaves_listed']} "
        f"listed in leaves/); median of {result['settings']['runs']} runs",
        f"  pisessfs: ls leaves/ on a fresh mount {p['listing_s']:.3f} s "
        f"(mount startup before it: {p['startup_s']:.3f} s)",
        f"  Pi:       open {pi['open_ms'] / 1000:.3f} s + getTree {pi['tree_ms'] / 1000:.3f} s"
        f" = {pi['pi_ms'] / 1000:.3f} s in node (whole process {pi['process_s']:.3f} s, "
        f"import {pi['import_ms'] / 1000:.3f} s)",
        f"  listing/Pi = {ratio:.3f} {_mark(ratio, TARGET_LISTING_VS_PI)} "
        f"(target <= {TARGET_LISTING_VS_PI}); (startup+listing)/Pi = "
        f"{big['startup+listing/pi']:.2f}; listing/Pi process = {big['listing/pi_process']:.2f}",
    ]


def _report_memory(mem: dict[str, Any]) -> list[str]:
    idle = mem["idle"]["median"]
    r = mem["rss_delta/file"]
    after = idle["VmRSS"] + mem["rss_delta_bytes"]
    return [
        "",
        f"3. memory after listing it: pisessfs VmRSS {idle['VmRSS'] / 2**20:.0f} MiB idle -> "
        f"{after / 2**20:.0f} MiB: +{mem['rss_delta_bytes'] / 2**20:.0f} MiB for a "
        f"{mem['file_bytes'] / 2**20:.0f} MiB file",
        f"  RSS delta / file = {r:.2f} {_mark(r, TARGET_MEMORY)} (target <= {TARGET_MEMORY}); "
        f"peak (VmHWM) delta / file = {mem['hwm_delta/file']:.2f}; "
        f"Pi's node RSS / file = {mem['pi_rss/file']:.2f}",
    ]


# -- main ----------------------------------------------------------------------------------


@contextmanager
def temp_dir(parent: str | None, keep: bool) -> Iterator[Path]:
    tmp = Path(tempfile.mkdtemp(prefix="pisessfs-bench-", dir=parent))
    try:
        yield tmp
    finally:
        stop_all()
        if keep:
            log(f"kept {tmp}")
        else:
            busy = [line for line in _mountinfo() if line.startswith(str(tmp))]
            if busy:
                log(f"not removing {tmp}: still mounted: {busy}")
            else:
                shutil.rmtree(tmp, ignore_errors=True)


def _mountinfo() -> list[str]:
    try:
        with open("/proc/self/mountinfo") as f:
            return [line.split()[4].replace("\\040", " ") for line in f]
    except OSError:
        return []


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="scripts/bench", description=__doc__.split("\n\n")[0] if __doc__ else None
    )
    p.add_argument("--quick", action="store_true", help="about a minute: fewer runs, smaller")
    p.add_argument("--runs", type=int, help="timed runs per figure (default 5, quick 3)")
    p.add_argument("--sessions", metavar="DIR", help="sessions folder (default: fixtures+examples)")
    p.add_argument("--scale", type=int, help="copies of each project folder (default 20, quick 4)")
    p.add_argument(
        "--examples-only",
        action="store_true",
        help="walk the 4 bundled example sessions only (no fixture sessions at hand)",
    )
    p.add_argument("--word", default="timeout", help="what grep and rg look for")
    p.add_argument("--big-mb", type=int, help="size of the big session in MiB (default 100)")
    p.add_argument("--json", metavar="FILE", help="write every figure as JSON to FILE")
    p.add_argument("--tmp", metavar="DIR", help="where the temp folder goes (default: $TMPDIR)")
    p.add_argument("--keep", action="store_true", help="keep the temp folder")
    p.add_argument(
        "--wait-quiet",
        type=float,
        default=0,
        metavar="S",
        help="before each part, wait up to S seconds until other processes are idle",
    )
    p.add_argument("--no-cold", action="store_true", help="warm tree walks only")
    p.add_argument("--only", choices=("walk", "big", "live"), help="run one part only")
    args = p.parse_args(argv)
    args.runs = args.runs or (3 if args.quick else 5)
    args.scale = args.scale or (4 if args.quick else 20)
    args.big_mb = args.big_mb or (20 if args.quick else 100)
    if args.runs < 1 or args.scale < 1 or args.big_mb < 1:
        p.error("--runs, --scale and --big-mb must be positive")
    if args.only in (None, "walk"):
        walk_sources(args)  # before anything runs: missing input ends the bench at once
    return args


def _sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _sigterm)
    for tool in ("fusermount3", "grep", "rg", "find", "ls", "node"):
        if shutil.which(tool) is None:
            print(f"bench: {tool} not found (run ./scripts/setup --node)", file=sys.stderr)
            return 2
    t_start = time.perf_counter()
    result: dict[str, Any] = {"warnings": []}
    try:
        with temp_dir(args.tmp, args.keep) as tmp:
            result["machine"] = machine_facts(tmp)
            result["code"] = snapshot_code(tmp)
            result["settings"] = {
                k: getattr(args, k)
                for k in ("runs", "scale", "word", "big_mb", "quick", "wait_quiet")
            }
            mf = result["machine"]
            log(
                f"{mf['nproc']} CPUs, kernel {mf['kernel']}, load {mf['loadavg_start']:.2f}, "
                f"temp {tmp} on {mf['tmp_fs']}"
            )
            noise = Noise()
            result["noise"] = noise.parts
            if args.only in (None, "walk"):
                walk_part(args, tmp, result, noise)
            if args.only in (None, "big"):
                wait_quiet(args.wait_quiet)
                noise.mark("setup")
                big_bench(args, tmp, result)
                noise.mark("big session")
            if args.only in (None, "live"):
                import bench_live

                wait_quiet(args.wait_quiet)
                noise.mark("setup")
                big_file = next((tmp / "big" / "sessions").glob("*.jsonl"), None)
                if big_file is None:
                    big_file = tmp / "live-big.jsonl"
                    _prepare_big(args, tmp, big_file)
                bench_live.live_part(tmp, big_file, args.runs, result)
                noise.mark("writes and live view")
    except KeyboardInterrupt:
        log("interrupted: mounts stopped, temp folder removed")
        return 130
    finally:
        stop_all()
    result["loadavg_end"] = loadavg()
    for part, n in result.get("noise", {}).items():
        if part != "setup" and n["foreign_cpus"] > 0.15:
            result["warnings"].append(
                f"other processes used {n['foreign_cpus']:.2f} CPUs during {part}: noisy"
            )
    result["elapsed_s"] = time.perf_counter() - t_start
    text = report(result)
    if "write" in result or "visible_small" in result:
        import bench_live

        text += "\n" + "\n".join(bench_live.report_live(result))
    print(text)
    if args.json:
        Path(args.json).write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
        log(f"wrote {args.json}")
    return 0


def walk_sources(args: argparse.Namespace) -> list[Path]:
    """What the walks measure: --sessions, else the generated fixtures and the examples.
    Missing input is an error, never a smaller bench that looks like the real one."""
    if args.sessions:
        src = Path(args.sessions).expanduser()
        if not src.is_dir():
            raise SystemExit(f"bench: no sessions folder at {src}")
        return [src]
    if args.examples_only:
        return [EXAMPLES]
    if not FIXTURES.is_dir():
        raise SystemExit(
            f"bench: the generated fixture sessions are not at {FIXTURES} (the shared folder "
            "beside the checkout); pass --sessions DIR, or --examples-only to bench the 4 "
            "example sessions alone"
        )
    return [FIXTURES, EXAMPLES]


def walk_part(args: argparse.Namespace, tmp: Path, result: dict[str, Any], noise: Noise) -> None:
    src = walk_sources(args)
    log("walks over: " + ", ".join(str(p) for p in src))
    sessions = tmp / "sessions"
    facts = build_sessions(src, sessions, args.scale)
    native = tmp / "native"
    native.mkdir()
    log(f"rendering {facts['session_files']} sessions into a native copy (cp -r)")
    m = Mount("mount", sessions, tmp / "mnt-pisessfs", tmp / "mount.log")
    try:
        m.start()
        p = subprocess.run(
            ["cp", "-r", "--", f"{m.mnt}/.", str(native)], capture_output=True, text=True
        )
        if p.returncode != 0:
            raise RuntimeError(f"cp -r of the mount failed: {p.stderr[-1500:]}")
    finally:
        m.stop()
    result["tree"] = {**tree_facts(native), **facts}
    t = result["tree"]
    log(f"tree: {t['files']} files, {t['dirs']} dirs, {t['bytes'] / 2**20:.1f} MiB")
    bench = WalkBench(args, tmp, sessions, native, result)
    wait_quiet(args.wait_quiet)
    noise.mark("setup")
    walk: dict[str, Any] = {"warm": bench.warm()}
    noise.mark("walk warm")
    why = "disabled with --no-cold" if args.no_cold else drop_caches()
    if why:
        walk["cold_skipped"] = why
        result["warnings"].append(f"cold runs skipped: {why}")
    else:
        wait_quiet(args.wait_quiet)
        noise.mark("setup")
        walk["cold"] = bench.cold()
        noise.mark("walk cold")
    bench.check_shapes()
    result["walk"] = walk


if __name__ == "__main__":
    sys.exit(main())
