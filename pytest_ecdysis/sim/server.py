"""The simulated model's HTTP server: OpenAI chat completions on 127.0.0.1, routed by role and trial.

Endpoints:

- `POST /v1/chat/completions`: OpenAI request body (`model`, `messages`, optional `tools`); the reply
  has `choices[0].message` (text or one tool call), `finish_reason`, and `usage` in every response.
- `GET /v1/models`: `sim` and `sim/<profile>` for every known profile.
- `GET /ecdysis/ground_truth?trial=<X-Ecdysis-Trial value>`: the trial's ground truth (quirks drawn,
  origin, step, cured). Only the suite reads it, at trial end; no completion ever contains it. It needs
  the header `X-Ecdysis-Ground-Truth-Token: <token>` (HTTP 403 without it): the server's random token
  (`SimServerHandle.token`), which the controller hands to the trusted trial side as env
  `ECDYSIS_SIM_TOKEN` and never to harness processes (`agent_wire.HIDDEN_ENV_PREFIXES`); known to
  `sim.client.fetch_ground_truth` in the process that started the server.
- `POST /ecdysis/ground_truth` with `{"trial": <header>, "executed": [{"id", "name", "arguments"}]}` (the
  tool calls the environment executed, from the suite's trajectory), same credential: the ground truth
  with the entries the harness repaired or refused in code marked (`sim/truth/repairs.py`).

Routing of a completion (header `X-Ecdysis-Role`):

| role | needs `X-Ecdysis-Trial` | answered by |
| --- | --- | --- |
| `agent` (or no role header, with a trial header) | yes | `sim.agent.trial.AgentTrial` |
| `user` | yes | `sim.user.trial.UserTrial` |
| `analyst`, `critic`, `engineer`, `moderator`, `editor`, or no role and no trial | no | `pytest_ecdysis.sim.roles.answers.answer(role, body) -> str` (role None when no header) |

Other roles can be added to `ROLE_HANDLERS` (name -> callable(role, body) -> str). The trial header is
`<run-id>/<suite>/<task-id>/<trial>`; the suite must be one a provider knows
(`pytest_ecdysis.core.registry.sim_knowledge()`). The profile comes from each request's `model` (`sim` ->
the server's default profile, `sim/<profile>`). With `sim.realism` on (env `ECDYSIS_SIM_REALISM`) a
completion waits its drawn latency, and past the rate limit it is HTTP 429 with `Retry-After`. Request errors are HTTP 400 with an OpenAI error body
`{"error": {"message", "type", "code"}}`; the server stays up for the other workers.

The model itself (routing, trial state, ground truth, `ROLE_HANDLERS`, the header names) is
`sim.model.SimModel`; this module is its HTTP layer. The ground-truth credential's header and environment
variable are `sim.client`'s (`TOKEN_HEADER`, `ENV_TOKEN`), which also remembers a started server's token.
"""

from __future__ import annotations

import hmac
import json
import secrets
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from pytest_ecdysis.core.errors import UsageError
from pytest_ecdysis.sim.client import TOKEN_HEADER, remember_token
from pytest_ecdysis.sim.knowledge import SimKnowledge
from pytest_ecdysis.sim.model import ROLE_HEADER, TRIAL_HEADER, RequestError, SimModel
from pytest_ecdysis.sim.profiles import known_profiles
from pytest_ecdysis.sim.realism import Realism

MAX_BODY_BYTES = 32 * 1024 * 1024


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "ecdysis-sim/1"
    # Headers and body leave in one segment (buffered, flushed once per request) and TCP_NODELAY is
    # set: otherwise Nagle plus the client's delayed ACK add about 40 ms to every keep-alive request.
    wbufsize = 1 << 16
    disable_nagle_algorithm = True
    model: SimModel  # set on the subclass made by `make_server`
    token: str  # the ground-truth credential, set there too
    realism: Realism | None = None  # a real endpoint's latency, rate limit and 503s (`sim.realism`)
    extra_headers: dict[str, str] | None = None  # of the next response (the rate limit's)

    def log_message(self, format: str, *args: Any) -> None:  # quiet: pytest output stays clean
        pass

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (self.extra_headers or {}).items():
            self.send_header(name, value)
        self.extra_headers = None
        self.end_headers()
        self.wfile.write(data)

    def _error(self, exc: RequestError) -> None:
        self._send(exc.status, {"error": {"message": exc.message, "type": exc.type, "code": exc.code}})

    def _guard(self, fn: Callable[[], dict[str, Any]]) -> None:
        try:
            self._send(200, fn())
        except RequestError as exc:
            self._error(exc)
        except Exception as exc:  # a bug must not take the server down for the other workers
            self._error(
                RequestError(
                    f"simulated model internal error: {type(exc).__name__}: {exc}",
                    code="internal_error",
                    status=500,
                    type_="server_error",
                )
            )

    def _authorised(self) -> bool:
        """Whether the request carries the ground-truth credential; answers HTTP 403 when not."""
        if hmac.compare_digest((self.headers.get(TOKEN_HEADER) or "").encode(), self.token.encode()):
            return True
        self._error(
            RequestError(
                f"the ground truth needs the server's credential ({TOKEN_HEADER}); "
                "only the trusted trial side has it",
                code="forbidden",
                status=403,
            )
        )
        return False

    def _ground_truth_with_executed(self, raw: bytes) -> dict[str, Any]:
        try:
            body = json.loads(raw or b"null")
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise RequestError(f"the request body is not valid JSON: {exc}", code="bad_json") from None
        executed = body.get("executed") if isinstance(body, dict) else None
        if not isinstance(executed, list) or not all(isinstance(c, dict) for c in executed):
            raise RequestError(
                'POST /ecdysis/ground_truth needs {"trial": <trial header>, "executed": '
                '[{"id", "name", "arguments"}...]} (the tool calls the environment ran)',
                code="bad_executed",
            )
        return self.model.ground_truth(body.get("trial"), executed=executed)

    def do_GET(self) -> None:
        url = urlparse(self.path)
        if url.path.rstrip("/") in ("/v1/models", "/models"):
            self._guard(
                lambda: {
                    "object": "list",
                    "data": [
                        {"id": "sim", "object": "model", "owned_by": "pytest-ecdysis"},
                        *(
                            {"id": f"sim/{p}", "object": "model", "owned_by": "pytest-ecdysis"}
                            for p in known_profiles()
                        ),
                    ],
                }
            )
        elif url.path == "/ecdysis/ground_truth":
            if not self._authorised():
                return
            trial = parse_qs(url.query).get("trial", [None])[0]
            self._guard(lambda: self.model.ground_truth(trial))
        elif url.path == "/health":
            self._guard(lambda: {"status": "ok"})
        else:
            self._error(RequestError(f"no route GET {url.path}", code="not_found", status=404))

    def do_POST(self) -> None:
        url = urlparse(self.path)
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0 or length > MAX_BODY_BYTES:
            self.close_connection = True
            self._error(RequestError("missing or too large Content-Length", code="bad_length"))
            return
        raw = self.rfile.read(length)
        if url.path == "/ecdysis/ground_truth":
            if not self._authorised():
                return
            self._guard(lambda: self._ground_truth_with_executed(raw))
            return
        if url.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            self._error(RequestError(f"no route POST {url.path}", code="not_found", status=404))
            return

        def answer() -> dict[str, Any]:
            try:
                body = json.loads(raw or b"null")
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise RequestError(f"the request body is not valid JSON: {exc}", code="bad_json") from None
            reply = self.model.complete(body, self.headers.get(ROLE_HEADER), self.headers.get(TRIAL_HEADER))
            if self.realism is not None and verdict is not None:  # the window counts the reply's tokens
                self.realism.used(verdict, int((reply.get("usage") or {}).get("total_tokens") or 0))
            return reply

        verdict = None
        if self.realism is not None:
            verdict = self.realism.admit(len(raw))
            self.extra_headers = verdict.headers
            if verdict.status:
                message = "rate limit reached" if verdict.status == 429 else "the server is overloaded"
                self._error(RequestError(message, code="rate_limited", status=verdict.status))
                return
            time.sleep(verdict.latency_s)
        self._guard(answer)


class SimServerHandle:
    """A running server: `.url` is `http://127.0.0.1:PORT` (no `/v1`), `.token` its ground-truth
    credential, `.stop()` shuts it down."""

    def __init__(self, httpd: ThreadingHTTPServer, thread: threading.Thread | None, model: SimModel) -> None:
        self.httpd, self.thread, self.model = httpd, thread, model
        self.port = httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        handler = httpd.RequestHandlerClass
        if not (isinstance(handler, type) and issubclass(handler, _Handler)):
            raise TypeError(f"not a server of make_server: its handler is {handler!r}")
        self.token = handler.token
        remember_token(self.url, self.token)

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        if self.thread is not None:
            self.thread.join(timeout=5)


def make_server(
    model: SimModel, port: int = 0, token: str | None = None, realism: Realism | None = None
) -> ThreadingHTTPServer:
    """Bind 127.0.0.1:`port` (0 = a free port); `token`: the ground-truth credential (None: a random
    32-byte one, `secrets.token_urlsafe`); `realism`: a real endpoint's manners (None: env
    `ECDYSIS_SIM_REALISM`, `sim.realism`, when set).

    Raises:
        UsageError: the port is in use or cannot be bound, or the realism spec is not one.
    """
    handler = type(
        "SimHandler",
        (_Handler,),
        {
            "model": model,
            "token": token or secrets.token_urlsafe(32),
            "realism": realism if realism is not None else Realism.from_env(),
        },
    )
    try:
        httpd = ThreadingHTTPServer(("127.0.0.1", port), handler)
    except OSError as exc:
        raise UsageError(
            f"cannot serve the simulated model on 127.0.0.1:{port} ({exc.strerror or exc}); "
            "pick another --port, or 0 for a free one"
        ) from None
    httpd.daemon_threads = True
    return httpd


def start_background(
    latency_s: float = 0.0,
    port: int = 0,
    default_profile: str = "default",
    knowledge: dict[str, SimKnowledge] | None = None,
    nonce: str | None = None,
    realism: Realism | None = None,
) -> SimServerHandle:
    """Start the server in a daemon thread; returns a handle with `.url` and `.stop()`.

    `latency_s`: fixed delay in seconds added to every completion; `nonce`: see `SimModel`. Raises
    `UsageError` for a port in use or an unknown default profile.
    """
    model = SimModel(default_profile=default_profile, latency_s=latency_s, knowledge=knowledge, nonce=nonce)
    httpd = make_server(model, port, realism=realism)
    thread = threading.Thread(target=httpd.serve_forever, name="ecdysis-sim", daemon=True)
    thread.start()
    return SimServerHandle(httpd, thread, model)
