"""The disk cache: a second mount answers a walk of an unchanged session from what the first
saved, byte for byte what parsing it gives, and never what the file no longer says.

Real mounts, one after the other, on one cache folder; a walk is what ``grep -r`` and ``find``
meet (links not followed). Whether a session was parsed is read in the ``--debug`` log.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sqlite3
import stat
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from pisessfs import layout, onefile, store
from pisessfs.kind import Kind
from pisessfs.model import Entry, Problem
from pisessfs.reads import PUSH_BYTES
from pisessfs.sessions import Store
from pisessfs.store import DiskStore
from pisessfs.view import Key, NotFound
from tests.driven import Driven

from .conftest import H1, Mount, drop_caches, mounted, named, need, wait_for
from .test_lifecycle_status import status_json

pytestmark = pytest.mark.fuse  # real mounts (tests/conftest.py: the tiers)

PARSED = "whole ("  # sessions.py: "read <path> whole (<n> bytes)"
FROM_DISK = "answers from the disk cache"


def seen(top: Path) -> dict[str, tuple[object, ...]]:
    """Everything a walk that does not follow links meets, and what ``stat`` says of it
    (inode numbers aside: each mount numbers its own)."""
    out: dict[str, tuple[object, ...]] = {}
    for folder, dirs, files in os.walk(top):
        for name in dirs + files:
            p = Path(folder, name)
            st = os.lstat(p)
            about = (st.st_mode, st.st_size, st.st_mtime_ns, st.st_nlink, st.st_uid)
            if stat.S_ISLNK(st.st_mode):
                out[str(p.relative_to(top))] = (*about, os.readlink(p))
            elif stat.S_ISREG(st.st_mode):
                out[str(p.relative_to(top))] = (*about, p.read_bytes())
            else:
                out[str(p.relative_to(top))] = about
    return out


def grep(top: Path, word: str) -> str:
    """The sessions' lines with ``word`` (not the sums of ``usage/``: they are made anew, not
    kept, and read around the kernel's page cache)."""
    argv = ["grep", "-r", "--exclude-dir=usage", word, str(top)]
    found = subprocess.run(argv, capture_output=True, text=True)
    return "".join(sorted(found.stdout.replace(str(top), "MNT").splitlines(keepends=True)))


def walked(sessions: Path, cache: Path, *extra: str) -> tuple[dict[str, tuple[object, ...]], str]:
    """A fresh mount on ``cache``: what a walk meets there, and the mount's log (read once
    the daemon is gone: it saves at unmount)."""
    with mounted(sessions, "--disk-cache", str(cache), "--debug", *extra) as m:
        got = seen(m.path)
    return got, finished(m)


def finished(m: Mount) -> str:
    text = m.log_text()
    assert m.proc.returncode == 0, text
    assert "Traceback" not in text, text
    return text


def parsed(log: str) -> list[str]:
    return [line for line in log.splitlines() if PARSED in line]


def forks(root: Path) -> list[Path]:
    """The sessions whose header names a parent session: their ``parent`` link follows other
    files (it is saved with what it led to, and looked for again at its first use)."""
    out = []
    for p in root.rglob("*.jsonl"):
        with p.open("rb") as f:
            if b'"parentSession"' in f.readline():
                out.append(p)
    return out


def database(cache: Path) -> sqlite3.Connection:
    return sqlite3.connect(cache / store.DB_NAME, isolation_level=None)


def entries(cache: Path) -> list[str]:
    """The session files the disk cache holds an entry of."""
    if not (cache / store.DB_NAME).exists():
        return []
    with contextlib.closing(database(cache)) as db:
        rows = db.execute("SELECT path FROM entries").fetchall()
    return sorted(bytes(p).decode("utf-8", "surrogatepass") for (p,) in rows)


def kept_names(cache: Path) -> set[str]:
    """The session files whose names the disk cache keeps."""
    with contextlib.closing(database(cache)) as db:
        rows = db.execute("SELECT path FROM heads").fetchall()
    return {bytes(p).decode("utf-8", "surrogatepass") for (p,) in rows}


def damaged(cache: Path, path: str, answers: bytes | None = None, files: str = "") -> None:
    """Give ``path``'s entry other ``answers`` (its size said right), or other ``files``,
    keeping the database sound."""
    key = path.encode("utf-8", "surrogatepass")
    with contextlib.closing(database(cache)) as db:
        (where,) = db.execute("SELECT files FROM entries WHERE path = ?", (key,)).fetchone()
        if answers is not None:
            where = json.loads(where)
            text = where[store.ANSWERS][0]
            db.execute("UPDATE chunks SET data = ? WHERE id = ?", (answers, text * store.CHUNKS))
            db.execute("UPDATE texts SET size = ? WHERE id = ?", (len(answers), text))
            where = json.dumps({**where, store.ANSWERS: [text, len(answers)]})
        db.execute("UPDATE entries SET files = ? WHERE path = ?", (files or where, key))


def answers_of(cache: Path, path: str) -> Any:
    key = path.encode("utf-8", "surrogatepass")
    with contextlib.closing(database(cache)) as db:
        (where,) = db.execute("SELECT files FROM entries WHERE path = ?", (key,)).fetchone()
        text = json.loads(where)[store.ANSWERS][0]
        row = db.execute("SELECT data FROM chunks WHERE id = ?", (text * store.CHUNKS,))
        (data,) = row.fetchone()
    return orjson.loads(data)


@pytest.fixture
def cache(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "cache"


def test_a_second_mount_answers_from_the_cache_what_parsing_gives(
    corpus: Path, cache: Path, tmp_path: Path
) -> None:
    first, log1 = walked(corpus, cache)
    sessions = list(corpus.rglob("*.jsonl"))
    assert forks(corpus)  # (the examples have one)
    assert len(parsed(log1)) >= len(sessions)  # the first mount parsed every one
    assert len(entries(cache)) == len(sessions)  # and saved them, the fork too
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    files = [cache / (store.DB_NAME + end) for end in ("", "-wal", "-shm")]
    assert {stat.S_IMODE(p.stat().st_mode) for p in files if p.exists()} == {0o600}

    second, log2 = walked(corpus, cache)
    fresh, _ = walked(corpus, tmp_path / "other", "--disk-cache", "off")
    assert second == fresh == first  # every name, link, byte and attribute, hostile ids too
    assert parsed(log2) == []  # ... and parsed none for it
    assert log2.count(FROM_DISK) == len(entries(cache))
    assert "read from the disk cache" in log2


def test_a_saved_fork_shows_its_parent_link_as_the_mount_finds_it_now(
    corpus: Path, cache: Path, tmp_path: Path
) -> None:
    """A fork is saved with where its ``parent`` link led: a later mount answers it from the
    cache while the parent is where it was, and parses the fork again when the parent went
    away (no link then) or came back (the link again), as a mount without the cache shows."""
    fork, parent = next(
        (f, p) for f in forks(corpus) if (p := f.with_name(_parent_named(f))).exists()
    )
    first, _ = walked(corpus, cache)
    link = next(k for k, v in first.items() if k.endswith("/parent") and len(v) == 6)
    again, log = walked(corpus, cache)
    assert again == first and parsed(log) == []  # the fork from the cache too

    away = tmp_path / parent.name
    parent.rename(away)  # (the parent's own entry is dropped: its file is gone)
    gone, log = walked(corpus, cache)
    assert link not in gone and [ln for ln in parsed(log) if fork.name in ln]
    assert gone == walked(corpus, tmp_path / "none", "--disk-cache", "off")[0]
    away.rename(parent)
    back, log = walked(corpus, cache)
    assert back[link] == first[link] and [ln for ln in parsed(log) if fork.name in ln]
    assert back == walked(corpus, tmp_path / "none", "--disk-cache", "off")[0]


def _parent_named(fork: Path) -> str:
    """The file name of the parent session a fork's header names."""
    with fork.open("rb") as f:
        return os.path.basename(str(json.loads(f.readline())["parentSession"]))


def test_grep_through_a_cached_mount_finds_what_a_parsed_one_does(
    corpus: Path, cache: Path
) -> None:
    with mounted(corpus, "--disk-cache", str(cache)) as m:
        before = grep(m.path, "needle")
    finished(m)
    with mounted(corpus, "--disk-cache", str(cache), "--debug") as m:
        after = grep(m.path, "needle")
    assert parsed(finished(m)) == []
    assert after == before
    texts = [ln for ln in after.splitlines() if "/conversation.md:" in ln]
    assert len(texts) == 12  # both hostile sessions, each message once


def test_warm_saves_every_session_to_the_cache_and_a_later_warm_renders_none(
    corpus: Path, cache: Path
) -> None:
    """``--warm`` with the disk cache indexes: it renders each session the cache lacks and
    saves it at once (so a mount killed later keeps them), past the memory cap (0 here:
    each is dropped as it goes); a later mount's warm-up skips every session the cache
    holds, and its first walk parses nothing. Without the disk cache it still stops when
    the memory cap is reached."""
    saved = sessions = len(list(corpus.rglob("*.jsonl")))
    with mounted(corpus, "--disk-cache", str(cache), "--warm", "--cache-mb", "0") as m:
        wait_for(lambda: "warm-up:" in m.log_text(), 60, "the warm-up")
        said = f"warm-up: {sessions} sessions rendered in "
        assert said in m.log_text() and "(0 were in the disk cache)" in m.log_text()
        wait_for(lambda: len(entries(cache)) == saved, 10, "every entry written")
        m.proc.kill()  # (nothing saved at unmount: the warm-up did)
        m.proc.wait()
    assert len(entries(cache)) == saved
    with mounted(corpus, "--disk-cache", str(cache), "--warm", "--debug") as m:
        wait_for(lambda: "warm-up:" in m.log_text(), 60, "the warm-up")
        rendered = "0 sessions"
        said = f"warm-up: {rendered} rendered in "
        assert said in m.log_text() and f"({saved} were in the disk cache)" in m.log_text()
        shown = status_json(os.environ.copy())[str(m.path)]["warm_up"]  # pisessfs status
        assert shown.startswith(f"done: {rendered} rendered in "), shown
        assert shown.endswith(f" s ({saved} were in the disk cache)"), shown
        assert "needle" in grep(m.path, "needle")
        assert PARSED not in m.log_text()  # (neither by the warm-up nor by the walk)
    finished(m)
    with mounted(corpus, "--disk-cache", "off", "--warm", "--cache-mb", "0") as m:
        wait_for(lambda: "warm-up:" in m.log_text(), 60, "the warm-up")
        assert "warm-up: the cache is full after 0 sessions" in m.log_text()


def test_a_session_that_changed_is_parsed_again_and_shows_its_change(
    corpus: Path, cache: Path
) -> None:
    first, _ = walked(corpus, cache)
    grown = next(p for p in corpus.rglob("*.jsonl") if p.name.endswith("_h1.jsonl"))
    line = {
        "type": "message",
        "id": "new1",
        "parentId": "ok",
        "timestamp": "2026-03-02T09:15:00.000Z",
        "message": {"role": "user", "content": "appended between mounts"},
    }
    with grown.open("a") as f:
        f.write(json.dumps(line) + "\n")
    chmodded = next(p for p in corpus.rglob("*.jsonl") if p.name.endswith("\udcff.jsonl"))
    chmodded.chmod(0o600)
    second, log = walked(corpus, cache)
    changed_files = [line for line in parsed(log) if "--hostile--" in line]
    assert len(changed_files) == 2  # the two that changed ...
    assert len(parsed(log)) == 2  # ... and only those
    conv = next(v for k, v in second.items() if "h1" in k and k.endswith("conversation.md"))
    assert b"appended between mounts" in conv[-1]  # type: ignore[operator]
    changed = {k for k in first if first[k] != second.get(k)}
    assert changed and all("hostile" in k for k in changed if not k.startswith("usage/"))
    assert first["usage/daily.csv"] != second["usage/daily.csv"]  # (the sums followed)


def test_a_session_deleted_between_mounts_leaves_no_entry(corpus: Path, cache: Path) -> None:
    walked(corpus, cache)
    gone = next(p for p in corpus.rglob("*.jsonl") if p.name.endswith("_h1.jsonl"))
    assert str(gone) in entries(cache)
    gone.unlink()
    with mounted(corpus, "--disk-cache", str(cache)) as m:
        wait_for(lambda: str(gone) not in entries(cache), 10, "the entry of the deleted session")
        wait_for(
            lambda: str(gone) not in kept_names(cache),
            10,
            "the deleted session's name gone from the cache",
        )
    finished(m)
    assert len(entries(cache)) == len(list(corpus.rglob("*.jsonl")))


def test_a_session_trashed_through_the_mount_loses_its_entry(
    corpus: Path, cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    walked(corpus, cache)
    session = next(p for p in corpus.rglob("*.jsonl") if p.name.endswith("_h1.jsonl"))
    assert str(session) in entries(cache)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    with mounted(corpus, "--disk-cache", str(cache)) as m:
        folder = named(m.path / "hostile" / H1)
        subprocess.run(["rm", "-r", str(folder)], check=True)
        assert not session.exists()
        wait_for(lambda: str(session) not in entries(cache), 10, "the trashed session's entry")
    finished(m)
    assert str(session) not in entries(cache)


@pytest.mark.warns
def test_damaged_entries_are_not_used_and_removed(corpus: Path, cache: Path) -> None:
    first, _ = walked(corpus, cache)
    saved = entries(cache)
    damaged(cache, saved[0], answers=b"garbage")
    damaged(cache, saved[1], files="garbage")
    damaged(cache, saved[2], answers=orjson.dumps({**answers_of(cache, saved[2]), "attrs": [[1]]}))
    damaged(cache, saved[3], answers=b"[]")  # (not a dict)
    second, log = walked(corpus, cache)
    assert second == first
    assert len(parsed(log)) == 4  # those four parsed again ...
    assert "is not sound" in log and "is unreadable" in log
    assert entries(cache) == saved  # ... and saved anew


@pytest.mark.warns
def test_a_damaged_database_is_made_anew(corpus: Path, cache: Path) -> None:
    """A database that is not one (a disk error, a file written over) is made anew: the
    mount shows what a fresh one does, names its sessions from their files and keeps it
    all again."""
    first, _ = walked(corpus, cache)
    (cache / store.DB_NAME).write_bytes(b"garbage" * 1000)
    for end in ("-wal", "-shm"):
        (cache / (store.DB_NAME + end)).unlink(missing_ok=True)
    second, log = walked(corpus, cache)
    assert second == first
    assert "is unreadable" in log and "made anew" in log
    assert log.count(HEAD_READ) == len(list(corpus.rglob("*.jsonl")))
    assert len(entries(cache)) == len(list(corpus.rglob("*.jsonl")))
    assert kept_names(cache)


def test_the_cache_is_under_xdg_cache_home_unless_off(corpus: Path) -> None:
    with mounted(corpus) as m:  # (the tests' mounts each have their own $XDG_CACHE_HOME)
        home = m.path.with_suffix(".cache")
        seen(m.path)
        assert stat.S_IMODE((home / "pisessfs").stat().st_mode) == 0o700
    finished(m)
    with mounted(corpus, "--disk-cache", "off") as m:
        seen(m.path)
        assert not m.path.with_suffix(".cache").exists()
    assert "disk cache" not in finished(m)


@pytest.mark.warns
def test_a_cache_folder_others_may_enter_is_not_used(corpus: Path, cache: Path) -> None:
    cache.mkdir(mode=0o755)
    cache.chmod(0o755)
    with mounted(corpus, "--disk-cache", str(cache)) as m:
        assert seen(m.path)
    log = finished(m)
    assert "no disk cache" in log and "must be yours alone" in log
    assert entries(cache) == []


def _grown_while_mounted(corpus: Path, cache: Path, eid: str, text: str) -> Path:
    """Mount, append a user message ``eid`` saying ``text`` under the last entry of the
    hostile session h1, wait for its conversation.md to show it (made for the new line
    only: what it showed before stays), walk, unmount; h1's file."""
    grown = next(p for p in corpus.rglob("*.jsonl") if p.name.endswith("_h1.jsonl"))
    line: dict[str, Any] = {
        "type": "message",
        "id": eid,
        "parentId": "ok",
        "timestamp": "2026-03-02T09:15:00.000Z",
        "message": {"role": "user", "content": text},
    }
    with mounted(corpus, "--disk-cache", str(cache)) as m:
        conv = named(m.path / "hostile" / H1) / "conversation.md"
        before = conv.read_bytes()
        with grown.open("a") as f:
            f.write(json.dumps(line) + "\n")
        wait_for(lambda: text.encode() in conv.read_bytes(), 10, "the append in conversation.md")
        assert conv.read_bytes().startswith(before) == (eid != "x.md")  # (x.md: taken again)
        seen(m.path)
    finished(m)
    return grown


def test_a_conversation_whose_text_a_new_line_changes_is_made_again(
    corpus: Path, cache: Path, tmp_path: Path
) -> None:
    """conversation.md only grows while mounted, but a line that takes an earlier line's id
    changes what the earlier one shows: the index is built anew, conversation.md made again
    from the whole file, and that is what a later mount shows."""
    _grown_while_mounted(corpus, cache, "x.md", "the id again")
    second, _ = walked(corpus, cache)
    fresh, _ = walked(corpus, tmp_path / "other", "--disk-cache", "off")
    assert second == fresh


def test_a_conversation_that_grew_cleanly_in_a_mount_is_kept(
    corpus: Path, cache: Path, tmp_path: Path
) -> None:
    """The sessions Pi appends to while mounted (conversation.md made for their new lines
    only) are saved at unmount: the next mount serves them without parsing them, as a render
    of the whole file shows them."""
    grown = _grown_while_mounted(corpus, cache, "later", "a later needle")
    second, log = walked(corpus, cache)
    assert not [line for line in parsed(log) if grown.name in line]  # (from the disk cache)
    fresh, _ = walked(corpus, tmp_path / "other", "--disk-cache", "off")
    assert second == fresh


@pytest.mark.warns
def test_a_problem_found_after_the_last_entry_is_noted_at_once(tmp_path: Path) -> None:
    """A malformed line appended after a session's last entry is noted in conversation.md
    as soon as it is read (not once another entry comes), and that text is the one a render
    of the whole file gives, which the disk cache may keep; one noted only once it is read
    again is not."""
    root, path = _one_session(tmp_path, messages=4)
    _, v, c = _view_on(root, tmp_path / "cache")
    _listing(v, path)
    with path.open("ab") as f:
        f.write(b'{"type": "message", "id": \n')
    s = v.up_to_date(str(path))  # (as the watcher has it read)
    _listing(v, path)  # (as the kernel lists the folder again: conversation.md's new size)
    text = v.wholes.conv_text(s)
    assert b"> problem: line 6: malformed-json" in text
    fresh = Driven(Store(str(root)))
    assert text == fresh.wholes.conv_text(fresh.store.session(str(path)).load())
    assert v.carry.save(s)
    c.close()


def test_a_problem_noted_after_later_lines_makes_the_text_not_kept() -> None:
    """A problem about a line shown by an earlier add goes after the new entries, where a
    render of the whole file puts it at its line: that text is not one the disk cache keeps
    (nor is one that noted a problem since gone)."""
    entries = [
        Entry(f"e{n}", f"e{n - 1}" if n else None, "message", None, n + 2, 0, 0, "user", None, None)
        for n in range(3)
    ]
    piece = lambda e: onefile.Piece(e, 1, b"text", (), "")  # noqa: E731
    number = lambda _eid: 1  # noqa: E731
    conv = onefile.Conversation()
    conv.add(entries[:2], [], number, piece)
    late = Problem(2, "orphan", "as if found later")
    conv.add(entries, [late], number, piece)
    assert conv.noted([late]) and not conv.exact([late])
    gone = onefile.Conversation()
    torn = Problem(9, "malformed-json", "a line since made whole")
    gone.add(entries, [torn], number, piece)
    assert gone.exact([torn]) and not gone.exact([])


def test_a_rewrite_that_kept_size_and_mtime_is_not_saved(tmp_path: Path) -> None:
    """What a mount read before a same-size rewrite in place whose mtime was put back
    (``cp -p`` over it) is not saved as the file's: its ctime moved. In process: a mount's
    watcher may see the rewrite half done and read the file again."""
    root, path = _one_session(tmp_path)
    store, v, c = _view_on(root, tmp_path / "cache")
    _listing(v, path)
    s = store.session(str(path)).loaded
    assert s is not None and v.carry.save(s)  # (what it read: saved)
    st = path.stat()
    with path.open("r+b") as f:  # (no truncation: nothing shows it in between)
        data = f.read()
        f.seek(0)
        f.write(data.replace(b"hi 1 ", b"HI 1 "))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert not v.carry.save(s)
    path.write_bytes(path.read_bytes())  # (the same bytes again: a new ctime, nothing else)
    assert not v.carry.save(s)
    c.close()


def test_a_time_past_64_bits_saves_the_rest(corpus: Path, cache: Path, tmp_path: Path) -> None:
    """An entry dated in the year 9999 (nanoseconds past 64 bits) is not an error: its
    session is not saved, every other one is."""
    far = corpus / "--hostile--" / "2026-03-02T09-14-07-120Z_far.jsonl"
    rows = [
        {"type": "session", "version": 3, "id": "far", "timestamp": "2026-03-02T09:14:05.120Z"},
        {
            "type": "message",
            "id": "f1",
            "parentId": None,
            "timestamp": "9999-12-31T00:00:00.000Z",
            "message": {"role": "user", "content": "from far away"},
        },
    ]
    far.write_text("".join(json.dumps(r) + "\n" for r in rows))
    first, _ = walked(corpus, cache)
    sessions = list(corpus.rglob("*.jsonl"))
    assert len(entries(cache)) == len(sessions) - 1
    second, _ = walked(corpus, cache)
    assert second == first


def test_an_entry_saved_again_is_never_read_at_the_old_offsets(tmp_path: Path) -> None:
    """A mount answered a session from its entry, then parsed it, and saved it again (more
    answers: a longer header); a handle opened from the first answers must not read the new
    entry at the old offsets (tree.txt came out as a slice of conversation.md)."""
    root, path = _one_session(tmp_path)

    store, v, c = _view_on(root, tmp_path / "cache")
    _, names = _listing(v, path)
    real = v.content(names["tree.txt"].ino)
    store.session(str(path)).evict()
    c.close()

    store, v, c = _view_on(root, tmp_path / "cache")
    sess, names = _listing(v, path)
    assert c.used == 1  # answered from the entry
    later = v.keeping.later(names["tree.txt"].ino)
    assert later is not None
    v.ready(sess, listing=True)  # parsed after all; more answers gathered, then saved again
    for i in range(40):
        with contextlib.suppress(NotFound):
            v.lookup(sess, f"zz{i}")
        v.looked_up(sess, f"zz{i}", None)
    store.session(str(path)).evict()
    c.settle()
    assert c.saved == 1
    if not v.keeping.from_store(later):
        v.ready(later.ino)
        v.keeping.fill(later)
    assert later.read(0, later.size) == real
    later.close()
    c.close()


def test_a_fork_whose_parent_moved_before_it_was_dropped_is_not_saved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fork's answers are saved with the parent link they were made with: when the
    parent moved (still in the mount, so the link now leads elsewhere) before the fork was
    dropped, what the drop would keep of its links is of the new place, and the save would
    pair it with the old link (a later mount, the parent moved back, showed it)."""
    root, parent = _one_session(tmp_path)
    fork = parent.with_name("2026-01-01T00-00-01-000Z_f.jsonl")
    head = {"type": "session", "version": 3, "id": "f", "timestamp": "2026-03-02T09:15:00Z"}
    first: dict[str, Any] = {"type": "message", "id": "f1", "parentId": None}
    first.update(timestamp="2026-03-02T09:15:01Z", message={"role": "user", "content": "forked"})
    rows = [{**head, "parentSession": str(parent)}, first]
    fork.write_text("".join(json.dumps(r) + "\n" for r in rows))
    store, v, c = _view_on(root, tmp_path / "cache")
    _, names = _listing(v, fork)
    was = v.readlink(names["parent"].ino)
    parent.rename(root / parent.name)  # a flat session of the root now: found, elsewhere
    monkeypatch.setattr(layout, "PARENT_TTL", 0.0)  # (looked for again at once)
    store.session(str(fork)).evict()
    c.settle()
    assert c.saved == 0 and v.keeping.kept(names["parent"].ino) is None
    _, names = _listing(v, fork)  # parsed again: the link as it is now
    assert v.readlink(names["parent"].ino) != was
    c.close()


def _one_session(tmp_path: Path, messages: int = 30) -> tuple[Path, Path]:
    """A sessions folder with one session of ``messages`` messages."""
    root = tmp_path / "sessions"
    (root / "--p--").mkdir(parents=True)
    path = root / "--p--" / "2026-01-01T00-00-00-000Z_a.jsonl"
    rows: list[dict[str, Any]] = [
        {"type": "session", "version": 3, "id": "s", "timestamp": "2026-03-02T09:14:05.120Z"}
    ]
    for n in range(messages):
        role = "user" if n % 2 == 0 else "assistant"
        rows.append(
            {
                "type": "message",
                "id": f"e{n}",
                "parentId": f"e{n - 1}" if n else None,
                "timestamp": "2026-03-02T09:14:06.000Z",
                "message": {"role": role, "content": f"hi {n} " * 20},
            }
        )
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root, path


def _view_on(root: Path, cache: Path) -> tuple[Store, Driven, DiskStore]:
    """The core of a mount of ``root`` on disk cache ``cache``, without FUSE."""
    parsed = Store(str(root))
    v = Driven(parsed)
    c = DiskStore(str(cache), 1 << 30, store.code_mark(), parsed.root)
    assert c.open()
    v.view.disk = parsed.disk = c
    return parsed, v, c


def _listing(v: Driven, path: Path) -> tuple[int, dict[str, Any]]:
    """A session folder's listing, from kept answers (the disk cache's too) if any."""
    sess = v.ino(Key(Kind.SESSION, str(path)))
    names = v.keeping.kept_listing(sess)
    if names is None:
        v.ready(sess, listing=True)
        names = v.children(sess)
    return sess, dict(names)


def test_a_drop_wins_over_a_save_still_queued(tmp_path: Path) -> None:
    """A session saved as it was dropped, then trashed: the write still queued must not
    bring its text back after the drop."""
    root, path = _one_session(tmp_path)
    store, v, c = _view_on(root, tmp_path / "cache")
    _listing(v, path)
    s = store.session(str(path)).loaded
    assert s is not None
    for _ in range(20):
        assert v.carry.save(s)
        c.drop(str(path))
        c.settle()
        assert entries(tmp_path / "cache") == []
    c.close()


def test_a_big_conversation_no_one_holds_whole_is_saved_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A big session's conversation.md is not held whole in memory (its old groups are
    made again when read): its entry gets them made again by the writer, from a copy of
    the session, and the next mount reads it all from there. (The budgets are made small
    here: the real ones need a session of hundreds of MB.)"""
    from pisessfs import onefile

    monkeypatch.setattr(onefile.Conversation, "held_bytes", 64 << 10)
    monkeypatch.setattr(onefile, "PACKED_BYTES", 0)
    root, path = _one_session(tmp_path, messages=2000)
    store, v, c = _view_on(root, tmp_path / "cache")
    _, names = _listing(v, path)
    s = store.session(str(path)).loaded
    assert s is not None
    real = v.wholes.conv_text(s)
    assert (
        len(real) > 256 << 10
        and s.memo.conversation is not None
        and s.memo.conversation.parts() is None
    )  # (not whole)
    store.session(str(path)).evict()
    c.close()

    store, v, c = _view_on(root, tmp_path / "cache")
    _, names = _listing(v, path)
    later = v.keeping.later(names["conversation.md"].ino)
    assert later is not None and v.keeping.from_store(later)  # from the entry, not parsed
    assert later.read(0, later.size) == real
    assert store.session(str(path)).loaded is None
    later.close()
    c.close()


def test_rg_on_a_later_mount_parses_nothing(corpus: Path, cache: Path) -> None:
    """rg asks where every link leads (grep -r does not): what it asks is saved with the
    rest at unmount, as a drop keeps it (else rg parsed every session a mount had saved)."""
    need(shutil.which("rg") is not None, "ripgrep (rg) is not installed (apt install ripgrep)")
    with mounted(corpus, "--disk-cache", str(cache)) as m:
        grep(m.path, "needle")  # (no link read, none followed)
    finished(m)
    with mounted(corpus, "--disk-cache", str(cache), "--debug") as m:
        found = subprocess.run(["rg", "-c", "needle", str(m.path)], capture_output=True)
        assert found.returncode == 0
    assert parsed(finished(m)) == []


def test_a_later_mount_gives_the_kernel_each_file_at_its_open(corpus: Path, cache: Path) -> None:
    """A walk of a later mount reads unchanged sessions from the kernel's page cache: each
    file's bytes (all of a file under ``PUSH_BYTES``) are given to it at the file's open,
    so ``grep -r`` sends no read request, and finds what the first mount found."""
    with mounted(corpus, "--disk-cache", str(cache)) as m:
        want = grep(m.path, "needle")
    finished(m)
    with mounted(corpus, "--disk-cache", str(cache), "--debug") as m:
        assert grep(m.path, "needle") == want
    log = finished(m)
    assert " open(" in log  # (the walk opened the files: their reads are what is gone)
    reads = re.findall(r" read\(\d+, (\d+), \d+\)", log)
    assert all(int(off) >= PUSH_BYTES for off in reads), reads  # (the end of a big file)


def test_an_entry_saved_again_keeps_what_that_mount_did_not_make(
    corpus: Path, cache: Path, tmp_path: Path
) -> None:
    """A mount that answered a session from its entry, then parsed it for an entry folder
    (no conversation.md made), saves it again with the entry's conversation.md: a mount
    after it still reads it from there."""
    walked(corpus, cache)
    with mounted(corpus, "--disk-cache", str(cache), "--debug") as m:
        leaves = named(m.path / "hostile" / H1) / "leaves"
        leaf = next(p for p in leaves.iterdir() if not p.name.endswith(".md"))
        assert os.listdir(leaf)  # (an entry folder: the session is parsed)
    assert any("_h1" in line for line in parsed(finished(m)))
    third, log = walked(corpus, cache)
    assert parsed(log) == []
    fresh, _ = walked(corpus, tmp_path / "other", "--disk-cache", "off")
    assert third == fresh


def test_the_session_names_count_against_the_cap_and_in_status(tmp_path: Path) -> None:
    """The root's session names file is part of what the cache takes: ``pisessfs status``
    shows it, and the cap makes room for it (the oldest entries go first)."""
    folder = str(tmp_path / "cache")
    c = DiskStore(folder, 1 << 30, "mark", str(tmp_path))
    assert c.open()
    assert c.total_bytes() == 0
    row = [[1, 2, 3, 4, 5], "a name " * 200, "sid", "/cwd", False]
    c.names.keep_heads({str(tmp_path / f"s{i}.jsonl"): row for i in range(50)})
    assert c.settle(10)
    size = c.total_bytes()
    assert size > 50 * 1400
    c.close(10)
    again = DiskStore(folder, size + 100, "mark", str(tmp_path))  # (room for the names)
    assert again.open()
    assert again.total_bytes() == size and len(again.names.heads) == 50
    tree: store.File = ([(0, b"t" * 1000, False)], 1000)
    assert again.save(str(tmp_path / "s0.jsonl"), [1], {}, {"tree": tree})
    assert again.settle(10)
    assert len(again) == 0 and again.total_bytes() == size  # (the entry did not fit beside them)
    again.close(10)


def test_the_save_at_unmount_gives_up_after_its_time(tmp_path: Path) -> None:
    """A writer still busy (a big session's conversation.md made again) when the unmount's
    time is up is left behind: the daemon exits before a service manager kills it."""
    c = DiskStore(str(tmp_path / "cache"), 1 << 30, "mark", str(tmp_path))
    assert c.open()
    gate = threading.Event()

    def slow() -> bytes:
        gate.wait(10)
        return b"x"

    assert c.save(str(tmp_path / "a.jsonl"), [1], {}, {"tree": ([(0, slow, False)], 1)})
    start = time.monotonic()
    assert not c.settle(0.1)
    assert not c.close(0.2)
    assert time.monotonic() - start < 5
    gate.set()
    assert c.settle(10) and c.close(10)
    assert c.saved == 1


def test_a_session_dropped_in_this_mount_is_read_from_its_new_entry(tmp_path: Path) -> None:
    """A session the parse cache dropped: a read the kernel's page cache cannot answer
    (this VM's reclaim drops pages within seconds) is read from the entry the drop saved,
    not parsed again."""
    root, path = _one_session(tmp_path)
    store, v, c = _view_on(root, tmp_path / "cache")
    _, names = _listing(v, path)
    real = {n: v.content(names[n].ino) for n in ("tree.txt", "conversation.md")}
    store.session(str(path)).evict()
    assert store.session(str(path)).loaded is None
    c.settle()
    for name, data in real.items():
        later = v.keeping.later(names[name].ino)
        assert later is not None and v.keeping.from_store(later), name
        assert later.read(0, later.size) == data
        later.close()
    assert store.session(str(path)).loaded is None  # (not parsed)
    c.close()


HEAD_READ = ": head read"  # sessions.py: "<path>: head read" (a session named from its file)


def test_a_later_mount_names_its_sessions_without_reading_them(
    corpus: Path, cache: Path, tmp_path: Path
) -> None:
    """Naming a project's sessions read the head of each file at every mount: a later mount
    takes the names the last one kept, for files that are still the very files they were
    read from; a file that changed is read again, and shows what a fresh mount shows (a
    session whose first user message came between the mounts gets its slug)."""
    folder = corpus / "--hostile--"
    young = folder / "2026-03-02T09-20-00-000Z_young.jsonl"
    header = {"type": "session", "version": 3, "id": "young0", "timestamp": "2026-03-02T09:20:00Z"}
    young.write_text(json.dumps(header) + "\n")
    first, log1 = walked(corpus, cache)
    sessions = list(corpus.rglob("*.jsonl"))
    assert log1.count(HEAD_READ) == len(sessions)
    assert kept_names(cache) == {str(p) for p in sessions}
    assert any(k.endswith("-young0") for k in first)  # (no user message: no slug yet)

    line = {
        "type": "message",
        "id": "y1",
        "parentId": None,
        "timestamp": "2026-03-02T09:21:00.000Z",
        "message": {"role": "user", "content": "A first question, between the mounts"},
    }
    with young.open("a") as f:
        f.write(json.dumps(line) + "\n")
    second, log2 = walked(corpus, cache)
    fresh, _ = walked(corpus, tmp_path / "other", "--disk-cache", "off")
    assert second == fresh
    assert any(k.endswith("-a-first-question-between-the-mounts-young0") for k in second)
    (read,) = [ln for ln in log2.splitlines() if HEAD_READ in ln]  # the one that changed
    assert "_young.jsonl" in read

    third, log3 = walked(corpus, cache)
    assert third == fresh and HEAD_READ not in log3


def test_a_session_deleted_while_mounted_loses_its_kept_name(corpus: Path, cache: Path) -> None:
    """The kept names hold a slug of each session's first message: a session that goes
    takes its name out of the cache at once, not at the next unmount."""
    walked(corpus, cache)
    gone = next(p for p in corpus.rglob("*.jsonl") if p.name.endswith("_h1.jsonl"))
    assert str(gone) in kept_names(cache)
    with mounted(corpus, "--disk-cache", str(cache)) as m:
        seen(m.path)
        gone.unlink()
        wait_for(
            lambda: str(gone) not in kept_names(cache),
            10,
            "the deleted session's name gone from the cache",
        )
    finished(m)
    assert str(gone) not in kept_names(cache)


@pytest.mark.warns
def test_damaged_kept_names_are_not_used(corpus: Path, cache: Path) -> None:
    first, _ = walked(corpus, cache)
    with contextlib.closing(database(cache)) as db:
        db.execute("UPDATE heads SET row = ?", (b"garbage",))
    second, log = walked(corpus, cache)
    assert second == first
    assert "kept session names are unreadable" in log
    assert log.count(HEAD_READ) == len(list(corpus.rglob("*.jsonl")))
    with contextlib.closing(database(cache)) as db:
        rows = db.execute("SELECT row FROM heads").fetchall()
    assert rows and all(isinstance(orjson.loads(r), list) for (r,) in rows)


def test_a_kept_name_never_shows_what_a_folder_opened_since_lets_others_list(
    cache: Path,
) -> None:
    """A name kept while no one else could list the project showed its first message; once
    others may list it (but not read the file), the next mount names it without."""
    base = Path("/var/tmp") / f"pisessfs-kept-names-{os.getpid()}"  # reachable by every user
    shutil.rmtree(base, ignore_errors=True)
    project = base / "sessions" / "--private--"
    project.mkdir(parents=True)
    for d in (base, base / "sessions"):
        os.chmod(d, 0o755)
    f = project / "s.jsonl"
    header = {"type": "session", "version": 3, "id": "77777777-x", "timestamp": "2026-11-20T10:00Z"}
    line: dict[str, Any] = {"type": "message", "id": "a", "parentId": None}
    line["timestamp"] = "2026-11-20T10:00Z"
    line["message"] = {"role": "user", "content": "secret plan"}
    f.write_text(json.dumps(header) + "\n" + json.dumps(line) + "\n")
    os.chmod(f, 0o600)
    os.chmod(project, 0o700)
    try:
        with mounted(base / "sessions", "--disk-cache", str(cache)) as m:
            assert "2026-11-20T1000-secret-plan-77777777" in os.listdir(m.path / "private")
        finished(m)
        os.chmod(project, 0o755)
        with mounted(base / "sessions", "--disk-cache", str(cache)) as m:
            assert sorted(os.listdir(m.path / "private")) == ["2026-11-20T1000-77777777"]
        finished(m)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def resident(path: Path) -> int:
    """Bytes of ``path`` in the page cache (``fincore``, util-linux)."""
    out = subprocess.run(
        ["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout.strip() or 0)


@pytest.mark.parametrize("count", [12, 3])
def test_listing_a_project_reads_its_sessions_entries_ahead(
    corpus: Path, cache: Path, count: int
) -> None:
    """A later mount's walk reads each session's entry right after listing its project: the
    listing has the kernel read them ahead, so the walk does not wait for the disk at each.
    A big project and a small one (``layout.HEADS_INLINE``, once read on the loop): both
    are read ahead."""
    need(shutil.which("fincore") is not None, "fincore (util-linux) is not installed")
    big = corpus / "--many--"
    big.mkdir()
    source = next(p for p in corpus.rglob("*.jsonl") if p.name.endswith("_h1.jsonl"))
    for n in range(count):
        shutil.copyfile(source, big / f"2026-03-02T09-14-{n:02d}-120Z_m{n}.jsonl")
    walked(corpus, cache)
    ours = {str(p) for p in big.iterdir()}
    assert ours <= set(entries(cache))
    with contextlib.closing(database(cache)) as db:
        sizes = db.execute("SELECT path, size FROM texts").fetchall()  # (answers too)
    mine = [int(n) for p, n in sizes if bytes(p).decode("utf-8", "surrogatepass") in ours]
    ahead = sum(min(n, store.PREFETCH) for n in mine)
    db_file = cache / store.DB_NAME
    with mounted(corpus, "--disk-cache", str(cache)) as m:
        drop_caches("1")
        before = resident(db_file)
        most = 0

        def all_read_ahead() -> bool:  # (this machine's reclaim may drop them again soon)
            nonlocal most
            most = max(most, resident(db_file) - before)
            return most >= ahead

        os.listdir(m.path / "many")
        wait_for(all_read_ahead, 10, "the entries of the listed project in the page cache")
    finished(m)
