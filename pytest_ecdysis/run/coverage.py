"""What the controller learns of collection and reports, and which cases should have reported a trial.

The plugin calls `note_collection(state, ids)` for every xdist worker's collection (the controller
collects nothing under xdist) and `note_report(state, report)` for every test report; workers pass each
trial result through `json_safe_trial` before xdist serialises the report. `session.finish` then asks
`expected_cases(state)` which node ids should have reported a trial, so a crashed or silent case is named
(`_name`) rather than dropped. No pytest import: `state` is the plugin's per-session state.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pytest_ecdysis.run.state import EcdysisState

#: how many missing node ids a message names before "and N more".
SHOW_MISSING = 10


@dataclass
class Coverage:
    """What the controller learnt about collection and reports (filled by the plugin's hooks)."""

    xdist_ids: set[str] = field(default_factory=set)  # union of the workers' collections
    reported: set[str] = field(default_factory=set)  # node ids with any report
    non_trial: set[str] = field(default_factory=set)  # reported, without the ecdysis_trial marker
    crashed: list[str] = field(default_factory=list)  # xdist "worker crashed while running" reports
    #: workers that went down uncleanly (`pytest_testnodedown` with an error): {"worker", "collected", "error"}
    workers_down: list[dict[str, Any]] = field(default_factory=list)


def coverage(state: EcdysisState) -> Coverage:
    if state.coverage is None:
        state.coverage = Coverage()
    cov: Coverage = state.coverage
    return cov


def note_collection(state: EcdysisState, ids: list[str] | tuple[str, ...]) -> None:
    """Record one xdist worker's collected node ids (`pytest_xdist_node_collection_finished`)."""
    coverage(state).xdist_ids.update(ids)


def note_report(state: EcdysisState, report: Any) -> None:
    """Record a test report: which node ids reported, which are not trials, which crashed a worker."""
    cov = coverage(state)
    if report.when == "???":  # xdist's handle_crashitem report
        cov.crashed.append(report.nodeid)
        return
    cov.reported.add(report.nodeid)
    if getattr(report, "ecdysis_trial", None) is None and "ecdysis_trial" not in (report.keywords or {}):
        cov.non_trial.add(report.nodeid)


#: characters of a crashed worker's error kept in `summary.json` `worker_crashes` (its last ones: the exception).
CRASH_CHARS = 2000


def note_worker_down(state: EcdysisState, worker: str, error: Any) -> None:
    """Record an xdist worker that went down with `error` (`pytest_testnodedown`; None: a clean exit)."""
    if error is None:
        return
    cov = coverage(state)
    text = str(error).strip()
    cov.workers_down.append(
        {"worker": worker, "collected": bool(cov.xdist_ids), "error": text[-CRASH_CHARS:]}
    )


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "no error text"


def crash_problems(cov: Coverage, *, collected: bool, reported: bool) -> list[str]:
    """PROBLEM lines that name what crashed and where its traceback is, or [] when no worker crashed.

    `collected`: any trial case was collected; `reported`: any trial reported a result. A worker that died
    before any collection (a conftest or plugin that raises or kills the process on import) is named as
    such, never as "no trial case was collected: check the test paths"."""
    out = []
    down = cov.workers_down
    where = (
        "its traceback is in the terminal output above, under '[{w}] node down', and in summary.json "
        "`worker_crashes`"
    )
    if down and not collected and not cov.xdist_ids:
        first = down[0]
        out.append(
            f"every xdist worker crashed before collecting a test ({len(down)} crash(es), the first {first['worker']}: "
            f"{_last_line(first['error'])}): a conftest.py or plugin the workers import failed; "
            + where.format(w=first["worker"])
            + "; `pytest -p no:xdist` shows it directly"
        )
    if cov.crashed:
        during = [d for d in down if d["collected"]]
        said = f" ({during[0]['worker']}: {_last_line(during[0]['error'])})" if during else ""
        worker = during[0]["worker"] if during else "gwN"
        out.append(
            f"xdist worker(s) crashed while running: {_name(sorted(set(cov.crashed)))}{said}: the worker "
            "process died mid-trial (a signal, os._exit, the OOM killer), no report was lost in serialisation; "
            + where.format(w=worker)
        )
    return out


def json_safe_trial(data: dict, nodeid: str) -> dict:
    """`data` when JSON can carry it, else a JSON-safe marker the controller reports as a problem.

    Runs on workers before the report is serialised: an attribute xdist cannot serialise makes it crash
    or print "no tests ran", and the case's result would vanish without a word.
    """
    try:
        json.dumps(data)
    except (TypeError, ValueError) as exc:
        return {
            "ecdysis_error": f"the trial result of {nodeid} is not JSON-serialisable ({exc}); pass "
            "record_trial a TrialResult or a dict of JSON-safe builtins"
        }
    return data


def expected_cases(state: EcdysisState) -> set[str]:
    """Trial node ids that should have reported a result.

    Without xdist: the items marked `ecdysis_trial`. With xdist (the controller sees only ids): every id
    the workers collected, minus the ones whose reports show they are not trials; an id that never
    reported stays expected, so a crashed or silent case is named rather than dropped.
    """
    cov = coverage(state)
    if cov.xdist_ids:
        return (cov.xdist_ids - cov.non_trial) | set(state.trials)
    return set(state.collected) | set(state.trials)


def _name(ids: list[str]) -> str:
    more = len(ids) - SHOW_MISSING
    return ", ".join(ids[:SHOW_MISSING]) + (f" and {more} more" if more > 0 else "")
