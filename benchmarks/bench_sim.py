"""Throughput of the simulated model: agent completions per second, server pinned to one core.

    python benchmarks/bench_sim.py [--requests 3000] [--knowledge tau2|toy] [--connections 1]

The server runs in its own process pinned to CPU 0 (`os.sched_setaffinity`); this process is the client,
pinned to another CPU when there is one, and speaks raw HTTP/1.1 with keep-alive (`http.client`), so the
figure is the server's, not the openai client's. Each simulated trial is a real conversation: the
client sends a system prompt of τ²'s size (the airline policy, about 8 kB), the history, and a canned
tool result for every tool call, until the model closes; then the next trial starts. A warm-up pass over
the tasks (knowledge computed, τ² imported) is not timed. Target: at least 500 completions/s.

Two figures: `completions_per_s` (wall clock: depends on what else the machine runs) and
`completions_per_server_cpu_s` (completions per CPU-second the server process used, from /proc: the
capacity of one core, independent of other load). The 1-minute load average is printed with them.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def knowledge(kind: str) -> tuple[dict, list[tuple[str, str]], str]:
    """(providers, [(suite, task_id)], system prompt)."""
    if kind == "toy":
        from sim_toy import ToyKnowledge

        return {"toy": ToyKnowledge()}, [("toy", "1"), ("toy", "2")], "policy " * 1200
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from pytest_ecdysis_tau2.knowledge.providers import providers
    from pytest_ecdysis_tau2.tasks.suite import domain_module, split_ids

    tasks = [("tau2-airline", t) for t in split_ids("airline", "test")]
    tasks += [("tau2-retail", t) for t in split_ids("retail", "test")]
    policy = domain_module("airline").get_environment().policy
    return providers(), tasks, policy


def serve(kind: str) -> None:
    """Server process: pin to CPU 0, serve, print the URL and the task list on stdout."""
    os.sched_setaffinity(0, {0})
    from pytest_ecdysis.sim.server import start_background

    providers, tasks, policy = knowledge(kind)
    for suite, task_id in tasks:  # warm: compute every task's knowledge before timing
        providers[suite].task(task_id)
    handle = start_background(knowledge=providers)
    print(json.dumps({"url": handle.url, "tasks": tasks, "policy_chars": len(policy)}), flush=True)
    sys.stdin.read()  # until the client closes our stdin
    handle.stop()


def conversation(conn: http.client.HTTPConnection, trial: str, system: str, limit: int) -> int:
    """One trial as a harness would run it; returns the number of agent completions."""
    messages: list[dict] = [
        {"role": "system", "content": system},
        {"role": "assistant", "content": "Hi! How can I help you today?"},
        {"role": "user", "content": "Hi, I need help with my booking."},
    ]
    headers = {"Content-Type": "application/json", "X-Ecdysis-Role": "agent", "X-Ecdysis-Trial": trial}
    for n in range(1, limit + 1):
        conn.request(
            "POST", "/v1/chat/completions", json.dumps({"model": "sim", "messages": messages}), headers
        )
        response = conn.getresponse()
        body = json.loads(response.read())
        if response.status != 200:
            raise SystemExit(f"HTTP {response.status}: {body}")
        message = body["choices"][0]["message"]
        messages.append(message)
        if message.get("tool_calls"):
            call = message["tool_calls"][0]
            messages.append(
                {"role": "tool", "tool_call_id": call["id"], "content": '{"status": "ok", "id": "X1"}'}
            )
        elif "anything else" in (message.get("content") or ""):
            return n
        else:
            messages.append({"role": "user", "content": "Yes, please go ahead."})
    return limit


def client_loop(url: str, tasks: list, policy: str, requests: int, prefix: str, out: list) -> None:
    host, port = url.replace("http://", "").split(":")
    conn = http.client.HTTPConnection(host, int(port))
    done, trial = 0, 0
    while done < requests:
        suite, task_id = tasks[trial % len(tasks)]
        done += conversation(conn, f"{prefix}/{suite}/{task_id}/{trial // len(tasks)}", policy, 40)
        trial += 1
    out.append((done, trial))
    conn.close()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=3000, help="timed agent completions (default 3000)")
    parser.add_argument("--knowledge", choices=("tau2", "toy"), default="tau2")
    parser.add_argument("--connections", type=int, default=1, help="concurrent keep-alive client connections")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.knowledge)
        return 0
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) > 1:
        os.sched_setaffinity(0, set(cpus[1:]))
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", "--knowledge", args.knowledge],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        info = json.loads(proc.stdout.readline())
        tasks, url = [tuple(t) for t in info["tasks"]], info["url"]
        policy = knowledge(args.knowledge)[2]
        warm: list = []
        client_loop(url, tasks, policy, len(tasks) * 3, "warm", warm)
        out: list = []
        per = args.requests // args.connections
        threads = [
            threading.Thread(target=client_loop, args=(url, tasks, policy, per, f"timed{i}", out))
            for i in range(args.connections)
        ]
        started = time.perf_counter()
        cpu_before = cpu_seconds(proc.pid)
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - started
        server_cpu_s = cpu_seconds(proc.pid) - cpu_before
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
    completions = sum(d for d, _ in out)
    result = {
        "completions": completions,
        "trials": sum(t for _, t in out),
        "seconds": round(elapsed, 3),
        "completions_per_s": round(completions / elapsed, 1),
        "server_cpu_s": round(server_cpu_s, 3),
        "completions_per_server_cpu_s": round(completions / server_cpu_s, 1) if server_cpu_s else None,
        "knowledge": args.knowledge,
        "system_prompt_chars": info["policy_chars"],
        "server_cpu": 0,
        "client_cpus": cpus[1:] or cpus,
        "connections": args.connections,
        "target_per_s": 500,
        "load_average_1min": round(os.getloadavg()[0], 2),
        "cpu_count": os.cpu_count(),
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
