"""The helpers every part of scripts/bench (and scripts/bench_scale.py) shares, no part logic.

Owns the paths and environments (``ROOT``, ``EXAMPLES``, ``ENV``, ``DAEMON_ENV``), logging and
medians, the CPU noise of other processes (``Noise``, ``wait_quiet``), the machine's facts, the
FUSE daemons (``Mount``, ``stop_all``) and the code snapshot they run from, dropping caches,
timing a tool (``run_timed``), a process's CPU and memory (``cpu_seconds``, ``vm_kb``), the
temp folder, and the ok/MISS mark of the reports.
"""

from __future__ import annotations

import hashlib
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
#: How a pisessfs mount is started: this interpreter's package, or an installed command
#: (``bench_scale.py --pisessfs ~/.local/bin/pisessfs``: what ``scripts/install`` gives).
PISESSFS = [PYTHON, "-m", "pisessfs.cli"]
BAREFS = ROOT / "scripts" / "bench_barefs.py"
EXAMPLES = ROOT / "pisessfs" / "examples" / "sessions"
#: The real Pi's session code, as ``./scripts/setup --node`` (or ``./scripts/test``) installs it.
SESSION_MANAGER = (
    ROOT / "node_modules" / "@earendil-works" / "pi-coding-agent" / "dist" / "core"
) / "session-manager.js"
ENV = {**os.environ, "LC_ALL": "C"}  # the same, fast, locale for every tool and tree
#: The daemons' environment: PYTHONPATH points at a snapshot of the package (snapshot_code).
DAEMON_ENV = dict(ENV)


def pi_missing() -> str | None:
    """Why the real Pi cannot run here (no ``node``, or its package not installed), or None."""
    if shutil.which("node") is None:
        return "node not found (run ./scripts/setup --node)"
    if not SESSION_MANAGER.is_file():
        where = SESSION_MANAGER.relative_to(ROOT)
        return f"Pi is not installed: no {where} (run ./scripts/setup --node)"
    return None


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
            return [*PISESSFS, "mount", "-f"]
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
            # No disk cache unless asked for: a cold walk here is a first mount's (what an
            # earlier run saved would answer it), bench_scale.py measures both.
            disk = [] if "--disk-cache" in self.extra else ["--disk-cache", "off"]
            argv = [*self.argv(), "--sessions", str(self.source), *disk, *self.extra]
            argv.append(str(self.mnt))
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
                try:  # (a mount saves its disk cache after the unmount: 1 GB takes seconds)
                    proc.wait(timeout=120)
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


# -- timing --------------------------------------------------------------------------------


def run_timed(argv: list[str]) -> tuple[float, int, int, int, bytes]:
    """Seconds, output bytes and lines, exit code and the end of stderr of ``argv``. The
    output is counted as it comes, never held: a grep of the raw JSONL writes hundreds of
    MiB (whole JSON lines), and gathering them slowed the baseline, not the mount."""
    nbytes = nlines = 0
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, env=ENV) as p:
            assert p.stdout is not None
            fd = p.stdout.fileno()
            while chunk := os.read(fd, 1 << 20):
                nbytes += len(chunk)
                nlines += chunk.count(b"\n")
        dt = time.perf_counter() - t0
        err.seek(0)
        return dt, nbytes, nlines, p.returncode, err.read()[-500:]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far (all its threads)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def vm_kb(pid: int) -> dict[str, int]:
    status = Path(f"/proc/{pid}/status")
    return {k: _proc_status_kb(status, k) for k in ("VmRSS", "VmHWM")}


# -- report and temp folder ----------------------------------------------------------------


def mark(value: float, target: float) -> str:
    if math.isnan(value):
        return "  "
    return "ok" if value <= target else "MISS"


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
