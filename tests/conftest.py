"""Shared test fixtures: fixture sessions, real mounts, and the Pi oracle.

A test that needs FUSE or Node skips with the exact reason when they are missing; with
``CI=true`` such a skip is a failure instead (DESIGN.md: the interop tests run in CI).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
#: Sessions written by the real Pi, kept in the repository (a clean clone, as CI makes, has
#: no ../shared beside it): a copy of ../shared/fixtures, which test_reading checks it is.
FIXTURES = REPO / "tests" / "fixtures"
SHARED_FIXTURES = REPO.parent / "shared" / "fixtures"
EXAMPLES = REPO / "pisessfs" / "examples" / "sessions"
ORACLE = REPO / "tests" / "pi" / "oracle.mjs"
PI_MODULE = (
    REPO
    / "node_modules"
    / "@earendil-works"
    / "pi-coding-agent"
    / "dist"
    / "core"
    / "session-manager.js"
)
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

# Two example sessions the tests know by heart (pisessfs/examples, always present).
# Their folders are named for people; the file's stem still resolves, as a link to the name.
RECIPE = "home-ana-src-recipe-box/2026-03-02T0914-fix-fraction-parsing-019cadd3"
RECIPE_STEM = "2026-03-02T09-14-05-120Z_019cadd3-7fc0-75ea-a894-d2664c1f3463"
RECIPE_ID = "019cadd3-7fc0-75ea-a894-d2664c1f3463"
RECIPE_FIRST = "pytest fails on the ingredient parser since I added mixed numbers to the tests. "
#: The session forked from RECIPE, in the same project.
FORK = "home-ana-src-recipe-box/2026-03-02T0923-metric-units-for-show-019caddc"
KANBAN = "home-ana-src-tiny-kanban/2026-03-04T1932-i-drew-a-favicon-for-the-board-it-s-019cba56"


def named(path: Path) -> Path:
    """A session folder by its file's stem (a link to the folder's name), as the folder:
    what ``rmdir``, ``rm -r`` and listings of its parent see."""
    return path.parent / os.readlink(path) if path.is_symlink() else path


DROP = "/proc/sys/vm/drop_caches"


def drop_caches(what: str) -> None:
    """Make the kernel drop what it caches: "1" the pages of every file (clean ones: all of
    ours), "2" its names and inodes (and with them their pages)."""
    need(os.access(DROP, os.W_OK), f"dropping the kernel's caches needs root ({DROP})")
    os.sync()
    Path(DROP).write_text(what + "\n")


def need(ok: bool, why: str) -> None:
    """Skip loudly with ``why``; in CI a missing capability fails the test instead."""
    if ok:
        return
    if IN_CI:
        pytest.fail(f"required in CI: {why}")
    pytest.skip(why)


def need_open_flags() -> None:
    """For a test of what the pyfuse3 build of scripts/setup adds (FOPEN_NOFLUSH, no
    opendir): skip loudly on a stock pyfuse3, fail in CI."""
    from pisessfs.reads import NO_OPENDIR, OPEN_FLAGS

    need(
        OPEN_FLAGS and NO_OPENDIR,
        "pyfuse3 lacks patches/pyfuse3-3.5.0-walks.patch (run scripts/setup), or Linux < 5.1",
    )


def pisessfs(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``pisessfs ARGS`` from this checkout, as a user runs it: its exit code and output."""
    return subprocess.run(
        [sys.executable, "-m", "pisessfs.cli", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        env=env,
    )


def fuse_missing() -> str | None:
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing: no real mount possible"
    if shutil.which("fusermount3") is None:
        return "fusermount3 is not installed (apt install fuse3)"
    try:
        import pyfuse3  # noqa: F401
    except ImportError as err:
        return f"pyfuse3 does not import: {err}"
    return None


def pi_missing() -> str | None:
    if shutil.which("node") is None:
        return "node is not installed: the Pi interop tests need it"
    if not PI_MODULE.exists():
        return "the pinned Pi package is not installed (run npm ci in the repo)"
    return None


#: The markers of the test running now (``_marks``): a test that mounts must be marked
#: ``fuse``, one that asks the real Pi ``pi``, so that ``-m "not fuse and not pi"`` is the
#: core tier, which needs neither (``mounted`` and ``pi`` check it).
_MARKS: set[str] = set()


@pytest.fixture(autouse=True)
def _marks(request: pytest.FixtureRequest) -> Iterator[None]:
    _MARKS.clear()
    _MARKS.update(m.name for m in request.node.iter_markers())
    yield
    _MARKS.clear()


def marked(name: str) -> None:
    """Fail a test that needs ``name`` (``fuse``, ``pi``) but is not marked so."""
    if name not in _MARKS:
        pytest.fail(f"this test needs {name}: mark it @pytest.mark.{name} (or its module)")


@pytest.fixture(autouse=True)
def _no_unexpected_warnings(
    request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> Iterator[None]:
    """Fail a test that logged a warning it did not expect (s3ql's habit)."""
    caplog.set_level(logging.INFO)
    yield
    if request.node.get_closest_marker("warns"):
        return
    bad = [r for r in caplog.get_records("call") if r.levelno >= logging.WARNING]
    assert not bad, "unexpected warnings: " + "; ".join(r.getMessage() for r in bad)


@pytest.fixture(autouse=True)
def _own_cache_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every mount a test starts keeps its disk cache (on by default) in a folder of the
    test's, never in the real ``~/.cache/pisessfs``, and its log (a daemon's, by default)
    there too, not in ``~/.local/state``."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("xdg-state")))


# -- session files -----------------------------------------------------------------------------


def fixture_files() -> list[Path]:
    """Every Pi-written session we have: the shipped examples and the fixtures."""
    return sorted(EXAMPLES.rglob("*.jsonl")) + sorted(FIXTURES.rglob("*.jsonl"))


@pytest.fixture
def sessions(tmp_path: Path) -> Path:
    """A copy of all fixture sessions, nested like Pi's folder, safe to modify."""
    return copies(tmp_path)


def copies(tmp_path: Path) -> Path:
    """Every Pi-written session copied into ``tmp_path/sessions``, in project folders (Pi
    may rewrite a v1 file it opens)."""
    root = tmp_path / "sessions"
    root.mkdir()
    for f in fixture_files():
        if f.parent.name.startswith("--"):
            dst = root / f.parent.name / f.name
        else:
            dst = root / "--fixtures--" / f.name
        dst.parent.mkdir(exist_ok=True)
        shutil.copyfile(f, dst)
    return root


H1 = "2026-03-02T09-14-06-120Z_h1"  # a hostile session's file stem


@pytest.fixture
def corpus(sessions: Path) -> Path:
    """The fixture sessions and a hostile one (``hostile``), safe to modify."""
    hostile(sessions)
    return sessions


def hostile(root: Path) -> None:
    """A session whose ids and names hold what JSON and file names may: lone surrogates,
    ``..``, ``/``, ``x.md``, and a file name that is not UTF-8."""
    folder = root / "--hostile--"
    folder.mkdir()
    head = {"type": "session", "version": 3, "id": "h0", "timestamp": "2026-03-02T09:14:05.120Z"}
    rows = [head]
    parent = None
    for n, eid in enumerate(["..", "a/b", "x.md", "\ud83d", "\udcff-x", "ok"]):
        text = f"hostile {n} \ud800 needle"
        rows.append(
            {
                "type": "message",
                "id": eid,
                "parentId": parent,
                "timestamp": f"2026-03-02T09:14:0{n}.000Z",
                "message": {"role": "user" if n % 2 == 0 else "assistant", "content": text},
            }
        )
        parent = eid
    for stem, sid in ((os.fsdecode(b"2026-03-02T09-14-05-120Z_h\xff"), "h0"), (H1, "h1")):
        rows[0]["id"] = sid
        data = "".join(json.dumps(r) + "\n" for r in rows).encode("utf-8", "surrogatepass")
        (folder / f"{stem}.jsonl").write_bytes(data)


# -- real mounts -------------------------------------------------------------------------------


#: Where mounts' logs go: a folder of this test run's (pytest keeps the last three runs'
#: and removes older ones), not beside the mountpoints, which live outside /tmp.
_LOG_DIR: list[Path] = []


@pytest.fixture(scope="session", autouse=True)
def _mount_logs(tmp_path_factory: pytest.TempPathFactory) -> None:
    _LOG_DIR[:] = [tmp_path_factory.mktemp("mount-logs")]


def mount_base() -> Path:
    # Outside /tmp: vim and emacs skip their backups under /tmp (fuse-notes.md §2).
    base = Path.home() / ".cache" / "pisessfs-tests"
    base.mkdir(parents=True, exist_ok=True)
    return base


class Mount:
    """A running ``pisessfs mount -f`` subprocess."""

    def __init__(self, path: Path, proc: subprocess.Popen[str], log: Path) -> None:
        self.path = path
        self.proc = proc
        self.log = log

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def is_mounted(path: Path) -> bool:
    """Whether ``path`` is a mount point in /proc/self/mounts: unlike ``os.path.ismount``,
    true for a dead FUSE mount ("Transport endpoint is not connected") too."""
    want = str(path).replace(" ", "\\040")
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == want for line in f)


def wait_for(cond: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    """Poll ``cond`` until true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


@contextlib.contextmanager
def mounted(
    sessions: Path, *extra: str, base: Path | None = None, max_fds: int | None = None
) -> Iterator[Mount]:
    """Mount ``sessions`` in a subprocess; always unmounts, even when the test fails.

    ``base``: the folder to mount in (default: one outside /tmp); ``max_fds``: the daemon's
    ``ulimit -n``.
    """
    marked("fuse")
    need(fuse_missing() is None, fuse_missing() or "")
    mnt = (base or mount_base()) / uuid.uuid4().hex[:8]
    mnt.mkdir()
    log = (_LOG_DIR[0] if _LOG_DIR else mnt.parent) / f"{mnt.name}.log"
    limit = [] if max_fds is None else ["prlimit", f"--nofile={max_fds}:{max_fds}"]

    # Each mount its own disk cache (it is on by default): what one test's mount saved never
    # answers another's (a test of the cache itself passes --disk-cache).
    env = {**os.environ, "XDG_CACHE_HOME": str(mnt.with_suffix(".cache"))}
    # No render workers unless the test asks for them: the others assert what the daemon
    # itself parses and saves; test_workers checks a mount with workers shows the same.
    if not any(a.startswith("--workers") for a in extra):
        extra = ("--workers", "0", *extra)
    with log.open("w") as out:
        proc = subprocess.Popen(
            [
                *limit,
                sys.executable,
                "-m",
                "pisessfs.cli",
                "mount",
                "-f",
                "--sessions",
                str(sessions),
                *extra,
                str(mnt),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=REPO,
            env=env,
        )
    m = Mount(mnt, proc, log)
    try:
        wait_for(lambda: os.path.ismount(mnt) or proc.poll() is not None, 20, "the mount")
        assert proc.poll() is None, "mount exited early:\n" + m.log_text()
        yield m
        _no_stall(m)
    finally:
        _unmount(m)


def _no_stall(m: Mount) -> None:
    """A save, name or label through the mount must not have waited out its bound for the
    kernel: the program that saved stalled (an invalidation waited for a folder the kernel
    held while it waited for the save, as a trash's did)."""
    from pisessfs.invalidator import UNSETTLED

    stalled = [line for line in m.log_text().splitlines() if UNSETTLED in line]
    assert not stalled, "\n".join(stalled)


def _unmount(m: Mount) -> None:
    if is_mounted(m.path):
        subprocess.run(["fusermount3", "-u", str(m.path)], capture_output=True)
    try:
        m.proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        m.proc.kill()
        m.proc.wait()
    if is_mounted(m.path):
        subprocess.run(["fusermount3", "-u", "-z", str(m.path)], capture_output=True)
    with contextlib.suppress(OSError):
        m.path.rmdir()
    shutil.rmtree(m.path.with_suffix(".cache"), ignore_errors=True)


@pytest.fixture
def mount(sessions: Path) -> Iterator[Mount]:
    # PISESSFS_TEST_MOUNT_ARGS=--debug logs every request to the mount's log file
    with mounted(sessions, *os.environ.get("PISESSFS_TEST_MOUNT_ARGS", "").split()) as m:
        yield m
    assert m.proc.returncode == 0, "mount did not exit cleanly:\n" + m.log_text()
    assert "Traceback" not in m.log_text(), m.log_text()


# -- the Pi oracle -----------------------------------------------------------------------------


def pi(*args: str) -> Any:
    """Run the Pi oracle (``tests/pi/oracle.mjs``) and return its JSON answer."""
    marked("pi")
    need(pi_missing() is None, pi_missing() or "")
    out = subprocess.run(
        ["node", str(ORACLE), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=True,
    )
    return json.loads(out.stdout)
