"""``search/`` (DESIGN "Search"): queries as names, results as links to the message files,
``<Q>.md`` as one page; on a real mount of every Pi-written session, against the message
files themselves."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import unicodedata
from pathlib import Path

import pytest

from pisessfs import search
from pisessfs.search import BadQuery, parse_query
from pisessfs.sessions import Store
from tests import damaged
from tests.conftest import Mount, copies, mounted, pi, wait_for
from tests.driven import Driven

HEADING = re.compile(r"^## (\d{4,}) (\S+) · (\S+) · ", re.M)


def plain(text: str) -> str:
    """Lower case, accents removed: as the index reads words."""
    decomposed = unicodedata.normalize("NFD", text.casefold())
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def holds(text: str, word: str) -> bool:
    """Whether ``text`` holds ``word`` as a whole word (``word*``: a prefix), as the index's
    tokenizer cuts words (letters and digits; ``_`` separates)."""
    stem, prefix = (word[:-1], True) if word.endswith("*") else (word, False)
    tail = r"[^\W_]*" if prefix else ""
    found = re.search(rf"(?<![^\W_]){re.escape(plain(stem))}{tail}(?![^\W_])", plain(text))
    return found is not None


def message_files(m: Mount) -> dict[tuple[str, str], Path]:
    """Every conversation entry of the mount: (session folder, entry id) -> its message file,
    found from each session's ``conversation.md`` headings."""
    out = {}
    for conv in m.path.glob("*/*/conversation.md"):
        folder = conv.parent
        for num, kind, eid in HEADING.findall(conv.read_text(errors="replace")):
            out[(folder.name, eid)] = folder / "nodes" / eid / f"{num}-{kind}.md"
    return out


def results(folder: Path) -> list[tuple[str, str, Path]]:
    """A query folder's results: (session folder, entry id, the file its link leads to)."""
    out = []
    for name in sorted(os.listdir(folder)):
        target = (folder / name).resolve()
        eid = os.getxattr(folder / name, "user.pi.id").decode()
        out.append((target.parent.parent.parent.name, eid, target))
    return out


QUERIES = ["fraction", "pytest", "frac*", "metric", "the", "kanban", "parser", "commit"]


@pytest.mark.fuse
def test_every_result_holds_its_words_and_every_message_with_them_is_found(
    tmp_path: Path,
) -> None:
    """On a mount of every fixture: each link of ``search/<Q>/`` leads (relatively, inside
    the mount) to the message file of the entry ``user.pi.id`` names, which holds the
    query's words; every message file holding them is among the results (below 200); a
    project's ``search/`` finds the same within its project; ``<Q>.md`` says as much."""
    root = copies(tmp_path)
    with mounted(root) as m:
        files = message_files(m)
        assert len(files) > 500
        texts = {k: p.read_text(errors="replace") for k, p in files.items()}
        for q in QUERIES:
            found = results(m.path / "search" / q)
            want = {k for k, text in texts.items() if holds(text, q)}
            for session, eid, target in found:
                assert target.is_relative_to(m.path)
                assert files[(session, eid)] == target, (q, session, eid)
                assert holds(texts[(session, eid)], q), (q, target)
            got = {(s, e) for s, e, _ in found}
            if len(want) < search.LIMIT:
                assert got == want, q
            else:
                assert len(got) == search.LIMIT and got <= want, q
            page = (m.path / "search" / f"{q}.md").read_text()
            assert page.startswith(f"# {q}: {len(want):,} match")
            assert page.count("\n## ") == len(found)
        # two words: both; a phrase; a word left out
        both = {(s, e) for s, e, _ in results(m.path / "search" / "fraction parser")}
        assert both and all(holds(texts[k], "fraction") and holds(texts[k], "parser") for k in both)
        without = {(s, e) for s, e, _ in results(m.path / "search" / "fraction -parser")}
        assert without and not without & both
        # a project's own search/
        project = next(p for p in sorted(m.path.iterdir()) if p.name.startswith("home-"))
        mine = results(project / "search" / "the")
        assert mine and all(t.is_relative_to(project) for _, _, t in mine)
        assert os.listdir(m.path / "search") == [] and os.listdir(project / "search") == []
        assert "search" not in os.listdir(project)  # (resolves, unlisted: */*/ is sessions)
        sessions = len(list(root.rglob("*.jsonl")))
        assert len(list(m.path.glob("*/*/session.json"))) == sessions
        for name in ("session.json", "conversation.md", "tree.txt", "nodes", ".gitignore"):
            assert not (m.path / "search" / name).exists()  # (*/session.json: sessions only)
    assert m.proc.returncode == 0


@pytest.mark.fuse
@pytest.mark.pi
def test_a_pi_append_is_found_an_edit_through_a_result_forks_and_a_trashed_session_goes(
    tmp_path: Path,
) -> None:
    """A line Pi appends is found within a second; ``sed -i`` on a result edits (forks)
    that message as anywhere else, and the real Pi sees the fork; a session removed leaves
    the results; bad names are ENOENT with a log line, never an error from SQLite."""
    root = copies(tmp_path)
    real = next(p for p in sorted(root.rglob("*.jsonl")) if b'"version":3' in p.read_bytes()[:300])
    with mounted(root) as m:
        assert os.listdir(m.path / "search" / "zyxwvut") == []
        last = [json.loads(x) for x in real.read_bytes().splitlines()][-1]
        line = {
            "type": "message",
            "id": "abad1dea",
            "parentId": last["id"],
            "timestamp": "2027-01-05T10:00:00.000Z",
            "message": {"role": "user", "content": "Please find the Zyxwvut bug", "timestamp": 1},
        }
        with real.open("ab") as f:
            f.write(damaged.line(line))
        wait_for(lambda: len(os.listdir(m.path / "search" / "zyxwvut")) == 1, 5, "the append")
        (hit,) = os.listdir(m.path / "search" / "zyxwvut")
        link = m.path / "search" / "zyxwvut" / hit
        assert os.getxattr(link, "user.pi.id") == b"abad1dea"
        before = len(real.read_bytes().splitlines())
        subprocess.run(["sed", "-i", "s/Zyxwvut/Qwertzu/", str(link)], check=True)
        lines = real.read_bytes().splitlines()
        assert len(lines) == before + 1
        new = json.loads(lines[-1])
        assert new["parentId"] == last["id"]  # a sibling of the edited message: a fork
        copy = tmp_path / "pi-copy.jsonl"
        shutil.copyfile(real, copy)
        oracle = pi(str(copy))
        assert oracle["userTexts"][new["id"]] == "Please find the Qwertzu bug"
        wait_for(lambda: len(os.listdir(m.path / "search" / "qwertzu")) == 1, 5, "the fork")
        real.unlink()  # gone (as trashed): its results go
        wait_for(lambda: os.listdir(m.path / "search" / "zyxwvut") == [], 5, "the removal")
        for bad in ['"', "*", "-word", "()", "a " * 1000, "\udcff\udcfe"]:
            with pytest.raises(FileNotFoundError):
                os.listdir(m.path / "search" / bad)
        for odd in ["NEAR(a b)", "text:foo", "a OR b", "x^y", '"unclosed phrase', "AND"]:
            os.listdir(m.path / "search" / odd)  # a query of its words: no error
        log = m.log_text()
        assert "is no query" in log and "Traceback" not in log and "sqlite3" not in log
    assert m.proc.returncode == 0


def test_a_query_is_words_and_never_reaches_sqlite_as_syntax() -> None:
    """Quotes, ``*``, ``-``, ``:``, brackets, FTS5's own operators, a thousand words, bytes
    that are not UTF-8: a query of the words in it, or :class:`BadQuery`."""
    assert parse_query("docker leak").match == '"docker" AND "leak"'
    assert parse_query("leak*").match == '"leak"*'
    assert parse_query('"memory leak" -docker').match == '("memory leak") NOT ("docker")'
    assert parse_query("a:b NEAR(c)").match == '"a b" AND "NEAR c"'
    for bad in ["", "*", "-", "-x", '""', "()", " ".join(["w"] * 1000), "\udcff"]:
        with pytest.raises(BadQuery):
            parse_query(bad)


def test_the_core_finds_what_the_index_holds_and_a_hostile_query_finds_nothing(
    tmp_path: Path,
) -> None:
    """Without a mount: the results of a query, their page, and every odd query answered
    (SQLite sees each word quoted)."""
    v = Driven(Store(str(copies(tmp_path))))
    folder = v.lookup(1, "search").ino
    found = v.children(v.lookup(folder, "fraction").ino)
    assert found and all(n.startswith(f"{i:03d}-") for i, (n, _) in enumerate(found, 1))
    page = v.content(v.lookup(folder, "fraction.md").ino).decode()
    assert page.count("**") >= 2 and "/nodes/" in page
    for odd in ['a" OR "b', "text:x", "x AND", "NOT y", "'quoted'", "é*", "1e10"]:
        v.children(v.lookup(folder, odd).ino)


def test_a_file_that_grew_is_indexed_from_where_it_was_and_one_rewritten_anew(
    tmp_path: Path,
) -> None:
    """Appended entries are added to the index; a file rewritten in place (the same inode,
    longer: Pi migrating an old file) is indexed anew: its old words are found no more."""
    (tmp_path / "--p--").mkdir()
    f = tmp_path / "--p--" / "s.jsonl"

    def user(n: int, parent: int | None, text: str) -> bytes:
        return damaged.line(damaged.user(f"{n:08x}", f"{parent:08x}" if parent else None, text, n))

    f.write_bytes(damaged.line(damaged.HEADER) + user(1, None, "alpha bravo"))
    v = Driven(Store(str(tmp_path)))
    folder = v.lookup(1, "search").ino

    def found(word: str) -> list[str]:
        return [n for n, _ in v.children(v.lookup(folder, word).ino)]

    assert len(found("alpha")) == 1 and found("charlie") == []
    with f.open("ab") as out:
        out.write(user(2, 1, "charlie delta"))
    wait_for(lambda: len(found("charlie")) == 1, 5, "the appended entry")
    assert len(found("alpha")) == 1  # (indexed once, not again)
    with f.open("r+b") as again:  # the same inode, other entries, longer
        again.write(damaged.line(damaged.HEADER) + user(7, None, "echo foxtrot golf hotel"))
        again.write(user(8, 7, "india"))
    wait_for(lambda: len(found("echo")) == 1, 5, "the rewritten file")
    assert found("alpha") == [] and found("charlie") == [] and len(found("india")) == 1
    page = v.content(v.lookup(folder, "alpha.md").ino).decode()
    assert page.startswith("# alpha: 0 matches in 1 of 1 sessions")  # (its words stay: unmatched)
    assert v.content(v.lookup(folder, "india.md").ino).decode().startswith("# india: 1 match ")


def test_a_query_during_the_first_build_answers_from_what_is_indexed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first build longer than a query's budget goes on in a thread of its own: a query
    meanwhile answers at once, its page saying how much is indexed, and later ones find
    everything."""
    root = copies(tmp_path)
    monkeypatch.setattr(search, "BUDGET", 0.0)  # (every build is longer than that)
    v = Driven(Store(str(root)))
    folder = v.lookup(1, "search").ino
    first = v.content(v.lookup(folder, "fraction.md").ino).decode().splitlines()[0]
    n = len(list(root.rglob("*.jsonl")))
    assert re.fullmatch(rf"# fraction: [\d,]+ match(es)? in [\d,]+ of {n} sessions", first)
    wait_for(lambda: not v.search().progress.building, 30, "the build")
    assert v.search().said() == f"{n} of {n} sessions indexed"
    page = v.content(v.lookup(folder, "fraction parser.md").ino).decode()
    assert page.startswith("# fraction parser: ") and f"in {n} of {n} sessions" in page


@pytest.mark.warns  # (the damaged line is logged)
def test_what_a_damaged_session_shows_is_found_and_its_problems_are_not(tmp_path: Path) -> None:
    """An entry of a damaged session that the mount shows is searchable; the words of a
    line Pi skips (not JSON) are not, nor what the mount says of its problems."""
    (tmp_path / "--p--").mkdir()
    good = damaged.line(damaged.user("aaaaaaaa", None, "the kept wordofgood", 1))
    bad = b'{"type":"message","id":"bbbbbbbb","message": wordofbad\n'
    (tmp_path / "--p--" / "s.jsonl").write_bytes(damaged.line(damaged.HEADER) + good + bad)
    v = Driven(Store(str(tmp_path)))
    folder = v.lookup(1, "search").ino
    assert len(v.children(v.lookup(folder, "wordofgood").ino)) == 1
    assert v.children(v.lookup(folder, "wordofbad").ino) == []
    assert v.children(v.lookup(folder, "malformed").ino) == []  # (tree.txt's word for it)


def test_an_entry_id_no_utf_8_holds_is_indexed_and_indexed_again_from_where_it_was(
    tmp_path: Path,
) -> None:
    """An id Pi may write (JSON's ``\\ud800``: a lone surrogate, no UTF-8) on the last entry
    indexed is kept with the file's row as the rest are, and read back: the attack's fuzz
    part found the index of such a file failing (a traceback, the session left out)."""
    (tmp_path / "--p--").mkdir()
    f = tmp_path / "--p--" / "s.jsonl"
    odd = b'{"type":"message","id":"ab\\ud800cd","parentId":null,'
    odd += b'"timestamp":"2026-03-02T09:14:06Z","message":{"role":"user","content":"kilo"}}\n'
    f.write_bytes(damaged.line(damaged.HEADER) + odd)
    v = Driven(Store(str(tmp_path)))
    folder = v.lookup(1, "search").ino

    def found(word: str) -> int:
        return len(v.children(v.lookup(folder, word).ino))

    assert found("kilo") == 1
    kept = v.search().indexed()[str(f)].last
    assert kept is not None and kept[0] == "ab\ud800cd"  # (read back as it was)
    with f.open("ab") as out:  # (indexed from the odd id on)
        out.write(damaged.line(damaged.user("0000000b", None, "lima", 2)))
    wait_for(lambda: found("lima") == 1, 5, "the appended entry")
    assert found("kilo") == 1  # (not indexed anew, nor twice)


@pytest.mark.fuse
def test_results_let_read_only_whom_every_session_among_them_lets(tmp_path: Path) -> None:
    """A session others may not read (``0600``) makes the results it is among ``0500`` and
    their page ``0400``: its words are never shown to another user (``--allow-other``)."""
    root = copies(tmp_path)
    with mounted(root) as m:
        q = m.path / "search" / "fraction"
        assert os.stat(q).st_mode & 0o777 == 0o555
        assert os.stat(m.path / "search" / "fraction.md").st_mode & 0o777 == 0o444
        _, _, target = results(q)[0]
        session = target.parent.parent.parent  # (its file: nodes/<id>/<file>)
        real = Path(os.getxattr(session, "user.pi.file").decode())
        assert real.is_relative_to(root)
        os.chmod(real, 0o600)
        wait_for(lambda: os.stat(q).st_mode & 0o777 == 0o500, 5, "the results' mode")
        assert os.stat(m.path / "search" / "fraction.md").st_mode & 0o777 == 0o400
    assert m.proc.returncode == 0
