"""Entry -> file name and bytes: what a person reads in a message file.

This module owns the text of every file pisessfs computes from an entry (message files,
their images, the one-line previews of tree.txt, the slug of a leaf folder's name). Every
function is pure and deterministic: the same entry renders to the same bytes forever, which
is what makes long kernel caching safe. It knows nothing of paths, inodes or the tree.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

import orjson

from .jsonl import js_truthy
from .model import ms_value, parse_ts_ms, utc_clock

_IMAGE_EXT = {
    "image/png": "png",
    "image/jpeg": "jpg",
    "image/jpg": "jpg",
    "image/gif": "gif",
    "image/webp": "webp",
    "image/svg+xml": "svg",
    "image/bmp": "bmp",
}
_NORMAL_STOPS = frozenset({"stop", "toolUse"})
MAX_NAME = 255


def _s(v: object) -> str:
    return v if isinstance(v, str) else ""


def _on(v: object) -> bool:
    """A flag as Pi tests it (``if (msg.isError)``): JavaScript truthiness, [] and {} too."""
    return js_truthy(v)


def _list(v: object) -> list[Any]:
    return v if isinstance(v, list) else []


def _num(v: object) -> str:
    """A finite JSON number as text ("" for anything else, bools included)."""
    if not isinstance(v, int | float) or isinstance(v, bool):
        return ""
    if isinstance(v, int):
        return str(v)
    if not math.isfinite(v):
        return ""
    return str(int(v)) if v.is_integer() and abs(v) < 2**53 else repr(v)


# -- text that came from JSON ---------------------------------------------------------------
#
# A string parsed as JSON.parse parses it may hold lone UTF-16 surrogates (Pi's
# JSON.stringify writes "\ud83d" when a string was cut inside an emoji), and a file name
# from os.scandir holds surrogate escapes for bytes that are not UTF-8. Neither can be
# written as UTF-8: each lone surrogate becomes U+FFFD, as Node writes such a string.


def js_str(text: str) -> str:
    """``text`` as Node would write it: adjacent surrogates paired, lone ones U+FFFD."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def encode(text: str) -> bytes:
    """UTF-8 bytes of ``text``, lone surrogates as U+FFFD (never an exception)."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return js_str(text).encode("utf-8")


_OPTIONS = orjson.OPT_NON_STR_KEYS
_INDENT_DEPTH = 16  # deeper levels are written compact: indenting them grows quadratically
_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"')
_NOT_BRACKETS = re.compile(rb"[^\[\]{}]+")
_STEP = [0] * 256
_STEP[ord("[")] = _STEP[ord("{")] = 1
_STEP[ord("]")] = _STEP[ord("}")] = -1


def _shallow(compact: bytes) -> bool:
    """Whether JSON text nests at most _INDENT_DEPTH levels (a cheap bound first)."""
    if compact.count(b"[") + compact.count(b"{") <= _INDENT_DEPTH:
        return True
    skeleton = _NOT_BRACKETS.sub(b"", _STRINGS.sub(b"", compact))
    return max(accumulate(map(_STEP.__getitem__, skeleton)), default=0) <= _INDENT_DEPTH


def dumps(v: object, indent: bool = True) -> bytes:
    """JSON of any parsed value, indented by 2 (or compact), never an exception. orjson
    first; what it refuses (lone surrogates, integers past 64 bits, nesting past 255) and
    what nests deeper than 16 levels is written here, indented 16 levels deep at most."""
    try:
        compact = orjson.dumps(v, option=_OPTIONS)
    except orjson.JSONEncodeError:
        return _dump_slow(v, indent).encode("utf-8")
    if not indent:
        return compact
    if _shallow(compact):
        return orjson.dumps(v, option=_OPTIONS | orjson.OPT_INDENT_2)
    return _dump_slow(v, indent).encode("utf-8")


def _scalar_json(v: object) -> str:
    if isinstance(v, str):
        return _ESCAPE(js_str(v))
    if v is None or isinstance(v, bool):
        return "null" if v is None else "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else "null"  # JSON.stringify(Infinity): null
    return _ESCAPE(js_str(str(v)))


_ESCAPE: Callable[[str], str] = json.encoder.encode_basestring
_END = object()


def _dump_slow(v: object, indent: bool) -> str:
    """orjson's layout, without recursion: a stack of open containers."""
    out: list[str] = []
    stack: list[list[Any]] = []  # [items iterator, is a dict, depth, items written]
    value: Any = v
    fresh = True  # ``value`` is still to be written
    while True:
        if fresh:
            if isinstance(value, dict | list) and value:
                out.append("{" if isinstance(value, dict) else "[")
                items: Iterator[Any] = iter(value.items() if isinstance(value, dict) else value)
                stack.append([items, isinstance(value, dict), len(stack) + 1, 0])
            elif isinstance(value, dict | list):
                out.append("{}" if isinstance(value, dict) else "[]")
            else:
                out.append(_scalar_json(value))
        if not stack:
            return "".join(out)
        top = stack[-1]
        nxt: Any = next(top[0], _END)
        deep = top[2] > _INDENT_DEPTH
        pad = "\n" + "  " * top[2] if indent and not deep else ""
        if nxt is _END:
            stack.pop()
            close = "}" if top[1] else "]"
            out.append(("\n" + "  " * (top[2] - 1) if indent and not deep else "") + close)
            fresh = False
            continue
        out.append(("," if top[3] else "") + pad)
        top[3] += 1
        if top[1]:
            key, value = nxt
            out.append(_scalar_json(str(key)) + (": " if pad else ":"))
        else:
            value = nxt
        fresh = True


def _json(v: object) -> str:
    return dumps(v).decode()


def fence(text: str, lang: str = "") -> str:
    """A Markdown code block whose fence is longer than any backtick run inside it."""
    mark = "`" * (_longest_run(text) + 1) if "```" in text else "```"  # (most have none)
    return f"{mark}{lang}\n{text}{'' if text.endswith(chr(10)) else chr(10)}{mark}\n"


def _longest_run(text: str) -> int:
    return max(len(m) for m in re.findall(r"`+", text))


def blocks(content: object) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [b for b in content if isinstance(b, dict)]
    return []


def content_text(content: object) -> str:
    """Text blocks joined by a blank line (a string content as it is)."""
    return "\n\n".join(_s(b.get("text")) for b in blocks(content) if b.get("type") == "text")


def _finish(text: str) -> bytes:
    return encode(text if text.endswith("\n") else text + "\n")


def message_of(d: dict[str, Any]) -> dict[str, Any]:
    msg = d.get("message")
    return msg if isinstance(msg, dict) else {}


# -- message files --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Context:
    """What an entry's file shows that is written in other entries: the tool call a result
    answers, and the file names of the entries it names by id. The view finds them among
    the entry's ancestors and by id, which never change, so the bytes stay the same."""

    call: dict[str, Any] | None = None
    names: Mapping[str, str] = field(default_factory=dict)  # entry id -> its file name


NO_CONTEXT = Context()


def render(d: dict[str, Any], ctx: Context = NO_CONTEXT) -> bytes:
    """The bytes of the numbered file of entry ``d`` (a conversation entry)."""
    etype = d.get("type")
    if etype == "compaction":
        return _compaction(d, ctx)
    if etype == "branch_summary":
        return _branch_summary(d, ctx)
    if etype == "custom_message":
        return _custom(d, d)
    msg = message_of(d)
    role = msg.get("role")
    if role == "user":
        return _finish(content_text(msg.get("content")))
    renderer = _BY_ROLE.get(role if isinstance(role, str) else "")
    return renderer(d, msg, ctx) if renderer else _unknown(d, msg)


def clock(d: dict[str, Any]) -> str:
    """The entry's UTC time as ``2026-03-02 09:14:05`` (its ISO ``timestamp``, else its
    message's ms ``timestamp``; "" when neither is a valid time)."""
    ms = parse_ts_ms(d.get("timestamp"))
    if ms is None:
        fallback = ms_value(message_of(d).get("timestamp"))
        ms = None if fallback is None else int(fallback)
    return "" if ms is None else utc_clock(ms)


def _header(d: dict[str, Any], pairs: list[tuple[str, str]]) -> str:
    # One line per value, whatever it holds: a newline in a model name makes no fake key.
    pairs = [*pairs[:1], ("time", clock(d)), *pairs[1:]]
    lines = [f"{k}: {' '.join(v.splitlines())}" for k, v in pairs if v != ""]
    return "\n".join(lines) + "\n\n" if lines else ""


def _assistant(d: dict[str, Any], msg: dict[str, Any], _ctx: Context) -> bytes:
    model = _s(msg.get("model"))
    provider = _s(msg.get("provider"))
    stop = _s(msg.get("stopReason"))
    pairs = [("model", f"{provider}/{model}" if provider and model else model)]
    if stop and stop not in _NORMAL_STOPS:
        pairs.append(("stop", stop))
    if _on(msg.get("errorMessage")):
        pairs.append(("error", _s(msg.get("errorMessage")) or _json(msg.get("errorMessage"))))
    parts = [_assistant_block(b) for b in blocks(msg.get("content"))]
    return _finish(_header(d, pairs) + "\n\n".join(p for p in parts if p))


def _assistant_block(b: dict[str, Any]) -> str:
    btype = b.get("type")
    if btype == "text":
        return _s(b.get("text"))
    if btype == "thinking":
        if _on(b.get("redacted")):
            return "> [thinking redacted]"
        text = _s(b.get("thinking")).rstrip("\n")
        return "> [thinking]\n" + "\n".join(f"> {line}".rstrip() for line in text.split("\n"))
    if btype == "toolCall":
        return _tool_call(b)
    if btype == "image":
        return "[image]"
    rest = {k: v for k, v in b.items() if k != "type"}
    return f"[{_s(btype) or 'block'}]" + ("\n" + fields(rest) if rest else "")


# -- tool calls, as a person reads them ----------------------------------------------------

_SHORT = 120  # a one-line string argument up to this long is a ``key: value`` line
_FIELD_DEPTH = 16  # deeper arguments are one JSON block


def _arg(args: object, *keys: str) -> str | None:
    if isinstance(args, dict):
        for k in keys:
            if isinstance(args.get(k), str):
                return str(args[k])
    return None


def _line_range(args: dict[str, Any]) -> str:
    """``:10-29`` for a read of 20 lines from line 10 (Pi's ``formatReadLineRange``)."""
    offset, limit = args.get("offset"), args.get("limit")
    start = 1 if offset is None else _whole(offset)
    if start is None or (offset is None and limit is None):
        return ""
    if limit is None:
        return f":{start}"
    count = _whole(limit)
    return "" if count is None else f":{start}-{start + count - 1}"


def _whole(v: object) -> int | None:
    if isinstance(v, bool) or not isinstance(v, int | float | str):
        return None
    try:
        n = int(v)
    except (ValueError, OverflowError):
        return None
    return n if n >= 0 and str(v).strip() in (str(n), f"{n}.0") else None


_MAIN_ARG = ("command", "path", "file_path", "pattern", "query", "url", "name")


def call_title(call: dict[str, Any]) -> str:
    """A tool call in the words of Pi's export: ``$ <command>``, ``read <path>:10-29``,
    ``edit <path>``, ``grep /<pattern>/ in <path>``, or the tool and its main argument."""
    name = _s(call.get("name")) or "tool"
    args = call.get("arguments")
    a: dict[str, Any] = args if isinstance(args, dict) else {}
    path = _arg(a, "path", "file_path")
    if name == "bash" and _arg(a, "command") is not None:
        return "$ " + _arg(a, "command")  # type: ignore[operator]
    if name == "read" and path is not None:
        return f"read {path}{_line_range(a)}"
    if name in ("write", "edit") and path is not None:
        return f"{name} {path}"
    if name in ("grep", "find"):
        pat = _arg(a, "pattern") or ""
        where = path or "."
        return f"grep /{pat}/ in {where}" if name == "grep" else f"find {pat} in {where}"
    if name == "ls":
        return f"ls {path or '.'}"
    main = args if isinstance(args, str) else _main_arg(a)
    return f"{name} {main}" if main else name


def _main_arg(args: dict[str, Any]) -> str | None:
    """The argument that says what a call is about: a command, path, pattern, query or
    URL, else its first one-line string argument."""
    main = _arg(args, *_MAIN_ARG)
    if main is None:
        firsts = (v for v in args.values() if isinstance(v, str) and v and "\n" not in v)
        main = next(firsts, None)
    return main


def _title_line(call: dict[str, Any], limit: int = 200) -> str:
    """:func:`call_title` on one line: a multi-line command shows its first line and ``…``."""
    title = call_title(call)
    first, *more = title.splitlines() or [""]
    if more or len(first) > limit:
        first = first[: limit - 1].rstrip() + " …"
    return first


def _tool_call(b: dict[str, Any]) -> str:
    name = _s(b.get("name")) or "tool"
    args = b.get("arguments")
    head = f"**→ {name}**"
    if _on(b.get("argumentsError")):
        head += f" (arguments error: {_s(b.get('argumentsError'))})"
    if not isinstance(args, dict):
        return head + ("\n" + fields({"arguments": args}) if args is not None else "")
    rest = dict(args)
    body: list[str] = []
    command = _arg(args, "command")
    path = _arg(args, "path", "file_path")
    if name == "bash" and command is not None:
        del rest["command"]
        body.append(fence(command, "sh"))
    elif name in ("read", "write", "edit", "ls") and path is not None:
        del rest["path" if isinstance(rest.get("path"), str) else "file_path"]  # (as _arg)
        head += " " + " ".join(path.splitlines())
        if name == "write" and isinstance(rest.get("content"), str):
            body.append(fence(rest.pop("content"), _lang(path)))
        if name == "edit":
            body.extend(_edit_blocks(rest))
    if rest:
        body.insert(0, fields(rest))
    return head + ("\n" + "\n".join(p.rstrip("\n") for p in body) + "\n" if body else "")


def _edit_blocks(rest: dict[str, Any]) -> list[str]:
    """An edit's old and new texts as blocks (taken out of ``rest``): Pi 1.6's ``edits``
    list, or one ``oldText``/``newText`` pair of earlier versions."""
    pairs: list[tuple[object, object]] = []
    edits = rest.get("edits")
    if isinstance(edits, list) and all(
        isinstance(e, dict) and set(e) <= {"oldText", "newText"} for e in edits
    ):
        pairs = [(e.get("oldText"), e.get("newText")) for e in edits]
        del rest["edits"]
    elif isinstance(rest.get("oldText"), str) or isinstance(rest.get("newText"), str):
        pairs = [(rest.pop("oldText", None), rest.pop("newText", None))]
    out: list[str] = []
    for i, (old, new) in enumerate(pairs, 1):
        of = f" ({i} of {len(pairs)})" if len(pairs) > 1 else ""
        for word, text in (("old", old), ("new", new)):
            if isinstance(text, str):
                out.append(f"{word} text{of}:\n" + fence(text))
            elif text is not None:
                out.append(fields({f"{word} text{of}": text}))
    return out


_LANGS = {"py": "python", "js": "javascript", "ts": "typescript", "sh": "sh", "md": "markdown"}


def _lang(path: str) -> str:
    ext = path.rsplit(".", 1)[-1].lower() if "." in path.rsplit("/", 1)[-1] else ""
    return _LANGS.get(ext, ext if ext.isalnum() and ext.isascii() else "")


def fields(value: dict[str, Any]) -> str:
    """Any parsed JSON object as readable text: ``key: value`` lines, a multi-line or long
    string as a block, nested keys as paths (``edits[0].oldText``), never an escaped JSON
    string; past 16 levels, one JSON block."""
    out: list[str] = []
    for k, v in value.items():
        _field(out, " ".join(str(k).splitlines()) or '""', v, 1)
    return "\n".join(out) + "\n" if out else ""


def _field(out: list[str], key: str, v: object, depth: int) -> None:
    if isinstance(v, str):
        if "\n" in v or len(v) > _SHORT:
            out.append(f"{key}:\n" + fence(v).rstrip("\n"))
        else:
            out.append(f"{key}: {v}" if v else f'{key}: ""')
    elif isinstance(v, dict | list) and v and depth > _FIELD_DEPTH:
        out.append(f"{key}:\n" + fence(_json(v), "json").rstrip("\n"))
    elif isinstance(v, dict) and v:
        for k, item in v.items():
            _field(out, f"{key}.{' '.join(str(k).splitlines())}", item, depth + 1)
    elif isinstance(v, list) and v:
        for i, item in enumerate(v):
            _field(out, f"{key}[{i}]", item, depth + 1)
    else:
        out.append(f"{key}: {dumps(v, indent=False).decode()}")


# -- the other messages ----------------------------------------------------------------------


def _tool_result(d: dict[str, Any], msg: dict[str, Any], ctx: Context) -> bytes:
    tool = _s(msg.get("toolName")) or "tool"
    if ctx.call is not None:
        pairs = [("call", _title_line(ctx.call))]
    else:
        pairs = [("tool", tool), ("call", "not found on this branch")]
    if _on(msg.get("isError")):
        pairs.append(("error", "yes"))
    # The output as a code block (pytest's banners, source and JSON are not Markdown), in
    # the language of the file a read read; markers of other blocks as they are.
    lang = _output_lang(ctx.call)
    parts = []
    for b in blocks(msg.get("content")):
        if b.get("type") != "text":
            parts.append(f"[{_s(b.get('type'))}]")
        elif text := _s(b.get("text")):
            parts.append(fence(text, lang).rstrip("\n"))
    details = msg.get("details")
    diff = details.get("diff") if isinstance(details, dict) else None
    if isinstance(diff, str) and diff:
        parts.append(fence(diff, "diff").rstrip("\n"))
    parts.extend(_nested(msg.get("nestedCalls")))
    return _finish(_header(d, pairs) + "\n\n".join(parts))


def _output_lang(call: dict[str, Any] | None) -> str:
    """The language tag of a tool's output: a read's, by its file's extension."""
    if call is None or call.get("name") != "read":
        return ""
    path = _arg(call.get("arguments"), "path", "file_path")
    return _lang(path) if path is not None else ""


_STATUS = {"ok": "✓", "error": "✗", "unfinished": "…"}


def _nested(nested: object) -> list[str]:
    """The calls a tool made to other tools (``nestedCalls``), one line each."""
    if not isinstance(nested, dict) or not isinstance(nested.get("calls"), list):
        return []
    calls: list[Any] = nested["calls"]
    if not calls:
        return []
    incomplete = "" if _on(nested.get("complete")) else " (incomplete)"
    lines = [f"nested calls: {len(calls)}{incomplete}"]
    for c in calls:
        if not isinstance(c, dict):
            continue
        mark = _STATUS.get(_s(c.get("status")), "?")
        ms = _num(c.get("durationMs"))
        line = f"{mark} {_title_line(c)}" + (f" ({ms} ms)" if ms else "")
        error = _s(c.get("error"))
        lines.append(line + ("".join(f"\n    {e}" for e in error.split("\n")) if error else ""))
    return ["\n".join(lines)]


def _bash(d: dict[str, Any], msg: dict[str, Any], _ctx: Context) -> bytes:
    out = f"$ {_s(msg.get('command'))}\n"
    output = _s(msg.get("output"))
    if output:
        out += fence(output)  # (its output as a code block, as a tool's)
    facts = []
    code = _num(msg.get("exitCode"))
    if code:
        facts.append(f"exit code: {code}")
    if _on(msg.get("cancelled")):
        facts.append("cancelled")
    if _on(msg.get("truncated")):
        path = _s(msg.get("fullOutputPath"))
        facts.append(f"truncated (full output: {path})" if path else "truncated")
    if _on(msg.get("excludeFromContext")):
        facts.append("excluded from context (!!)")
    head = _header(d, [("bash", "run by the user")])
    return _finish(head + out + ("\n" + "\n".join(facts) if facts else ""))


def _system(d: dict[str, Any], msg: dict[str, Any], _ctx: Context) -> bytes:
    parts: list[str] = []
    content = content_text(msg.get("content"))
    if content:
        parts.append(content)
    sections = msg.get("sections")
    if isinstance(sections, dict):
        for name, text in sections.items():
            shown = "(removed)" if text is None else _s(text) or fields({"value": text})
            parts.append(f"## {name}\n" + shown)
    for t in _list(msg.get("toolsAdded")):
        if isinstance(t, dict):
            params = t.get("parameters")
            parts.append(
                f"## tool added: {_s(t.get('name'))}\n{_s(t.get('description'))}\n"
                + _tool_params(params)
            )
    for t in _list(msg.get("toolsRemoved")):
        if isinstance(t, dict):
            parts.append(f"## tool removed: {_s(t.get('name'))}")
    head = _header(d, [("system", "prompt update")])
    return _finish(head + "\n\n".join(p.rstrip("\n") for p in parts))


def _tool_params(params: object) -> str:
    """A tool's parameters as Pi's export lists them: ``- name (type, required):
    description``, one per property; a schema of another shape as ``key: value`` lines."""
    if not isinstance(params, dict) or not isinstance(params.get("properties"), dict):
        return fields({"parameters": params}) if params is not None else ""
    props: dict[str, Any] = params["properties"]
    required = _list(params.get("required"))
    lines = []
    for name, prop in props.items():
        p = prop if isinstance(prop, dict) else {}
        kind = p.get("type", "any")
        shown = _s(kind) or "|".join(map(_s, _list(kind))) or dumps(kind, indent=False).decode()
        need = "required" if name in required else "optional"
        desc = _s(p.get("description")).replace("\n", "\n  ")
        head = f"- {' '.join(str(name).split())} ({shown}, {need})"
        lines.append(head + (f": {desc}" if desc else ""))
    return "\n".join(lines) + "\n"


def _custom_role(d: dict[str, Any], msg: dict[str, Any], _ctx: Context) -> bytes:
    return _custom(d, msg)


def _custom(d: dict[str, Any], m: dict[str, Any]) -> bytes:
    pairs = [("custom type", _s(m.get("customType")))]
    if "display" in m:
        pairs.append(("display", "yes" if _on(m.get("display")) else "no"))
    return _finish(_header(d, pairs) + content_text(m.get("content")))


def _named(eid: object, ctx: Context) -> str:
    """An entry named by id, as its file name and id (``0004-assistant.md (843bffbf)``)."""
    if not isinstance(eid, str):
        return ""
    name = ctx.names.get(eid)
    return f"{name} ({eid})" if name else eid


def _compaction(d: dict[str, Any], ctx: Context) -> bytes:
    first = d.get("firstKeptEntryId")
    kept = "none (nothing kept)" if first == d.get("id") else _named(first, ctx)
    pairs = [
        ("compaction", "summary of the conversation before this point"),
        ("tokens before", _num(d.get("tokensBefore"))),
        ("first kept entry", kept),
    ]
    if _on(d.get("fromHook")):
        pairs.append(("from extension", "yes"))
    return _finish(_header(d, pairs) + _s(d.get("summary")))


def _branch_summary(d: dict[str, Any], ctx: Context) -> bytes:
    start = d.get("fromId")
    pairs = [("branch summary of", "the root" if start == "root" else _named(start, ctx))]
    if _on(d.get("fromHook")):
        pairs.append(("from extension", "yes"))
    return _finish(_header(d, pairs) + _s(d.get("summary")))


def _unknown(d: dict[str, Any], msg: dict[str, Any]) -> bytes:
    role = _s(msg.get("role")) or "unknown"
    text = content_text(msg.get("content"))
    rest = {k: v for k, v in msg.items() if k not in ("role", "content")}
    extra = [b for b in blocks(msg.get("content")) if b.get("type") != "text"]
    if extra:
        rest["other content"] = extra
    return _finish(_header(d, [("role", role)]) + text + ("\n\n" + fields(rest) if rest else ""))


_BY_ROLE: dict[str, Callable[[dict[str, Any], dict[str, Any], Context], bytes]] = {
    "assistant": _assistant,
    "toolResult": _tool_result,
    "bashExecution": _bash,
    "system": _system,
    "custom": _custom_role,
    "hookMessage": _custom_role,
}


KNOWN_NOTES = frozenset(
    {
        "model_change",
        "thinking_level_change",
        "label",
        "session_info",
        "usage",
        "custom",
        "context_edit",
    }
)  # the entry types that take no number whose preview says all a reader needs
_LINE_KEYS = ("type", "id", "parentId", "timestamp")


def note_detail(d: dict[str, Any]) -> str:
    """What a one-file view shows below the note of an entry of a type pisessfs does not
    know: every field it carries, as text (never dropped)."""
    etype = d.get("type")
    if isinstance(etype, str) and etype in KNOWN_NOTES:
        return ""
    return fields({k: v for k, v in d.items() if k not in _LINE_KEYS})


def context_edit(d: dict[str, Any], target_name: str | None) -> tuple[str, str]:
    """A context edit's note in a one-file view: which earlier entry the model stops seeing
    or sees replaced (by file name and id), and the replacement text."""
    target = d.get("targetId")
    names = {target: target_name} if isinstance(target, str) and target_name else {}
    shown = _named(target, Context(names=names))
    shown = shown or "an entry without a valid id"
    repl = d.get("replacement")
    if repl is None:
        return f"context edit: the model no longer sees {shown}", ""
    content = repl.get("content") if isinstance(repl, dict) else None
    if isinstance(content, str | list):
        text = content_text(content)
        others = [b for b in blocks(content) if b.get("type") != "text"]
        text += ("\n" if text else "") + "".join(f"[{_s(b.get('type'))}]\n" for b in others)
    else:
        text = fields({"replacement": repl})
    return f"context edit: the model sees {shown} replaced by:", text or '""'


def tool_calls(d: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The tool calls of an assistant entry by id (a repeated id: the last, as Pi's export
    maps them)."""
    return {
        b["id"]: b
        for b in blocks(message_of(d).get("content"))
        if b.get("type") == "toolCall" and isinstance(b.get("id"), str)
    }


def _image_blocks(d: dict[str, Any]) -> list[dict[str, Any]]:
    content = (
        d.get("content") if d.get("type") == "custom_message" else message_of(d).get("content")
    )
    return [b for b in blocks(content) if b.get("type") == "image"]


def _image_ext(b: dict[str, Any]) -> str:
    return _IMAGE_EXT.get(_s(b.get("mimeType")), "bin")


def image_exts(d: dict[str, Any]) -> list[str]:
    """The extension of each image file of a conversation entry, without decoding them."""
    return [_image_ext(b) for b in _image_blocks(d)]


def images(d: dict[str, Any]) -> list[tuple[str, bytes]]:
    """(extension, decoded bytes) of each image block of a conversation entry, in order."""
    out: list[tuple[str, bytes]] = []
    for b in _image_blocks(d):
        try:
            data = base64.b64decode(_s(b.get("data")), validate=False)
        except (binascii.Error, ValueError):
            data = b""
        out.append((_image_ext(b), data))
    return out


# -- names ----------------------------------------------------------------------------------


def _component(text: str) -> str:
    """No ``/``, no NUL, valid UTF-8 (lone surrogates as U+FFFD)."""
    return js_str(text.replace("/", "_").replace("\0", "_"))


def _cut(text: str, limit: int) -> str:
    raw = text.encode("utf-8")
    return raw[: max(0, limit)].decode("utf-8", "ignore") if len(raw) > limit else text


def sanitize(name: str) -> str:
    """A single path component: no ``/`` or NUL, no leading ``-`` or ``.``, <= 255 bytes of
    UTF-8 (a lone surrogate as U+FFFD)."""
    name = _component(name).lstrip("-.") or "_"
    return _cut(name, MAX_NAME)


def number_width(count: int) -> int:
    return max(4, len(str(count)))


def _numbered(num: int, width: int, kind: str, suffix: str) -> str:
    """``NNNN-<kind><suffix>`` in at most 255 bytes: only the kind is cut, so the number
    (unique in a folder) and the suffix (``.md``, ``.1.png``) always survive."""
    prefix = f"{num:0{width}d}-"
    room = MAX_NAME - len(prefix) - len(suffix.encode("utf-8"))
    return prefix + _cut(_component(kind), room) + suffix


def file_name(num: int, width: int, kind: str) -> str:
    return _numbered(num, width, kind, ".md")


def image_name(num: int, width: int, kind: str, k: int, ext: str) -> str:
    return _numbered(num, width, kind, f".{k}.{_component(ext)}")


def slug(text: str, limit: int = 40) -> str:
    """A short lowercase slug of ``text`` for a leaf folder name (may be empty)."""
    words = re.findall(r"\w+", text.lower())
    out = ""
    for w in words:
        nxt = f"{out}-{w}" if out else w
        if len(nxt) > limit:
            return out or w[:limit]
        out = nxt
    return out


# -- previews -------------------------------------------------------------------------------


def one_line(text: str, limit: int = 80) -> str:
    """``text`` on one line (runs of white space as one space), cut at ``limit``."""
    head = text[: limit * 4]  # a preview of a 10 MB tool output looks at its start
    flat = " ".join(head.split())
    if len(flat) <= limit and len(head) < len(text):
        flat = " ".join(text.split())  # mostly white space: look further
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def preview(d: dict[str, Any], call: str | None = None) -> str:
    """A one-line description of any entry, like a row of Pi's ``/tree``. ``call``: for a
    tool result, the :func:`call_preview` of the call it answers."""
    etype = _s(d.get("type")) or "?"
    if etype == "message":
        return _message_preview(message_of(d), call)
    if etype == "compaction":
        tokens = _num(d.get("tokensBefore"))
        k = f"{round(float(tokens) / 1000)}k" if tokens else "?"
        return f"[compaction: {k} tokens]"
    if etype == "branch_summary":
        return "[branch summary]: " + one_line(_s(d.get("summary")))
    if etype == "custom_message":
        return f"[{_s(d.get('customType'))}]: " + one_line(content_text(d.get("content")))
    simple = {
        "model_change": lambda: (
            "[model: "
            + "/".join(x for x in (_s(d.get("provider")), _s(d.get("modelId"))) if x)
            + "]"
        ),
        "thinking_level_change": lambda: f"[thinking: {_s(d.get('thinkingLevel'))}]",
        "label": lambda: f"[label: {_s(d.get('label'))}]" if d.get("label") else "[label cleared]",
        "session_info": lambda: f"[name: {one_line(_s(d.get('name')))}]",
        "usage": lambda: f"[usage: {_s(d.get('kind'))}]",
        "custom": lambda: f"[custom: {_s(d.get('customType'))}]",
        "context_edit": lambda: (
            f"[context edit: {_s(d.get('targetId'))} "
            + ("omitted]" if d.get("replacement") is None else "replaced]")
        ),
    }
    if etype in simple:
        return simple[etype]()
    return f"[{etype}]"


def _message_preview(msg: dict[str, Any], tool_call: str | None) -> str:
    role = _s(msg.get("role")) or "?"
    if role in ("user", "assistant"):
        text = content_text(msg.get("content"))
        if not text and role == "assistant":
            calls = [b for b in blocks(msg.get("content")) if b.get("type") == "toolCall"]
            return "assistant: " + " ".join(call_preview(c) for c in calls)
        return f"{role}: " + one_line(text)
    if role == "toolResult":
        call = tool_call if tool_call is not None else f"[{_s(msg.get('toolName'))}]"
        return f"{call} → {_returned(msg)}"
    if role == "bashExecution":
        return f"[$ {one_line(_s(msg.get('command')), 60)}]"
    if role == "system":
        return "[system prompt update]"
    if role in ("custom", "hookMessage"):
        return f"[{_s(msg.get('customType'))}]: " + one_line(content_text(msg.get("content")))
    return f"{role}: " + one_line(content_text(msg.get("content")))


def _returned(msg: dict[str, Any]) -> str:
    """What a tool result returned, in a few words: its first line of output, an error."""
    texts = (_s(b.get("text")) for b in blocks(msg.get("content")) if b.get("type") == "text")
    # (isspace, not strip: a 10 MB output is not copied to learn that it is not blank)
    head = next((t[:4096] for t in texts if t and not t.isspace()), "")  # its start only
    first = next((ln for ln in head.splitlines() if ln and not ln.isspace()), "")
    said = one_line(first, 60) if first else "(no output)"
    return f"error: {said}" if _on(msg.get("isError")) else said


def call_preview(call: dict[str, Any]) -> str:
    """``[bash: ls -la]``, ``[read: path]``: a tool call as Pi's tree shows it."""
    name = _s(call.get("name")) or "tool"
    args = call.get("arguments")
    arg = ""
    if isinstance(args, dict):
        main = _main_arg(args)
        arg = main if main is not None else dumps(args, indent=False).decode()
    return f"[{name}: {one_line(arg, 60)}]"
