"""Memory of the harness's processes per trial in flight (one fork per trial).

    python benchmarks/bench_agent_memory.py [--trials 16] [--latency 2]

Runs `--trials` airline train trials at once in threads of this process (as `--ecdysis-concurrency`
does in a worker), the example harness in its processes, on the simulated model (not a real LLM) with a
fixed delay per completion so that the trials overlap. Samples every 0.2 s, from /proc/<pid>/smaps_rollup:
the fork server's and every trial process's proportional (PSS) and private (USS) memory, and this
process's RSS. Prints the peak of each, the per-trial figures (sum over trial processes / trials in
flight at that moment), and for comparison the same for one trial alone. Linux only.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]


def rollup(pid: int) -> tuple[int, int]:
    """(PSS, USS) in bytes of one process."""
    fields = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                fields[parts[0].rstrip(":")] = int(parts[1]) * 1024
    return fields.get("Pss", 0), fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0)


def status_peaks(pid: int) -> dict[str, int]:
    """VmPeak (address space), VmHWM (resident) and VmData (data segment) in bytes, and the CPU time used so
    far (`cpu_ms`) of one process: the figures the per-process limits (`--ecdysis-limits agent-memory`,
    `--ecdysis-limits agent-cpu`) are chosen from."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmPeak", "VmHWM", "VmData"):
                out[key] = int(rest.split()[0]) * 1024
    with open(f"/proc/{pid}/stat") as f:  # utime, stime (fields 14, 15, clock ticks) after the ")" of comm
        fields = f.read().rsplit(")", 1)[1].split()
    out["cpu_ms"] = (int(fields[11]) + int(fields[12])) * 1000 // os.sysconf("SC_CLK_TCK")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--latency", type=float, default=2.0)
    args = parser.parse_args()
    import faulthandler
    import signal

    faulthandler.register(signal.SIGUSR1)  # kill -USR1 <pid>: every thread's stack on stderr
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from pytest_ecdysis.core.harness import harness_id
    from pytest_ecdysis.sim.server import start_background
    from pytest_ecdysis_tau2.harness_process.agent_process import agent_process
    from pytest_ecdysis_tau2.tasks.suite import split_ids
    from pytest_ecdysis_tau2.trial.runner import TrialSpec, run_trial

    server = start_background(latency_s=args.latency, nonce="bench")
    harness = (ROOT / "pytest_ecdysis_tau2" / "example_harness").resolve()
    tasks = list(split_ids("airline", "train"))
    me = psutil.Process()

    def spec(n: int, run: str) -> TrialSpec:
        return TrialSpec(
            domain="airline",
            task_id=tasks[n % len(tasks)],
            trial=n // len(tasks),
            run_id=run,
            model="sim",
            user_model="sim",
            harness_dir=harness,
            harness_id=harness_id(harness),
            sim_url=server.url,
        )

    def measure(count: int, run: str) -> dict:
        peak = {
            "server_pss": 0,
            "forks": 0,
            "fork_pss": 0,
            "fork_uss": 0,
            "per_fork_pss": 0,
            "per_fork_uss": 0,
            "worker_rss": 0,
            "VmPeak": 0,
            "VmHWM": 0,
            "VmData": 0,
            "cpu_ms": 0,
            "server_VmPeak": 0,
        }
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                zygote = agent_process(harness).proc
                if zygote is not None:
                    try:
                        root = psutil.Process(zygote.pid)
                        tree = [root, *root.children(recursive=True)]  # bwrap first under the sandbox
                        server_pid = next(
                            (
                                p.pid
                                for p in tree
                                if "agent_child" in " ".join(p.cmdline()) and not p.name().startswith("bwrap")
                            ),
                            None,
                        )
                        forks = [p.pid for p in tree if p.pid != server_pid and p.ppid() == server_pid]
                        figures = [rollup(pid) for pid in forks]
                        for pid in forks:
                            for key, value in status_peaks(pid).items():
                                peak[key] = max(peak[key], value)
                        if server_pid:
                            peak["server_VmPeak"] = max(
                                peak["server_VmPeak"], status_peaks(server_pid)["VmPeak"]
                            )
                        peak["server_pss"] = max(
                            peak["server_pss"], rollup(server_pid)[0] if server_pid else 0
                        )
                        if figures:
                            pss, uss = sum(f[0] for f in figures), sum(f[1] for f in figures)
                            if len(figures) >= peak["forks"]:
                                peak.update(
                                    forks=len(figures),
                                    fork_pss=pss,
                                    fork_uss=uss,
                                    per_fork_pss=pss / len(figures),
                                    per_fork_uss=uss / len(figures),
                                )
                    except (psutil.Error, OSError, StopIteration):
                        pass
                peak["worker_rss"] = max(peak["worker_rss"], me.memory_info().rss)
                time.sleep(0.2)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        threads = [threading.Thread(target=run_trial, args=(spec(n, run),)) for n in range(count)]
        started = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        done.set()
        sampler.join()
        peak["wall_s"] = time.monotonic() - started
        return peak

    measure(1, "warm")  # the fork server, the scorer, τ²'s data: paid once per worker
    rss_before = me.memory_info().rss
    for count in (1, args.trials):
        p = measure(count, f"m{count}")
        mb = 2**20
        print(
            f"{count:>3} trial(s) at once ({time.strftime('%H:%M:%S')}, load {os.getloadavg()[0]:.1f}): "
            f"{p['forks']} trial processes at the peak, their PSS {p['fork_pss'] / mb:.0f} MB "
            f"({p['per_fork_pss'] / mb:.1f} MB each), USS {p['fork_uss'] / mb:.0f} MB "
            f"({p['per_fork_uss'] / mb:.1f} MB each); fork server PSS {p['server_pss'] / mb:.0f} MB; "
            f"this (worker) process RSS {p['worker_rss'] / mb:.0f} MB (after warm-up {rss_before / mb:.0f} MB); "
            f"wall {p['wall_s']:.0f} s",
            flush=True,
        )
        print(
            f"    peak of one trial process: address space (VmPeak) {p['VmPeak'] / mb:.0f} MB, resident (VmHWM) "
            f"{p['VmHWM'] / mb:.0f} MB, data (VmData) {p['VmData'] / mb:.0f} MB, CPU time {p['cpu_ms'] / 1000:.2f} s "
            f"(sampled, at least); fork server VmPeak "
            f"{p['server_VmPeak'] / mb:.0f} MB",
            flush=True,
        )
    server.stop()


if __name__ == "__main__":
    main()
