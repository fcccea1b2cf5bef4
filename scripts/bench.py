#!/usr/bin/env python3
"""Measure pisessfs against the performance targets of DESIGN.md ("Performance targets").

Four parts, every figure a median of several runs, every ratio against a baseline measured in
the same run:

1. Tree walks (scripts/bench_walk.py: ``grep -r``, ``rg``, ``cat`` of every file,
   ``ls -lR``), warm and cold, over the pisessfs mount of a sessions folder, a native on-disk
   copy of the rendered tree, and a bare pyfuse3 filesystem serving the same bytes from memory
   (scripts/bench_barefs.py, the floor). Warm: one untimed run, then N timed runs, the three
   trees interleaved. Cold: before each run the FUSE daemon is started afresh (unmount +
   remount) and the page cache, dentries and inodes are dropped
   (``sync; echo 3 > /proc/sys/vm/drop_caches``) for every tree alike.
2. First listing of a big generated session (scripts/bench_big.py, the session from
   scripts/bench_gen.py: ``ls MNT/<session>/leaves/`` on a fresh mount) against the real Pi
   ``SessionManager.open()`` + ``getTree()`` (scripts/bench_pi.mjs).
3. Peak memory of the pisessfs process after that listing, over an idle mount
   (scripts/bench_big.py).
4. Writes and the live view (scripts/bench_live.py): open -> close() of a new message with its
   line fsynced; the real Pi appending (scripts/bench_live.mjs) until the mount shows it, on a
   small and on the big session, with the daemon's CPU per append on each.

    scripts/bench [--quick] [--json FILE] [--scale N] [--sessions DIR] [--big-mb N]

This file parses the options, runs the chosen parts and assembles the report; the helpers
the parts share (mounts, timing, medians, noise, machine facts) are in scripts/benchlib.py.

Must run as root for the cold runs (drop_caches); without it only warm figures are reported.
Every daemon runs from a snapshot of the pisessfs package taken at start (so that edits made
meanwhile do not mix two versions into one run). The report says how much CPU other processes
took while each part ran; ``--wait-quiet S`` waits for a quiet machine before each part.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

import bench_big
import bench_live
import bench_walk
import orjson
from benchlib import (
    Noise,
    loadavg,
    log,
    machine_facts,
    pi_missing,
    snapshot_code,
    stop_all,
    temp_dir,
    wait_quiet,
)


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
        out.extend(bench_walk.report_walk(result))
    if result.get("big"):
        out.extend(bench_big.report_big(result))
    if result.get("memory"):
        out.extend(bench_big.report_memory(result["memory"]))
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


# -- main ----------------------------------------------------------------------------------


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
        bench_walk.walk_sources(args)  # before anything runs: missing input ends the bench at once
    return args


def _sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _sigterm)
    for tool in ("fusermount3", "grep", "rg", "find", "ls"):
        if shutil.which(tool) is None:
            print(f"bench: {tool} not found (run ./scripts/setup --node)", file=sys.stderr)
            return 2
    why = pi_missing() if args.only != "walk" else None  # (the big and live parts run Pi)
    if why is not None:
        print(f"bench: {why}", file=sys.stderr)
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
                bench_walk.walk_part(args, tmp, result, noise)
            if args.only in (None, "big"):
                wait_quiet(args.wait_quiet)
                noise.mark("setup")
                bench_big.big_bench(args, tmp, result)
                noise.mark("big session")
            if args.only in (None, "live"):
                wait_quiet(args.wait_quiet)
                noise.mark("setup")
                big_file = next((tmp / "big" / "sessions").glob("*.jsonl"), None)
                if big_file is None:
                    big_file = tmp / "live-big.jsonl"
                    bench_big.prepare_big(args, tmp, big_file)
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
        text += "\n" + "\n".join(bench_live.report_live(result))
    print(text)
    if args.json:
        Path(args.json).write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
        log(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
