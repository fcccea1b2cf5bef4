"""Render workers: processes that render and index every session into the store from the
mount's start, so that a first walk is answered from there. What a mount with them shows is
what a mount without them shows, byte for byte: every name, link, attribute, file, usage sum
and search result; a walk that comes first takes the sessions no worker started; a worker
that dies is replaced and its session left to the mount.

Real mounts and real worker processes; fault injection (``worker.FAULT_ENV``) only to kill
or slow a worker.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pisessfs import worker as worker_mod
from pisessfs.naming import file_ident
from pisessfs.search import SearchIndex
from pisessfs.sessions import Store
from pisessfs.store import DiskStore, mark_for
from pisessfs.view import View
from pisessfs.workers import INDEX, RENDER, Config, Pass, Pool

from .conftest import Mount, mounted, wait_for
from .test_disk import FROM_DISK, finished, parsed, seen, walked
from .test_lifecycle_status import status_json

#: The log's line at the passes' end: sessions, and how many the render pass left to the mount
DONE = re.compile(
    r"workers: (\d+) sessions: rendered in .* s \(\d+ held, (\d+) left to the mount\), indexed in"
)


def workers_done(m: Mount) -> bool:
    """The log's line that both passes ended."""
    return DONE.search(m.log_text()) is not None


def wait_done(m: Mount, timeout: float = 60) -> None:
    """Wait for both passes to end; fail with where they are and the mount's log."""
    try:
        wait_for(lambda: workers_done(m), timeout, "the workers' passes")
    except AssertionError as err:
        said = status_json(os.environ.copy()).get(str(m.path), {}).get("workers")
        raise AssertionError(f"{err}: {said}\n{m.log_text()[-6000:]}") from None


def found(top: Path, query: str) -> tuple[str, set[str]]:
    """A query's page's first line and where its results lead."""
    page = (top / "search" / f"{query}.md").read_text()
    folder = top / "search" / query
    return page.splitlines()[0], {os.readlink(folder / n) for n in os.listdir(folder)}


@pytest.mark.fuse
def test_a_first_walk_with_workers_is_the_walk_without_them(corpus: Path, tmp_path: Path) -> None:
    """Every session rendered by the workers, none by the daemon; what the walk meets, the
    search results and the usage sums are those of a mount that renders for itself."""
    with mounted(corpus, "--disk-cache", str(tmp_path / "c"), "--debug", "--workers", "2") as m:
        wait_done(m)
        got = seen(m.path)
        searched = {q: found(m.path, q) for q in ("needle", "user", "the tool")}
    log = finished(m)
    sessions = list(corpus.rglob("*.jsonl"))
    said = DONE.search(log)
    assert said is not None and int(said.group(1)) == len(sessions)
    assert parsed(log) == []  # the daemon parsed none: each came from the store
    assert log.count(FROM_DISK) == len(sessions)

    with mounted(corpus, "--disk-cache", "off") as alone:
        assert "workers:" not in alone.log_text()  # (none without a cache folder)
        fresh = seen(alone.path)
        searched_alone = {q: found(alone.path, q) for q in searched}
    assert got == fresh  # hostile ids, forks' links, conversation.md, usage/ too
    assert searched == searched_alone
    assert searched["needle"][1]  # (it finds something)


def backwards(top: Path) -> dict[str, dict[str, tuple[object, ...]]]:
    """What a walk meets in each session folder, the last one a walk meets first (a walk
    ahead of the workers, which take them in order)."""
    folders = [p for p in sorted(top.glob("*/*")) if p.is_dir() and not p.is_symlink()]
    return {str(f.relative_to(top)): seen(f) for f in reversed(folders)}


@pytest.mark.fuse
def test_a_walk_ahead_of_the_workers_takes_what_they_did_not_start(
    corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Slow workers, a walk from the last session: the walk parses the sessions no worker
    started (each once: a worker skips one the mount took) and waits for the one a worker
    renders; it meets what a mount without workers shows."""
    monkeypatch.setenv(worker_mod.FAULT_ENV, "slow:0.5")
    with mounted(corpus, "--disk-cache", str(tmp_path / "c"), "--debug", "--workers", "1") as m:
        got = backwards(m.path)
        wait_done(m)
    log = finished(m)
    mine = parsed(log)
    assert mine, "the walk parsed none itself"
    assert len(set(mine)) == len(mine)  # none twice
    said = DONE.search(log)
    assert said is not None and int(said.group(2)) == len(mine), log
    assert log.count(FROM_DISK) == len(list(corpus.rglob("*.jsonl"))) - len(mine)
    with mounted(corpus, "--disk-cache", "off") as alone:
        assert got == backwards(alone.path)


@pytest.mark.fuse
def test_a_worker_that_dies_is_replaced_and_its_session_left_to_the_mount(
    corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    victim = next(p for p in sorted(corpus.rglob("*.jsonl")) if "hostile" not in str(p))
    monkeypatch.setenv(worker_mod.FAULT_ENV, f"exit:{victim.name}")
    with mounted(corpus, "--disk-cache", str(tmp_path / "c"), "--debug", "--workers", "2") as m:
        wait_done(m)
        got = seen(m.path)
    log = finished(m)
    assert log.count("a worker died on") == 2, log  # (once in each pass)
    assert f"a worker died on {victim}; another one starts" in log
    assert [line for line in parsed(log) if str(victim) in line]  # the mount did it
    fresh, _ = walked(corpus, tmp_path / "other", "--disk-cache", "off")
    assert got == fresh


@pytest.mark.fuse
def test_a_session_changed_after_its_worker_rendered_it_shows_the_change(
    sessions: Path, tmp_path: Path
) -> None:
    """An entry a worker made is of the file as it was: a line appended since shows, and is
    found."""
    with mounted(sessions, "--disk-cache", str(tmp_path / "c"), "--workers", "2") as m:
        wait_done(m)
        path = next(p for p in sessions.rglob("*.jsonl") if p.stat().st_size < 1 << 20)
        last = [line for line in path.read_text().splitlines() if '"id"' in line][-1]
        parent = re.search(r'"id":"([^"]+)"', last.replace(" ", ""))
        assert parent is not None
        line = json.dumps(
            {
                "type": "message",
                "id": "zz000001",
                "parentId": parent.group(1),
                "timestamp": "2026-12-05T10:00:00.000Z",
                "message": {"role": "user", "content": "quasimodoword appended"},
            }
        )
        with path.open("a") as f:
            f.write(line + "\n")
        conversations = list(m.path.glob("*/*/conversation.md"))

        def shows() -> bool:
            return any("quasimodoword" in c.read_text() for c in conversations)

        wait_for(shows, 10, "the appended line in conversation.md")
        wait_for(lambda: found(m.path, "quasimodoword")[1] != set(), 10, "the line found")


@pytest.mark.fuse
def test_status_says_where_the_workers_are_and_none_run_when_asked(
    sessions: Path, tmp_path: Path
) -> None:
    with mounted(sessions, "--disk-cache", str(tmp_path / "c"), "--workers", "2") as m:
        wait_done(m)
        out = subprocess.run(
            [sys.executable, "-m", "pisessfs.cli", "status"], capture_output=True, text=True
        ).stdout
    n = len(list(sessions.rglob("*.jsonl")))
    assert re.search(rf"workers +done: {n} sessions: rendered in", out), out
    assert f"search     {n} of {n} sessions indexed" in out, out  # (no query asked yet)
    with mounted(sessions, "--disk-cache", str(tmp_path / "d"), "--workers", "0") as m:
        assert (m.path / "usage" / "usage.md").read_bytes()  # (it answers)
        assert "workers:" not in m.log_text()


def test_workers_option_is_checked(sessions: Path, tmp_path: Path) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()

    def mount(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "pisessfs.cli", "mount", "--sessions", str(sessions)]
        return subprocess.run([*argv, *args, str(mnt)], capture_output=True, text=True)

    bad = mount("--workers", "-1")
    assert bad.returncode == 2 and "--workers -1: must be a number from 0 to 64" in bad.stderr
    bad = mount("-o", "workers=two")
    assert bad.returncode == 2 and "mount option workers=two: not a number" in bad.stderr


def test_a_pool_renders_and_indexes_every_session_into_the_store(
    sessions: Path, tmp_path: Path
) -> None:
    """The pool without a mount: real worker processes fill a store; the store then holds
    every session as its file is, its index every session, and a claim of a queued session
    takes it out of the queue."""
    store = Store(str(sessions))
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    mark = mark_for(store.files.reach)
    disk = DiskStore(str(cache), 1 << 30, mark, store.root)
    assert disk.open()
    view = View(store)
    view.disk = store.disk = disk
    index: SearchIndex = view.search()
    paths = store.session_paths()[0]
    pool = Pool.of(store, disk, index, 2)
    ended: list[bool] = []
    pool.on_end = lambda: ended.append(True)
    pool.start()
    wait_for(lambda: bool(ended), 60, "the passes")
    assert "rendered in" in pool.said() and "indexed in" in pool.said()
    for path in paths:
        st = store.files.lstat(path)
        assert disk.has(path) and disk.holds(path, file_ident(st)), path
        assert index.indexed()[path].holds(st), path
        assert not pool.covers(path)  # (done: the mount's index does what changes)
    assert pool.claim(paths[0]) is None  # (no pass runs: the mount's)
    disk.close()


def test_status_names_the_passes_in_their_order_whichever_started_first() -> None:
    """A query at the mount's start may start the index pass before the render pass's
    thread is under way: ``status`` and the log's last line still name the render pass
    first (they named them as they started, and the suite's wait for that line ran out)."""
    pool: Pool

    def held(phase: str, paths: list[str]) -> set[str]:  # (all held: no worker is started)
        if phase == RENDER:
            wait_for(lambda: "index" in pool.said(), 10, "the index pass first")
        return set(paths)

    pool = Pool(Config("/", "/", 1, "m"), 1, lambda: ["/a.jsonl"], held, lambda p, f: None)
    pool.want_index()
    pool.start()
    wait_for(lambda: pool.said().startswith("done: "), 10, "the passes' end")
    assert DONE.search("workers: " + pool.said().removeprefix("done: ")), pool.said()


def test_status_says_a_rate_and_the_time_to_go_once_sessions_are_done() -> None:
    """A pass that has done none yet says where it is with no rate (it said "0 a second"
    just after the render pass ended); once some are done, their rate and the time to go."""
    one = Pass(INDEX, ["/a.jsonl", "/b.jsonl", "/c.jsonl"], {"/c.jsonl"})
    said = one.said(3)
    assert said == "indexing 1 of 3 (1 held, 0 left to the mount)", said
    one.started -= 2.0  # (one done in two seconds)
    one.count("/a.jsonl", "done")
    said = one.said(3)
    assert re.fullmatch(
        r"indexing 2 of 3 \(1 held, 0 left to the mount\), "
        r"\d+ a second, about \d+ s to go",
        said,
    ), said


def test_a_worker_answers_each_line_and_refuses_what_is_not_a_path(tmp_path: Path) -> None:
    """The worker's protocol: one JSON line per line asked, in order; a line that is no
    pass or no path is answered, not fatal."""
    root = tmp_path / "s"
    root.mkdir()
    cache = tmp_path / "c"
    cache.mkdir(mode=0o700)
    mark = mark_for(Store(str(root)).files.reach)
    cfg = Config(str(root), str(cache), 64, mark)
    odd = os.fsencode(str(root)) + b"/\xff.jsonl"  # (gone, and no UTF-8 holds its name)
    asked = (
        b"render zz\nfly 2f\n"
        + f"{INDEX} {os.fsencode(str(root / 'x.jsonl')).hex()}\n".encode()
        + f"{RENDER} {odd.hex()}\n".encode()
    )
    out = subprocess.run(cfg.argv(), input=asked, capture_output=True, timeout=60)
    lines = out.stdout.splitlines()
    assert out.returncode == 0, out.stderr
    assert len(lines) == 4
    assert b'"not a path"' in lines[0] and b"no pass" in lines[1] and b'"done":false' in lines[2]
    said = json.loads(lines[3])  # (a reason that names that path, escaped)
    assert said["done"] is False and "\\udcff.jsonl" in said["why"], said
    other = subprocess.run(
        Config(str(root), str(cache), 64, "other code").argv(), capture_output=True, timeout=60
    )
    assert other.returncode == 2 and b"other code than the mount's" in other.stderr


@pytest.mark.fuse
def test_a_query_during_the_render_pass_starts_the_index_pass_and_answers_meanwhile(
    corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Slow workers: a query right after the mount answers from what is indexed (none yet,
    its page says of how many), starts the index pass beside the render pass, and once the
    workers are done finds what a mount without workers finds."""
    monkeypatch.setenv(worker_mod.FAULT_ENV, "slow:0.2")
    n = len(list(corpus.rglob("*.jsonl")))
    with mounted(corpus, "--disk-cache", str(tmp_path / "c"), "--workers", "1") as m:
        first, _ = found(m.path, "needle")
        assert re.fullmatch(rf"# needle: \d+ matches? in \d+ of {n} sessions", first), first

        def both() -> bool:
            said = status_json(os.environ.copy())[str(m.path)]["workers"] or ""
            return "rendering" in said and "indexing" in said

        wait_for(both, 10, "the index pass beside the render pass")
        wait_done(m)
        after = found(m.path, "needle")
        log = m.log_text()
    assert after[0].endswith(f"in {n} of {n} sessions")
    assert "search: " not in log.replace("search: the index", "")  # (no build of its own)
    with mounted(corpus, "--disk-cache", "off") as alone:
        assert found(alone.path, "needle") == after
