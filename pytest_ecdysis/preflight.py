"""Configure-time checks of `--ecdysis-evolve` / `--ecdysis-resume`, before any trial runs.

A failed check is a `UsageError` (pytest's usage-error exit status) that says what to do; nothing has run
and nothing is written. Called from `plugin.pytest_configure`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from . import gitops
from .edit import check_editor
from .errors import UsageError
from .rundir import read_json


def preflight(cfg: Any, harness_dir: Path) -> None:
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
            known = sorted(p.name for p in cfg.run_dir.iterdir() if p.is_dir()) if cfg.run_dir.is_dir() else []
            hint = f" (runs in {cfg.run_dir}: {', '.join(known[-5:])})" if known else ""
            raise UsageError(f"--ecdysis-resume {cfg.resume}: no such run in {cfg.run_dir}{hint}; pass the "
                             "run id an interrupted evolution printed, or drop --ecdysis-resume")
        checkpoint = run_path / "evolution.json"
        if not checkpoint.is_file() and (run_path / "summary.json").is_file():
            # the session finished without starting an evolution: a plain (or gate) run, whose files a
            # resume would overwrite with another harness's results
            raise UsageError(f"--ecdysis-resume {cfg.resume}: that run is not an evolution (it has summary.json "
                             "but no evolution.json); start a new run with --ecdysis-evolve instead")
        if checkpoint.is_file():
            doc = read_json(checkpoint)
            if doc.get("status") == "finished":
                raise UsageError(f"--ecdysis-resume {cfg.resume}: that evolution already finished "
                                 f"(see {checkpoint}); start a new run without --ecdysis-resume")
            check_resume_options(cfg, doc)
    gitops.preflight(harness_dir, run_id, resume=bool(cfg.resume))
    check_editor(cfg.editor, harness_dir)


#: options an evolution records in `evolution.json` and a resume must repeat: its scores (the incumbent's,
#: the rounds') are only comparable with a session that runs the same trials.
RESUME_FIELDS = ("split", "tasks", "trials", "model", "threshold")


def _option_value(cfg: Any, name: str) -> Any:
    value = getattr(cfg, name)
    return list(value) if name == "tasks" and value is not None else value


def check_resume_options(cfg: Any, doc: dict[str, Any]) -> None:
    """A resume must run the trials the interrupted run ran (a 3-task run must not resume as 30).

    Raises:
        UsageError: a field of `RESUME_FIELDS` recorded in `doc` differs from this session's option.
    """
    diff = []
    for name in RESUME_FIELDS:
        if name in doc and doc[name] != _option_value(cfg, name):
            then, now = doc[name], _option_value(cfg, name)
            shown = [("all" if v is None else ",".join(v) if isinstance(v, list) else v) for v in (then, now)]
            diff.append(f"--ecdysis-{name} {shown[0]} then, {shown[1]} now")
    if diff:
        raise UsageError(f"--ecdysis-resume {cfg.resume}: that run was started with other options ("
                         + "; ".join(diff) + "); resume with the options of the interrupted run, or start a new "
                         "run without --ecdysis-resume")
