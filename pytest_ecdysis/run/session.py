"""End of a run on the controller: coverage check, run directory, baseline, gate, evolution hand-off.

The plugin calls, on the controller only:

- `note_collection(state, ids)` for every xdist worker's collection (the controller collects nothing
  under xdist) and `note_report(state, report)` for every test report;
- `finish(session, state)` after the run loop: turn `state.trials` (nodeid -> TrialResult JSON) into the
  run directory `<run-dir>/<run-id>/` (`summary.json`, `trials.jsonl`, `failures.jsonl`, `groups.json`,
  `junit.xml`; docs/records.md), name every collected case that never reported (a crashed worker, a report
  xdist could not serialise), then save the baseline, compute the gate verdict, run evolution;
- `exit_status(state, exitstatus)` in `pytest_sessionfinish`: the gate's verdict is the exit status;
- `terminal_summary(terminalreporter, state)`: the `ecdysis` section.

A session that collected no trial case and was asked for no gate or baseline writes nothing: the plugin
stays out of the way of ordinary test runs.

The parts: `run.coverage` (what was collected and reported), `run.files` (the figures and the files of
the run directory); this module decides what the end of the run does with them (callers import the
parts' names from the parts).
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_ecdysis.core import metrics, safetext
from pytest_ecdysis.core.config import is_sim_model
from pytest_ecdysis.core.errors import EcdysisError, RunDirError
from pytest_ecdysis.core.records import SCHEMA_VERSION
from pytest_ecdysis.gate import baseline as gate
from pytest_ecdysis.git import env as gitenv
from pytest_ecdysis.report import summary as report
from pytest_ecdysis.run.coverage import (
    _name,
    coverage,
    crash_problems,
    expected_cases,
)
from pytest_ecdysis.run.files import _parse_trials, aggregate, write_run_dir, write_summary
from pytest_ecdysis.run.state import EcdysisState


@dataclass
class RunOutcome:
    """What `finish` did; kept in `state.outcome` for the exit status and the terminal summary."""

    summary: dict[str, Any]
    groups: list[dict[str, Any]]
    missing: list[str]
    problems: list[str]
    run_path: Path | None  # None when the run directory could not be written
    not_run: list[str] = field(default_factory=list)  # cases pytest never ran because it stopped early
    stopped: str | None = None  # why pytest stopped early (`-x`, `--maxfail`, Ctrl-C), None when it did not
    gate: gate.GateVerdict | None = None
    baseline_written: Path | None = None
    evolution: Any = None
    evolution_error: str | None = None


def finish(session: Any, state: EcdysisState, stopped: str | None = None) -> RunOutcome | None:
    """Aggregate the run, write its directory, then baseline / gate / evolution as configured.

    Stores and returns a `RunOutcome` (None for a session with no trial case and no gate or baseline).
    Problems with the run (missing cases, unwritable directory, invalid results) become messages in
    `outcome.problems`, never exceptions; missing cases also count as failed tests.

    `stopped` (pytest stopped early: `-x`, `--maxfail`, Ctrl-C; the reason) writes what ran: cases that
    never reported are `not_run` (not missing, not failed), no baseline is saved, evolution does not start,
    and a gate counts them as missing (an incomplete run cannot pass). None when no trial ran at all.
    """
    cfg = state.cfg
    problems: list[str] = []
    trials = _parse_trials(state.trials, problems)  # invalid results are named, then counted as missing
    harness = run_harness_id(session.config, state, trials)
    for t in trials:
        t.harness_id = t.harness_id or harness or ""
    expected = expected_cases(state)
    shard = _shard_of(session.config)  # an empty shard (pytest-split gave it no case) is a shard all the same
    if not expected and not trials and not (cfg.gate or cfg.save_baseline or shard):
        return None
    cov = coverage(state)
    missing = sorted(expected - {t.nodeid for t in trials})
    not_run: list[str] = []
    if stopped:
        if not state.trials:
            return None  # stopped before any trial reported (e.g. collection errors): nothing ran to write
        not_run = [m for m in missing if m not in state.trials]  # no result at all: never ran
        missing = [m for m in missing if m in state.trials]  # reported an invalid result
    if missing:
        problems.append(
            f"{len(missing)} collected case(s) never reported a valid trial result: {_name(missing)}"
        )
        problems += crash_problems(cov, collected=bool(expected), reported=bool(state.trials))
        if not state.trials and cov.xdist_ids and not cov.crashed and not cov.workers_down:
            problems.append(
                "no case reported at all: a report attribute that xdist cannot serialise makes it "
                "print 'no tests ran' and exit 0; trial results must be JSON-safe "
                "(record_trial(item, TrialResult(...)))"
            )
        session.testsfailed += len(missing)
    if not expected and not trials and not shard and cov.workers_down and not missing:
        problems += crash_problems(cov, collected=False, reported=False)
    elif not expected and not trials and not shard:
        problems.append(
            "no trial case was collected (no test marked ecdysis_trial): check the test paths "
            "and --ecdysis-tasks"
        )

    per_task = max([cfg.trials, *Counter(metrics.task_key(t) for t in trials).values()])
    from pytest_ecdysis.evidence.suspects import suspect_against_baseline

    suspects = (
        suspect_against_baseline(trials, gate.load_baseline(cfg.baseline), cfg.threshold, harness)
        if cfg.gate
        else {}
    )  # the same failure under the baseline's harness and this one
    summary, tri, groups = aggregate(
        trials,
        threshold=cfg.threshold,
        trials_per_task=per_task,
        model=cfg.model,
        prices=metrics.load_prices(cfg.rootdir),
        user_model=cfg.user_model,
        suspects=suspects,
    )
    summary = {
        "schema_version": SCHEMA_VERSION,
        "run_id": state.run_id,
        "suite": summary.pop("suite"),
        "by_suite": summary.pop("by_suite"),
        "split": cfg.split,
        "trials": cfg.trials,
        "threshold": cfg.threshold,
        **summary,
        "wall_s": round(time.time() - state.started, 3),
        "harness_id": harness,
        "model": cfg.model,
        "user_model": cfg.user_model,
        "diagnosis_model": cfg.diagnosis_model,
        "limits": cfg.limits(),
        "n_collected": len(expected),
        "missing": missing,
        "stopped": stopped,
        "not_run": not_run,
        "problems": problems,
        "worker_crashes": list(cov.workers_down),
    }
    if is_sim_model(cfg.model):  # a sim baseline is only comparable with runs of the same nonce (gate)
        summary["sim_nonce"] = cfg.fixed_sim_nonce
    summary["selection"] = {
        "args": sorted(str(a) for a in session.config.args),
        "tasks": list(cfg.tasks) if cfg.tasks else None,
    }
    if shard:
        summary["shard"] = shard  # `ecdysis merge` checks that every group of the split is there
    outcome = RunOutcome(
        summary=summary,
        groups=[g.model_dump(mode="json") for g in groups],
        missing=missing,
        problems=problems,
        run_path=state.run_path,
        not_run=not_run,
        stopped=stopped,
    )
    state.outcome = outcome
    try:
        write_run_dir(state.run_path, summary, trials, tri, groups, missing, cfg.threshold, not_run)
    except RunDirError as exc:
        outcome.run_path = None
        problems.append(str(exc))

    if cfg.save_baseline:
        if why := gate.incomplete(summary):
            fix = (
                "rerun once the worker crash named above is fixed"
                if cov.workers_down
                else "rerun when the endpoint is healthy"
            )
            problems.append(
                f"baseline not written to {cfg.save_baseline}: the run is incomplete ({why}); {fix}"
            )
        else:
            try:
                outcome.baseline_written = gate.save_baseline(summary, cfg.save_baseline)
            except RunDirError as exc:
                problems.append(str(exc))
    if cfg.gate:
        baseline = gate.load_baseline(cfg.baseline)  # checked at configure time; UsageError if it vanished
        outcome.gate = gate.verdict(
            summary,
            baseline,
            tolerance=cfg.gate_tolerance,
            max_regressions=cfg.gate_max_regressions,
            missing=missing + not_run,
            max_cost_rise=getattr(cfg, "gate_max_cost_rise", None),
            n_collected=len(expected),
            baseline_path=str(cfg.baseline),
            rule=cfg.gate_rule,  # `--ecdysis-gate-rule`: the gate's own, not the evolution's --ecdysis-accept
            method=cfg.accept_method,
            level=cfg.accept_level,
            margin=cfg.gate_margin,
            pass_undecided=cfg.gate_pass_undecided,
        )
    summary["gate"] = outcome.gate.as_dict() if outcome.gate else None
    if outcome.run_path is not None and cfg.gate:
        try:
            write_summary(outcome.run_path, summary)
        except OSError as exc:
            problems.append(
                f"the gate verdict could not be added to {outcome.run_path / 'summary.json'}: {exc}"
            )
    try:
        report.append_step_summary(
            report.summary_markdown(summary, outcome.groups, summary["gate"], problems)
        )
    except (OSError, ValueError) as exc:
        problems.append(f"cannot append to $GITHUB_STEP_SUMMARY: {exc}")

    if cfg.evolve and stopped:
        outcome.evolution_error = (
            f"--ecdysis-evolve: not started, pytest stopped early ({stopped}); the run "
            "is written, rerun without -x/--maxfail to evolve"
        )
    elif cfg.evolve:
        _evolve(session, state, outcome)
    return outcome


def run_harness_id(config: Any, state: EcdysisState, trials: list[Any]) -> str | None:
    """The harness the run names (`summary.json` `harness_id`): the session's when a trial recorded a harness
    id, `--ecdysis-harness` (ini `ecdysis_harness`) was given, evolution runs or no valid trial came back
    (as before: shards of one run keep one id for `ecdysis merge`); None when trials came back and none of
    that holds, e.g. a suite of one's own that runs no harness (docs/own-suite.md): the default
    `example_harness` was no part of that run, and reports then say "harness none"."""
    if not trials or any(t.harness_id for t in trials) or state.cfg.evolve:
        return state.harness_id
    given = config.getoption("ecdysis_harness", None) or config.getini("ecdysis_harness")
    return state.harness_id if given else None


def _shard_of(config: Any) -> dict[str, int] | None:
    """`{"splits": N, "group": i}` when pytest-split ran this session as one shard (`--splits N --group i`)."""
    splits, group = config.getoption("splits", None), config.getoption("group", None)
    if splits and group:
        return {"splits": int(splits), "group": int(group)}
    return None


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM (what `timeout`, a CI cancel or a container stop sends) raises
    KeyboardInterrupt in the main thread, so it stops the run like Ctrl-C: the trials that ran are written,
    a validation sub-run is ended (its process group), temporary worktrees are removed, the evolution's
    state is saved and its resume command printed. The previous handler is restored.
    Outside the main thread (where handlers cannot be set) it does nothing."""

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"{signal.Signals(signum).name} received")

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _evolve(session: Any, state: EcdysisState, outcome: RunOutcome) -> None:
    try:
        from pytest_ecdysis.evolve.loop import run_evolution
    except ImportError as exc:
        outcome.evolution_error = (
            f"--ecdysis-evolve: the evolution loop is not available ({exc}); "
            "pytest_ecdysis.evolve.loop.run_evolution is missing from this installation"
        )
        return
    if outcome.run_path is None:
        outcome.evolution_error = "--ecdysis-evolve: not run, the run directory could not be written"
        return
    # validation sub-runs inherit the environment: without this each would append its own summary to the
    # GitHub job summary; the evolve workflow appends the round report (`ecdysis pr-body`) once instead
    step_summary = os.environ.pop("GITHUB_STEP_SUMMARY", None)
    try:
        with (
            gitenv.scrubbed()
        ):  # nothing the loop starts (git, editor, sub-runs) sees the user's GIT_DIR & co
            outcome.evolution = run_evolution(session, state, outcome.summary)
    except EcdysisError as exc:
        outcome.evolution_error = f"--ecdysis-evolve stopped: {exc}"
    finally:
        if step_summary is not None:
            os.environ["GITHUB_STEP_SUMMARY"] = step_summary


def exit_status(state: EcdysisState, exitstatus: int) -> int | None:
    """The exit status the README promises ("Exit status"), or None to keep pytest's.

    Interrupted, internal and usage errors (2, 3, 4) are kept. A pytest-split shard that holds no case
    (pytest's 5, "no tests collected") is 0: its run directory is written and `ecdysis merge` takes it. `--ecdysis-gate`: 0 when the gate passed,
    1 when it failed, 4 when it refused the baseline. `--ecdysis-evolve`: 0 when the loop ran to the end,
    1 when it stopped on an error.
    """
    outcome: RunOutcome | None = state.outcome
    if outcome is None or exitstatus in (2, 3, 4) or outcome.stopped:
        return None
    if outcome.gate is not None:  # a refused baseline is a usage error, as when refused before the trials
        return 0 if outcome.gate.passed else 4 if outcome.gate.refused else 1
    if state.cfg.evolve:
        return 1 if outcome.evolution_error else 0
    if exitstatus == 5 and outcome.summary.get("shard") and not outcome.summary.get("n_trials"):
        return 0  # an empty shard (more --splits than cases) is written and merged like any other
    return None


def terminal_summary(terminalreporter: Any, state: EcdysisState) -> None:
    """The `ecdysis` section: score table, top groups, problems, gate verdict, where the files are."""
    outcome: RunOutcome = state.outcome
    tr = terminalreporter
    tr.write_sep("=", "ecdysis")
    for line in report.summary_lines(
        outcome.summary, outcome.groups, outcome.summary.get("gate"), outcome.problems
    ):
        red = (
            line.startswith(("PROBLEM", "ENDPOINT"))
            or line.startswith("gate FAILED")
            or line.startswith("gate REFUSED")
        )
        tr.write_line(line, red=red, green=line.startswith("gate PASSED"))
    if outcome.run_path is not None:
        tr.write_line(f"run directory: {outcome.run_path}")
    if outcome.baseline_written:
        tr.write_line(f"baseline written: {outcome.baseline_written}")
    if outcome.evolution_error:
        tr.write_line(safetext.terminal(outcome.evolution_error), red=True)
