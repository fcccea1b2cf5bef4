"""Races between the event loop and the threads that work beside it, each reproduced.

The mount runs blocking work (a whole parse, a render, ``--warm``'s drops, reading many
heads) in worker threads while the loop answers requests. Each test here puts the two
sides in the order that broke, with real threads or by injecting the other side's call at
the point where it came, and checks what a user would see. Needs nothing but Python.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from pisessfs import heads, naming, sessions
from pisessfs import inodes as inodes_module
from pisessfs.errors import Busy, settled
from pisessfs.kept import Kept
from pisessfs.kind import Kind
from pisessfs.loaded import INLINE_BYTES, YIELD, Identity
from pisessfs.sessions import SessionFile, Store
from pisessfs.view import Key, View
from tests.damaged import HEADER, line, user

R = TypeVar("R")


core = settled  # the core called as the adapter calls it, the work run inline


def chain(n: int, width: int, start: int = 0) -> bytes:
    """``n`` user messages of about ``width`` bytes, each the child of the one before (the
    header too when ``start`` is 0)."""
    data = b"" if start else line(HEADER)
    for i in range(start, start + n):
        text = f"message {i:05d} " + "lorem ipsum dolor " * (width // 18)
        data += line(user(f"{i:08x}", f"{i - 1:08x}" if i else None, text, i % 60))
    return data


def handed_out(v: View, ino: int, listing: bool = False) -> Callable[[], object]:
    """The blocking work ``ready`` hands back for ``ino`` (after what it does on the loop)."""
    while True:
        try:
            v.ready(ino, attr_only=not listing, listing=listing)
        except Busy as busy:
            if busy.work is not YIELD:
                return busy.work
        else:
            raise AssertionError("ready() handed back no work")


def big_session(tmp_path: Path, n: int = 400, width: int = 2000) -> str:
    """A session above :data:`INLINE_BYTES`: parsing it again is work for a thread."""
    (tmp_path / "--home-x--").mkdir(exist_ok=True)
    path = tmp_path / "--home-x--" / "s1.jsonl"
    path.write_bytes(chain(n, width))
    assert path.stat().st_size > INLINE_BYTES
    return str(path)


def parsed_past_the_cap(tmp_path: Path) -> tuple[View, sessions.Loaded, int]:
    """A big session parsed by a view as the mount's (``defer``), over a cap so small that
    a drop always has work; and the number of an entry folder of 400 messages."""
    path = big_session(tmp_path)
    v = View(Store(str(tmp_path), cache_bytes=1 << 10))
    s = core(v.up_to_date, path)
    return v, s, v.ino(Key(Kind.ENTRY, path, s.epoch, f"{399:08x}"))


def side_by_side(thread: Callable[[], object], loop: Callable[[], object]) -> None:
    """Call ``thread`` over and over in a worker thread while ``loop`` runs here, the two
    taking turns between any two bytecodes; fails with what the thread raised."""
    failed: list[BaseException] = []
    done = threading.Event()

    def again() -> None:
        try:
            while not done.is_set():
                thread()
        except BaseException as err:  # (reported by the main thread)
            failed.append(err)

    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    worker = threading.Thread(target=again)
    worker.start()
    try:
        loop()
    finally:
        done.set()
        worker.join()
        sys.setswitchinterval(before)
    assert not failed, failed


class Clock:
    """The sessions module's clock, moved by hand: a session idle for minutes without
    waiting for them."""

    def __init__(self) -> None:
        self.now = time.monotonic()

    def monotonic(self) -> float:
        return self.now

    @staticmethod
    def time_ns() -> int:
        return time.time_ns()


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(sessions, "time", c)
    return c


@pytest.mark.parametrize("answer_takes", [0.0, 1.0])
def test_a_warm_drop_never_takes_a_session_in_the_middle_of_an_answer(
    tmp_path: Path, clock: Clock, answer_takes: float
) -> None:
    """``--warm`` drops idle sessions: a thread makes each ready to go (``Store.leave``:
    its answers kept, which takes a while) and the loop lets it go between requests
    (``Store.let_go``). Dropped by the thread, a session went in the middle of an answer
    that was reading it (a walk's listing of an entry folder; one of thousands of messages
    takes longer than the drop waits for a session to be idle), and the answer was EIO."""
    v, s, edir = parsed_past_the_cap(tmp_path)
    store, path = v.store, s.path
    core(v.ready, edir, False, True)
    want = v.children(edir)
    clock.now += 60  # the session sits idle for a minute, then a walk comes back to it

    core(v.ready, edir, False, True)  # Operations._listing: ready, then children
    clock.now += answer_takes
    leaving = store.leave(0, 0.2)  # the warm-up's thread, meanwhile
    assert (leaving is not None) == (answer_takes > 0.2)  # (just used: it is not idle)
    assert v.children(edir) == want  # (Busy, answered EIO, when the thread dropped it)
    if leaving is not None:
        assert store.let_go(leaving)  # then, between requests, the loop lets it go
        assert store.session(path).loaded is None and store.held() < s.size


def test_a_session_used_after_a_thread_made_it_ready_to_drop_stays(
    tmp_path: Path, clock: Clock
) -> None:
    """A request that reads a session after the warm-up's thread made it ready to go (and
    before the loop let it go) keeps it: it is in use again."""
    v, s, edir = parsed_past_the_cap(tmp_path)
    store, path = v.store, s.path
    clock.now += 60
    leaving = store.leave(0, 0.2)
    assert leaving is not None
    clock.now += 0.001
    core(v.ready, edir, False, True)  # a walk comes to it meanwhile
    assert not store.let_go(leaving)
    assert store.session(path).loaded is s


def test_a_session_parsed_again_for_an_entry_folder_is_counted_against_the_cap(
    tmp_path: Path,
) -> None:
    """A dropped session parsed again because of a request on an entry folder or a message
    file (``cat current/0001-user.md`` after the cache let it go) was parsed by a thread
    and then answered on the hot path, which never counted it: it stayed parsed, outside
    the cap, for the rest of the mount."""
    v, s, edir = parsed_past_the_cap(tmp_path)
    store, path = v.store, s.path
    assert store.shrink(1, 0, 0.0) == 1 and store.held() == 0

    core(v.ready, edir)
    child = v.resolve(edir, v.children(edir)[0][0])
    core(v.ready, child)
    loaded = store.session(path).loaded
    assert loaded is not None
    assert store.held() >= loaded.size  # (what the view remembers is counted at its next step)
    assert store.shrink(1, 0, 0.0) == 1  # the cap can drop it again


@pytest.mark.parametrize("step", ["read", "index"])
def test_a_session_file_deleted_while_a_thread_parses_it_leaves_nothing_parsed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    """The watcher forgets a deleted file on the loop while a thread parses it whole (a cold
    parse of a big session takes seconds), as it reads the file or as it builds the index:
    the thread then kept its state, counted nowhere and never dropped, until the mount
    ended."""
    path = big_session(tmp_path)
    store = Store(str(tmp_path))
    sf = store.session(path)
    owner, name = (SessionFile, "_read_whole") if step == "read" else (sessions.Loaded, "rebuild")
    done = getattr(owner, name)

    def deleted_meanwhile(self: Any) -> Any:
        out = done(self)
        if os.path.exists(path):
            os.unlink(path)  # rm, or a move to the trash, while the thread parses
            store.forget(path)  # (what the watcher does on IN_DELETE, on the loop)
        return out

    monkeypatch.setattr(owner, name, deleted_meanwhile)
    work = sf.step()
    assert work == sf.reload  # the loop hands the whole parse to a thread
    assert work is not None
    work()
    assert sf.loaded is None
    assert store.held() == 0 and store.loaded_paths() == []


def test_a_render_that_ends_as_its_session_is_dropped_is_stored_with_it(tmp_path: Path) -> None:
    """A render thread gave its session back (no longer working on it) before it kept the
    rendering on the live state: a drop in between stored the session without it, and
    the next read of tree.txt parsed the session again."""
    path = big_session(tmp_path)
    store = Store(str(tmp_path), cache_bytes=64 << 20)
    v = View(store)
    v.disk = store.disk = store.in_memory_store()
    assert store.disk.open()
    s = core(v.up_to_date, path)
    sess = v.ino(Key(Kind.SESSION, path))
    core(v.ready, sess, False, False, set())
    v.looked_up(sess, "nodes", v.getattr(v.resolve(sess, "nodes")))  # (answers to keep)
    sf = v.store.session(path)
    dropped: list[int] = []

    class DroppedMeanwhile(set[tuple[str, str, int]]):
        """The request's set of renders it waited for: told right after the render."""

        def add(self, item: tuple[str, str, int]) -> None:
            dropped.append(v.store.shrink(1, 64 << 20, 0.0))  # (the loop's, or --warm's)
            super().add(item)

    work = v.wholes.render_step(sf, s, Kind.TREE, waited=DroppedMeanwhile())
    assert work is not None
    work()
    assert store.disk.settle(30)
    assert dropped == [1] and sf.loaded is None and s.ident is not None
    stored = store.disk.load(path, naming.file_ident(os.stat(path)))
    assert stored is not None and "tree" in stored.files


@pytest.mark.parametrize("asked", ["conv", "sess"])
def test_two_first_renders_of_a_conversation_across_an_append_agree_with_its_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, asked: str
) -> None:
    """Two requests render a big session's conversation.md for the first time (a lookup of
    it, or a listing of its session's folder), and the session grows between the first
    one's start and the second's: the first one to finish kept its text and the last one
    its size, and conversation.md read cut short (until the session changed again). Now
    renders of one file are made one at a time: the second starts once the first is done,
    and renders the entries appended since."""
    path = big_session(tmp_path, n=600)
    v = View(Store(str(tmp_path)))
    core(v.up_to_date, path)  # parsed first (not part of the race)
    started: list[threading.Event] = [threading.Event(), threading.Event()]
    go: list[threading.Event] = [threading.Event(), threading.Event()]
    render = v.wholes._conversation

    def held_up(frozen: sessions.Loaded) -> int:
        n = sum(e.is_set() for e in started)
        started[n].set()
        assert go[n].wait(30)
        return render(frozen)

    monkeypatch.setattr(v.wholes, "_conversation", held_up)
    conv = v.ino(Key(Kind.CONVERSATION, path))
    ino, listing = (
        (conv, False) if asked == Kind.CONVERSATION else (v.ino(Key(Kind.SESSION, path)), True)
    )
    a = threading.Thread(target=handed_out(v, ino, listing))
    a.start()
    assert started[0].wait(30)  # the first render has its copy of the session
    with open(path, "ab") as f:
        f.write(chain(2, 2000, start=600))  # Pi appends two entries
    b = threading.Thread(target=handed_out(v, ino, listing))  # (the append is read first)
    b.start()
    assert not started[1].wait(0.5)  # (a while: it waits for the first render, not the event)
    go[0].set()
    a.join()
    assert started[1].wait(30)
    go[1].set()
    b.join()
    monkeypatch.undo()

    core(v.ready, conv)
    s = core(v.up_to_date, path)
    fresh = View(Store(str(tmp_path)))
    want = fresh.wholes.conv_text(fresh.store.session(path).load())
    assert v.wholes.conv_size(s) == len(want)
    assert v.wholes.conv_text(s) == want


def test_a_copy_for_a_render_is_made_while_the_loop_adds_to_what_the_view_remembers(
    tmp_path: Path,
) -> None:
    """A render thread copies what the view derived from a session (``Loaded.frozen``)
    while the loop adds to it (a rendering, a folder's name): no copy fails for a key added
    meanwhile."""
    (tmp_path / "s.jsonl").write_bytes(chain(3, 10))
    s = Store(str(tmp_path)).session(str(tmp_path / "s.jsonl")).load()
    kinds = list(Kind)

    def add_and_drop() -> None:
        for i in range(20_000):
            s.memo.renders[kinds[i % len(kinds)]] = (i, b"")
            s.memo.folder[f"k{i % 50}"] = "x"
            if i % 3 == 0:
                s.memo.renders.pop(kinds[(i * 7) % len(kinds)], None)
                s.memo.folder.pop(f"k{(i * 7) % 50}", None)

    side_by_side(s.frozen, add_and_drop)


@pytest.fixture
def reachable() -> Iterator[Path]:
    """A folder every user may reach (pytest's own are the owner's only, and then no file
    in them is more private than another)."""
    base = Path(tempfile.mkdtemp(prefix="pisessfs-races-", dir="/var/tmp"))
    os.chmod(base, 0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("events", [1, 2])
def test_a_session_made_private_while_a_thread_reads_its_head_gets_no_name_from_its_text(
    reachable: Path, monkeypatch: pytest.MonkeyPatch, events: int
) -> None:
    """A folder of many new sessions has their heads read in a thread. A file made private
    (``chmod 600``) between the thread's look at its mode and its keeping the head: the
    watcher found no head to make again, the thread kept one from the old mode, and the
    session's folder name went on showing its first message to everyone. (With a second
    event while the thread checks the head again, a ``touch``: both dropped the head, and
    the second drop failed, so the folder's listing was answered EIO.)"""
    tmp_path = reachable
    proj = tmp_path / "--home-x--"
    proj.mkdir()
    os.chmod(proj, 0o755)
    f = proj / "s1.jsonl"
    f.write_bytes(line(HEADER) + line(user("a", None, "secret plan", 1)))
    os.chmod(f, 0o644)
    store = Store(str(tmp_path))
    read_head = heads.read_head

    def chmod_meanwhile(fd: int, stem: str, slug: bool = True) -> heads.Head:
        head = read_head(fd, stem, slug)
        os.chmod(f, 0o600)
        store.mode_changed(str(f))  # (what the watcher does on IN_ATTRIB, on the loop)
        return head

    monkeypatch.setattr(naming, "read_head", chmod_meanwhile)
    if events == 2:
        still_right = naming.Heads._still_right

        def touched_meanwhile(self: naming.Heads, path: str, head: heads.Head) -> bool:
            os.utime(f)
            store.mode_changed(path)  # (the watcher's second IN_ATTRIB)
            return still_right(self, path, head)

        monkeypatch.setattr(naming.Heads, "_still_right", touched_meanwhile)
    store.read_heads(store.unlisted(str(proj))[1])
    monkeypatch.setattr(naming, "read_head", read_head)
    head = store.head(str(f))
    assert head.hidden
    assert "secret" not in head.name


def test_the_inode_table_is_safe_to_name_from_a_thread_while_the_loop_scans_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--warm`` drops sessions in a worker thread, and a drop names the nodes it keeps
    (``View.ino``) while the loop scans the table (a chmod: ``changed_everything_of``;
    an inotify overflow: ``known_of``) or sweeps it: no scan fails for a name made
    meanwhile, and every name keeps one number."""
    monkeypatch.setattr(inodes_module, "UNHELD_KEPT", 512)
    v = View(Store(str(tmp_path)))
    keys = [Key(Kind.SESSION, f"/s/{i}.jsonl") for i in range(100_000)]
    failed: list[BaseException] = []

    def name_all() -> None:
        try:
            for k in keys:
                v.ino(k)
        except BaseException as err:  # (reported by the main thread)
            failed.append(err)

    worker = threading.Thread(target=name_all)
    worker.start()
    try:
        while worker.is_alive():
            v.known_of("sess")
            v.changes.everything_of("/s/1.jsonl")
            v.changes.invalidations.clear()
            v.ino(Key(Kind.SESSION, f"/loop/{len(failed)}"))
    except RuntimeError as err:
        pytest.fail(f"a scan of the table failed while a thread named: {err}")
    finally:
        worker.join()
    assert not failed
    numbers = {v.known(k) for k in keys} - {None}
    named = [k for k in keys if v.known(k) is not None]
    assert len(numbers) == len(named)
    for k in named:
        assert v.key(v.ino(k)) == k


def test_kept_answers_are_safe_to_look_up_from_a_thread_while_the_loop_gathers_others() -> None:
    """A ``--warm`` drop looks a session's kept answers up in a worker thread while the
    loop gathers other sessions', which pushes the oldest out: no lookup fails for it."""
    kept = Kept(limit=8)
    ident = Identity(1, 2, 3, 4)
    paths = [f"/s/{i}.jsonl" for i in range(64)]

    def look_up() -> None:
        for path in paths:
            kept.get(path, ident)
            kept.get(path, Identity(9, 9, 9, 9))  # a changed file: its answers go

    def gather() -> None:
        for _ in range(300):
            for path in paths:
                kept.of(path, ident)

    side_by_side(look_up, gather)


def test_renders_are_safe_to_keep_from_a_thread_while_the_loop_reads_them(tmp_path: Path) -> None:
    """A render thread keeps message files with their session, in a byte-capped LRU (pushing
    the oldest out), while the loop reads other ones from it: no read fails for one pushed
    out meanwhile, and the LRU counts each kept render once."""
    (tmp_path / "--home-x--").mkdir()
    ids = [f"{i:08x}" for i in range(1, 201)]
    data = line(HEADER)
    for i, eid in enumerate(ids):
        data += line(user(eid, ids[i - 1] if i else None, f"turn {i} " + "x" * 200, i % 60))
    path = str(tmp_path / "--home-x--" / "s1.jsonl")
    Path(path).write_bytes(data)
    v = View(Store(str(tmp_path)))
    s = core(v.up_to_date, path)
    s.memo.renders_kept.cap = 20 << 10  # about 60 message files
    keys = [Key(Kind.MESSAGE, path, s.epoch, eid) for eid in ids]

    def render_all() -> None:
        for k in keys:
            v.texts.rendered(s, k)

    def read_back() -> None:
        for _ in range(20):
            for k in reversed(keys):
                v.texts.rendered(s, k)

    side_by_side(render_all, read_back)
    kept = s.memo.renders_kept
    assert 0 < kept.bytes == kept.recounted() <= kept.cap
