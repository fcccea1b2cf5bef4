"""A model server on 127.0.0.1 for the real Pi CLI: OpenAI's chat completions, streamed.

Pi reaches it as a custom provider (``models.json``, api ``openai-completions``) and runs
real turns offline. Each reply is ``fake reply N: <the last user message's text>``, so a test
can tell which turn wrote what; each request's messages are kept, so it can tell what Pi
sent as the conversation (which branch it continued). Standard library only.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def text_of(content: object) -> str:
    """The text of a message's content: a string, or a list of text parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


class FakeModel:
    """The server, in a thread of the test process, for as long as the ``with`` lasts."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []  # the JSON body of each completion asked
        self.errors: list[str] = []  # requests it could not read (the test says which)
        self._lock = threading.Lock()
        model = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # (quiet)
                pass

            def do_POST(self) -> None:
                try:
                    body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                except (TypeError, ValueError) as err:  # (no length, or not JSON)
                    model.errors.append(f"{self.path}: {err!r}")
                    self.send_error(400)
                    return
                with model._lock:
                    model.requests.append(body)
                    n = len(model.requests)
                users = [m for m in body.get("messages", []) if m.get("role") == "user"]
                text = f"fake reply {n}: {text_of(users[-1]['content']) if users else ''}"
                self._stream(body.get("model", "fake-model"), f"chatcmpl-{n}", text)

            def _stream(self, name: str, cid: str, text: str) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                base: dict[str, Any] = {"id": cid, "object": "chat.completion.chunk"}
                base.update(model=name, created=int(time.time()))
                words = text.split(" ")
                deltas = [{"role": "assistant", "content": ""}]
                deltas += [{"content": w + " "} for w in words[:-1]] + [{"content": words[-1]}]
                chunks: list[dict[str, Any]] = [
                    {**base, "choices": [{"index": 0, "delta": d}]} for d in deltas
                ]
                chunks.append(
                    {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
                )
                usage = {"prompt_tokens": 10, "completion_tokens": len(words)}
                usage["total_tokens"] = 10 + len(words)
                chunks.append({**base, "choices": [], "usage": usage})
                for c in chunks:
                    self.wfile.write(b"data: " + json.dumps(c).encode() + b"\n\n")
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                self.close_connection = True

        self._handler = Handler
        self.port = 0

    def __enter__(self) -> FakeModel:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        assert not self.errors, self.errors

    def conversation(self, n: int = -1) -> list[tuple[str, str]]:
        """(role, text) of each message request ``n`` sent, the system prompt left out."""
        with self._lock:
            body = self.requests[n]
        return [
            (m["role"], text_of(m.get("content")))
            for m in body.get("messages", [])
            if m.get("role") not in ("system", "developer")
        ]
