"""The kinds of node of the mount, by name: what the first field of a node's key says it is.

One enum, at the bottom of the layering so that every module may name a kind through it
(``layout.KINDS`` has the class of each, which owns what such a node resolves, lists and
shows); a kind is never spelled as a string (tests/test_layers.py checks it).
"""

from __future__ import annotations

import enum


class Kind(enum.StrEnum):
    """The kinds of node: a :class:`Key`'s first field, one :class:`NodeKind` each (``KINDS``).
    Named only through this enum (tests/test_layers.py fails on a kind spelled as a string)."""

    ROOT = "root"
    PROJECT = "proj"
    SESSION = "sess"
    LEAVES = "leaves"
    NODES = "nodes"
    ENTRY = "edir"  # an entry's folder: the numbered files of its path
    MESSAGE = "msg"  # a numbered message file (or one of its images)
    BRANCH = "branch"  # nodes/<id>.md: the path as one file
    TREE = "tree"
    JSON = "json"
    CONVERSATION = "conv"
    RAW = "jsonl"  # .session.jsonl: the real file's bytes
    CURRENT = "current"
    CURRENT_VIEW = "current.md"
    LEAF = "leaf"  # leaves/<name>: a link into nodes/
    LEAF_VIEW = "leaf.md"
    ALIAS = "alias"  # a session's stem or id: a link to its folder's name
    LATEST = "latest"
    USAGE = "usedir"  # usage/: tokens and cost summed
    USAGE_FILE = "usefile"  # one of its files (``eid`` holds its name)
    SEARCH = "search"  # search/ (at the root or in a project: ``path`` is its folder)
    SEARCH_QUERY = "query"  # search/<Q>/ (``eid`` holds the query)
    SEARCH_PAGE = "qpage"  # search/<Q>.md
    SEARCH_LINK = "hit"  # search/<Q>/NNN-…: the link to the k-th hit's message file
    PARENT = "parent"
    SCRATCH = "scratch"  # an editor's file in the scratch layer
    RAW_LINK = "rawlink"  # session.jsonl -> .session.jsonl
    NONE = "none"
