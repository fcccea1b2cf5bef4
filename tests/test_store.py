"""The disk store (``store.DiskStore``) on its own, without a mount: what is saved is read
back byte for byte, only for the file and the code it was made for; what is gone never
answers; two mounts may share the folder.

The mount-level behaviour (a later mount answers a walk from it) is in ``test_disk.py``.
"""

from __future__ import annotations

import errno
import functools
import os
import sqlite3
import stat
import threading
import weakref
from pathlib import Path

import pytest

from pisessfs import store
from pisessfs.database import Writer
from pisessfs.store import DiskStore, File
from tests.conftest import wait_for

IDENT = [1, 2, 3, 4, 5, 0o100644, 0, 0]


def opened(folder: Path, cap: int = 1 << 30, mark: str = "m", scope: str = "/s") -> DiskStore:
    c = DiskStore(str(folder), cap, mark, scope)
    assert c.open()
    return c


def one_file(data: bytes, parts: int = 3) -> File:
    """``data`` offered in ``parts`` parts, out of order, one of them made by the writer."""
    step = max(1, len(data) // parts)
    cuts = list(range(0, len(data), step))
    out: list[store.Part] = []
    for i, at in enumerate(reversed(cuts)):
        piece = data[at : at + step] if at != cuts[-1] else data[at:]
        out.append((at, functools.partial(bytes, piece) if i == 1 else piece, False))
    return out, len(data)


def test_what_is_saved_is_read_back_in_place_for_its_file_only(tmp_path: Path) -> None:
    text = os.urandom(300_000)
    c = opened(tmp_path)
    assert c.save("/s/a.jsonl", IDENT, {"attrs": [1]}, {"conv": one_file(text)})
    assert c.settle(10) and c.has("/s/a.jsonl") and c.saved == 1
    got = c.load("/s/a.jsonl", IDENT)
    assert got is not None and bytes(got.answers) == b'{"attrs":[1]}'
    where = c.reader(got, "conv", len(text))
    assert where is not None
    assert c.read(where, 0, len(text) + 10) == text
    assert c.read(where, 123_456, 1000) == text[123_456:124_456]
    assert c.reader(got, "conv", len(text) - 1) is None  # (not the size the kernel was told)
    assert c.load("/s/a.jsonl", [*IDENT[:-1], 7]) is None  # another file (or owner)
    assert not c.has("/s/a.jsonl")  # ... and the entry is gone for good
    assert c.settle(10)
    assert opened(tmp_path).load("/s/a.jsonl", IDENT) is None
    c.close()


def test_another_codes_entries_are_never_used(tmp_path: Path) -> None:
    c = opened(tmp_path, mark="old")
    assert c.save("/s/a.jsonl", IDENT, {}, {"tree": one_file(b"tree\n")}) and c.settle(10)
    c.close()
    c = opened(tmp_path, mark="new")
    assert c.load("/s/a.jsonl", IDENT) is None
    c.close()


def test_a_text_saved_again_is_never_read_at_its_old_place(tmp_path: Path) -> None:
    c = opened(tmp_path)
    assert c.save("/s/a.jsonl", IDENT, {}, {"tree": one_file(b"x" * 5000)}) and c.settle(10)
    first = c.load("/s/a.jsonl", IDENT)
    assert first is not None
    old = c.reader(first, "tree", 5000)
    assert old is not None
    assert c.save("/s/a.jsonl", IDENT, {}, {"tree": one_file(b"y" * 5000)}) and c.settle(10)
    with pytest.raises(OSError) as gone:
        c.read(old, 0, 10)
    assert gone.value.errno == errno.ESTALE
    c.close()


def test_the_oldest_entries_go_past_the_cap(tmp_path: Path) -> None:
    c = opened(tmp_path, cap=25_000)
    for n in range(5):
        assert c.save(f"/s/{n}.jsonl", IDENT, {}, {"tree": one_file(os.urandom(8000))})
        assert c.settle(10)
    assert [c.has(f"/s/{n}.jsonl") for n in range(5)] == [False, False, True, True, True]
    assert c.total_bytes() <= 25_000
    c.close()


def test_a_lower_cap_at_the_next_open_trims_the_oldest(tmp_path: Path) -> None:
    """The trim at open runs in the writer's transaction (it once opened one of its own
    inside it, and SQLite refused: nothing was trimmed)."""
    c = opened(tmp_path)
    for n in range(5):
        assert c.save(f"/s/{n}.jsonl", IDENT, {}, {"tree": one_file(os.urandom(8000))})
        assert c.settle(10)
    c.close()
    c = opened(tmp_path, cap=25_000)
    assert c.settle(10)
    assert [c.has(f"/s/{n}.jsonl") for n in range(5)] == [False, False, True, True, True]
    c.close()
    c = opened(tmp_path)
    assert len(c) == 3  # (removed from the database, not only forgotten)
    c.close()


def test_an_entry_another_process_wrote_is_learned(tmp_path: Path) -> None:
    """A render worker writes an entry with its own store: the mount's learns it, and the
    identities of this root's entries by this code are read in one go."""
    mine, theirs = opened(tmp_path), opened(tmp_path)
    assert theirs.save("/s/a.jsonl", IDENT, {}, {"tree": one_file(b"tree\n")}) and theirs.settle(10)
    other = opened(tmp_path, mark="other")
    assert other.save("/s/b.jsonl", IDENT, {}, {"tree": one_file(b"t")}) and other.settle(10)
    other.close()
    size = theirs.size_of("/s/a.jsonl")
    assert size is not None and not mine.has("/s/a.jsonl")
    mine.learn("/s/a.jsonl", size)
    assert mine.has("/s/a.jsonl") and mine.load("/s/a.jsonl", IDENT) is not None
    assert mine.idents() == {"/s/a.jsonl": "[1,2,3,4,5,33188,0,0]"}
    mine.close()
    theirs.close()


@pytest.mark.warns  # (the folder opened to others: "no disk cache")
def test_the_database_is_the_users_alone(tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    c = opened(folder)
    assert c.save("/s/a.jsonl", IDENT, {}, {"tree": one_file(b"t")}) and c.settle(10)
    c.close()
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for p in folder.iterdir():
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p
    folder.chmod(0o755)
    assert store.unusable(str(folder)) is not None
    assert not DiskStore(str(folder), 1 << 20, "m", "/s").open()


def test_two_mounts_share_one_folder(tmp_path: Path) -> None:
    """Two daemons (two sessions roots) on the default cache folder: each saves while the
    other does, and each finds its own entries, whole."""
    a, b = opened(tmp_path, scope="/a"), opened(tmp_path, scope="/b")
    texts = {n: os.urandom(20_000 + n) for n in range(30)}

    def save(c: DiskStore, root: str) -> None:
        for n, text in texts.items():
            assert c.save(f"{root}/{n}.jsonl", IDENT, {}, {"conv": one_file(text)})
        assert c.settle(30)

    threads = [threading.Thread(target=save, args=(c, r)) for c, r in ((a, "/a"), (b, "/b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for c in (a, b):
        c.close()
    for root in ("/a", "/b"):
        c = opened(tmp_path, scope=root)
        for n, text in texts.items():
            got = c.load(f"{root}/{n}.jsonl", IDENT)
            assert got is not None
            where = c.reader(got, "conv", len(text))
            assert where is not None and c.read(where, 0, len(text)) == text
        assert c.prune(lambda path: path.endswith("/0.jsonl")) == 1  # (its own root only)
        c.close()


def test_a_folder_name_with_uri_characters_and_a_loose_database_mode(tmp_path: Path) -> None:
    """The folder is any path (``?``, ``#`` and ``%`` are no URI here), and a database
    another program left readable by others is made the user's alone before it is used."""
    folder = tmp_path / "cache?mode=ro#x%41"
    folder.mkdir(mode=0o700)
    db = folder / store.DB_NAME
    db.touch()
    db.chmod(0o644)
    c = opened(folder)
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    assert c.save("/s/a.jsonl", IDENT, {}, {"tree": one_file(b"tree\n")}) and c.settle(10)
    got = c.load("/s/a.jsonl", IDENT)
    assert got is not None and c.copy(got, "tree") == b"tree\n"
    c.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == [folder.name]  # (nothing beside it)


def test_a_store_in_memory_reads_back_what_it_saved_and_keeps_to_its_cap(
    tmp_path: Path,
) -> None:
    """``--disk-cache off``: the same store in memory, for the mount alone. It writes
    nothing to any folder, answers as the one on disk does, and keeps to its cap."""
    c = DiskStore(None, 25_000, "m", "/s")
    assert c.open() and c.memory
    text = os.urandom(20_000)
    assert c.save("/s/a.jsonl", IDENT, {"attrs": [1]}, {"conv": one_file(text)})
    assert c.settle(10)
    got = c.load("/s/a.jsonl", IDENT)
    assert got is not None and bytes(got.answers) == b'{"attrs":[1]}'
    where = c.reader(got, "conv", len(text))
    assert where is not None and c.read(where, 5, 1000) == text[5:1005]
    for n in range(3):
        assert c.save(f"/s/{n}.jsonl", IDENT, {}, {"tree": one_file(os.urandom(8000))})
        assert c.settle(10)
    assert not c.has("/s/a.jsonl") and c.total_bytes() <= 25_000
    with pytest.raises(OSError) as gone:  # (its text went with it)
        c.read(where, 0, 10)
    assert gone.value.errno == errno.ESTALE
    c.close()
    assert list(tmp_path.iterdir()) == [] and not c.on


def test_a_store_in_memory_reads_while_its_writer_writes() -> None:
    """One connection serves the writer's thread and the readers: reads of one entry
    never fail nor give other bytes while others are saved and dropped meanwhile."""
    c = DiskStore(None, 1 << 30, "m", "/s")
    assert c.open()
    text = os.urandom(600_000)
    assert c.save("/s/kept.jsonl", IDENT, {}, {"conv": one_file(text)}) and c.settle(10)
    got = c.load("/s/kept.jsonl", IDENT)
    assert got is not None
    where = c.reader(got, "conv", len(text))
    assert where is not None
    done = threading.Event()

    def churn() -> None:
        for n in range(60):
            c.save(f"/s/{n % 7}.jsonl", IDENT, {}, {"conv": one_file(os.urandom(300_000))})
            if n % 3 == 0:
                c.drop(f"/s/{(n + 2) % 7}.jsonl")
        c.settle(30)
        done.set()

    t = threading.Thread(target=churn)
    t.start()
    reads = 0
    while not done.is_set() or reads < 50:
        at = (reads * 77_777) % len(text)
        assert c.read(where, at, 131_072) == text[at : at + 131_072]
        reads += 1
    t.join()
    c.close()


def test_the_writer_holds_no_job_it_did(tmp_path: Path) -> None:
    """Waiting for its next job, the writer's thread still held the last one in its loop's
    variable: a render worker kept the files of the last session it saved (80 MiB more
    after one of 105 MB)."""

    class Big:
        what = "a big job"

    writer: Writer[Big] = Writer(lambda: sqlite3.connect(tmp_path / "db"), lambda db, job: None)
    job = Big()
    done = weakref.ref(job)
    writer.put(job)
    del job
    assert writer.settle(10)
    wait_for(lambda: done() is None, 10, "the job let go")
    assert writer.stop(10)


def test_a_read_the_close_overtakes_says_closed(tmp_path: Path) -> None:
    """A read that found the store open, then waited for the read lock while the unmount
    closed it, says the store is closed (OSError, as a read after the close does): it read
    a connection that was gone, and the workers' end at unmount logged a traceback."""
    disk = opened(tmp_path)
    assert disk.settle(10)
    assert disk._db is not None
    real: sqlite3.Connection = disk._db

    class CloseWins:
        """The read lock, taken by the close first: what close() does under it."""

        def __enter__(self) -> None:
            real.close()
            disk._db = None

        def __exit__(self, *exc: object) -> None:
            return None

    disk._read = CloseWins()  # type: ignore[assignment]
    with pytest.raises(OSError) as closed:
        disk.query("SELECT count(*) FROM entries")
    assert closed.value.errno == errno.EBADF
    assert disk._writer.stop(10)
