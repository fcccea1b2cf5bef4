"""The man page, pisessfs(1), made from the command line's own parser.

Every command, argument and option, with its help text, comes from ``cli.build_parser()``,
and the examples and the log's place are the ones ``--help`` shows (``cli.USAGE_EXAMPLES``,
``cli.LOG_NOTE``); only the prose around them (what the program is, the files it uses) is
written here. So ``--help`` and ``man pisessfs`` cannot say different things: the install
writes the page from the installed parser, and ``man/pisessfs.1`` in the repository is
checked against it by the tests. ``python -m pisessfs.manpage`` prints it.
"""

from __future__ import annotations

import argparse
import os
import sys

from . import __version__
from .cli import LOG_NOTE, USAGE_EXAMPLES, build_parser

DESCRIPTION = """\
pisessfs mounts the session files of the Pi coding agent as folders and files. Each
session (one append-only JSONL file whose lines form a tree) is a folder; each branch end
of its tree is a folder of numbered Markdown message files, rebuilt by walking back to the
root; conversation.md holds every entry once, for grep. Any name looked up in search/ is a
query: its folder lists links to the messages holding its words, best first; usage/ sums
tokens and cost by day, month, project and model. Writing a .md file under an entry's
folder appends one new user message to the real file, as its child; saving changed text
into a user message appends a sibling (a fork), as editing a message in Pi does. Nothing
else in a session file is ever changed."""

NOTES = (
    "A save through the mount that is refused fails where the program can see it (open, "
    "write or close), with one log line saying why. The guide, the reference and the design "
    "are in the docs/ folder of the source."
)

FILES = [
    ("~/.pi/agent/sessions", "the sessions folder Pi writes (or $PI_CODING_AGENT_DIR/sessions)"),
    ("$XDG_CACHE_HOME/pisessfs", "what mounts keep across mounts (--disk-cache; mode 700)"),
    ("$XDG_STATE_HOME/pisessfs/MOUNTPOINT.log", "the daemon's log (--log)"),
    ("~/.config/systemd/user/pisessfs@.service", "the unit install-unit writes"),
]


def _esc(text: str) -> str:
    """Text as roff shows it: backslashes and hyphens escaped, no line starts a request."""
    out = text.replace("\\", "\\e").replace("-", "\\-")
    return "\n".join("\\&" + line if line[:1] in (".", "'") else line for line in out.split("\n"))


def _flags(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"\\fI{_esc(str(action.metavar or action.dest))}\\fR"
    value = ""
    if action.nargs != 0:
        value = " \\fI" + _esc(str(action.metavar or action.dest.upper())) + "\\fR"
    return ", ".join(f"\\fB{_esc(o)}\\fR{value}" for o in action.option_strings)


def _actions(parser: argparse.ArgumentParser) -> list[str]:
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) or action.help == argparse.SUPPRESS:
            continue
        out += [".TP", _flags(action), _esc(action.help or "")]
    return out


def _commands(parser: argparse.ArgumentParser) -> list[str]:
    out = []
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {a.dest: a.help or "" for a in action._choices_actions}
        for name, sub in action.choices.items():
            usage = sub.format_usage().removeprefix("usage: ").strip()
            what = sub.description or helps.get(name, "")
            out += [f".SS {_esc(name)}", _esc(what), ".PP", ".nf", _esc(usage)]
            out += [".fi", *_actions(sub)]
            if sub.epilog:
                out += [".PP", _esc(sub.epilog)]
    return out


def render(parser: argparse.ArgumentParser) -> str:
    """pisessfs(1) in roff; its examples and notes are those ``--help`` shows."""
    lines = [
        f'.TH PISESSFS 1 "" "pisessfs {__version__}" "User Commands"',
        ".SH NAME",
        "pisessfs \\- " + _esc(parser.description or ""),
        ".SH SYNOPSIS",
        ".nf",
        _esc(parser.format_usage().removeprefix("usage: ").strip()),
        _esc("pisessfs SESSIONS MOUNTPOINT -o OPTIONS"),
        ".fi",
        ".SH DESCRIPTION",
        _esc(DESCRIPTION),
        ".SH OPTIONS",
        *_actions(parser),
        ".SH COMMANDS",
        *_commands(parser),
        ".SH FILES",
    ]
    for path, what in FILES:
        lines += [".TP", f"\\fI{_esc(path)}\\fR", _esc(what)]
    lines += [".SH EXAMPLES"]
    for cmd, what in USAGE_EXAMPLES:
        lines += [".TP", f"\\fB{_esc(cmd)}\\fR", _esc(what)]
    lines += [".SH NOTES", _esc(f"{LOG_NOTE} {NOTES}")]
    lines += [".SH SEE ALSO", "\\fBpi\\fR(1), \\fBfusermount3\\fR(1), \\fBmount.fuse3\\fR(8)"]
    return "\n".join(lines) + "\n"


def main() -> int:
    os.environ["COLUMNS"] = "80"  # (argparse wraps usage lines to the terminal's width)
    sys.stdout.write(render(build_parser(for_man=True)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
