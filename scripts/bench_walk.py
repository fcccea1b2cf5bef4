"""Part 1 of scripts/bench: tree walks over the mount, a native copy and a bare FUSE fs.

Owns where the walked sessions come from (``walk_sources``: missing fixture sessions end the
bench), building the scaled sessions folder and the native copy, the workloads (``grep -r``,
``rg``, ``cat`` of every file, ``ls -lR``), warm and cold runs (``WalkBench``), the part as a
whole (``walk_part``) and its report lines (``report_walk``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchlib import (
    EXAMPLES,
    ROOT,
    Mount,
    Noise,
    cpu_seconds,
    drop_caches,
    log,
    mark,
    median,
    run_timed,
    wait_quiet,
)

FIXTURES = ROOT / "tests" / "fixtures" / "generated"

#: DESIGN.md targets.
TARGET_MOUNT_BARE = 1.25
TARGET_MOUNT_NATIVE_COLD = 2.0

TREES = ("native", "bare", "mount")
FUSE_TREES = ("bare", "mount")


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
            f"bench: the generated fixture sessions are not at {FIXTURES}; pass --sessions "
            "DIR, or --examples-only to bench the 4 example sessions alone"
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


def report_walk(result: dict[str, Any]) -> list[str]:
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
            mn_mark = mark(mn, TARGET_MOUNT_NATIVE_COLD) if mode == "cold" else ""
            lo, hi = b["mount/bare_per_run_range"]
            spread = f"{lo:.2f}-{hi:.2f}"
            out.append(
                f"{wl:<9} {mode:<5} {m['native']:8.3f} {m['bare']:8.3f} {m['mount']:8.3f}  "
                f"{mb:8.2f} {mark(mb, TARGET_MOUNT_BARE):>4} {spread:>11}  {mn:9.2f} "
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
