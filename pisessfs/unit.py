"""The systemd user unit that starts a mount at login: its text and where it goes.

This module owns the unit's content (``pisessfs install-unit`` writes it; docs/guide.md,
"Mount it at login", shows it) and the quoting of its command lines. Writing the file and the user's
messages belong to ``cli``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from . import __version__

UNIT = "pisessfs@.service"


def unit_dir() -> Path:
    config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config) / "systemd" / "user"


def unit_text(sessions: Path, options: list[str], allow_other: bool) -> str:
    """The systemd user unit: a template, one mount per instance (the escaped mountpoint).

    ``Type=notify``: the daemon runs in the foreground (``-f``: its main process is the one
    systemd started, its log goes to the journal) and sends READY=1 once the mount is up, so
    ``systemctl start`` returns when the folder is usable and units ordered after it find it
    mounted (``Type=simple`` would call it started before it mounted, or when mounting failed).
    ``ExecStop`` unmounts cleanly; when the mount is busy it names who holds it, and the
    SIGTERM that follows detaches it. ``KillMode=mixed``: that SIGTERM reaches the daemon
    only, so a watchdog whose daemon died still detaches the dead mount."""
    me = " ".join(quote(a) for a in program())
    extra = [*(["-o", ",".join(options)] if options else []), *(["--allow-other"] * allow_other)]
    args = " ".join(quote(a) for a in ["--sessions", str(sessions), *extra])
    return f"""\
# {UNIT}: written by `pisessfs install-unit` (pisessfs {__version__}).
# One mount per instance, named by its mountpoint, escaped; for ~/pi:
#   systemctl --user enable --now pisessfs@$(systemd-escape --path ~/pi).service
[Unit]
Description=Pi sessions mounted on %f (pisessfs)
StartLimitIntervalSec=120
StartLimitBurst=3

[Service]
Type=notify
ExecStart={me} mount -f {args} "%f"
ExecStop={me} umount "%f"
KillMode=mixed
Restart=on-failure
RestartSec=10

[Install]
WantedBy=default.target
"""


def quote(word: str) -> str:
    """One word of a unit's command line: quoted, specifiers (%) and variables ($) escaped."""
    if "\n" in word:
        raise ValueError(f"a unit cannot hold a newline: {word!r}")
    for a, b in (("\\", "\\\\"), ('"', '\\"'), ("%", "%%"), ("$", "$$")):
        word = word.replace(a, b)
    plain = word and all(c.isalnum() or c in "/._-+=,:@" for c in word)
    return word if plain else f'"{word}"'


def program() -> list[str]:
    """This program as a unit runs it: the ``pisessfs`` script, else ``python -m``."""
    script = os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if os.path.basename(script) == "pisessfs" and os.access(script, os.X_OK):
        return [script]
    sibling = os.path.join(os.path.dirname(sys.executable), "pisessfs")
    if os.access(sibling, os.X_OK):
        return [sibling]
    return [sys.executable, "-m", "pisessfs.cli"]
