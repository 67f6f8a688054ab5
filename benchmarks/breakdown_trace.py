"""Where a suite run's wall-clock goes: a pytest plugin that timestamps its phases, and the table it prints.

Loaded with `-p benchmarks.breakdown_trace` (by `bench_concurrency.py --breakdown`) while env
`ECDYSIS_BENCH_TRACE` names a file: every pytest process of the run (controller, xdist workers, and the
same in a validation sub-run, which keeps the session's `-p` options and environment) appends one JSON line
per event `{"t", "pid", "ppid", "role", "event", ...}` (`t`: Unix seconds). In the workers it also wraps
the suite's functions whose time it reports (the harness's fork server start, the scorer's start and each
score, each trial). Nothing of the product changes: the wrappers only time the calls they wrap, and they
are installed by this benchmark's plugin only.

`report(path)` prints, per pytest session (a controller and its workers), the phases in the order they
happen: interpreter and pytest start, plugin and conftest import and configure (the controller's includes
the simulated server start), xdist worker spawn, worker start, collection (the τ² import and the fork
server's start: `check_harness` runs at collection), trials (first start to last end; trial seconds; the
scorer's start and scoring seconds), teardown (end of the run loop to process exit, the controller's
evolution included); for an evolution's controller also each part of the loop (`EVOLUTION`: its start,
the trusted copy, each stage, each sub-run and each check of the protected files).

`steps(path)` prints, per worker, when its run loop and first case began, and per trial thread each
trial's steps (`STEPS`: τ²'s data, the openai clients, the harness connection and fork, each user-simulator
turn, the conversation) with the sums of its model calls by role (`x-ecdysis-role`) and of its waits on
the harness's wire: where a trial's wall-clock goes beside its chain of model calls. Every event carries
its thread's name. Functions an older revision lacks are skipped (`bench_concurrency.py --rev`).
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

ENV = "ECDYSIS_BENCH_TRACE"


def _role() -> str:
    return os.environ.get("PYTEST_XDIST_WORKER") or "controller"


def event(name: str, **extra: Any) -> None:
    """Append one event line to the trace file (a no-op without `ECDYSIS_BENCH_TRACE`)."""
    path = os.environ.get(ENV)
    if not path:
        return
    line = {
        "t": time.time(),
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "role": _role(),
        "event": name,
        "thread": threading.current_thread().name,
        **extra,
    }
    with open(path, "a") as f:
        f.write(json.dumps(line) + "\n")


def _started() -> float:
    with open(f"/proc/{os.getpid()}/stat") as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/stat") as f:
        boot = next(int(line.split()[1]) for line in f if line.startswith("btime"))
    return boot + ticks / os.sysconf("SC_CLK_TCK")


event("process_start", at=_started())
event("trace_imported")
atexit.register(lambda: event("exit"))


def _timed(owner: Any, name: str, label: str, fields: Any = None) -> None:
    original = getattr(owner, name, None)
    if original is None or getattr(original, "_traced", False):  # absent in an older revision (`--rev`)
        return

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        begun = time.time()
        try:
            return original(*args, **kwargs)
        finally:
            event(label, begun=begun, s=time.time() - begun, **(fields(*args, **kwargs) if fields else {}))

    wrapper._traced = True  # type: ignore[attr-defined]
    setattr(owner, name, wrapper)


def _install() -> None:
    from pytest_ecdysis_tau2.harness_process import agent_process, agent_wire

    _timed(agent_wire.AgentProcess, "_await_ready", "forkserver_start")
    _timed(agent_process, "check_harness", "check_harness")


def _install_trials() -> None:
    from pytest_ecdysis_tau2.scoring import scorer_client
    from pytest_ecdysis_tau2.trial import runner  # imported here as the first trial would (openai, httpx2)

    _timed(scorer_client.ScorerClient, "_start", "scorer_spawn")
    _timed(scorer_client.ScorerClient, "score", "score", lambda self, domain, task_id, *_: {"task": task_id})
    _timed(runner, "run_trial", "trial", lambda spec, *a, **k: {"task": spec.task_id, "trial": spec.trial})
    _install_steps()


#: a trial's steps the per-trial table shows, by (module, owner, name) -> label (`steps`)
STEPS = (
    ("pytest_ecdysis_tau2.trial.runner", None, "load_tau2", "τ² loaded"),
    ("pytest_ecdysis_tau2.scoring.scorer_client", "ScorerClient", "start", "scorer start"),
    ("pytest_ecdysis_tau2.trial.runner", None, "prepare_agent", "fork server ready"),
    ("pytest_ecdysis_tau2.tasks.suite", None, "get_task", "τ² task"),
    ("pytest_ecdysis_tau2.tasks.suite", None, "get_environment", "τ² environment"),
    ("pytest_ecdysis_tau2.trial.runner", None, "tool_params", "tool schema"),
    ("pytest_ecdysis_tau2.trial.runner", None, "make_client", "openai clients"),
    (
        "pytest_ecdysis_tau2.harness_process.agent_wire",
        "AgentProcess",
        "connect",
        "harness: check + domain (server lock)",
    ),
    (
        "pytest_ecdysis_tau2.harness_process.agent_wire",
        "AgentProcess",
        "warm_up",
        "harness: warm-up (check + domain)",
    ),
    (
        "pytest_ecdysis_tau2.harness_process.agent_wire",
        "TrialLink",
        "__init__",
        "harness: trial process forked",
    ),
    ("pytest_ecdysis_tau2.trial.runner", None, "build_agent", "harness agent built (all of it)"),
    ("pytest_ecdysis_tau2.trial.runner", None, "guard_sync", "guard sync"),
    ("pytest_ecdysis_tau2.trial.user", "Tau2User", "generate_next_message", "user simulator turn"),
    ("pytest_ecdysis_tau2.harness_process.agent_wire", "_Wire", "receive", "wire receive (waiting)"),
    ("pytest_ecdysis_tau2.scoring.scorer_client", "ScorerClient", "score", "scoring (lock included)"),
    ("httpx2", "HTTPTransport", "handle_request", "HTTP model call"),
)


def _install_steps() -> None:
    import importlib

    for module, owner, name, label in STEPS:
        mod = importlib.import_module(module)
        fields = (
            (lambda self, request, _l=label: {"part": _l, "who": request.headers.get("x-ecdysis-role", "?")})
            if name == "handle_request"
            else (lambda *a, _l=label, **k: {"part": _l})
        )
        _timed(getattr(mod, owner) if owner else mod, name, "step", fields)
    from pytest_ecdysis_tau2.tasks.tau2lib import load_tau2

    _timed(
        load_tau2().Orchestrator, "run", "step", lambda *a, **k: {"part": "orchestrator run (conversation)"}
    )


#: the evolution's parts the controller's table shows, by (module, owner, name) -> label
EVOLUTION = (
    ("pytest_ecdysis.evolve.state", "RunState", "load_or_start", "start: ledger, protected files' checksums"),
    ("pytest_ecdysis.evolve.runs", "TrustedRuns", "_trusted_tree", "trusted copy of the checkout"),
    ("pytest_ecdysis.evolve.loop", None, "diagnose_stage", "diagnosis"),
    ("pytest_ecdysis.evolve.loop", None, "edit_stage", "edit (editor call + guard + check)"),
    ("pytest_ecdysis.evolve.loop", None, "validate_stage", "validation"),
    ("pytest_ecdysis.evolve.loop", None, "accept_stage", "decision (confirmation, ablation, commit)"),
    ("pytest_ecdysis.evolve.loop", None, "score_test", "test split"),
    ("pytest_ecdysis.evolve.runs", "TrustedRuns", "subrun", "  sub-run (copy, pytest, read back)"),
    ("pytest_ecdysis.evolve.runs", "TrustedRuns", "check_integrity", "  protected files checked"),
)


def _install_evolution() -> None:
    import importlib

    for module, owner, name, label in EVOLUTION:
        mod = importlib.import_module(module)
        _timed(
            getattr(mod, owner) if owner else mod, name, "evo", lambda *a, _label=label, **k: {"part": _label}
        )


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    event("configure_begin")
    if (
        os.environ.get(ENV)
        and not hasattr(config, "workerinput")
        and config.getoption("ecdysis_evolve", False)
    ):
        _install_evolution()
    if os.environ.get(ENV) and (
        hasattr(config, "workerinput") or config.getoption("numprocesses", None) in (None, 0)
    ):
        config._ecdysis_trace_workers = True  # the process that runs trials
        _install()


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    event("configure_end")  # right after every plugin's pytest_configure (a historic hook cannot be wrapped)


@pytest.hookimpl(wrapper=True)
def pytest_collection(session: pytest.Session) -> Any:
    event("collection_begin")
    try:
        return (yield)
    finally:
        event("collection_end", items=len(session.items))
        if os.environ.get(ENV) and hasattr(session.config, "_ecdysis_trace_workers"):
            _install_trials()
            event("trials_traced")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logstart(nodeid: str, location: Any) -> None:
    event("logstart", node=nodeid)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> Any:
    event("runtestloop_begin")
    try:
        return (yield)
    finally:
        event("runtestloop_end")


def pytest_unconfigure(config: pytest.Config) -> None:
    event("unconfigure")


def report(path: Path) -> None:
    """Print the phases of every pytest session in the trace file (module docstring)."""
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    controllers = [x["pid"] for x in lines if x["role"] == "controller" and x["event"] == "process_start"]
    for pid in controllers:
        own = [x for x in lines if x["pid"] == pid]
        workers = sorted({x["pid"] for x in lines if x["ppid"] == pid and x["role"] != "controller"})
        _session(own, [[x for x in lines if x["pid"] == w] for w in workers])


def _first(events: list[dict], name: str, key: str = "t") -> float | None:
    return next((x.get(key, x["t"]) for x in events if x["event"] == name), None)


def _session(ctl: list[dict], workers: list[list[dict]]) -> None:
    t0 = _first(ctl, "process_start", "at")
    rows: list[tuple[str, float | None, float | None]] = []

    def span(label: str, a: float | None, b: float | None) -> None:
        rows.append((label, None if a is None else a - t0, None if a is None or b is None else b - a))

    span("controller: interpreter + pytest import (±1 s)", t0, _first(ctl, "trace_imported"))
    span(
        "controller: plugins, conftest, options",
        _first(ctl, "trace_imported"),
        _first(ctl, "configure_begin"),
    )
    span(
        "controller: configure (sim server start)",
        _first(ctl, "configure_begin"),
        _first(ctl, "configure_end"),
    )
    for events in workers:
        role = events[0]["role"]
        rows.append(
            (
                f"{role}: process started (±1 s: /proc start time)",
                _first(events, "process_start", "at") - t0,
                None,
            )
        )
        span(
            f"{role}: interpreter + pytest import (±1 s)",
            _first(events, "process_start", "at"),
            _first(events, "trace_imported"),
        )
        span(
            f"{role}: plugins, conftest, options",
            _first(events, "trace_imported"),
            _first(events, "configure_begin"),
        )
        span(f"{role}: configure", _first(events, "configure_begin"), _first(events, "configure_end"))
        span(
            f"{role}: collection (τ² import, fork server)",
            _first(events, "collection_begin"),
            _first(events, "collection_end"),
        )
        fork = [x for x in events if x["event"] == "forkserver_start"]
        if fork:
            span(
                f"{role}:   of which waiting for the fork server",
                fork[0]["begun"],
                fork[0]["begun"] + fork[0]["s"],
            )
        trials = [x for x in events if x["event"] == "trial"]
        if trials:
            a, b = min(x["begun"] for x in trials), max(x["begun"] + x["s"] for x in trials)
            span(f"{role}: collection end -> first trial", _first(events, "collection_end"), a)
            span(f"{role}: trials ({len(trials)}; {sum(x['s'] for x in trials):.1f} trial-s)", a, b)
        scores = [x for x in events if x["event"] == "score"]
        if scores:
            span(
                f"{role}:   first score (scorer start included)",
                scores[0]["begun"],
                scores[0]["begun"] + scores[0]["s"],
            )
            span(
                f"{role}:   scoring ({len(scores)} in turn, {sum(x['s'] for x in scores):.1f} s)",
                scores[0]["begun"],
                scores[-1]["begun"] + scores[-1]["s"],
            )
        span(
            f"{role}: last trial -> exit",
            max((x["begun"] + x["s"] for x in trials), default=None),
            _first(events, "exit"),
        )
    span(
        "controller: run loop (workers' whole life)",
        _first(ctl, "runtestloop_begin"),
        _first(ctl, "runtestloop_end"),
    )
    span(
        "controller: after the run loop -> exit (reports, evolution)",
        _first(ctl, "runtestloop_end"),
        _first(ctl, "exit"),
    )
    for x in sorted((x for x in ctl if x["event"] == "evo"), key=lambda x: x["begun"]):
        span(f"controller: evolution: {x['part']}", x["begun"], x["begun"] + x["s"])
    span("controller: whole process", t0, _first(ctl, "exit"))
    print(f"  {'phase':60} {'at s':>7} {'took s':>7}")
    for label, at, took in rows:
        print(
            f"  {label:60} {'' if at is None else f'{at:7.1f}':>7} {'' if took is None else f'{took:7.1f}':>7}"
        )


def steps(path: Path) -> None:
    """Print, per worker, each trial's steps (thread, start relative to the worker's collection end, took)
    and the model calls' seconds by role: where a trial's wall-clock goes inside the worker."""
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    for pid in sorted({x["pid"] for x in lines if x["role"] != "controller"}):
        own = [x for x in lines if x["pid"] == pid]
        t0 = _first(own, "collection_end")
        if t0 is None or not any(x["event"] == "trial" for x in own):
            continue
        print(f"{own[0]['role']} (pid {pid}), seconds from its collection end:")
        for name in ("trials_traced", "runtestloop_begin", "logstart"):
            at = _first(own, name)
            if at is not None:
                print(f"  {name:40} at {at - t0:7.1f}")
        by_thread: dict[str, list[dict]] = {}
        for x in own:
            if x["event"] in ("step", "trial"):
                by_thread.setdefault(x.get("thread", "?"), []).append(x)
        for thread, events in sorted(by_thread.items()):
            print(f"  thread {thread}:")
            sums: dict[str, list[float]] = {}
            for x in sorted(events, key=lambda x: x["begun"]):
                label = x.get("part") or f"trial {x.get('task')}-t{x.get('trial')}"
                if x.get("who"):
                    label += f" ({x['who']})"
                if x["event"] == "trial" or x["s"] >= 0.5 and "wire" not in label and "HTTP" not in label:
                    print(f"    {label:50} at {x['begun'] - t0:7.1f} took {x['s']:6.2f}")
                sums.setdefault(label, []).append(x["s"])
            for label, v in sorted(sums.items()):
                if len(v) > 1:
                    print(f"    sum {label:46} {len(v):4}x {sum(v):7.2f} s (max {max(v):.2f})")
