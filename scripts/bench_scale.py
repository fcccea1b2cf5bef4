#!/usr/bin/env python3
"""A year of sessions: grep -r and rg over the mount against the raw JSONL folder.

Generates (or reuses, with ``--corpus DIR``) a corpus of about ``--sessions`` session files
and ``--mb`` MiB in ``--projects`` project folders, with Pi's shapes (scripts/bench_gen.py's
generator: long tool outputs, images, edits that branch, compactions, labels), two of them
``--big-mb`` MiB each. Then, in one run, each figure the median of ``--runs``:

- ``grep -r WORD`` and ``rg WORD`` over the mount against the same over the raw folder, warm
  (one untimed run first) and cold (page cache dropped and, for the mount, a fresh daemon
  with an empty disk cache: a first mount ever);
- the same cold walk by a fresh daemon on the disk cache the one before saved (every mount
  after the first: after a reboot);
- the first walk of a fresh daemon started with ``--warm``, once its warm-up is over (page
  cache dropped), against the raw folder's cold run, with how long the warm-up took;
- hits: matching lines over the mount (and in conversation.md alone) per matching entry of
  the raw files; the bytes a walk reads against the raw bytes;
- the daemon's memory after the walks; mount start, and the first ``ls -l`` of a project of
  100 sessions on a fresh mount.

    scripts/bench_scale.py [--quick] [--corpus DIR] [--sessions N] [--mb N] [--json FILE]

Targets (DESIGN.md): warm grep -r <= 1.5x, rg <= 2x their raw runs; cold on a later mount
<= 2x / <= 3x; cold on the very first mount <= 4x; each message once.
Cold runs need root (drop_caches).
"""

from __future__ import annotations

import argparse
import functools
import os
import random
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_gen  # the session generator
import benchlib as b  # the shared helpers: mounts, timing, medians

#: DESIGN.md's targets, against the raw JSONL folder: (warm, cold on a later mount), per
#: tool; cold on the very first mount, for both.
TARGETS = {"grep": (1.5, 2.0), "rg": (2.0, 3.0)}
TARGET_FIRST = 4.0
MARKER = "corpus.json"  # what a generated corpus was made with
#: Which generator made a corpus: one made by another is not reused (2: non-ASCII text about
#: as often as in real sessions, see ``bench_gen.FOREIGN_SHARE``).
GENERATOR = 2


def generate(root: Path, sessions: int, mb: int, projects: int, big_mb: int) -> dict[str, Any]:
    """The corpus: two big sessions, the rest sized so the whole is about ``mb`` MiB
    (sizes spread like a real folder: most small, some large)."""
    rng = random.Random(2026)
    rest = max(mb - 2 * big_mb, sessions // 10) << 20
    weights = [rng.paretovariate(1.3) for _ in range(sessions - 2)]
    scale = rest / sum(weights)
    sizes = [big_mb << 20, big_mb << 20] + [max(4096, int(w * scale)) for w in weights]
    t0 = time.perf_counter()
    for i, size in enumerate(sizes):
        folder = root / f"--home-ana-src-project-{i % projects:02d}--"
        folder.mkdir(parents=True, exist_ok=True)
        bench_gen.generate_session(folder / f"2026-{i:05d}.jsonl", size, seed=i)
        if i % 500 == 0:
            b.log(f"corpus: {i}/{len(sizes)} sessions, {time.perf_counter() - t0:.0f} s")
    facts: dict[str, Any] = {"sessions": len(sizes), "projects": projects, "bytes": _du(root)}
    facts["non_ascii_lines"] = round(_non_ascii(root), 3)
    facts["generator"] = GENERATOR
    (root.parent / MARKER).write_bytes(orjson.dumps(facts))
    return facts


def _du(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*.jsonl"))


def _non_ascii(root: Path) -> float:
    """The share of lines that are not ASCII (real Pi sessions: about 6%)."""
    lines = other = 0
    for p in root.rglob("*.jsonl"):
        with p.open("rb") as f:
            for line in f:
                lines += 1
                other += not line.isascii()
    return other / max(1, lines)


def timed(argv: list[str]) -> float:
    return b.run_timed(argv)[0]


def walks(tool: str, word: str, top: Path) -> list[str]:
    if tool == "grep":
        return ["grep", "-r", word, str(top)]
    return ["rg", "--no-messages", "-uu", word, str(top)]


def warm(tool: str, word: str, top: Path, runs: int) -> list[float]:
    timed(walks(tool, word, top))  # untimed: caches filled
    return [timed(walks(tool, word, top)) for _ in range(runs)]


def cold_raw(tool: str, word: str, top: Path, runs: int) -> list[float] | str:
    out = []
    for _ in range(runs):
        why = b.drop_caches()
        if why:
            return why
        out.append(timed(walks(tool, word, top)))
    return out


def cold_mount(
    tool: str, word: str, m: b.Mount, runs: int, *, disk: Path, kept: bool
) -> tuple[list[float] | str, str]:
    """Cold walks by fresh daemons: with an empty disk cache, or (``kept``) with the one the
    daemon before saved at its unmount; and what the last one's render workers said."""
    got = fresh_walks(tool, word, m, runs, warm=False, disk=None if kept else disk)
    return (got, "") if isinstance(got, str) else got


@functools.cache
def has_workers() -> bool:
    """Whether the pisessfs measured has render workers (an older one has not: nothing of
    theirs is waited for)."""
    helped = subprocess.run([*b.PISESSFS, "mount", "--help"], capture_output=True, text=True)
    return "--workers" in helped.stdout


def fresh_walks(
    tool: str, word: str, m: b.Mount, runs: int, *, warm: bool, disk: Path | None
) -> tuple[list[float], str] | str:
    """The first walk of a fresh daemon, the page cache dropped, ``runs`` times; with
    ``warm``, a daemon started with ``--warm``, walked once its log says the warm-up is over
    (and what the last warm-up said). ``disk``: the disk cache emptied before each start.
    A daemon with render workers is stopped only once they are done (what the last ones
    said, when not ``warm``): the next mount's cache then holds every session and its index,
    as a mount that stayed up leaves it."""
    out, said, plain = [], "", m.extra
    m.extra = [*plain, "--warm"] if warm else plain
    try:
        for _ in range(runs):
            m.stop()  # (it saves what it made to the disk cache as it goes)
            if disk is not None:
                shutil.rmtree(disk, ignore_errors=True)
            since = m.logfile.stat().st_size if m.logfile.exists() else 0
            m.start(timeout=120)
            said = _warm_up(m, since) if warm else ""
            why = b.drop_caches()
            if why:
                return why
            out.append(timed(walks(tool, word, m.mnt)))
            if has_workers() and not warm:
                said = _logged(m, since, "workers: ", "indexed in")
    finally:
        m.extra = plain
    return out, said


def _logged(m: b.Mount, since: int, *words: str, timeout: float = 900) -> str:
    """What follows the first of ``words`` on the first line of the daemon's log after byte
    ``since`` that holds them all, once there is one."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = m.logfile.read_bytes()[since:].decode(errors="replace")
        line = next((ln for ln in text.splitlines() if all(w in ln for w in words)), None)
        if line is not None:
            return line.partition(words[0])[2]
        time.sleep(0.5)
    raise RuntimeError(f"no line with {words} in {m.logfile} after {timeout:.0f} s")


def _warm_up(m: b.Mount, since: int) -> str:
    """The daemon's "warm-up: ..." line after byte ``since`` of its log, once the daemon is
    done with it (it drops what is past the cap ``--cache-idle`` seconds later)."""
    said = _logged(m, since, "warm-up", timeout=3600)
    time.sleep(6)  # (the default --cache-idle, and a little)
    return said.lstrip(": ")


def hits(word: str, raw: Path, mnt: Path) -> dict[str, int]:
    """Matching lines over the mount (all, and in conversation.md) and matching raw lines
    (one per entry: a JSONL line is an entry)."""
    out = subprocess.run(["grep", "-rc", word, str(mnt)], capture_output=True, text=True).stdout
    total = conv = 0
    for line in out.splitlines():
        path, _, n = line.rpartition(":")
        total += int(n)
        conv += int(n) if path.endswith("/conversation.md") else 0
    raw_out = subprocess.run(["grep", "-rc", word, str(raw)], capture_output=True, text=True)
    entries = sum(int(ln.rpartition(":")[2]) for ln in raw_out.stdout.splitlines())
    return {"mount_lines": total, "conversation_lines": conv, "raw_entries": entries}


def walked_bytes(mnt: Path) -> tuple[int, int]:
    """Files and bytes a walk that does not follow links reads."""
    files = size = 0
    for dirpath, _dirs, names in os.walk(mnt):
        for n in names:
            st = os.lstat(os.path.join(dirpath, n))
            if not os.path.islink(os.path.join(dirpath, n)):
                files, size = files + 1, size + st.st_size
    return files, size


def vocabulary(raw: Path, n: int) -> tuple[list[str], list[str]]:
    """``n`` common and ``n`` rare words of the corpus (counted in a sample of its files):
    each query of the search figures asks for words no query before asked for (a query's
    results are kept until the index changes)."""
    counts: dict[str, int] = {}
    files = sorted(raw.rglob("*.jsonl"))
    for f in random.Random(7).sample(files, min(200, len(files))):
        for w in re.findall(rb"[A-Za-z]{5,12}", f.read_bytes()[: 1 << 20]):
            word = w.decode().lower()
            counts[word] = counts.get(word, 0) + 1
    ranked = sorted(counts, key=lambda w: (-counts[w], w))
    common = ranked[10 : 10 + n]  # (past the JSON keys every line has)
    rare = [w for w in ranked if 2 <= counts[w] <= 4][:n]
    return common, rare


def search_figures(m: b.Mount, raw: Path, disk: Path, runs: int) -> dict[str, Any]:
    """The index's first build (from the first query to every session indexed), its size,
    and the latency of ``ls search/<Q>/`` and ``cat search/<Q>.md`` for one- and two-word
    queries of common and rare words, against ``rg -i -w`` of the first word on the raw
    folder, warm."""

    def index_bytes() -> int:
        """The pages of the index's tables (SQLite's dbstat), read beside the daemon."""
        db = sqlite3.connect(f"file:{disk / 'pisessfs.sqlite'}?mode=ro", uri=True)
        try:
            (n,) = db.execute("SELECT sum(pgsize) FROM dbstat WHERE name LIKE 'search%'").fetchone()
        finally:
            db.close()
        return int(n or 0)

    page = m.mnt / "search" / "pisessfsbenchword.md"
    started = time.monotonic()
    first = page.read_text().splitlines()[0]
    while True:
        said = re.search(r"in ([\d,]+) of ([\d,]+) sessions", first)
        if said and said.group(1) == said.group(2):
            break
        time.sleep(0.5)
        first = page.read_text().splitlines()[0]
    out: dict[str, Any] = {"build_s": time.monotonic() - started, "sessions": said.group(2)}
    out["index_bytes"] = index_bytes()
    common, rare = vocabulary(raw, 6 * runs)
    # (each query twice as many times: once for ls, once, with other words, for cat)
    queries = {
        "one common word": [[w] for w in common[: 2 * runs]],
        "one rare word": [[w] for w in rare[: 2 * runs]],
        "two common words": [common[2 * runs + 2 * i :][:2] for i in range(2 * runs)],
        "two rare words": [rare[2 * runs + 2 * i :][:2] for i in range(2 * runs)],
    }
    for what, asked in queries.items():
        ls, cat, rg = [], [], []
        for i, words in enumerate(asked):
            q = " ".join(words)
            if i % 2 == 0:
                ls.append(timed(["ls", str(m.mnt / "search" / q)]))
                rg.append(timed(["rg", "-i", "-w", "--no-messages", words[0], str(raw)]))
            else:
                cat.append(timed(["cat", str(m.mnt / "search" / f"{q}.md")]))
        out[what] = {"ls": ls, "cat": cat, "rg": rg, "queries": [" ".join(w) for w in asked]}
    return out


def first_listing(raw: Path, tmp: Path, project_sessions: int) -> dict[str, float]:
    """Mount start and the first ``ls -l`` of a project of ``project_sessions`` sessions."""
    src = next(p for p in sorted(raw.iterdir()) if p.is_dir())
    one = tmp / "one" / "sessions"
    (one / src.name).mkdir(parents=True)
    for f in sorted(src.glob("*.jsonl"))[:project_sessions]:
        os.link(f, one / src.name / f.name)
    m = b.Mount("mount", one, tmp / "one" / "mnt", tmp / "one.log")
    start = m.start()
    try:
        project = next(p for p in m.mnt.iterdir())
        t = timed(["ls", "-l", str(project)])
        return {"mount_start_s": start, "first_ls_s": t, "sessions": project_sessions}
    finally:
        m.stop()


def corpus_of(args: argparse.Namespace, tmp: Path) -> tuple[Path, dict[str, Any]]:
    """The raw sessions folder, generated or reused, and what it was made with."""
    corpus = Path(args.corpus) if args.corpus else tmp / "corpus"
    raw = corpus / "sessions"
    if (corpus / MARKER).exists():
        facts = orjson.loads((corpus / MARKER).read_bytes())
        if facts.get("generator") != GENERATOR:
            raise SystemExit(
                f"{corpus}: made by another version of the generator: remove it, or name "
                "another --corpus folder"
            )
        b.log(f"corpus: reusing {raw} ({facts['sessions']} sessions)")
    else:
        b.log(f"corpus: generating {args.sessions} sessions, {args.mb} MiB into {raw}")
        facts = generate(raw, args.sessions, args.mb, args.projects, args.big_mb)
    return raw, facts


def run(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    raw, facts = corpus_of(args, tmp)
    result: dict[str, Any] = {"corpus": facts, "word": args.word, "runs": args.runs}
    if args.pisessfs:  # (an installed command runs its own copy of the package)
        result["code"] = {"installed": args.pisessfs}
    else:
        result["code"] = b.snapshot_code(tmp)  # cold runs start daemons: all of one version
    m = b.Mount("mount", raw, tmp / "mnt", tmp / "mount.log")
    disk = tmp / "disk-cache"
    m.extra = ["--disk-cache", str(disk)]
    if args.workers is not None and has_workers():
        m.extra += ["--workers", str(args.workers)]
    result["workers"] = args.workers if has_workers() else "none (this pisessfs has no workers)"
    if args.cache_mb:
        m.extra += ["--cache-mb", str(args.cache_mb)]
        result["cache_mb"] = args.cache_mb
    result["mount_start_s"] = m.start(timeout=120)
    try:
        b.log("first walk of the mount (renders every conversation.md)")
        result["first_grep_s"] = timed(walks("grep", args.word, m.mnt))
        if has_workers():
            b.log("the render workers' passes")
            result["first_workers"] = _logged(m, 0, "workers: ", "indexed in")
        for tool in ("grep", "rg"):
            b.log(f"{tool}: warm")
            result[f"{tool}_warm_raw"] = warm(tool, args.word, raw, args.runs)
            result[f"{tool}_warm_mount"] = warm(tool, args.word, m.mnt, args.runs)
        result["memory_kb"] = b.vm_kb(m.pid)
        if not args.no_search:
            b.log("search: the index's first build, then queries")
            result["search"] = search_figures(m, raw, disk, args.runs)
            b.log("grep -r: warm, once the index is built")
            result["grep_warm_indexed"] = warm("grep", args.word, m.mnt, args.runs)
        result["hits"] = hits(args.word, raw, m.mnt)
        result["walk_files"], result["walk_bytes"] = walked_bytes(m.mnt)
        if not args.no_cold:
            cold_figures(args, m, raw, disk, result)
    finally:
        m.stop()
    result["listing"] = first_listing(raw, tmp, 100)
    return result


def cold_figures(
    args: argparse.Namespace, m: b.Mount, raw: Path, disk: Path, result: dict[str, Any]
) -> None:
    """The cold walks: raw, a first mount, a later one, one after --warm (into ``result``)."""
    for tool in ("grep", "rg"):
        b.log(f"{tool}: cold")
        result[f"{tool}_cold_raw"] = cold_raw(tool, args.word, raw, args.cold_runs)
        for kept, kind in ((False, "cold"), (True, "disk")):
            if kept:
                b.log(f"{tool}: cold, on the disk cache the mount before saved")
            result[f"{tool}_{kind}_mount"], said = cold_mount(
                tool, args.word, m, args.cold_runs, disk=disk, kept=kept
            )
            if said:
                result[f"{tool}_{kind}_workers"] = said
        result[f"{tool}_disk_raw"] = result[f"{tool}_cold_raw"]
    for tool in ("grep", "rg"):
        b.log(f"{tool}: first walk after --warm")
        got = fresh_walks(tool, args.word, m, args.cold_runs, warm=True, disk=disk)
        if isinstance(got, str):
            result[f"{tool}_warmed_mount"] = got
        else:
            result[f"{tool}_warmed_mount"], result["warm_up"] = got


def report(r: dict[str, Any]) -> str:
    c = r["corpus"]
    lines = [
        f"corpus: {c['sessions']} sessions in {c['projects']} projects, "
        f"{c['bytes'] / 2**20:.0f} MiB, {c['non_ascii_lines']:.0%} of lines not ASCII; "
        f"word {r['word']!r}; medians of {r['runs']} runs",
        f"mount start {r['mount_start_s']:.2f} s; first grep -r (renders everything) "
        f"{r['first_grep_s']:.1f} s; daemon --cache-mb {r.get('cache_mb', 'default')}",
        "",
        f"{'what':<26} {'raw s':>8} {'mount s':>8} {'ratio':>6} {'target':>7}",
    ]
    for tool, (warm, later) in TARGETS.items():
        for kind, tgt in (("warm", warm), ("cold", TARGET_FIRST), ("disk", later)):
            raw, mnt = r.get(f"{tool}_{kind}_raw"), r.get(f"{tool}_{kind}_mount")
            if isinstance(raw, str) or isinstance(mnt, str) or raw is None or mnt is None:
                lines.append(f"{tool + ' ' + kind:<26} skipped: {raw if raw else mnt}")
                continue
            a, m = b.median(raw), b.median(mnt)
            mark = "ok" if m / a <= tgt else "MISS"
            said = {"disk": "cold, disk cache"}.get(kind, kind)
            what = f"{tool} -r {said}" if tool == "grep" else f"{tool} {said}"
            each = " ".join(f"{x:.1f}" for x in mnt)  # a median hides a slow first run
            lines.append(
                f"{what:<26} {a:8.2f} {m:8.2f} {m / a:6.2f} {tgt:6.1f}x {mark:<4} runs {each}"
            )
    for tool in ("grep", "rg"):
        raw, warmed = r.get(f"{tool}_cold_raw"), r.get(f"{tool}_warmed_mount")
        if isinstance(raw, list) and isinstance(warmed, list):
            a, m = b.median(raw), b.median(warmed)
            what = f"{tool}{' -r' if tool == 'grep' else ''} after --warm"
            each = " ".join(f"{x:.1f}" for x in warmed)
            lines.append(f"{what:<26} {a:8.2f} {m:8.2f} {m / a:6.2f}  (cold raw) runs {each}")
    if "warm_up" in r:
        lines.append(f"the last --warm daemon's warm-up: {r['warm_up']}")
    lines.append(f"render workers: {r.get('workers') or 'one per core'}")
    for key in ("first_workers", "grep_cold_workers", "rg_cold_workers"):
        if key in r:
            lines.append(f"  {key.replace('_', ' ')}: {r[key]}")
    if "search" in r:
        lines += ["", *search_report(r)]
    h = r["hits"]
    per = h["conversation_lines"] / max(1, h["raw_entries"])
    lines += [
        "",
        f"hits: {h['mount_lines']} matching lines over the mount, {h['conversation_lines']} in "
        f"conversation.md, for {h['raw_entries']} matching entries ({per:.2f} per entry; a "
        "message may hold the word on several lines)",
        f"a walk reads {r['walk_files']} files, {r['walk_bytes'] / 2**20:.0f} MiB "
        f"({r['walk_bytes'] / c['bytes']:.2f}x the raw bytes)",
        f"daemon memory after the walks: RSS {r['memory_kb']['VmRSS'] / 1024:.0f} MiB, "
        f"peak {r['memory_kb']['VmHWM'] / 1024:.0f} MiB",
        f"fresh mount of {r['listing']['sessions']} sessions: start "
        f"{r['listing']['mount_start_s']:.2f} s, first ls -l {r['listing']['first_ls_s']:.2f} s",
    ]
    return "\n".join(lines)


def search_report(r: dict[str, Any]) -> list[str]:
    s, c = r["search"], r["corpus"]
    lines = [
        f"search: first build of the index {s['build_s']:.1f} s for {s['sessions']} sessions "
        f"(target <= 60 s); index {s['index_bytes'] / 2**20:.0f} MiB "
        f"({s['index_bytes'] / c['bytes']:.2f}x the raw bytes; target <= 0.5x)",
        f"{'query':<18} {'ls med':>7} {'p95':>6} {'cat med':>8} {'p95':>6} {'rg -i -w':>9} "
        f"{'rg/ls':>6}  (ms; target: <= 50 ms, >= 5x faster than rg)",
    ]
    for what in ("one common word", "one rare word", "two common words", "two rare words"):
        q = s[what]
        ls, cat, rg = (b.median(q[k]) * 1000 for k in ("ls", "cat", "rg"))
        p95 = {k: sorted(q[k])[max(0, round(0.95 * len(q[k])) - 1)] * 1000 for k in ("ls", "cat")}
        lines.append(
            f"{what:<18} {ls:7.1f} {p95['ls']:6.1f} {cat:8.1f} {p95['cat']:6.1f} {rg:9.1f} "
            f"{rg / ls:6.1f}"
        )
    if "grep_warm_indexed" in r:
        before, after = b.median(r["grep_warm_mount"]), b.median(r["grep_warm_indexed"])
        lines.append(f"warm grep -r before the index {before:.2f} s, after {after:.2f} s")
    return lines


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="scripts/bench_scale.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="500 sessions, 100 MiB, 2 runs")
    p.add_argument("--corpus", metavar="DIR", help="generate into (or reuse) DIR")
    p.add_argument("--sessions", type=int, help="session files (default 5000)")
    p.add_argument("--mb", type=int, help="total MiB (default 1024)")
    p.add_argument("--big-mb", type=int, help="size of each of the two big sessions (default 100)")
    p.add_argument("--projects", type=int, default=50)
    p.add_argument("--runs", type=int, help="warm runs per figure (default 5)")
    p.add_argument("--cold-runs", type=int, help="cold runs per figure (default 3)")
    p.add_argument("--word", default="timeout")
    p.add_argument("--cache-mb", type=int, help="the daemon's --cache-mb (default: its own)")
    p.add_argument("--no-cold", action="store_true")
    p.add_argument("--no-search", action="store_true", help="no search figures")
    p.add_argument(
        "--workers", type=int, metavar="N", help="the daemon's --workers (default: its own)"
    )
    p.add_argument("--json", metavar="FILE")
    p.add_argument("--tmp", metavar="DIR")
    p.add_argument(
        "--pisessfs",
        metavar="CMD",
        help="the pisessfs command to mount with (default: this interpreter's package; "
        "~/.local/bin/pisessfs measures what scripts/install installed)",
    )
    a = p.parse_args(argv)
    if a.pisessfs:
        b.PISESSFS[:] = [os.path.expanduser(a.pisessfs)]
    a.sessions = a.sessions or (500 if a.quick else 5000)
    a.mb = a.mb or (100 if a.quick else 1024)
    a.big_mb = a.big_mb or (10 if a.quick else 100)
    a.runs = a.runs or (2 if a.quick else 5)
    a.cold_runs = a.cold_runs or (1 if a.quick else 3)
    for tool in ("grep", "rg", "fusermount3"):
        if shutil.which(tool) is None:
            p.error(f"{tool} not found (run ./scripts/setup)")
    return a


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.tmp, prefix="pisessfs-scale-") as tmp:
        try:
            result = run(args, Path(tmp))
        finally:
            b.stop_all()
    print(report(result))
    if args.json:
        Path(args.json).write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
