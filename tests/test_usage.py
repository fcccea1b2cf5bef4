"""``usage/`` (DESIGN "Usage"): tokens and cost by day, month, project and model, each entry
counted once, equal to a sum over the raw files and to what the real Pi counts."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from pisessfs import usage
from pisessfs.sessions import Store
from tests import damaged
from tests.conftest import copies, fixture_files, mounted, pi, wait_for
from tests.driven import Driven

FILES = ["daily.csv", "monthly.csv", "projects.csv", "models.csv", "usage.md"]


def rows(text: bytes) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text.decode())))


def raw_sums(files: list[Path]) -> dict[str, dict[str, float]]:
    """Sums over the raw files, the plain way: every line, Pi's rules, by key."""
    out: dict[str, dict[str, float]] = {}
    by: dict[str, defaultdict[str, float]] = {k: defaultdict(float) for k in ("day", "model")}
    for f in files:
        for line in f.read_bytes().splitlines():
            try:
                d = json.loads(line)
            except ValueError:
                continue
            if not isinstance(d, dict):
                continue
            got = d.get("message")
            msg: dict[str, Any] = got if isinstance(got, dict) else {}
            role = msg.get("role")
            if d.get("type") == "usage":
                u, key = d.get("usage"), f"{d.get('provider')}/{d.get('model')}"
            elif d.get("type") in ("compaction", "branch_summary") and d.get("usage"):
                u, key = d["usage"], usage.TOOLS
            elif d.get("type") == "message" and role == "assistant":
                model = msg.get("responseModel") or msg.get("model")
                u, key = msg.get("usage"), f"{msg.get('provider')}/{model}"
                by["model"][key + "#messages"] += 1
            elif d.get("type") == "message" and role == "toolResult" and msg.get("usage"):
                u, key = msg["usage"], usage.TOOLS
            else:
                continue
            if not isinstance(u, dict):
                continue
            tokens = sum(u.get(k, 0) for k in ("input", "output", "cacheRead", "cacheWrite"))
            cost = u.get("cost", {}).get("total", 0)
            by["model"][key] += tokens
            by["model"][key + "#cost"] += cost
            by["day"][str(d.get("timestamp", ""))[:10]] += tokens
    for k, v in by.items():
        out[k] = dict(v)
    return out


def read(v: Driven, name: str) -> bytes:
    return v.content(v.lookup(v.lookup(1, "usage").ino, name).ino)


def test_each_line_counts_as_pi_counts_it_and_a_bad_value_counts_as_nothing() -> None:
    sums: usage.Sums = {}
    at = "2026-03-02T09:14:05.120Z"
    u = {"input": 10, "output": 5, "cacheRead": 100, "cacheWrite": 1, "cost": {"total": 0.5}}
    lines: list[dict[str, Any]] = [
        {
            "type": "message",
            "timestamp": at,
            "message": {
                "role": "assistant",
                "provider": "p",
                "model": "m",
                "responseModel": "m2",
                "usage": u,
            },
        },
        {
            "type": "message",
            "timestamp": at,
            "message": {"role": "assistant", "provider": "p", "model": "m"},
        },  # no usage: a message all the same
        {"type": "message", "timestamp": at, "message": {"role": "toolResult", "usage": u}},
        {"type": "usage", "timestamp": at, "provider": "q", "model": "n", "usage": u},
        {"type": "compaction", "timestamp": "2026-03-03T00:00:00Z", "usage": u},
        {"type": "branch_summary", "timestamp": at},  # no usage: nothing
        {"type": "message", "timestamp": at, "message": {"role": "user", "content": "usage"}},
        {
            "type": "message",
            "timestamp": "not a time",
            "message": {
                "role": "assistant",
                "provider": "p",
                "model": "m",
                "usage": {"input": "9", "output": True, "cacheRead": 1e300, "cost": {"total": "1"}},
            },
        },
    ]
    for d in lines:
        usage.count_line(sums, json.dumps(d).encode())
    usage.count_line(sums, b'{"type":"usage","usage":')  # cut short: nothing
    lone = b'{"type":"usage","provider":"\\ud800","model":"m","usage":{"input":1}}'
    usage.count_line(sums, lone)  # a lone surrogate JSON may hold: shown as "?"
    assert sums.pop(("unknown", "?/m"), None) == [0, 1, 0, 0, 0, 0.0]
    usage.count_line(sums, b"[" * 100_000)  # nested past any parser's depth: nothing
    deep = b'{"type":"usage","usage":' + b"[" * 5000 + b"]" * 5000 + b"}"
    usage.count_line(sums, deep)  # valid JSON, thousands deep: nothing, and no error
    assert sums[("2026-03-02", "p/m2")] == [1, 10, 5, 100, 1, 0.5]
    assert sums[("2026-03-02", "p/m")] == [1, 0, 0, 0, 0, 0.0]
    assert sums[("2026-03-02", usage.TOOLS)] == [0, 10, 5, 100, 1, 0.5]
    assert sums[("2026-03-02", "q/n")] == [0, 10, 5, 100, 1, 0.5]
    assert sums[("2026-03-03", usage.TOOLS)] == [0, 10, 5, 100, 1, 0.5]
    assert sums[("unknown", "p/m")] == [1, 0, 0, 0, 0, 0.0]  # bad values: counted as 0
    assert len(sums) == 6


def test_a_scan_from_where_the_last_ended_adds_up_to_a_whole_scan(tmp_path: Path) -> None:
    f = next(p for p in fixture_files() if p.name == "pi-v1-large-session.jsonl")
    data = f.read_bytes()
    whole = usage.scan(lambda n, off: data[off : off + n], 0, len(data))
    cut = len(data) // 3  # (the middle of a line)
    first = usage.scan(lambda n, off: data[off : off + n], 0, cut)
    assert first.offset <= cut and data[first.offset - 1 : first.offset] == b"\n"
    rest = usage.scan(lambda n, off: data[off : off + n], first.offset, len(data))
    summed: usage.Sums = {k: list(v) for k, v in first.sums.items()}
    for k, v in rest.sums.items():
        summed[k] = [a + b for a, b in zip(summed.get(k, [0] * 6), v, strict=True)]
    assert summed.keys() == whole.sums.keys() and rest.offset == whole.offset == len(data)
    for k in whole.sums:
        assert summed[k][:5] == whole.sums[k][:5] and math.isclose(summed[k][5], whole.sums[k][5])


@pytest.mark.pi
@pytest.mark.parametrize("by", ["parse", "scan"])
def test_usage_equals_the_raw_files_and_what_the_real_pi_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, by: str
) -> None:
    """Each file of ``usage/`` on the fixtures and examples: its totals are a sum over the
    raw files, and per model what Pi's own ``getUsageCostBreakdown`` gives, summed over the
    sessions; the sessions' totals are what Pi's footer shows (``getSessionStats``). Counted
    by each file's parse, and by its lines scanned (a file too big to parse for it)."""
    if by == "scan":
        monkeypatch.setattr(usage, "PARSE_MAX", -1)
    root = copies(tmp_path)
    files = sorted(root.rglob("*.jsonl"))
    raw = raw_sums(files)
    v = Driven(Store(str(root)))
    assert [n for n, _ in v.children(v.lookup(1, "usage").ino)] == FILES
    models = rows(read(v, "models.csv"))
    daily = rows(read(v, "daily.csv"))
    total_tokens = sum(int(r["total_tokens"]) for r in daily)
    assert total_tokens == sum(raw["day"].values()) > 0
    for r in models:
        key = f"{r['provider']}/{r['model']}"
        assert int(r["total_tokens"]) == raw["model"].get(key, 0), key
        assert int(r["messages"]) == raw["model"].get(key + "#messages", 0), key
        assert math.isclose(float(r["cost"]), raw["model"].get(key + "#cost", 0), abs_tol=1e-5)
    # the real Pi, session by session, with its own code (a copy: it may migrate a v1 file)
    pi_tokens, pi_cost, pi_messages = 0, 0.0, 0
    by_model: defaultdict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for f in files:
        copy = tmp_path / "pi" / f.name
        copy.parent.mkdir(exist_ok=True)
        shutil.copyfile(f, copy)
        got = pi("--usage", str(copy))
        pi_tokens += got["tokens"]["total"]
        pi_cost += got["cost"]
        pi_messages += got["assistantMessages"]
        for b in got["breakdown"]:
            by_model[b["key"]][0] += b["tokens"]
            by_model[b["key"]][1] += b["cost"]
    assert total_tokens == pi_tokens
    assert sum(int(r["messages"]) for r in daily) == pi_messages
    assert math.isclose(sum(float(r["cost"]) for r in daily), pi_cost, abs_tol=1e-4)
    shown = {f"{r['provider']}/{r['model']}": r for r in models}
    for key, (tokens, cost) in by_model.items():  # (Pi leaves out a model of 0 tokens, $0)
        assert int(shown[key]["total_tokens"]) == tokens, key
        assert math.isclose(float(shown[key]["cost"]), cost, abs_tol=1e-5), key
    # a month is its days; a project, its sessions
    monthly = rows(read(v, "monthly.csv"))
    assert sum(int(r["total_tokens"]) for r in monthly) == total_tokens
    projects = rows(read(v, "projects.csv"))
    assert {r["project"] for r in projects} <= {p.name.strip("-") for p in root.iterdir()}
    assert sum(int(r["total_tokens"]) for r in projects) == total_tokens
    md = read(v, "usage.md").decode()
    assert md.startswith(f"# Usage of {len(files)} sessions") and "## Every model" in md


@pytest.mark.fuse
def test_usage_on_a_mount_follows_an_append_and_leaves_out_what_others_may_not_read(
    tmp_path: Path,
) -> None:
    """``ls usage/`` lists its five files; ``cat`` reads the sums; a line Pi appends shows
    in them (within a second: every stat asks); a glob over sessions meets each once."""
    root = copies(tmp_path)
    files = sorted(root.rglob("*.jsonl"))
    with mounted(root) as m:
        assert sorted(os.listdir(m.path / "usage")) == sorted(FILES)
        assert len(list(m.path.glob("*/*/session.json"))) == len(files)  # latest: not again
        before = rows((m.path / "usage" / "models.csv").read_bytes())
        assert os.stat(m.path / "usage" / "daily.csv").st_size == len(
            (m.path / "usage" / "daily.csv").read_bytes()
        )
        u = {"input": 7, "output": 3, "cacheRead": 0, "cacheWrite": 0, "cost": {"total": 1.25}}
        line = {
            "type": "message",
            "id": "feedface",
            "parentId": None,
            "timestamp": "2027-01-05T10:00:00.000Z",
            "message": {"role": "assistant", "provider": "zz", "model": "new", "usage": u},
        }
        with open(files[0], "ab") as f:
            f.write(damaged.line(line))

        def shown() -> bool:
            models = rows((m.path / "usage" / "models.csv").read_bytes())
            return any(r["provider"] == "zz" and r["total_tokens"] == "10" for r in models)

        wait_for(shown, 5, "the appended usage in models.csv")
        daily = (m.path / "usage" / "daily.csv").read_text()
        assert "2027-01-05,1,7,3,0,0,10,1.250000" in daily
        assert len(rows((m.path / "usage" / "models.csv").read_bytes())) == len(before) + 1
        assert oct(os.stat(m.path / "usage" / "usage.md").st_mode & 0o777) == "0o444"
        os.chmod(files[1], 0o600)  # one others may not read: neither may they the sums
        wait_for(
            lambda: os.stat(m.path / "usage" / "usage.md").st_mode & 0o777 == 0o400,
            5,
            "the sums' mode to follow",
        )
    assert m.proc.returncode == 0


def test_a_file_that_grew_is_counted_from_where_it_was_and_one_rewritten_anew(
    tmp_path: Path,
) -> None:
    """Appended lines are added to what a file gave; a file rewritten in place (Pi migrates
    an old one so, on the same inode) is counted anew, however it grew. (The files are
    looked at twice a second at most: the sums follow within ``usage.FRESH``.)"""
    (tmp_path / "--p--").mkdir()
    f = tmp_path / "--p--" / "s.jsonl"

    def turn(n: int, tokens: int) -> bytes:
        u = {"input": tokens, "output": 0, "cacheRead": 0, "cacheWrite": 0, "cost": {"total": 0}}
        msg = {"role": "assistant", "provider": "p", "model": "m", "usage": u}
        at = "2026-03-02T09:00:00.000Z"
        return damaged.line({"type": "message", "id": f"{n:08x}", "timestamp": at, "message": msg})

    f.write_bytes(damaged.line(damaged.HEADER) + turn(1, 10) + turn(2, 20))
    v = Driven(Store(str(tmp_path)))

    def tokens() -> list[str]:
        return [r["input"] for r in rows(read(v, "models.csv"))]

    assert tokens() == ["30"]
    with f.open("ab") as out:
        out.write(turn(3, 5))
    wait_for(lambda: tokens() == ["35"], 5, "the appended line counted")
    with f.open("r+b") as again:  # the same inode, other bytes, longer
        again.write(
            damaged.line(damaged.HEADER) + turn(1, 1000) + turn(2, 1) + turn(3, 1) + turn(4, 1)
        )
    wait_for(lambda: tokens() == ["1003"], 5, "the rewritten file counted anew")


def test_a_parsed_session_gives_its_usage_and_usage_reads_it_no_more(tmp_path: Path) -> None:
    """The first walk of a year of sessions parses each and meets ``usage/`` after them: a
    whole parse counts the usage of every line it reads, so ``usage/`` then reads none of
    those files again, and shows what a count of the raw files shows."""
    root = copies(tmp_path)
    v = Driven(Store(str(root)))
    counter: usage.Usage = v.usage()
    opened: list[str] = []
    read_again, parse_again = counter.opened, counter.parse
    assert parse_again is not None

    def opening(path: str) -> int:
        opened.append(path)
        return read_again(path)

    def parsing(path: str) -> tuple[usage.Seen, usage.Sums] | None:
        opened.append(path)
        return parse_again(path)

    counter.opened, counter.parse = opening, parsing
    for project, _ in v.children(1):
        if project in ("latest", "usage", "search"):
            continue
        at = v.lookup(1, project).ino
        for session, _ in v.children(at):
            v.content(v.lookup(v.lookup(at, session).ino, "conversation.md").ino)
    v.disk.settle()  # (the parses' counts are written in the writer's turn)
    shown = {name: read(v, name) for name in FILES}
    assert opened == []
    fresh = Driven(Store(str(root)))  # (counts every file: nothing was parsed)
    assert shown == {name: read(fresh, name) for name in FILES}
    assert rows(shown["models.csv"])


def test_a_count_from_an_offset_is_not_added_where_the_count_is_no_longer_there(
    tmp_path: Path,
) -> None:
    """A parse puts a whole count of a file while a count from the offset reached before is
    under way: the latter is not added (its lines would count twice)."""
    v = Driven(Store(str(tmp_path)))
    table = v.usage().table
    seen = usage.Seen(1, 2, 300, 4, 300, "p", 0)
    table.put("/s.jsonl", seen, {("2026-03-02", "p/m"): [1, 10, 0, 0, 0, 0.5]}, None)
    was = usage.Seen(1, 2, 200, 3, 200, "p", 0)  # (what the slower count started from)
    table.put("/s.jsonl", was, {("2026-03-02", "p/m"): [1, 7, 0, 0, 0, 0.25]}, 100)
    assert table.table("models.csv").rows == [(("p", "m"), [1, 10, 0, 0, 0, 0.5])]
    table.put("/s.jsonl", seen, {("2026-03-02", "p/m"): [1, 7, 0, 0, 0, 0.25]}, 300)
    assert table.table("models.csv").rows == [(("p", "m"), [2, 17, 0, 0, 0, 0.75])]
