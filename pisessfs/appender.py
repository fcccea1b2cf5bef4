"""The process that puts each saved line in its file, so a save is whole or absent even
when the daemon is killed in the middle of it.

The kernel copies a big ``write(2)`` to a file page by page and stops at the page where a
``SIGKILL`` arrives, so a daemon killed while writing a 500 KB line left half of it in the
session (the attack's kill part: 2 of 120 rounds), and Pi then drops that line and the
next one glued to it. A process cannot guard itself against its own ``kill -9``, so the
daemon hands each line to this helper instead: ``writer.write`` opens and checks the file
(no link followed, the file it read), then :meth:`Appender.put` sends the helper the open
descriptor and the whole line over a socket. The helper writes nothing until it holds every
byte; once it does, it writes and fsyncs all of it whatever happens to the daemon, answers
the errno (0 for done), and exits when the daemon's end of the socket closes. Killed while
sending, the daemon leaves a message the helper discards: no byte of it reaches the file.

Run as ``python -m pisessfs.appender --fd N``; it imports only the standard library. It
ignores the terminal's signals (a Ctrl-C of a foreground mount is the daemon's to handle)
and holds no descriptor but its socket and the file of the line in hand.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

log = logging.getLogger(__name__)

_HEADER = struct.Struct("<Q")  # the length of the line that follows
_ANSWER = struct.Struct("<i")  # 0, or the errno of the failed write or fsync

# Fault injection for the tests only: write a line in two halves this many seconds apart,
# as the kernel does page by page, so a test can kill the daemon between them.
SPLIT_ENV = "PISESSFS_FAULT_SPLIT_WRITE"


def write_whole(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd`` (looping over short writes) and fsync it.

    Raises OSError."""
    view = memoryview(data)
    pause = _split_pause()
    if pause and len(view) > 1:
        half = len(view) // 2
        view = view[os.write(fd, view[:half]) :]
        time.sleep(pause)
    while view:
        view = view[os.write(fd, view) :]
    os.fsync(fd)


def _split_pause() -> float:
    try:
        return float(os.environ.get(SPLIT_ENV, "0"))
    except ValueError:
        return 0.0


class Appender:
    """The daemon's side: one helper process, one request at a time (threads take turns).

    When the helper cannot be started or dies, :meth:`put` says so once in the log, starts
    another for the next line, and meanwhile writes in-process (a save works; only the
    guarantee against a kill mid-write is gone until a helper runs again)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._warned = False

    def put(self, fd: int, data: bytes) -> None:
        """Append ``data`` to the open file ``fd`` through the helper; blocking.

        Raises OSError: the helper's write or fsync failed (its errno), or the helper died
        after it had the whole line (EIO: whether the line is in the file is unknown)."""
        with self._lock:
            sock = self._helper()
            if sock is None:
                write_whole(fd, data)
                return
            try:
                sock.sendmsg(
                    [_HEADER.pack(len(data))],
                    [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", fd))],
                )
                sock.sendall(data)
            except OSError as err:  # it died before it had the line: nothing was written
                self._lost(f"sending failed: {err.strerror}")
                write_whole(fd, data)
                return
            answer = _recv_exact(sock, _ANSWER.size)
            if answer is None:
                self._lost("it exited before it answered")
                raise OSError(errno.EIO, "the append helper died while writing the line")
        code = _ANSWER.unpack(answer)[0]
        if code:
            raise OSError(code, os.strerror(code))

    def close(self, timeout: float = 5.0) -> None:
        """Close the socket (the helper finishes what it holds, then exits) and reap it."""
        with self._lock:
            proc = self._drop()
        if proc is not None:
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                log.warning("the append helper (pid %d) did not exit; leaving it", proc.pid)

    def _helper(self) -> socket.socket | None:
        if self._sock is not None:
            return self._sock
        try:
            self._sock, self._proc = _start()
        except OSError as err:
            self._warn(f"cannot start it: {err}")
            return None
        return self._sock

    def _lost(self, why: str) -> None:
        """The helper is gone or broken: reap it; the next line starts another."""
        self._warn(why)
        proc = self._drop()
        if proc is not None and proc.poll() is None:
            proc.kill()
        if proc is not None:
            proc.wait()

    def _drop(self) -> subprocess.Popen[bytes] | None:
        if self._sock is not None:
            self._sock.close()
        self._sock = None
        proc, self._proc = self._proc, None
        return proc

    def _warn(self, why: str) -> None:
        if not self._warned:
            self._warned = True
            log.warning("append helper: %s; writing in-process until another one runs", why)


def package_env() -> dict[str, str]:
    """The environment of a helper process of the package (``python -m pisessfs.…``: this
    one, the watchdog, the render workers): this one's, with the package importable."""
    package_parent = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_parent, env.get("PYTHONPATH")]))
    return env


def _start() -> tuple[socket.socket, subprocess.Popen[bytes]]:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pisessfs.appender", "--fd", str(theirs.fileno())],
            stdin=subprocess.DEVNULL,
            close_fds=True,
            pass_fds=(theirs.fileno(),),
            start_new_session=True,  # not in the terminal's process group: no Ctrl-C
            cwd="/",
            env=package_env(),
        )
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()
    return ours, proc


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    """``n`` bytes from ``sock``, or None at EOF before them."""
    parts: list[bytes] = []
    while n:
        try:
            part = sock.recv(min(n, 1 << 20))
        except ConnectionResetError:
            return None
        if not part:
            return None
        parts.append(part)
        n -= len(part)
    return b"".join(parts)


# -- the helper --------------------------------------------------------------------------------


def serve(sock: socket.socket) -> int:
    """Take requests until the daemon's end closes: each is written only once it is whole."""
    while True:
        got = _request(sock)
        if got is None:
            return 0
        fd, data = got
        try:
            write_whole(fd, data)
            code = 0
        except OSError as err:
            code = err.errno or errno.EIO
        finally:
            os.close(fd)
        try:
            sock.sendall(_ANSWER.pack(code))
        except OSError:
            return 0  # the daemon is gone; the line is in the file


def _request(sock: socket.socket) -> tuple[int, bytes] | None:
    """The next descriptor and line, or None when the socket closed before a whole one."""
    fds: list[int] = []
    try:
        head, ancdata, _flags, _addr = sock.recvmsg(
            _HEADER.size, socket.CMSG_SPACE(struct.calcsize("i"))
        )
    except ConnectionResetError:
        return None
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds += struct.unpack(f"{len(payload) // 4}i", payload[: len(payload) // 4 * 4])
    if len(head) < _HEADER.size:
        head_rest = _recv_exact(sock, _HEADER.size - len(head)) if head else None
        if head_rest is None:
            _close_all(fds)
            return None
        head += head_rest
    data = _recv_exact(sock, _HEADER.unpack(head)[0])
    if data is None or len(fds) != 1:
        _close_all(fds)  # cut off mid-line (the daemon died): none of it is written
        return None
    return fds[0], data


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="pisessfs.appender")
    p.add_argument("--fd", type=int, required=True)
    args = p.parse_args(argv)
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)  # it ends when the daemon's end of the socket does
    try:
        return serve(socket.socket(fileno=args.fd))
    except BaseException as err:  # a helper never prints a traceback
        print(f"pisessfs.appender: {err!r}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
