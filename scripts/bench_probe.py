#!/usr/bin/env python3
"""Other requests during a first walk: a fresh daemon on an empty cache folder, the page
cache dropped, a cold ``grep -r`` piped, and meanwhile one ``getxattr`` of a project folder
every 20 ms (a request the daemon answers itself, about no session): how long each took.

    scripts/bench_probe.py SESSIONS [--workers N] [--runs N]

DESIGN.md's bound: other requests never wait more than 50 ms. Needs root (drop_caches).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PY = REPO / ".venv" / "bin" / "python"


def one(sessions: Path, workers: int | None, tmp: Path) -> str:
    mnt, cache = tmp / "mnt", tmp / "cache"
    mnt.mkdir(exist_ok=True)
    subprocess.run(["rm", "-rf", str(cache)], check=True)
    subprocess.run("sync; echo 3 > /proc/sys/vm/drop_caches", shell=True, check=True)
    extra = [] if workers is None else ["--workers", str(workers)]
    argv = [str(PY), "-m", "pisessfs.cli", "mount", "-f", "--sessions", str(sessions)]
    argv += ["--disk-cache", str(cache), "--log", str(tmp / "mount.log"), *extra, str(mnt)]
    daemon = subprocess.Popen(argv, cwd=REPO)
    try:
        while not os.path.ismount(mnt):
            time.sleep(0.05)
        project = next(p for p in sorted(mnt.iterdir()) if p.is_dir())
        took: list[float] = []
        done = threading.Event()

        def probe() -> None:
            while not done.is_set():
                t = time.perf_counter()
                with contextlib.suppress(OSError):
                    os.getxattr(project, "user.pi.cwd")
                took.append((time.perf_counter() - t) * 1000)
                time.sleep(0.02)

        prober = threading.Thread(target=probe)
        prober.start()
        t = time.perf_counter()
        subprocess.run(f"grep -r timeout '{mnt}' | cat > /dev/null", shell=True, check=True)
        walk = time.perf_counter() - t
        done.set()
        prober.join()
    finally:
        subprocess.run([str(PY), "-m", "pisessfs.cli", "umount", str(mnt)], cwd=REPO)
        daemon.wait()
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
    if not os.access("/proc/sys/vm/drop_caches", os.W_OK):
        print("bench_probe: needs root (drop_caches)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(dir="/var/tmp", prefix="pisessfs-probe-") as tmp:
        for _ in range(args.runs):
            print(one(args.sessions, args.workers, Path(tmp)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
