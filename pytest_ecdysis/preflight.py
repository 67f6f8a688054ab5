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
            directory that does not exist, is not an evolution, or already finished.
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
    gitops.preflight(harness_dir, run_id, resume=bool(cfg.resume))
    check_editor(cfg.editor, harness_dir)
