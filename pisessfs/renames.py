"""What ``rm`` and ``mv`` do to names under a session: a scratch file moves freely; a
scratch file renamed over a message's name is a save (``sed -i``, JetBrains); a user
message moved aside keeps a copy under its new name and hides its old one until it is
written again (editors move the original aside before writing a new one). Deleting or
moving a message for real is refused (EPERM): sessions are append-only.
"""

from __future__ import annotations

import logging
import stat
from typing import TYPE_CHECKING

from .finds import hit_message
from .kind import Kind
from .scratch import Binding, Node, binds_message
from .view import CrossFolder, Denied, Exists, Invalid, Key, NotFound, NotPermitted, View

if TYPE_CHECKING:
    from .edits import Editor, Job

log = logging.getLogger(__name__)

RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2


class Names:
    """``unlink`` and ``rename`` in the mount, over the editor's scratch layer."""

    def __init__(self, view: View, editor: Editor) -> None:
        self.view, self.editor = view, editor

    def unlink(self, parent: int, name: str) -> None:
        folder = self.view.key(parent)
        ov = self.view.scratch.overlays.get(folder)
        node = ov.names.get(name) if ov is not None else None
        if node is not None:
            self.view.scratch.unlink_everywhere(node)
            self.editor._drop(node)
            if node.snapshot_of is not None and ov is not None and node.snapshot_of not in ov.names:
                self.view.scratch.whiteout(folder, node.snapshot_of, False)  # the original is back
            return
        if ov is not None and name in ov.whiteouts:
            raise NotFound(name)
        self.view.child_key(parent, name)  # ENOENT for a name that does not exist
        log.warning("unlink %s refused (EPERM): sessions are append-only", name)
        raise NotPermitted(name)

    def rename(self, p_old: int, old: str, p_new: int, new: str, flags: int) -> Job | None:
        """Move a name; a scratch file renamed over a message name is a save (a Job)."""
        if flags & RENAME_EXCHANGE:
            raise Invalid("RENAME_EXCHANGE")
        src, dst = self.view.key(p_old), self.view.key(p_new)
        ov = self.view.scratch.overlays.get(src)
        node = ov.names.get(old) if ov is not None else None
        if node is None:
            if flags & RENAME_NOREPLACE and self._target(p_new, dst, new) is not None:
                raise Exists(new)
            self._rename_message_away(p_old, src, old, dst, new)
            return None
        target = self._target(p_new, dst, new)
        if flags & RENAME_NOREPLACE and target is not None:
            raise Exists(new)
        if isinstance(target, Key) or self._whited_out(dst, new):  # (a message, a result)
            return self._save_over(src, old, dst, new, node)
        if dst.kind != Kind.ENTRY:
            raise Denied(f"rename into {dst.kind}")
        if node.binding is not None and node.binding.alias and ov is not None:
            if binds_message(new) and dst == src:
                # A saved new file renamed to another message name (a draft named at the
                # end): the same message under its new name, saved once.
                self.view.scratch.unlink(node, src, old)
                self.view.scratch.link(node, dst, new)
                return None
            ov.reserved[old] = node.binding  # vim moves a saved file aside, then re-creates it
            node.binding = None  # what moved is a backup copy now
        self.view.scratch.unlink(node, src, old)
        if (
            target is None
            and dst.kind == Kind.ENTRY
            and binds_message(new)
            and node.binding is None
        ):
            s = self.view.session(dst)
            node.binding = Binding(s.path, s.epoch, dst.eid, None, b"")
            self.view.scratch.link(node, dst, new)
            return self.editor._job(node.binding, bytes(node.data), node, dst, None)
        self.view.scratch.link(node, dst, new)
        return None

    def _target(self, parent: int, folder: Key, name: str) -> Key | Node | None:
        ov = self.view.scratch.overlays.get(folder)
        if ov is not None:
            if name in ov.names:
                return ov.names[name]
            if name in ov.whiteouts:
                return None
        try:
            return self.view.child_key(parent, name)
        except NotFound:
            return None

    def _whited_out(self, folder: Key, name: str) -> bool:
        ov = self.view.scratch.overlays.get(folder)
        return ov is not None and name in ov.whiteouts and name not in ov.names

    def _save_over(self, src: Key, old: str, dst: Key, new: str, node: Node) -> Job | None:
        """``sed -i``, ``perl -i``, JetBrains: a temp file renamed onto a message name (or
        onto a result of ``search/``: its message)."""
        if dst.kind == Kind.SEARCH_QUERY:
            dst, new = hit_message(self.view, self.view.child_key(self.view.ino(dst), new))
        s = self.view.session(dst)
        binding = self.editor._edit_binding(s, self.editor._message_key(dst, new))
        job = self.editor._job(binding, bytes(node.data), None, dst, new)
        self.view.scratch.unlink(node, src, old)  # the temp file is consumed by the save
        self.editor._drop(node)
        if job is None:
            self.view.scratch.whiteout(dst, new, False)
        return job

    def _rename_message_away(self, p_old: int, src: Key, old: str, dst: Key, new: str) -> None:
        ov = self.view.scratch.overlays.get(src)
        if ov is not None and old in ov.whiteouts:
            raise NotFound(old)
        key = self.view.child_key(p_old, old)
        s = self.view.session(src) if src.kind == Kind.ENTRY else None
        e = s.index.by_id.get(key.eid) if s is not None and key.kind == Kind.MESSAGE else None
        if e is None or e.kind != "user" or key.k != 0:
            log.warning("rename of %s refused (EPERM): sessions are append-only", old)
            raise NotPermitted(old)
        if dst != src:
            raise CrossFolder(new)
        # Editors move the original aside before writing a new one: keep a copy under the new
        # name and hide the message name until it is written again.
        copy = self.view.scratch.new_node(stat.S_IFREG | 0o644)
        copy.data = bytearray(self.view.content(self.view.ino(key)))
        copy.snapshot_of = old
        self.view.scratch.whiteout(src, old, True)
        self.view.scratch.link(copy, dst, new)
