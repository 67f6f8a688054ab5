"""A loopback HTTP proxy that records every chat-completion exchange with a real server.

    proxy = RecordingProxy(upstream="http://127.0.0.1:8766", port=8765, record=Path("replies.jsonl"))
    proxy.start(); ...; proxy.stop()

One JSON line per request: `t` (unix seconds), `wall_s`, `path`, `role` and `trial` (the `X-Ecdysis-Role`
and `X-Ecdysis-Trial` headers), `request` (model, number of messages, characters of the messages, tool
names, temperature, max_tokens, response_format), `status` and `reply` (the server's raw JSON body, or
its text when it is not JSON). Those replies become the fixtures under `tests/fixtures/replies/llamacpp/`.
`agent_temperature`, when set, replaces the temperature of agent requests (run-to-run noise of a real model).

`agent_max_tokens` (default 512): an agent request without `max_tokens` gets this cap. The harness sends
none, and llama-cpp-python then generates until the context is full: a rambling 135M model at a few tokens
a second would hold one call for many minutes. Recorded as `capped: true`.

`tool_choice_auto` (on by default): a request with `tools` and no `tool_choice` gets `"tool_choice": "auto"`.
OpenAI treats a missing `tool_choice` as "auto"; llama-cpp-python's server treats it as "none" and never
returns a tool call (measured: docs/real-model.md). The harness does not send it, because vLLM refuses an
explicit "auto" unless started with `--enable-auto-tool-choice`. Each line records `shimmed: true` then.

`null_content` (on with `tool_choice_auto`): an assistant message with tool calls and `content: null` (the
OpenAI shape the harness sends back) gets `content: ""`. llama-cpp-python 0.3.36's request model wants a
string there and answers HTTP 500 with seven pydantic validation errors (measured: docs/real-model.md).
Each line records `null_content: N` (messages rewritten) then.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx2

HOP_HEADERS = {"host", "content-length", "connection", "transfer-encoding", "accept-encoding"}


def summarise(body: dict[str, Any]) -> dict[str, Any]:
    messages = body.get("messages") or []
    return {
        "model": body.get("model"),
        "n_messages": len(messages),
        "chars": sum(len(json.dumps(m.get("content") or "")) for m in messages if isinstance(m, dict)),
        "tools": [t.get("function", {}).get("name") for t in body.get("tools") or [] if isinstance(t, dict)],
        "temperature": body.get("temperature"),
        "max_tokens": body.get("max_tokens"),
        "response_format": body.get("response_format"),
    }


class RecordingProxy:
    """Forwards to `upstream` and appends one line per exchange to `record` (thread-safe)."""

    def __init__(
        self,
        *,
        upstream: str,
        port: int,
        record: Path,
        agent_temperature: float | None = None,
        tool_choice_auto: bool = True,
        agent_max_tokens: int | None = 512,
        timeout_s: float = 1800.0,
    ) -> None:
        self.upstream = upstream.rstrip("/")
        self.record = record
        self.agent_temperature = agent_temperature
        self.tool_choice_auto = tool_choice_auto
        self.agent_max_tokens = agent_max_tokens
        self.client = httpx2.Client(timeout=timeout_s)
        self.lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                proxy.forward(self, None)

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                proxy.forward(self, self.rfile.read(length))

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.client.close()

    def forward(self, handler: BaseHTTPRequestHandler, raw: bytes | None) -> None:
        role = handler.headers.get("X-Ecdysis-Role", "")
        body: dict[str, Any] = {}
        shimmed = capped = False
        nulls = 0
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = {}
            if role == "agent" and self.agent_temperature is not None and isinstance(body, dict):
                body["temperature"] = self.agent_temperature
                raw = json.dumps(body).encode()
            shimmed = bool(
                self.tool_choice_auto
                and isinstance(body, dict)
                and body.get("tools")
                and "tool_choice" not in body
                and not handler.headers.get("X-Ecdysis-No-Shim")
            )
            if shimmed:
                body = {**body, "tool_choice": "auto"}
            if self.tool_choice_auto and isinstance(body, dict) and isinstance(body.get("messages"), list):
                for i, m in enumerate(body["messages"]):
                    if isinstance(m, dict) and m.get("role") == "assistant" and m.get("content") is None:
                        body["messages"][i] = {**m, "content": ""}
                        nulls += 1
            capped = bool(
                role == "agent"
                and self.agent_max_tokens
                and isinstance(body, dict)
                and body.get("max_tokens") is None
                and body.get("max_completion_tokens") is None
            )
            if capped:
                body = {**body, "max_tokens": self.agent_max_tokens}
            if shimmed or capped or nulls:
                raw = json.dumps(body).encode()
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in HOP_HEADERS}
        started = time.time()
        try:
            response = self.client.request(
                "POST" if raw is not None else "GET",
                self.upstream + handler.path,
                content=raw,
                headers=headers,
            )
            status, content, ctype = (
                response.status_code,
                response.content,
                response.headers.get("content-type", ""),
            )
        except httpx2.HTTPError as exc:
            status, content, ctype = (
                502,
                json.dumps(
                    {"error": {"message": f"proxy: upstream failed: {exc}", "type": "proxy_error"}}
                ).encode(),
                "application/json",
            )
        wall = time.time() - started
        try:
            handler.send_response(status)
            handler.send_header("Content-Type", ctype or "application/json")
            handler.send_header("Content-Length", str(len(content)))
            handler.end_headers()
            handler.wfile.write(content)
        except OSError:  # the client gave up (its timeout); the exchange is still recorded
            pass
        if raw is None:
            return
        try:
            reply: Any = json.loads(content)
        except ValueError:
            reply = content.decode(errors="replace")
        line = {
            "t": round(started, 3),
            "wall_s": round(wall, 3),
            "path": handler.path,
            "role": role,
            "trial": handler.headers.get("X-Ecdysis-Trial", ""),
            "request": summarise(body),
            "shimmed": shimmed,
            "capped": capped,
            "null_content": nulls,
            "status": status,
            "reply": reply,
        }
        with self.lock, self.record.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(line, ensure_ascii=False) + "\n")
