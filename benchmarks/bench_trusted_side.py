"""What the trusted side's checks cost, each on its own (no τ² trial: those are in
`bench_agent_process.py`).

    python benchmarks/bench_trusted_side.py [--repeats R]

- `scorer start`: a scorer process's start to ready (imports τ², builds the environments), as started
  before those checks (bytecode caches used) and now (`-B`, an empty private `pycache_prefix`: every module
  compiled from source) and with the session's trusted cache (`validate.pycache`: `-B` and a
  `pycache_prefix` filled once by an earlier start): median of R starts each, wall-clock and CPU seconds.
  Paid once per worker and suite run, outside any trial's budget.
- `request guard`: `TrustedRequestTransport.handle_request` on a 100 kB chat request, model already the
  configured one and model overwritten (median of 200 calls, microseconds) against the bare inner transport.
- `redaction`: `secrets.redact` of a 1 MB `trials.jsonl` text with the environment's secrets (ms).
- `editor start`: running `true` as a `cmd:` editor in a process group (before) and in its PID namespace
  plus the marker scan (now), median of 20 (ms).
Prints one line per figure, with the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
READY = (
    "from pytest_ecdysis_tau2.tasks.tau2lib import load_tau2; "
    "from pytest_ecdysis_tau2.scoring.scorer import _fast_environments; "
    "load_tau2(); _fast_environments()"
)


def _scorer_start(flags: list[str], repeats: int, prefix: str | None = None) -> tuple[float, float]:
    """(median wall seconds, median CPU seconds) of `repeats` scorer starts with `flags`; `prefix`: a
    `pycache_prefix` kept across the starts (the session's trusted cache), else a fresh empty one each."""
    import resource

    env = dict(os.environ, PYTHONPATH=str(REPO), LITELLM_LOCAL_MODEL_COST_MAP="True")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    times, cpus = [], []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as fresh:
            extra = ["-X", f"pycache_prefix={prefix or fresh}"] if flags or prefix else []
            started, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
            subprocess.run(
                [sys.executable, *flags, *extra, "-c", READY], env=env, check=True, capture_output=True
            )
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            times.append(time.perf_counter() - started)
            cpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return statistics.median(times), statistics.median(cpus)


def _guard(calls: int = 200) -> tuple[float, float, float]:
    import httpx2

    from pytest_ecdysis_tau2.harness_process.request_guard import TrustedRequestTransport

    inner = httpx2.MockTransport(lambda request: httpx2.Response(200, json={"ok": True}))
    guard = TrustedRequestTransport(
        inner,
        model="sim",
        forced={"X-Ecdysis-Trial": "r/s/1/0", "X-Ecdysis-Role": "agent", "Authorization": "Bearer sim"},
    )
    messages = [{"role": "user", "content": "x" * 1000} for _ in range(100)]

    def median_us(transport: httpx2.BaseTransport, model: str) -> float:
        body = json.dumps({"model": model, "messages": messages}).encode()
        times = []
        for _ in range(calls):
            request = httpx2.Request(
                "POST",
                "http://h/v1/chat/completions",
                content=body,
                headers={
                    "X-Ecdysis-Trial": "r/s/1/0",
                    "X-Ecdysis-Role": "agent",
                    "Authorization": "Bearer sim",
                    "Content-Type": "application/json",
                },
            )
            started = time.perf_counter()
            transport.handle_request(request)
            times.append(time.perf_counter() - started)
        return statistics.median(times) * 1e6

    return median_us(inner, "sim"), median_us(guard, "sim"), median_us(guard, "sim/strong")


def _redaction() -> float:
    from pytest_ecdysis.core.secrets import redact

    text = json.dumps({"messages": ["a reply of the agent " * 20] * 2000})[: 1 << 20]
    started = time.perf_counter()
    redact(text)
    return (time.perf_counter() - started) * 1e3


def _editor(contained: bool, repeats: int = 20) -> float:
    from pytest_ecdysis.edit import contain
    from pytest_ecdysis.edit.contain import run_in_group

    saved = contain.namespace_prefix
    if not contained:
        contain.namespace_prefix = lambda: None
    times = []
    try:
        for _ in range(repeats):
            started = time.perf_counter()
            run_in_group(["true"], cwd=Path.cwd(), timeout_s=30, env=dict(os.environ))
            times.append(time.perf_counter() - started)
    finally:
        contain.namespace_prefix = saved
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    print(f"load average {os.getloadavg()[0]:.1f}")
    before, now = _scorer_start([], args.repeats), _scorer_start(["-B"], args.repeats)
    with tempfile.TemporaryDirectory(prefix="ecdysis-pycache-") as cache:  # validate.pycache: filled once
        _scorer_start([], 1, prefix=cache)
        trusted = _scorer_start(["-B"], args.repeats, prefix=cache)
    print(
        f"scorer start (wall s, CPU s): the venv's bytecode {before[0]:.2f}, {before[1]:.2f}; -B + empty "
        f"pycache_prefix {now[0]:.2f}, {now[1]:.2f}; -B + the session's trusted cache {trusted[0]:.2f}, "
        f"{trusted[1]:.2f} (median of {args.repeats})"
    )
    bare, same, changed = _guard()
    print(
        f"request guard (100 kB body): bare {bare:.0f} us, guarded {same:.0f} us, model overwritten {changed:.0f} us"
    )
    print(f"redaction of 1 MB: {_redaction():.1f} ms")
    print(
        f"editor start: process group {_editor(False):.1f} ms, PID namespace + marker scan {_editor(True):.1f} ms"
    )
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
