#!/usr/bin/env python3
"""Other requests during a first walk: a fresh daemon on an empty cache folder, the page
cache dropped, a cold ``grep -r`` piped, and meanwhile one ``getxattr`` of the mount's root
every 20 ms from before the walk's first listing (a request the daemon answers itself, about
no session; the kernel caches no answer of it): how long each took.

    scripts/bench_probe.py SESSIONS [--workers N] [--runs N]

DESIGN.md's bound: other requests never wait more than 50 ms. Needs root (drop_caches).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib as b  # the shared helpers: mounts, dropping caches


def one(sessions: Path, workers: int | None, tmp: Path) -> str:
    m = b.Mount("mount", sessions, tmp / "mnt", tmp / "mount.log")
    shutil.rmtree(tmp / "cache", ignore_errors=True)
    m.extra = ["--disk-cache", str(tmp / "cache")]
    m.extra += [] if workers is None else ["--workers", str(workers)]
    m.start()
    try:
        why = b.drop_caches()
        if why:
            raise SystemExit(f"bench_probe: {why}")
        took: list[float] = []
        done = threading.Event()

        def probe() -> None:
            while not done.is_set():
                t = time.perf_counter()
                with contextlib.suppress(OSError):
                    os.getxattr(m.mnt, "user.pi.probe")  # (none: ENODATA)
                took.append((time.perf_counter() - t) * 1000)
                time.sleep(0.02)

        prober = threading.Thread(target=probe)
        prober.start()
        t = time.perf_counter()
        subprocess.run(f"grep -r timeout '{m.mnt}' | cat > /dev/null", shell=True, check=True)
        walk = time.perf_counter() - t
        done.set()
        prober.join()
    finally:
        m.stop()
    took.sort()
    over = sum(x > 50 for x in took)
    return (
        f"workers {workers if workers is not None else 'default'}: walk {walk:.1f} s; "
        f"{len(took)} probes: median {statistics.median(took):.2f} ms, "
        f"p99 {took[int(len(took) * 0.99)]:.1f} ms, max {took[-1]:.1f} ms, over 50 ms: {over}"
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("sessions", type=Path)
    p.add_argument("--workers", type=int, help="the daemon's --workers (default: its own)")
    p.add_argument("--runs", type=int, default=1)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(dir="/var/tmp", prefix="pisessfs-probe-") as tmp:
        for _ in range(args.runs):
            print(one(args.sessions, args.workers, Path(tmp)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
