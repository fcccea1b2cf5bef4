"""The core without FUSE, trio or Node: parsing, the tree, rendering, the layout.

Needs nothing but Python; runs on any machine.
"""

from __future__ import annotations

import logging
import os
import random
import re
import time
import weakref
from pathlib import Path
from typing import Any

import orjson
import pytest

from pisessfs import inodes as inodes_module
from pisessfs import layout, onefile, render, sessions
from pisessfs.errors import Busy
from pisessfs.jsonl import Parser
from pisessfs.kind import Kind
from pisessfs.loaded import INLINE_BYTES
from pisessfs.sessions import Store, Unreadable
from pisessfs.store import DiskStore
from pisessfs.tree import Index
from pisessfs.view import Key, NotFound
from tests import damaged
from tests.damaged import HEADER, enter, line, user
from tests.driven import Driven


def parse(data: bytes) -> Parser:
    p = Parser()
    p.feed(data)
    return p


def index(data: bytes) -> Index:
    p = parse(data)
    return Index([*p.entries, *([p.tail] if p.tail else [])])


def msg(eid: str, parent: str | None, etype: str = "label", sec: int = 1) -> dict[str, object]:
    return {
        "type": etype,
        "id": eid,
        "parentId": parent,
        "targetId": parent,
        "timestamp": f"2026-11-20T10:00:{sec:02d}.000Z",
        "label": "x",
    }


def test_children_are_ordered_by_timestamp_then_file_order() -> None:
    data = line(HEADER) + line(user("a", None, "root", 1)) + line(user("c", "a", "late", 9))
    data += line(user("b", "a", "early", 5)) + line(user("d", "a", "tie", 9))
    assert index(data).children["a"] == ["b", "c", "d"]


def test_leaves_hide_strict_prefixes_and_earlier_duplicates() -> None:
    data = line(HEADER) + line(user("a", None, "q1", 1)) + line(msg("l1", "a", sec=2))
    data += (
        line(user("b", "a", "q2", 3)) + line(msg("l2", "b", sec=4)) + line(msg("l3", "b", sec=5))
    )
    ix = index(data)
    assert ix.all_leaves() == ["l1", "l2", "l3"]
    # l1 shows [a] (a strict prefix of [a, b]); l2 and l3 both show [a, b]: the later wins
    assert ix.listed_leaves() == ["l3"]
    assert ix.numbered_path("l2") == ["a", "b"]
    assert ix.num["l1"] == 1 and ix.num["b"] == 2


def test_numbers_are_the_same_in_every_folder() -> None:
    data = line(HEADER) + line(user("a", None, "q", 1)) + line(msg("m", "a", "model_change", 2))
    data += line(user("b", "m", "x", 3)) + line(user("c", "m", "y", 4))
    ix = index(data)
    assert ix.numbered_path("b") == ["a", "b"] and ix.numbered_path("c") == ["a", "c"]
    assert ix.num["b"] == ix.num["c"] == 2


def test_cycle_is_broken_and_reported() -> None:
    data, _ = damaged.cases()["cycle"]
    ix = index(data)
    assert [p.kind for p in ix.problems] == ["cycle"]
    assert ix.path("0000000c") == ["0000000a", "0000000b", "0000000c"]


def test_duplicate_id_later_line_wins_like_pi() -> None:
    data, _ = damaged.cases()["duplicate-id"]
    p = parse(data)
    ix = Index(p.entries)
    assert ix.by_id["00000001"].line == 5
    assert ix.resume == "00000001"


def test_v1_gets_stable_ids_that_cannot_clash_with_real_ones() -> None:
    v1 = line({"type": "session", "id": "s", "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/"})
    v1 += line(
        {
            "type": "message",
            "timestamp": "2026-01-01T00:00:01.000Z",
            "message": {"role": "user", "content": "hi"},
        }
    )
    v1 += line(
        {
            "type": "message",
            "timestamp": "2026-01-01T00:00:02.000Z",
            "message": {"role": "assistant", "content": []},
        }
    )
    ix = index(v1)
    assert [e.id for e in ix.order] == ["L2", "L3"]
    assert ix.parent["L3"] == "L2" and ix.resume == "L3"
    assert not any(c in "0123456789abcdef" for c in "L")


def test_torn_tail_is_provisional_until_its_newline() -> None:
    whole = damaged.good() + line(user("0000000a", "00000002", "tail"))
    p = Parser()
    p.feed(whole[:-1])  # the line is complete JSON but has no newline yet: Pi loads it
    assert p.tail is not None and p.tail.id == "0000000a"
    p.feed(whole[-1:])
    assert p.tail is None and p.entries[-1].id == "0000000a"
    assert len(p.entries) == 4


def test_incremental_append_equals_a_full_parse(tmp_path: Path) -> None:
    f = tmp_path / "s.jsonl"
    data = damaged.good(5)
    f.write_bytes(data[:200])
    sf = Store(str(tmp_path)).session(str(f))
    sf.load()
    with f.open("ab") as out:
        out.write(data[200:])
    grown = sf.load()
    whole = index(data)
    assert [e.id for e in grown.index.order] == [e.id for e in whole.order]
    assert grown.index.listed_leaves() == whole.listed_leaves()
    assert grown.epoch == 0  # grown, not rewritten


def test_rewritten_file_gets_a_new_epoch(tmp_path: Path) -> None:
    f = tmp_path / "s.jsonl"
    f.write_bytes(damaged.good(3))
    sf = Store(str(tmp_path)).session(str(f))
    assert sf.load().epoch == 0
    f.write_bytes(damaged.good(4).replace(b"message number", b"MESSAGE NUMBER"))
    assert sf.load().epoch == 1


def test_a_file_written_anew_after_the_cap_dropped_it_gets_a_new_epoch(tmp_path: Path) -> None:
    """A session the cap dropped, then deleted and written anew at its path (an edit saved
    by rename, say), is another version: the kernel may still hold numbers of the old
    one's entry folders and messages, which must not show the new file's entries."""
    f = tmp_path / "s.jsonl"
    f.write_bytes(damaged.good(3))
    store = Store(str(tmp_path), cache_bytes=1)
    sf = store.session(str(f))
    assert sf.load().epoch == 0
    assert store.shrink(1, 0, 0.0) == 1 and sf.loaded is None
    f.unlink()
    store.forget(str(f))  # (the watcher, on IN_DELETE)
    f.write_bytes(damaged.good(3).replace(b"message number", b"MESSAGE NUMBER"))
    assert sf.load().epoch == 1


def test_user_file_is_exactly_the_text() -> None:
    d = orjson.loads(line(user("a", None, "hello\n\nworld")))
    assert render.render(d) == b"hello\n\nworld\n"
    two = {
        "type": "message",
        "message": {
            "role": "user",
            "content": [
                {"type": "text", "text": "one"},
                {"type": "image", "data": "aGk=", "mimeType": "image/png"},
                {"type": "text", "text": "two"},
            ],
        },
    }
    assert render.render(two) == b"one\n\ntwo\n"
    assert render.images(two) == [("png", b"hi")]


def test_assistant_file_shows_thinking_tools_model_and_abnormal_stop() -> None:
    d = {
        "type": "message",
        "message": {
            "role": "assistant",
            "provider": "anthropic",
            "model": "m1",
            "stopReason": "error",
            "errorMessage": "overloaded",
            "content": [
                {"type": "thinking", "thinking": "hmm", "thinkingSignature": "SIG"},
                {"type": "thinking", "thinking": "", "redacted": True},
                {"type": "text", "text": "Answer"},
                {"type": "toolCall", "id": "t", "name": "bash", "arguments": {"command": "ls -la"}},
            ],
        },
    }
    text = render.render(d).decode()
    assert "model: anthropic/m1" in text and "stop: error" in text and "overloaded" in text
    assert "hmm" in text and "redacted" in text and "SIG" not in text
    assert "Answer" in text and "ls -la" in text and "bash" in text


def test_names_are_sanitised() -> None:
    assert render.file_name(7, 4, "tool-a/b") == "0007-tool-a_b.md"
    assert render.sanitize("-.x") == "x"
    assert len(render.sanitize("é" * 300).encode()) <= 255
    assert render.number_width(10_000) == 5


def test_latest_names_only_the_newest_folder_off_the_loop(tmp_path: Path) -> None:
    """The root's ``latest`` reads the heads of the newest session's folder, no other: a
    first listing of a year of sessions read every head (each file scanned for its name)
    on the loop, seconds during which no request was answered. Those heads are read off
    the loop (the listing hands them back as work), and of several files changed at the
    same instant the greatest shown path wins, as before."""
    stamp = 1_790_000_000
    for p in range(3):
        folder = tmp_path / f"--p{p}--"
        folder.mkdir()
        for n in range(layout.HEADS_INLINE + 4):
            f = folder / f"s{n:02d}.jsonl"
            head = {**HEADER, "id": f"{p}{n:02d}aaaaaa-x"}
            f.write_bytes(line(head) + line(user("aaaaaaaa", None, f"question {n}", 1)))
            newest = p == 1 and n in (3, 7)  # two at the same instant, in p1
            os.utime(f, ns=((stamp + (100 if newest else n)) * 10**9,) * 2)
    v = Driven(Store(str(tmp_path)))
    with pytest.raises(Busy):  # the root's own listing needs p1's heads: work, not the loop
        v.view.ready(1, False, True, set())
    names = [n for n, _ in v.children(1)]
    assert names == ["p0", "p1", "p2", "latest", "search", "usage"]
    p1 = str(tmp_path / "--p1--")
    assert {os.path.dirname(p) for p in v.store.heads.known} == {p1}  # p0, p2: none read
    shown = {i.path: i.name for i in v.store.sessions_in(p1)}
    winner = max(shown[f"{p1}/s03.jsonl"], shown[f"{p1}/s07.jsonl"])
    assert v.readlink(v.lookup(1, "latest").ino) == f"p1/{winner}".encode()
    assert {os.path.dirname(p) for p in v.store.heads.known} == {p1}


def test_a_later_mount_takes_every_kept_name_before_the_roots_first_listing(
    tmp_path: Path,
) -> None:
    """On a later mount the store has every session's name: the root's first listing takes
    them all in one pass off the loop (stats, no file read), and no project's listing then
    waits for its own (a pass per project, each a trip off the loop and back, made a later
    mount's cold ``grep -r`` of 5,000 sessions 11% slower)."""
    root = tmp_path / "sessions"
    paths = set()
    for p in range(3):
        (root / f"--p{p}--").mkdir(parents=True)
        for n in range(layout.HEADS_INLINE + 4):
            f = root / f"--p{p}--" / f"s{n:02d}.jsonl"
            f.write_bytes(
                line({**HEADER, "id": f"{p}{n:02d}aaaaaa-x"})
                + line(user("aaaaaaaa", None, f"q {n}", 1))
            )
            paths.add(str(f))

    def mount() -> Driven:
        store = Store(str(root))
        disk = DiskStore(str(tmp_path / "cache"), 1 << 30, "mark", store.root)
        assert disk.open()
        v = Driven(store)
        v.view.disk = store.disk = disk
        return v

    first = mount()
    projects = [a.ino for n, a in first.children(1) if n.startswith("p")]
    for ino in projects:
        first.children(ino)
    first.store.disk.names.keep_heads(first.store.heads_to_keep())  # (as at unmount)
    first.store.disk.close(10)
    later = mount()
    with pytest.raises(Busy):
        later.view.ready(1, False, True, set())
    later.children(1)
    assert set(later.store.heads.known) == paths
    for ino in projects:
        later.view.ready(ino, False, True, set())  # (no Busy: nothing left to do off the loop)
    later.store.disk.close(10)


def test_a_projects_first_listing_is_made_off_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A project folder is scanned for its first listing (or a first look at it) by work
    handed off the loop, however few its sessions: after drop_caches one scan on the loop
    held every other request for 121 ms during a first walk, the render workers reading
    and writing."""
    folder = tmp_path / "--p--"
    folder.mkdir()
    for n in range(2):
        head = {**HEADER, "id": f"0{n}aaaaaa-x"}
        (folder / f"s{n}.jsonl").write_bytes(line(head) + line(user("aaaaaaaa", None, "q", 1)))
    os.utime(folder, (1_790_000_000, 1_790_000_000))  # (not changed in the listing's instant)
    v = Driven(Store(str(tmp_path)))
    item = v.store.find(v.store.root, "p")
    assert item is not None
    ino = v.view.ino(v.view.item_key(item))
    scanned: list[str] = []
    scan = v.store.files.scandir

    def counted(f: str) -> list[Any]:
        scanned.append(f)
        entries: list[Any] = scan(f)
        return entries

    monkeypatch.setattr(v.store.files, "scandir", counted)
    with pytest.raises(Busy) as busy:
        v.view.ready(ino, False, True, set())
    assert scanned == []  # (nothing read on the loop)
    busy.value.work()
    made = len(scanned)
    assert made and set(scanned) == {str(folder)}
    v.view.ready(ino, False, True, set())  # (made: nothing left to do)
    assert len(v.children(ino)) == 2 and len(scanned) == made


@pytest.mark.warns
def test_damaged_files_report_their_problems(tmp_path: Path) -> None:
    store = Store(str(tmp_path))
    for name, (path, kinds) in damaged.write_all(tmp_path / "d").items():
        s = store.session(str(path)).load()
        found = {p.kind for p in s.problems()}
        assert kinds <= found, (name, found)


def test_view_layout_of_a_session(tmp_path: Path) -> None:
    (tmp_path / "--home-x--").mkdir()
    f = tmp_path / "--home-x--" / "s1.jsonl"
    data = line(HEADER) + line(user("aaaaaaaa", None, "First question", 1))
    data += line(user("bbbbbbbb", "aaaaaaaa", "Second one", 2))
    f.write_bytes(data)
    v = Driven(Store(str(tmp_path)))
    proj = v.lookup(1, "home-x").ino
    sess = enter(v, proj, "s1")
    assert [n for n, _ in v.children(proj)] == ["2026-11-20T1000-first-question-dmg"]
    assert [n for n, _ in v.children(1)] == ["home-x", "latest", "search", "usage"]  # one latest
    assert v.readlink(v.lookup(1, "latest").ino) == b"home-x/2026-11-20T1000-first-question-dmg"
    assert [n for n, _ in v.children(sess)] == [
        "conversation.md",
        "current",
        "current.md",
        "leaves",
        "nodes",
        "tree.txt",
        "session.json",
        "session.jsonl",
    ]
    cur = v.lookup(sess, "current").ino
    assert v.readlink(cur) == b"leaves/bbbbbbbb-second-one"
    assert v.readlink(v.lookup(sess, "current.md").ino) == b"leaves/bbbbbbbb-second-one.md"
    leaves = v.lookup(sess, "leaves").ino
    assert [n for n, _ in v.children(leaves)] == [
        "bbbbbbbb-second-one",
        "bbbbbbbb-second-one.md",
    ]
    link = v.lookup(leaves, "bbbbbbbb-second-one").ino
    assert v.readlink(link) == b"../nodes/bbbbbbbb"
    assert v.lookup(leaves, "bbbbbbbb").ino == link  # the bare id resolves too
    assert v.readlink(v.lookup(leaves, "bbbbbbbb.md").ino) == b"../nodes/bbbbbbbb.md"
    nodes = v.lookup(sess, "nodes").ino
    assert v.children(nodes) == []
    leaf = v.lookup(nodes, "bbbbbbbb").ino
    files = dict(v.children(leaf))
    assert list(files) == ["0001-user.md", "0002-user.md"]
    assert v.content(files["0002-user.md"].ino) == b"Second one\n"
    assert files["0002-user.md"].size == len(b"Second one\n")
    assert v.xattrs(leaf) == {"user.pi.id": b"bbbbbbbb"}
    node = v.lookup(nodes, "aaaaaaaa").ino
    assert [n for n, _ in v.children(node)] == ["0001-user.md"]
    with pytest.raises(NotFound):
        v.lookup(nodes, "cccccccc")
    raw = v.lookup(sess, "session.jsonl").ino
    assert v.readlink(raw) == b".session.jsonl"
    assert v.content(v.lookup(sess, ".session.jsonl").ino) == data
    assert v.key(leaf) == Key(Kind.ENTRY, str(f), 0, "bbbbbbbb")
    # one copy of each text: conversation.md, with headings; the branch view the same bytes
    conv = v.content(v.lookup(sess, "conversation.md").ino)
    assert conv.count(b"First question\n") == 1 and conv.count(b"Second one\n") == 1
    assert conv.index(b"## 0001 user \xc2\xb7 aaaaaaaa") < conv.index(b"## 0002 user")
    branch = v.content(v.lookup(nodes, "bbbbbbbb.md").ino)
    assert branch == conv  # one straight line: the same entries, the same headings
    assert v.getattr(v.lookup(nodes, "bbbbbbbb.md").ino).size == len(branch)


def test_a_parsed_session_answers_from_kept_answers_until_its_file_changes(
    tmp_path: Path,
) -> None:
    """A warm walk gets a parsed session's folders as they answered last (a listing is not
    made again at every ``opendir``) while its file is unchanged; a change is seen at once."""
    (tmp_path / "--home-x--").mkdir()
    f = tmp_path / "--home-x--" / "s1.jsonl"
    f.write_bytes(line(HEADER) + line(user("aaaaaaaa", None, "First question", 1)))
    v = Driven(Store(str(tmp_path)))
    sess = enter(v, v.lookup(1, "home-x").ino, "s1")
    leaves = v.lookup(sess, "leaves").ino
    listings = {ino: v.children(ino) for ino in (sess, leaves)}
    assert str(f) in set(v.store.loaded_paths())  # parsed
    for ino, listing in listings.items():
        assert v.keeping.kept_listing(ino) == listing
    with open(f, "ab") as out:
        out.write(line(user("bbbbbbbb", "aaaaaaaa", "Second one", 2)))
    v.changes.session(str(f))  # what the watcher calls
    assert v.keeping.kept_listing(sess) is None and v.keeping.kept_listing(leaves) is None
    names = [n for n, _ in v.children(leaves)]
    assert names == ["bbbbbbbb-second-one", "bbbbbbbb-second-one.md"]


def test_answers_dropped_are_not_answered_again_by_the_last_session_asked(
    tmp_path: Path,
) -> None:
    """``kept`` finds the answers of the session it answered for last without asking the
    store again (a walk asks each session twenty times in a row); answers dropped since
    (a fork's parent moved, the limit pushed them out) must not come back that way."""
    (tmp_path / "--home-x--").mkdir()
    f = tmp_path / "--home-x--" / "s1.jsonl"
    f.write_bytes(line(HEADER) + line(user("aaaaaaaa", None, "First question", 1)))
    v = Driven(Store(str(tmp_path)))
    sess = enter(v, v.lookup(1, "home-x").ino, "s1")
    listing = v.children(sess)
    assert v.keeping.kept_listing(sess) == listing
    assert v.keeping.kept_listing(sess) == listing  # (the second from the last session asked)
    v.keeping.answers.drop(str(f))
    assert v.keeping.kept_listing(sess) is None


def test_unreadable_session_is_denied_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("ok", "locked"):
        (tmp_path / f"{name}.jsonl").write_bytes(damaged.good())
    real_open = os.open

    def fake_open(path: str, flags: int, *args: int, **kw: int) -> int:  # fault: EACCES
        if str(path).endswith("locked.jsonl"):
            raise PermissionError(13, "Permission denied", path)
        return real_open(path, flags, *args, **kw)

    monkeypatch.setattr(os, "open", fake_open)  # root reads any file: chmod cannot do this
    v = Driven(Store(str(tmp_path)))
    locked = v.lookup(1, "locked").ino
    with pytest.raises(Unreadable) as exc:
        v.children(locked)
    assert exc.value.errno == 13
    ok = enter(v, 1, "ok")
    assert "leaves" in dict(v.children(ok))


def reference_path(by_id: dict[str, dict[str, object]], eid: str) -> list[str] | None:
    """Pi's walk (getBranch), with a guard: None when the ancestry loops."""
    out: list[str] = []
    cur: object = eid
    while isinstance(cur, str) and cur in by_id:
        if cur in out:
            return None
        out.append(cur)
        parent = by_id[cur]["parentId"]
        cur = None if parent == cur else parent
    return out[::-1]


@pytest.mark.warns  # duplicates and orphans are reported
@pytest.mark.parametrize("seed", range(30))
def test_index_agrees_with_a_plain_walk_on_random_trees(seed: int) -> None:
    import random

    rnd = random.Random(seed)
    ids = [f"{i:08x}" for i in range(60)]
    lines: list[dict[str, object]] = []
    for i in range(80):
        eid = rnd.choice(ids[: i + 1]) if rnd.random() < 0.1 else ids[min(i, 59)]
        parent = (
            rnd.choice([None, *ids[: max(1, i)]])
            if rnd.random() < 0.3
            else (lines[-1]["id"] if lines else None)
        )
        etype = rnd.choice(["message", "message", "label", "model_change"])
        lines.append(
            {
                "type": etype,
                "id": eid,
                "parentId": parent,
                "targetId": eid,
                "timestamp": f"2026-01-01T00:00:{rnd.randrange(60):02d}.000Z",
                "message": {"role": "user", "content": "x"},
            }
        )
    rnd.shuffle(lines)
    ix = index(line(HEADER) + b"".join(line(x) for x in lines))
    by_id = {str(x["id"]): x for x in lines}  # later lines win, as in Pi
    kinds = {str(x["id"]): x["type"] for x in lines}
    for eid in by_id:
        want = reference_path(by_id, eid)
        if want is None:
            continue  # Pi would loop; ours is broken somewhere on the cycle
        assert ix.path(eid) == want
        assert ix.numbered_path(eid) == [i for i in want if kinds[i] == "message"]


def test_numbers_the_kernel_does_not_hold_are_swept_and_come_back_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The inode table keeps what the kernel holds (``hold`` .. ``forget``) and the names
    made in the last moments; a number made again, or handed to the kernel after a sweep,
    is the number it had."""
    monkeypatch.setattr(inodes_module, "UNHELD_KEPT", 4)
    (tmp_path / "--home-x--").mkdir()
    ids = [f"{i:08x}" for i in range(1, 41)]
    data = line(HEADER)
    for i, eid in enumerate(ids):
        data += line(user(eid, ids[i - 1] if i else None, f"turn {i}", i % 60))
    (tmp_path / "--home-x--" / "s1.jsonl").write_bytes(data)
    v = Driven(Store(str(tmp_path)))
    held = [v.lookup(1, "home-x")]
    held.append(v.lookup(held[0].ino, v.children(held[0].ino)[0][0]))
    held.append(v.lookup(held[1].ino, "nodes"))
    for a in held:
        v.hold(a)
    nodes = held[-1].ino
    seen = {eid: v.lookup(nodes, eid) for eid in ids}
    assert v.named()[0] <= 1 + len(held) + 2 * 4 + 1  # not one per name ever made
    again = {eid: v.lookup(nodes, eid) for eid in ids}
    assert [a.ino for a in again.values()] == [a.ino for a in seen.values()]
    for a in held:
        assert v.getattr(a.ino) == a  # what the kernel holds was never swept
    first = seen[ids[0]]
    v.hold(first)  # given to the kernel after its number was swept: named again
    assert v.key(first.ino) == first.key and v.getattr(first.ino) == first
    for eid in ids[1:]:
        v.lookup(nodes, eid)
    assert v.getattr(first.ino) == first
    v.forget(first.ino, 1)
    with pytest.raises(NotFound):
        v.key(first.ino)


def big_chain(n: int, width: int) -> bytes:
    """A session of ``n`` user messages of about ``width`` bytes each, mostly one after
    another (every 97th forks from two above), with a broken line in the middle."""
    data = line(HEADER)
    for i in range(n):
        text = f"message {i:05d} " + "lorem ipsum dolor " * (width // 18)
        parent = f"{i - (2 if i % 97 == 0 else 1):08x}" if i else None
        data += line(user(f"{i:08x}", parent, text, i % 60))
        if i == n // 2:
            data += b'{"type": "message", "id": \n'
    return data


@pytest.mark.warns  # the broken line, once per view
@pytest.mark.parametrize("packed", [0, 1 << 20, 64 << 20])
def test_a_big_conversation_is_held_in_part_and_reads_the_same_anywhere(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    packed: int,
) -> None:
    """conversation.md of a big session is not held whole: groups of entries a read needs
    are read from those held, those held compressed (``packed`` bytes of them at most), or
    made again, byte for byte what they were."""
    (tmp_path / "--home-x--").mkdir()
    (tmp_path / "--home-x--" / "s1.jsonl").write_bytes(big_chain(1500, 4000))

    def opened(v: Driven) -> int:
        proj = v.lookup(1, "home-x").ino
        return v.lookup(v.lookup(proj, v.children(proj)[0][0]).ino, "conversation.md").ino

    monkeypatch.setattr(onefile.Conversation, "held_bytes", 1 << 40)
    ref = Driven(Store(str(tmp_path)))
    whole = ref.content(opened(ref))  # made once, all of it held
    monkeypatch.setattr(onefile.Conversation, "held_bytes", 256 << 10)
    monkeypatch.setattr(onefile, "PACKED_BYTES", packed)
    v = Driven(Store(str(tmp_path)))
    ino = opened(v)
    assert v.getattr(ino).size == len(whole) > 5 << 20
    conv = v.wholes.conversation(v.session(v.key(ino)))
    assert conv.held() < (512 << 10) + packed  # a tenth of it, and what is packed
    assert [m.group(1) for m in re.finditer(rb"message (\d{5}) ", whole)] == [
        f"{i:05d}".encode() for i in range(1500)
    ]  # every entry once, in file order
    assert whole.count(b"continues from") == 1500 // 97 and whole.count(b"> problem: ") == 1
    snap = v.snapshot(ino)
    rng = random.Random(7)
    for _ in range(200):
        off, n = rng.randrange(len(whole)), rng.choice([1, 4096, 131072, 1 << 20])
        assert snap.read(off, n) == whole[off : off + n]
    assert snap.read(0, len(whole) + 10) == whole
    assert conv.held() < (512 << 10) + packed + 8 * onefile.GROUP_BYTES
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(said) == 2 and all("malformed-json" in m for m in said), said


@pytest.mark.warns  # (its broken line)
def test_a_big_session_let_go_is_freed_whole(tmp_path: Path) -> None:
    """A session read whole is put out of the collector's reach (``gc.freeze``), so what
    it made (its parse, conversation.md) is freed by reference counts alone once the store
    lets it go. A cycle among them (the parser held the state's own method) kept every big
    session a render worker had rendered: 550 MiB after two of 105 MB."""
    (tmp_path / "--home-x--").mkdir()
    path = tmp_path / "--home-x--" / "s1.jsonl"
    path.write_bytes(big_chain(600, 1500))
    assert path.stat().st_size > INLINE_BYTES  # (read whole, then frozen)
    store = Store(str(tmp_path), min_idle=0)
    v = Driven(store)
    proj = v.lookup(1, "home-x").ino
    folder = v.lookup(proj, v.children(proj)[0][0]).ino
    assert v.content(v.lookup(folder, "conversation.md").ino).count(b"message ") == 600
    sf = store.known(str(path))
    assert sf is not None and sf.loaded is not None and sf.loaded.memo.conversation is not None
    freed = [weakref.ref(sf.loaded), weakref.ref(sf.loaded.memo.conversation)]
    leaving = store.leaving(str(path))
    assert leaving is not None and store.let_go(leaving) and sf.loaded is None
    del leaving  # (it names the state let go)
    assert [r() for r in freed] == [None, None]


def test_utc_clock_is_the_c_librarys_to_the_second() -> None:
    from pisessfs.model import utc_clock

    rng = random.Random(8)
    edges = [0, 999, 59_999, 60_000, 86_399_999, 951_782_400_000, 253_402_300_799_999]
    for ms in edges + [rng.randrange(253_402_300_800_000) for _ in range(20_000)]:
        want = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms // 1000))
        assert utc_clock(ms) == want, ms
    assert utc_clock(-1) == "1969-12-31 23:59:59"  # before 1970: Pi's Date still shows it
    assert utc_clock(253_402_300_800_000) == "+010000-01-01 00:00:00"  # as a JS Date


@pytest.mark.warns  # (the damaged sessions' problems)
def test_each_line_is_decoded_once_for_all_whole_session_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """conversation.md, rendered first (a listing does), makes tree.txt's previews and
    session.json's stats from its own parses: the same bytes as when each is made alone."""
    from pisessfs.jsonl import decode_line
    from tests.conftest import fixture_files

    decoded = [0]

    def counting(raw: bytes, deep: bool = True) -> object:
        decoded[0] += 1
        return decode_line(raw, deep)

    monkeypatch.setattr("pisessfs.loaded.decode_line", counting)
    damaged_files = [path for path, _ in damaged.write_all(tmp_path / "damaged").values()]
    for n, f in enumerate(fixture_files() + damaged_files):
        (tmp_path / str(n)).mkdir()
        path = str(tmp_path / str(n) / f.name)
        path_b = str(tmp_path / str(n) / ("b-" + f.name))
        for p in (path, path_b):
            Path(p).write_bytes(f.read_bytes())
        together = Driven(Store(str(tmp_path)))
        s = together.up_to_date(path)
        lines = len(s.parser.entries)
        decoded[0] = 0
        together.wholes._render(s, Kind.CONVERSATION)
        # every line once at most (cached files: fewer), but a line whose id a later line
        # took, which is parsed for its note and renders as the winner
        lost = sum(1 for e in s.parser.entries if s.index.by_id.get(e.id) is not e)
        assert decoded[0] <= lines + lost, f.name
        decoded[0] = 0
        together.wholes._render(s, Kind.TREE)
        together.wholes._render(s, Kind.JSON)
        # (a leaf's folder name is made from its own text, once per leaf)
        assert decoded[0] <= len(s.index.all_leaves()), f.name
        alone = Driven(Store(str(tmp_path)))
        s_b = alone.up_to_date(path_b)
        for kind in (Kind.JSON, Kind.TREE):
            alone.wholes._render(s_b, kind)
            got, want = s.memo.renders[kind][1], s_b.memo.renders[kind][1]
            assert got.replace(b"b-", b"") == want.replace(b"b-", b""), (f.name, kind)
        for eid, e in s.index.by_id.items():  # each message file as rendered on its own
            if e.numbered:  # (a line whose id a later line took shares its files)
                shown = together.texts.rendered(s, Key(Kind.MESSAGE, path, s.epoch, eid))
                assert shown == alone.texts.rendered(
                    s_b, Key(Kind.MESSAGE, path_b, s_b.epoch, eid)
                ), eid


@pytest.mark.warns  # the broken line of the big session, and the damaged fixtures' problems
def test_a_dropped_sessions_files_are_read_from_the_store_in_memory_without_a_parse(
    tmp_path: Path,
) -> None:
    """Without a disk cache, a session the parse cache drops leaves conversation.md,
    tree.txt and session.json in the store in memory, within its share of the cap: a read
    the kernel's page cache cannot answer (a ``Later`` handle of kept answers) gets the same
    bytes without parsing it again; a changed file gets none of them."""
    from tests.conftest import fixture_files

    folder = tmp_path / "--home-x--"
    folder.mkdir()
    (folder / "big.jsonl").write_bytes(big_chain(400, 1500))  # several groups of entries
    for k in range(4):  # (with the examples alone, as in CI, more than the cap holds)
        (folder / f"chain{k}.jsonl").write_bytes(big_chain(300 + k, 1200))
    for f in fixture_files():
        (folder / f.name).write_bytes(f.read_bytes())
    cap = 8 << 20  # a few sessions parsed: each walked one drops an older one
    store = Store(str(tmp_path), cache_bytes=cap, min_idle=0)
    kept = store.in_memory_store()
    assert kept.open() and kept.memory and kept.cap == cap * sessions.SHARE
    v = Driven(store)
    v.view.disk = store.disk = kept
    proj = v.lookup(1, "home-x").ino
    whole: dict[int, bytes] = {}
    for _, a in v.children(proj):
        listing = dict(v.children(a.ino))  # renders the three; kept answers hold their sizes
        for n in ("conversation.md", "tree.txt", "session.json"):
            whole[listing[n].ino] = v.content(listing[n].ino)
        kept.settle()  # (what the dropped sessions left is counted from now on:)
        touched = store.known(v.key(a.ino).path)
        assert touched is not None
        store.touch(touched)  # at the next request, the cap holds again
        assert store.held() <= cap
    paths = {v.key(ino).path for ino in whole}
    assert len(paths) == len(fixture_files()) + 5
    parsed = set(store.loaded_paths())
    dropped = paths - parsed
    assert len(dropped) >= 4 and all(kept.has(p) for p in dropped)  # (the chains at least)
    assert 0 < kept.total_bytes() <= kept.cap
    for ino, data in whole.items():
        later = v.keeping.later(ino)
        assert later is not None and later.size == len(data)
        if v.key(ino).path in dropped:
            assert v.keeping.from_store(later)
        else:  # parsed (and unchanged: it answers from its kept answers too)
            assert not v.keeping.from_store(later)
            v.keeping.fill(later)  # read from its session
        assert later.read(0, len(data) + 1) == data
        assert later.read(len(data) // 3, 70_000) == data[len(data) // 3 :][:70_000]
    assert set(store.loaded_paths()) == parsed  # none parsed again
    # a file that changed: its stored files are not its own any more
    big = next(p for p in sorted(dropped) if "/chain" in p or p.endswith("/big.jsonl"))
    ino = next(i for i in whole if v.key(i).path == big and v.key(i).kind == "conv")
    later = v.keeping.later(ino)
    assert later is not None
    with open(big, "ab") as out:
        out.write(line(user("ffffffff", "00000001", "one more", 5)))
    v.changes.session(big)  # what the watcher calls
    assert not kept.has(big) and not v.keeping.from_store(later)
    kept.close()


@pytest.mark.warns  # (the damaged sessions' problems)
def test_conversation_md_gives_every_branch_views_size(tmp_path: Path) -> None:
    """Rendering conversation.md keeps the size of each entry's ``nodes/<id>.md`` (rg stats
    where every link leads): exactly the bytes of that view, for every leaf at least."""
    from tests.conftest import fixture_files

    damaged_files = [path for path, _ in damaged.write_all(tmp_path / "damaged").values()]
    checked = 0
    for n, f in enumerate(fixture_files() + damaged_files):
        if f.stat().st_size > 4 << 20:
            continue  # (the huge line: its size is checked the long way elsewhere)
        (tmp_path / str(n)).mkdir()
        path = tmp_path / str(n) / f.name
        path.write_bytes(f.read_bytes())
        v = Driven(Store(str(tmp_path / str(n))))
        s = v.store.session(str(path)).load()
        v.wholes.conv_text(s)  # as a listing of the session folder renders it
        sizes = dict(s.memo.branch_sizes)
        if f not in damaged_files:  # (a duplicate id or an orphan may come before its parent)
            assert set(v.texts.listed(s)) <= sizes.keys(), f
        fresh = Driven(Store(str(tmp_path / str(n))))
        fs = fresh.store.session(str(path)).load()
        some = sorted(sizes)[:: max(1, len(sizes) // 50)] + v.texts.listed(s)
        for eid in set(some) & sizes.keys():
            assert sizes[eid] == len(fresh.texts.branch_text(fs, eid)), (f, eid)
            checked += 1
    assert checked > 100


# -- output as code ----------------------------------------------------------------------------


def _result(text: str, tool: str = "bash") -> dict[str, object]:
    msg: dict[str, object] = {"role": "toolResult", "toolName": tool, "toolCallId": "c1"}
    msg["content"] = [{"type": "text", "text": text}]
    return {"type": "message", "id": "r1", "timestamp": "2026-03-02T09:15:27.000Z", "message": msg}


def test_tool_output_is_a_code_block_in_the_language_of_the_file_read() -> None:
    """pytest's banners, source and JSON are not Markdown: a tool's output is a fenced
    block, tagged with the language of the file a read read, its fence longer than any
    backtick run in it; a user's bash output is one too; a user message stays its text."""
    read = {"name": "read", "arguments": {"path": "recipe_box/parser.py"}}
    got = render.render(_result("import re\n", "read"), render.Context(call=read)).decode()
    assert got.endswith("\n\n```python\nimport re\n```\n")
    bash = {"name": "bash", "arguments": {"command": "pytest -q"}}
    out = "==== 3 passed ====\n```\nnot a fence\n```"
    got = render.render(_result(out), render.Context(call=bash)).decode()
    assert got.endswith("\n\n````\n" + out + "\n````\n")
    assert got.startswith("call: $ pytest -q\n")
    json_out = render.render(_result('{"a": "b\\nc"}'), render.Context(call=bash)).decode()
    assert '```\n{"a": "b\\nc"}\n```\n' in json_out
    user_bash: dict[str, object] = {"type": "message", "id": "b1"}
    user_bash["timestamp"] = "2026-03-02T09:15:27.000Z"
    user_bash["message"] = {"role": "bashExecution", "command": "ls", "output": "a\nb\n"}
    assert render.render(user_bash).decode().endswith("$ ls\n```\na\nb\n```\n")
    user: dict[str, object] = {"type": "message", "id": "u1"}
    user["timestamp"] = "2026-03-02T09:15:27.000Z"
    user["message"] = {"role": "user", "content": "see `x` and\n```\ncode\n```"}
    assert render.render(user) == b"see `x` and\n```\ncode\n```\n"


def test_kept_answers_count_against_their_share_of_the_cap() -> None:
    """What the folders of dropped sessions answered is counted (``ANSWER_COST`` each) as
    it is gathered, and the least recently used sessions' answers go past the cap."""
    from pisessfs.kept import ANSWER_COST, Kept
    from pisessfs.sessions import Identity

    kept = Kept(cap=10 * ANSWER_COST)
    ident = Identity(1, 2, 3, 4, 5, 6, 7)
    first = kept.of("s0", ident)
    assert first.room(4) and kept.bytes == 4 * ANSWER_COST
    for n in range(1, 4):
        assert kept.of(f"s{n}", ident).room(3)
    # s0 (4) + s1..s3 (9) went past 10 answers at the last gathering: counted at once,
    # and dropped from the oldest at the next one
    assert kept.bytes == 13 * ANSWER_COST
    kept.of("s4", ident)
    assert kept.get("s0", ident) is None and kept.bytes <= 10 * ANSWER_COST
    kept.drop("s3")
    assert kept.bytes == 6 * ANSWER_COST and len(kept) == 3
    assert first.room(1) and kept.bytes == 6 * ANSWER_COST  # (dropped: no longer counted)
    again = kept.of("s2", Identity(1, 2, 3, 4, 5, 6, 8))  # the file changed: counted anew
    assert again.count == 0 and kept.bytes == 3 * ANSWER_COST


def test_the_parse_cache_counts_the_answers_it_keeps(tmp_path: Path) -> None:
    """One cap: what the parse cache holds is the parsed sessions and the answers kept."""
    (tmp_path / "--home-x--").mkdir()
    (tmp_path / "--home-x--" / "s1.jsonl").write_bytes(damaged.good(3))
    store = Store(str(tmp_path))
    v = Driven(store)
    sess = enter(v, v.lookup(1, "home-x").ino, "s1")
    v.children(sess)
    parsed = store.session(v.key(sess).path).loaded
    assert parsed is not None and len(store.answers) >= 1 and store.answers.bytes > 0
    assert store.held() >= store.answers.bytes + parsed.size


def test_a_session_is_named_for_its_last_name_pi_shows(tmp_path: Path) -> None:
    """The slug is of the session's name (the last ``session_info`` with a name that is not
    blank, as Pi's picker shows it) when it has one, else of its first user message; the
    word in a message's text, a blank name, or a line cut short name nothing."""
    from pisessfs import heads

    def named(*lines: dict[str, object], tail: bytes = b"") -> str:
        f = tmp_path / "s.jsonl"
        f.write_bytes(b"".join(line(d) for d in [HEADER, *lines]) + tail)
        fd = os.open(f, os.O_RDONLY)
        try:
            return heads.read_head(fd, "s").name
        finally:
            os.close(fd)

    def info(eid: str, name: object) -> dict[str, object]:
        return {"type": "session_info", "id": eid, "parentId": "a", "name": name}

    first = user("a", None, "first question", 1)
    assert named(first) == "2026-11-20T1000-first-question-dmg"
    assert (
        named(first, info("b", "Fix fraction parsing"))
        == "2026-11-20T1000-fix-fraction-parsing-dmg"
    )
    later = [info("b", "Old name"), user("c", "b", "type session_info please", 2)]
    assert named(first, *later, info("d", "  ")) == "2026-11-20T1000-old-name-dmg"
    assert named(first, info("b", "One"), info("c", "Two")) == "2026-11-20T1000-two-dmg"
    assert named(first, info("b", 7)) == "2026-11-20T1000-first-question-dmg"
    torn = b'{"type":"session_info","id":"z","name":"half'
    assert named(first, tail=torn) == "2026-11-20T1000-first-question-dmg"
    filler = [user(f"{n:08x}", "a", "x" * 4000, 3) for n in range(300)]  # past a block
    assert named(first, info("b", "Far back"), *filler) == "2026-11-20T1000-far-back-dmg"
