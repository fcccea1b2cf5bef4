"""A walk meets each message once (DESIGN.md, "One copy for walkers").

Real mounts of every fixture, walked by ``os.walk``, ``grep -r``, ``rg``, ``find``, ``du`` and
``cp -r``: the full text of every conversation entry is in ``conversation.md`` once, and
nowhere else a walk goes; the branch folders and files are still there through their links.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import stat
import subprocess
from collections import Counter
from pathlib import Path

import orjson
import pytest

from tests import damaged
from tests.conftest import (
    FORK,
    KANBAN,
    RECIPE,
    Mount,
    drop_caches,
    fixture_files,
    mounted,
    need,
    need_open_flags,
    pi,
    wait_for,
)
from tests.test_lifecycle_status import status_json

pytestmark = [pytest.mark.fuse, pytest.mark.pi]  # real mounts and the real Pi (conftest: tiers)

LONG = 120  # bytes: a message this long is unlikely to be quoted by another


def walked(top: Path) -> dict[Path, bytes]:
    """Every regular file a walk that does not follow links reads, with its bytes."""
    out: dict[Path, bytes] = {}
    for dirpath, _dirs, files in os.walk(top):
        for name in files:
            p = Path(dirpath) / name
            if not p.is_symlink():
                out[p] = p.read_bytes()
    return out


def message_files(session: Path) -> dict[str, bytes]:
    """Every conversation entry of a session, by id: its message file's bytes (read through
    the entry's own folder in nodes/, where it is the last file)."""
    out: dict[str, bytes] = {}
    for leaf in os.listdir(session / "leaves"):
        if leaf.endswith(".md"):
            continue
        for p in sorted((session / "leaves" / leaf).iterdir()):
            if p.name.endswith(".md"):
                out[os.getxattr(p, "user.pi.id").decode()] = p.read_bytes()
    return out


def session_files(sessions_root: Path) -> set[str]:
    """The real session files a mount of ``sessions_root`` shows, as ``user.pi.file`` says."""
    return {str(f.resolve()) for f in sessions_root.rglob("*.jsonl")}


def shown_files(folders: list[Path]) -> set[str]:
    """The real file of each session folder, by its ``user.pi.file``."""
    return {str(Path(os.getxattr(f, "user.pi.file").decode()).resolve()) for f in folders}


def test_a_walk_meets_every_message_once(mount: Mount, sessions: Path) -> None:
    files = walked(mount.path)
    assert not [p for p in files if p.name.endswith((".png", ".jpg"))]  # only via links
    found = sorted({p.parent for p in files if p.name == "conversation.md"})
    # every session copied (the examples and tests/fixtures), each in one folder the walk meets
    copied = len(list(sessions.rglob("*.jsonl")))
    assert copied == len(fixture_files()), copied
    assert len(found) == copied, (len(found), copied)
    assert shown_files(found) == session_files(sessions)
    checked = 0
    for session in found:
        mine = b"".join(data for p, data in files.items() if p.parent == session)
        bodies = message_files(session)
        times = Counter(bodies.values())  # two entries may say the same (the same read call)
        for eid, body in bodies.items():
            assert body in files[session / "conversation.md"], (session, eid)
            if len(body) >= LONG:
                assert mine.count(body) == times[body], (session, eid)
                checked += 1
        # nothing of the session below its folder: leaves/ and nodes/ hold no files
        assert not [p for p in files if session in p.parents and p.parent != session]
    assert checked >= 10, checked


def run(argv: list[str]) -> bytes:
    """What a command prints (it must succeed), in the C locale: every byte is text to grep."""
    done = subprocess.run(argv, capture_output=True, env={**os.environ, "LC_ALL": "C"})
    assert done.returncode == 0, (argv, done.stderr.decode(errors="replace"))
    return done.stdout


def once(top: Path, names: list[bytes]) -> set[Path]:
    """The paths a walker printed, relative to ``top``; none printed twice."""
    paths = [Path(os.fsdecode(name)).relative_to(top) for name in names]
    assert len(paths) == len(set(paths)), Counter(paths).most_common(3)
    return set(paths)


def test_every_walker_reads_the_files_os_walk_reads(
    mount: Mount, sessions: Path, tmp_path: Path
) -> None:
    """``find``, ``grep -r``, ``du``, ``cp -r`` and ``rg`` over the whole mount read exactly
    the regular files ``os.walk`` meets (not following links), each once: the files that
    test_a_walk_meets_every_message_once shows hold each entry's full text once."""
    top = mount.path
    files = {p.relative_to(top): data for p, data in walked(top).items()}
    want = set(files)
    found = [top / p.parent for p in want if p.name == "conversation.md"]
    assert len(found) == len(list(sessions.rglob("*.jsonl"))) == len(fixture_files())
    assert shown_files(found) == session_files(sessions)
    names = {Path(".")}  # every name os.walk meets, folders and links too
    for dirpath, dirs, filenames in os.walk(top):
        names |= {(Path(dirpath) / n).relative_to(top) for n in dirs + filenames}

    # find: every regular file, once
    seen = once(top, run(["find", str(top), "-type", "f", "-print0"]).split(b"\0")[:-1])
    assert seen == want, seen ^ want

    # grep -r: every file it reads, once, with all its lines (it follows no link below the
    # top); -Z: "path\0count\n"
    records = [rec.split(b"\0") for rec in run(["grep", "-rcZ", "", str(top)]).splitlines()]
    assert once(top, [name for name, _ in records]) == want
    grepped = {Path(os.fsdecode(name)).relative_to(top): int(n) for name, n in records}
    lines = {p: data.count(b"\n") + (data[-1:] not in (b"", b"\n")) for p, data in files.items()}
    assert grepped == lines

    # du -ab: every name once, with its apparent size; its regular files are the walk's
    sizes: dict[Path, int] = {}
    for rec in run(["du", "-ab", "-0", str(top)]).split(b"\0")[:-1]:
        size, name = rec.split(b"\t", 1)
        path = Path(os.fsdecode(name)).relative_to(top)
        assert path not in sizes, path
        sizes[path] = int(size)
    assert set(sizes) == names, set(sizes) ^ names
    regular = {p: n for p, n in sizes.items() if stat.S_ISREG((top / p).lstat().st_mode)}
    assert regular == {p: len(data) for p, data in files.items()}

    # cp -r: the copy holds the same regular files, byte for byte (links stay links)
    copy = tmp_path / "copy"
    run(["cp", "-r", str(top), str(copy)])
    copied = {p.relative_to(copy): data for p, data in walked(copy).items()}
    assert set(copied) == want, set(copied) ^ want
    assert copied == files

    # rg --files: hidden and ignored files too, links not followed
    need(shutil.which("rg") is not None, "ripgrep (rg) is not installed (apt install ripgrep)")
    argv = ["rg", "--files", "-uu", "--no-messages", "-0", str(top)]
    seen = once(top, run(argv).split(b"\0")[:-1])
    assert seen == want, seen ^ want


PHRASE = "Grandma's recipes are full of them"


def entries_saying(mount: Mount, phrase: str) -> int:
    """How many lines of the real session file hold ``phrase`` (each an entry)."""
    real = Path(os.getxattr(mount.path / RECIPE, "user.pi.file").decode())
    return sum(phrase.encode() in line for line in real.read_bytes().splitlines())


def test_grep_gives_a_message_once_and_follows_a_branch_given(mount: Mount) -> None:
    phrase = PHRASE
    out = subprocess.run(["grep", "-rc", phrase, str(mount.path)], capture_output=True, text=True)
    counts = {ln.rsplit(":", 1)[0]: int(ln.rsplit(":", 1)[1]) for ln in out.stdout.splitlines()}
    hits = {p: n for p, n in counts.items() if n and not p.endswith("/tree.txt")}
    assert hits == {str(mount.path / RECIPE / "conversation.md"): entries_saying(mount, phrase)}
    out = subprocess.run(
        ["grep", "-rl", phrase, f"{mount.path / RECIPE}/current/"], capture_output=True, text=True
    )
    assert out.stdout.strip().endswith("-user.md"), out.stdout  # a path given is followed
    assert entries_saying(mount, phrase) >= 1


def test_rg_gives_a_message_once(mount: Mount) -> None:
    need(shutil.which("rg") is not None, "ripgrep (rg) is not installed (apt install ripgrep)")
    phrase = PHRASE
    out = subprocess.run(["rg", "-c", phrase, str(mount.path)], capture_output=True, text=True)
    lines = [ln for ln in out.stdout.splitlines() if "/tree.txt:" not in ln]
    n = entries_saying(mount, phrase)
    assert lines == [f"{mount.path / RECIPE / 'conversation.md'}:{n}"], out.stdout


def test_find_du_and_cp_r_keep_links_as_links(mount: Mount, tmp_path: Path) -> None:
    session = mount.path / RECIPE
    found = subprocess.run(["find", str(session)], capture_output=True, text=True).stdout
    names = {Path(p).name for p in found.splitlines()}
    assert {"conversation.md", "current", "current.md", "session.jsonl"} <= names
    assert not any(n.startswith("0001-") for n in names)
    du = subprocess.run(["du", "-sb", str(session)], capture_output=True, text=True)
    counted = int(du.stdout.split()[0])
    text = sum(
        os.path.getsize(session / n) for n in ("conversation.md", "tree.txt", "session.json")
    )
    assert counted < 2 * text + 64 * 1024, (counted, text)  # not the branches again
    copy = tmp_path / "copy"
    done = subprocess.run(["cp", "-r", str(session), str(copy)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (copy / "current").is_symlink() and (copy / "session.jsonl").is_symlink()
    assert (copy / "conversation.md").read_bytes() == (session / "conversation.md").read_bytes()


def test_every_branch_view_has_its_exact_size(mount: Mount) -> None:
    """``stat`` of a branch view (what rg asks of every link it meets) gives its size
    without making its text, and that size is the bytes ``cat`` then reads."""
    checked = 0
    for view in sorted(mount.path.glob("*/*/leaves/*.md")) + sorted(
        mount.path.glob("*/*/current.md")
    ):
        if view.parents[1].is_symlink() or view.parent.is_symlink():
            continue  # latest/: the same session again
        size = os.stat(view).st_size
        assert size == len(view.read_bytes()), view
        checked += 1
    assert checked >= 11, checked


# -- walks over more sessions than the parse cache holds ------------------------------------


def forks(sessions: Path) -> set[str]:
    """The session files whose header names a parent session (their folder shows a
    ``parent`` link while the parent is in the mount)."""
    out = set()
    for f in sessions.rglob("*.jsonl"):
        with f.open("rb") as fh:
            if b'"parentSession"' in fh.readline():
                out.add(str(f))
    return out


def read_whole(log: str) -> list[str]:
    """The session files the daemon read whole, as its debug log says, in order."""
    marker = " whole ("
    return [
        ln.split(" read ", 1)[1].rsplit(marker, 1)[0] for ln in log.splitlines() if marker in ln
    ]


def listed(top: Path) -> dict[Path, tuple[int, int, str, int, int]]:
    """What ``ls -lR`` asks of every name a walk meets (its mode, size and link target),
    and what ``rg`` asks of where each link leads (the mode and size there)."""
    out: dict[Path, tuple[int, int, str, int, int]] = {}
    for dirpath, dirs, files in os.walk(top):
        for name in dirs + files:
            p = Path(dirpath) / name
            st = p.lstat()
            there = p.stat()
            target = os.readlink(p) if p.is_symlink() else ""
            out[p.relative_to(top)] = (st.st_mode, st.st_size, target, there.st_mode, there.st_size)
    return out


def forget_names() -> None:
    drop_caches("2")


def test_a_repeated_walk_asks_for_no_listing_and_no_flush(sessions: Path) -> None:
    """With the patched pyfuse3 (patches/pyfuse3-3.5.0-walks.patch), a walk closes its
    files without a flush, the kernel opens folders without asking (one opendir ever,
    answered ENOSYS), and a walk again over unchanged sessions is served its listings and
    link targets from the kernel's cache (docs/performance.md). A listing that changes
    is asked for again: a new session in a project, a new leaf in a session."""
    need_open_flags()
    with mounted(sessions, "--debug") as m:

        def grep() -> str:
            argv = ["grep", "-rc", PHRASE, str(m.path)]
            return subprocess.run(argv, capture_output=True, text=True).stdout

        def asked(since: int, op: str) -> int:
            return len(re.findall(rf"\b{op}\(", m.log_text()[since:]))

        hits = grep()  # (parses and renders: may take longer than a listing is kept)
        assert grep() == hits
        start = len(m.log_text())
        assert grep() == hits  # (the examples: well under a second, warm)
        assert asked(start, "open") > 0  # (it went through us)
        assert asked(start, "readdir") == 0 and asked(0, "flush") == 0
        assert asked(0, "opendir") == 1 and asked(0, "releasedir") == 0
        # rg stats every link it meets: the kernel keeps their targets
        need(shutil.which("rg") is not None, "ripgrep (rg) is not installed (apt install ripgrep)")
        rg = ["rg", "-c", "--sort", "path", PHRASE, str(m.path)]
        found = subprocess.run(rg, capture_output=True, text=True).stdout
        for _ in range(3):
            start = len(m.log_text())
            assert subprocess.run(rg, capture_output=True, text=True).stdout == found
            # The kernel forgets inodes only when it must (memory, or a drop_caches by
            # anyone: a benchmark beside the suite made this test fail): then it asks their
            # targets again, and the walk is tried again. Never when we told it to.
            if not re.search(r"\bforget\b", m.log_text()[start:]):
                break
        told = ("readlink(", "INFO", "invalidate", "forget")  # (what asked, and why)
        said = [ln for ln in m.log_text()[start:].splitlines() if any(t in ln for t in told)]
        assert asked(start, "readlink") == 0 and asked(start, "open") > 0, said  # (what asked)
        assert "invalidate" not in m.log_text()[start:], said
        # a new session in a project already listed: the project is listed again
        project = m.path / "home-ana-src-recipe-box"
        src = next((sessions / "--home-ana-src-recipe-box--").glob("*.jsonl"))
        before = set(os.listdir(project))
        shutil.copyfile(src, src.with_name("copy.jsonl"))
        wait_for(lambda: len(set(os.listdir(project)) - before) == 1, 5, "the new session")
        # a new leaf in a session the walks listed: its leaves/ is listed again
        folder = next(p for p in before if os.getxattr(project / p, "user.pi.file") == bytes(src))
        leaves = project / folder / "leaves"
        shown = set(os.listdir(leaves))
        first = orjson.loads(src.read_bytes().splitlines()[1])["id"]
        with src.open("ab") as f:  # another child of the first entry
            f.write(damaged.line(damaged.user("f0f0f0f0", first, "a new branch")))
        wait_for(lambda: len(set(os.listdir(leaves)) - shown) == 2, 5, "the new leaf")
        assert shown < set(os.listdir(leaves))


def test_the_mount_makes_the_collectors_full_passes_once_it_is_quiet(sessions: Path) -> None:
    """The daemon's full collections (every request waits for one: 60-105 ms each in a first
    walk of the 1 GiB corpus) wait for a quiet moment after a walk (``collector``)."""
    with mounted(sessions, "--debug") as m:
        for argv in (["grep", "-rc", PHRASE], ["ls", "-lRL"], ["rg", "-c", PHRASE]):
            if shutil.which(argv[0]):  # (rg: where it is installed)
                subprocess.run([*argv, str(m.path)], capture_output=True)
        wait_for(lambda: "full collection:" in m.log_text(), 10, "a full collection")


def test_a_warmed_mount_answers_its_first_walk_without_parsing(sessions: Path) -> None:
    """``--warm`` lists every session folder in the background: the first ``grep -r`` then
    parses and renders nothing, and finds what a mount without it finds. With no room in
    the cache and no disk cache, it renders nothing at all (memory stays within the cap;
    with the disk cache it indexes every session, see test_disk)."""
    count = len(list(sessions.rglob("*.jsonl")))
    argv = ["grep", "-r", PHRASE]
    with mounted(sessions) as ref:
        expected = subprocess.run([*argv, str(ref.path)], capture_output=True, text=True)
    with mounted(sessions, "--warm", "--debug") as m:
        wait_for(lambda: "warm-up:" in m.log_text(), 60, "the warm-up")
        said = re.search(r"warm-up: (\d+) sessions rendered", m.log_text())
        assert said is not None and int(said.group(1)) == count, m.log_text()[-2000:]
        assert "read" in m.log_text() and " whole (" in m.log_text()  # it did parse them
        start = len(m.log_text())
        found = subprocess.run([*argv, str(m.path)], capture_output=True, text=True)
        assert found.stdout.replace(str(m.path), "MNT") == expected.stdout.replace(
            str(ref.path), "MNT"
        )
        assert found.stdout.count(PHRASE) >= 1
        assert " whole (" not in m.log_text()[start:]  # no session parsed by the walk
    with mounted(sessions, "--warm", "--cache-mb", "0", "--disk-cache", "off") as m:
        wait_for(lambda: "warm-up:" in m.log_text(), 60, "the warm-up")
        assert "warm-up: the cache is full after 0 sessions" in m.log_text()


def test_walks_over_more_sessions_than_the_cache_holds_parse_them_once(sessions: Path) -> None:
    """A year of sessions is bigger than the parse cache: each walk dropped every session
    before the next walk came back to it, and the next walk parsed and rendered them all
    again (150 s against 18 s for 1 GB). What a walk asks of a dropped session whose file is
    unchanged is answered from what it answered before; its bytes come from the page cache
    (or, for a page the kernel no longer has, from the session parsed again)."""
    with mounted(sessions) as ref:
        expected = {p.relative_to(ref.path): data for p, data in walked(ref.path).items()}
        names = listed(ref.path)
    # no cache, and what is over the cap is dropped at once
    with mounted(sessions, "--cache-mb", "0", "--cache-idle", "0", "--debug") as m:

        def walk() -> dict[Path, bytes]:
            return {p.relative_to(m.path): data for p, data in walked(m.path).items()}

        assert walk() == expected
        first = read_whole(m.log_text())
        assert len(set(first)) >= 4 and len(first) == len(set(first))  # each once
        assert listed(m.path) == names
        # The kernel forgets every name (a later walk, after the entry timeouts): each path
        # is looked up again, where each link leads too.
        forget_names()
        assert listed(m.path) == names
        again = read_whole(m.log_text())[len(first) :]
        assert forks(sessions) and again == []  # none was parsed again, forks neither
        assert walk() == expected  # and the bytes are the same, from the cache or not

        # rg asks every folder it enters for .git, .ignore, .rgignore and .gitignore: each of
        # those lookups parsed the session again, every walk.
        need(shutil.which("rg") is not None, "ripgrep (rg) is not installed (apt install ripgrep)")

        def rg() -> str:
            argv = ["rg", "-c", "--sort", "path", PHRASE, str(m.path)]
            return subprocess.run(argv, capture_output=True, text=True, check=True).stdout

        hits = rg()
        assert f"{RECIPE}/conversation.md:" in hits
        before = len(read_whole(m.log_text()))
        assert rg() == hits
        again = read_whole(m.log_text())[before:]
        assert again == []
        # Another name a dropped session's folder does not have is kept as such: asked again
        # (the kernel asks each time), it parses nothing.
        missing = [m.path / RECIPE / "nodes" / "no-such-id", m.path / KANBAN / "no-such-name"]
        for p in missing:
            assert not os.path.lexists(p)
        before = len(read_whole(m.log_text()))
        for p in missing * 2:
            assert not os.path.lexists(p)
        assert read_whole(m.log_text())[before:] == []

        # A dropped session that changes is read again, and every file of it shows the
        # change (tree.txt and session.json had pages in the kernel's cache).
        folder = m.path / RECIPE
        real = Path(os.getxattr(folder, "user.pi.file").decode())
        (new,) = pi("--append", str(real), "74cc97d5", "appended while dropped")
        for name in ("tree.txt", "session.json", "conversation.md", "current.md"):
            shows = folder / name

            def has_it(f: Path = shows) -> bool:
                return new in f.read_text()

            wait_for(has_it, 5, f"{new} in {name}")
            assert os.stat(shows).st_size == len(shows.read_bytes()), name
    assert m.proc.returncode == 0 and "Traceback" not in m.log_text()


def logged(log: str, marker: str) -> set[str]:
    """The session files the debug log says ``<path>: <marker>`` of."""
    return {ln.split(": ")[1] for ln in log.splitlines() if f": {marker}" in ln}


@pytest.mark.parametrize("where", ["store in memory", "disk cache"])
def test_a_walk_that_lost_its_pages_reads_dropped_sessions_from_where_they_were_kept(
    sessions: Path, where: str
) -> None:
    """The kernel's page cache does not keep a walk's pages forever (memory pressure, or a
    memory manager that pages out what was idle for a minute): every session whose pages
    went was parsed and rendered again by the next walk. A session dropped from the parse
    cache leaves its whole-session files in the store: its disk cache entry, or, without
    the disk cache, the store in memory (compressed, within half the cap), and a read the
    page cache cannot answer is served from there."""
    more = sessions / "--home-ana-src-big--"
    more.mkdir()
    for k in range(8):  # bigger than the cap together: walking them drops them
        data = damaged.line({**damaged.HEADER, "id": f"big{k}"})
        for i in range(300):
            text = f"session {k} message {i} " + "a line of words to read " * 60
            parent = f"{i - 1:08x}" if i else None
            data += damaged.line(damaged.user(f"{i:08x}", parent, text, i))
        (more / f"2026-11-20T10-00-{k:02d}_big{k}.jsonl").write_bytes(data)
    off = ["--disk-cache", "off"] if where == "store in memory" else []
    with mounted(sessions, "--cache-mb", "2", "--cache-idle", "0", "--debug", *off) as m:

        def walk() -> dict[Path, bytes]:
            return {p.relative_to(m.path): data for p, data in walked(m.path).items()}

        expected = walk()
        first = read_whole(m.log_text())
        assert len(first) == len(set(first))  # each parsed once

        def saved(log: str) -> set[str]:
            marks = (f"{where}: ", " saved (")
            lines = [ln for ln in log.splitlines() if all(mark in ln for mark in marks)]
            return {ln.split(marks[0])[1].rsplit(marks[1], 1)[0] for ln in lines}

        def all_kept() -> bool:
            log = m.log_text()
            return logged(log, "dropped") <= saved(log)

        wait_for(all_kept, 10, f"every dropped session's files in the {where}")
        log = m.log_text()
        big = {p for p in logged(log, "dropped") if "_big" in p}
        assert len(big) >= 6  # (the last one walked stays)
        assert big <= saved(log)
        mine = status_json(os.environ.copy())[str(m.path)]  # pisessfs status says so
        if where == "store in memory":
            assert mine["disk_cache"] is None
            assert mine["kept"] >= 6 and 0 < mine["kept_bytes"] <= 1 << 20  # half the cap
        else:
            assert mine["disk_entries"] >= 6 and mine["kept"] == 0
        drop_caches("1")  # every page of every file: the walk reads all again
        assert walk() == expected
        assert read_whole(m.log_text())[len(first) :] == []  # none parsed again
        assert f"read from the {where}" in m.log_text()
    assert m.proc.returncode == 0 and "Traceback" not in m.log_text()


def test_rg_after_grep_parses_no_dropped_session_for_where_its_links_lead(
    sessions: Path,
) -> None:
    """``grep -r`` does not look where links lead; ``rg`` stats the target of every link it
    meets (``current.md`` -> ``leaves/<leaf>.md`` -> ``nodes/<id>.md``), whose size is the
    whole branch: the first rg after a grep parsed every dropped session again and rendered
    each of its branches. Those sizes come from conversation.md's render and are kept with
    a dropped session's answers.

    rg walks with ``--files``: the same lookups and link stats, without reading the files
    grep read. With ``--cache-mb 0`` nothing is kept in memory, so a page of them the kernel
    paged out meanwhile (a memory manager may, within seconds) is a parse, which is not what
    this test is about (``..._reads_dropped_sessions_from_where_they_were_kept`` is)."""
    need(shutil.which("rg") is not None, "ripgrep (rg) is not installed (apt install ripgrep)")
    with mounted(sessions, "--cache-mb", "0", "--cache-idle", "0", "--debug") as m:
        grep = ["grep", "-rc", PHRASE, str(m.path)]
        assert subprocess.run(grep, capture_output=True).returncode == 0
        first = read_whole(m.log_text())
        assert len(first) >= 4
        argv = ["rg", "--files", "--sort", "path", str(m.path)]
        files = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
        assert f"{RECIPE}/conversation.md\n" in files
        log = m.log_text()
        assert "b'74cc97d5.md'" in log  # (rg did look there: RECIPE's resume leaf)
        assert read_whole(log)[len(first) :] == []  # and parsed nothing for it
        for view in m.path.glob("*/*/leaves/*.md"):
            assert os.stat(view).st_size == len(view.read_bytes()), view  # the sizes are right
    assert m.proc.returncode == 0 and "Traceback" not in m.log_text()


def test_a_dropped_forks_listing_follows_its_parent_in_and_out_of_the_mount(
    sessions: Path, tmp_path: Path
) -> None:
    """A fork's folder shows ``parent`` while the session it came from is in the mount.
    What a dropped fork's folder lists is kept like any session's (forks were parsed again
    at every walk), with the parent link it answered: once that is no longer the mount's
    answer, the fork answers again."""
    with mounted(sessions, "--cache-mb", "0", "--cache-idle", "0", "--debug") as m:
        fork, parent = m.path / FORK, m.path / RECIPE
        real_parent = Path(os.getxattr(parent, "user.pi.file").decode())
        real_fork = os.getxattr(fork, "user.pi.file").decode()

        def drop_fork() -> None:
            # another session used (its attributes are asked of it): with no cache, the
            # fork is dropped
            os.getxattr(m.path / KANBAN, "user.pi.session")

        assert "parent" in os.listdir(fork)
        drop_fork()
        forget_names()
        before = len(read_whole(m.log_text()))
        assert "parent" in os.listdir(fork)
        assert real_fork not in read_whole(m.log_text())[before:]  # answered as kept
        away = tmp_path / real_parent.name
        real_parent.rename(away)  # out of the mount

        def shows_parent() -> bool:
            drop_fork()
            return "parent" in os.listdir(fork)

        wait_for(lambda: not shows_parent(), 30, "the parent link gone with its parent")
        away.rename(real_parent)
        wait_for(shows_parent, 30, "the parent link back with its parent")
        assert os.readlink(fork / "parent") == "../" + RECIPE.split("/")[1]
    assert m.proc.returncode == 0 and "Traceback" not in m.log_text()


def test_after_a_walk_the_daemon_gives_back_the_heap_it_freed(sessions: Path) -> None:
    """glibc keeps what a walk's parses and renders freed, scattered among the caches: each
    walk after the kernel dropped its caches left the daemon 20 to 30 MiB bigger. Once the
    work is done, the daemon trims its heap."""
    with mounted(sessions, "--cache-mb", "0", "--cache-idle", "0", "--debug") as m:
        walked(m.path)
        marker = "heap trimmed: "

        def trimmed() -> bool:
            return marker in m.log_text()

        wait_for(trimmed, 10, "a heap trim after the walk")
        line = next(ln for ln in m.log_text().splitlines() if marker in ln)
        before, after = re.findall(r"(\d+) -> (\d+) MiB", line)[0]
        assert 0 < int(after) <= int(before), line


def test_a_name_a_session_folder_never_has_is_asked_for_once(sessions: Path) -> None:
    """rg asks every folder it enters for .git, .ignore, .rgignore and .gitignore. A session's
    folders never have a name that starts with "." (but .session.jsonl): the kernel is told
    to remember that, and a second walk does not ask again."""
    with mounted(sessions, "--debug") as m:
        folder = m.path / RECIPE
        folders = [folder, folder / "leaves", folder / "nodes"]
        for _ in range(3):
            for d in folders:
                assert not os.path.lexists(d / ".git")
        asked = [ln for ln in m.log_text().splitlines() if "lookup(" in ln and "b'.git'" in ln]
        assert len(asked) == len(folders), asked
        assert (folder / ".session.jsonl").read_bytes() == (folder / "session.jsonl").read_bytes()
        assert not os.path.lexists(folder / ".session.json")


# -- the kernel's forget -----------------------------------------------------------------


def inodes(top: Path) -> dict[Path, int]:
    """The inode number of every name a walk meets."""
    out: dict[Path, int] = {}
    for dirpath, dirs, files in os.walk(top):
        for name in dirs + files:
            p = Path(dirpath) / name
            out[p.relative_to(top)] = p.lstat().st_ino
    return out


def after_forgets(log: str) -> list[tuple[int, int]]:
    """How many inode numbers the daemon's table had after each forget, and how many of
    them the kernel held, as its debug log says."""
    marker = " inodes: "
    out = []
    for ln in log.splitlines():
        if marker in ln:
            named, held = ln.rsplit(marker, 1)[1].replace(",", "").split()[::2]
            out.append((int(named), int(held)))
    return out


def test_what_the_kernel_forgets_leaves_the_table_and_numbers_stay(sessions: Path) -> None:
    """The inode table kept a key for every node ever looked up (a year of sessions walked
    once: millions). The kernel's forget now frees each number it no longer holds; a name
    looked up again gets the number it had (``tail -F`` and ``find`` compare them), and
    reads the same bytes."""
    with mounted(sessions, "--debug") as m:
        first = inodes(m.path)
        names = listed(m.path)  # where every link leads is looked up too
        files = walked(m.path)
        assert len(first) > 40, len(first)  # (the examples alone: 55 names)
        forget_names()

        def freed() -> bool:
            counts = after_forgets(m.log_text())
            return bool(counts) and counts[-1][1] <= 2  # the root (and the mount's own)

        wait_for(freed, 10, "the kernel's forgets to empty the table")
        named, _ = after_forgets(m.log_text())[-1]
        assert named < len(first), named  # what it held is gone (only unheld names stay)
        assert inodes(m.path) == first
        assert listed(m.path) == names
        assert walked(m.path) == files
    assert m.proc.returncode == 0 and "Traceback" not in m.log_text()


# -- files opened from kept answers, and a big conversation read by range -------------------


def drop_pages() -> None:
    drop_caches("1")


@pytest.mark.warns  # the ESTALE is said in the log
def test_a_file_opened_from_kept_answers_that_changes_before_its_read_is_stale(
    sessions: Path,
) -> None:
    """tree.txt of a dropped session is opened with the size the kernel was told and no
    bytes; if the session file changes before the first read, that read answers ESTALE
    rather than bytes of another version. conversation.md only grows: it reads what it had."""
    with mounted(sessions, "--cache-mb", "0", "--cache-idle", "0", "--debug") as m:
        folder = m.path / RECIPE
        before = {n: (folder / n).read_bytes() for n in ("tree.txt", "conversation.md")}
        listed(m.path)  # every session's answers kept
        os.listdir(m.path / KANBAN / "current/")  # parses KANBAN: RECIPE is dropped
        fds = {n: os.open(folder / n, os.O_RDONLY) for n in before}
        try:
            real = Path(os.getxattr(folder, "user.pi.file").decode())
            pi("--append", str(real), "74cc97d5", "appended between open and read")
            drop_pages()
            with pytest.raises(OSError) as err:
                os.read(fds["tree.txt"], 1 << 20)
            assert err.value.errno == errno.ESTALE
            conv = before["conversation.md"]
            assert os.pread(fds["conversation.md"], len(conv), 0) == conv
        finally:
            for fd in fds.values():
                os.close(fd)
        assert "changed between open and read: answered ESTALE" in m.log_text()
        assert (folder / "tree.txt").read_bytes() != before["tree.txt"]  # a new open: new
    assert m.proc.returncode == 0 and "Traceback" not in m.log_text()


def test_a_big_conversation_reads_the_same_when_the_page_cache_lost_it(
    tmp_path: Path,
) -> None:
    """conversation.md of a big session is not held whole by the daemon: a read the page
    cache cannot answer makes its part again, byte for byte."""
    project = tmp_path / "--home-x-big--"
    project.mkdir()
    lines = [damaged.line(damaged.HEADER)]
    for i in range(2500):
        text = f"message {i:05d} " + "lorem ipsum dolor " * 220
        parent = f"{i - 1:08x}" if i else None
        lines.append(damaged.line(damaged.user(f"{i:08x}", parent, text, i)))
    (project / "big.jsonl").write_bytes(b"".join(lines))
    with mounted(tmp_path, "--debug") as m:
        (session,) = set((m.path / "home-x-big").iterdir())
        conv = session / "conversation.md"
        first = conv.read_bytes()
        assert len(first) == os.stat(conv).st_size > 8 << 20
        found = [int(x) for x in re.findall(rb"message (\d{5}) ", first)]
        assert found == list(range(2500))
        drop_pages()
        assert conv.read_bytes() == first
        drop_pages()
        with conv.open("rb") as f:
            for off in (len(first) - 10, 5 << 20, 3, len(first) // 2):
                f.seek(off)
                assert f.read(200_000) == first[off : off + 200_000]
        out = subprocess.run(["grep", "-c", "message 02499 ", str(conv)], capture_output=True)
        assert out.stdout == b"1\n"
    assert m.proc.returncode == 0 and "Traceback" not in m.log_text()
