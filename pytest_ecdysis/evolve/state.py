"""The evolution run's state on disk: `evolution.json` started or resumed (with the integrity ledger's
checks), written after every stage, the stage checkpoints that are never redone on `--ecdysis-resume`,
and the stage lines on the terminal.

`RunState` is the part of `evolve.loop.Evolution` that owns `evolution.json` (`doc`); it is given what it
reads in its constructor. Files: docs/internals.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol, cast

from pytest_ecdysis.core import safetext
from pytest_ecdysis.core.config import EcdysisConfig
from pytest_ecdysis.core.errors import GitError, IntegrityError, UsageError, shown
from pytest_ecdysis.core.records import SCHEMA_VERSION, EvolutionRecord, HarnessPoint
from pytest_ecdysis.core.rundir import read_json, write_json
from pytest_ecdysis.git import ops as gitops
from pytest_ecdysis.validate import integrity

#: stage checkpoints computed in this process, and what a progress line calls them.
STAGE_NAMES = {"diagnosis.json": "diagnosis", "edit.json": "editor call"}


class SessionState(Protocol):
    """What the loop reads of the session's state (`run.state.EcdysisState`, a layer above the loop)."""

    cfg: EcdysisConfig
    run_id: str
    harness_id: str
    harness_dir: Path
    sim_url: str | None
    started: float  #: `time.time()` when the pytest session started

    @property
    def run_path(self) -> Path: ...


class TerminalWriter(Protocol):
    """What the stage lines use of pytest's terminal writer."""

    @property
    def width_of_current_line(self) -> int: ...

    def line(self, s: str = "", **markup: bool) -> None: ...

    def flush(self) -> None: ...


#: a stage's computation: the checkpoint's content.
Compute = Callable[[], dict[str, Any]]
#: progress lines while a stage runs: `follow(label)` (`TrustedRuns.follow`).
Follow = Callable[[str], AbstractContextManager[Any]]


class RunState:
    """`evolution.json` (`doc`, set by `load_or_start`), stage checkpoints and stage lines of an `Evolution`."""

    def __init__(
        self,
        *,
        cfg: EcdysisConfig,
        state: SessionState,
        summary: dict[str, Any],
        run_dir: Path,
        harness_dir: Path,
        ledger: integrity.Ledger,
        roots: dict[str, Any],
        tw: TerminalWriter,
        started: float,
    ) -> None:
        self.cfg, self.state, self.summary = cfg, state, summary
        self.dir, self.harness_dir = run_dir, harness_dir
        self.ledger, self.roots = ledger, roots
        self.tw = tw
        self.started = started  #: `time.monotonic()` when the loop started in this session
        self.last_said = "evolution"  #: the latest stage line (a sub-run's progress lines name it)
        self.doc: EvolutionRecord = {}

    def load_or_start(self) -> EvolutionRecord:
        """Read `evolution.json` back on `--ecdysis-resume` (verified), else start it; kept in `self.doc`."""
        self.doc = self._load_or_start()
        return self.doc

    def _load_or_start(self) -> EvolutionRecord:
        path = self.dir / "evolution.json"
        suite = self.summary.get("suite")
        if self.cfg.resume and path.is_file():
            # unverified: only to name a run of another suite (a usage error)
            doc = cast(EvolutionRecord, read_json(path))
            if doc.get("suite") == suite:
                if self.ledger.start is None:
                    raise IntegrityError(
                        f"--ecdysis-resume {self.state.run_id}: no integrity ledger for this run "
                        f"at {self.ledger.path} (it keeps the digests of every checkpoint); its "
                        "files cannot be verified, start a new run"
                    )
                doc = cast(EvolutionRecord, read_json(path, self.ledger))
                problems = integrity.changes(self.ledger.start, integrity.take(self.roots))
                if problems:
                    raise IntegrityError(
                        f"--ecdysis-resume {self.state.run_id}: protected files changed since the "
                        "run started: " + shown(problems, 8, "; ") + "; restore them or start a "
                        "new run"
                    )
                self.ledger.record_files_named(self.dir)  # the session just scored the incumbent again
            if doc.get("suite") != suite:
                raise UsageError(
                    f"--ecdysis-resume {self.state.run_id}: that run evolved suite "
                    f"{doc.get('suite')!r}, this session collected {suite!r}; select the same "
                    "tests (and options) as the interrupted run"
                )
            if not gitops.commit_exists(self.harness_dir, doc["incumbent"]["commit"]):
                raise GitError(
                    f"--ecdysis-resume: the incumbent commit {doc['incumbent']['commit'][:12]} is gone "
                    "from the repository (garbage-collected?); start a new run"
                )
            done = [r["round"] for r in doc["rounds"]]
            self.say(
                f"resuming {self.state.run_id}: round(s) {done or 'none'} done; finished stages are not redone"
            )
            doc["wall_s_before"] = doc.get("wall_s") or 0.0
            doc["cpu_s_before"] = doc.get("cpu_s") or 0.0
            self._rescored_on_resume(doc)
            return doc
        self.ledger.record_files_named(self.dir)
        self.ledger.save_start(integrity.take(self.roots))
        commit = gitops.head_commit(self.harness_dir)
        start: HarnessPoint = {
            "commit": commit,
            "harness_id": self.state.harness_id,
            "score": self.summary.get("suite_score"),
            "pass_hat_k": self.summary.get("pass_hat_k"),
            "run_path": str(self.dir),
            "round": 0,
        }
        doc = {
            "schema_version": SCHEMA_VERSION,
            "run_id": self.state.run_id,
            "suite": suite,
            "split": self.cfg.split,
            "tasks": list(self.cfg.tasks) if self.cfg.tasks else None,
            "threshold": self.cfg.threshold,
            "trials": self.cfg.trials,
            "strategy": self.cfg.strategy,
            "editor": self.cfg.editor,
            "model": self.cfg.model,
            "harness": str(self.harness_dir),
            "self_evolution_cap": self.cfg.self_evolution_cap,
            "proposals": self.cfg.proposals,
            "accept": {
                "rule": self.cfg.accept,
                "method": self.cfg.accept_method,
                "level": self.cfg.accept_level,
            },
            # the options `preflight.DECISION_DEFAULTS` names, in its order
            "rescore": self.cfg.rescore,
            "evidence": self.cfg.evidence,
            "accept_extra_trials": self.cfg.accept_extra_trials,
            "accept_budget": self.cfg.accept_budget,
            "ablate": self.cfg.ablate,
            "status": "running",
            "start": start,
            "incumbent": HarnessPoint(**start),
            "rounds": [],
            "branch": None,
            "test": None,
            "wall_s": 0.0,
            "run_path": str(self.dir),
        }
        write_json(path, doc, self.ledger)
        return doc

    def _rescored_on_resume(self, doc: EvolutionRecord) -> None:
        """The resuming session scored the start harness again into this run directory, so the trials on disk
        are the new run's: the start (and an incumbent still at it) take that run's score, and the change is
        recorded in `rescored_on_resume` (a model that is not deterministic, or was not, moves it)."""
        new: HarnessPoint = {
            "score": self.summary.get("suite_score"),
            "pass_hat_k": self.summary.get("pass_hat_k"),
        }
        if doc["start"].get("run_path") != str(self.dir) or doc["start"].get("score") == new["score"]:
            return
        doc.setdefault("rescored_on_resume", []).append({"recorded_score": doc["start"].get("score"), **new})
        self.say(
            f"the start harness scored {new['score']} in this session, {doc['start'].get('score')} when the run "
            "started: comparisons use this session's trials (the model is not deterministic)"
        )
        for entry in (doc["start"], doc["incumbent"]):
            if entry.get("run_path") == str(self.dir):
                entry.update(new)

    def checkpoint(self) -> None:
        """Write `evolution.json` with the wall-clock so far."""
        self.doc["wall_s"] = round(self.doc.get("wall_s_before", 0.0) + time.monotonic() - self.started, 2)
        write_json(self.dir / "evolution.json", self.doc, self.ledger)

    def stage_json(self, path: Path, compute: Compute, follow: Follow) -> dict[str, Any]:
        """The stage's checkpoint at `path` when it exists (`fresh` False), else `compute()` written there
        (in-process stages with progress lines from `follow`)."""
        if path.is_file():
            doc = read_json(path, self.ledger)
            doc["fresh"] = False
            return doc
        stage = STAGE_NAMES.get(path.name)
        if stage:  # in-process stages (diagnosis roles, the editor call) get progress lines of their own
            where = path.relative_to(self.dir).parts[1:-1]  # rounds/<n>[/steps/<k>]/<stage>.json
            with follow(f"round {where[0]}{' step ' + where[2] if len(where) > 2 else ''}: {stage}"):
                doc = compute()
        else:
            doc = compute()
        write_json(path, doc, self.ledger)
        doc["fresh"] = True
        return doc

    def say(self, text: str, n: int | None = None) -> None:
        """One stage line on the terminal: `ecdysis [elapsed s] text`, seconds since the pytest session
        started (the clock of the suite's own progress lines, which it continues)."""
        self.last_said = text
        session_start = getattr(self.state, "started", None)
        elapsed = time.time() - session_start if session_start else time.monotonic() - self.started
        if getattr(self.tw, "width_of_current_line", 0):
            self.tw.line()  # the progress dots of the run before: start the stage lines on their own line
        self.tw.line(
            safetext.terminal(f"ecdysis [{elapsed:7.1f} s] {text}")
        )  # editor stderr, reasons: outside text
        self.tw.flush()  # seen when said, also when the output is a pipe (CI logs, `| tee`)
