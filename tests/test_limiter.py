"""The session's limiter of model calls: the AIMD controller as a unit (a fake clock), its service shared by
processes over a unix socket, the transport's use of it, the sim's realism, and the options' usage errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import httpx2
import pytest

from pytest_ecdysis.core.config_values import concurrency, rate_caps
from pytest_ecdysis.core.errors import UsageError
from pytest_ecdysis.endpoint import limiter_service
from pytest_ecdysis.endpoint.deadline import Budget, DeadlineTransport
from pytest_ecdysis.endpoint.limiter import (
    Aimd,
    Limiter,
    Outcome,
    RateHeaders,
    Settings,
    duration_s,
    rate_headers,
    retry_after_s,
    status_text,
)
from pytest_ecdysis.sim.realism import Realism


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _fill(aimd: Aimd, n: int) -> list:
    leases = []
    for _ in range(n):
        assert aimd.wait_s()[0] == 0.0
        leases.append(aimd.start())
    return leases


def test_slow_start_doubles_the_limit_per_round_trip_while_the_limit_is_used() -> None:
    """Each success of a call started with the limit in use (at least limit - 1 in flight) adds one: of 4
    calls started one after another from none, the 3rd and 4th did (4 -> 6); a call started alone under a
    limit of 6 does not grow it."""
    clock = Clock()
    aimd = Aimd(Settings(initial=4), clock)
    for lease in _fill(aimd, 4):
        aimd.finish(lease, Outcome(200, latency_s=1.0))
    assert aimd.limit == 6.0
    lease = aimd.start()  # 1 in flight of 6: not in use
    aimd.finish(lease, Outcome(200, latency_s=1.0))
    assert aimd.limit == 6.0
    for lease in _fill(aimd, 6):  # a full window: 5th and 6th
        aimd.finish(lease, Outcome(200, latency_s=1.0))
    assert aimd.limit == 8.0


def test_a_429_halves_the_limit_once_per_round_trip_and_growth_turns_additive() -> None:
    """Four calls in flight all answered 429 halve the limit once, not four times; after it a full
    window of successes adds about one."""
    clock = Clock()
    aimd = Aimd(Settings(initial=8), clock)
    leases = _fill(aimd, 8)
    for lease in leases[:4]:
        aimd.finish(lease, Outcome(429, retry_after_s=0.0))
    assert aimd.limit == 4.0 and aimd.r429 == 4
    for lease in leases[4:]:
        aimd.finish(lease, Outcome(0))  # no reply: no signal
    clock.now += 10
    for lease in _fill(aimd, 4):
        aimd.finish(lease, Outcome(200, latency_s=1.0))
    assert aimd.limit == pytest.approx(4.0 + 1 / 4 + 1 / 4.25)  # additive: +1/limit for the 3rd and 4th


def test_retry_after_stops_every_new_call_until_then() -> None:
    clock = Clock()
    aimd = Aimd(Settings(initial=4), clock)
    (lease,) = _fill(aimd, 1)
    aimd.finish(lease, Outcome.of_reply(429, {"Retry-After": "7"}, 0.5))
    wait, why = aimd.wait_s()
    assert (wait, why) == (7.0, "endpoint")
    clock.now += 7.0
    assert aimd.wait_s() == (0.0, "")
    assert retry_after_s({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5


def test_a_429_without_retry_after_pauses_exponentially() -> None:
    clock = Clock()
    aimd = Aimd(Settings(initial=4), clock)
    waits = []
    for _ in range(3):
        (lease,) = _fill(aimd, 1)
        aimd.finish(lease, Outcome(429))
        waits.append(aimd.wait_s()[0])
        clock.now += 10
    assert waits == [0.5, 1.0, 2.0]


def test_x_ratelimit_headers_pause_at_zero_remaining_and_hold_growth_when_few_remain() -> None:
    clock = Clock()
    aimd = Aimd(Settings(initial=4), clock)
    headers = {
        "x-ratelimit-limit-requests": "60",
        "x-ratelimit-remaining-requests": "0",
        "x-ratelimit-reset-requests": "6m0s",
        "x-ratelimit-remaining-tokens": "5000",
        "x-ratelimit-reset-tokens": "20ms",
    }
    (lease,) = _fill(aimd, 1)
    aimd.finish(lease, Outcome.of_reply(200, headers, 1.0))
    assert aimd.wait_s() == (360.0, "endpoint")
    assert "x-ratelimit-remaining-requests 0" in aimd.blocked_by
    assert rate_headers(headers) == RateHeaders(60, 0, 360.0, None, 5000, 0.02)
    assert [duration_s(t) for t in ("1h2m3.5s", "20ms", "2", "soon")] == [3723.5, 0.02, 2.0, None]
    # few remaining: a full window of successes does not grow the limit
    aimd = Aimd(Settings(initial=4), clock)
    few = {"x-ratelimit-remaining-requests": "2", "x-ratelimit-reset-requests": "1s"}
    for lease in _fill(aimd, 4):
        aimd.finish(lease, Outcome.of_reply(200, few, 1.0))
    assert aimd.limit == 4.0


def test_caps_rps_tpm_and_ceiling_hold_the_calls() -> None:
    """`max_rps` 2: the third call in the same instant waits half a second; `max_tpm` 600 (a bucket of 6 s,
    60 tokens): a 500-token call runs the bucket 440 into debt, so the next waits (440 + 60) / 10 = 50 s
    (tokens refill at 10/s); the ceiling stops growth."""
    clock = Clock()
    aimd = Aimd(Settings(initial=8, max_rps=2.0), clock)
    _fill(aimd, 2)
    assert aimd.wait_s() == (0.5, "cap")
    clock = Clock()
    aimd = Aimd(Settings(initial=8, max_tpm=600.0), clock)
    lease = aimd.start(500)
    aimd.finish(lease, Outcome(200, 1.0, tokens=500))
    wait, why = aimd.wait_s(500)
    assert why == "cap" and wait == pytest.approx(50.0)
    aimd = Aimd(Settings(initial=4, ceiling=5), Clock())
    for _ in range(3):
        for lease in _fill(aimd, int(aimd.limit)):
            aimd.finish(lease, Outcome(200, 1.0))
    assert aimd.limit == 5.0
    _fill(aimd, 5)
    assert aimd.wait_s() == (None, "cap")


def test_latency_rise_stops_growth() -> None:
    clock = Clock()
    aimd = Aimd(Settings(initial=2, ceiling=64), clock)
    for _ in range(6):
        for lease in _fill(aimd, 1):
            aimd.finish(lease, Outcome(200, 1.0))
    aimd.limit = 2.0
    for _ in range(10):
        for lease in _fill(aimd, 2):
            aimd.finish(lease, Outcome(200, 10.0))
    assert aimd.limit < 3.5  # it grew a little while the average rose, then held


def test_a_fixed_limiter_keeps_its_caps_and_imposes_no_limit() -> None:
    aimd = Aimd(Settings(initial=1, fixed=True), Clock())
    leases = _fill(aimd, 10)
    aimd.finish(leases[0], Outcome(429))
    assert aimd.limit == 1.0 and aimd.in_flight == 9


def test_throttled_for_longer_than_the_stall_time_stalls_with_one_line() -> None:
    clock = Clock()
    limiter = Limiter(Settings(initial=2, stall_after_s=30.0), clock)
    for _ in range(4):
        lease = limiter.aimd.start()
        limiter.release(lease, Outcome.of_reply(429, {"retry-after": "12"}, 0.1))
        clock.now += 12.0
    status = limiter.status()
    assert status["stalled"] and "longer than the trial budget of 30 s" in status["stalled"]
    assert "retry after 12 s" in status["stalled"] and "limit 1 call(s) in flight" in status["stalled"]
    assert limiter.acquire(5.0) is None and limiter.wait_room(5.0) is False


def test_status_text_says_in_flight_and_why() -> None:
    text = status_text({"in_flight": 6, "limit": 8, "queued": 2, "why": "endpoint", "r429": 3, "r503": 0})
    assert (
        text
        == "model calls: 6 in flight, limit 8, 2 waiting (limited by the endpoint: 3 x 429, 0 x 503 so far)"
    )
    assert status_text({"in_flight": 1, "limit": 4, "why": "tasks"}).endswith("(limited by the tasks)")


def test_threads_never_exceed_the_limit() -> None:
    limiter = Limiter(Settings(initial=3, ceiling=3))
    peak, now, lock = [0], [0], threading.Lock()

    def call() -> None:
        lease = limiter.acquire(10.0)
        assert lease is not None
        with lock:
            now[0] += 1
            peak[0] = max(peak[0], now[0])
        time.sleep(0.05)
        with lock:
            now[0] -= 1
        limiter.release(lease, Outcome(200, 0.05))

    threads = [threading.Thread(target=call) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert peak[0] == 3


CHILD = textwrap.dedent(
    """
    import json, sys, time
    from pytest_ecdysis.endpoint.limiter import Outcome
    from pytest_ecdysis.endpoint.limiter_service import current
    lim = current()
    assert type(lim).__name__ == "RemoteLimiter", type(lim)
    for _ in range(3):
        lease = lim.acquire(30.0)
        t0 = time.time()
        time.sleep(0.2)
        t1 = time.time()  # before the slot goes back
        lim.release(lease, Outcome(200, 0.2))
        print(json.dumps([t0, t1]), flush=True)
    if sys.argv[1] == "die":
        lim.acquire(30.0)
        import os
        os._exit(0)
    """
)


def test_the_service_is_one_limit_for_several_processes_and_a_dead_process_leaks_no_slot() -> None:
    """Three processes, 3 calls each, through one service pinned at 2 in flight: never more than 2 at
    once across them; a process that exits holding a slot gives it back."""
    service = limiter_service.start(Settings(initial=2, ceiling=2))
    try:
        env = {**os.environ, "PYTHONPATH": os.getcwd()}
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", CHILD, "die" if n == 0 else "live"],
                stdout=subprocess.PIPE,
                text=True,
                env=env,
            )
            for n in range(3)
        ]
        spans = []
        for proc in procs:
            out, _ = proc.communicate(timeout=60)
            assert proc.returncode == 0
            spans += [json.loads(line) for line in out.splitlines()]
        assert len(spans) == 9
        most = max(sum(1 for a, b in spans if a <= t < b) for t, _ in spans)
        assert most == 2 and service.limiter.aimd.peak == 2
        time.sleep(0.2)
        status = service.limiter.status()
        assert status["in_flight"] == 0  # the dying process's slot came back with its connection
        assert service.limiter.aimd.successes == 9
        # without the token the service answers nothing
        wrong = limiter_service.RemoteLimiter(str(service.path), "not-the-token", Settings())
        assert wrong.status() == {}
    finally:
        limiter_service.stop(service)
    assert "ECDYSIS_LIMITER" not in os.environ and not service.directory.exists()


def test_a_process_whose_service_is_gone_limits_its_own_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ECDYSIS_LIMITER", Settings(initial=3).to_env(socket="/nonexistent/limiter.sock"))
    limiter_service.reset_current()
    try:
        lim = limiter_service.current()
        assert isinstance(lim, Limiter) and lim.aimd.limit == 3.0
    finally:
        limiter_service.reset_current()


def _transport(
    handler, limiter, budget_s: float = 30.0, max_retries: int = 0
) -> tuple[httpx2.Client, Budget]:
    budget = Budget(budget_s)
    transport = DeadlineTransport(
        httpx2.MockTransport(handler), budget, call_timeout_s=10, max_retries=max_retries, limiter=limiter
    )
    return httpx2.Client(transport=transport), budget


OK = {"choices": [{"message": {"role": "assistant", "content": "hi"}}], "usage": {"total_tokens": 42}}


def test_the_transport_waits_out_429s_under_the_adaptive_limiter_without_spending_retries() -> None:
    """Two 429s (Retry-After 0.1 s) then a 200, with max_retries 0: the adaptive limiter makes the call
    succeed; its limit was halved by each (the second call started after the first halving: 4 -> 2 -> 1),
    then grew by one with the success."""
    replies = [429, 429, 200]

    def handler(request: httpx2.Request) -> httpx2.Response:
        status = replies.pop(0)
        if status == 429:
            return httpx2.Response(
                429, headers={"retry-after": "0.1"}, json={"error": {"message": "slow down"}}
            )
        return httpx2.Response(200, json=OK)

    limiter = Limiter(Settings(initial=4, max_tpm=1e6))
    client, budget = _transport(handler, limiter)
    response = client.post("http://x/v1/chat/completions", json={"messages": []})
    assert response.status_code == 200 and budget.retries == 2 and budget.throttled is None
    assert limiter.aimd.r429 == 2 and limiter.aimd.limit == 2.0 and limiter.aimd.in_flight == 0


def test_throttled_past_the_budget_the_call_ends_naming_the_limit_and_the_retry_time() -> None:
    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(429, headers={"retry-after": "5"}, json={"error": {"message": "rate limit"}})

    limiter = Limiter(Settings(initial=4))
    client, budget = _transport(handler, limiter, budget_s=2.0)
    response = client.post("http://x/v1/chat/completions", json={"messages": []})
    assert response.status_code == 429 and limiter.aimd.r429 == 1
    assert budget.throttled is not None and not budget.exhausted
    assert "retry after 5 s" in budget.throttled and "limit 2 call(s) in flight" in budget.throttled


def test_without_the_adaptive_limiter_429s_are_retries_as_before() -> None:
    calls = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        calls.append(1)
        return httpx2.Response(429, headers={"retry-after": "0"}, json={"error": {"message": "rate limit"}})

    client, budget = _transport(handler, Limiter(Settings(fixed=True)), max_retries=2)
    assert client.post("http://x/v1/chat/completions", json={}).status_code == 429
    assert len(calls) == 3 and budget.throttled is None


def test_realism_limits_requests_per_window_with_retry_after() -> None:
    realism = Realism.parse("latency=1-8,scale=0.01,rpm=3,p503=0")
    verdicts = [realism.admit(400) for _ in range(4)]
    assert [v.status for v in verdicts] == [0, 0, 0, 429]
    assert 0.01 <= verdicts[0].latency_s <= 0.08
    assert verdicts[2].headers["x-ratelimit-remaining-requests"] == "0"
    assert 0 < float(verdicts[3].headers["retry-after"]) <= 0.6
    assert realism.stats()["served"] == 3 and realism.stats()["r429"] == 1
    with pytest.raises(UsageError, match="latency, scale, rpm"):
        Realism.parse("burst=3")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            "0",
            "--ecdysis-concurrency must be 'auto' (an adaptive limit for the whole session) or an integer >= 1",
        ),
        ("fast", "got 'fast'"),
    ],
)
def test_a_bad_concurrency_is_a_usage_error_naming_both_forms(value: str, message: str) -> None:
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        concurrency(value, uses_real=True)
    assert concurrency(None, uses_real=True) == {"concurrency": 16, "concurrency_auto": True}
    assert concurrency(None, uses_real=False) == {"concurrency": 1, "concurrency_auto": False}
    assert concurrency("Auto", uses_real=False)["concurrency_auto"] is True


@pytest.mark.parametrize(("rps", "tpm"), [("0", None), ("-1", None), (None, "0"), (None, "-5"), ("x", None)])
def test_a_cap_that_is_not_positive_is_a_usage_error(rps, tpm) -> None:
    with pytest.raises(UsageError, match=r"must be a number > 0 \((requests per second|tokens per minute)"):
        rate_caps(rps, tpm)


def test_each_shard_gets_its_share_of_a_cap() -> None:
    assert rate_caps("10", "90000", splits=3) == {"max_rps": pytest.approx(10 / 3), "max_tpm": 30000.0}


def test_the_headers_stated_limits_pace_the_calls_under_the_users_caps() -> None:
    """`x-ratelimit-limit-requests: 120` (per minute) paces starts at 2 per second; a lower `max_rps` of
    the user's wins and is named the cap's."""
    clock = Clock()
    aimd = Aimd(Settings(initial=8), clock)
    (lease,) = _fill(aimd, 1)
    aimd.finish(lease, Outcome.of_reply(200, {"x-ratelimit-limit-requests": "120"}, 1.0))
    assert aimd.rps == 2.0
    _fill(aimd, 2)  # a full bucket: a second's calls
    assert aimd.wait_s() == (0.5, "endpoint")
    aimd = Aimd(Settings(initial=8, max_rps=1.0), clock)
    (lease,) = _fill(aimd, 1)
    aimd.finish(lease, Outcome.of_reply(200, {"x-ratelimit-limit-requests": "120"}, 1.0))
    assert aimd.rps == 1.0 and aimd.wait_s() == (1.0, "cap")


def test_what_the_provider_says_remains_bounds_the_bucket() -> None:
    """A stated 600 requests per minute holds 10 in its bucket; `x-ratelimit-remaining-requests: 2` leaves
    two calls to start now, and the third waits for the refill (0.1 s at 10 per second)."""
    clock = Clock()
    aimd = Aimd(Settings(initial=8), clock)
    (lease,) = _fill(aimd, 1)
    clock.now += 5.0  # the bucket would be full
    headers = {"x-ratelimit-limit-requests": "600", "x-ratelimit-remaining-requests": "2"}
    aimd.finish(lease, Outcome.of_reply(200, headers, 1.0))
    _fill(aimd, 2)
    assert aimd.wait_s() == (pytest.approx(0.1), "endpoint")


def test_under_pytest_split_a_shard_keeps_its_share_of_the_caps(pytester: pytest.Pytester) -> None:
    """`--splits 3` (the action's `shards: 3`) with `--ecdysis-max-rps 9 --ecdysis-max-tpm 90000`: this
    shard's caps are 3 calls/s and 30,000 tokens/min; without `--splits` the caps are the whole."""
    pytest.importorskip("pytest_split")
    from pytest_ecdysis.core.config import read_config

    caps = ("--ecdysis-max-rps", "9", "--ecdysis-max-tpm", "90000")
    cfg = read_config(pytester.parseconfig("--splits", "3", "--group", "1", *caps))
    assert (cfg.max_rps, cfg.max_tpm) == (3.0, 30000.0)
    cfg = read_config(pytester.parseconfig(*caps))
    assert (cfg.max_rps, cfg.max_tpm) == (9.0, 90000.0)
