"""Figures of the τ² suite: worker start-up, wall-clock per trial, overhead of the pytest layer.

    python benchmarks/bench_suite.py [--tasks N] [--repeats R]

A local scripted endpoint (a thread in this process, 127.0.0.1) plays both roles: as the agent's model it
replays the task's gold actions through the example harness and then states the task's communicate_info;
as the user it opens and then stops. No network, no simulated model.

1. worker start-up: a fresh interpreter importing what an xdist worker imports before its first trial
   (plugin, suite, tau2 via `load_tau2`, runner, example harness); median of R runs;
2. wall-clock per trial on the airline test split (20 tasks), in one process (`run_trial` loop);
3. overhead of the pytest layer: the same trials as `pytest --pyargs pytest_ecdysis_tau2` (one process,
   `-p no:xdist`) against a fresh process calling `run_trial` in a loop; both include interpreter start,
   imports and the scorer process. Target: under 5 %.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
for key in ("ECDYSIS_SIM_URL", "ECDYSIS_RUN_ID"):
    os.environ.pop(key, None)

STARTUP = (
    "import time; t=time.perf_counter(); import pytest, pytest_ecdysis.plugin, pytest_ecdysis_tau2.cases; "
    "from pytest_ecdysis_tau2.tasks.tau2lib import load_tau2; load_tau2(); "
    "import pytest_ecdysis_tau2.trial.runner; "
    "from pytest_ecdysis.core.harness import load_harness; load_harness(__import__('pathlib').Path('{h}')); "
    "print(time.perf_counter()-t)"
)

DIRECT = """
import json, sys, time
t0 = time.perf_counter()
from pathlib import Path
from pytest_ecdysis.core.harness import harness_id
from pytest_ecdysis_tau2.trial.runner import TrialSpec, run_trial
h = Path(sys.argv[2])
walls = []
for task_id in sys.argv[3].split(","):
    spec = TrialSpec(domain="airline", task_id=task_id, trial=0, run_id="bench", model="scripted",
                     user_model="scripted", harness_dir=h, harness_id=harness_id(h), base_url=sys.argv[1])
    t = time.perf_counter()
    r = run_trial(spec)
    walls.append((task_id, time.perf_counter() - t, r.reward, r.termination_reason))
print(json.dumps({"total": time.perf_counter() - t0, "walls": walls}))
"""


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802
        from pytest_ecdysis_tau2.tasks import suite

        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        role = self.headers.get("X-Ecdysis-Role")
        if role == "user":
            texts = [m for m in body["messages"] if m["role"] == "user"]
            message = {"content": "###STOP###" if len(texts) >= 2 else "Hi, I need help."}
        else:
            _, suite_name, task_id, _ = self.headers["X-Ecdysis-Trial"].split("/")
            task = suite.get_task(suite_name.removeprefix("tau2-"), task_id)
            gold = [a for a in task.evaluation_criteria.actions or [] if a.requestor == "assistant"]
            done = sum(1 for m in body["messages"] if m["role"] == "tool")
            if done < len(gold):
                a = gold[done]
                message = {
                    "content": None,
                    "tool_calls": [
                        {
                            "id": f"c{done}",
                            "type": "function",
                            "function": {"name": a.name, "arguments": json.dumps(a.arguments)},
                        }
                    ],
                }
            else:
                message = {"content": "Done. " + "; ".join(task.evaluation_criteria.communicate_info or [])}
        payload = json.dumps(
            {
                "id": "b",
                "object": "chat.completion",
                "created": 0,
                "model": "scripted",
                "choices": [
                    {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", **message}}
                ],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20, help="airline test tasks to run (default: all 20)")
    parser.add_argument("--repeats", type=int, default=3, help="start-up measurements (default: 3)")
    args = parser.parse_args()
    harness = REPO / "pytest_ecdysis_tau2" / "example_harness"
    from pytest_ecdysis_tau2.tasks import suite

    task_ids = list(suite.split_ids("airline", "test"))[: args.tasks]
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    env = dict(os.environ, OPENAI_API_KEY="unused")

    startups = [
        float(
            subprocess.run(
                [sys.executable, "-c", STARTUP.format(h=harness)],
                capture_output=True,
                text=True,
                check=True,
                cwd=REPO,
                env=env,
            ).stdout
        )
        for _ in range(args.repeats)
    ]
    print(
        f"worker start-up (imports: plugin, suite, tau2, runner, harness): median {statistics.median(startups):.2f} s "
        f"over {args.repeats} runs {[round(s, 2) for s in startups]}"
    )

    t = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", DIRECT, url, str(harness), ",".join(task_ids)],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
        env=env,
    )
    direct_total = time.perf_counter() - t
    data = json.loads(out.stdout.strip().splitlines()[-1])
    walls = [w for _, w, _, _ in data["walls"]]
    rewards = [r for *_, r, _ in data["walls"]]
    print(
        f"wall-clock per trial, airline test split ({len(walls)} tasks, scripted model, example harness): "
        f"mean {statistics.mean(walls):.2f} s, median {statistics.median(walls):.2f} s, first {walls[0]:.2f} s "
        f"(scorer start overlaps it); reward 1.0 on {sum(r == 1.0 for r in rewards)}/{len(rewards)}"
    )

    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "--pyargs",
                "pytest_ecdysis_tau2.test_airline",
                "-p",
                "no:xdist",
                "-q",
                "-p",
                "no:cacheprovider",
                "--ecdysis-model",
                "scripted",
                "--ecdysis-base-url",
                url,
                "--ecdysis-split",
                "test",
                "--ecdysis-tasks",
                ",".join(task_ids),
                "--ecdysis-run-dir",
                tmp,
            ],
            capture_output=True,
            text=True,
            cwd=tmp,
            env=env,
        )
        pytest_total = time.perf_counter() - t
    last = [
        line for line in proc.stdout.splitlines() if " in " in line and ("passed" in line or "failed" in line)
    ]
    print(
        f"pytest layer: {pytest_total:.2f} s for {len(task_ids)} trials ({last[-1].strip('= ') if last else proc.stdout[-300:]}) "
        f"vs {direct_total:.2f} s calling run_trial in a loop (fresh process each): "
        f"overhead {100 * (pytest_total - direct_total) / direct_total:+.1f} % (target < 5 %)"
    )
    server.shutdown()


if __name__ == "__main__":
    main()
