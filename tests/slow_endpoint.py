"""A scripted OpenAI-compatible HTTP server on 127.0.0.1 that misbehaves in time (no network).

Each request is answered by the behaviour registered for its `X-Ecdysis-Role` header (`agent`, `user`,
or a diagnosis role), else by `default`:

- `("ok", reply)`: a chat completion at once (`reply` a message dict, or a callable of the request body);
- `("trickle", interval_s, reply)`: headers at once, then the JSON body one byte every `interval_s`;
- `("whitespace", n, interval_s, reply)`: headers, then `n` spaces one every `interval_s` (a gateway's
  keep-alive while the model generates), then the JSON;
- `("silence",)`: headers, then nothing until the client goes away;
- `("raw", body, content_type)`: HTTP 200 with exactly these bytes (a reply that is not a chat completion);
- `("status", code, body, content_type)`: HTTP `code` with exactly these bytes (a 4xx with the server's message);
- `("respond", fn)`: `fn(request body) -> (code, bytes)`, a JSON reply of any status chosen per request.

    with SlowEndpoint(agent=("trickle", 0.1, {"content": "hi"})) as server:
        base_url = server.url          # http://127.0.0.1:PORT/v1
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def completion_bytes(message: dict[str, Any], finish: str = "stop") -> bytes:
    return json.dumps(
        {
            "id": "cmpl-slow",
            "object": "chat.completion",
            "created": 0,
            "model": "slow",
            "choices": [{"index": 0, "finish_reason": finish, "message": {"role": "assistant", **message}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
    ).encode()


class SlowEndpoint:
    def __init__(self, default: tuple = ("ok", {"content": "ok"}), **by_role: tuple) -> None:
        self.behaviours = {"default": default, **by_role}
        self.requests: list[tuple[str, float]] = []  # (role, time received)
        self.stop = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                role = self.headers.get("x-ecdysis-role", "default")
                outer.requests.append((role, time.monotonic()))
                kind, *args = outer.behaviours.get(role, outer.behaviours["default"])
                code = 200
                if kind == "status":
                    kind, code, args = "raw", args[0], args[1:]
                if kind == "respond":  # a callable of the request body -> (status, body bytes)
                    code, data = args[0](body)
                    kind, args = "raw", [data, "application/json"]
                if kind == "raw":
                    self.send_response(code)
                    self.send_header("Content-Type", args[1])
                    self.send_header("Content-Length", str(len(args[0])))
                    self.end_headers()
                    self.wfile.write(args[0])
                    return
                reply = args[-1] if kind != "silence" else None
                payload = (
                    completion_bytes(reply(body) if callable(reply) else reply) if reply is not None else b""
                )
                prefix = b" " * args[0] if kind == "whitespace" else b""
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(prefix) + len(payload) or 10))
                self.end_headers()
                self.wfile.flush()
                try:
                    if kind == "ok":
                        self.wfile.write(payload)
                    elif kind == "trickle":
                        self._drip(payload, args[0])
                    elif kind == "whitespace":
                        self._drip(prefix, args[1])
                        self.wfile.write(payload)
                    else:  # silence
                        outer.stop.wait(120)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _drip(self, data: bytes, interval: float) -> None:
                for i in range(len(data)):
                    if outer.stop.is_set():
                        return
                    self.wfile.write(data[i : i + 1])
                    time.sleep(interval)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> SlowEndpoint:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()
