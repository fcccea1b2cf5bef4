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
from collections.abc import Callable, Iterator
from itertools import accumulate
from typing import Any

import orjson

from .jsonl import js_truthy

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
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    mark = "`" * max(3, longest + 1)
    return f"{mark}{lang}\n{text}{'' if text.endswith(chr(10)) else chr(10)}{mark}\n"


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


def render(d: dict[str, Any]) -> bytes:
    """The bytes of the numbered file of entry ``d`` (a conversation entry)."""
    etype = d.get("type")
    if etype == "compaction":
        return _compaction(d)
    if etype == "branch_summary":
        return _branch_summary(d)
    if etype == "custom_message":
        return _custom(d)
    msg = message_of(d)
    role = msg.get("role")
    if role == "user":
        return _finish(content_text(msg.get("content")))
    renderer = _BY_ROLE.get(role if isinstance(role, str) else "")
    return renderer(msg) if renderer else _unknown(msg)


def _header(pairs: list[tuple[str, str]]) -> str:
    # One line per value, whatever it holds: a newline in a model name makes no fake key.
    lines = [f"{k}: {' '.join(v.splitlines())}" for k, v in pairs if v != ""]
    return "\n".join(lines) + "\n\n" if lines else ""


def _assistant(msg: dict[str, Any]) -> bytes:
    model = _s(msg.get("model"))
    provider = _s(msg.get("provider"))
    stop = _s(msg.get("stopReason"))
    pairs = [("model", f"{provider}/{model}" if provider and model else model)]
    if stop and stop not in _NORMAL_STOPS:
        pairs.append(("stop", stop))
    if _on(msg.get("errorMessage")):
        pairs.append(("error", _s(msg.get("errorMessage")) or _json(msg.get("errorMessage"))))
    parts = [_assistant_block(b) for b in blocks(msg.get("content"))]
    return _finish(_header(pairs) + "\n\n".join(p for p in parts if p))


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
    return f"[{_s(btype) or 'block'}]\n" + fence(_json(b), "json")


def _tool_call(b: dict[str, Any]) -> str:
    name = _s(b.get("name")) or "tool"
    args = b.get("arguments")
    head = f"**→ {name}**"
    if _on(b.get("argumentsError")):
        head += f" (arguments error: {_s(b.get('argumentsError'))})"
    if name == "bash" and isinstance(args, dict) and isinstance(args.get("command"), str):
        rest = {k: v for k, v in args.items() if k != "command"}
        body = fence(args["command"], "sh")
        return head + "\n" + body + (fence(_json(rest), "json") if rest else "")
    return head + "\n" + fence(_json(args), "json")


def _tool_result(msg: dict[str, Any]) -> bytes:
    pairs = [("tool", _s(msg.get("toolName"))), ("call", _s(msg.get("toolCallId")))]
    if _on(msg.get("isError")):
        pairs.append(("error", "yes"))
    parts = [
        _s(b.get("text")) if b.get("type") == "text" else f"[{_s(b.get('type'))}]"
        for b in blocks(msg.get("content"))
    ]
    return _finish(_header(pairs) + "\n\n".join(parts))


def _bash(msg: dict[str, Any]) -> bytes:
    out = f"$ {_s(msg.get('command'))}\n"
    output = _s(msg.get("output"))
    if output:
        out += output if output.endswith("\n") else output + "\n"
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
    return _finish(out + ("\n" + "\n".join(facts) if facts else ""))


def _system(msg: dict[str, Any]) -> bytes:
    parts: list[str] = []
    content = content_text(msg.get("content"))
    if content:
        parts.append(content)
    sections = msg.get("sections")
    if isinstance(sections, dict):
        for name, text in sections.items():
            parts.append(
                f"## {name}\n" + ("(removed)" if text is None else _s(text) or _json(text))
            )
    for t in _list(msg.get("toolsAdded")):
        if isinstance(t, dict):
            parts.append(
                f"## tool added: {_s(t.get('name'))}\n{_s(t.get('description'))}\n"
                + fence(_json(t.get("parameters")), "json")
            )
    for t in _list(msg.get("toolsRemoved")):
        if isinstance(t, dict):
            parts.append(f"## tool removed: {_s(t.get('name'))}")
    return _finish("System Prompt Update\n\n" + "\n\n".join(p.rstrip("\n") for p in parts))


def _custom_role(msg: dict[str, Any]) -> bytes:
    return _custom(msg)


def _custom(d: dict[str, Any]) -> bytes:
    pairs = [("custom type", _s(d.get("customType")))]
    if "display" in d:
        pairs.append(("display", "yes" if _on(d.get("display")) else "no"))
    return _finish(_header(pairs) + content_text(d.get("content")))


def _compaction(d: dict[str, Any]) -> bytes:
    pairs = [
        ("compaction", "summary of the conversation before this point"),
        ("tokens before", _num(d.get("tokensBefore"))),
        ("first kept entry", _s(d.get("firstKeptEntryId"))),
    ]
    if _on(d.get("fromHook")):
        pairs.append(("from extension", "yes"))
    return _finish(_header(pairs) + _s(d.get("summary")))


def _branch_summary(d: dict[str, Any]) -> bytes:
    pairs = [("branch summary of", _s(d.get("fromId")))]
    if _on(d.get("fromHook")):
        pairs.append(("from extension", "yes"))
    return _finish(_header(pairs) + _s(d.get("summary")))


def _unknown(msg: dict[str, Any]) -> bytes:
    role = _s(msg.get("role")) or "unknown"
    text = content_text(msg.get("content"))
    rest = {k: v for k, v in msg.items() if k not in ("role", "content")}
    return _finish(
        _header([("role", role)]) + text + ("\n\n" + fence(_json(rest), "json") if rest else "")
    )


_BY_ROLE = {
    "assistant": _assistant,
    "toolResult": _tool_result,
    "bashExecution": _bash,
    "system": _system,
    "custom": _custom_role,
    "hookMessage": _custom_role,
}


def images(d: dict[str, Any]) -> list[tuple[str, bytes]]:
    """(extension, decoded bytes) of each image block of a conversation entry, in order."""
    content = (
        d.get("content") if d.get("type") == "custom_message" else message_of(d).get("content")
    )
    out: list[tuple[str, bytes]] = []
    for b in blocks(content):
        if b.get("type") != "image":
            continue
        try:
            data = base64.b64decode(_s(b.get("data")), validate=False)
        except (binascii.Error, ValueError):
            data = b""
        out.append((_IMAGE_EXT.get(_s(b.get("mimeType")), "bin"), data))
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


def preview(d: dict[str, Any], tool_call: dict[str, Any] | None = None) -> str:
    """A one-line description of any entry, like a row of Pi's ``/tree``."""
    etype = _s(d.get("type")) or "?"
    if etype == "message":
        return _message_preview(message_of(d), tool_call)
    if etype == "compaction":
        tokens = _num(d.get("tokensBefore"))
        k = f"{round(float(tokens) / 1000)}k" if tokens else "?"
        return f"[compaction: {k} tokens]"
    if etype == "branch_summary":
        return "[branch summary]: " + one_line(_s(d.get("summary")))
    if etype == "custom_message":
        return f"[{_s(d.get('customType'))}]: " + one_line(content_text(d.get("content")))
    simple = {
        "model_change": lambda: f"[model: {_s(d.get('modelId'))}]",
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


def _message_preview(msg: dict[str, Any], tool_call: dict[str, Any] | None) -> str:
    role = _s(msg.get("role")) or "?"
    if role in ("user", "assistant"):
        text = content_text(msg.get("content"))
        if not text and role == "assistant":
            calls = [b for b in blocks(msg.get("content")) if b.get("type") == "toolCall"]
            return "assistant: " + " ".join(call_preview(c) for c in calls)
        return f"{role}: " + one_line(text)
    if role == "toolResult":
        if tool_call is not None:
            return call_preview(tool_call) + (" (error)" if _on(msg.get("isError")) else "")
        return f"[{_s(msg.get('toolName'))}]"
    if role == "bashExecution":
        return f"[$ {one_line(_s(msg.get('command')), 60)}]"
    if role == "system":
        return "[system prompt update]"
    if role in ("custom", "hookMessage"):
        return f"[{_s(msg.get('customType'))}]: " + one_line(content_text(msg.get("content")))
    return f"{role}: " + one_line(content_text(msg.get("content")))


def call_preview(call: dict[str, Any]) -> str:
    """``[bash: ls -la]``, ``[read: path]``: a tool call as Pi's tree shows it."""
    name = _s(call.get("name")) or "tool"
    args = call.get("arguments")
    arg = ""
    if isinstance(args, dict):
        for key in ("command", "path", "file_path", "pattern", "url", "query"):
            if isinstance(args.get(key), str):
                arg = args[key]
                break
        else:
            arg = dumps(args, indent=False).decode()
    return f"[{name}: {one_line(arg, 60)}]"
