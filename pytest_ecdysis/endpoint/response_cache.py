"""The response cache for common random numbers (ini `ecdysis_response_cache = on`).

Within one evolution run, a validation sub-run reuses every model response whose request is
byte-identical to one already answered for the same task, trial and role: the conversation before an
edit's first effect is unchanged, so its responses are not paid for twice, and incumbent and candidate
share their random draws up to the point where the edit changes what the model is sent.

- Key: sha256 of (suite/task/trial, the `X-Ecdysis-Trial` value without its run id; the role,
  `X-Ecdysis-Role`; the request body bytes). Never shared across tasks, trials or roles.
- Store: one JSON file per key, `<dir>/<key[:2]>/<key>.json` = `{"status": 200, "body": "<reply text>",
  "tokens": N}`, written to a temporary file and renamed (xdist workers and concurrent sub-runs share the
  directory). Only 200 replies to `POST .../chat/completions` are kept.
- Events: each lookup appends `{"run": "<run id>", "hit": bool, "tokens": N}` to `<dir>/events.jsonl`
  (one `O_APPEND` write per line); `run_stats` sums them per run id: the figures a round prints.
- Where: the directory is `ECDYSIS_RESPONSE_CACHE` (the controller sets it for the session, its workers
  and sub-runs); unset = no cache. `ECDYSIS_UNCACHEABLE` (comma-separated model names or base URLs, from
  ini `ecdysis_uncacheable`) lists endpoints never cached.

The hook is `wrap_transport`, called by the suite's client factory around its network transport.
Caveats: the simulated model keeps per-trial ground truth of the calls it answers, so a cached prefix is
missing from it; a harness that can write files could write cache entries (the loop's threat model,
docs/evolution.md). This module must not import tau2, task suites or harness code.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import httpx2

from pytest_ecdysis.core.config import EcdysisConfig

ENV_DIR = "ECDYSIS_RESPONSE_CACHE"
ENV_UNCACHEABLE = "ECDYSIS_UNCACHEABLE"


def cache_key(trial: str, role: str, body: bytes) -> str:
    """sha256 hex of the trial without its run id (`<suite>/<task>/<trial>`), the role and the body."""
    where = trial.split("/", 1)[1] if "/" in trial else trial
    digest = hashlib.sha256()
    for part in (where.encode(), role.encode(), body):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()


class ResponseCache:
    """The store in `directory` (created on first write)."""

    def __init__(self, directory: Path) -> None:
        self.dir = Path(directory)

    def path(self, key: str) -> Path:
        return self.dir / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored entry, or None (absent or unreadable: a torn file counts as a miss)."""
        try:
            return json.loads(self.path(key).read_text())
        except (OSError, ValueError):
            return None

    def put(self, key: str, body: str, tokens: int) -> None:
        path = self.path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "w") as f:
            json.dump({"status": 200, "body": body, "tokens": tokens}, f)
        os.replace(tmp, path)

    def note(self, run: str, hit: bool, tokens: int) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        line = (json.dumps({"run": run, "hit": hit, "tokens": tokens}) + "\n").encode()
        fd = os.open(self.dir / "events.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


class CachingTransport(httpx2.BaseTransport):
    """An httpx2 transport that answers chat-completion requests from the cache, else asks `inner` and
    stores a 200 reply."""

    def __init__(self, inner: httpx2.BaseTransport, cache: ResponseCache) -> None:
        self.inner = inner
        self.cache = cache

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        trial = request.headers.get("X-Ecdysis-Trial", "")
        if request.method != "POST" or not request.url.path.endswith("/chat/completions") or not trial:
            return self.inner.handle_request(request)
        body = request.read()
        key = cache_key(trial, request.headers.get("X-Ecdysis-Role", ""), body)
        run = trial.split("/", 1)[0]
        entry = self.cache.get(key)
        if entry is not None:
            self.cache.note(run, True, int(entry.get("tokens", 0)))
            return httpx2.Response(
                200,
                headers={"content-type": "application/json", "x-ecdysis-cache": "hit"},
                content=entry["body"].encode(),
                request=request,
            )
        response = self.inner.handle_request(request)
        if response.status_code != 200:
            self.cache.note(run, False, 0)
            return response
        content = response.read()
        tokens = _tokens(content)
        try:
            self.cache.put(key, content.decode(), tokens)
        except (OSError, UnicodeDecodeError):
            pass  # a reply that cannot be stored is still returned
        self.cache.note(run, False, tokens)
        return httpx2.Response(
            response.status_code, headers=response.headers, content=content, request=request
        )

    def close(self) -> None:
        self.inner.close()


def _tokens(content: bytes) -> int:
    try:
        return int((json.loads(content).get("usage") or {}).get("total_tokens") or 0)
    except (ValueError, AttributeError, TypeError):
        return 0


def uncacheable(model: str, base_url: str | None, marked: Iterable[str]) -> bool:
    """True when the model name or the base URL (without a trailing slash) is marked non-cacheable."""
    names = {m.strip().rstrip("/") for m in marked if m.strip()}
    return model in names or (base_url or "").rstrip("/") in names


def wrap_transport(
    inner: httpx2.BaseTransport, *, model: str, base_url: str | None, env: dict[str, str] | None = None
) -> httpx2.BaseTransport:
    """`inner` behind the cache when `ECDYSIS_RESPONSE_CACHE` is set and the endpoint is cacheable."""
    env = dict(os.environ) if env is None else env
    directory = env.get(ENV_DIR)
    if not directory or uncacheable(model, base_url, env.get(ENV_UNCACHEABLE, "").split(",")):
        return inner
    return CachingTransport(inner, ResponseCache(Path(directory)))


def configure(cfg: EcdysisConfig, run_path: Path, env: dict[str, str] | Any) -> Path | None:
    """Controller, configure time: when ini `ecdysis_response_cache = on` and evolving, set `ECDYSIS_RESPONSE_CACHE`
    (the cache directory: ini `ecdysis_cache_dir`, default `<run dir>/response_cache`) and
    `ECDYSIS_UNCACHEABLE` in `env` for the session, its workers and sub-runs; returns the directory.

    Raises:
        UsageError: the cache directory (or its nearest existing ancestor) is not a writable directory.
    """
    from pytest_ecdysis.core.errors import UsageError

    if getattr(cfg, "response_cache", "off") != "on" or not cfg.evolve:
        return None
    directory = Path(cfg.cache_dir or (run_path / "response_cache")).absolute()
    probe = directory
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        raise UsageError(
            f"ini key ecdysis_cache_dir {directory}: {probe} is not a writable directory; set a "
            "writable ecdysis_cache_dir, or ecdysis_response_cache = off"
        )
    env[ENV_DIR] = str(directory)
    if cfg.uncacheable:
        env[ENV_UNCACHEABLE] = ",".join(cfg.uncacheable)
    return directory


def run_stats(directory: Path, run: str) -> dict[str, int]:
    """`{"hits", "misses", "tokens_saved"}` of the lookups of run id `run` (zeros when none)."""
    out = {"hits": 0, "misses": 0, "tokens_saved": 0}
    try:
        lines = (Path(directory) / "events.jsonl").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if ev.get("run") != run:
            continue
        if ev.get("hit"):
            out["hits"] += 1
            out["tokens_saved"] += int(ev.get("tokens") or 0)
        else:
            out["misses"] += 1
    return out
