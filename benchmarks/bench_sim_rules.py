"""What reading a prompt's rules costs the simulated model per request.

    python benchmarks/bench_sim_rules.py [--repeats 200]

The example harness's system prompt with τ²'s airline policy (about 8 kB) is parsed by
`sim.agent.instructions.read_rules`: uncached (a harness whose prompt changes at every request: the parse
is paid each time) and cached (a fixed prompt: one parse per process, then a dictionary look-up); and the
per-request reading the agent adds around it (`sim.agent.rules.RuleFollower.read_instructions` and
`sim.agent.rules.harness_text` on a 30-message request). Printed in microseconds per request, with the 1-minute load average. The
alternative weighed in docs/simulated-model.md — a sentence-embedding model (MiniLM through
sentence-transformers and torch) — is not installed; its cost is not measured here.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from pytest_ecdysis.sim.agent.instructions import read_rules
    from pytest_ecdysis.sim.agent.rules import harness_text
    from pytest_ecdysis.sim.agent.trial import AgentTrial
    from pytest_ecdysis.sim.profiles import load_profile
    from pytest_ecdysis_tau2.example_harness.prompts import build_system_prompt
    from pytest_ecdysis_tau2.knowledge.providers import providers

    task = providers()["tau2-airline"].task("0")
    prompt = build_system_prompt(task.policy)
    writes = tuple(sorted({task.plan[i].name for i in task.writes}))
    start = time.perf_counter()
    for k in range(args.repeats):
        read_rules(prompt + f"\nNote {k}.", task.policy, writes)  # a new text each time: no cache hit
    uncached = (time.perf_counter() - start) / args.repeats
    messages = [{"role": "system", "content": prompt}] + [
        {"role": "user" if i % 2 else "tool", "content": f"message {i} " * 40, "tool_call_id": f"c{i}"}
        for i in range(30)
    ]
    agent = AgentTrial(task, load_profile("default"), 0, nonce="bench")
    agent.follower.read_instructions(messages)
    start = time.perf_counter()
    for _ in range(args.repeats):
        agent.follower.read_instructions(messages)
        harness_text(messages, set())
    cached = (time.perf_counter() - start) / args.repeats
    print(
        json.dumps(
            {
                "prompt_chars": len(prompt),
                "rules_found": len(read_rules(prompt, task.policy, writes)),
                "uncached_parse_us": round(uncached * 1e6, 1),
                "cached_read_per_request_us": round(cached * 1e6, 1),
                "repeats": args.repeats,
                "load": os.getloadavg(),
            }
        )
    )


if __name__ == "__main__":
    main()
