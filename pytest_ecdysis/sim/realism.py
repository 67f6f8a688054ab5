"""A real endpoint's manners for the simulated model: latency per call, a rate limit, occasional 503s.

Off unless asked for: `ECDYSIS_SIM_REALISM` (read when a server starts, `server.make_server`) or
`Realism.parse(spec)` given to `make_server(realism=...)`. The spec is comma-separated `key=value`:

| key | meaning | default |
| --- | --- | --- |
| `latency` | a call's latency, seconds: `LO-HI` (triangular, mode `LO + (HI-LO)/7`) or one number | `1-8` |
| `scale` | multiplies every time (latency, the rate window, Retry-After): `0.1` runs 10x faster | `1` |
| `rpm` | requests per window (a sliding window of `60 x scale` s); past it HTTP 429 | none |
| `tpm` | tokens per window (a call's tokens: its reply's `usage.total_tokens`, its body bytes / 4 until answered) | none |
| `p503` | the chance a call is answered HTTP 503 (overloaded, `Retry-After 1 x scale`) | `0` |
| `headers` | `1`: every reply carries `x-ratelimit-limit/remaining/reset-requests` and `-tokens` (the limits per minute of real time, `rpm / scale`; the reset: when the window is empty again, as OpenAI's) | `1` |
| `seed` | seed of the latency and 503 draws | `0` |

A 429 carries `Retry-After` (seconds, fractional under `scale`) and `retry-after-ms`: when the oldest request
(or token) of the window leaves it. Rejected calls do not count against the window (as OpenAI's). Only
`/v1/chat/completions` is affected; the ground-truth routes never are. `stats()` counts what was served,
refused and the tokens, for `benchmarks/bench_endpoint.py`.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from pytest_ecdysis.core.errors import UsageError

#: the environment variable holding the spec.
ENV_REALISM = "ECDYSIS_SIM_REALISM"


@dataclass(frozen=True)
class Verdict:
    """What to do with one call: `status` 0 (answer it after `latency_s`) or 429/503 with `headers`."""

    status: int
    latency_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    entry: list[float] | None = None  #: its `[time, tokens]` in the window (`Realism.used` corrects it)


class Realism:
    """The rate limit's window and the draws (module docstring); thread-safe."""

    def __init__(
        self,
        latency: tuple[float, float] = (1.0, 8.0),
        scale: float = 1.0,
        rpm: int | None = None,
        tpm: int | None = None,
        p503: float = 0.0,
        headers: bool = True,
        seed: int = 0,
    ) -> None:
        self.latency, self.scale, self.rpm, self.tpm = latency, scale, rpm, tpm
        self.p503, self.headers = p503, headers
        self.window_s = 60.0 * scale
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.requests: deque[float] = deque()
        self.tokens: deque[list[float]] = deque()
        self.served = self.r429 = self.r503 = self.token_total = 0

    @classmethod
    def parse(cls, spec: str) -> Realism:
        """`latency=1-8,scale=0.1,rpm=60,tpm=40000,p503=0.02`.

        Raises:
            UsageError: an unknown key or a value that is no number, naming the keys.
        """
        kwargs: dict[str, object] = {}
        keys = ("latency", "scale", "rpm", "tpm", "p503", "headers", "seed")
        for part in spec.split(","):
            if not part.strip():
                continue
            key, _, value = part.partition("=")
            key = key.strip()
            try:
                if key == "latency":
                    lo, _, hi = value.partition("-")
                    kwargs[key] = (float(lo), float(hi or lo))
                elif key in ("rpm", "tpm", "seed"):
                    kwargs[key] = int(value)
                elif key == "headers":
                    kwargs[key] = value.strip() not in ("0", "off", "no")
                elif key in keys:
                    kwargs[key] = float(value)
                else:
                    raise ValueError(key)
            except ValueError:
                raise UsageError(
                    f"{ENV_REALISM}: {part.strip()!r} is not one of {', '.join(keys)}=NUMBER "
                    "(e.g. latency=1-8,scale=0.1,rpm=60,tpm=40000,p503=0.02)"
                ) from None
        return cls(**kwargs)  # type: ignore[arg-type]

    @classmethod
    def from_env(cls) -> Realism | None:
        spec = os.environ.get(ENV_REALISM, "").strip()
        return cls.parse(spec) if spec else None

    def _draw_latency(self) -> float:
        lo, hi = self.latency
        if hi <= lo:
            return lo * self.scale
        return self.rng.triangular(lo, hi, lo + (hi - lo) / 7.0) * self.scale

    def _rate_headers(self, now: float) -> dict[str, str]:
        if not self.headers:
            return {}
        out: dict[str, str] = {}
        for name, limit, used, newest in (
            ("requests", self.rpm, len(self.requests), self.requests[-1] if self.requests else None),
            (
                "tokens",
                self.tpm,
                int(sum(n for _, n in self.tokens)),
                self.tokens[-1][0] if self.tokens else None,
            ),
        ):
            if limit is None:
                continue
            reset = 0.0 if newest is None else max(newest + self.window_s - now, 0.0)
            out[f"x-ratelimit-limit-{name}"] = str(round(limit / self.scale))
            out[f"x-ratelimit-remaining-{name}"] = str(max(limit - used, 0))
            out[f"x-ratelimit-reset-{name}"] = f"{reset:.3f}s"
        return out

    def admit(self, request_bytes: int) -> Verdict:
        """The verdict on one call of `request_bytes` (its tokens: bytes / 4)."""
        now = time.monotonic()
        tokens = request_bytes // 4
        with self.lock:
            while self.requests and self.requests[0] <= now - self.window_s:
                self.requests.popleft()
            while self.tokens and self.tokens[0][0] <= now - self.window_s:
                self.tokens.popleft()
            wait = 0.0
            if self.rpm is not None and len(self.requests) >= self.rpm:
                wait = self.requests[0] + self.window_s - now
            used = sum(n for _, n in self.tokens)
            if self.tpm is not None and self.tokens and used + tokens > self.tpm:
                wait = max(wait, self.tokens[0][0] + self.window_s - now)
            if wait > 0:
                self.r429 += 1
                headers = self._rate_headers(now)
                headers.update({"retry-after": f"{wait:.3f}", "retry-after-ms": str(int(wait * 1000) + 1)})
                return Verdict(429, headers=headers)
            if self.p503 and self.rng.random() < self.p503:
                self.r503 += 1
                return Verdict(503, headers={"retry-after": f"{self.scale:.3f}"})
            self.requests.append(now)
            entry = [now, float(tokens)]
            self.tokens.append(entry)
            self.served += 1
            self.token_total += tokens
            return Verdict(0, self._draw_latency(), self._rate_headers(now), entry)

    def used(self, verdict: Verdict, tokens: int) -> None:
        """The call of `verdict` was answered with `tokens` in all: its entry in the window corrected."""
        if verdict.entry is None or tokens <= 0:
            return
        with self.lock:
            self.token_total += tokens - int(verdict.entry[1])
            verdict.entry[1] = float(tokens)

    def stats(self) -> dict[str, float]:
        """`served`, `r429`, `r503`, `tokens`, and the window's `rpm`, `tpm`, `window_s`."""
        with self.lock:
            return {
                "served": self.served,
                "r429": self.r429,
                "r503": self.r503,
                "tokens": self.token_total,
                "rpm": self.rpm or 0,
                "tpm": self.tpm or 0,
                "window_s": self.window_s,
            }
