"""The evolution loop (`--ecdysis-evolve`), readable top to bottom; checkpointed after every stage.

    incumbent = the harness the session just scored (its run directory holds the evidence)
    for round n in 1..R:
        records, groups  <- the incumbent's run directory (failures.jsonl, groups.json)
        spec             <- diagnosis (the chosen strategy)            no records -> `no_failures`, stop
                                                                       no spec    -> `no_spec`
                                                                       same input as a round
                                                                       that found nothing -> `no_new_evidence`, stop
        edit             <- exactly one editor call, in a temporary git worktree at the incumbent
        change           <- the diff of the harness directory         none       -> `no_change`
        guard            <- only harness files; no gold-data reads    otherwise  -> `guard_rejected`
        score_after      <- validation sub-run (validate.run_suite)   no import  -> `broken_candidate`
        score_before     <- a re-run of the incumbent started beside it (`evolve.paired`, ini `ecdysis_rescore`)
        accept (`acceptance`, `--ecdysis-accept`): strict = score_after > score_before; paired = a paired test
        over tasks at ini `ecdysis_accept_level` (ini `ecdysis_accept_extra_trials = K`: first K more trials of the
        tasks that flipped, for both harnesses, `evolve.extra_trials`)
        ablate (`ablation`, ini `ecdysis_ablate`): an accepted candidate of several changes (hunks of its diff)
        re-validated without each in turn; a change whose removal loses nothing is dropped
        commit (the kept changes) in the worktree; it becomes the incumbent
        (instance-level strategies, `self-evolution`: edit, guard, validation and acceptance once per spec,
         in order, each on the incumbent the previous step left; at most ecdysis_self_evolution_cap a round)
        (alternatives strategies, `self-harness`, `harnessfix`: each proposal edited and validated from the
         same incumbent in `rounds/<n>/proposals/<k>/`, the best that passes kept: `evolve.alternatives`)
    branch ecdysis/<run-id> at the last accepted commit (none when nothing was accepted)
    score start and frozen harness on the test split (`--ecdysis-test-trials`), and per `--ecdysis-test-model`
    under the simulated model: the validity of each accepted edit from the ground truth
    (`sim/truth/validity.py`)

Files (docs/internals.md): `<run>/evolution.json` (also the checkpoint: finished rounds, the incumbent, the
stage reached), `<run>/rounds/<n>/{spec.json, transcript.jsonl, candidate.diff, decision.json}` plus the
stage checkpoints `diagnosis.json`, `edit.json`, `validation.json` and the sub-run's own run directory
`rounds/<n>/<sub-run-id>/` (with ini `ecdysis_ablate`: `ablation.json` and `ablation/<i>/`); an
instance-level round keeps its step files (`spec.json`, `edit.json`, `candidate.diff`, `validation.json`,
the sub-run, `decision.json`) in `rounds/<n>/steps/<k>/` (listed in the round entry under `steps`); test scoring in `<run>/test/{start,frozen}/` and `<run>/test/transfer/<model>/`.
A stage whose checkpoint file exists is never redone on `--ecdysis-resume`; Ctrl-C between or during
stages leaves the run resumable.

Only the controller runs this. It never imports tau2, task suites or harness code: candidates are
imported and scored in subprocesses (`validate`).

Where each part lives: the stages in `evolve.stages` (diagnosis, editor call + guard, validation) and
`evolve.accept` (decision and commit), the acceptance rule in `gate.acceptance`, instance-level rounds in
`evolve.instance`, alternatives rounds in `evolve.alternatives`, paired re-scoring in `evolve.paired`,
test-split scoring in `testsplit`,
configure-time checks in `evolve.preflight`, the guard's static check in `validate.static`, sub-runs from
the trusted copy in `evolve.runs`, `evolution.json` and the stage checkpoints in `evolve.state`, printing in
`report.evolution`, run-directory files in `core.rundir`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from subprocess import Popen
from typing import Any, cast

import pytest

from pytest_ecdysis.core.config import EcdysisConfig
from pytest_ecdysis.core.errors import EcdysisError, IntegrityError, shown
from pytest_ecdysis.core.metrics import cpu_seconds
from pytest_ecdysis.core.records import (
    DecisionRecord,
    EvolutionRecord,
    HarnessPoint,
    ModificationSpec,
    RoundRecord,
)
from pytest_ecdysis.core.rundir import add_tokens, load_evidence, read_json, write_json
from pytest_ecdysis.edit.editors import Editor, make_editor
from pytest_ecdysis.evolve import budget, cost, repeat
from pytest_ecdysis.evolve.accept import accept_stage
from pytest_ecdysis.evolve.alternatives import alternatives_round
from pytest_ecdysis.evolve.instance import MAX_INSTANCE_STEPS, instance_round
from pytest_ecdysis.evolve.preflight import preflight
from pytest_ecdysis.evolve.runs import TrustedRuns
from pytest_ecdysis.evolve.stages import diagnose_stage, edit_stage, validate_stage
from pytest_ecdysis.evolve.state import Compute, RunState, SessionState
from pytest_ecdysis.evolve.testsplit import score_test
from pytest_ecdysis.gate.acceptance import decision_fields
from pytest_ecdysis.git import ops as gitops
from pytest_ecdysis.git import snapshot as gitsnapshot
from pytest_ecdysis.git import worktree as gitworktree
from pytest_ecdysis.report.evolution import OUTCOME_TEXT, FinalTable, compared_text, fmt, summary_lines
from pytest_ecdysis.report.progress import Ticker
from pytest_ecdysis.validate import integrity, pycache, sandbox, warm
from pytest_ecdysis.validate.subrun import SubRun

__all__ = ["MAX_INSTANCE_STEPS", "Evolution", "load_evidence", "preflight", "run_evolution", "summary_lines"]


def run_evolution(session: pytest.Session, state: SessionState, summary: dict[str, Any]) -> EvolutionRecord:
    """Run (or resume) the loop after the session scored the incumbent; returns `evolution.json` as a dict.

    Raises:
        UsageError: `--ecdysis-resume` of a run of another suite.
        EcdysisError: git failed; the run directory keeps what was done.
    """
    doc = Evolution(session.config, state, summary).run()
    manager = session.config.pluginmanager
    if manager.has_plugin("ecdysis-evolution-table"):
        manager.unregister(name="ecdysis-evolution-table")
    manager.register(FinalTable(doc), "ecdysis-evolution-table")
    return doc


class Evolution:
    """One evolution run, the `RoundContext` its stages receive. State lives in `self.doc` (written to
    `evolution.json` after every stage).

    Its parts, each given what it uses: `files` (`evolve.state.RunState`: `evolution.json`, stage
    checkpoints, stage lines) and `runs` (`evolve.runs.TrustedRuns`: validation sub-runs from the trusted
    copy, integrity checks, progress lines)."""

    def __init__(self, config: pytest.Config, state: SessionState, summary: dict[str, Any]) -> None:
        self.config = config
        self.state = state
        self.cfg: EcdysisConfig = state.cfg
        self.dir: Path = Path(state.run_path).resolve()
        self.harness_dir: Path = Path(state.harness_dir)
        self.summary = summary
        self.started, self.cpu_started = time.monotonic(), cpu_seconds()
        self.editor: Editor = make_editor(self.cfg)
        self.snapshot: gitsnapshot.Snapshot | None = None  # the current candidate's bytes (set by edit_stage)
        self.ledger = integrity.Ledger(self.dir, state.run_id, resume=bool(self.cfg.resume))
        checkout = integrity.checkout_root(self.harness_dir)
        roots = integrity.protected_roots(checkout, exclude=(self.dir.parent, self.ledger.path.parent))
        self.files = RunState(
            cfg=self.cfg,
            state=state,
            summary=summary,
            run_dir=self.dir,
            harness_dir=self.harness_dir,
            ledger=self.ledger,
            roots=roots,
            tw=config.get_terminal_writer(),
            started=self.started,
        )
        self.doc: EvolutionRecord = self.files.load_or_start()
        warm.freeze()  # the session's warm scorer server writes no bytecode from here on (`validate.warm`)
        pycache_start = pycache.digests()  # the session's scorers wrote it; sub-runs only read it
        cost.note_start_run(self)
        self.runs = TrustedRuns(
            cfg=self.cfg,
            state=state,
            summary=summary,
            run_dir=self.dir,
            harness_dir=self.harness_dir,
            ledger=self.ledger,
            roots=roots,
            checkout=checkout,
            base_args=[str(a) for a in config.invocation_params.args],
            cwd=Path(config.invocation_params.dir),
            pycache_start=pycache_start,
            say=self.say,
            last_said=lambda: self.files.last_said,
        )
        # what the sandbox (--ecdysis-sandbox) covers in the sub-runs' harness processes
        # (beside what the session's controller covers: its run directory, the suites' answer keys)
        hide = [*sandbox.hidden_paths(), self.dir.parent, self.ledger.path.parent, checkout / ".git"]
        os.environ[sandbox.ENV_HIDE] = os.pathsep.join(dict.fromkeys(str(p) for p in hide))

    # --- what the stages use of the parts (`RoundContext`) ----------------------------------------

    @property
    def stop_error(self) -> IntegrityError | None:
        """Set when a protected file changed (by `runs`): the loop stops."""
        return self.runs.stop_error

    @property
    def base_args(self) -> list[str]:
        """The session's command line (what every sub-run's arguments start from)."""
        return self.runs.base_args

    def say(self, text: str, n: int | None = None) -> None:
        self.files.say(text, n)

    def checkpoint(self) -> None:
        self.files.checkpoint()

    def subrun(
        self,
        harness_dir: Path,
        run_dir: Path,
        run_id: str,
        overrides: dict[str, str | None] | None = None,
        files: dict[str, bytes | None] | None = None,
        on_start: Callable[[Popen[Any]], None] | None = None,
        env: dict[str, str] | None = None,
        label: str | None = None,
    ) -> SubRun:
        return self.runs.subrun(harness_dir, run_dir, run_id, overrides, files, on_start, env, label)

    def check_integrity(self, when: str) -> None:
        self.runs.check_integrity(when)

    def follow(self, label: str, progress_file: Callable[[], Path | None] | None = None) -> Ticker:
        return self.runs.follow(label, progress_file)

    # --- the loop --------------------------------------------------------------------------------

    def run(self) -> EvolutionRecord:
        if self.doc["start"]["score"] is None:
            n_infra = self.summary.get("n_infra_errors")
            raise EcdysisError(
                f"evolution needs a scored incumbent, and this run scored no trial ({n_infra} infrastructure "
                f"error(s)); fix the endpoint (see {self.dir / 'trials.jsonl'}), then run again"
            )
        self.say(
            f"evolution {self.state.run_id}: up to {self.cfg.rounds} round(s), strategy "
            f"{self.cfg.strategy}, editor {self.cfg.editor}; starting score "
            f"{fmt(self.doc['start']['score'])}"
        )
        self.say(sandbox.status_line() + "; see docs/evolution.md, threat model")
        if self.doc.pop("budget_stop", None):  # resumed after a budget stop (with a higher budget)
            self.doc["status"] = "running"
        self.doc["projection"] = budget.project(self.cfg, self.summary, self.dir, self.harness_dir)
        self.say(budget.projection_line(self.doc["projection"], self.cfg))
        if self.cfg.accept == "adaptive":  # the decision budget, fixed before the first candidate's trial
            from pytest_ecdysis.evolve.looks import plan_budget

            plan_budget(self)
        try:
            for n in range(len(self.doc["rounds"]) + 1, self.cfg.rounds + 1):
                result = self.round(n)
                if result["outcome"] in ("no_failures", "no_new_evidence"):
                    break
            self.make_branch()
            if not (self.doc.get("test") or {}).get("frozen") and self.cfg.test_trials:
                budget.before_stage(self, "test", "test split")
            score_test(self)
            self.measure_validity()
        except KeyboardInterrupt:
            self.checkpoint()
            self.say(f"interrupted: resume with --ecdysis-resume {self.state.run_id}")
            raise
        finally:
            self.runs.trusted.remove()
        self.doc["status"] = "finished"
        self.note_heldout()
        cost.refresh(self)
        self.doc["wall_s"] = round(self.doc.get("wall_s_before", 0.0) + time.monotonic() - self.started, 2)
        self.doc["cpu_s"] = round(self.doc.get("cpu_s_before", 0.0) + cpu_seconds() - self.cpu_started, 1)
        self.checkpoint()
        return self.doc

    def round(self, n: int) -> RoundRecord:
        """One round; every stage reads its checkpoint when present instead of redoing the work."""
        rdir = self.dir / "rounds" / str(n)
        rdir.mkdir(parents=True, exist_ok=True)
        inc = self.doc["incumbent"]
        row: RoundRecord = {
            "round": n,
            "strategy": self.cfg.strategy,
            "score_before": inc["score"],
            "score_after": None,
            "accepted": False,
            "editor_calls": 0,
            "tokens": {"prompt": 0, "completion": 0, "total": 0},
            "wall_s": 0.0,
            "flips": {"solved_to_failed": [], "failed_to_solved": []},
            "outcome": None,
            "reason": "",
            "harness_id_before": inc["harness_id"],
            "harness_id_after": None,
            "spec_summary": None,
        }
        if (rdir / "decision.json").is_file():  # decided just before an interruption
            decision = cast(DecisionRecord, read_json(rdir / "decision.json", self.ledger))
            self.doc["incumbent"] = decision["incumbent"]
            return self.finish_round(decision["round"], rdir, already_written=True)
        # the incumbent's source, checked out in a temporary worktree: diagnosis reads it, the editor edits it
        worktree = gitworktree.add_worktree(self.harness_dir, inc["commit"])
        try:
            # 1. records -> groups -> diagnosis -> spec
            diag = self.stage_json(
                rdir / "diagnosis.json",
                lambda: repeat.diagnose_once(
                    self, n, lambda: diagnose_stage(self, n, rdir, worktree.harness_dir)
                ),
            )
            row["diagnosis_input"] = diag.get("diagnosis_input")  # `evolve/repeat.py`
            add_tokens(row["tokens"], diag.get("tokens", {}))
            row["wall_s"] += diag.get("wall_s", 0.0)
            if diag["outcome"]:
                return self.finish_round({**row, "outcome": diag["outcome"], "reason": diag["reason"]}, rdir)
            if diag.get("instance_level"):  # self-evolution: the specs are patched one by one
                return instance_round(self, n, rdir, row, diag)
            if diag.get("alternatives"):  # self-harness, harnessfix: proposals from the same base, best kept
                return alternatives_round(self, n, rdir, row, diag)
            spec = ModificationSpec.model_validate(diag["spec"])
            row["spec_summary"] = spec.summary

            # 2.-4. exactly one editor call in the worktree, validation, acceptance
            out, new_incumbent = self.attempt(
                spec,
                worktree,
                rdir,
                inc,
                label=f"round {n}",
                run_id=f"{self.state.run_id}-r{n}",
                title=f"ecdysis round {n}",
            )
            add_tokens(row["tokens"], out.pop("tokens"))
            row["wall_s"] += out.pop("wall_s")
            row.update(out)
            if new_incumbent is not None:
                self.doc["incumbent"] = {**new_incumbent, "round": n}
            return self.finish_round(row, rdir)
        finally:
            worktree.remove()

    def stage_json(self, path: Path, compute: Compute) -> dict[str, Any]:
        """`RunState.stage_json`, after the budgets allow the stage (`evolve/budget.py`) when it is to run."""
        stage = budget.STAGES.get(path.name)
        if stage and not path.is_file():
            stage = "ablation" if "ablation" in path.relative_to(self.dir).parts[:-1] else stage
            where = "/".join(path.relative_to(self.dir).parts[1:-1])
            budget.before_stage(self, stage, f"{stage} of round {where}")
        return self.files.stage_json(path, compute, self.follow)

    def attempt(
        self,
        spec: ModificationSpec,
        worktree: gitworktree.Worktree,
        adir: Path,
        base: HarnessPoint,
        *,
        label: str,
        run_id: str,
        title: str,
    ) -> tuple[RoundRecord, HarnessPoint | None]:
        """One candidate: editor call in `worktree` (at `base`'s commit), guard, validation, acceptance.

        Stage checkpoints (`edit.json`, `validation.json`) and `candidate.diff` go to `adir`; the editor
        reads `adir/spec.json`. Returns the round-row fields it decided (`outcome`, `reason`, `editor_calls`,
        `tokens`, `wall_s`, and after a validation `score_after`, `flips`, pass^k, `harness_id_after`, and
        `accepted`/`commit`) and the new incumbent (None unless accepted).
        """
        out: RoundRecord = {
            "editor_calls": 0,
            "tokens": {"prompt": 0, "completion": 0, "total": 0},
            "wall_s": 0.0,
        }
        # the editor call; the change is the diff of the harness directory
        self.snapshot = None
        try:
            return self._attempt(spec, worktree, adir, base, out, label=label, run_id=run_id, title=title)
        except IntegrityError as exc:  # a protected file changed: this candidate is rejected, the loop stops
            if self.stop_error is None:
                raise
            self.say(f"{label}: {exc}")
            return {**out, "outcome": "guard_rejected", "reason": str(exc)}, None

    def _attempt(
        self,
        spec: ModificationSpec,
        worktree: gitworktree.Worktree,
        adir: Path,
        base: HarnessPoint,
        out: RoundRecord,
        *,
        label: str,
        run_id: str,
        title: str,
    ) -> tuple[RoundRecord, HarnessPoint | None]:
        edit = self.stage_json(adir / "edit.json", lambda: edit_stage(self, spec, worktree, adir, label))
        if not edit["fresh"] and not edit["outcome"]:
            # resumed: rebuild the candidate from its recorded diff (checked against the ledger)
            worktree.apply(self.ledger.read(adir / "candidate.diff").decode())
            self.snapshot = gitsnapshot.snapshot(worktree, worktree.commit)
        out["editor_calls"] = int(edit.get("calls", 1))  # the true count: a repair call counts
        out["wall_s"] += edit.get("wall_s", 0.0)
        add_tokens(out["tokens"], edit.get("tokens", {}))
        if edit["outcome"]:
            return {**out, "outcome": edit["outcome"], "reason": edit["reason"]}, None

        # validation sub-run of the same suite on the candidate, beside a re-run of the incumbent
        val = self.stage_json(
            adir / "validation.json", lambda: validate_stage(self, worktree, adir, run_id, label, base)
        )
        out["wall_s"] += val.get("wall_s", 0.0)
        if val["outcome"]:
            return {
                **out,
                "outcome": val["outcome"],
                "reason": val["reason"],
                **({"reused_validation": val["reused_validation"]} if val.get("reused_validation") else {}),
            }, None
        if val.get("reused_validation"):
            out["reused_validation"] = val["reused_validation"]
        if val.get("model_overridden"):  # the candidate asked for another model: the verdict says so
            out["model_overridden"] = int(val["model_overridden"])
        return accept_stage(
            self, spec, worktree, adir, base, val, out, label=label, run_id=run_id, title=title
        )

    def finish_round(self, row: RoundRecord, rdir: Path, *, already_written: bool = False) -> RoundRecord:
        """Write the round's `decision.json` (unless read back), append the row, checkpoint, print it."""
        if not already_written:
            row["wall_s"] = round(row.get("wall_s", 0.0), 2)  # the sum of its stages' wall-clock seconds
            cost.refresh(self, row)  # tokens and USD per role (`evolve/cost.py`)
            write_json(
                rdir / "decision.json",
                {**decision_fields(row), "round": row, "incumbent": self.doc["incumbent"]},
                self.ledger,
            )
        self.doc["rounds"].append(row)
        cost.refresh(self, row)
        self.checkpoint()
        if self.stop_error is not None:
            raise self.stop_error
        self.say(
            f"round {row['round']}: {OUTCOME_TEXT[str(row['outcome'])]} ({compared_text(row)})"
            + (f": {row['reason']}" if row.get("reason") and row["outcome"] != "accepted" else ""),
            row["round"],
        )
        return row

    def make_branch(self) -> None:
        """Branch `ecdysis/<run-id>` at the last accepted commit; none when no round was accepted."""
        accepted = [r for r in self.doc["rounds"] if r.get("accepted")]
        if not accepted:
            self.doc["branch"] = None
            self.say("no round was accepted: no branch created")
            return
        if self.doc.get("branch"):
            return
        outside = gitops.paths_changed_outside(
            self.harness_dir, self.doc["start"]["commit"], self.doc["incumbent"]["commit"]
        )
        if outside:
            raise IntegrityError(
                f"the incumbent commit {self.doc['incumbent']['commit'][:12]} changes files "
                f"outside the harness ({shown(outside)}); no branch is made"
            )
        name = gitops.create_branch(self.harness_dir, self.state.run_id, self.doc["incumbent"]["commit"])
        self.doc["branch"] = name
        self.doc["diff_command"] = f"git diff {self.doc['start']['commit'][:12]} {name}"
        elsewhere = gitops.uncommitted_elsewhere(self.harness_dir)
        note = (
            f"; {elsewhere} uncommitted change(s) elsewhere in your checkout were left alone"
            if elsewhere
            else ""
        )
        commits = sum(sum(bool(st.get("accepted")) for st in r.get("steps") or []) or 1 for r in accepted)
        self.say(
            f"branch {name}: {commits} commit(s), one per accepted round (or self-evolution step); your "
            f"checkout, index and current branch were not touched{note}. View: {self.doc['diff_command']}"
        )
        self.checkpoint()

    def note_heldout(self) -> None:
        """The held-out checks (`gate.heldout.heldout_summary`) into the session's `summary.json` as
        `heldout` (through the ledger: the file stays the controller's)."""
        from pytest_ecdysis.gate.heldout import heldout_summary

        held = heldout_summary(cast(dict[str, Any], self.doc))
        if held is None and "heldout" not in self.summary:
            return
        self.summary["heldout"] = held
        write_json(self.dir / "summary.json", self.summary, self.ledger)

    def measure_validity(self) -> None:
        """Under the simulated model: join each accepted edit's flips with the ground truth
        (`sim/truth/validity.py`), record `validity` in `evolution.json` and print the accommodation ratio t."""
        from pytest_ecdysis.sim.truth.validity import evolution_validity, summary_line

        validity = evolution_validity(cast(dict[str, Any], self.doc), self.dir)  # a TypedDict is a dict
        if validity is not None:
            self.doc["validity"] = validity
            self.say(summary_line(validity))
