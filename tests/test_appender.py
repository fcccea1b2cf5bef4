"""The append helper process (``pisessfs.appender``): a line reaches the file whole or not
at all, whatever happens to the daemon that sent it."""

from __future__ import annotations

import errno
import logging
import os
import socket
import struct
from pathlib import Path

import pytest

from pisessfs import appender
from pisessfs.appender import Appender
from tests.conftest import wait_for


def test_a_line_put_through_the_helper_is_written_by_another_process(tmp_path: Path) -> None:
    f = tmp_path / "s.jsonl"
    f.write_bytes(b"first\n")
    a = Appender()
    fd = os.open(f, os.O_WRONLY | os.O_APPEND)
    try:
        a.put(fd, b"x" * 3_000_000 + b"\n")
        helper = a._proc
        assert helper is not None and helper.pid != os.getpid()
        a.put(fd, b"third\n")
        assert a._proc is helper, "one helper serves every line"
    finally:
        os.close(fd)
        a.close()
    assert f.read_bytes() == b"first\n" + b"x" * 3_000_000 + b"\nthird\n"
    assert helper.returncode == 0, "it exits when the daemon's end closes"


def test_a_failed_write_answers_its_errno(tmp_path: Path) -> None:
    f = tmp_path / "s.jsonl"
    f.write_bytes(b"")
    a = Appender()
    fd = os.open(f, os.O_RDONLY)
    try:
        with pytest.raises(OSError) as caught:
            a.put(fd, b"line\n")
    finally:
        os.close(fd)
        a.close()
    assert caught.value.errno == errno.EBADF
    assert f.read_bytes() == b""


def test_a_line_cut_off_by_the_daemons_death_writes_nothing(tmp_path: Path) -> None:
    # What a daemon killed in the middle of sending leaves: a header, the descriptor, and
    # part of the line. The helper must write none of it, and exit.
    f = tmp_path / "s.jsonl"
    f.write_bytes(b"first\n")
    sock, proc = appender._start()
    fd = os.open(f, os.O_WRONLY | os.O_APPEND)
    try:
        sock.sendmsg(
            [struct.pack("<Q", 1_000_000)],
            [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", fd))],
        )
        sock.sendall(b"y" * 400_000)
    finally:
        os.close(fd)
        sock.close()
    wait_for(lambda: proc.poll() is not None, 10, "the helper to exit")
    assert proc.returncode == 0
    assert f.read_bytes() == b"first\n"


@pytest.mark.warns
def test_a_dead_helper_is_replaced_and_no_save_is_lost(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    f = tmp_path / "s.jsonl"
    f.write_bytes(b"")
    a = Appender()
    fd = os.open(f, os.O_WRONLY | os.O_APPEND)
    try:
        a.put(fd, b"one\n")
        first = a._proc
        assert first is not None
        first.kill()
        first.wait()
        a.put(fd, b"two\n")  # written in-process: the socket to the dead one is broken
        a.put(fd, b"three\n")  # by a new helper
        assert a._proc is not None and a._proc.pid != first.pid
    finally:
        os.close(fd)
        a.close()
    assert f.read_bytes() == b"one\ntwo\nthree\n"
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(said) == 1 and said[0].startswith("append helper: sending failed"), said
