"""Total deadlines for model calls: per attempt and per budget (a trial, a diagnosis or editor stage).

An HTTP client's read timeout restarts on every byte, so a server that sends its headers and then trickles
the body (one byte a second, or keep-alive whitespace while the model generates, as some gateways do) holds
the caller far past any timeout. `DeadlineTransport` wraps a network transport and enforces, for each
attempt, a deadline of `min(call_timeout_s, seconds left in the budget)` over the whole exchange:
connect, headers **and** body. The attempt runs in a helper thread while the caller waits on the deadline;
at the deadline the caller gets an `httpx2.ReadTimeout` at once, and the helper's socket is shut down
(a watchdog) so the helper stops too. The body is read in full inside the transport (non-streamed
chat completions; a streamed response is buffered).

Retries also live here (the openai client gets `max_retries=0`): HTTP 429 and 5xx and transport errors
(refused, reset, timed out) are retried at most `max_retries` times with backoff `backoff_s * 2**n` s
(a `Retry-After` wins, capped at `MAX_BACKOFF_S` and by the budget). A 5xx whose body says the server
could not parse the model's output (`PARSE_FAILURE_MARKERS`: llama.cpp's "Failed to parse input",
vLLM's tool-parser errors) is never retried: asking again replays the same defect; nor is a 5xx saying the
server could not parse the request (`refusals.REQUEST_UNPARSED`), which is the sender's (`never_retried`).

A 200 whose body is an error object without `choices` (OpenRouter, some proxies) is the error it says it is
(`error_in_ok`): its `code` becomes the status, so a 502 in a 200 is retried and then raised as one.

A 200 reply to `/chat/completions` that is not a chat completion (not JSON, truncated, no
`choices[0].message`, an event stream the request did not ask for: `replies.completion_problem`) raises `UnusableReplyError`, an infrastructure error
naming the URL and what came back, whichever role sent the call; it is not retried.

Every attempt takes a slot of the session's limiter first (`endpoint.limiter_service.current`, none for the
simulated model by default) and reports its reply to it (status, latency, `Retry-After`, `x-ratelimit-*`,
tokens). The time a call waits for its slot is not charged to the budget (`Budget.queued_s`: the trial did
not spend it). Under an adaptive limiter (`--ecdysis-concurrency auto`) a 429 or 503 is not one of the
`max_retries`: the call waits for the limiter (which honours `Retry-After`); when the next slot would come
later than twice the budget, or the limiter stalled (every call throttled for longer than a trial's budget),
the last throttled reply is returned and `Budget.throttled` names the limit and the retry time (the trial's
infrastructure error).

Once the budget is spent no attempt is made: `Budget.exhausted` is set, `Budget.pending` says what was in
flight (`{"role", "url", "phase", "waited_s", "bytes"}`; phase `connect`, `headers`, `body` or `backoff`)
and the request fails with `httpx2.ReadTimeout`. So a budget bounds the wall-clock of everything sent
through it, within a second or so. This module must not import tau2, task suites or harness code.
"""

from __future__ import annotations

import functools
import json
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from typing import Any, cast

import httpx2

from pytest_ecdysis.core.errors import UnusableReplyError
from pytest_ecdysis.endpoint.limiter import THROTTLE_STATUS, LimiterLike, Outcome
from pytest_ecdysis.endpoint.limiter_service import current as current_limiter
from pytest_ecdysis.endpoint.refusals import REQUEST_UNPARSED
from pytest_ecdysis.endpoint.replies import asked_to_stream, completion_problem

#: statuses retried with backoff.
RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
#: the longest pause between two attempts, seconds (a longer `Retry-After` is cut to this).
MAX_BACKOFF_S = 8.0
#: lower-cased substrings of a 5xx body that mean "the server could not parse the model's reply":
#: a defect of the endpoint's output, not a transient failure (llama.cpp, vLLM, Ollama wording).
PARSE_FAILURE_MARKERS = (
    "failed to parse",
    "error parsing tool call",
    "could not parse",
    "unable to parse",
    "invalid tool call",
    "tool call parsing",
)
#: the attribute a failed attempt's exception carries: `(phase, seconds waited, bytes received)`.
_ATTEMPT_ATTR = "ecdysis_attempt"


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    return httpx2.create_ssl_context()


def network_transport() -> httpx2.HTTPTransport:
    """A new network transport (its own connection pool) over the process's one TLS context.

    `httpx2.HTTPTransport()` builds a TLS context each time and loads the system's CA certificates into it:
    56 ms of CPU on the build machine, paid twice per trial (the agent's and the user's client) even against
    an `http://` endpoint, about a tenth of a simulated trial's CPU. The context is built once (as
    `httpx2.create_ssl_context()` builds it: `SSL_CERT_FILE` / `SSL_CERT_DIR` honoured) and shared, which
    `ssl.SSLContext` allows across threads and connections."""
    return httpx2.HTTPTransport(verify=_ssl_context())


@dataclass
class Budget:
    """Total wall-clock seconds shared by every call sent through it (one trial, or one stage).

    `label` names it in messages ("trial", "diagnosis", "editor"); `pending` is filled when it runs out.
    """

    seconds: float
    label: str = "trial"
    started: float = field(default_factory=time.monotonic)
    exhausted: bool = False
    attempts: int = 0
    retries: int = 0
    pending: dict[str, Any] | None = None
    #: set when the endpoint throttled (HTTP 429/503) every call until the budget could not wait longer, or
    #: the session's limiter stalled: the infrastructure error's text (limit, retry time); cleared by a success.
    throttled: str | None = None

    #: seconds its calls waited for a slot of the session's limiter: not charged (the trial did not spend
    #: them; a limiter that stalls ends the wait)
    queued_s: float = 0.0

    def remaining(self) -> float:
        return self.seconds - (time.monotonic() - self.started - self.queued_s)

    def used_s(self) -> float:
        return time.monotonic() - self.started - self.queued_s

    def restart(self) -> None:
        """Start the budget again (a stage run once per round with one client)."""
        self.started, self.exhausted, self.pending = time.monotonic(), False, None
        self.throttled, self.queued_s = None, 0.0

    def describe(self) -> str:
        """One line: what ran out and what was in flight."""
        text = f"the {self.label} time budget of {self.seconds:g} s ran out ({self.attempts} requests, {self.retries} retries)"
        if self.pending:
            p = self.pending
            text += (
                f" while the {p.get('role') or 'model'} call to {p.get('url')} was pending in phase "
                f"{p.get('phase')} ({p.get('waited_s', 0):.1f} s, {p.get('bytes', 0)} body bytes received)"
            )
        return text


def is_parse_failure(status: int, body: bytes) -> bool:
    """True for a 5xx whose body reports that the server could not parse the model's output (not the
    request: `refusals.REQUEST_UNPARSED`, llama.cpp's "Failed to parse tools: ...", is the sender's)."""
    if status < 500:
        return False
    text = body[:4000].decode("utf-8", "replace").lower()
    if REQUEST_UNPARSED.search(text):
        return False
    return any(marker in text for marker in PARSE_FAILURE_MARKERS)


def never_retried(status: int, body: bytes) -> bool:
    """A 5xx that asking again would only repeat: the model's output unparsable (`is_parse_failure`), or the
    request itself (`refusals.REQUEST_UNPARSED`)."""
    if status < 500:
        return False
    return is_parse_failure(status, body) or bool(
        REQUEST_UNPARSED.search(body[:4000].decode("utf-8", "replace"))
    )


class _Attempt:
    """One request in a helper thread; the caller waits for it until the deadline."""

    def __init__(self, inner: httpx2.BaseTransport, request: httpx2.Request, deadline: float) -> None:
        self.inner, self.request, self.deadline = inner, request, deadline
        self.phase, self.bytes, self.started = "connect", 0, time.monotonic()
        self.response: httpx2.Response | None = None
        self.error: BaseException | None = None
        self.streams: list[Any] = []
        self.aborted = False
        self.done = threading.Event()

    def _trace(self, event: str, info: dict[str, Any]) -> None:
        if event == "connection.connect_tcp.complete" and info.get("return_value") is not None:
            self.streams.append(info["return_value"])
        elif event.endswith("send_request_headers.complete"):
            self.phase = "headers"

    def run(self) -> None:
        raw = None
        try:
            self.request.extensions["trace"] = self._trace
            raw = self.inner.handle_request(self.request)
            stream = raw.extensions.get("network_stream")
            if stream is not None:
                self.streams.append(stream)
            self.phase = "body"
            chunks = []
            # a sync transport's response: its stream is a sync one (the union is httpx's, for both kinds)
            for chunk in cast(httpx2.SyncByteStream, raw.stream):
                chunks.append(chunk)
                self.bytes += len(chunk)
                if self.aborted or time.monotonic() > self.deadline:
                    self.aborted = True
                    return
            self.response = httpx2.Response(
                raw.status_code,
                headers=raw.headers,
                stream=httpx2.ByteStream(b"".join(chunks)),
                extensions=raw.extensions,
            )
        except BaseException as exc:  # handed to the waiting caller
            self.error = exc
        finally:
            if raw is not None:
                try:
                    raw.close()
                except Exception:
                    pass
            self.done.set()

    def abort(self) -> None:
        """The watchdog: stop the helper by shutting its socket down (it is blocked in a read)."""
        self.aborted = True
        for stream in self.streams:
            try:
                sock = stream.get_extra_info("socket")
                if isinstance(sock, socket.socket):
                    sock.shutdown(socket.SHUT_RDWR)
            except Exception:
                pass


class CallTimeout(httpx2.ReadTimeout):
    """An attempt cut at the transport's per-call timeout (not at the budget's end): the server accepted the
    request and may still be computing it (`DeadlineTransport(retry_timeouts=False)` does not ask again)."""


class DeadlineTransport(httpx2.BaseTransport):
    """An httpx2 transport with a total deadline per attempt, a shared `Budget`, and bounded retries.

    Args:
        inner: the network transport (`network_transport()`, or `httpx2.MockTransport` in tests).
        budget: the `Budget` every request through this transport draws on.
        call_timeout_s: seconds one attempt may take, body included.
        max_retries: retries after 429/5xx (parse failures excepted) and transport errors.
        connect_timeout_s: seconds to open a connection (within the attempt's deadline).
        backoff_s: first pause between attempts (doubled each retry).
        sleep: how to pause (tests pass a recorder).
        retry_timeouts: whether an attempt cut at the call timeout is retried. The FDCR roles and the editor
            pass False: their calls are long generations, and a server that accepted the request keeps
            computing it after the client gives up (llama-cpp-python does, docs/real-model.md), so a retry
            queues behind the abandoned one and times out too (measured: Gemma 3's analyst, 1,201 s for
            nothing). A connection failure, 429 or 5xx is still retried.
        limiter: the calls-in-flight limiter every attempt goes through ("session": this process's, the
            default; None: none).
    """

    def __init__(
        self,
        inner: httpx2.BaseTransport,
        budget: Budget,
        *,
        call_timeout_s: float,
        max_retries: int,
        connect_timeout_s: float = 10.0,
        backoff_s: float = 0.5,
        sleep: Any = time.sleep,
        retry_timeouts: bool = True,
        limiter: LimiterLike | None | str = "session",
    ) -> None:
        self.inner, self.budget, self.sleep = inner, budget, sleep
        #: "session": this process's (`limiter_service.current`); None: no limiter
        self.limiter: LimiterLike | None = current_limiter() if isinstance(limiter, str) else limiter
        self.retry_timeouts = retry_timeouts
        self.call_timeout_s, self.max_retries = call_timeout_s, max_retries
        self.connect_timeout_s, self.backoff_s = connect_timeout_s, backoff_s

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        attempt = 0
        throttled: httpx2.Response | None = None  # the last 429/503 an adaptive limiter waited out
        lim = self.limiter
        while True:
            left = self.budget.remaining()
            if left <= 0:
                if throttled is not None:
                    return self._gave_up(request, throttled)
                self._exhausted(request, "backoff" if attempt else "connect", 0.0, 0)
                raise httpx2.ReadTimeout(self.budget.describe(), request=request)
            lease = None
            if lim is not None:
                asked = time.monotonic()
                # the wait is not charged: bounded by twice the budget (a limiter throttled all along
                # stalls after one budget and answers at once)
                lease = lim.acquire(max(left, 2 * self.budget.seconds), tokens=_estimate_tokens(request))
                self.budget.queued_s += time.monotonic() - asked
                if lease is None:
                    return self._no_slot(request, throttled, left)
            response = None
            began = time.monotonic()
            try:
                response = error_in_ok(self._attempt(request, min(self.call_timeout_s, left), left))
            except httpx2.TransportError as exc:
                if lim is not None and lease is not None:
                    lim.release(lease, Outcome(0, time.monotonic() - began))
                    lease = None
                cut = isinstance(exc, CallTimeout)
                if (
                    attempt >= self.max_retries
                    or self.budget.remaining() <= 0
                    or (cut and not self.retry_timeouts)
                ):
                    if self.budget.remaining() <= 0 and not self.budget.exhausted:
                        # the inner transport's own timeout fired just before the watchdog (under load):
                        # the phase and bytes are the attempt's, not "connect" with nothing received
                        phase, waited, received = getattr(exc, _ATTEMPT_ATTR, ("connect", 0.0, 0))
                        self._exhausted(request, phase, waited, received)
                    raise
                wait = None
            except BaseException:
                if lim is not None and lease is not None:
                    lim.release(lease, Outcome(0, time.monotonic() - began))  # never a slot leaked
                raise
            else:
                status = response.status_code
                if lim is not None and lease is not None:
                    body = response.read() if status == 200 else b""
                    lim.release(
                        lease, Outcome.of_reply(status, response.headers, time.monotonic() - began, body)
                    )
                if lim is not None and lim.adaptive and status in THROTTLE_STATUS:
                    throttled = response  # the limiter waits (Retry-After); not one of the retries
                    response.read()
                    self.budget.retries += 1
                    continue
                if (
                    status not in RETRY_STATUS
                    or attempt >= self.max_retries
                    or never_retried(status, response.read())
                ):
                    if status < 400:
                        self.budget.throttled = None
                    return _usable(request, response)
                wait = _retry_after(response)
                response.close()
            attempt += 1
            self.budget.retries += 1
            delay = self.backoff_s * 2 ** (attempt - 1) if wait is None else wait
            self.sleep(min(delay, MAX_BACKOFF_S, max(self.budget.remaining(), 0.0)))

    def _no_slot(
        self, request: httpx2.Request, throttled: httpx2.Response | None, left: float
    ) -> httpx2.Response:
        """The limiter gave no slot within the budget: the last throttled reply (`_gave_up`), the limiter's
        stall, or the budget spent waiting in its queue."""
        status = self.limiter.status() if self.limiter is not None else {}
        if status.get("stalled"):
            self.budget.throttled = str(status["stalled"])
            if throttled is not None:
                return throttled
            self.budget.throttled = f"model call not sent: {status['stalled']}"
            raise httpx2.ReadTimeout(self.budget.throttled, request=request)
        if throttled is not None:
            return self._gave_up(request, throttled)
        self._exhausted(request, "queued", left, 0)
        raise httpx2.ReadTimeout(self.budget.describe(), request=request)

    def _gave_up(self, request: httpx2.Request, response: httpx2.Response) -> httpx2.Response:
        status = self.limiter.status() if self.limiter is not None else {}
        retry = _retry_after(response)
        limit = status.get("limit")
        self.budget.throttled = (
            f"the endpoint answered the {request.headers.get('x-ecdysis-role') or 'model'} call to {request.url} "
            f"with HTTP {response.status_code} and the next slot would come later than twice the {self.budget.label} "
            f"budget of {self.budget.seconds:g} s ({self.budget.retries} throttled attempts; the session's limit "
            f"{limit if limit is not None else '-'} call(s) in flight; "
            + (f"the server asks to retry after {retry:g} s" if retry is not None else "no Retry-After")
            + "): the provider's rate limit, not the harness; lower --ecdysis-max-rps or --ecdysis-max-tpm"
        )
        return response

    def _attempt(self, request: httpx2.Request, per_call: float, left: float) -> httpx2.Response:
        request.extensions["timeout"] = {
            "connect": min(self.connect_timeout_s, per_call),
            "read": per_call,
            "write": per_call,
            "pool": per_call,
        }
        self.budget.attempts += 1
        job = _Attempt(self.inner, request, time.monotonic() + per_call)
        threading.Thread(target=job.run, name="ecdysis-model-call", daemon=True).start()
        finished = job.done.wait(per_call)
        if finished and not job.aborted:
            if job.error is not None:
                try:  # where the attempt was when it failed (for the budget's pending call)
                    setattr(job.error, _ATTEMPT_ATTR, (job.phase, time.monotonic() - job.started, job.bytes))
                except AttributeError:
                    pass
                raise job.error
            assert job.response is not None
            return job.response
        job.abort()
        waited = time.monotonic() - job.started
        if per_call >= left - 1e-3:  # the attempt's deadline was the budget's end
            self._exhausted(request, job.phase, waited, job.bytes)
            raise httpx2.ReadTimeout(self.budget.describe(), request=request)
        raise CallTimeout(
            f"no complete response within the call timeout of {self.call_timeout_s:g} s "
            f"(phase {job.phase}, {job.bytes} body bytes received)",
            request=request,
        )

    def _exhausted(self, request: httpx2.Request, phase: str, waited: float, received: int) -> None:
        self.budget.exhausted = True
        if self.budget.pending is None:
            self.budget.pending = {
                "role": request.headers.get("x-ecdysis-role"),
                "url": str(request.url),
                "phase": phase,
                "waited_s": round(waited, 3),
                "bytes": received,
            }

    def close(self) -> None:
        self.inner.close()


def error_in_ok(response: httpx2.Response) -> httpx2.Response:
    """An HTTP 200 whose body is an error object and no `choices` (OpenRouter's
    `{"error": {"code": 502, "message": ...}}`) as the error it is: a response with the error's `code` as
    its status when that is an HTTP error status (400-599), else 502, and the same body; so a 5xx or 429
    in a 200 is retried like one and reaches the caller as an `openai.APIStatusError` with the server's
    words. Any other response is returned as it is."""
    if response.status_code != 200:
        return response
    body = response.read()
    if not body.lstrip().startswith(b"{") or b'"error"' not in body[:4000]:
        return response
    try:
        doc = json.loads(body)
    except ValueError:
        return response
    if not isinstance(doc, dict) or doc.get("choices") or not isinstance(doc.get("error"), dict | str):
        return response
    code = doc["error"].get("code") if isinstance(doc["error"], dict) else None
    try:
        status = int(code) if code is not None else 502
    except (TypeError, ValueError):
        status = 502
    status = status if 400 <= status < 600 else 502
    headers = [
        (k, v)
        for k, v in response.headers.items()
        if k.lower() not in ("content-length", "content-encoding", "transfer-encoding")
    ]
    return httpx2.Response(status, headers=headers, content=body, extensions=response.extensions)


def _usable(request: httpx2.Request, response: httpx2.Response) -> httpx2.Response:
    """`response`, or `UnusableReplyError` for a 200 that is not a chat completion (module docstring)."""
    if response.status_code != 200:
        return response
    try:
        sent = request.content
    except httpx2.RequestNotRead:
        sent = b""
    problem = completion_problem(
        request.url.path,
        response.headers.get("content-type", ""),
        response.read(),
        streamed=asked_to_stream(sent),
    )
    if problem is None:
        return response
    role = request.headers.get("x-ecdysis-role") or "model"
    if problem.startswith("an event stream"):
        advice = (
            "the server (or a proxy in front of it) streams replies the client did not ask for; turn its "
            "streaming off, or put an OpenAI-compatible proxy in front"
        )
    else:
        advice = "the endpoint is not an OpenAI-compatible chat completions API (check --ecdysis-base-url: it ends in /v1)"
    raise UnusableReplyError(f"the {role} call to {request.url} got HTTP 200 with {problem}; {advice}")


def _retry_after(response: httpx2.Response) -> float | None:
    try:
        return float(response.headers.get("retry-after", ""))
    except ValueError:
        return None


def _estimate_tokens(request: httpx2.Request) -> int:
    """A call's tokens before its reply: the body's bytes / 4 plus 256 for the completion (the limiter's
    tokens-per-minute cap corrects it by the reply's `usage.total_tokens`)."""
    try:
        return len(request.content) // 4 + 256
    except httpx2.RequestNotRead:
        return 256
