"""The session's limiter in real runs: the τ² suite through pytester (`-n 2`, the oracle harness) against a
local endpoint that answers HTTP 429, counting what the endpoint sent and how the trials ended."""

from __future__ import annotations

import json
import threading

import pytest
from json_endpoint import serving, v1_url
from suite_scripted import ORACLE_HARNESS

pytest.importorskip("tau2")

from test_suite_pytester import _UserHandler  # noqa: E402 - imports tau2


class _Throttling(_UserHandler):
    """Every `server.every`-th request is HTTP 429 with Retry-After `server.retry_after` (every request when
    `every` is 1); counts requests and 429s."""

    def do_POST(self):  # noqa: N802 - http.server API
        with self.server.lock:
            self.server.requests += 1
            throttle = self.server.requests % self.server.every == 0
            if throttle:
                self.server.r429 += 1
        if throttle:
            self.read_body()
            body = json.dumps({"error": {"message": "Rate limit reached", "type": "requests"}}).encode()
            self.send_response(429)
            self.send_header("Content-Type", "application/json")
            self.send_header("Retry-After", str(self.server.retry_after))
            self.send_header("x-ratelimit-limit-requests", "30")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        super().do_POST()


#: airline train task ids
TRAIN = "0,1,3,4,5,7,9,10,11,12,14,15,17,20,21,23,27,28,33,34,36,38".split(",")


def _run(pytester, server, *args):
    return pytester.runpytest_subprocess(
        "--pyargs",
        "pytest_ecdysis_tau2.test_airline",
        "-p",
        "no:cacheprovider",
        "--ecdysis-model",
        "scripted",
        "--ecdysis-base-url",
        v1_url(server),
        "--ecdysis-harness",
        str(ORACLE_HARNESS),
        "--ecdysis-sandbox",
        "off",  # the oracle harness reads τ²'s gold data, which the sandbox hides
        "--ecdysis-preflight",
        "off",
        "--ecdysis-run-dir",
        str(pytester.path / "runs"),
        *args,
        timeout=600,
    )


def _trials(pytester):
    (run_dir,) = (pytester.path / "runs").iterdir()
    return [json.loads(line) for line in (run_dir / "trials.jsonl").read_text().splitlines()]


def _server(every: int, retry_after: str):
    return serving(
        _Throttling, roles=[], lock=threading.Lock(), requests=0, r429=0, every=every, retry_after=retry_after
    )


def test_auto_waits_out_429s_that_fixed_concurrency_loses(pytester, monkeypatch) -> None:
    """Every 3rd request is a 429 and a call has no retry (`ECDYSIS_MAX_RETRIES=0`): under the default
    `auto` (a real endpoint) every trial of 6 ends as the oracle's user_stop at reward 1, the endpoint having
    sent a third of its requests as 429; pinned `--ecdysis-concurrency 2` loses trials to the same 429s as
    infrastructure errors."""
    monkeypatch.setenv("ECDYSIS_MAX_RETRIES", "0")
    tasks = ["--ecdysis-tasks", "0,1,3,4,5,7"]
    with _server(3, "0.2") as server:
        result = _run(pytester, server, "-n", "2", *tasks)
        requests, r429 = server.requests, server.r429
    result.stdout.fnmatch_lines(
        ["*model calls of the whole session share one limit, adaptive*", "*6 passed*"]
    )
    trials = _trials(pytester)
    assert [t["termination_reason"] for t in trials] == ["user_stop"] * 6
    assert all(t["reward"] == 1.0 for t in trials)
    assert r429 == requests // 3 and r429 >= 4

    for path in (pytester.path / "runs").iterdir():
        import shutil

        shutil.rmtree(path)
    with _server(3, "0.2") as server:
        result = _run(pytester, server, "-n", "2", "--ecdysis-concurrency", "2", *tasks)
        r429 = server.r429
    trials = _trials(pytester)
    lost = [t for t in trials if t["termination_reason"] == "infrastructure_error"]
    assert r429 >= 1 and len(lost) >= 1 and all("HTTP 429" in t["error"] for t in lost)
    assert "share one limit" not in result.stdout.str()


def test_an_endpoint_that_throttles_everything_ends_trials_as_infrastructure_errors_and_stops(
    pytester, monkeypatch
) -> None:
    """Every request a 429 (Retry-After 1 s) and a trial budget of 10 s: once the throttle outlasts the
    budget the trials in flight end as infrastructure errors naming the limit and the retry time, no trial
    is started after (their error says so), and the controller says it in one line."""
    monkeypatch.setenv("ECDYSIS_TRIAL_BUDGET_S", "10")
    with _server(1, "1") as server:
        # 20 tasks: more than the 16 trial threads of `auto`, so some come after the stall
        result = _run(pytester, server, "-n", "0", "--ecdysis-tasks", ",".join(TRAIN[:20]))
        requests, r429 = server.requests, server.r429
    trials = _trials(pytester)
    assert len(trials) == 20 and requests == r429 >= 1
    assert all(t["termination_reason"] == "infrastructure_error" for t in trials)
    started = [t for t in trials if not t["error"].startswith("trial not started")]
    not_started = [t for t in trials if t["error"].startswith("trial not started")]
    assert started and not_started
    assert all("retry after 1 s" in t["error"] and "call(s) in flight" in t["error"] for t in trials)
    said = [line for line in result.stdout.lines if line.startswith("ecdysis: the endpoint answered every")]
    assert len(said) == 1 and "longer than the trial budget of 10 s" in said[0]
