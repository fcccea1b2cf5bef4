#!/usr/bin/env python3
"""A later mount's cold walk, A/B: two packages (each through a command that runs it), each
on a cache folder its own first mount filled, walked cold in turns, beside the raw JSONL.

    scripts/bench_later.py SESSIONS A_CMD B_CMD [--tool grep|rg] [--rounds N] [--keep]

Each command is a ``pisessfs``, e.g. a wrapper that runs a commit's package (performance.md,
"How to reproduce"). For each: a fresh daemon on ``/var/tmp/bench-later-<n>`` walks SESSIONS
once and waits for its workers' passes (the next mount then reads what it saved, as any
later mount does), then unmounts. Then, ``--rounds`` times: the raw folder, A and B, each
walked by a fresh daemon after the page cache is dropped, output piped. Prints each run and
the medians, and each median's ratio to the raw one. ``--keep``: the cache folders are
filled already (by the same code). Needs root (drop_caches).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_scale as s  # the walks, timed, and the daemon's log lines
import benchlib as b  # mounts, dropping caches

WORD = "timeout"


def mount_of(sessions: Path, cache: Path, tmp: Path, n: int) -> b.Mount:
    """A mount of SESSIONS on cache folder ``cache`` (its daemon started by ``start``)."""
    m = b.Mount("mount", sessions, tmp / f"mnt-{n}", tmp / f"log-{n}")
    m.extra = ["--disk-cache", str(cache)]
    return m


def walked(m: b.Mount, cmd: str, tool: str, fresh: bool) -> float:
    """One cold walk by a fresh daemon of ``cmd`` (bench_scale's), then unmounted; ``fresh``:
    on its cache folder emptied first (a first mount, which fills it: its workers' passes
    are waited for)."""
    b.PISESSFS[:] = [cmd]
    disk = Path(m.extra[1]) if fresh else None
    try:
        got = s.fresh_walks(tool, WORD, m, 1, warm=False, disk=disk)
    finally:
        m.stop()
    if isinstance(got, str):
        raise SystemExit(got)
    return got[0][0]


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("sessions", type=Path)
    p.add_argument("a", help="the pisessfs command of A")
    p.add_argument("b", help="the pisessfs command of B")
    p.add_argument("--tool", choices=("grep", "rg"), default="grep")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--keep", action="store_true", help="the cache folders are filled already")
    args = p.parse_args()
    cmds = {"A": args.a, "B": args.b}
    runs: dict[str, list[float]] = {"raw": [], "A": [], "B": []}
    with tempfile.TemporaryDirectory() as tmp:
        mounts = {
            k: mount_of(args.sessions, Path(f"/var/tmp/bench-later-{k}"), Path(tmp), i)
            for i, k in enumerate(cmds)
        }
        try:
            if not args.keep:
                for k, c in cmds.items():
                    b.log(f"{k}: the first mount fills its cache folder")
                    walked(mounts[k], c, "grep", fresh=True)
            for r in range(args.rounds):
                why = b.drop_caches()
                if why:
                    raise SystemExit(why)
                runs["raw"].append(s.timed(s.walks(args.tool, WORD, args.sessions)))
                for k, c in cmds.items():
                    runs[k].append(walked(mounts[k], c, args.tool, fresh=False))
                b.log(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in runs.items()))
        finally:
            b.stop_all()
    raw = statistics.median(runs["raw"])
    for k, v in runs.items():
        med = statistics.median(v)
        print(f"{k:>4} {args.tool} cold, later mount: median {med:.2f} s ({med / raw:.2f}x raw); "
              f"runs {' '.join(f'{x:.2f}' for x in v)}")  # fmt: skip


if __name__ == "__main__":
    main()
