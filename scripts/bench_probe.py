#!/usr/bin/env python3
"""Other requests during a first walk: a fresh daemon on an empty cache folder, the page
cache dropped, a cold ``grep -r`` piped, and meanwhile one ``getxattr`` of the mount's root
every 20 ms from before the walk's first listing (a request the daemon answers itself, about
no session; the kernel caches no answer of it): how long each took.

    scripts/bench_probe.py SESSIONS [--workers N] [--runs N] [--pi N]

DESIGN.md's bound: other requests never wait more than 50 ms. ``--pi N``: meanwhile the real
Pi (scripts/bench_live.mjs) appends N messages, 150 ms apart, to a session of its own, and
each is timed until the mount's ``current`` shows it (DESIGN.md: within 100 ms); SESSIONS is
then copied first, with that session added (Pi writes to the copy). ``--stalls``: the daemon
runs ``stalls.py``'s sampler, and each run prints where its loop was held over 50 ms (those
figures are not the bench's: the sampler costs). Needs root (drop_caches).
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
import stalls
from bench_live import RECIPE, pi_appends

LIVE = "--live--"  # the project folder of the session Pi appends to (--pi)


def one(sessions: Path, workers: int | None, tmp: Path, appends: int) -> str:
    m = b.Mount("mount", sessions, tmp / "mnt", tmp / "mount.log")
    shutil.rmtree(tmp / "cache", ignore_errors=True)
    m.extra = ["--disk-cache", str(tmp / "cache")]
    m.extra += [] if workers is None else ["--workers", str(workers)]
    m.start()
    done = threading.Event()  # (set however the walk ends: else its threads ran on, forever)
    try:
        why = b.drop_caches()
        if why:
            raise SystemExit(f"bench_probe: {why}")
        took: list[float] = []

        def probe() -> None:
            while not done.is_set():
                t = time.perf_counter()
                with contextlib.suppress(OSError):
                    os.getxattr(m.mnt, "user.pi.probe")  # (none: ENODATA)
                took.append((time.perf_counter() - t) * 1000)
                time.sleep(0.02)

        peaks: dict[int, int] = {}
        daemon = m.pid
        sampler = threading.Thread(target=sample, args=(daemon, peaks, done))
        prober = threading.Thread(target=probe)
        prober.start()
        sampler.start()
        t = time.perf_counter()
        grep = subprocess.Popen(f"grep -r timeout '{m.mnt}' | cat > /dev/null", shell=True)
        shown = live(sessions, m.mnt, appends) if appends else ""
        grep.wait()
        walk = time.perf_counter() - t
        done.set()
        prober.join()
        sampler.join()
    finally:
        done.set()
        m.stop()
    kids = [kib for pid, kib in peaks.items() if pid != daemon]
    shown += f"; anonymous memory at most: daemon {peaks.get(daemon, 0) >> 10} MiB"
    shown += f", each worker at most {max(kids, default=0) >> 10} MiB"
    took.sort()
    over = sum(x > 50 for x in took)
    return (
        f"workers {workers if workers is not None else 'default'}: walk {walk:.1f} s; "
        f"{len(took)} probes: median {statistics.median(took):.2f} ms, "
        f"p99 {took[int(len(took) * 0.99)]:.1f} ms, max {took[-1]:.1f} ms, over 50 ms: {over}"
        + shown
    )


def sample(daemon: int, peaks: dict[int, int], done: threading.Event) -> None:
    """The most anonymous memory (KiB, ``RssAnon``: not the store's pages that SQLite maps,
    which the kernel may take back) the daemon and each of its children (the render
    workers) held, looked at four times a second until ``done``."""
    while not done.wait(0.25):
        kids = subprocess.run(["pgrep", "-P", str(daemon)], capture_output=True, text=True)
        for pid in [daemon, *map(int, kids.stdout.split())]:
            with contextlib.suppress(OSError, StopIteration):
                status = Path(f"/proc/{pid}/status").read_text().splitlines()
                kib = int(next(x for x in status if x.startswith("RssAnon:")).split()[1])
                peaks[pid] = max(peaks.get(pid, 0), kib)


def live(sessions: Path, mnt: Path, appends: int) -> str:
    """Pi appends ``appends`` messages to the session of :data:`LIVE` during the walk; how
    long until the mount showed each as ``current``."""
    real = next((sessions / LIVE).glob("*.jsonl"))
    folder = mnt / LIVE.strip("-") / real.stem  # (the stem: a link to the session's name)
    os.listdir(folder / "leaves")  # entered: parsed (or taken from a worker) before Pi writes
    lat = sorted(pi_appends(folder, real, appends))
    return (
        f"; Pi's {len(lat)} appends shown after: median {statistics.median(lat):.1f} ms, "
        f"max {lat[-1]:.1f} ms, over 100 ms: {sum(x > 100 for x in lat)}"
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("sessions", type=Path)
    p.add_argument("--workers", type=int, help="the daemon's --workers (default: its own)")
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--pi", type=int, default=0, help="Pi appends this many messages meanwhile")
    p.add_argument("--stalls", action="store_true", help="where the daemon's loop was held")
    args = p.parse_args()
    why = b.pi_missing() if args.pi else None
    if why is not None:
        raise SystemExit(f"bench_probe --pi: {why}")
    with tempfile.TemporaryDirectory(dir="/var/tmp", prefix="pisessfs-probe-") as tmp:
        sessions = args.sessions
        if args.pi:  # (Pi writes to a copy, with a session of its own)
            sessions = Path(tmp) / "sessions"
            shutil.copytree(args.sessions, sessions)
            recipe = next((b.EXAMPLES / f"--{RECIPE}--").glob("2026-03-02T09-14*.jsonl"))
            (sessions / LIVE).mkdir()
            shutil.copy(recipe, sessions / LIVE / recipe.name)
        held = Path(tmp) / "stalls.txt"
        if args.stalls:  # (the daemon's own command, with the sampler started first)
            here = str(Path(__file__).resolve().parent)
            run = f"import sys; sys.path.insert(0, {here!r}); import stalls; "
            run += f"stalls.start({str(held)!r}); from pisessfs.cli import main; sys.exit(main())"
            b.PISESSFS[:] = [b.PYTHON, "-c", run]
        for _ in range(args.runs):
            print(one(sessions, args.workers, Path(tmp), args.pi), flush=True)
            for record in stalls.summary(str(held)) if args.stalls else []:
                print(record, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
