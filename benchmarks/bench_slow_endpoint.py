"""How long a τ² trial runs against an endpoint that trickles its reply.

The agent's endpoint sends the response headers, then 60 spaces at one per second (a gateway's keep-alive
while the model generates), then the JSON; the call timeout is 3 s and the trial budget 10 s. Before the
total deadline the trial ran 65 s (an HTTP client's read timeout restarts on every byte). Prints the
termination reason, the time from the first model request to the trial's end, and the pending call.

    .venv/bin/python benchmarks/bench_slow_endpoint.py [--spaces 60] [--interval 1.0] [--budget 10] [--call-timeout 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spaces", type=int, default=60)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--budget", type=float, default=10.0)
    parser.add_argument("--call-timeout", type=float, default=3.0)
    args = parser.parse_args()

    from slow_endpoint import SlowEndpoint

    from pytest_ecdysis.core.harness import harness_id
    from pytest_ecdysis_tau2.trial.endpoint import EndpointSettings
    from pytest_ecdysis_tau2.trial.runner import TrialSpec, run_trial

    harness = ROOT / "pytest_ecdysis_tau2" / "example_harness"
    from pytest_ecdysis.core.harness import load_harness
    from pytest_ecdysis_tau2.tasks import suite  # noqa: F401 - imported before the clock starts
    from pytest_ecdysis_tau2.trial import user  # noqa: F401 - imported before the clock starts

    load_harness(harness)  # a worker's first trial pays these imports once; measure the endpoint, not them
    suite.get_environment("airline")
    spec = TrialSpec(
        domain="airline",
        task_id="3",
        trial=0,
        run_id="bench",
        model="slow",
        user_model="slow",
        harness_dir=harness,
        harness_id=harness_id(harness),
    )
    settings = EndpointSettings(call_timeout_s=args.call_timeout, trial_budget_s=args.budget)
    reply = {"content": "I can help with that."}
    with SlowEndpoint(
        agent=("whitespace", args.spaces, args.interval, reply),
        user=("ok", {"content": "Hi, I need help with my reservation."}),
    ) as server:
        spec = TrialSpec(**{**spec.__dict__, "base_url": server.url})
        result = run_trial(spec, settings)
        conversation_s = time.monotonic() - server.requests[0][1]
    print(f"endpoint: headers, then {args.spaces} spaces at one per {args.interval:g} s, then the JSON")
    print(f"call timeout {args.call_timeout:g} s, trial budget {args.budget:g} s")
    print(
        f"termination {result.termination_reason}; conversation {conversation_s:.1f} s "
        f"(trial wall_s {result.wall_s:.1f} s, set-up included)"
    )
    print(f"pending call: {result.pending_call}")


if __name__ == "__main__":
    main()
