"""A local HTTP endpoint for tests that script a server's replies: `JsonHandler`, a request handler that
answers JSON and logs nothing, and `serving`, which runs a handler on a free port of 127.0.0.1 for the
length of a `with` (a thread per request)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class JsonHandler(BaseHTTPRequestHandler):
    """Subclasses define `do_POST` (or another verb) with `read_body` and `send_json`."""

    def read_body(self) -> bytes:
        """The request's body, `Content-Length` bytes."""
        return self.rfile.read(int(self.headers["Content-Length"]))

    def send_json(self, status: int, payload: Any) -> None:
        """Answer `status` with `payload` as a JSON body."""
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler], **attributes: Any) -> Iterator[ThreadingHTTPServer]:
    """A running server of `handler`, with `attributes` set on it (what handlers read as `self.server.X`);
    shut down and closed on leaving. Its OpenAI-style base URL: `v1_url(server)`."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    for name, value in attributes.items():
        setattr(server, name, value)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def v1_url(server: ThreadingHTTPServer) -> str:
    """`http://127.0.0.1:<port>/v1` of a server from `serving`."""
    return f"http://127.0.0.1:{server.server_address[1]}/v1"
