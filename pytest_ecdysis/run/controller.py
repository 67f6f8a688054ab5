"""The controller's own parts of a session: its set-up at configure time and its trial collector.

`prepare(config, state)` runs, on the controller only, after the options were read: the run directory
must be writable (`check_run_dir`), the response cache, evolution's pre-flight and run lock, the gate's
pre-flight, the sandbox (`prepare_sandbox`) and the simulated models are checked, the endpoint is checked with one
call per model that is not `sim...` (`check_endpoint`, `endpoint.preflight`), and a simulated server is started when a
model is `sim...` and none is running (`ECDYSIS_SIM_URL`). Each check raises an `EcdysisError` naming the
fix (the plugin turns it into a usage error). `runs_no_test(config)` tells the sessions that run no trial.

`TrialCollector` (registered by `plugin.pytest_configure` on the controller only) keeps the collected
trial cases (`state.collected`, after every plugin's deselection), checks `--ecdysis-tasks` and the gate's
baseline against the collection before any trial runs (`selection.check_collected`), stores each
report's trial result (`state.trials`) and feeds `run.coverage` and the progress lines.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_ecdysis.core.config import EcdysisConfig
from pytest_ecdysis.core.errors import EcdysisError, UsageError
from pytest_ecdysis.endpoint.preflight import ENV_DONE as PREFLIGHT_DONE
from pytest_ecdysis.endpoint.preflight import models_to_check

if TYPE_CHECKING:
    from pytest_ecdysis.run.state import EcdysisState


def prepare(config: pytest.Config, state: EcdysisState) -> None:
    """The controller's checks and its simulated server (module docstring).

    Raises:
        EcdysisError: the first check that fails (UsageError, GitError, ...), naming the fix.
    """
    from pytest_ecdysis.run.state import ENV_SIM_URL

    cfg = state.cfg
    check_run_dir(cfg.run_dir)
    if cfg.evolve:
        from pytest_ecdysis.endpoint.response_cache import configure as configure_cache

        configure_cache(cfg, state.run_path.absolute(), os.environ)
    if cfg.evolve:
        from pytest_ecdysis.evolve.preflight import preflight

        preflight(cfg, state.harness_dir)
        from pytest_ecdysis.core.rundir import lock_run

        lock_run(state.run_path, f"--ecdysis-resume {cfg.resume}" if cfg.resume else f"run {state.run_id}")
    if cfg.gate:
        from pytest_ecdysis.gate.baseline import preflight as gate_preflight

        gate_preflight(cfg)
    prepare_sandbox(cfg, state)  # also for --collect-only: collection imports the harness in its process
    if cfg.uses_sim:
        from pytest_ecdysis.sim.profiles import check_models

        # a profile that cannot produce a failure says so before any trial
        state.messages.extend(
            check_models([cfg.model, cfg.user_model, cfg.diagnosis_model, *cfg.test_models])
        )
    if cfg.preflight == "off":
        os.environ[PREFLIGHT_DONE] = "1"  # nor do its validation sub-runs check
    elif not runs_no_test(config) and not os.environ.get(PREFLIGHT_DONE):
        check_endpoint(cfg, state)
    if not runs_no_test(config):
        start_limiter(cfg, state)
    if cfg.uses_sim and not state.sim_url and not runs_no_test(config):
        from pytest_ecdysis.sim.server import start_background

        state.sim_server = start_background(latency_s=cfg.sim_latency_s, nonce=cfg.sim_nonce)
        state.sim_url = state.sim_server.url
        os.environ[ENV_SIM_URL] = state.sim_url
        # the ground-truth credential: workers and sub-runs inherit it, harness processes never do
        os.environ["ECDYSIS_SIM_TOKEN"] = state.sim_server.token
        # printed at session start: the terminal reporter does not exist yet at tryfirst configure
        state.messages.append(f"ecdysis: simulated model (not a real LLM) serving at {state.sim_url}")


def check_endpoint(cfg: EcdysisConfig, state: EcdysisState) -> None:
    """The endpoint's pre-flight (`endpoint.preflight`): one call per configured model that is not `sim...`,
    with the installed suite's tool shape (`core.registry.preflight_request`; the pre-flight's own without).

    Passed: its lines (the cost, each model's wall-clock) are printed at session start and `PREFLIGHT_DONE`
    is set for the sub-runs. A configuration problem: `preflight.json` in the run directory (the only file
    written) and a UsageError naming what to change.

    Raises:
        UsageError: a model's check found a configuration problem (or timed out), or the suite's shape is
            not one (`endpoint.preflight.shape`).
    """
    from pytest_ecdysis.core.registry import preflight_request
    from pytest_ecdysis.core.rundir import write_json
    from pytest_ecdysis.endpoint.preflight import as_json, check_models, refusal, report, shape

    base_url = cfg.base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
    checks = check_models(
        models_to_check(cfg),
        base_url,
        os.environ.get("OPENAI_API_KEY") or "EMPTY",  # local servers (vLLM, Ollama) accept any key
        call_timeout_s=cfg.call_timeout_s,
        max_retries=cfg.max_retries,
        text_tool_calls=cfg.text_tool_calls,
        request=shape(preflight_request()),  # the suite's tool shape (a UsageError when it is not one)
    )
    said = refusal(checks)
    if said:
        write_json(state.run_path / "preflight.json", as_json(checks))  # redacted by write_json
        raise UsageError(said)
    state.messages.extend(report(checks))
    os.environ[PREFLIGHT_DONE] = "1"


def prepare_sandbox(cfg: EcdysisConfig, state: EcdysisState) -> None:
    """Decide `--ecdysis-sandbox` (auto, on, off) once, for this session's workers and sub-runs (they inherit
    the environment), and the per-process limits of harness code; say it in one line when harness code will
    run with the user's rights.

    Raises:
        UsageError: `on` and no sandbox can start here (naming the install command).
    """
    from pytest_ecdysis.validate import limits, pycache, sandbox, warm

    decision = sandbox.decide(cfg.sandbox)
    sandbox.export(decision)
    pycache.prepare(decision.on)  # the scorers' bytecode cache, only where harness code cannot write it
    # this session's runs (other runs' records included) covered too, beside what a parent already covers,
    # unless the run directory holds the harness or the suite (`--ecdysis-run-dir .`)
    runs = Path(cfg.run_dir).absolute()
    needed = [
        Path.cwd().absolute(),
        *([Path(state.harness_dir).absolute()] if getattr(state, "harness_dir", None) else []),
    ]
    hide = [*map(str, sandbox.hidden_paths())]
    # the warm services' sockets (a sub-run's is its evolution's, already listed): out of harness processes'
    # and the editor's reach
    warm_dir = warm.prepare(decision.on)
    if warm_dir is not None:
        hide.append(str(warm_dir))
    if not any(p.is_relative_to(runs) for p in needed):
        hide.append(str(runs))
    from pytest_ecdysis.core.registry import answer_keys

    hide += answer_keys()  # the suites' gold data: covered for the editor as for harness processes
    os.environ[sandbox.ENV_HIDE] = os.pathsep.join(dict.fromkeys(hide))
    limits.export(cfg.agent_memory_mb, cfg.agent_cpu_s)
    state.sandbox_verdict = sandbox.verdict_line()
    limits.protect_this_process()  # its environment (keys) unreadable by same-user processes it starts
    if (
        not decision.on and decision.mode == "auto"
    ):  # printed at session start (the reporter does not exist yet)
        state.messages.append("ecdysis: " + sandbox.status_line())


def start_limiter(cfg: EcdysisConfig, state: EcdysisState) -> None:
    """The session tree's one limiter of model calls (`endpoint.limiter_service`), started by the top
    controller when `--ecdysis-concurrency auto` or a rate cap is given; a sub-run keeps the one it inherits
    (`ECDYSIS_LIMITER`). Its directory is covered by the sandbox; its state feeds the progress lines
    (how many calls are in flight and what limits them; the stall line once)."""
    from pytest_ecdysis.endpoint import limiter_service
    from pytest_ecdysis.endpoint.limiter import ENV_LIMITER, Settings, status_text
    from pytest_ecdysis.validate import sandbox

    if os.environ.get(ENV_LIMITER):
        return
    if not (cfg.concurrency_auto or cfg.max_rps or cfg.max_tpm):
        return
    settings = Settings(
        fixed=not cfg.concurrency_auto,
        max_rps=cfg.max_rps,
        max_tpm=cfg.max_tpm,
        stall_after_s=cfg.trial_budget_s,
    )
    service = state.limiter = limiter_service.start(settings)
    hidden = [p for p in os.environ.get(sandbox.ENV_HIDE, "").split(os.pathsep) if p]
    os.environ[sandbox.ENV_HIDE] = os.pathsep.join([*hidden, str(service.directory)])

    def extra() -> str | None:
        status = service.limiter.status()
        if status.get("stalled"):
            return "no trial is started: the endpoint throttled every call for longer than a trial's budget"
        return status_text(status)

    state.progress.extra = extra
    how = (
        "adaptive (starts at 4 calls in flight)"
        if cfg.concurrency_auto
        else "pinned by --ecdysis-concurrency"
    )
    caps = ", ".join(
        f"{v:g} {unit}" for v, unit in ((cfg.max_rps, "calls/s"), (cfg.max_tpm, "tokens/min")) if v
    )
    state.messages.append(
        f"ecdysis: model calls of the whole session share one limit, {how}"
        + (f", capped at {caps}" if caps else "")
    )


def runs_no_test(config: pytest.Config) -> bool:
    """`--collect-only`, `--setup-plan`, `--fixtures`, `--fixtures-per-test`, `--markers`, `--help`: no trial
    will run, so no simulated server is started (and, for the first two, nothing is written)."""
    opt = config.option
    return any(
        getattr(opt, name, False)
        for name in ("collectonly", "setupplan", "showfixtures", "show_fixtures_per_test", "markers", "help")
    )


def check_run_dir(run_dir: Path) -> None:
    """Configure-time check that runs can be written under `run_dir` (creates nothing): the nearest
    existing ancestor must be a writable directory, so a bad path fails before any trial runs.

    Raises:
        UsageError: `run_dir` (or an ancestor) is a file, or not writable.
    """
    path = run_dir.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    if not path.is_dir() or not os.access(path, os.W_OK | os.X_OK):
        problem = "is not a directory" if not path.is_dir() else "is not writable"
        raise UsageError(
            f"--ecdysis-run-dir {run_dir}: {path} {problem}; pass a writable --ecdysis-run-dir "
            "(or ini ecdysis_run_dir)"
        )


class TrialCollector:
    """Controller-side plugin object: remembers collected trial cases and the results their reports carry."""

    def __init__(self, state: EcdysisState, config: pytest.Config | None = None) -> None:
        self.state = state
        self.config = config
        self.checked = False
        self.before_deselection: list[str] | None = None

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        # before -k, -m and pytest-split (trylast) deselect: --ecdysis-tasks ids a split gave another shard
        self.before_deselection = [i.nodeid for i in items]

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        # after every plugin's deselection (-k, -m, suites' own filters): the cases that will run
        self.state.collected = [i.nodeid for i in session.items if i.get_closest_marker("ecdysis_trial")]
        self.check_selection([i.nodeid for i in session.items], self.before_deselection)
        self.state.progress.collected(len(self.state.collected))

    def check_selection(self, nodeids: list[str], before_deselection: list[str] | None = None) -> None:
        """--ecdysis-tasks and the gate's baseline against what was collected, before any trial runs."""
        cfg = self.state.cfg
        if self.checked or not (cfg.tasks or cfg.gate):
            return
        self.checked = True
        from pytest_ecdysis.gate.baseline import load_baseline
        from pytest_ecdysis.run.selection import check_collected

        try:
            check_collected(
                cfg, nodeids, load_baseline(cfg.baseline) if cfg.gate else None, before_deselection
            )
        except EcdysisError as exc:
            raise pytest.UsageError(str(exc)) from None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        data = getattr(report, "ecdysis_trial", None)
        if data is not None:
            self.state.trials[report.nodeid] = data
        from pytest_ecdysis.run.coverage import note_report

        note_report(self.state, report)
        if self.state.limiter is not None and (stalled := self.state.limiter.stall_once()):
            reporter = self.config.pluginmanager.get_plugin("terminalreporter") if self.config else None
            if reporter is not None:
                if getattr(reporter._tw, "width_of_current_line", 0):
                    reporter._tw.line()  # after the cases' progress letters: a line of its own
                reporter.write_line(f"ecdysis: {stalled}")
        if not self.state.no_trials:  # `--setup-plan` reports every case without running it: write nothing
            self.state.progress.report(report)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """An xdist worker went down; with an error it crashed (named at the end, `coverage.crash_problems`)."""
        from pytest_ecdysis.run.coverage import note_worker_down

        note_worker_down(self.state, str(getattr(getattr(node, "gateway", None), "id", "gw?")), error)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        """Under xdist the controller collects nothing: learn the collected ids from the workers."""
        from pytest_ecdysis.run.coverage import note_collection

        note_collection(self.state, ids)
        first = not self.checked  # every worker collects the same: the first one decides
        self.check_selection(ids)
        if first:
            from pytest_ecdysis.run.selection import classify

            self.state.progress.collected(sum(map(len, classify(ids).cases.values())) or None, guess=len(ids))
