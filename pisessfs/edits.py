"""Saving through the mount: write handles, the editors' dance, and when a save commits.

This module owns the write semantics of DESIGN.md ("Writing"): which new names become
messages (``*.md`` in a leaf or node folder) and which are scratch (swap files, backups,
temp files), in-place saves into a user message (a fork), rename-away and re-create (vim,
emacs), a temp file renamed over a message (``sed -i``, JetBrains), and the rule that one
changed save appends exactly one line. A commit is prepared here (synchronously), written by
``writer.write`` (the adapter runs it off the event loop) and finished here: the session is
re-read, bound names move to the new leaf, scratch follows ``current``, and the kernel
caches that changed are queued for invalidation.
"""

from __future__ import annotations

import codecs
import logging
import os
import stat
from dataclasses import dataclass, field
from typing import Any

from . import render, writer
from .kind import Kind
from .renames import Names
from .scratch import Binding, Node, binds_message
from .sessions import Loaded
from .view import Attr, Denied, Key, NotPermitted, View

log = logging.getLogger(__name__)

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_TRUNC | os.O_APPEND
_UTF8 = codecs.getincrementaldecoder("utf-8")


@dataclass(eq=False, slots=True)
class Handle:
    """An open file that may be written: a scratch node, or a private buffer of a message."""

    ino: int
    node: Node | None
    buf: bytearray | None
    binding: Binding | None
    append: bool
    folder: Key | None = None  # where a bound node was created (None: in place)
    dirty: bool = False
    refused: bool = False  # a write was refused: what the handle holds is never committed
    #: the first write refused, raised again at every later one (a program that goes on
    #: writing must not take the rest for saved)
    refusal: writer.Refused | None = None
    #: a message's bytes decoded as they are written, to refuse bytes that are not UTF-8 in
    #: ``write(2)`` itself (a shell's ``>`` reports nothing else); None once written out of
    #: order (then the save checks them whole)
    decoder: codecs.IncrementalDecoder | None = field(default_factory=_UTF8)
    decoded: int = 0  # bytes fed to ``decoder``

    @property
    def data(self) -> bytearray:
        if self.node is not None:
            return self.node.data
        assert self.buf is not None
        return self.buf

    def check(self, off: int, buf: bytes, cap: int) -> None:
        """Refuse a write of ``buf`` at ``off`` that goes past the cap (TooBig), or of a
        message's bytes that cannot be UTF-8 (NotUtf8)."""
        if off + len(buf) > cap:
            path = self.binding.path if self.binding else "scratch file"
            raise writer.TooBig(path, f"over the {cap}-byte cap")
        if self.binding is not None:
            self._decode(off, buf)

    def _decode(self, off: int, buf: bytes) -> None:
        """Feed a message's bytes written in order to its decoder (a character may be split
        across two writes): NotUtf8 at the first byte that cannot be UTF-8."""
        if self.decoder is None:
            return
        if off < self.decoded:  # written again below what was checked: the save checks it whole
            self.decoder = None
            return
        assert self.binding is not None
        try:
            self.decoder.decode(bytes(self.data[self.decoded : off]))  # (bytes there: an edit's)
            self.decoder.decode(buf)
        except UnicodeDecodeError as err:
            at = self.decoded + err.start if off == self.decoded else off
            raise writer.NotUtf8(self.binding.path, f"not UTF-8 at byte {at}") from None
        self.decoded = off + len(buf)

    def put(self, off: int, buf: bytes) -> None:
        """Write ``buf`` at ``off`` (a hole before it is zeros)."""
        if self.node is not None:
            self.node.write(off, buf)
        else:
            data = self.data
            if off > len(data):
                data.extend(bytes(off - len(data)))
            data[off : off + len(buf)] = buf
        self.dirty = True

    def truncate(self, size: int) -> None:
        if self.node is not None:
            self.node.truncate(size)
        else:
            assert self.buf is not None
            del self.buf[size:]
            self.buf.extend(bytes(size - len(self.buf)))
        self.dirty = True
        if size < self.decoded:  # (vim's ftruncate to 0): what comes is checked from the start
            self.decoder = _UTF8()
            self.decoded = 0


@dataclass(slots=True)
class Job:
    """A prepared commit: the line to append and what to do once it is in the file."""

    binding: Binding
    data: bytes  # what the file held when saved
    text: str  # the message text from it
    pending: writer.Pending
    node: Node | None
    folder: Key | None
    name: str | None  # the message name a rename committed onto
    old_current: Key | None


def _text_of(saved: str) -> str:
    """The message text in a saved file: CRLF read as LF, the file's final newline dropped."""
    return saved.replace("\r\n", "\n").removesuffix("\n")


class Editor:
    """Write handles and scratch-layer operations over a :class:`View`."""

    def __init__(self, view: View, cap: int = writer.DEFAULT_CAP) -> None:
        self.view = view
        self.cap = cap
        self.handles: dict[int, Handle] = {}
        self.names = Names(view, self)  # unlink and rename

    # -- creating and opening ---------------------------------------------------------------

    def create(  # noqa: PLR0917
        self, fh: int, parent: int, name: str, mode: int, uid: int = -1, gid: int = -1
    ) -> Attr:
        """A new file in an entry folder: a scratch file, or one bound to a new message.
        ``uid``/``gid``: its creator, shown as its owner (-1: the daemon's)."""
        folder = self._entry_folder(parent, f"create {name}")
        binding = self._binding_for_new(folder, name)
        node = self._new_node(stat.S_IFREG | (mode & 0o7777), uid, gid)
        node.binding = binding
        self.view.scratch.link(node, folder, name)
        self.handles[fh] = Handle(node.ino, node, None, binding, False, folder)
        return self.view.getattr(node.ino)

    def symlink(self, parent: int, name: str, target: bytes, uid: int = -1, gid: int = -1) -> Attr:
        folder = self._entry_folder(parent, f"symlink {name}")
        node = self._new_node(stat.S_IFLNK | 0o777, uid, gid)
        node.target = target
        self.view.scratch.link(node, folder, name)
        return self.view.getattr(node.ino)

    def _new_node(self, mode: int, uid: int, gid: int) -> Node:
        node = self.view.scratch.new_node(mode)
        if uid >= 0:
            node.uid = uid
        if gid >= 0:
            node.gid = gid
        return node

    def _entry_folder(self, parent: int, what: str) -> Key:
        folder = self.view.key(parent)
        if folder.kind == Kind.SEARCH_QUERY:  # (sed -i's temp file beside a result it edits)
            return folder
        if folder.kind != Kind.ENTRY:
            log.warning("%s refused (EACCES): new files go in a leaf or node folder", what)
            raise Denied(what)
        return folder

    def _binding_for_new(self, folder: Key, name: str) -> Binding | None:
        if folder.kind != Kind.ENTRY:
            return None  # a scratch file only: only renamed over a result does it save
        ov = self.view.scratch.overlays.get(folder)
        s = self.view.session(folder)
        if ov is not None and name in ov.whiteouts:
            # re-created after a rename-away (vim, emacs): saving it edits that message
            return self._edit_binding(s, self._message_key(folder, name))
        if ov is not None and name in ov.reserved:
            return ov.reserved.pop(name)  # a saved new file, re-created: edits its message
        if not binds_message(name):
            return None
        self._check(s)
        return Binding(s.path, s.epoch, folder.eid, None, b"")

    def _message_key(self, folder: Key, name: str) -> Key:
        return self.view.child_key(self.view.ino(folder), name)

    def _edit_binding(self, s: Loaded, key: Key) -> Binding:
        if key.kind != Kind.MESSAGE or key.k != 0:
            raise Denied(f"{key.kind} is not a message file")
        e = s.index.by_id.get(key.eid)
        if e is None or e.kind != "user":
            log.warning("write to %s refused (EACCES): only user messages can be edited", key.eid)
            raise Denied(key.eid)
        self._check(s)
        baseline = self.view.content(self.view.ino(key))
        return Binding(s.path, s.epoch, s.index.parent[key.eid], key.eid, baseline)

    def _check(self, s: Loaded) -> None:
        """Refuse at create/open what can be known then: shells ignore close() errors."""
        try:
            writer.check_writable(s)
            writer.check_unlocked(s)
        except writer.Refused as err:
            log.warning("write refused (%s): %s", err.kind, err)
            raise

    def open(self, fh: int, ino: int, flags: int) -> bool:
        """Open ``ino`` for writing if ``flags`` ask for it; False for a plain read."""
        key = self.view.key(ino)
        writing = bool(flags & _WRITE_FLAGS)
        append = bool(flags & os.O_APPEND)
        if key.kind == Kind.SCRATCH:
            node = self.view.scratch.nodes[ino]
            if writing and flags & os.O_TRUNC:
                node.truncate(0)
            self.handles[fh] = Handle(ino, node, None, node.binding, append)
            return True
        if not writing:
            return False
        if key.kind != Kind.MESSAGE:
            log.warning("write to %s refused (EACCES): not a message file", key.kind)
            raise Denied(key.kind)
        binding = self._edit_binding(self.view.session(key), key)
        # (O_TRUNC alone changes nothing yet: a shell's ``>`` closes a copy of the descriptor
        # before its command writes, and that flush must not save an empty message)
        buf = bytearray() if flags & os.O_TRUNC else bytearray(binding.baseline)
        self.handles[fh] = Handle(ino, None, buf, binding, append)
        return True

    # -- reading and writing ----------------------------------------------------------------

    def owns(self, fh: int) -> bool:
        return fh in self.handles

    def read(self, fh: int, off: int, size: int) -> bytes:
        return bytes(self.handles[fh].data[off : off + size])

    def write(self, fh: int, off: int, buf: bytes) -> int:
        """Write into a handle's bytes. Refused here, where every program sees it (EFBIG,
        EILSEQ): bytes past the cap, and bytes of a message that are not UTF-8; a refused
        new file's name goes (nothing of it is saved), and each later write is refused too."""
        h = self.handles[fh]
        if h.refusal is not None:
            raise h.refusal
        if h.append:
            off = len(h.data)
        try:
            h.check(off, buf, self.cap)
        except writer.Refused as err:
            log.warning("write refused (%s): %s", err.kind, err)
            h.refusal = err
            self._refused(h)
            raise
        h.put(off, buf)
        return len(buf)

    def holds(self, path: str) -> bool:
        """Whether a handle of this layer is open on session ``path``: a message being saved,
        or a scratch file of one of its folders (a swap file, a temp file), open at all."""
        for h in self.handles.values():
            if h.binding is not None and h.binding.path == path:
                return True
            if h.node is not None and any(folder.path == path for folder, _ in h.node.links):
                return True
        return False

    def writing(self, ino: int) -> bool:
        """Whether a handle is writing new bytes of message ``ino`` (readers then bypass the
        kernel's page cache and size, which the writer's writes move)."""
        return any(h.ino == ino and h.buf is not None for h in self.handles.values())

    def setattr(  # noqa: PLR0917
        self,
        ino: int,
        fh: int | None,
        size: int | None,
        mode: int | None,
        mtime_ns: int | None,
        uid: int | None = None,
        gid: int | None = None,
    ) -> Attr:
        """truncate, chmod, chown and utimens. A scratch file takes them all. Elsewhere a
        size only through a handle open for writing (a save); ``utimens`` is accepted and
        changes nothing (``touch``, editors); ``chmod``/``chown`` to what it has already
        are accepted (editors copy a file's mode and owner onto its new version), to
        anything else refused (EPERM: modes and owners are the session file's)."""
        h = self.handles.get(fh) if fh is not None else None
        node = self.view.scratch.nodes.get(ino)
        if node is None:
            self._same_owner_and_mode(ino, mode, uid, gid)
        if size is not None:
            if h is not None and h.ino == ino:
                h.truncate(size)
            elif node is not None:
                node.truncate(size)
            else:
                log.warning("truncate of inode %d refused (EACCES): open it for writing", ino)
                raise Denied("truncate")
        if node is not None:
            if mode is not None:
                node.mode = stat.S_IFMT(node.mode) | (mode & 0o7777)
            if mtime_ns is not None:
                node.mtime_ns = mtime_ns
            node.uid = node.uid if uid is None else uid
            node.gid = node.gid if gid is None else gid
        return self.view.getattr(ino)

    def _same_owner_and_mode(
        self, ino: int, mode: int | None, uid: int | None, gid: int | None
    ) -> None:
        a = self.view.getattr(ino)
        if (
            (mode is None or stat.S_IMODE(mode) == stat.S_IMODE(a.mode))
            and (uid is None or uid == a.uid)
            and (gid is None or gid == a.gid)
        ):
            return
        what = a.key.kind
        log.warning("chmod/chown of a %s refused (EPERM): its session file's are shown", what)
        raise NotPermitted(f"chmod/chown of {what}")

    # -- committing -------------------------------------------------------------------------

    def session_of(self, fh: int) -> str | None:
        """The session file a flush of ``fh`` may append to (the adapter serializes those)."""
        h = self.handles.get(fh)
        return h.binding.path if h is not None and h.binding is not None else None

    def prepare(self, fh: int) -> Job | None:
        """The commit a flush or fsync of ``fh`` makes, or None when nothing changed.

        The adapter calls it, writes and finishes under one lock per session file, so the
        bytes of a handle are claimed by one commit however many flushes race (a dup'd
        descriptor, two threads): the next one sees them saved.
        """
        h = self.handles.get(fh)
        if h is None or not h.dirty or h.binding is None or h.refused:
            return None
        try:
            job = self._job(h.binding, bytes(h.data), h.node, h.folder, None)
        except writer.Emptied:
            h.dirty = False  # (said once; not for good: text written after it is saved)
            raise
        except writer.Refused:
            self._refused(h)
            raise
        if job is None:
            h.dirty = False
        return job

    def _refused(self, h: Handle) -> None:
        """A refused new file is not left listed as if it were a message (shells ignore the
        error of close()): its name goes; a refused re-created message shows the original."""
        h.refused = True
        node = h.node
        if node is None or node.binding is None:
            return
        for folder, name in list(node.links):
            self.view.scratch.unlink(node, folder, name)
            self.view.scratch.whiteout(folder, name, False)

    def _job(
        self, binding: Binding, data: bytes, node: Node | None, folder: Key | None, name: str | None
    ) -> Job | None:
        if data == binding.baseline:
            log.debug("%s: unchanged save, nothing appended", binding.path)
            return None
        try:
            text = _text_of(writer.decode_text(binding.path, data, self.cap))
        except writer.Refused as err:
            log.warning("save refused (%s): %s", err.kind, err)
            raise
        if binding.baseline and text == _text_of(binding.baseline.decode("utf-8", "replace")):
            log.debug("%s: same text (line ends aside), nothing appended", binding.path)
            return None
        if not text.strip():
            if binding.edit_of is not None:
                log.warning("save refused (EPERM): %s: a message cannot be emptied", binding.path)
                raise writer.Emptied(binding.path, "a message cannot be emptied")
            log.info("%s: an empty new file stays a draft, nothing appended", binding.path)
            return None
        s = self.view.state(binding.path)
        if s.epoch != binding.epoch:
            log.warning("save refused (ESTALE): %s was rewritten since it was read", s.path)
            raise writer.Stale(s.path, "the file was replaced or rewritten since it was read")
        msg = writer.NewMessage(binding.parent_id, text, self._images(s, binding.edit_of))
        try:
            pending = writer.prepare(s, msg)
        except writer.Refused as err:
            log.warning("save refused (%s): %s", err.kind, err)
            raise
        return Job(binding, data, text, pending, node, folder, name, self._current_folder(s))

    def again(self, job: Job) -> Job:
        """The same commit prepared against the file as it is now (another writer appended)."""
        s = self.view.state(job.binding.path)
        msg = writer.NewMessage(
            job.binding.parent_id, job.text, self._images(s, job.binding.edit_of)
        )
        job.pending = writer.prepare(s, msg)
        return job

    def _images(self, s: Loaded, eid: str | None) -> tuple[dict[str, Any], ...]:
        if eid is None or eid not in s.index.by_id:
            return ()
        content = render.message_of(s.parsed(s.index.by_id[eid])).get("content")
        if not isinstance(content, list):
            return ()
        return tuple(b for b in content if isinstance(b, dict) and b.get("type") == "image")

    def _current_folder(self, s: Loaded) -> Key | None:
        resume = s.index.resume
        if resume is None:
            return None
        return Key(Kind.ENTRY, s.path, s.epoch, resume)

    def finish(self, job: Job) -> None:
        """After the line is in the file: re-read it, move names, queue invalidations."""
        s = self.view.state(job.binding.path)
        new = job.pending.entry_id
        new_folder = Key(Kind.ENTRY, s.path, s.epoch, new)
        binding = job.binding
        log.info("%s: appended user message %s under %s", s.path, new, binding.parent_id)
        for h in self.handles.values():
            if h.binding is binding and h.data == job.data:
                h.dirty = False  # bytes written meanwhile are still to be saved
        links = list(job.node.links) if job.node is not None else []
        if job.node is not None:
            self.view.scratch.unlink_everywhere(job.node)
        if job.node is not None and (binding.edit_of is None or binding.alias):
            # A new message: its name now stands for that message, in its own leaf folder
            # (where current/ leads), and saving it again edits it.
            binding.edit_of = new
            binding.alias = True
            self.view.scratch.link(job.node, new_folder, links[0][1] if links else f"{new}.md")
        else:
            for folder, name in links:  # an edit: the old folder shows the original again
                self.view.scratch.whiteout(folder, name, False)
            if job.node is not None:
                self._drop(job.node)
        if job.folder is not None and job.name is not None:
            self.view.scratch.whiteout(job.folder, job.name, False)
        binding.baseline = job.data
        if job.old_current is not None and self._through_current(job, s):
            self._follow(job.old_current, new_folder)
        self.view.changes.session(s.path)

    def _through_current(self, job: Job, s: Loaded) -> bool:
        """Whether the save was (likely) made through ``current/``: in its folder, or in
        place on a message of the branch ``current`` showed."""
        old = job.old_current
        if old is None:
            return False
        if job.folder is not None:
            return job.folder == old
        edited = job.binding.edit_of
        return edited is not None and edited in s.index.numbered_path(old.eid)

    def _follow(self, old: Key, new: Key) -> None:
        """Scratch files of the folder ``current`` showed follow it to the new leaf, so that
        an editor working through ``current/`` finds (and deletes) its swap and backup."""
        ov = self.view.scratch.overlays.get(old)
        if ov is None:
            return
        for name, node in list(ov.names.items()):
            if node.binding is None:
                self.view.scratch.link(node, new, name)

    def release(self, fh: int) -> Job | None:
        """A last chance to commit (errors here are lost: flush already tried)."""
        try:
            return self.prepare(fh)
        except Exception as err:
            log.warning("release: commit failed: %s", err)
            return None

    def close(self, fh: int) -> None:
        h = self.handles.pop(fh, None)
        if h is None:
            return
        if h.buf is not None:
            self.view.changes.inode(h.ino)  # the kernel may hold the bytes we were sent
        node = h.node
        if node is None or self._open(node):
            return
        binding = node.binding
        if binding is not None and binding.edit_of is not None and not h.dirty:
            # An unchanged save over a message (vim's rename-away and re-create): the stand-in
            # goes and the message shows again, with its own inode, times and id.
            for folder, name in list(node.links):
                ov = self.view.scratch.overlays.get(folder)
                if ov is not None and name in ov.whiteouts:
                    self.view.scratch.unlink(node, folder, name)
                    self.view.scratch.whiteout(folder, name, False)
        self._drop(node)

    def _open(self, node: Node) -> bool:
        return any(o.node is node for o in self.handles.values())

    def _drop(self, node: Node) -> None:
        self.view.scratch.drop_if_unused(
            node, {o.node.ino for o in self.handles.values() if o.node}
        )

    def forget(self, ino: int) -> None:
        """The kernel dropped ``ino``: a scratch node it named can go once unlinked."""
        node = self.view.scratch.nodes.get(ino)
        if node is not None:
            node.forgotten = True
            self._drop(node)

    # -- names (``renames``) -----------------------------------------------------------------

    def unlink(self, parent: int, name: str) -> None:
        self.names.unlink(parent, name)

    def rename(self, p_old: int, old: str, p_new: int, new: str, flags: int) -> Job | None:
        """Move a name; a scratch file renamed over a message name is a save (a Job)."""
        return self.names.rename(p_old, old, p_new, new, flags)
