"""Entry ids as path components, and back: one name per id, one id per name, forever.

Ids come from the file and may hold anything a JSON string holds: ``/``, NUL, a leading
``-`` or ``.``, lone surrogates, hundreds of bytes. A name must be a valid component that
resolves to the id it was made from, and two ids must never share a name. The mapping
escapes, so it can be undone: ``%`` and ``~`` themselves, ``/`` and NUL, a leading ``-`` or
``.``, the ``.`` of a final ``.md`` (``<name>.md`` is always the one-file view of ``<name>``), and
lone surrogates become ``%XX`` / ``%uXXXX``. An id whose escaped form is too long to
leave room for a slug becomes its first characters, ``~`` and a hash of the whole id; only
such a name contains ``~``, and it is resolved by looking the hash up among the session's ids.

Pure functions; the common id (8 hex characters) is its own name.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

VIEW_SUFFIX = ".md"  # <name>.md: a one-file view, so no id's name ends with it
MAX_ID_NAME = 200  # bytes: a folder name adds "-" and a slug of at most 40, all within 255
_KEEP = 120  # bytes of a long id kept in front of its hash
_UNSAFE = re.compile(r"[%~/\x00\ud800-\udfff]")
_ESCAPE = re.compile(r"%(u[0-9A-F]{4}|[0-9A-F]{2})")


def _esc(ch: str) -> str:
    n = ord(ch)
    return f"%{n:02X}" if n < 0x100 else f"%u{n:04X}"


def id_name(eid: str) -> str:
    """The path component of entry ``eid``."""
    plain = eid[:1] not in ("-", ".", "") and not eid.endswith(VIEW_SUFFIX)
    if plain and not _UNSAFE.search(eid) and len(eid) <= 64:
        return eid  # the common case, no work
    name = _UNSAFE.sub(lambda m: _esc(m.group()), eid)
    if name[:1] in ("-", "."):
        name = _esc(name[0]) + name[1:]
    if name.endswith(VIEW_SUFFIX):
        name = name[: -len(VIEW_SUFFIX)] + "%2Emd"
    if not name:
        name = "%"  # never a real escape: an empty id (the parser gives none, but be total)
    if len(name.encode()) <= MAX_ID_NAME:
        return name
    head = name.encode()[:_KEEP].decode("utf-8", "ignore")
    if "%" in head[-5:]:
        head = head[: head.rfind("%")]  # never half an escape
    return f"{head}~{_digest(eid)}"


def _digest(eid: str) -> str:
    return hashlib.sha256(eid.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def name_id(name: str, ids: Iterable[str] = ()) -> str | None:
    """The id ``name`` stands for: decoded, or (a hashed long id) found among ``ids``."""
    if "~" in name:
        digest = name.rpartition("~")[2]
        for eid in ids:
            if len(eid) > 32 and _digest(eid) == digest and id_name(eid) == name:
                return eid
        return None
    if name == "%":
        return ""
    if "%" not in name:
        return name if id_name(name) == name else None  # ".git" is no id's name ("%2Egit" is)
    out = _ESCAPE.sub(lambda m: chr(int(m.group(1).lstrip("u"), 16)), name)
    return out if id_name(out) == name else None  # only the canonical spelling resolves


def utf8(text: str) -> bytes:
    """A name or value from the file as bytes (lone surrogates kept, as the kernel takes them)."""
    return text.encode("utf-8", "surrogatepass")
