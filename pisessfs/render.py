"""Entry -> file name and bytes: what a person reads in a message file.

This module owns the text of every file pisessfs computes from an entry (message files,
their images, the one-line previews of tree.txt, the slug of a leaf folder's name). Every
function is pure and deterministic: the same entry renders to the same bytes forever, which
is what makes long kernel caching safe. It knows nothing of paths, inodes or the tree.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

import orjson

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


def _json(v: object) -> str:
    return orjson.dumps(v, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode()


def fence(text: str, lang: str = "") -> str:
    """A Markdown code block whose fence is longer than any backtick run inside it."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    mark = "`" * max(3, longest + 1)
    return f"{mark}{lang}\n{text}{'' if text.endswith(chr(10)) else chr(10)}{mark}\n"


def _blocks(content: object) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [b for b in content if isinstance(b, dict)]
    return []


def content_text(content: object) -> str:
    """Text blocks joined by a blank line (a string content as it is)."""
    return "\n\n".join(_s(b.get("text")) for b in _blocks(content) if b.get("type") == "text")


def _finish(text: str) -> bytes:
    return (text if text.endswith("\n") else text + "\n").encode("utf-8", "replace")


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
    lines = [f"{k}: {v}" for k, v in pairs if v != ""]
    return "\n".join(lines) + "\n\n" if lines else ""


def _assistant(msg: dict[str, Any]) -> bytes:
    model = _s(msg.get("model"))
    provider = _s(msg.get("provider"))
    stop = _s(msg.get("stopReason"))
    pairs = [("model", f"{provider}/{model}" if provider and model else model)]
    if stop and stop not in _NORMAL_STOPS:
        pairs.append(("stop", stop))
    if msg.get("errorMessage"):
        pairs.append(("error", _s(msg.get("errorMessage")) or _json(msg.get("errorMessage"))))
    parts = [_assistant_block(b) for b in _blocks(msg.get("content"))]
    return _finish(_header(pairs) + "\n\n".join(p for p in parts if p))


def _assistant_block(b: dict[str, Any]) -> str:
    btype = b.get("type")
    if btype == "text":
        return _s(b.get("text"))
    if btype == "thinking":
        if b.get("redacted"):
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
    if b.get("argumentsError"):
        head += f" (arguments error: {_s(b.get('argumentsError'))})"
    if name == "bash" and isinstance(args, dict) and isinstance(args.get("command"), str):
        rest = {k: v for k, v in args.items() if k != "command"}
        body = fence(args["command"], "sh")
        return head + "\n" + body + (fence(_json(rest), "json") if rest else "")
    return head + "\n" + fence(_json(args), "json")


def _tool_result(msg: dict[str, Any]) -> bytes:
    pairs = [("tool", _s(msg.get("toolName"))), ("call", _s(msg.get("toolCallId")))]
    if msg.get("isError"):
        pairs.append(("error", "yes"))
    blocks = _blocks(msg.get("content"))
    parts = [
        _s(b.get("text")) if b.get("type") == "text" else f"[{_s(b.get('type'))}]" for b in blocks
    ]
    return _finish(_header(pairs) + "\n\n".join(parts))


def _bash(msg: dict[str, Any]) -> bytes:
    out = f"$ {_s(msg.get('command'))}\n"
    output = _s(msg.get("output"))
    if output:
        out += output if output.endswith("\n") else output + "\n"
    facts = []
    code = msg.get("exitCode")
    if isinstance(code, int):
        facts.append(f"exit code: {code}")
    if msg.get("cancelled"):
        facts.append("cancelled")
    if msg.get("truncated"):
        path = _s(msg.get("fullOutputPath"))
        facts.append(f"truncated (full output: {path})" if path else "truncated")
    if msg.get("excludeFromContext"):
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
    for t in msg.get("toolsAdded") or []:
        if isinstance(t, dict):
            parts.append(
                f"## tool added: {_s(t.get('name'))}\n{_s(t.get('description'))}\n"
                + fence(_json(t.get("parameters")), "json")
            )
    for t in msg.get("toolsRemoved") or []:
        if isinstance(t, dict):
            parts.append(f"## tool removed: {_s(t.get('name'))}")
    return _finish("System Prompt Update\n\n" + "\n\n".join(p.rstrip("\n") for p in parts))


def _custom_role(msg: dict[str, Any]) -> bytes:
    return _custom(msg)


def _custom(d: dict[str, Any]) -> bytes:
    pairs = [("custom type", _s(d.get("customType")))]
    if "display" in d:
        pairs.append(("display", "yes" if d.get("display") else "no"))
    return _finish(_header(pairs) + content_text(d.get("content")))


def _compaction(d: dict[str, Any]) -> bytes:
    tokens = d.get("tokensBefore")
    pairs = [
        ("compaction", "summary of the conversation before this point"),
        ("tokens before", str(tokens) if isinstance(tokens, int) else ""),
        ("first kept entry", _s(d.get("firstKeptEntryId"))),
    ]
    if d.get("fromHook"):
        pairs.append(("from extension", "yes"))
    return _finish(_header(pairs) + _s(d.get("summary")))


def _branch_summary(d: dict[str, Any]) -> bytes:
    pairs = [("branch summary of", _s(d.get("fromId")))]
    if d.get("fromHook"):
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
    for b in _blocks(content):
        if b.get("type") != "image":
            continue
        try:
            data = base64.b64decode(_s(b.get("data")), validate=False)
        except (binascii.Error, ValueError):
            data = b""
        out.append((_IMAGE_EXT.get(_s(b.get("mimeType")), "bin"), data))
    return out


# -- names ----------------------------------------------------------------------------------


def sanitize(name: str) -> str:
    """A single path component: no ``/`` or NUL, no leading ``-`` or ``.``, <= 255 bytes."""
    name = name.replace("/", "_").replace("\0", "_")
    name = name.lstrip("-.") or "_"
    raw = name.encode("utf-8", "replace")
    if len(raw) > MAX_NAME:
        name = raw[:MAX_NAME].decode("utf-8", "ignore")
    return name


def number_width(count: int) -> int:
    return max(4, len(str(count)))


def file_name(num: int, width: int, kind: str) -> str:
    return sanitize(f"{num:0{width}d}-{kind}.md")


def image_name(num: int, width: int, kind: str, k: int, ext: str) -> str:
    return sanitize(f"{num:0{width}d}-{kind}.{k}.{ext}")


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
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def preview(d: dict[str, Any], tool_call: dict[str, Any] | None = None) -> str:
    """A one-line description of any entry, like a row of Pi's ``/tree``."""
    etype = _s(d.get("type")) or "?"
    if etype == "message":
        return _message_preview(message_of(d), tool_call)
    if etype == "compaction":
        tokens = d.get("tokensBefore")
        k = f"{round(tokens / 1000)}k" if isinstance(tokens, int | float) else "?"
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
            calls = [b for b in _blocks(msg.get("content")) if b.get("type") == "toolCall"]
            return "assistant: " + " ".join(call_preview(c) for c in calls)
        return f"{role}: " + one_line(text)
    if role == "toolResult":
        if tool_call is not None:
            return call_preview(tool_call) + (" (error)" if msg.get("isError") else "")
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
            arg = orjson.dumps(args).decode()
    return f"[{name}: {one_line(arg, 60)}]"
