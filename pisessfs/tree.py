"""The id/parentId tree of one session, as Pi sees it, with the guards Pi lacks.

This module owns the structure: which line wins for an id (the later one, as in Pi), each
entry's effective parent (roots: null, self-parent, unknown parent, or a broken cycle),
children in Pi's order (timestamp, then file order, invalid timestamps last), numbering of
conversation entries along a path, the leaves and which of them ``leaves/`` lists, the
resume leaf and labels. It never reads files and never renders.

Appends are applied incrementally (:meth:`Index.add`) when they cannot change what is
already known; anything else (a duplicate id, a parent that arrives after its child) asks
the caller for a full rebuild, which is rare and correct.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

from .model import Entry, Problem

_NO_TS = 1 << 62  # invalid timestamps sort last


def _order_key(e: Entry) -> tuple[int, int]:
    ms = e.ts_ms
    return (_NO_TS if ms is None else ms, e.line)


_CYCLE_SHOWN = 8  # ids of a cycle named in its problem line (a cycle may be 100,000 long)


def _cycle_text(cycle: list[str], back: str, first: str) -> str:
    shown = cycle if len(cycle) <= _CYCLE_SHOWN else [*cycle[:_CYCLE_SHOWN], "…"]
    return (
        f"parent cycle of {len(cycle)} entries: "
        + " -> ".join([*shown, back])
        + f"; broken at {first}"
    )


class NeedsRebuild(Exception):
    """An appended entry changes the meaning of earlier ones; build the index anew."""


class Index:
    """Tree facts for a list of entries in file order."""

    def __init__(self, entries: Iterable[Entry] = ()) -> None:
        self.by_id: dict[str, Entry] = {}
        self.order: list[Entry] = []  # winning entries, file order
        self.parent: dict[str, str | None] = {}
        self.children: dict[str, list[str]] = {}
        self.roots: list[str] = []
        self.num: dict[str, int] = {}  # numbered entries on the path root..id, inclusive
        self.anchor: dict[str, str | None] = {}  # nearest numbered entry on that path
        self.has_numbered_desc: set[str] = set()
        # leaves by their nearest numbered entry; a dict as an ordered set (O(1) removal)
        self.leaves_by_anchor: dict[str | None, dict[str, None]] = {}
        self.labels: dict[str, str] = {}
        self.resume: str | None = None
        self.problems: list[Problem] = []
        self._waiting: set[str] = set()  # unknown parent ids that orphans point at
        self._build(list(entries))

    # -- building ---------------------------------------------------------------------------

    def _build(self, entries: list[Entry]) -> None:
        seen: dict[str, Entry] = {}
        forward = False  # a parent after its child: only then can there be a cycle
        for e in entries:
            eid = e.id
            first = seen.get(eid)
            if first is not None:
                self.problems.append(
                    Problem(
                        e.line,
                        "duplicate-id",
                        f"id {eid} also on line {first.line}; line {e.line} wins, as in Pi",
                    )
                )
            p = e.parent_id
            if p is not None and p not in seen:
                forward = True  # or an orphan, or a self-parent: sorted out below
            seen[eid] = e
        self.by_id = seen
        if len(seen) != len(entries):
            forward = True  # a later duplicate can move a parent after its children
        order = entries if len(seen) == len(entries) else [e for e in entries if seen[e.id] is e]
        self.order = list(order)
        parent = self.parent
        for e in order:
            p = e.parent_id
            if p is not None:
                if p in seen and p != e.id:
                    p = e.parent_id = seen[p].id  # the parent's own string: one per id
                else:
                    p = self._effective_parent(e)
            parent[e.id] = p
        if forward:
            self._break_cycles()
        children = self.children
        roots = self.roots
        for e in order:
            p = parent[e.id]
            if p is None:
                roots.append(e.id)
            elif p in children:
                children[p].append(e.id)
            else:
                children[p] = [e.id]
        by_id = self.by_id
        for kids in children.values():
            if len(kids) > 1:
                kids.sort(key=lambda i: _order_key(by_id[i]))
        if forward:
            self._number()
        else:
            place = self._place
            for e in order:  # parents come first: one pass in file order
                place(e)
        for e in entries:
            if e.type == "label":
                self._note_meta(e)
        if entries:
            self.resume = entries[-1].id

    def _effective_parent(self, e: Entry) -> str | None:
        pid = e.parent_id
        if pid is None:
            return None
        if pid == e.id:
            self.problems.append(
                Problem(e.line, "self-parent", f"{e.id} is its own parent: a root")
            )
            return None
        if pid not in self.by_id:
            self.problems.append(
                Problem(e.line, "orphan", f"parent {pid} of {e.id} not found: shown as a root")
            )
            self._waiting.add(pid)
            return None
        return pid

    def _break_cycles(self) -> None:
        state: dict[str, int] = {}  # 1 = on the current walk, 2 = done
        for start in self.order:
            walk: list[str] = []
            cur: str | None = start.id
            while cur is not None and cur not in state:
                state[cur] = 1
                walk.append(cur)
                cur = self.parent[cur]
            if cur is not None and state[cur] == 1:
                cycle = walk[walk.index(cur) :]
                first = min(cycle, key=lambda i: self.by_id[i].line)
                self.parent[first] = None
                self.problems.append(
                    Problem(self.by_id[first].line, "cycle", _cycle_text(cycle, cur, first))
                )
            for i in walk:
                state[i] = 2

    def _number(self) -> None:
        stack = list(reversed(self.roots))
        while stack:
            eid = stack.pop()
            self._place(self.by_id[eid])
            stack.extend(reversed(self.children.get(eid, ())))

    def _place(self, e: Entry) -> None:
        """Number, anchor and leaf bookkeeping for ``e`` once its parent is placed."""
        eid = e.id
        p = self.parent[eid]
        if p is None:
            base, up = 0, None
        else:
            base, up = self.num[p], self.anchor[p]
        if e.kind is not None:
            self.num[eid] = base + 1
            self.anchor[eid] = eid
            if up is not None:
                self.has_numbered_desc.add(up)
        else:
            self.num[eid] = base
            self.anchor[eid] = up
        if eid not in self.children:
            anchor = self.anchor[eid]
            lst = self.leaves_by_anchor.get(anchor)
            if lst is None:
                self.leaves_by_anchor[anchor] = {eid: None}
            else:
                lst[eid] = None

    def _note_meta(self, e: Entry) -> None:
        if e.type == "label" and e.target_id is not None:
            if e.note:
                self.labels[e.target_id] = e.note
            else:
                self.labels.pop(e.target_id, None)

    def snapshot(self) -> Index:
        """A copy that appends to this index do not change (for a reader in another thread:
        whole-session renders read it while the loop goes on appending)."""
        ix = Index.__new__(Index)
        ix.by_id = dict(self.by_id)
        ix.order = list(self.order)
        ix.parent = dict(self.parent)
        ix.children = {k: list(v) for k, v in self.children.items()}
        ix.roots = list(self.roots)
        ix.num = dict(self.num)
        ix.anchor = dict(self.anchor)
        ix.has_numbered_desc = set(self.has_numbered_desc)
        ix.leaves_by_anchor = {k: dict(v) for k, v in self.leaves_by_anchor.items()}
        ix.labels = dict(self.labels)
        ix.resume = self.resume
        ix.problems = list(self.problems)
        ix._waiting = set(self._waiting)
        return ix

    # -- appending --------------------------------------------------------------------------

    def add(self, e: Entry) -> None:
        """Apply one appended entry; raises :class:`NeedsRebuild` when it cannot."""
        if e.id in self.by_id or e.id in self._waiting:
            raise NeedsRebuild(e.id)
        pid = e.parent_id
        if pid is not None and pid != e.id and pid not in self.by_id:
            raise NeedsRebuild(e.id)
        self.by_id[e.id] = e
        self.order.append(e)
        p = self._effective_parent(e)
        self.parent[e.id] = p
        if p is None:
            self.roots.append(e.id)
        else:
            kids = self.children.get(p)
            if kids is None:
                self._unleaf(p)
                kids = self.children[p] = []
            # Appends usually come in time order: then the new child goes last, in O(1);
            # otherwise a binary search, never a key per sibling (10,000 siblings, O(n²)).
            by_id = self.by_id
            key = _order_key(e)
            if not kids or _order_key(by_id[kids[-1]]) <= key:
                kids.append(e.id)
            else:
                at = bisect.bisect_right(kids, key, key=lambda i: _order_key(by_id[i]))
                kids.insert(at, e.id)
        self._place(e)
        self._note_meta(e)
        self.resume = e.id

    def _unleaf(self, eid: str) -> None:
        lst = self.leaves_by_anchor.get(self.anchor[eid])
        if lst is not None:
            lst.pop(eid, None)

    # -- queries ----------------------------------------------------------------------------

    def is_leaf(self, eid: str) -> bool:
        return eid in self.by_id and eid not in self.children

    def listed_leaves(self) -> list[str]:
        """Leaves that ``leaves/`` lists, in file order (DESIGN.md, "Leaves")."""
        out: list[str] = []
        any_numbered = any(a is not None for a, lst in self.leaves_by_anchor.items() if lst)
        for anchor, lst in self.leaves_by_anchor.items():
            if not lst or anchor in self.has_numbered_desc:
                continue
            if anchor is None and any_numbered:
                continue  # an empty path is a strict prefix of every other
            out.append(max(lst, key=lambda i: self.by_id[i].line))
        out.sort(key=lambda i: self.by_id[i].line)
        return out

    def all_leaves(self) -> list[str]:
        return [e.id for e in self.order if e.id not in self.children]

    def path(self, eid: str) -> list[str]:
        """Ids from the root to ``eid`` inclusive (cycles are already broken)."""
        out: list[str] = []
        cur: str | None = eid
        while cur is not None:
            out.append(cur)
            cur = self.parent[cur]
        out.reverse()
        return out

    def numbered_path(self, eid: str) -> list[str]:
        """The conversation entries on the path root..eid: the numbered files of its folder."""
        out: list[str] = []
        cur = self.anchor.get(eid)
        while cur is not None:
            out.append(cur)
            p = self.parent[cur]
            cur = self.anchor[p] if p is not None else None
        out.reverse()
        return out

    def numbered_at(self, eid: str, n: int) -> str | None:
        """The conversation entry numbered ``n`` on the path root..eid (walking up)."""
        cur = self.anchor.get(eid)
        while cur is not None:
            k = self.num[cur]
            if k <= n:
                return cur if k == n else None
            p = self.parent[cur]
            cur = self.anchor[p] if p is not None else None
        return None

    def files_on_path(self, eid: str) -> int:
        """How many numbered files the folder of ``eid`` shows (the number of the last)."""
        return self.num.get(eid, 0)

    def last_of_kind(self, eid: str, kind: str) -> Entry | None:
        """The nearest numbered entry of ``kind`` on the path root..eid, walking up."""
        cur = self.anchor.get(eid)
        while cur is not None:
            e = self.by_id[cur]
            if e.kind == kind:
                return e
            p = self.parent[cur]
            cur = self.anchor[p] if p is not None else None
        return None
