"""Hostile values in session files, one defect each (issue 7: items 6, 7, 8 and 12).

The core only (parser, index, renderers, summaries); the two tests that ask the real Pi need
node and the pinned Pi package (skip loudly without them, fail in CI).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pisessfs import render, summary, writer
from pisessfs.jsonl import Parser, loads_js
from pisessfs.sessions import Loaded, Store
from pisessfs.tree import Index
from tests.conftest import pi

pytestmark = pytest.mark.warns  # a damaged file logs its problems

HEADER = {"type": "session", "version": 3, "id": "s1", "timestamp": "2026-11-20T10:00:00.000Z"}
USER = {"role": "user", "content": "hi", "timestamp": 1795168800000}


def line(obj: object) -> bytes:
    return json.dumps(obj).encode() + b"\n"


def entry(eid: str, parent: str | None, **fields: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"type": "message", "id": eid, "parentId": parent}
    d["timestamp"] = "2026-11-20T10:00:01.000Z"
    d["message"] = USER
    d.update(fields)
    return d


def session(*entries: object, header: object = HEADER) -> bytes:
    return line(header) + b"".join(e if isinstance(e, bytes) else line(e) for e in entries)


def parse(data: bytes) -> tuple[Parser, Index]:
    p = Parser()
    p.feed(data)
    return p, Index([*p.entries, *([p.tail] if p.tail else [])])


def loaded(tmp_path: Path, data: bytes, name: str = "s.jsonl") -> Loaded:
    path = tmp_path / name
    path.write_bytes(data)
    return Store(str(tmp_path)).session(str(path)).load()


def folder_of(eid: str) -> str:
    return "nodes/" + render.sanitize(eid)


def summaries(s: Loaded) -> tuple[str, dict[str, Any]]:
    """tree.txt and session.json, both required to be valid UTF-8 (strict)."""
    tree = summary.tree_txt(s, folder_of).decode("utf-8")
    doc = loads_js(summary.session_json(s, folder_of, set()).decode("utf-8"))
    return tree, doc


def kinds(p: Parser, line_no: int) -> set[str]:
    return {pr.kind for pr in p.problems if pr.line == line_no}


# -- item 6: one bad value is a problem of its entry, never an exception ---------------------


@pytest.mark.parametrize("etype", [{"a": 1}, ["message"], 5, True])
def test_an_entry_type_that_is_no_string_is_a_problem_of_that_entry(etype: object) -> None:
    p, ix = parse(session(entry("aaaaaaaa", None), entry("bbbbbbbb", "aaaaaaaa", type=etype)))
    assert [e.id for e in p.entries] == ["aaaaaaaa", "bbbbbbbb"]
    assert p.entries[1].type == "unknown" and not p.entries[1].numbered
    assert "no-type" in kinds(p, 3)
    assert ix.numbered_path("bbbbbbbb") == ["aaaaaaaa"]


@pytest.mark.parametrize(
    ("ms", "modified"),
    [
        (253402300800000, "+010000-01-01T00:00:00.000Z"),  # still a JavaScript Date
        (1795168800000 * 10**6, None),  # nanoseconds: past a Date
        (1e300, None),
        (-(10**20), None),
        (10**30, None),
        (b"1e400", None),
    ],
    ids=["year-10000", "nanoseconds", "1e300", "negative", "huge-int", "1e400"],
)
def test_message_times_past_a_javascript_date_leave_session_json_whole(
    tmp_path: Path, ms: object, modified: str | None
) -> None:
    number = ms.decode() if isinstance(ms, bytes) else str(ms)
    msg = json.dumps({**USER, "timestamp": "MS"}).replace('"MS"', number).encode()
    data = session(b'{"type":"message","id":"aaaaaaaa","parentId":null,"message":' + msg + b"}\n")
    _, doc = summaries(loaded(tmp_path, data))
    assert doc["counts"]["messages"] == 1
    assert doc["modified"] == (modified or HEADER["timestamp"])  # else the header's, as in Pi


def test_a_number_as_entry_time_orders_children_as_pi_does(tmp_path: Path) -> None:
    # Pi sorts siblings by new Date(timestamp): a number is ms since 1970; odd ones sort last
    odd: list[object] = ["+010000-01-01T00:00:00.000Z", "x" * 10_000, 1e300, {"t": 1}]
    kids = [entry(f"o{n}", "aaaaaaaa", timestamp=t) for n, t in enumerate(odd)]
    kids.append(entry("late", "aaaaaaaa", timestamp="2026-11-20T10:00:05.000Z"))
    kids.append(entry("early", "aaaaaaaa", timestamp=1795168801000))  # 10:00:01
    s = loaded(tmp_path, session(entry("aaaaaaaa", None), *kids))
    assert s.index.children["aaaaaaaa"][:2] == ["early", "late"]
    summaries(s)


@pytest.mark.parametrize("content", [5, 2.5, True, {"type": "text"}, [5, None, "x", []]])
def test_message_content_of_any_type_renders_and_previews(tmp_path: Path, content: object) -> None:
    answer = {"role": "assistant", "content": content, "model": "m", "timestamp": 1}
    data = session(entry("aaaaaaaa", None), entry("bbbbbbbb", "aaaaaaaa", message=answer))
    s = loaded(tmp_path, data)
    d = s.parsed(s.index.by_id["bbbbbbbb"])
    assert render.render(d).startswith(b"model: m\n")
    assert render.preview(d).startswith("assistant:")
    tree, _ = summaries(s)
    assert "bbbbbbbb" in tree


@pytest.mark.parametrize("tools", [5, "abc", {"name": "x"}, [None, 3, {"name": 7}]])
def test_system_prompt_tools_of_any_type_render(tools: object) -> None:
    d = {
        "type": "message",
        "message": {"role": "system", "toolsAdded": tools, "toolsRemoved": tools},
    }
    assert render.render(d).startswith(b"system: prompt update\n")


def test_counts_past_a_double_do_not_break_previews_or_totals(tmp_path: Path) -> None:
    compaction = b'{"type":"compaction","id":"cccccccc","parentId":null,"tokensBefore":1e400}\n'
    usage = b'{"input":1e400,"totalTokens":-1e400,"cost":{"total":1e400}}'
    answer = b'{"role":"assistant","content":[],"usage":' + usage + b',"timestamp":1}'
    turn = b'{"type":"message","id":"dddddddd","parentId":"cccccccc","message":' + answer + b"}\n"
    s = loaded(tmp_path, session(compaction, turn))
    assert render.preview(s.parsed(s.index.by_id["cccccccc"])) == "[compaction: ? tokens]"
    assert b"tokens before" not in render.render(s.parsed(s.index.by_id["cccccccc"]))
    _, doc = summaries(s)
    assert doc["tokens"]["input"] == 0 and doc["cost"] == 0


def test_an_exit_code_or_token_count_that_is_a_bool_is_not_a_number() -> None:
    bash = {
        "type": "message",
        "message": {"role": "bashExecution", "command": "ls", "exitCode": True},
    }
    assert b"exit code" not in render.render(bash)


def test_a_parent_id_nested_thousands_deep_is_a_problem_with_a_short_detail() -> None:
    deep = b"[" * 5000 + b"]" * 5000
    raw = (
        b'{"type":"message","id":"bbbbbbbb","parentId":'
        + deep
        + b',"message":{"role":"user","content":"x"}}\n'
    )
    p, ix = parse(session(entry("aaaaaaaa", None), raw))
    assert [e.id for e in p.entries] == ["aaaaaaaa", "bbbbbbbb"]  # Pi reads the line: so do we
    assert ix.roots == ["aaaaaaaa", "bbbbbbbb"]
    (detail,) = [pr.detail for pr in p.problems if pr.kind == "bad-parent"]
    assert len(detail) < 100


# -- item 7: every line Pi reads, read as Pi reads it ----------------------------------------


def test_a_lone_surrogate_escape_is_read_as_json_parse_reads_it(tmp_path: Path) -> None:
    text = b'{"type":"message","id":"bbbbbbbb","parentId":"aaaaaaaa",'
    text += b'"message":{"role":"user","content":"cut \\ud83d here","timestamp":1}}\n'
    s = loaded(tmp_path, session(entry("aaaaaaaa", None), text))
    assert [e.id for e in s.entries] == ["aaaaaaaa", "bbbbbbbb"]
    assert s.index.resume == "bbbbbbbb"
    # Node writes a lone surrogate as U+FFFD: so does every file of ours
    assert render.render(s.parsed(s.entries[1])) == "cut \ufffd here\n".encode()
    summaries(s)


def test_ids_and_header_fields_with_lone_surrogates_leave_summaries_valid_utf8(
    tmp_path: Path,
) -> None:
    header = b'{"type":"session","version":3,"id":"s\\udc00","cwd":"/w\\ud800","timestamp":"x"}\n'
    first = b'{"type":"message","id":"a\\ud83d","parentId":null,"message":{"role":"user"}}\n'
    second = b'{"type":"label","id":"b\\udfff","parentId":"a\\ud83d","targetId":"a\\ud83d",'
    second += b'"label":"\\ud800"}\n'
    s = loaded(tmp_path, header + first + second)
    assert [e.id for e in s.entries] == ["a\ud83d", "b\udfff"]
    tree, doc = summaries(s)
    assert doc["cwd"] == "/w\ufffd" and "a\ufffd" in tree


@pytest.mark.parametrize(
    "number", [b"1e400", b"-1e400", b"123456789012345678901234567890", b"1" * 5000]
)
def test_numbers_past_64_bits_or_past_a_double_are_read(tmp_path: Path, number: bytes) -> None:
    raw = b'{"type":"custom","id":"bbbbbbbb","parentId":"aaaaaaaa","data":' + number + b"}\n"
    s = loaded(tmp_path, session(entry("aaaaaaaa", None), raw))
    assert [e.id for e in s.entries] == ["aaaaaaaa", "bbbbbbbb"]
    summaries(s)


def test_nesting_deeper_than_orjson_allows_is_read_and_rendered(tmp_path: Path) -> None:
    deep = b"[" * 3000 + b"1" + b"]" * 3000
    call = b'{"type":"toolCall","id":"t","name":"x","arguments":{"a":' + deep + b"}}"
    answer = b'{"role":"assistant","content":[' + call + b'],"timestamp":1}'
    raw = b'{"type":"message","id":"bbbbbbbb","parentId":"aaaaaaaa","message":' + answer + b"}\n"
    s = loaded(tmp_path, session(entry("aaaaaaaa", None), raw))
    assert s.index.numbered_path("bbbbbbbb") == ["aaaaaaaa", "bbbbbbbb"]
    text = render.render(s.parsed(s.index.by_id["bbbbbbbb"]))
    assert text.count(b"[") == 3000 and len(text) < 100_000  # deep levels are not indented
    summaries(s)


def test_json_parse_grammar_exactly_lone_surrogates_in_nan_out() -> None:
    accepted = [b'"\\ud83d"', b'"\\udc00\\ud800"', b"1e400", b"-1e400", b"[" * 1500 + b"]" * 1500]
    rejected = [b"NaN", b"Infinity", b"-Infinity", b"[1,]", b"01", b"'x'", b'"\\x41"', b"+1"]
    for n, value in enumerate([*accepted, *rejected], start=3):
        raw = b'{"type":"custom","id":"i%d","parentId":null,"data":%b}\n' % (n, value)
        p, _ = parse(session(entry("aaaaaaaa", None), raw))
        ids = [e.id for e in p.entries]
        assert ids == (["aaaaaaaa", f"i{n}"] if value in accepted else ["aaaaaaaa"]), value
        assert value in accepted or kinds(p, 3) == {"malformed-json"}


def test_invalid_utf8_and_a_lone_surrogate_escape_in_one_line_are_read() -> None:
    raw = b'{"type":"message","id":"bbbbbbbb","parentId":"aaaaaaaa","message":{"role":"user",'
    raw += b'"content":"\xff and \\ud83d"}}\n'
    p, _ = parse(session(entry("aaaaaaaa", None), raw))
    assert [e.id for e in p.entries] == ["aaaaaaaa", "bbbbbbbb"]
    assert kinds(p, 3) == {"invalid-utf8"}


def test_a_session_file_name_with_invalid_utf8_shows_in_the_summaries(tmp_path: Path) -> None:
    s = loaded(
        tmp_path,
        session(entry("aaaaaaaa", None)),
        name=b"\xff\xfe.jsonl".decode(errors="surrogateescape"),
    )
    _, doc = summaries(s)
    assert doc["file"].endswith("/\ufffd\ufffd.jsonl")


def test_the_first_value_pi_keeps_must_be_the_header() -> None:
    for first in (b"5", b"[1]", b'"x"', b"true", b"{}"):  # Pi keeps them: no session
        p, _ = parse(first + b"\n" + session(entry("aaaaaaaa", None)))
        assert p.header is None and "no-header" in kinds(p, 1), first
    for first in (b"null", b"false", b"0", b'""', b"   "):  # Pi skips them: line 2 is the header
        p, _ = parse(first + b"\n" + session(entry("aaaaaaaa", None)))
        assert p.header is not None and p.header.line == 2, first
        assert [e.id for e in p.entries] == ["aaaaaaaa"]


TREE_VERSIONS: list[object] = ["3", [3], 2.5, 3.5, {}, 4, "abc"]  # >= 3, or NaN: Pi keeps the tree
LINEAR_VERSIONS: list[object] = [
    [],
    "1",
    None,
    True,
    1,
    -5,
]  # < 2 (an absent or null version is 1): v1


@pytest.mark.parametrize(
    ("version", "linear"),
    [*((v, False) for v in TREE_VERSIONS), *((v, True) for v in LINEAR_VERSIONS)],
)
def test_the_header_version_is_compared_as_javascript_compares_it(
    version: object, linear: bool
) -> None:
    p, ix = parse(
        session(
            entry("aaaaaaaa", None), entry("bbbbbbbb", None), header={**HEADER, "version": version}
        )
    )
    assert p.linear is linear
    if linear:  # Pi migrates: new ids, one chain in file order
        assert [e.id for e in p.entries] == ["L2", "L3"] and ix.parent["L3"] == "L2"
    else:
        assert ix.roots == ["aaaaaaaa", "bbbbbbbb"]


@pytest.mark.parametrize("value", [b"7", b"[1]", b'"x"', b"true", b"{}"])
def test_a_value_pi_keeps_after_the_header_is_an_entry_and_may_be_the_resume_leaf(
    value: bytes,
) -> None:
    p, ix = parse(session(entry("aaaaaaaa", None), value + b"\n"))
    assert len(p.entries) == 2 and ix.resume == "L3"  # Pi resumes at that line: an empty path
    assert ix.numbered_path("L3") == []


@pytest.mark.parametrize("value", [b"null", b"false", b"0", b"-0.0", b'""'])
def test_a_value_pi_skips_after_the_header_is_no_entry(value: bytes) -> None:
    p, ix = parse(session(entry("aaaaaaaa", None), value + b"\n"))
    assert [e.id for e in p.entries] == ["aaaaaaaa"] and ix.resume == "aaaaaaaa"
    assert kinds(p, 3) == {"not-an-object"}


def test_an_array_line_of_a_v1_file_is_a_link_of_its_chain() -> None:
    v1 = {k: v for k, v in HEADER.items() if k != "version"}
    p, ix = parse(session(entry("x", None), b"[1]\n", entry("y", None), header=v1))
    assert [e.id for e in p.entries] == ["L2", "L3", "L4"] and ix.path("L4") == ["L2", "L3", "L4"]


def test_a_header_line_without_its_newline_is_a_provisional_header() -> None:
    p = Parser()
    p.feed(line(HEADER)[:-1])
    assert p.header is not None and p.header.session_id == "s1"  # Pi loads it (and adds \n)
    p.feed(b"\n")
    assert p.header is not None and p.tail_problem is None


@pytest.mark.pi
def test_a_bom_file_is_shown_with_a_problem_because_pi_does_not_load_it(tmp_path: Path) -> None:
    data = b"\xef\xbb\xbf" + session(entry("aaaaaaaa", None))
    copy = tmp_path / "pi.jsonl"
    copy.write_bytes(data)
    assert "not a valid pi session" in pi(str(copy)).get("error", "")  # Pi 1.6.0 refuses it
    s = loaded(tmp_path, data)
    assert {pr.kind for pr in s.problems()} >= {"bom"}
    with pytest.raises(writer.ReadOnlySession):
        writer.check_writable(s)


# -- item 12: Pi's harness storage (v4) ------------------------------------------------------


HARNESS_HEADERS = [
    {"kind": "header", "version": 4, "id": "h1", "createdAt": 1795168800000, "cwd": "/w"},
    {"v": 4, "kind": "header", "storageVersion": 1, "id": "h2", "createdAt": 1795168800000},
]


@pytest.mark.parametrize("header", HARNESS_HEADERS, ids=["version-4", "v-4-dev"])
def test_pi_harness_storage_is_recognised_and_shown_read_only(
    tmp_path: Path, header: dict[str, Any]
) -> None:
    first: dict[str, Any] = {"kind": "entry", "lane": "main", "type": "message", "id": "e1"}
    first["parentId"] = None
    first.update(seq=1, timestamp=1795168800000, message=USER)
    second: dict[str, Any] = {"kind": "entry", "type": "custom", "id": "e2", "parentId": "e1"}
    second["seq"] = 2
    second["timestamp"] = 1795168801000
    lines = [
        first,
        {"kind": "lane", "seq": 2, "lane": "side", "leafId": "e1"},
        second,
        {"kind": "fact", "seq": 3, "fact": "name", "name": "Harness"},
        {"kind": "record", "type": "operation_started", "id": "run", "lane": "main", "seq": 4},
    ]
    s = loaded(tmp_path, session(*lines, header=header))
    p = s.parser
    assert p.header is None and p.harness is not None
    (problem,) = [pr for pr in p.problems if pr.kind == "harness-storage"]
    assert problem.line == 1 and "version 4" in problem.detail and "read-only" in problem.detail
    assert [e.id for e in s.entries] == ["e1", "e2"]  # lane, fact, record lines are no entries
    assert s.index.resume == "e1"  # the main lane, not the last line
    assert not [pr for pr in s.problems() if pr.kind == "no-header"]  # said once, as itself
    assert s.index.path("e2") == ["e1", "e2"] and s.index.numbered_path("e2") == ["e1"]
    assert s.entries[0].ts == "2026-11-20T10:00:00.000Z"  # ms times, ordered like ISO ones
    with pytest.raises(writer.ReadOnlySession):
        writer.check_writable(s)
    _, doc = summaries(s)
    assert doc["storage"]["kind"] == "pi harness storage"
    assert doc["storage"]["lanes"] == {"main": "e1", "side": "e1"}
    assert doc["name"] == "Harness" and doc["created"] == "2026-11-20T10:00:00.000Z"


@pytest.mark.pi
def test_pi_does_not_load_harness_storage_as_a_session(tmp_path: Path) -> None:
    copy = tmp_path / "h.jsonl"
    copy.write_bytes(session(header=HARNESS_HEADERS[0]))
    assert "not a valid pi session" in pi(str(copy)).get("error", "")


# -- item 8: long kinds cut, numbers and suffixes kept ---------------------------------------


@pytest.mark.parametrize("kind", ["tool-" + "t" * 300, "tool-" + "é" * 200, "custom-" + "多" * 100])
def test_a_long_kind_is_cut_keeping_the_number_and_the_suffix(kind: str) -> None:
    names = [render.file_name(n, 4, kind) for n in (1, 2)]
    names += [render.image_name(2, 4, kind, k, "png") for k in (1, 2)]
    assert len(set(names)) == 4  # unique in their folder
    assert [n[:5] for n in names] == ["0001-", "0002-", "0002-", "0002-"]
    assert names[0].endswith(".md") and names[3].endswith(".2.png")
    for name in names:
        assert len(name.encode("utf-8")) <= 255  # and valid UTF-8: no half character
    assert render.file_name(3, 4, "tool-a/b\0c") == "0003-tool-a_b_c.md"


def test_names_from_ids_with_lone_surrogates_are_valid_utf8() -> None:
    for name in (render.sanitize("a\ud83d/b"), render.file_name(1, 4, "tool-\udcff")):
        name.encode("utf-8")
    assert render.sanitize("a\ud83d/b") == "a\ufffd_b"
