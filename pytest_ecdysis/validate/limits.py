"""Per-process bounds of harness code (`--ecdysis-limits agent-memory=MB,agent-cpu=S`), sandbox on or off.

The controller exports the values (`export`: `ECDYSIS_AGENT_MEMORY_MB`, `ECDYSIS_AGENT_CPU_S`) so workers
and validation sub-runs inherit them; the trusted trial process passes them to the harness's fork server
as arguments, and the server applies them with `setrlimit` (`apply`) before any harness code runs: the
address space (RLIMIT_AS) of the server and of every trial process forked from it, and the CPU time
(RLIMIT_CPU) of each trial process (its counter starts at zero at the fork) and of the server (on top of
what its start-up used, plus `SERVER_EXTRA_CPU_S`). Past the memory limit an allocation fails (`MemoryError` in Python); past the
CPU limit the kernel sends SIGXCPU, then SIGKILL `CPU_GRACE_S` later. Either ends the trial `agent_error`
with a reason naming the limit and its value (`exceeded`). Under bubblewrap the process has no
capability to raise its hard limits; without the sandbox a harness running as root could (the threat
model in docs/evolution.md says so). With `ECDYSIS_AGENT_PROCESS=0` (the harness in the trial process,
benchmarks only) there is no harness process to bound.

The defaults are far above what a τ² trial's harness process uses (docs/benchmarks.md, "Bounds"):
measured with `benchmarks/bench_agent_memory.py`. `protect_this_process` makes a trusted process
non-dumpable, so processes of the same (non-root) user cannot read its `/proc/<pid>/environ`.
This module must not import tau2, task suites or harness code.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Mapping
from dataclasses import dataclass

ENV_MEMORY = "ECDYSIS_AGENT_MEMORY_MB"
ENV_CPU = "ECDYSIS_AGENT_CPU_S"
#: Address space of one harness process, MB. A τ² trial's process peaks at 1310 MB of address space
#: (134 MB resident) on the example harness (docs/benchmarks.md, the sandbox); 4096 MB is 3.1x that.
DEFAULT_MEMORY_MB = 4096
#: CPU seconds of one trial's harness process; a τ² trial's used about 0.1 s (docs/benchmarks.md, issue
#: 27), and its wall-clock budget (`--ecdysis-limits trial-budget`) defaults to 900 s.
DEFAULT_CPU_S = 900
#: Seconds between SIGXCPU (the soft limit, which a harness may catch) and SIGKILL (the hard limit).
CPU_GRACE_S = 5
#: CPU seconds the fork server gets beyond `cpu_s` and its start-up: it also loads each domain's tools
#: (trusted, about a second each) and forks every trial, over a worker's whole session.
SERVER_EXTRA_CPU_S = 120


@dataclass(frozen=True)
class Limits:
    """The bounds in force; 0 means none."""

    memory_mb: int = DEFAULT_MEMORY_MB  #: address space (RLIMIT_AS), MB
    cpu_s: int = DEFAULT_CPU_S  #: CPU time (RLIMIT_CPU) per trial process, seconds

    def describe(self) -> str:
        """`"memory 4096 MB (--ecdysis-limits agent-memory), CPU time 900 s (--ecdysis-limits agent-cpu)"`."""
        mem = f"memory {self.memory_mb} MB" if self.memory_mb else "memory unlimited"
        cpu = f"CPU time {self.cpu_s} s" if self.cpu_s else "CPU time unlimited"
        return f"{mem} (--ecdysis-limits agent-memory), {cpu} (--ecdysis-limits agent-cpu)"


def from_env(env: Mapping[str, str] | None = None) -> Limits:
    """The limits the controller exported (defaults when it did not: a suite used without the plugin)."""
    environ = os.environ if env is None else env
    try:
        return Limits(
            int(environ.get(ENV_MEMORY, DEFAULT_MEMORY_MB)), int(environ.get(ENV_CPU, DEFAULT_CPU_S))
        )
    except ValueError:
        return Limits()


def export(memory_mb: int, cpu_s: int) -> None:
    os.environ[ENV_MEMORY] = str(int(memory_mb))
    os.environ[ENV_CPU] = str(int(cpu_s))


def apply(limits: Limits, *, server: bool) -> None:
    """Set this process's limits (soft and hard: it cannot raise them again without CAP_SYS_RESOURCE).
    `server`: the fork server, whose CPU limit comes on top of the CPU it used so far; a trial process
    (after the fork) gets `cpu_s` of its own. Linux and macOS; a limit the system refuses is skipped."""
    import resource

    def set_limit(which: int, soft: int, hard: int) -> None:
        _soft, current = resource.getrlimit(which)
        if current != resource.RLIM_INFINITY:
            soft, hard = min(soft, current), min(hard, current)
        try:
            resource.setrlimit(which, (soft, hard))
        except (ValueError, OSError):
            pass

    if limits.memory_mb:
        set_limit(resource.RLIMIT_AS, limits.memory_mb << 20, limits.memory_mb << 20)
    if limits.cpu_s:
        used = 0
        if server:
            usage = resource.getrusage(resource.RUSAGE_SELF)
            used = int(usage.ru_utime + usage.ru_stime) + 1 + SERVER_EXTRA_CPU_S
        set_limit(resource.RLIMIT_CPU, limits.cpu_s + used, limits.cpu_s + used + CPU_GRACE_S)


def exceeded(
    limits: Limits, *, exit_code: int | None = None, cpu_s: float | None = None, raised: str | None = None
) -> str | None:
    """The limit a harness process ran into, as the trial's reason (`"the harness process exceeded its
    CPU-time limit (--ecdysis-limits agent-cpu: 900 s, RLIMIT_CPU)"`), or None. `exit_code`: its exit status (negative: the
    signal); `cpu_s`: the CPU seconds it used; `raised`: the exception class it reported."""
    if limits.cpu_s and (exit_code == -signal.SIGXCPU or (cpu_s is not None and cpu_s >= limits.cpu_s)):
        return (
            f"the harness process exceeded its CPU-time limit (--ecdysis-limits agent-cpu: {limits.cpu_s} s, "
            "RLIMIT_CPU)"
        )
    if limits.memory_mb and raised == "MemoryError":
        return (
            "the harness process ran out of its memory limit (--ecdysis-limits agent-memory: "
            f"{limits.memory_mb} MB of address space, RLIMIT_AS)"
        )
    return None


def protect_this_process() -> None:
    """Make this (trusted) process non-dumpable (Linux `prctl(PR_SET_DUMPABLE, 0)`): its `/proc/<pid>/environ`,
    `mem` and `fd` are then readable only by root, not by the harness processes of the same user it starts
    (they are dumpable again after their `exec`). No-op elsewhere, and on failure."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except (OSError, AttributeError):
        pass
