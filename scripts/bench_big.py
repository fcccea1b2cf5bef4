"""Parts 2 and 3 of scripts/bench: the first listing of a big session, and memory.

Owns the real Pi's timing (``run_pi``, scripts/bench_pi.mjs), generating the big session
(``prepare_big``), the idle and after-listing memory of the daemon, the part as a whole
(``big_bench``) and its report lines (``report_big``, ``report_memory``).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import orjson
from bench_gen import generate_session
from benchlib import ENV, ROOT, SESSION_MANAGER, Mount, log, mark, median, run_timed, vm_kb

BENCH_PI = ROOT / "scripts" / "bench_pi.mjs"

#: DESIGN.md targets.
TARGET_LISTING_VS_PI = 0.5
TARGET_MEMORY = 1.2


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


def prepare_big(args: argparse.Namespace, base: Path, file: Path) -> dict[str, Any]:
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
    gen = prepare_big(args, base, file)
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


def report_big(result: dict[str, Any]) -> list[str]:
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
        f"  listing/Pi = {ratio:.3f} {mark(ratio, TARGET_LISTING_VS_PI)} "
        f"(target <= {TARGET_LISTING_VS_PI}); (startup+listing)/Pi = "
        f"{big['startup+listing/pi']:.2f}; listing/Pi process = {big['listing/pi_process']:.2f}",
    ]


def report_memory(mem: dict[str, Any]) -> list[str]:
    idle = mem["idle"]["median"]
    r = mem["rss_delta/file"]
    after = idle["VmRSS"] + mem["rss_delta_bytes"]
    return [
        "",
        f"3. memory after listing it: pisessfs VmRSS {idle['VmRSS'] / 2**20:.0f} MiB idle -> "
        f"{after / 2**20:.0f} MiB: +{mem['rss_delta_bytes'] / 2**20:.0f} MiB for a "
        f"{mem['file_bytes'] / 2**20:.0f} MiB file",
        f"  RSS delta / file = {r:.2f} {mark(r, TARGET_MEMORY)} (target <= {TARGET_MEMORY}); "
        f"peak (VmHWM) delta / file = {mem['hwm_delta/file']:.2f}; "
        f"Pi's node RSS / file = {mem['pi_rss/file']:.2f}",
    ]
