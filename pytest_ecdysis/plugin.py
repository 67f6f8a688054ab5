"""The pytest plugin: options, configure, fixtures and the hooks that route trial results.

Thin by design (STYLE.md 1): every stage of the pipeline is a plain module. What happens here:

- `pytest_configure`: read and check options (`config.read_config`), resolve the harness, on the
  controller pick a run id, start the simulated model when a model is `sim...`, run pre-flight checks.
- `pytest_runtest_makereport`: copy the trial result a suite recorded with `record_trial` onto the
  report as `report.ecdysis_trial` (JSON-safe builtins, which xdist can serialise).
- controller only (`not hasattr(config, "workerinput")`): the checks before any trial and the simulated
  server (`controller.prepare`), collect trial results from reports (`controller.TrialCollector`), and
  after the run loop write the run directory, apply the gate, run evolution (`session`).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from pytest_ecdysis.core.config import read_config, unset_empty_env
from pytest_ecdysis.core.errors import EcdysisError, UsageError
from pytest_ecdysis.core.harness import harness_id, resolve_harness
from pytest_ecdysis.core.options import add_options
from pytest_ecdysis.core.registry import register_pytest_plugins
from pytest_ecdysis.run.controller import TrialCollector, prepare, runs_no_test
from pytest_ecdysis.run.state import ENV_RUN_ID, ENV_SESSION_PID, ENV_SIM_URL, EcdysisState, new_run_id

CONFIG_KEY = pytest.StashKey["EcdysisState"]()
TRIAL_KEY = pytest.StashKey[dict]()


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "ecdysis_trial: a trial of a task suite (task x trial)")
    unset_empty_env()  # an empty OPENAI_BASE_URL (an unset CI secret) means unset, here and in every child
    try:
        register_pytest_plugins(
            config.pluginmanager
        )  # strategies a conftest.py defines (`ecdysis_strategies`)
        cfg = read_config(config)
        harness_dir = resolve_harness(cfg.harness, cfg.rootdir)
        from pytest_ecdysis.run.xdist_schedule import check_dist

        check_dist(config, cfg.concurrency, "auto" if cfg.concurrency_auto else None)
    except EcdysisError as exc:
        raise pytest.UsageError(str(exc)) from None
    is_controller = not hasattr(config, "workerinput")
    run_id = os.environ.get(ENV_RUN_ID) if not is_controller else None
    if is_controller:
        if os.environ.get(ENV_SESSION_PID, str(os.getpid())) != str(os.getpid()):
            # nested in another session: its run id and simulated server are that session's, never this one's
            # (sharing them wrote this session's files into its run directory and continued its conversations)
            from pytest_ecdysis.endpoint.preflight import ENV_DONE as PREFLIGHT_DONE
            from pytest_ecdysis.validate import pycache, warm

            for name in (
                PREFLIGHT_DONE,  # its endpoint check was of its own models, not this session's
                ENV_RUN_ID,
                ENV_SIM_URL,
                pycache.ENV_DIR,
                pycache.ENV_WRITE,
                warm.ENV_DIR,
                warm.ENV_SUBRUN,
                "ECDYSIS_LIMITER",  # ... and its limiter of model calls (`endpoint.limiter_service`)
            ):
                os.environ.pop(name, None)  # ... its scorers' bytecode cache and warm services (`validate`)
        run_id = cfg.resume or os.environ.get(ENV_RUN_ID) or new_run_id()
        os.environ[ENV_RUN_ID] = run_id  # inherited by xdist workers, which start after configure
        os.environ[ENV_SESSION_PID] = str(os.getpid())
    state = EcdysisState(
        cfg=cfg,
        harness_dir=harness_dir,
        harness_id=harness_id(harness_dir),
        run_id=run_id or "unknown",
        is_controller=is_controller,
        sim_url=os.environ.get(ENV_SIM_URL),
    )
    config.stash[CONFIG_KEY] = state
    if not is_controller:
        return
    from pytest_ecdysis.report.progress import SessionProgress
    from pytest_ecdysis.report.verdict import VerdictPrinter

    state.progress = SessionProgress(state.run_path, cfg.progress_s)
    state.no_trials = runs_no_test(config)
    config.pluginmanager.register(TrialCollector(state, config), "ecdysis-trial-collector")
    config.pluginmanager.register(VerdictPrinter(state), "ecdysis-verdict")
    from pytest_ecdysis.run.budget_check import register as register_budget_check

    register_budget_check(config, state)  # --ecdysis-max-cost/-tokens below one starting run: usage error
    try:
        prepare(config, state)
    except EcdysisError as exc:
        raise pytest.UsageError(str(exc)) from None


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With `--ecdysis-concurrency C > 1` each worker gets a fixed share of the cases (`xdist_schedule`)."""
    state = config.stash.get(CONFIG_KEY, None)
    if state is None or state.cfg.concurrency <= 1:
        return None
    from pytest_ecdysis.run.xdist_schedule import make_scheduler

    return make_scheduler(config, log)


def pytest_sessionstart(session: pytest.Session) -> None:
    state = session.config.stash.get(CONFIG_KEY, None)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if state is not None and state.is_controller and reporter is not None:
        for line in state.messages:
            reporter.write_line(line)


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(CONFIG_KEY, None)
    if state is not None and state.is_controller:
        from pytest_ecdysis.validate import warm

        warm.stop()  # the warm services this session started (`validate.warm`); none in a sub-run
        if state.limiter is not None:
            from pytest_ecdysis.endpoint.limiter_service import stop

            stop(state.limiter)
    if state is not None and state.sim_server is not None:
        state.sim_server.stop()
        if os.environ.get(ENV_SIM_URL) == state.sim_url:
            del os.environ[ENV_SIM_URL]


def get_state(config: pytest.Config) -> EcdysisState:
    return config.stash[CONFIG_KEY]


def record_trial(item: pytest.Item, result: Any) -> None:
    """Called by a suite's test with its `TrialResult` (or its JSON dict) for this case."""
    data = result.model_dump(mode="json") if hasattr(result, "model_dump") else dict(result)
    item.stash[TRIAL_KEY] = data


@pytest.fixture
def ecdysis(request: pytest.FixtureRequest) -> EcdysisState:
    """The session's resolved options, harness and run id (read-only use)."""
    return get_state(request.config)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    report = yield
    data = item.stash.get(TRIAL_KEY, None)
    if data is not None and (
        report.when == "call" or (report.when == "setup" and report.outcome != "passed")
    ):
        from pytest_ecdysis.run.coverage import json_safe_trial

        report.ecdysis_trial = json_safe_trial(data, item.nodeid)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtestloop(session: pytest.Session) -> Any:
    """After the run loop: `session.finish` writes the run, also when pytest stopped early (`-x`,
    `--maxfail`, Ctrl-C, SIGTERM, `pytest.exit()`: what ran is written, the rest named as not run, the stop
    re-raised so the exit status stays pytest's); nothing for `--collect-only` or `--setup-plan`."""
    state = session.config.stash.get(CONFIG_KEY, None)
    if state is None or not state.is_controller or runs_no_test(session.config):
        return (yield)
    from pytest_ecdysis.run.session import sigterm_as_interrupt

    with sigterm_as_interrupt():  # SIGTERM stops the trials and the evolution as Ctrl-C does
        try:
            with _progress_say(session, state) as say, state.progress.ticker(say):  # lines while trials run
                result = yield
        except (session.Failed, session.Interrupted, KeyboardInterrupt, pytest.exit.Exception) as exc:
            state.progress.close()
            _finish(session, state, stopped=str(exc) or type(exc).__name__)
            raise
        state.progress.close()
        _finish(session, state, stopped=None)  # finish() writes nothing for a session without trials
    return result


@contextlib.contextmanager
def _progress_say(session: pytest.Session, state: EcdysisState) -> Iterator[Callable[[str], None]]:
    """How the suite's progress lines are written: `ecdysis [elapsed s] text` on the terminal, said when due
    also when the output is a pipe (CI logs, `| tee`).

    The ticker's thread says its lines while the main thread may be running a test (no xdist) and so
    switching pytest's output capture on and off around it; suspending capture from the thread as well
    races with that (pytest's `global_and_fixture_disabled` resumes capture whether or not the main thread
    had it on), and a line then landed in a test's captured output or, printed at the session's end, out of
    order. So the thread never touches capture: it writes to a duplicate of the terminal's file descriptor,
    taken here, in the main thread, while capture is suspended (pytest only captures around collection and
    each test phase). A terminal without a descriptor (an in-process pytester run) is not redirected by fd
    capture either, and is written through the terminal reporter."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    fd: int | None = None
    if reporter is not None:
        try:
            sys.stdout.flush()
            fd = os.dup(sys.stdout.fileno())
        except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError and ValueError
            fd = None

    closed = False

    def say(text: str) -> None:
        if reporter is None or closed:
            return
        line = f"ecdysis [{time.time() - state.started:7.1f} s] {text}"
        if fd is None:
            reporter.write_line(line)
            reporter._tw.flush()
            return
        newline = "\n" if reporter._tw.width_of_current_line else ""  # after the progress dots of a test file
        os.write(fd, (newline + line + "\n").encode("utf-8", "replace"))

    try:
        yield say
    finally:
        closed = True  # a ticker thread still running past its join writes nothing to a reused descriptor
        if fd is not None:
            os.close(fd)


def _finish(session: pytest.Session, state: EcdysisState, stopped: str | None) -> None:
    from pytest_ecdysis.run.session import finish

    try:
        finish(session, state, stopped=stopped)
    except UsageError as exc:
        raise pytest.UsageError(str(exc)) from None


def write_html_page(state: EcdysisState) -> None:
    """ini `ecdysis_html = FILE`: the run's page (`report.html`), after evolution, also when interrupted
    (the page then says so and how to resume); a failure to write it is a run problem, not an exception."""
    from pytest_ecdysis.report.html import write_html

    outcome = state.outcome
    if outcome.run_path is None:
        outcome.problems.append(
            f"ecdysis_html: {state.cfg.html} not written, the run directory could not be written"
        )
        return
    try:
        state.html_path, _ = write_html(outcome.run_path, state.cfg.html)
    except EcdysisError as exc:
        outcome.problems.append(str(exc))


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    state = session.config.stash.get(CONFIG_KEY, None)
    if state is not None and state.is_controller and state.outcome is not None:
        from pytest_ecdysis.run.session import exit_status

        if state.cfg.html is not None:
            write_html_page(state)
        status = exit_status(state, int(exitstatus))
        if status is not None:
            session.exitstatus = status


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    state = config.stash.get(CONFIG_KEY, None)
    if state is not None and state.is_controller and state.outcome is not None:
        from pytest_ecdysis.run.session import terminal_summary

        terminal_summary(terminalreporter, state)
        if state.html_path is not None:
            terminalreporter.write_line(f"html report: {state.html_path}")
