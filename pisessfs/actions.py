"""Session actions from the shell: naming, labelling and trashing (DESIGN.md, "Session actions").

This module owns what Pi's ``/name``, ``/tree`` labels and ``/resume`` delete do, done with
ordinary commands on the mount:

- ``setfattr -n user.pi.name`` on a session folder and ``user.pi.label`` on a message file or
  entry folder become one ``session_info`` or ``label`` line, exactly as Pi's
  ``appendSessionInfo`` and ``appendLabelChange`` write them (``writer.prepare_entry``); the
  values are checked first (UTF-8, no line break or NUL, at most :data:`VALUE_CAP` bytes) and
  trimmed as Pi trims them. ``setfattr -x`` appends the clear Pi writes.
- ``rmdir SESSION`` (the last step of ``rm -r SESSION``) moves the session file to the
  requesting user's trash, by the freedesktop.org Trash specification as the Send2Trash
  library implements it, in a child process that reaches the file through a descriptor of
  its folder (no link followed) and only ever renames it: a move that would need a copy is
  refused. Nothing here unlinks a session file.
- While a recursive removal (``rm -r``, ``find -delete``, ``shutil.rmtree``) walks a session
  folder, its removals of what is inside answer success and change nothing, so that its last
  step, the session folder, is reached: :class:`Walks` tells such a walk (the process holds
  the session folder and the folder it removes in open, as ``/proc`` shows) from a single
  ``rm FILE`` (EPERM, as
  before), and notes what it removed: a folder it did not empty (``rm -r`` at a terminal told
  "n" for a file) answers ENOTEMPTY, as any file system does, and the session stays.

It is synchronous and FUSE-free: it raises exceptions that ``fuse_ops`` maps to errno, and
:func:`trash` blocks (the adapter runs it off the event loop, under the session's lock).
"""

from __future__ import annotations

import errno
import logging
import os
import pwd
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from . import layout, writer
from .kind import Kind
from .model import js_trim
from .sessions import Loaded
from .view import ROOT_INO, Key, View

log = logging.getLogger(__name__)

NAME = "user.pi.name"
LABEL = "user.pi.label"
#: The longest name or label accepted, in bytes of UTF-8: a title, not a document (Pi itself
#: has no cap; the kernel's is 64 KiB per attribute value).
VALUE_CAP = 4096
#: How long a move to the trash may take before it is given up (a rename: milliseconds).
TRASH_TIMEOUT = 60.0
_SESSION_KINDS = frozenset({Kind.SESSION, Kind.LEAVES, Kind.NODES, Kind.ENTRY})


class Unsupported(Exception):
    """ENOTSUP: not an attribute set here (editors' ACL copies fall back to chmod)."""


class NoAttr(Exception):
    """ENOATTR: there is nothing to remove."""


class NotEmpty(Exception):
    """ENOTEMPTY: a recursive removal left names in the folder (``rm -r`` at a terminal, told
    "n" for a read-only file, still tries the folders above it): the folder stays, and the
    session with it, as on any file system."""


class BadValue(writer.Refused):
    kind = "invalid"  # EINVAL: a name or label Pi would not store as given


class InUse(writer.Refused):
    kind = "busy"  # EBUSY: a write handle is open on the session


class TrashFailed(writer.Refused):
    """The move to the trash did not happen; ``errno`` says why (EXDEV: it would need a
    copy; EACCES: no trash this user may use; ESTALE: the file was replaced)."""

    kind = "not-trashed"

    def __init__(self, path: str, why: str, code: int) -> None:
        super().__init__(path, why)
        self.errno = code


@dataclass(frozen=True, slots=True)
class Change:
    """A line to append to session ``path``: ``build`` makes it from the state as it is
    then (again, when another writer appended meanwhile)."""

    path: str
    build: Callable[[Loaded], writer.Pending]
    what: str  # for the log: "name 'x'", "label 'y' on 1a2b3c4d"


@dataclass(frozen=True, slots=True)
class Trashed:
    """Where a session file went: ``<trash>/files/<name>``, described by
    ``<trash>/info/<name>.trashinfo``."""

    trash: str
    name: str

    @property
    def file(self) -> str:
        return os.path.join(self.trash, "files", self.name)

    @property
    def info(self) -> str:
        return os.path.join(self.trash, "info", self.name + ".trashinfo")


class Actions:
    """The session actions over a :class:`View`."""

    def __init__(self, view: View) -> None:
        self.view = view
        self.walks = Walks()

    # -- name and label ---------------------------------------------------------------------

    def set_xattr(self, ino: int, name: str, value: bytes) -> Change | None:
        """The line ``setfattr -n name -v value`` appends, or None when it changes nothing.

        Raises:
            Unsupported: not ``user.pi.name`` on a session folder nor ``user.pi.label`` on an
                entry node.
            BadValue, writer.NotUtf8: a value Pi would not store as given.
        """
        key = self._key_for(ino, name)
        return self._change(key, name, _text(key.path, name, value))

    def remove_xattr(self, ino: int, name: str) -> Change | None:
        """The clearing line ``setfattr -x name`` appends. Raises :class:`NoAttr` when there
        is nothing to clear, and what :meth:`set_xattr` raises."""
        key = self._key_for(ino, name)
        s = self.view.session(key)
        self._check(s, name)
        if self._current(s, key, name) is None:
            log.info("%s: no %s to remove", key.path, name)
            raise NoAttr(name)
        return self._change(key, name, "")

    def _key_for(self, ino: int, name: str) -> Key:
        if name not in (NAME, LABEL):
            raise Unsupported(name)
        key = self.view.key(ino)
        if name == NAME and key.kind != Kind.SESSION:
            log.warning("%s refused (ENOTSUP): only a session folder has a name", name)
            raise Unsupported(name)
        if name == LABEL and key.kind not in (Kind.ENTRY, Kind.MESSAGE):
            log.warning("%s refused (ENOTSUP): only messages and entry folders have one", name)
            raise Unsupported(name)
        return key

    def _check(self, s: Loaded, name: str) -> None:
        """Refuse before anything else, as a save is: EROFS, EBUSY (one log line)."""
        try:
            writer.check_writable(s)
            writer.check_unlocked(s)
        except writer.Refused as err:
            log.warning("%s refused (%s): %s", name, err.kind, err)
            raise

    def _current(self, s: Loaded, key: Key, name: str) -> str | None:
        if name == NAME:
            return writer.pi_name(s)
        return s.index.labels.get(layout.label_target(s, key))

    def _change(self, key: Key, name: str, text: str) -> Change | None:
        s = self.view.session(key)
        self._check(s, name)
        if (text or None) == self._current(s, key, name):
            log.debug("%s: %s unchanged, nothing appended", key.path, name)
            return None
        if name == NAME:
            # appendSessionInfo(name): an empty name is how a name is cleared
            return Change(
                key.path,
                lambda s: writer.prepare_entry(s, "session_info", {"name": text}),
                f"name {text!r}" if text else "a cleared name",
            )
        eid = layout.label_target(s, key)
        if not writer.has_own_id(s, eid):
            log.warning("label refused (EINVAL): entry %s has no id of its own in the file", eid)
            raise BadValue(key.path, f"entry {eid} has no id Pi could point at")
        # appendLabelChange(targetId, label): Pi's /tree passes undefined to clear, which
        # JSON.stringify leaves out
        fields: dict[str, Any] = {"targetId": eid, "label": text} if text else {"targetId": eid}
        return Change(
            key.path,
            lambda s: _label_line(s, eid, fields),
            f"label {text!r} on {eid}" if text else f"a cleared label on {eid}",
        )

    # -- recursive removals ----------------------------------------------------------------

    def in_removal(self, parent: int, pid: int) -> bool:
        """Whether a removal in folder ``parent`` by process ``pid`` is a step of a recursive
        removal of its session: the process holds both the session folder and ``parent``
        open, as ``rm -r`` (fts), ``find -delete`` and ``shutil.rmtree`` do while they empty
        a folder. A single ``rm FILE`` holds no folder open."""
        key = self.view.key(parent)
        if key.kind == Kind.PROJECT:  # rm -r PROJECT: a step of it when it holds the project
            return self.walks.holds(pid, parent)
        if key.kind not in _SESSION_KINDS:
            return False
        sess = self.view.known(Key(Kind.SESSION, key.path))
        return sess is not None and self.walks.holds(pid, sess) and self.walks.holds(pid, parent)

    def keep(self, parent: int, name: str, pid: int) -> None:
        """``unlink`` inside a session being removed: nothing changes (the session goes to
        the trash whole, or stays whole), the walk notes it as removed. ENOENT when ``name``
        is not there."""
        self.view.resolve(parent, name)
        self.walks.removed(pid, self.view.key(parent).path, parent, name)
        log.debug("unlink %s: part of a removal of its session, nothing removed", name)

    def keep_folder(self, parent: int, name: str, pid: int) -> int:
        """``rmdir`` inside a session being removed: as :meth:`keep`, once the walk removed
        everything the folder shows (else :class:`NotEmpty`). Returns the folder's inode."""
        ino = self.view.resolve(parent, name)
        path = self.view.key(parent).path
        if not self.walks.emptied(pid, path, ino, self.view.names(ino)):
            log.info("rmdir %s: the removal left names in it, it stays (ENOTEMPTY)", name)
            raise NotEmpty(name)
        self.walks.removed(pid, path, parent, name)
        log.debug("rmdir %s: part of a removal of its session, nothing removed", name)
        return ino

    def may_trash(self, parent: int, name: str, pid: int, path: str) -> None:
        """``rmdir SESSION``: the last step of a walk that removed all of it, or a plain
        ``rmdir``. A walk of this process that left names in it (declined) keeps it:
        :class:`NotEmpty`."""
        sess = self.view.resolve(parent, name)
        walks = self.walks
        if walks.walked(pid, path) and not walks.emptied(pid, path, sess, self.view.names(sess)):
            walks.forget(path)
            log.info("rmdir %s: the removal left names in it, it stays (ENOTEMPTY)", name)
            raise NotEmpty(name)

    # -- trash ------------------------------------------------------------------------------

    def session_named(self, parent: int, name: str) -> str | None:
        """The session file whose folder is ``name`` in ``parent``, if it is one."""
        key = self.view.key(self.view.resolve(parent, name))
        return key.path if key.kind == Kind.SESSION else None

    def check_trash(self, s: Loaded, writing: bool) -> None:
        """Refuse (one log line) what may not be trashed: a session Pi would not append to
        (EROFS), one a live Pi writer locks or a write handle is open on (EBUSY)."""
        try:
            writer.check_writable(s)
            writer.check_unlocked(s)
            if writing:
                raise InUse(s.path, "a file of it is open for writing")
        except writer.Refused as err:
            log.warning("trash refused (%s): %s", err.kind, err)
            raise

    def trashed(self, path: str, done: Trashed) -> None:
        """The file is in the trash: the mount forgets it and the folder goes."""
        log.info("%s: moved to the trash, %s", path, done.file)
        self.walks.forget(path)
        view = self.view
        view.store.forget(path)
        for folder in [k for k in view.scratch.overlays if k.path == path]:
            del view.scratch.overlays[folder]  # scratch files of its folders went with it
        view.changes.session(path)
        up = os.path.dirname(path)
        ino = ROOT_INO if up == view.store.root else view.known(Key(Kind.PROJECT, up))
        if ino is not None:
            view.changes.inode(ino)


def _label_line(s: Loaded, eid: str, fields: dict[str, Any]) -> writer.Pending:
    if eid not in s.index.by_id:  # appendLabelChange: "Entry not found"
        raise writer.Stale(s.path, f"entry {eid} is not in the file any more")
    return writer.prepare_entry(s, "label", fields)


def _text(path: str, name: str, value: bytes) -> str:
    """A name or label as Pi stores it: UTF-8, one line, no NUL, trimmed as JavaScript trims."""
    if len(value) > VALUE_CAP:
        log.warning(
            "%s refused (EINVAL): %d bytes is over the %d-byte cap", name, len(value), VALUE_CAP
        )
        raise BadValue(path, f"{name}: {len(value)} bytes is over the {VALUE_CAP}-byte cap")
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError as err:
        log.warning("%s refused (EILSEQ): not UTF-8 at byte %d", name, err.start)
        raise writer.NotUtf8(path, f"{name}: not UTF-8 at byte {err.start}") from None
    for bad, said in (("\n", "a line break"), ("\r", "a line break"), ("\0", "a NUL")):
        if bad in text:
            log.warning("%s refused (EINVAL): the value holds %s", name, said)
            raise BadValue(path, f"{name}: the value holds {said}")
    return js_trim(text)


#: How long what a walk removed is remembered without a new removal (a walk that stopped).
WALK_TTL = 600.0


class Walks:
    """Which processes hold which folders of the mount open, so a recursive removal can be
    told from a single ``rm``; and what each such walk removed so far, per process and
    session, so a folder it did not empty stays.

    The kernel does not tell the filesystem when a folder is opened (``fuse_ops.NO_OPENDIR``):
    ``/proc/PID/fdinfo`` does, naming each descriptor's mount and inode. Only a removal in a
    session folder asks, and a process that removes holds a handful of descriptors."""

    def __init__(self, mount_id: int | None = None) -> None:
        #: this mount's id in mountinfo (None: any mount's inode of that number counts)
        self.mount_id = mount_id
        # (process, session) -> (when last, {(folder inode, name) removed})
        self._removed: dict[tuple[int, str], tuple[float, set[tuple[int, str]]]] = {}

    def removed(self, pid: int, path: str, folder: int, name: str) -> None:
        now = time.monotonic()
        for k in [k for k, (when, _) in self._removed.items() if now - when > WALK_TTL]:
            del self._removed[k]
        key = (_process(pid), path)
        names = self._removed.get(key, (now, set()))[1]
        names.add((folder, name))
        self._removed[key] = (now, names)

    def walked(self, pid: int, path: str) -> bool:
        return (_process(pid), path) in self._removed

    def emptied(self, pid: int, path: str, folder: int, names: set[str]) -> bool:
        """Whether this process's walk removed every one of ``names`` from ``folder``."""
        held = self._removed.get((_process(pid), path))
        done = held[1] if held is not None else set()
        return all((folder, n) in done for n in names)

    def forget(self, path: str) -> None:
        for k in [k for k in self._removed if k[1] == path]:
            del self._removed[k]

    def holds(self, pid: int, ino: int) -> bool:
        """Whether process ``pid`` (or another thread of it: the kernel names the thread that
        asked) holds folder ``ino`` of this mount open. False when its descriptors cannot be
        read (another user's process)."""
        fdinfo = f"/proc/{_process(pid)}/fdinfo"
        try:
            fds = os.listdir(fdinfo)
        except OSError:
            return False
        want = {b"ino": ino} if self.mount_id is None else {b"ino": ino, b"mnt_id": self.mount_id}
        for fd in fds:
            try:
                with open(f"{fdinfo}/{fd}", "rb") as f:
                    text = f.read(4096)
            except OSError:
                continue  # closed meanwhile
            if _fields(text, want) == want:
                return True
        return False


def _fields(text: bytes, want: dict[bytes, int]) -> dict[bytes, int]:
    """The numeric fields of an fdinfo file named in ``want`` (``ino:\t3``)."""
    out: dict[bytes, int] = {}
    for line in text.splitlines():
        name, _, value = line.partition(b":")
        if name in want and value.strip().isdigit():
            out[name] = int(value)
    return out


def _process(pid: int) -> int:
    return _tgid(pid) or pid


def _tgid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"Tgid:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


# -- the move to the trash --------------------------------------------------------------------

#: The program the child runs (``python -I -c``: no module of the session's folder, where it
#: runs, is ever imported). It takes the library's own trash logic as it is (home trash for a
#: file on the home's file system, else ``$topdir/.Trash/$uid`` or ``$topdir/.Trash-$uid``,
#: the ``.trashinfo``, names made unique) and changes two things: a move that would have to
#: copy is refused (EXDEV), and the ``.trashinfo`` of a move that failed is taken back.
_CHILD = r"""
import errno, json, os, stat, sys
from send2trash import plat_other as lib


def main():
    fd, name, dev, ino, uid, gid, user = sys.argv[1:]
    fd, dev, ino, uid, gid = int(fd), int(dev), int(ino), int(uid), int(gid)
    if uid != os.geteuid():  # root's mount, another user's request: that user's trash
        os.initgroups(user, gid)
        os.setgid(gid)
        os.setuid(uid)
        lib.uid = uid  # read by the library when imported, as root, before this
        lib.TOPDIR_FALLBACK = b".Trash-" + str(uid).encode()
    os.fchdir(fd)  # the session's folder, reached from the root without following links
    os.close(fd)
    src = os.fsencode(name)
    st = os.lstat(src)
    if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (dev, ino):
        raise OSError(errno.ESTALE, "the session file was replaced since it was read")
    done = []
    move = lib.trash_move

    def renamed_only(src, dst, topdir=None, cross_dev=False):
        if cross_dev:
            raise OSError(errno.EXDEV, "the trash is on another file system: not copied")
        info = os.path.join(dst, lib.INFO_DIR)
        before = set(os.listdir(info)) if os.path.isdir(info) else set()
        path = lib.info_for(src, topdir).splitlines()[1]
        ok = False
        try:
            move(src, dst, topdir)
            ok = True
        finally:
            for n in (set(os.listdir(info)) if os.path.isdir(info) else set()) - before:
                with open(os.path.join(info, n), "rb") as f:
                    ours = path.encode() in f.read().splitlines()
                if ours and ok:
                    done.append((dst, n[: -len(lib.INFO_SUFFIX)]))
                elif ours:
                    os.unlink(os.path.join(info, n))

    lib.trash_move = renamed_only
    lib.send2trash(src)
    trash, moved = done[0]
    print(json.dumps({"trash": os.fsdecode(trash), "name": os.fsdecode(moved)}))


try:
    main()
except OSError as err:
    print(json.dumps({"errno": err.errno or errno.EIO, "error": str(err)}))
    sys.exit(1)
"""


def trash(s: Loaded, uid: int, gid: int) -> Trashed:
    """Move session file ``s.path`` (the file ``s`` read) to the trash of user ``uid``
    (blocking: a child process).

    Raises:
        TrashFailed: nothing was moved; its ``errno`` says why.
    """
    path, ident = s.path, s.ident
    if ident is None:
        raise TrashFailed(path, "the file was never read", errno.ESTALE)
    env, user = _env_for(path, uid)
    try:
        with s.files.parent(path) as (dfd, name):
            argv = [sys.executable, "-I", "-c", _CHILD, str(dfd), name, str(ident.dev),
                    str(ident.ino), str(uid), str(gid), user]  # fmt: skip
            done = subprocess.run(
                argv,
                pass_fds=(dfd,),
                env=env,
                cwd="/",
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=TRASH_TIMEOUT,
            )
    except subprocess.TimeoutExpired:
        raise TrashFailed(path, f"the move took over {TRASH_TIMEOUT:.0f} s", errno.EIO) from None
    except OSError as err:  # the folder is gone or was swapped for a link
        raise TrashFailed(path, err.strerror or str(err), err.errno or errno.EIO) from None
    return _result(path, done)


def _result(path: str, done: subprocess.CompletedProcess[bytes]) -> Trashed:
    lines = done.stdout.strip().splitlines()
    try:
        said = orjson.loads(lines[-1]) if lines else {}
    except orjson.JSONDecodeError:
        said = {}
    if done.returncode == 0 and isinstance(said.get("trash"), str):
        return Trashed(said["trash"], said["name"])
    why = said.get("error") or done.stderr.decode(errors="replace").strip()[-300:] or "failed"
    code = said.get("errno")
    raise TrashFailed(path, f"not moved to the trash: {why}", code if code else errno.EIO)


def _env_for(path: str, uid: int) -> tuple[dict[str, str], str]:
    """The environment the trash is found from: the daemon's own for its own user (with its
    ``XDG_DATA_HOME``), else that user's home (root's mount only)."""
    me = os.geteuid()
    if uid == me:
        try:
            user = pwd.getpwuid(uid).pw_name
        except KeyError:
            user = str(uid)
        return dict(os.environ), user
    if me != 0:
        raise TrashFailed(
            path,
            f"uid {uid} asked, but this mount runs as uid {me} and cannot use their trash",
            errno.EACCES,
        )
    try:
        pw = pwd.getpwuid(uid)
    except KeyError:
        raise TrashFailed(path, f"uid {uid} has no home, so no trash", errno.EACCES) from None
    env = {"HOME": pw.pw_dir, "USER": pw.pw_name, "LOGNAME": pw.pw_name, "PATH": os.defpath}
    for k in ("TZ", "LANG", "LC_ALL"):
        if k in os.environ:
            env[k] = os.environ[k]
    return env, pw.pw_name


__all__ = [
    "LABEL",
    "NAME",
    "VALUE_CAP",
    "Actions",
    "BadValue",
    "Change",
    "InUse",
    "NoAttr",
    "NotEmpty",
    "TrashFailed",
    "Trashed",
    "Unsupported",
    "Walks",
    "trash",
]
