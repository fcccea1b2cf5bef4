"""The disk cache: what a walk asked of a session, and its whole-session files, kept across
mounts, so that the first walk after a mount (after every reboot) is not a parse and a render
of a year of sessions.

A fresh mount knows nothing: its first ``grep -r`` over a year of sessions parsed and rendered
every one of them (26 to 36 times the raw JSONL's cold time; Python renders 11 to 13 MiB of
JSONL a second). A session file only grows, and what a mount shows of a file is a function of
its bytes. So what a mount told the kernel of a session (the answers ``kept`` gathers: its
folders' listings, attributes and link targets) and the bytes of its ``conversation.md``,
``tree.txt`` and ``session.json`` are written here when the mount is done with it (when the
parse cache drops it, and at a clean unmount), tied to the identity of the file they were made
from (device, inode, size, mtime, ctime, owner and mode) and to the code that made them. The
next mount answers a walk of an unchanged session from them without parsing it, reading the
text from here as it would from the shelf. Anything that does not match (the file grew, was
replaced, was chmodded; another version of pisessfs) is not used and is removed. Beside the
entries, one file per sessions root keeps each session's folder name (what the head of its
file said), so that naming a year of sessions does not open each one again.

Nothing leaks through it: the folder is the daemon user's own (``0700``, files ``0600``; a
folder that is anyone else's or open to others disables the cache), every access is relative
to its descriptor without following links, a session that is trashed or deleted loses its
entry, and a mount removes the entries of sessions that are gone. What a mount serves from an
entry is bounded, as ever, by the session file's mode now (the identity includes it).

It is a plain store (FUSE-free): the view decides what to save and when an entry may answer.
Writing runs in a thread of its own, never on the caller's.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import queue
import stat
import struct
import sys
import threading
import time
import unicodedata
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, BinaryIO, TypeVar

import msgspec
import orjson

log = logging.getLogger(__name__)

MAGIC = b"pisessfs cache 1\n"
_LEN = struct.Struct("<Q")
#: Bytes of a header at most: the answers of one session (``kept.KEPT_ANSWERS`` at most).
HEADER_MAX = 16 << 20
FIRST_READ = 8 << 10  # an entry's first read: its lead and, most often, its whole header
#: Bytes of an entry read ahead when its session's folder is listed (a walk reads the rest),
#: and of all the entries of one listing (an ``ls`` of a project of thousands of sessions
#: reads no more than that ahead).
PREFETCH = 1 << 20
PREFETCH_LISTING = 64 << 20
#: Uncompressed bytes waiting for the writer at most (more offered meanwhile: not saved).
QUEUE_BYTES = 64 << 20
SUFFIX = ".psc"
NAMES = ".names"  # a root's session names (one file per sessions root)
_TMP = ".tmp"
STALE_TMP_NS = 3600 * 10**9  # a half-written entry this old is no running mount's
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW
_READ_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW
_NEW_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW

#: One part of a file offered: its offset, its bytes (or what makes them, in the writer's
#: thread: a big session's groups of conversation.md that no one holds), and whether they
#: are zlib-compressed.
Part = tuple[int, bytes | Callable[[], bytes], bool]
#: A file offered: its parts and its size.
File = tuple[list[Part], int]
#: Which file an entry is: its device, inode, size and mtime (one saved again is another).
Which = tuple[int, int, int, int]
_H = TypeVar("_H", bound="_Header")


def text_out(s: str) -> str:
    """Any ``str`` (lone surrogates too: ids from JSON, names from the file system) as one
    JSON can hold; :func:`text_in` gives it back exactly."""
    return s.encode("utf-8", "surrogatepass").decode("latin-1")


def text_in(s: object) -> str:
    if type(s) is not str:
        raise ValueError("not a string")
    return s if s.isascii() else s.encode("latin-1").decode("utf-8", "surrogatepass")


def default_folder() -> str:
    """``$XDG_CACHE_HOME/pisessfs``, else ``~/.cache/pisessfs``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "pisessfs")


def code_mark() -> str:
    """What made an entry: this package's source and the Python that runs it (its Unicode
    tables make slugs and names): any change to them may change what a file shows, so an
    entry made by other code is never used."""
    here = os.path.dirname(os.path.abspath(__file__))
    h = hashlib.blake2b(digest_size=12)
    h.update(f"{sys.version}\0{unicodedata.unidata_version}\0".encode())
    for name in sorted(os.listdir(here)):
        if name.endswith(".py"):
            with open(os.path.join(here, name), "rb") as f:
                h.update(name.encode() + b"\0" + f.read())
    return h.hexdigest()


class _Header(msgspec.Struct):
    """What every header of the folder has (read back: each field is checked where used)."""

    mark: object = None
    scope: object = None
    total: object = None


class _EntryHeader(_Header):
    """An entry's header. Its answers stay JSON, for the view to read with its own types:
    decoding them here into lists and dicts, which the view then checked and copied field
    by field, cost a tenth of a later mount's cold walk (in instructions)."""

    path: object = None
    ident: object = None
    files: dict[str, tuple[int, int]] = {}
    answers: msgspec.Raw = msgspec.Raw()


class _NamesHeader(_Header):
    """The header of a root's session names file."""

    heads: object = None


_ENTRY = msgspec.json.Decoder(_EntryHeader)
_NAMES = msgspec.json.Decoder(_NamesHeader)


@dataclass(frozen=True, slots=True)
class Stored:
    """An entry read back: the answers as the view wrote them (JSON), where each file's
    bytes are in the entry's file (kind -> offset, size), and which file that was (device,
    inode, size, mtime: an entry saved again is another file, with other offsets)."""

    name: str
    answers: msgspec.Raw
    files: dict[str, tuple[int, int]]
    was: Which = (0, 0, 0, 0)


@dataclass(frozen=True, slots=True)
class _Job:
    """An entry to write: its first bytes, its parts, and whom to tell where it is."""

    path: str
    asked: int  # the entry's request number (a later save or drop makes it void)
    lead: bytes
    parts: list[Part]
    raw: int  # what it holds, as counted against QUEUE_BYTES
    files: dict[str, tuple[int, int]]
    saved: Callable[[Stored], None] | None


class _Heads:
    """The writer's job of writing the session names again."""


_HEADS = _Heads()


@functools.lru_cache(maxsize=1 << 16)
def _entry_name(path: str) -> str:
    """The file name of ``path``'s entry (asked at every request a kept answer serves)."""
    return hashlib.blake2b(os.fsencode(path), digest_size=16).hexdigest() + SUFFIX


def _which(fd: int) -> Which:
    return _which_is(os.fstat(fd))


def _which_is(st: os.stat_result) -> Which:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _folder(folder: str) -> tuple[int | None, str]:
    """The cache folder opened (made when missing, mode 700), or None and why it may not be
    used: it must be the daemon user's alone, as what it keeps shows what the sessions say."""
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        fd = os.open(folder, _DIR_FLAGS)
    except OSError as err:
        return None, f"{folder}: {err.strerror}"
    st = os.fstat(fd)
    if st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) & 0o077:
        os.close(fd)
        mode = stat.S_IMODE(st.st_mode)
        return None, (
            f"{folder} must be yours alone, it is uid {st.st_uid} mode {mode:o} (chmod 700 it)"
        )
    return fd, ""


def unusable(folder: str) -> str | None:
    """Why the cache folder cannot be used (the command line says so before mounting), or
    None when it can."""
    fd, why = _folder(folder)
    if fd is None:
        return why
    os.close(fd)
    return None


class DiskCache:
    """Entries by session file path, in one folder; at most ``cap`` bytes, oldest first out."""

    def __init__(self, folder: str, cap: int, mark: str, scope: str) -> None:
        """``mark``: what made the entries (:func:`code_mark` and the mount's options that
        change what it shows); ``scope``: the sessions root (its entries only are pruned)."""
        self.folder, self.cap, self.mark, self.scope = folder, cap, mark, scope
        self.fd = -1
        self._sizes: dict[str, int] = {}  # entry name -> its bytes (the entries there are)
        self._names_bytes = 0  # what the root's session names file takes (counted with them)
        self._lock = threading.Lock()
        self._todo: queue.Queue[_Job | _Heads | None] = queue.Queue()
        # Saves and drops per entry name: a queued write is made only if it is still the
        # last thing asked of its entry (a session trashed after it was saved stays gone).
        self._asked: dict[str, int] = {}
        self._waiting = 0
        self._thread: threading.Thread | None = None
        self.saved = 0  # entries written by this mount (status, tests)
        # What the head of each session file said (its folder's name), for the file as the
        # identity there says it was: path -> [identity, name, session id, cwd, hidden].
        self.heads: dict[str, list[Any]] = {}
        self._heads_queued = False
        self._heads_file = threading.Lock()  # (the writer's and the unmount's write of it)
        self._ahead: queue.SimpleQueue[list[str]] = queue.SimpleQueue()  # (``prefetch``)
        self._reader: threading.Thread | None = None
        self.used = 0  # entries that answered for a session

    # -- the folder -------------------------------------------------------------------------

    def open(self) -> bool:
        """Make (or check) the folder and learn its entries. False (and a warning) when it
        cannot be used: then nothing is read or written."""
        fd, why = _folder(self.folder)
        if fd is None:
            log.warning("no disk cache: %s", why)
            return False
        self.fd = fd
        old = time.time_ns() - STALE_TMP_NS
        for name in os.listdir(fd):
            if name.endswith(_TMP):  # a write a killed daemon left (not another mount's now)
                with contextlib.suppress(OSError):
                    if os.stat(name, dir_fd=fd, follow_symlinks=False).st_mtime_ns < old:
                        self._unlink(name)
            elif name.endswith(SUFFIX):
                with contextlib.suppress(OSError):
                    self._sizes[name] = os.stat(name, dir_fd=fd, follow_symlinks=False).st_size
        self._trim()
        self._load_heads()
        return True

    def __len__(self) -> int:
        return len(self._sizes)

    def total_bytes(self) -> int:
        """What the entries and the root's session names take."""
        with self._lock:
            return sum(self._sizes.values()) + self._names_bytes

    @property
    def on(self) -> bool:
        return self.fd >= 0

    def close(self, timeout: float | None = None) -> bool:
        """Write what is waiting, then stop (at unmount); False when the writer was not
        done after ``timeout`` seconds (it is left to the process's exit: what it had not
        written is not there, and its half-written file is removed by a later mount)."""
        if self._thread is not None:
            self._todo.put(None)
            self._thread.join(timeout)
            if self._thread.is_alive():
                return False  # (the folder stays open: the writer still uses it)
            self._thread = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        return True

    def settle(self, timeout: float | None = None) -> bool:
        """Wait until everything offered is written or given up (tests, unmount); False
        when that took more than ``timeout`` seconds."""
        if timeout is None:
            self._todo.join()
            return True
        end = time.monotonic() + timeout
        while self._todo.unfinished_tasks and time.monotonic() < end:
            time.sleep(0.01)
        return not self._todo.unfinished_tasks

    # -- entries ----------------------------------------------------------------------------

    def name(self, path: str) -> str:
        return _entry_name(path)

    def has(self, path: str) -> bool:
        """Whether there is an entry for ``path`` (a set lookup: no I/O)."""
        return self.on and self.name(path) in self._sizes

    def load(self, path: str, ident: list[int]) -> Stored | None:
        """The entry of ``path`` if it was made from the file ``ident`` describes, by this
        code, for a mount like this one. An entry that is not is removed."""
        found = self._found(path, ident)
        if found is None:
            return None
        name, head, was = found
        self.used += 1
        return Stored(name, head.answers, head.files, was)

    def holds(self, path: str, ident: list[int]) -> bool:
        """Whether there is an entry of ``path`` made from the file ``ident`` describes, by
        this code (its header read; ``--warm`` renders only the sessions that have none).
        An entry that is not is removed."""
        return self._found(path, ident) is not None

    def _found(self, path: str, ident: list[int]) -> tuple[str, _EntryHeader, Which] | None:
        """The name, header and identity of ``path``'s entry, when it holds for ``ident``."""
        name = self.name(path)
        if not self.on or name not in self._sizes:
            return None
        try:
            fd = self._open(name)
        except FileNotFoundError:
            self._forget(name)  # (removed by another mount sharing the folder)
            return None
        except OSError:  # (out of descriptors: the session answers for itself this time)
            return None
        try:
            head, was = self._header_which(fd, _ENTRY)
        except (OSError, ValueError) as err:
            log.warning("disk cache: %s of %s is unreadable (%s): removed", name, path, err)
            self.drop(path)
            return None
        finally:
            os.close(fd)
        if head.mark != self.mark or head.path != text_out(path):
            self.drop(path)
            return None
        if head.ident != ident:
            self.drop(path)  # the file moved on: this entry never answers again
            return None
        return name, head, was

    def _header_which(self, fd: int, decoder: msgspec.json.Decoder[_H]) -> tuple[_H, Which]:
        """A header as ``decoder`` reads it, and which file it heads (its ``fstat``). One
        read takes the lead and a header of up to :data:`FIRST_READ` (a session's answers:
        2 KiB). A header that is not one raises ValueError."""
        first = os.pread(fd, FIRST_READ, 0)
        lead = first[: len(MAGIC) + _LEN.size]
        if len(lead) != len(MAGIC) + _LEN.size or not lead.startswith(MAGIC):
            raise ValueError("not an entry")
        (size,) = _LEN.unpack(lead[len(MAGIC) :])
        if size > HEADER_MAX:
            raise ValueError("header too big")
        raw = first[len(lead) : len(lead) + size]
        if len(raw) < size:
            raw += os.pread(fd, size - len(raw), len(first))
        if len(raw) != size:
            raise ValueError("cut short")
        try:
            head = decoder.decode(raw)
        except msgspec.DecodeError as err:  # (a ValidationError too)
            raise ValueError(f"not an entry: {err}") from None
        total = head.total
        st = os.fstat(fd)
        if not isinstance(total, int) or st.st_size != total:
            raise ValueError("cut short")
        return head, _which_is(st)

    def reader(self, stored: Stored, kind: str, size: int) -> tuple[int, int] | None:
        """A descriptor of the entry (its own: the entry may be replaced meanwhile) and where
        in it file ``kind`` begins, when the entry holds ``size`` bytes of it."""
        where = stored.files.get(kind)
        if where is None or where[1] != size or not self.on:
            return None
        try:
            fd = self._open(stored.name)
        except OSError:
            return None
        if _which(fd) != stored.was:  # saved again meanwhile: other offsets, or gone
            os.close(fd)
            return None
        return fd, where[0]

    def copy(self, stored: Stored, kind: str, size: int) -> bytes:
        """File ``kind`` of an entry whole (the writer's: an entry saved again keeps what
        the mount that saves it did not make again)."""
        where = self.reader(stored, kind, size)
        if where is None:
            raise OSError(f"{stored.name} changed: its {kind} is not copied")
        fd, base = where
        try:
            data = os.pread(fd, size, base)
        finally:
            os.close(fd)
        if len(data) != size:
            raise OSError(f"{stored.name}: its {kind} is cut short")
        return data

    def drop(self, path: str) -> None:
        """Session ``path`` changed or went: its entry never answers again (nor does one
        queued for writing)."""
        if not self.on:
            return
        name = self.name(path)
        with self._lock:
            self._asked[name] = self._asked.get(name, 0) + 1
            there = name in self._sizes
        if there:
            self._remove(name)

    def _open(self, name: str, folder: int | None = None) -> int:
        """A descriptor of entry ``name``, read-only, not through a link (through the
        descriptor ``folder`` of the cache folder, if not the mount's)."""
        return os.open(name, _READ_FLAGS, dir_fd=self.fd if folder is None else folder)

    def _remove(self, name: str) -> None:
        self._unlink(name)
        self._forget(name)

    def _forget(self, name: str) -> None:
        with self._lock:
            self._sizes.pop(name, None)

    def _unlink(self, name: str) -> None:
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=self.fd)

    def prefetch(self, paths: list[str]) -> None:
        """Have the kernel read the first :data:`PREFETCH` bytes of the entries of ``paths``
        ahead, in a thread of its own: their folder is being listed, and a walk reads them
        next (a cold walk otherwise waits for the disk at each). Opening an entry after a
        cache drop waits for the disk too: the listing does not wait for these."""
        if not self.on:
            return
        with self._lock:
            if self._reader is None:
                # Its own descriptor of the folder: it may still be at work when the
                # mount's is closed at unmount (it ends with the process).
                folder = os.dup(self.fd)
                self._reader = threading.Thread(target=self._read_ahead, args=(folder,))
                self._reader.name, self._reader.daemon = "disk-ahead", True
                self._reader.start()
        self._ahead.put(paths)

    def _read_ahead(self, folder: int) -> None:
        while True:
            paths = self._ahead.get()
            with contextlib.suppress(Exception):  # (a hint: nothing depends on it)
                self._advise(folder, paths)

    def _advise(self, folder: int, paths: list[str]) -> None:
        budget = PREFETCH_LISTING
        for path in paths:
            name = self.name(path)
            size = self._sizes.get(name)
            if size is None:
                continue
            budget -= min(size, PREFETCH)
            if budget < 0:
                return
            try:
                fd = self._open(name, folder)
            except OSError:
                continue
            try:
                os.posix_fadvise(fd, 0, PREFETCH, os.POSIX_FADV_WILLNEED)
            except OSError:
                pass
            finally:
                os.close(fd)

    # -- session names ----------------------------------------------------------------------

    def _names_file(self) -> str:
        return _entry_name(self.scope)[: -len(SUFFIX)] + NAMES

    def _load_heads(self) -> None:
        """Read the session names the last mount of this root kept (none when there are
        none, or they are another code's or unreadable)."""
        try:
            fd = self._open(self._names_file())
        except OSError:
            return
        try:
            head, which = self._header_which(fd, _NAMES)
            self._names_bytes = which[2]  # (its size)
            heads = head.heads
            if head.mark != self.mark or head.scope != text_out(self.scope):
                return
            if isinstance(heads, dict):
                self.heads = {text_in(path): row for path, row in heads.items()}
        except (OSError, ValueError, UnicodeError) as err:
            log.warning("disk cache: the session names are unreadable (%s): not used", err)
        finally:
            os.close(fd)

    def kept_heads(self) -> dict[str, list[Any]]:
        with self._lock:
            return dict(self.heads)

    def keep_heads(self, heads: dict[str, list[Any]]) -> None:
        """Keep ``heads`` as the root's session names (at unmount: written at once)."""
        with self._lock:
            self.heads = dict(heads)
        if self.on:
            self._write_heads()

    def forget_head(self, path: str) -> None:
        """Session ``path`` is gone, or its bits changed: its name (a slug of its first
        message) is not kept; the names are written again in the writer's thread."""
        with self._lock:
            if self.heads.pop(path, None) is None or not self.on or self._heads_queued:
                return
            self._heads_queued = True
            self._start()
        self._todo.put(_HEADS)

    def prune_heads(self, gone: Callable[[str], bool]) -> int:
        """Forget the kept names of the sessions ``gone(path)`` says are no more (blocking:
        the prune thread at mount start); how many."""
        with self._lock:
            paths = list(self.heads)
        lost = [path for path in paths if gone(path)]
        for path in lost:
            self.forget_head(path)  # (one write for them all)
        return len(lost)

    def _write_heads(self) -> None:
        with self._lock:
            self._heads_queued = False
            heads = {text_out(path): row for path, row in self.heads.items()}
        head = {"mark": self.mark, "scope": text_out(self.scope), "heads": heads}
        try:
            lead, _ = self._framed(head, {}, 0)
        except (TypeError, ValueError) as err:
            log.warning("disk cache: the session names were not saved: %s", err)
            return
        if len(lead) > HEADER_MAX:
            log.info("disk cache: too many session names to keep (%d)", len(heads))
            self._unlink(self._names_file())
            self._names_bytes = 0
            return
        name = self._names_file()
        with self._heads_file:
            tmp = None
            try:
                tmp, _ = self._written(name, lambda out: out.write(lead))
                os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
                self._names_bytes = len(lead)
            except OSError as err:
                log.warning("disk cache: the session names were not saved: %s", err)
                if tmp is not None:
                    self._unlink(tmp)

    # -- writing ----------------------------------------------------------------------------

    def save(
        self,
        path: str,
        ident: list[int],
        answers: dict[str, Any],
        files: dict[str, File],
        saved: Callable[[Stored], None] | None = None,
    ) -> bool:
        """Write the entry of ``path`` (in the writer thread): the ``answers`` (JSON, made
        with :func:`text_out`) and each file's ``(parts, size)``; ``saved`` is told where
        it is, once it is there (from the writer's thread). False when there is no room for
        it now (the writer is behind) or no cache."""
        if not self.on:
            return False
        name = self.name(path)
        raw = sum(size for _, size in files.values())  # (what the writer holds, at most)
        layout: dict[str, list[int]] = {}
        at = 0
        parts_out: list[Part] = []
        for kind, (parts, size) in files.items():
            layout[kind] = [at, size]
            parts_out += [(at + off, data, packed) for off, data, packed in parts]
            at += size
        head: dict[str, Any] = {
            "mark": self.mark,
            "scope": text_out(self.scope),
            "path": text_out(path),
            "ident": ident,
            "answers": answers,
        }
        try:
            lead, where = self._framed(head, layout, at)
        except (TypeError, ValueError) as err:  # (a number past 64 bits: a hostile time)
            log.debug("disk cache: %s not saved: %s", path, err)
            return False
        with self._lock:
            if self._waiting and self._waiting + raw > QUEUE_BYTES:
                return False  # (a session bigger than that waits for an idle writer)
            self._waiting += raw
            asked = self._asked[name] = self._asked.get(name, 0) + 1
            self._start()
        self._todo.put(_Job(path, asked, lead, parts_out, raw, where, saved))
        return True

    def _start(self) -> None:
        """(Under the lock.) The writer thread, if it is not running yet."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._write_all, name="disk", daemon=True)
            self._thread.start()

    def busy(self) -> bool:
        """Whether the writer has entries still to write (read without the lock)."""
        return self._waiting > 0

    @staticmethod
    def _framed(
        head: dict[str, Any], layout: dict[str, list[int]], body: int
    ) -> tuple[bytes, dict[str, tuple[int, int]]]:
        """The entry's first bytes: its header, with every offset made absolute; and where
        each file is."""
        base = 0
        for _ in range(8):  # the header's size is in its offsets: until it stays put
            head["files"] = {k: [base + off, size] for k, (off, size) in layout.items()}
            head["total"] = base + body
            raw = orjson.dumps(head)
            if len(MAGIC) + _LEN.size + len(raw) == base:
                where = {k: (base + off, size) for k, (off, size) in layout.items()}
                return MAGIC + _LEN.pack(len(raw)) + raw, where
            base = len(MAGIC) + _LEN.size + len(raw)
        raise ValueError("the header's size did not settle")

    def _write_all(self) -> None:
        while True:
            item = self._todo.get()
            if item is None:
                self._todo.task_done()
                return
            if isinstance(item, _Heads):
                self._write_heads()
                self._todo.task_done()
                continue
            try:
                stored = self._write(item.path, item.asked, item.lead, item.parts, item.files)
                if stored is not None and item.saved is not None:
                    item.saved(stored)
            except Exception as err:  # a full disk, a bug: this entry is not written
                log.warning("disk cache: %s not saved: %s", item.path, err)
            finally:
                with self._lock:
                    self._waiting -= item.raw
                self._todo.task_done()

    def _write(
        self,
        path: str,
        asked: int,
        lead: bytes,
        parts: Iterable[Part],
        files: dict[str, tuple[int, int]],
    ) -> Stored | None:
        """Write an entry, unless it was dropped or saved again since it was asked for."""
        name = self.name(path)

        def write(out: BinaryIO) -> None:
            out.write(lead)
            for _, part, packed in sorted(parts, key=lambda p: p[0]):
                data = part() if callable(part) else part
                out.write(zlib.decompress(data) if packed else data)

        tmp, was = self._written(name, write)
        size = was[2]
        with self._lock:  # (a drop takes the lock too: it comes before, or after, all this)
            if self._asked.get(name) != asked:
                self._unlink(tmp)  # dropped, or saved again, since it was asked for
                return None
            os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
            self._sizes[name] = size
        self.saved += 1
        self._trim()
        log.debug("disk cache: %s saved (%d bytes)", path, size)
        return Stored(name, msgspec.Raw(), files, was)

    def _written(self, name: str, write: Callable[[BinaryIO], object]) -> tuple[str, Which]:
        """A temporary file beside ``name`` (mode 600) that ``write`` filled, and which file
        it is; removed again if writing failed. (Two mounts may share the folder: the
        temporary name is this process's.)"""
        tmp = f"{name}.{os.getpid()}{_TMP}"
        fd = os.open(tmp, _NEW_FLAGS, 0o600, dir_fd=self.fd)
        try:
            with os.fdopen(fd, "wb", closefd=False) as out:
                write(out)
            return tmp, _which(fd)
        except BaseException:
            self._unlink(tmp)
            raise
        finally:
            os.close(fd)

    def _trim(self) -> None:
        """Remove the oldest entries until all fit under the cap."""
        with self._lock:
            total = sum(self._sizes.values()) + self._names_bytes
            if total <= self.cap:
                return
            names = list(self._sizes)
        aged = []
        for name in names:
            with contextlib.suppress(OSError):
                st = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
                aged.append((st.st_mtime_ns, name))
        for _, name in sorted(aged):
            if total <= self.cap:
                break
            total -= self._sizes.get(name, 0)
            self._remove(name)

    # -- pruning ----------------------------------------------------------------------------

    def prune(self, gone: Callable[[str], bool]) -> int:
        """Remove the entries of this root's sessions for which ``gone(path)`` says the file
        is no more or that other code made, and those that cannot be read (blocking: a
        thread at mount start); how many went. Other roots' entries are their mounts' (one
        folder may serve several)."""
        removed = 0
        for name in list(self._sizes):
            try:
                fd = self._open(name)
            except OSError:
                continue
            try:
                head = self._header_which(fd, _ENTRY)[0]
                mark, scope, path = head.mark, text_in(head.scope), text_in(head.path)
            except (OSError, ValueError, UnicodeError):
                mark, scope, path = None, "", ""  # unreadable: never of use
            finally:
                os.close(fd)
            if mark is None or (scope == self.scope and (mark != self.mark or gone(path))):
                self._remove(name)
                removed += 1
        return removed
