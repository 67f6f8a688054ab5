"""One budget of model calls in flight for a whole session tree: an AIMD controller, like TCP's.

`Aimd` is the controller, a pure state machine driven by a clock it is given (unit-tested without
threads): how many model calls may be in flight (`limit`), and whether one more may start now (`wait_s`).

- start at `initial` (4) calls in flight; while replies succeed and their latency holds (the moving
  average at most `LATENCY_RISE` x the best average seen), grow: +1 per success until the first throttle
  (slow start), then +1/limit per success (+1 per round trip: additive increase). A success only grows the
  limit when its call started with the limit in use (at least limit - 1 calls in flight), as TCP grows only
  a full window;
- HTTP 429 or 503 halves it (multiplicative decrease, never below `floor`), once per round trip: a throttled
  call started before the last decrease does not decrease again (its siblings in flight saw the same
  overload);
- `Retry-After` (seconds, or `retry-after-ms`) stops every new call until then (at most
  `MAX_RETRY_AFTER_S`); a 429 without it pauses `0.5 s x 2^n` for the n-th throttle in a row (at most 8 s);
- the `x-ratelimit-*` headers (OpenAI's and most gateways' names: `remaining-requests`, `reset-requests`,
  `remaining-tokens`, `reset-tokens`, durations such as `6m0s`, `1s`, `20ms`): none remaining stops new calls
  until the reset; fewer remaining than the limit holds the limit; `limit-requests` and `limit-tokens` (per
  minute, as providers state them) become caps like `max_rps` (limit / 60) and `max_tpm`, under the
  user's own caps, so calls are paced at the provider's rate instead of probing it with 429s, and
  `remaining-requests`/`-tokens` bound what their buckets hold;
- caps: `max_rps` (a token bucket of one second's burst) and `max_tpm` (a bucket of `TPM_BURST_S` seconds'
  tokens, each call's estimate taken at its start and corrected by the reply's `usage.total_tokens`), and
  `ceiling`;
  `fixed` pins the number in flight (`--ecdysis-concurrency N`: none is imposed, the trial threads are the
  limit) while the caps still hold;
- `stalled`: every reply HTTP 429 (or 503) for longer than `stall_after_s` (the trial budget) with no
  success between: no call starts again (`stall_line` says the limit and the retry time once).

`Limiter` wraps it for threads (one lock and condition): `acquire(timeout_s, tokens) -> Lease | None`,
`release(lease, Outcome)`, `wait_room(timeout_s)` (a trial start waits for a free slot), `status()`.
`endpoint.limiter_service` shares one `Limiter` across processes over a unix socket and knows this process's
(`limiter_service.current`).
This module must not import tau2, task suites or harness code.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

#: the environment variable naming the session's limiter (JSON: `Settings` fields plus `socket`, `token`).
ENV_LIMITER = "ECDYSIS_LIMITER"
#: the statuses that mean "too much": halve the limit.
THROTTLE_STATUS = frozenset({429, 503})
#: the longest `Retry-After` or rate-limit reset honoured, seconds (a longer one is cut to this).
MAX_RETRY_AFTER_S = 600.0
#: how far the moving average latency may rise over the best one seen before growth stops.
LATENCY_RISE = 2.0
#: the tokens-per-minute bucket holds this many seconds' tokens (a burst of a whole minute's would overrun a
#: provider whose window is shorter, or a sliding one).
TPM_BURST_S = 6.0
#: weight of the newest latency in the moving average.
LATENCY_ALPHA = 0.2


@dataclass(frozen=True)
class Settings:
    """What the session's limiter is. Units: calls in flight, requests per second, tokens per minute,
    seconds. `fixed`: no adaptive limit (the trial threads are the limit); the caps still apply."""

    initial: int = 4
    floor: int = 1
    ceiling: int = 64
    fixed: bool = False
    max_rps: float | None = None
    max_tpm: float | None = None
    stall_after_s: float = 900.0

    def to_env(self, **extra: Any) -> str:
        return json.dumps({**asdict(self), **extra})

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> Settings:
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in doc.items() if k in names})


@dataclass(frozen=True)
class RateHeaders:
    """What a reply's `x-ratelimit-*` headers say (None: not sent). Units: requests, tokens, seconds."""

    limit_requests: int | None = None
    remaining_requests: int | None = None
    reset_requests_s: float | None = None
    limit_tokens: int | None = None
    remaining_tokens: int | None = None
    reset_tokens_s: float | None = None

    def text(self) -> str:
        parts = []
        if self.limit_requests is not None:
            parts.append(f"{self.limit_requests} requests")
        if self.limit_tokens is not None:
            parts.append(f"{self.limit_tokens} tokens")
        return " and ".join(parts)


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")


def duration_s(text: str | None) -> float | None:
    """`6m0s`, `1s`, `20ms`, `1h2m3.5s`, or a bare number of seconds -> seconds; None when unreadable."""
    if text is None:
        return None
    text = text.strip().lower()
    try:
        return max(float(text), 0.0)
    except ValueError:
        pass
    found = _DURATION.findall(text)
    if not found or "".join(n + u for n, u in found) != text.replace(" ", ""):
        return None
    scale = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    return sum(float(n) * scale[u] for n, u in found)


def _int(text: str | None) -> int | None:
    try:
        return int(float(text)) if text is not None else None
    except ValueError:
        return None


def rate_headers(headers: Mapping[str, str]) -> RateHeaders | None:
    """The `x-ratelimit-*` headers of a reply (lower-case names), None when it sends none."""
    h = {k.lower(): v for k, v in headers.items()}
    if not any(k.startswith("x-ratelimit-") for k in h):
        return None
    return RateHeaders(
        limit_requests=_int(h.get("x-ratelimit-limit-requests")),
        remaining_requests=_int(h.get("x-ratelimit-remaining-requests")),
        reset_requests_s=duration_s(h.get("x-ratelimit-reset-requests")),
        limit_tokens=_int(h.get("x-ratelimit-limit-tokens")),
        remaining_tokens=_int(h.get("x-ratelimit-remaining-tokens")),
        reset_tokens_s=duration_s(h.get("x-ratelimit-reset-tokens")),
    )


def retry_after_s(headers: Mapping[str, str]) -> float | None:
    """`retry-after-ms` (OpenAI's, milliseconds) or `Retry-After` (seconds; an HTTP date is not read)."""
    h = {k.lower(): v for k, v in headers.items()}
    try:
        if "retry-after-ms" in h:
            return max(float(h["retry-after-ms"]) / 1000.0, 0.0)
        if "retry-after" in h:
            return max(float(h["retry-after"]), 0.0)
    except ValueError:
        return None
    return None


@dataclass(frozen=True)
class Outcome:
    """What one attempt's reply told: `status` (0: no reply, a transport error or timeout), `latency_s`,
    `retry_after_s`, its rate headers, `tokens` (the reply's `usage.total_tokens`, 0 when unknown)."""

    status: int
    latency_s: float = 0.0
    retry_after_s: float | None = None
    rate: RateHeaders | None = None
    tokens: int = 0

    @classmethod
    def of_reply(
        cls, status: int, headers: Mapping[str, str], latency_s: float, body: bytes = b""
    ) -> Outcome:
        found = re.search(rb'"total_tokens"\s*:\s*(\d+)', body[-2000:]) if body else None
        return cls(
            status=status,
            latency_s=latency_s,
            retry_after_s=retry_after_s(headers),
            rate=rate_headers(headers),
            tokens=int(found.group(1)) if found else 0,
        )


@dataclass
class Lease:
    """One call's slot: given by `acquire`, handed back to `release`."""

    id: int
    epoch: int
    tokens: int
    started: float
    full: bool = True  #: it started with the limit in use (at least limit - 1 calls in flight then)


@dataclass
class Aimd:
    """The controller (module docstring). `clock`: seconds, monotonic."""

    settings: Settings = field(default_factory=Settings)
    clock: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        s = self.settings
        self.limit = float(min(max(s.initial, s.floor), s.ceiling))
        self.slow_start = True
        self.in_flight = 0
        self.epoch = 0
        self.blocked_until = 0.0
        self.blocked_by = ""  # what the current pause honours: "Retry-After 2 s", "x-ratelimit-reset..."
        self.throttles_in_row = 0
        self.throttled_since: float | None = None
        self.last_retry_after: float | None = None
        self.last_rate: RateHeaders | None = None
        self.hold = False  # few requests remaining: no growth
        self.latency_avg: float | None = None
        self.latency_best: float | None = None
        self.r429 = self.r503 = self.successes = 0
        self.stalled = False
        now = self.clock()
        self.rps: float | None = s.max_rps  # the caps in force: the user's, or the headers' when lower
        self.tpm: float | None = s.max_tpm
        self._rps_level, self._rps_at = (s.max_rps or 0.0), now
        self._tpm_level, self._tpm_at = (s.max_tpm or 0.0) * TPM_BURST_S / 60.0, now
        self._ids = 0
        self.peak = 0  # the most calls in flight at once

    # -- admission --
    def _refill(self, now: float) -> None:
        if self.rps:
            self._rps_level = min(max(self.rps, 1.0), self._rps_level + (now - self._rps_at) * self.rps)
        if self.tpm:
            cap = self.tpm * TPM_BURST_S / 60.0
            self._tpm_level = min(cap, self._tpm_level + (now - self._tpm_at) * self.tpm / 60.0)
        self._rps_at = self._tpm_at = now

    def wait_s(self, tokens: int = 0) -> tuple[float | None, str]:
        """(seconds before one more call may start, why): 0.0 now; None: when a call in flight ends (the
        limit is reached); `why` is `endpoint` (lowered or paused by the endpoint's replies), `cap`
        (`max_rps`, `max_tpm`, `ceiling`) or `` when nothing holds it."""
        now = self.clock()
        self._refill(now)
        s = self.settings
        if now < self.blocked_until:
            return self.blocked_until - now, "endpoint"
        if not s.fixed and self.in_flight >= int(self.limit):
            return None, "cap" if int(self.limit) >= s.ceiling else "endpoint"
        if self.rps and self._rps_level < 1.0:
            return (1.0 - self._rps_level) / self.rps, self._cap_why(s.max_rps, self.rps)
        if self.tpm:
            need = min(float(tokens), self.tpm * TPM_BURST_S / 60.0)  # a big call runs into debt
            if self._tpm_level < need:
                return (need - self._tpm_level) * 60.0 / self.tpm, self._cap_why(s.max_tpm, self.tpm)
        return 0.0, ""

    @staticmethod
    def _cap_why(given: float | None, used: float) -> str:
        return "cap" if given is not None and given <= used else "endpoint"

    def start(self, tokens: int = 0) -> Lease:
        """Take a slot (call only when `wait_s` said 0.0)."""
        now = self.clock()
        self._refill(now)
        if self.rps:
            self._rps_level -= 1.0
        if self.tpm:
            self._tpm_level -= tokens
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        self._ids += 1
        return Lease(self._ids, self.epoch, tokens, now, full=self.in_flight >= int(self.limit) - 1)

    # -- feedback --
    def finish(self, lease: Lease, outcome: Outcome) -> None:
        """A call ended: its slot back, and what its reply says about the endpoint."""
        now = self.clock()
        self.in_flight = max(self.in_flight - 1, 0)
        if self.tpm and outcome.tokens:
            self._refill(now)
            self._tpm_level -= outcome.tokens - lease.tokens  # the estimate corrected
        if outcome.rate is not None:
            self._rate(outcome.rate, now)
        if outcome.status in THROTTLE_STATUS:
            self._throttled(lease, outcome, now)
        elif 200 <= outcome.status < 500:
            self._succeeded(lease, outcome, now)

    def _rate(self, rate: RateHeaders, now: float) -> None:
        self.last_rate = rate
        s = self.settings
        self._refill(now)
        if rate.limit_requests:  # the provider's stated rate, per minute
            stated = rate.limit_requests / 60.0
            new = min(stated, s.max_rps) if s.max_rps else stated
            if self.rps is None:
                self._rps_level = max(new, 1.0)  # a full bucket (a second's calls), bounded below
            self.rps = new
        if rate.limit_tokens:
            new = min(float(rate.limit_tokens), s.max_tpm) if s.max_tpm else float(rate.limit_tokens)
            if self.tpm is None:
                self._tpm_level = new * TPM_BURST_S / 60.0
            self.tpm = new
        # what the provider says is left of its window bounds the buckets (a sliding window refills later)
        if self.rps and rate.remaining_requests is not None:
            self._rps_level = min(self._rps_level, float(rate.remaining_requests))
        if self.tpm and rate.remaining_tokens is not None:
            self._tpm_level = min(self._tpm_level, float(rate.remaining_tokens))
        for remaining, reset, what in (
            (rate.remaining_requests, rate.reset_requests_s, "requests"),
            (rate.remaining_tokens, rate.reset_tokens_s, "tokens"),
        ):
            if remaining is not None and remaining <= 0 and reset:
                until = now + min(reset, MAX_RETRY_AFTER_S)
                if until > self.blocked_until:
                    self.blocked_until = until
                    self.blocked_by = f"x-ratelimit-remaining-{what} 0, reset in {reset:g} s"
        self.hold = rate.remaining_requests is not None and rate.remaining_requests < int(self.limit)

    def _throttled(self, lease: Lease, outcome: Outcome, now: float) -> None:
        if outcome.status == 429:
            self.r429 += 1
        else:
            self.r503 += 1
        self.throttles_in_row += 1
        if self.throttled_since is None:
            self.throttled_since = now
        wait = outcome.retry_after_s
        self.last_retry_after = wait
        if wait is None:
            wait = min(0.5 * 2 ** (self.throttles_in_row - 1), 8.0)
            why = f"HTTP {outcome.status}, pausing {wait:g} s"
        else:
            wait = min(wait, MAX_RETRY_AFTER_S)
            why = f"HTTP {outcome.status}, Retry-After {wait:g} s"
        if now + wait > self.blocked_until:
            self.blocked_until, self.blocked_by = now + wait, why
        if not self.settings.fixed and lease.epoch == self.epoch:  # once per round trip
            self.limit = max(float(self.settings.floor), self.limit / 2.0)
            self.slow_start = False
            self.epoch += 1
        if now - self.throttled_since > self.settings.stall_after_s:
            self.stalled = True

    def _succeeded(self, lease: Lease, outcome: Outcome, now: float) -> None:
        self.successes += 1
        self.throttles_in_row = 0
        self.throttled_since = None
        if outcome.latency_s > 0:
            avg = self.latency_avg
            self.latency_avg = (
                outcome.latency_s if avg is None else avg + LATENCY_ALPHA * (outcome.latency_s - avg)
            )
            if self.successes >= 5:  # a best average needs a few samples
                self.latency_best = min(self.latency_best or self.latency_avg, self.latency_avg)
        s = self.settings
        if s.fixed or self.hold or not lease.full:
            return
        if self.latency_best and self.latency_avg and self.latency_avg > LATENCY_RISE * self.latency_best:
            return  # latency rose: the endpoint queues our calls
        grow = 1.0 if self.slow_start else 1.0 / self.limit
        self.limit = min(float(s.ceiling), self.limit + grow)

    def stall_line(self) -> str:
        """Why nothing is started any more (the limit, the retry time, the headers' limits)."""
        since = self.clock() - (self.throttled_since or self.clock())
        retry = (
            f"the server asks to retry after {self.last_retry_after:g} s"
            if self.last_retry_after is not None
            else "the server sent no Retry-After"
        )
        limits = self.last_rate.text() if self.last_rate else ""
        return (
            f"the endpoint answered every model call with HTTP 429/503 for {since:.0f} s, longer than the "
            f"trial budget of {self.settings.stall_after_s:g} s ({self.r429} x 429, {self.r503} x 503; "
            f"limit {int(self.limit)} call(s) in flight; {retry}"
            + (f"; its rate limit: {limits} per window" if limits else "")
            + "): no further trial is started; wait for the provider's limit to reset, or cap the rate "
            "with --ecdysis-max-rps / --ecdysis-max-tpm"
        )


class LimiterLike(Protocol):
    """What `DeadlineTransport` and the trial pool use: a `Limiter` or the service's client."""

    def acquire(self, timeout_s: float, tokens: int = 0) -> Lease | None: ...

    def release(self, lease: Lease, outcome: Outcome) -> None: ...

    def wait_room(self, timeout_s: float) -> bool: ...

    def status(self) -> dict[str, Any]: ...

    @property
    def adaptive(self) -> bool: ...


class Limiter:
    """`Aimd` for threads: waits on one condition (module docstring)."""

    def __init__(self, settings: Settings | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.aimd = Aimd(settings or Settings(), clock)
        self.cond = threading.Condition()
        self.queued = 0
        self.why = ""  # why the last call that waited, waited

    @property
    def adaptive(self) -> bool:
        return not self.aimd.settings.fixed

    def acquire(self, timeout_s: float, tokens: int = 0) -> Lease | None:
        """A slot, waiting at most `timeout_s`; None when none came in time or the limiter is stalled."""
        end = time.monotonic() + max(timeout_s, 0.0)
        with self.cond:
            self.queued += 1
            try:
                while True:
                    if self.aimd.stalled:
                        return None
                    wait, why = self.aimd.wait_s(tokens)
                    if wait == 0.0:
                        return self.aimd.start(tokens)
                    self.why = why
                    left = end - time.monotonic()
                    if left <= 0 or (wait is not None and wait > left):
                        return None
                    self.cond.wait(min(left, wait if wait is not None else left, 1.0))
            finally:
                self.queued -= 1

    def release(self, lease: Lease, outcome: Outcome) -> None:
        with self.cond:
            self.aimd.finish(lease, outcome)
            self.cond.notify_all()

    def wait_room(self, timeout_s: float) -> bool:
        """Wait (at most `timeout_s`) until a call could start now with none queued; False when stalled."""
        end = time.monotonic() + timeout_s
        with self.cond:
            while not self.aimd.stalled:
                wait, _ = self.aimd.wait_s()
                if wait == 0.0 and self.queued == 0:
                    return True
                left = end - time.monotonic()
                if left <= 0:
                    return True  # never hold a trial back for ever: its calls queue instead
                self.cond.wait(min(left, wait if wait else 1.0, 1.0))
            return False

    def status(self) -> dict[str, Any]:
        """`in_flight`, `queued`, `limit` (None when fixed), `why` (`endpoint`, `cap`, `tasks`), `r429`,
        `r503`, `blocked_by`, `stalled` (the stall line, or None)."""
        with self.cond:
            a = self.aimd
            why = self.why if self.queued else "tasks"
            if a.clock() < a.blocked_until:
                why = "endpoint"
            return {
                "in_flight": a.in_flight,
                "queued": self.queued,
                "limit": None if a.settings.fixed else int(a.limit),
                "why": why,
                "r429": a.r429,
                "r503": a.r503,
                "blocked_by": a.blocked_by if a.clock() < a.blocked_until else "",
                "stalled": a.stall_line() if a.stalled else None,
            }


def status_text(status: Mapping[str, Any]) -> str:
    """The progress line's part: `model calls: 6 in flight, limit 8 (limited by the endpoint: ...)`."""
    limit = status.get("limit")
    head = f"model calls: {status.get('in_flight', 0)} in flight" + (
        f", limit {limit}" if limit is not None else ""
    )
    if status.get("queued"):
        head += f", {status['queued']} waiting"
    why = status.get("why") or "tasks"
    words = {"endpoint": "by the endpoint", "cap": "by the cap", "tasks": "by the tasks"}[why]
    detail = [status["blocked_by"]] if status.get("blocked_by") else []
    if status.get("r429") or status.get("r503"):
        detail.append(f"{status.get('r429', 0)} x 429, {status.get('r503', 0)} x 503 so far")
    return f"{head} (limited {words}" + (f": {'; '.join(detail)}" if detail else "") + ")"
