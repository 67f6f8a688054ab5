"""Configure-time checks of `--ecdysis-evolve` / `--ecdysis-resume`, before any trial runs.

A failed check is a `UsageError` (pytest's usage-error exit status) that says what to do; nothing has run
and nothing is written. Called from `plugin.pytest_configure`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pytest_ecdysis.core.config import EcdysisConfig
from pytest_ecdysis.core.config_values import flag
from pytest_ecdysis.core.errors import UsageError
from pytest_ecdysis.core.rundir import read_json
from pytest_ecdysis.edit.editors import check_editor
from pytest_ecdysis.git import ops as gitops


def preflight(cfg: EcdysisConfig, harness_dir: Path) -> None:
    """Check that an evolution can start (or resume) before the suite runs.

    Raises:
        UsageError: not a git repository, detached HEAD, uncommitted changes in the harness directory,
            branch `ecdysis/<run-id>` taken, `--ecdysis-editor sim` without recipes, or a resume of a run
            directory that does not exist, is not an evolution, already finished, or was started with
            other options (`check_resume_options`).
    """
    run_id = cfg.resume or os.environ.get("ECDYSIS_RUN_ID")
    if cfg.resume:
        run_path = cfg.run_dir / cfg.resume
        if not run_path.is_dir():
            known = (
                sorted(p.name for p in cfg.run_dir.iterdir() if p.is_dir()) if cfg.run_dir.is_dir() else []
            )
            hint = f" (runs in {cfg.run_dir}: {', '.join(known[-5:])})" if known else ""
            raise UsageError(
                f"--ecdysis-resume {cfg.resume}: no such run in {cfg.run_dir}{hint}; pass the "
                "run id an interrupted evolution printed, or drop --ecdysis-resume"
            )
        checkpoint = run_path / "evolution.json"
        if not checkpoint.is_file() and (run_path / "summary.json").is_file():
            # the session finished without starting an evolution: a plain (or gate) run, whose files a
            # resume would overwrite with another harness's results
            raise UsageError(
                f"--ecdysis-resume {cfg.resume}: that run is not an evolution (it has summary.json "
                "but no evolution.json); start a new run with --ecdysis-evolve instead"
            )
        if checkpoint.is_file():
            doc = read_json(checkpoint)
            if doc.get("status") == "finished":
                raise UsageError(
                    f"--ecdysis-resume {cfg.resume}: that evolution already finished "
                    f"(see {checkpoint}); start a new run without --ecdysis-resume"
                )
            check_resume_options(cfg, doc)
    gitops.preflight(harness_dir, run_id, resume=bool(cfg.resume))
    check_editor(cfg.editor, harness_dir)


#: options an evolution records in `evolution.json` and a resume must repeat: its scores (the incumbent's,
#: the rounds') are only comparable with a session that runs the same trials, and its rounds were decided
#: (diagnosed, edited, accepted) under the same rules; a session that changed them would finish a run whose
#: record names one rule and whose rounds followed another.
RESUME_FIELDS = (
    "split",
    "tasks",
    "trials",
    "model",
    "threshold",
    "strategy",
    "editor",
    "self_evolution_cap",
    "proposals",
    "accept",
    "rescore",
    "evidence",
    "accept_extra_trials",
    "accept_budget",
    "ablate",
)
#: the decision options `evolution.json` records at its top level beside `accept` (with the value a
#: configuration without the attribute means).
DECISION_DEFAULTS = {
    "rescore": "auto",
    "evidence": "all",
    "accept_extra_trials": 0,
    "accept_budget": 0,
    "ablate": False,
}


def _option_value(cfg: EcdysisConfig, name: str) -> Any:
    if name == "accept":  # recorded as {rule, method, level}
        return {"rule": cfg.accept, "method": cfg.accept_method, "level": cfg.accept_level}
    value: Any = getattr(cfg, name, DECISION_DEFAULTS.get(name))
    return list(value) if name == "tasks" and value is not None else value


def _shown(name: str, value: Any) -> str:
    if name == "accept" and isinstance(value, dict):
        return f"{value.get('rule')} (method {value.get('method')}, level {value.get('level')})"
    return "all" if value is None else ",".join(value) if isinstance(value, list) else str(value)


def check_resume_options(cfg: EcdysisConfig, doc: dict[str, Any]) -> None:
    """A resume must run the trials the interrupted run ran (a 3-task run must not resume as 30).

    Raises:
        UsageError: a field of `RESUME_FIELDS` recorded in `doc` differs from this session's option.
    """
    diff = []
    for name in RESUME_FIELDS:
        if name in doc and doc[name] != _option_value(cfg, name):
            then, now = doc[name], _option_value(cfg, name)
            diff.append(f"{flag(name.replace('_', '-'))} {_shown(name, then)} then, {_shown(name, now)} now")
    if diff:
        raise UsageError(
            f"--ecdysis-resume {cfg.resume}: that run was started with other options ("
            + "; ".join(diff)
            + "); resume with the options of the interrupted run, or start a new "
            "run without --ecdysis-resume"
        )
