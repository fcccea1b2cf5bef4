"""Installed like a tool, read about like a tool: the install command, the man page, the help
texts (issue "Install it like a tool").

The install test runs ``scripts/install`` from a clean clone with a fresh ``HOME`` and
checks the command, the man page and the fast path it installs, then uninstalls; it builds
pyfuse3 when this machine has no build of the patch yet (about a minute).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pisessfs import cli, manpage
from tests.conftest import REPO, need, pisessfs


def options_of(parser: argparse.ArgumentParser) -> set[str]:
    """Every option string of the parser and its commands, and the commands' names."""
    out: set[str] = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out.add(name)
                out |= options_of(sub)
        out.update(action.option_strings)
    return out


def test_the_man_page_in_the_repository_is_the_one_the_parser_makes() -> None:
    made = subprocess.run(
        [sys.executable, "-m", "pisessfs.manpage"], capture_output=True, text=True, check=True
    ).stdout
    assert (REPO / "man" / "pisessfs.1").read_text() == made, (
        "man/pisessfs.1 is stale: python -m pisessfs.manpage > man/pisessfs.1"
    )


def test_every_option_and_command_is_in_the_man_page() -> None:
    page = manpage.render(cli.build_parser(for_man=True)).replace("\\-", "-")
    missing = [o for o in sorted(options_of(cli.build_parser())) if o not in page]
    assert missing == []


def test_the_man_page_reads_in_man() -> None:
    need(shutil.which("man") is not None, "man is not installed (apt install man-db)")
    out = subprocess.run(
        ["man", "-l", str(REPO / "man" / "pisessfs.1")],
        capture_output=True,
        text=True,
        env={**os.environ, "MANWIDTH": "80", "MAN_KEEP_FORMATTING": ""},
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout
    for heading in ("NAME", "SYNOPSIS", "DESCRIPTION", "COMMANDS", "FILES", "EXAMPLES"):
        assert f"\n{heading}\n" in text, heading
    assert "--max-message-mb N" in text and "pisessfs demo" in text


def test_help_has_examples_and_says_where_the_log_goes() -> None:
    text = pisessfs("--help").stdout
    assert "examples:" in text and "pisessfs mount ~/pi" in text
    assert "$XDG_STATE_HOME/pisessfs/<mountpoint>.log" in text


def test_mount_help_says_which_sessions_folder_it_would_use(tmp_path: Path) -> None:
    env = {**os.environ, "PI_CODING_AGENT_DIR": str(tmp_path / "agent"), "COLUMNS": "1000"}
    env.pop("PI_CODING_AGENT_SESSION_DIR", None)  # (COLUMNS: argparse cuts lines at "-")
    text = pisessfs("mount", "--help", env=env).stdout
    assert f"(default: {tmp_path / 'agent' / 'sessions'})" in text


def test_umount_help_describes_its_argument() -> None:
    text = pisessfs("umount", "--help").stdout
    assert "where it is mounted" in text


def test_a_session_file_given_for_the_folder_says_so(tmp_path: Path) -> None:
    f = tmp_path / "s.jsonl"
    f.write_text("{}\n")
    (tmp_path / "mnt").mkdir()
    r = pisessfs("mount", "--sessions", str(f), str(tmp_path / "mnt"))
    assert r.returncode == 2
    assert (
        r.stderr == f"pisessfs: {f} is a file: give the folder it is in (--sessions {tmp_path})\n"
    )


def test_install_unit_print_works_before_pi_made_its_folder(tmp_path: Path) -> None:
    env = {**os.environ, "PI_CODING_AGENT_DIR": str(tmp_path / "agent")}
    env.pop("PI_CODING_AGENT_SESSION_DIR", None)
    r = pisessfs("install-unit", "--print", env=env)
    assert r.returncode == 0 and "[Service]" in r.stdout
    assert "no sessions folder at" in r.stderr and "yet" in r.stderr


@pytest.mark.slow
def test_the_install_command_puts_pisessfs_on_path_with_the_fast_path(tmp_path: Path) -> None:
    """From a clean clone, with a fresh HOME: one command; then ``pisessfs`` in
    ~/.local/bin runs without the clone, ``man -w pisessfs`` finds the page, the pyfuse3 is
    the patched one; running it again upgrades; ``--uninstall`` removes it all."""
    need(shutil.which("git") is not None, "git is not installed")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    for changed in ("scripts/install", "scripts/pyfuse3-wheel", "pisessfs", "man"):
        # (the work tree's, committed or not: what this test run is testing)
        src = REPO / changed
        dst = clone / changed
        if src.is_dir():
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, dst)
    home = tmp_path / "home"
    home.mkdir()
    cache = Path(os.environ.get("XDG_CACHE_HOME_REAL", Path.home() / ".cache"))
    env = {
        "HOME": str(home),
        # (python3 first: the interpreter this test runs on, as a user's would be)
        "PATH": f"{home}/.local/bin:{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
        "XDG_CACHE_HOME": str(cache),  # (the machine's pyfuse3 build, when it has one)
        "LANG": "C.UTF-8",
    }
    for key in ("PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_CERT"):
        if key in os.environ:
            env[key] = os.environ[key]
    first = subprocess.run(
        [str(clone / "scripts" / "install")], env=env, capture_output=True, text=True,
        timeout=900,
    )  # fmt: skip
    assert first.returncode == 0, first.stdout + first.stderr
    assert "install: done in " in first.stdout
    shutil.rmtree(clone)  # the installed command needs no clone
    exe = home / ".local" / "bin" / "pisessfs"
    version = subprocess.run([str(exe), "--version"], env=env, capture_output=True, text=True)
    assert version.stdout.startswith("pisessfs ")
    fast = subprocess.run(
        [str(exe.resolve().parent / "python"), "-c",
         "from pisessfs.reads import OPEN_FLAGS; print(OPEN_FLAGS)"],
        env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert fast.stdout.strip() == "True", fast.stderr
    if shutil.which("man"):
        where = subprocess.run(["man", "-w", "pisessfs"], env=env, capture_output=True, text=True)
        assert where.stdout.strip() == f"{home}/.local/share/man/man1/pisessfs.1", where.stderr
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    shutil.copy2(REPO / "scripts" / "install", clone / "scripts" / "install")
    uninstall = subprocess.run(
        [str(clone / "scripts" / "install"), "--uninstall"], env=env, capture_output=True,
        text=True,
    )  # fmt: skip
    assert uninstall.returncode == 0, uninstall.stderr
    assert not exe.exists() and not (home / ".local" / "share" / "pisessfs").exists()
    assert not (home / ".local" / "share" / "man" / "man1" / "pisessfs.1").exists()
