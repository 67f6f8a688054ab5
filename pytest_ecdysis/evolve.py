"""The evolution loop (`--ecdysis-evolve`), readable top to bottom; checkpointed after every stage.

    incumbent = the harness the session just scored (its run directory holds the evidence)
    for round n in 1..R:
        records, groups  <- the incumbent's run directory (failures.jsonl, groups.json)
        spec             <- diagnosis (the chosen strategy)            no records -> `no_failures`, stop
                                                                       no spec    -> `no_spec`
        edit             <- exactly one editor call, in a temporary git worktree at the incumbent
        change           <- the diff of the harness directory         none       -> `no_change`
        guard            <- only harness files; no gold-data reads    otherwise  -> `guard_rejected`
        score_after      <- validation sub-run (validate.run_suite)   no import  -> `broken_candidate`
        accept iff score_after > score_before (strictly): commit in the worktree; it becomes the incumbent
        (instance-level strategies, `self-evolution`: edit, guard, validation and acceptance once per spec,
         in order, each on the incumbent the previous step left; at most MAX_INSTANCE_STEPS specs a round)
    branch ecdysis/<run-id> at the last accepted commit (none when nothing was accepted)
    score start and frozen harness on the test split (`--ecdysis-test-trials`), and per `--ecdysis-test-model`

Files (DESIGN.md §4): `<run>/evolution.json` (also the checkpoint: finished rounds, the incumbent, the
stage reached), `<run>/rounds/<n>/{spec.json, transcript.jsonl, candidate.diff, decision.json}` plus the
stage checkpoints `diagnosis.json`, `edit.json`, `validation.json` and the sub-run's own run directory
`rounds/<n>/<sub-run-id>/`; an instance-level round keeps its step files (`spec.json`, `edit.json`,
`candidate.diff`, `validation.json`, the sub-run, `decision.json`) in `rounds/<n>/steps/<k>/` (listed in
the round entry under `steps`); test scoring in `<run>/test/{start,frozen}/` and `<run>/test/transfer/<model>/`.
A stage whose checkpoint file exists is never redone on `--ecdysis-resume`; Ctrl-C between or during
stages leaves the run resumable.

Only the controller runs this. It never imports tau2, task suites or harness code: candidates are
imported and scored in subprocesses (`validate`).
"""

from __future__ import annotations

import json
import os
import re
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from . import gitops
from .edit import check_editor, make_editor
from .errors import EcdysisError, GitError, RunDirError, UsageError
from .records import INFRA_REASONS, SCHEMA_VERSION, FailureRecord, ModificationSpec, PatternGroup
from .validate import BrokenCandidate, SubRun, flips, read_run, run_suite, solved_tasks

#: Added diff lines matching one of these read the benchmark's gold data or patch its scoring
#: (DESIGN.md §5): flagged statically, the candidate is rejected before validation.
GOLD_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"evaluation_criteria", "reads a task's evaluation criteria (gold actions)"),
    (r"tasks\.json|tasks_voice\.json|split_tasks\.json", "opens a τ² task file"),
    (r"tau2[/\\.]data\b|\bDATA_DIR\b|data/tau2|domains[/\\]\w+[/\\](db|tasks)", "reads τ²'s data directory"),
    (r"\b(expected_actions|communicate_info|reward_basis|nl_assertions|env_assertions)\b",
     "reads gold task fields"),
    (r"tau2\.evaluator|\bevaluate_simulation\b|\bEnvironmentEvaluator\b", "touches τ²'s evaluator"),
    (r"\bpytest_ecdysis\b|\btask_suites\b", "touches the plugin or the task suites"),
)

#: An instance-level round (`self-evolution`) patches at most this many of its specs, in order (each costs
#: an editor call and a validation sub-run), so a suite with many failures cannot run for hours; the
#: round's reason says when specs were dropped.
MAX_INSTANCE_STEPS = 5

OUTCOME_TEXT = {
    "accepted": "accepted",
    "rejected": "rejected",
    "no_failures": "no failures: nothing to repair",
    "no_spec": "no spec",
    "no_change": "no change",
    "guard_rejected": "refused by the guard",
    "broken_candidate": "broken candidate",
}


def preflight(cfg: Any, harness_dir: Path) -> None:
    """Configure-time checks of `--ecdysis-evolve` / `--ecdysis-resume`, before any trial (issue 6 item 5).

    Raises:
        UsageError: not a git repository, detached HEAD, uncommitted changes in the harness directory,
            branch `ecdysis/<run-id>` taken, `--ecdysis-editor sim` without recipes, or a resume of a run
            directory that does not exist.
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
            doc = _read_json(checkpoint)
            if doc.get("status") == "finished":
                raise UsageError(f"--ecdysis-resume {cfg.resume}: that evolution already finished "
                                 f"(see {checkpoint}); start a new run without --ecdysis-resume")
    gitops.preflight(harness_dir, run_id, resume=bool(cfg.resume))
    check_editor(cfg.editor, harness_dir)


def run_evolution(session: Any, state: Any, summary: dict[str, Any]) -> dict[str, Any]:
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


class FinalTable:
    """Prints the final table at the very end of the terminal summary (after failures and the run's
    own `ecdysis` section), where the user looks last."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        terminalreporter.write_sep("=", "ecdysis evolution")
        for line in summary_lines(self.doc)[1:]:
            terminalreporter.write_line(line)


def gold_data_flags(diff_text: str) -> list[str]:
    """Static check of a candidate diff: one finding per added line that reads gold data or patches scoring.

    Only added lines (`+`, not `+++`) are read; a finding is `"<file>: <reason>: <line>"`.
    """
    findings: list[str] = []
    current = ""
    for line in diff_text.splitlines():
        if line.startswith("+++ "):
            current = line[6:] if line.startswith("+++ b/") else line[4:]
            continue
        if not line.startswith("+"):
            continue
        for pattern, reason in GOLD_PATTERNS:
            if re.search(pattern, line[1:]):
                findings.append(f"{current}: {reason}: {line[1:].strip()[:120]}")
                break
    return findings


class Evolution:
    """One evolution run. State lives in `self.doc` (written to `evolution.json` after every stage)."""

    def __init__(self, config: Any, state: Any, summary: dict[str, Any]) -> None:
        self.config = config
        self.state = state
        self.cfg = state.cfg
        self.dir: Path = Path(state.run_path).resolve()
        self.harness_dir: Path = Path(state.harness_dir)
        self.summary = summary
        self.started = time.monotonic()
        self.tw = config.get_terminal_writer()
        self.base_args = [str(a) for a in config.invocation_params.args]
        self.cwd = Path(config.invocation_params.dir)
        self.editor = make_editor(self.cfg)
        self.doc = self._load_or_start()

    # --- the loop --------------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        if self.doc["start"]["score"] is None:
            n_infra = self.summary.get("n_infra_errors")
            raise EcdysisError(
                f"evolution needs a scored incumbent, and this run scored no trial ({n_infra} infrastructure "
                f"error(s)); fix the endpoint (see {self.dir / 'trials.jsonl'}), then run again")
        self._say(f"evolution {self.state.run_id}: up to {self.cfg.rounds} round(s), strategy "
                  f"{self.cfg.strategy}, editor {self.cfg.editor}; starting score "
                  f"{_fmt(self.doc['start']['score'])}")
        try:
            for n in range(len(self.doc["rounds"]) + 1, self.cfg.rounds + 1):
                result = self.round(n)
                if result["outcome"] == "no_failures":
                    break
            self.make_branch()
            self.score_test()
        except KeyboardInterrupt:
            self._checkpoint()
            self._say(f"interrupted: resume with --ecdysis-resume {self.state.run_id}")
            raise
        self.doc["status"] = "finished"
        self.doc["wall_s"] = round(self.doc.get("wall_s_before", 0.0) + time.monotonic() - self.started, 2)
        self._checkpoint()
        return self.doc

    def round(self, n: int) -> dict[str, Any]:
        """One round; every stage reads its checkpoint when present instead of redoing the work."""
        rdir = self.dir / "rounds" / str(n)
        rdir.mkdir(parents=True, exist_ok=True)
        inc = self.doc["incumbent"]
        row: dict[str, Any] = {
            "round": n, "strategy": self.cfg.strategy, "score_before": inc["score"], "score_after": None,
            "accepted": False, "editor_calls": 0, "tokens": {"prompt": 0, "completion": 0, "total": 0},
            "wall_s": 0.0, "flips": {"solved_to_failed": [], "failed_to_solved": []}, "outcome": None,
            "reason": "", "harness_id_before": inc["harness_id"], "harness_id_after": None,
            "spec_summary": None,
        }
        if (rdir / "decision.json").is_file():  # decided just before an interruption
            decision = _read_json(rdir / "decision.json")
            self.doc["incumbent"] = decision["incumbent"]
            return self._finish_round(decision["round"], rdir, already_written=True)
        # the incumbent's source, checked out in a temporary worktree: diagnosis reads it, the editor edits it
        worktree = gitops.add_worktree(self.harness_dir, inc["commit"])
        try:
            # 1. records -> groups -> diagnosis -> spec
            diag = self._stage_json(rdir / "diagnosis.json", lambda: self._diagnose(n, rdir, worktree.harness_dir))
            _add_tokens(row["tokens"], diag.get("tokens", {}))
            row["wall_s"] += diag.get("wall_s", 0.0)
            if diag["outcome"]:
                return self._finish_round({**row, "outcome": diag["outcome"], "reason": diag["reason"]}, rdir)
            if diag.get("instance_level"):  # self-evolution: the specs are patched one by one
                return self._instance_round(n, rdir, row, diag)
            spec = ModificationSpec.model_validate(diag["spec"])
            row["spec_summary"] = spec.summary

            # 2.-4. exactly one editor call in the worktree, validation, strict acceptance
            out, new_incumbent = self._attempt(spec, worktree, rdir, inc, label=f"round {n}",
                                               run_id=f"{self.state.run_id}-r{n}", title=f"ecdysis round {n}")
            _add_tokens(row["tokens"], out.pop("tokens"))
            row["wall_s"] += out.pop("wall_s")
            row.update(out)
            if new_incumbent is not None:
                self.doc["incumbent"] = {**new_incumbent, "round": n}
            return self._finish_round(row, rdir)
        finally:
            worktree.remove()

    def _attempt(self, spec: ModificationSpec, worktree: gitops.Worktree, adir: Path, base: dict[str, Any], *,
                 label: str, run_id: str, title: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """One candidate: editor call in `worktree` (at `base`'s commit), guard, validation, strict acceptance.

        Stage checkpoints (`edit.json`, `validation.json`) and `candidate.diff` go to `adir`; the editor
        reads `adir/spec.json`. Returns the round-row fields it decided (`outcome`, `reason`, `editor_calls`,
        `tokens`, `wall_s`, and after a validation `score_after`, `flips`, pass^k, `harness_id_after`, and
        `accepted`/`commit`) and the new incumbent (None unless accepted).
        """
        out: dict[str, Any] = {"editor_calls": 0, "tokens": {"prompt": 0, "completion": 0, "total": 0},
                               "wall_s": 0.0}
        # the editor call; the change is the diff of the harness directory
        edit = self._stage_json(adir / "edit.json", lambda: self._edit(spec, worktree, adir, label))
        if not edit["fresh"] and not edit["outcome"]:
            worktree.apply((adir / "candidate.diff").read_text())  # resumed: rebuild the candidate
        out["editor_calls"] = 1
        out["wall_s"] += edit.get("wall_s", 0.0)
        _add_tokens(out["tokens"], edit.get("tokens", {}))
        if edit["outcome"]:
            return {**out, "outcome": edit["outcome"], "reason": edit["reason"]}, None

        # validation sub-run of the same suite on the candidate
        val = self._stage_json(adir / "validation.json",
                               lambda: self._validate(worktree, adir, run_id, label, base["score"]))
        out["wall_s"] += val.get("wall_s", 0.0)
        if val["outcome"]:
            return {**out, "outcome": val["outcome"], "reason": val["reason"]}, None
        after = val["score"]
        out["score_after"] = after
        out["pass_hat_k_before"] = base.get("pass_hat_k")
        out["pass_hat_k_after"] = val.get("pass_hat_k")
        out["harness_id_after"] = val["harness_id"]
        _, before_trials = read_run(Path(base["run_path"]))
        _, after_trials = read_run(Path(val["run_path"]))
        out["flips"] = flips(before_trials, after_trials, self.cfg.threshold)

        # strict acceptance
        if after is not None and base["score"] is not None and after > base["score"] + 1e-12:
            message = (f"{title}: {spec.summary.strip()}\n\nsuite score {base['score']:.4f} -> "
                       f"{after:.4f} ({self.cfg.split} split, {self.cfg.trials} trial(s) per task)\n"
                       f"run {self.state.run_id}, editor {self.cfg.editor}, strategy {self.cfg.strategy}\n")
            sha = worktree.commit_paths(edit["changed"], message)
            out.update(outcome="accepted", accepted=True, commit=sha,
                       reason=f"suite score {_fmt(base['score'])} -> {_fmt(after)}")
            return out, {"commit": sha, "harness_id": val["harness_id"], "score": after,
                         "pass_hat_k": val.get("pass_hat_k"), "run_path": val["run_path"]}
        out.update(outcome="rejected",
                   reason=f"suite score {_fmt(base['score'])} -> {_fmt(after)}: not strictly higher")
        return out, None

    def _instance_round(self, n: int, rdir: Path, row: dict[str, Any], diag: dict[str, Any]) -> dict[str, Any]:
        """A round of an instance-level strategy (`self-evolution`): its specs are patched one by one.

        Step k (1-based, at most `MAX_INSTANCE_STEPS`) makes one editor call on the current incumbent in
        its own worktree, then guard, validation and strict acceptance, in `rounds/<n>/steps/<k>/`
        (`spec.json`, `edit.json`, `candidate.diff`, `validation.json`, the sub-run `<run-id>-r<n>s<k>/`,
        `decision.json`). An accepted step is committed and is the base of the next step. A step whose
        `decision.json` exists is read back, not redone. The round is `accepted` when any step was;
        otherwise `rejected` when a candidate was validated, else the first of `broken_candidate`,
        `guard_rejected`, `no_change` among its steps. `score_after` is the incumbent's score after the
        round when accepted, else the best validated candidate's (null when none was validated).
        """
        start = self.doc["incumbent"]
        specs = [ModificationSpec.model_validate(s) for s in diag["specs"]]
        todo = specs[:MAX_INSTANCE_STEPS]
        current = dict(start)
        steps: list[dict[str, Any]] = []
        self._say(f"round {n}: instance level: {len(specs)} spec(s), patched one by one"
                  + (f" (the first {len(todo)}: cap MAX_INSTANCE_STEPS)" if len(todo) < len(specs) else ""), n)
        for k, spec in enumerate(todo, start=1):
            sdir = rdir / "steps" / str(k)
            if (sdir / "decision.json").is_file():  # finished before an interruption
                decision = _read_json(sdir / "decision.json")
                steps.append(decision["step"])
                current = decision["incumbent"]
                continue
            if not (sdir / "spec.json").is_file():
                _write_json(sdir / "spec.json", spec.model_dump(mode="json"))
            step: dict[str, Any] = {"step": k, "spec_summary": spec.summary, "score_before": current["score"],
                                    "score_after": None, "harness_id_before": current["harness_id"]}
            worktree = gitops.add_worktree(self.harness_dir, current["commit"])
            try:
                out, new_incumbent = self._attempt(
                    spec, worktree, sdir, current, label=f"round {n} step {k}/{len(todo)}",
                    run_id=f"{self.state.run_id}-r{n}s{k}", title=f"ecdysis round {n} step {k}")
            finally:
                worktree.remove()
            step.update(out)
            step["wall_s"] = round(step["wall_s"], 2)
            if new_incumbent is not None:
                current = {**new_incumbent, "round": n, "step": k}
            _write_json(sdir / "decision.json", {"step": step, "incumbent": current})
            self._say(f"round {n} step {k}/{len(todo)}: {OUTCOME_TEXT[step['outcome']]}"
                      + (f" ({step['reason']})" if step.get("reason") else ""), n)
            steps.append(step)

        for step in steps:
            row["editor_calls"] += step.get("editor_calls", 0)
            _add_tokens(row["tokens"], step.get("tokens", {}))
            row["wall_s"] += step.get("wall_s", 0.0)
        row["steps"] = steps
        row["spec_summary"] = f"{len(todo)} instance-level spec(s): " + " | ".join(s.summary.strip() for s in todo)
        accepted = [s["step"] for s in steps if s.get("accepted")]
        validated = [s for s in steps if s.get("score_after") is not None]
        if accepted:
            row.update(outcome="accepted", accepted=True, commit=current["commit"], score_after=current["score"],
                       harness_id_after=current["harness_id"], pass_hat_k_before=start.get("pass_hat_k"),
                       pass_hat_k_after=current.get("pass_hat_k"),
                       reason=f"step(s) {', '.join(map(str, accepted))} of {len(steps)} accepted: suite score "
                              f"{_fmt(start['score'])} -> {_fmt(current['score'])}")
            _, before_trials = read_run(Path(start["run_path"]))
            _, after_trials = read_run(Path(current["run_path"]))
            row["flips"] = flips(before_trials, after_trials, self.cfg.threshold)
            self.doc["incumbent"] = current
        elif validated:
            best = max(validated, key=lambda s: s["score_after"])
            row.update(outcome="rejected", score_after=best["score_after"], flips=best["flips"],
                       harness_id_after=best["harness_id_after"], pass_hat_k_before=start.get("pass_hat_k"),
                       pass_hat_k_after=best.get("pass_hat_k_after"),
                       reason=f"no step strictly raised the suite score (best: step {best['step']}, "
                              f"{_fmt(start['score'])} -> {_fmt(best['score_after'])})")
        else:
            outcomes = [s["outcome"] for s in steps]
            row["outcome"] = next(o for o in ("broken_candidate", "guard_rejected", "no_change") if o in outcomes)
            row["reason"] = "; ".join(f"step {s['step']}: {s['reason']}" for s in steps)
        if len(todo) < len(specs):
            row["reason"] += (f"; cap: {len(todo)} of {len(specs)} specs patched (MAX_INSTANCE_STEPS = "
                              f"{MAX_INSTANCE_STEPS}), the other {len(specs) - len(todo)} dropped")
        return self._finish_round(row, rdir)

    # --- stages ----------------------------------------------------------------------------------

    def _diagnose(self, n: int, rdir: Path, incumbent_dir: Path) -> dict[str, Any]:
        from . import diagnose as diagnosis

        inc = self.doc["incumbent"]
        records, groups = load_evidence(Path(inc["run_path"]))
        usable = [r for r in records if not r.suspect and r.termination_reason not in INFRA_REASONS]
        if not usable:
            self._say(f"round {n}: no failure records below λ={self.cfg.threshold}: nothing to repair", n)
            return {"outcome": "no_failures", "reason": "the incumbent has no failure records", "spec": None}
        _, trials = read_run(Path(inc["run_path"]))
        solved = sorted(solved_tasks(trials, self.cfg.threshold))
        tools_by_task = {key.split("/", 1)[-1]: sorted({c["name"] for t in trials for c in t.get("tool_calls", [])
                                                         if f"{t.get('suite')}/{t['task_id']}" == key})
                         for key in solved}
        t0 = time.monotonic()
        history = [{"round": r["round"], "outcome": r["outcome"], "score_before": r["score_before"],
                    "score_after": r["score_after"], "spec": _spec_of(self.dir / "rounds" / str(r["round"]))}
                   for r in self.doc["rounds"]]
        result = diagnosis.diagnose(records=records, groups=groups, harness_dir=incumbent_dir,
                                    history=history, solved_tasks=tools_by_task, cfg=self.cfg, round_dir=rdir,
                                    strategy=self.cfg.strategy)
        spec = getattr(result, "spec", None)
        tokens = dict(getattr(result, "tokens", None) or {})
        wall = float(getattr(result, "wall_s", None) or (time.monotonic() - t0))
        reason = str(getattr(result, "detail", "") or getattr(result, "reason", "") or "")
        if spec is None:
            self._say(f"round {n}: diagnosis of {len(usable)} record(s) in {len(groups)} group(s): no spec "
                      f"({reason or 'no reason given'})", n)
            return {"outcome": "no_spec", "reason": reason or "diagnosis produced no spec", "spec": None,
                    "tokens": tokens, "wall_s": wall}
        spec_doc = spec.model_dump(mode="json") if hasattr(spec, "model_dump") else dict(spec)
        _write_json(rdir / "spec.json", spec_doc)
        self._say(f"round {n}: diagnosis of {len(usable)} record(s) in {len(groups)} group(s): spec with "
                  f"{len(spec_doc.get('changes', []))} change(s): {_shorten(spec_doc.get('summary', ''), 90)}", n)
        doc = {"outcome": None, "reason": reason, "spec": spec_doc, "tokens": tokens, "wall_s": wall}
        if getattr(result, "instance_level", False):  # one spec per failure, patched one by one
            specs = list(getattr(result, "specs", None) or [spec])
            doc.update(instance_level=True, specs=[x.model_dump(mode="json") if hasattr(x, "model_dump") else dict(x)
                                                   for x in specs])
        return doc

    def _edit(self, spec: ModificationSpec, worktree: gitops.Worktree, rdir: Path, label: str) -> dict[str, Any]:
        result = self.editor.edit(spec, worktree.harness_dir, spec_path=rdir / "spec.json")
        changed = worktree.changed_paths()
        diff = worktree.diff(changed)
        (rdir / "candidate.diff").write_text(diff)
        rel = worktree.rel.as_posix()
        inside = [p for p in changed if rel in ("", ".") or p.startswith(rel + "/")]
        outside = [p for p in changed if p not in inside]
        flags = gold_data_flags(diff)
        doc: dict[str, Any] = {"editor": self.cfg.editor, "ok": result.ok, "detail": result.detail,
                               "tokens": result.tokens, "wall_s": round(result.wall_s, 2), "changed": changed,
                               "outside_harness": outside, "gold_data_flags": flags,
                               "not_implementable": result.not_implementable}
        if not result.ok:
            doc.update(outcome="no_change", reason=f"the editor failed: {result.detail}")
        elif outside:
            doc.update(outcome="guard_rejected",
                       reason="the edit changed files outside the harness directory: " + ", ".join(outside[:10]))
        elif not changed:
            doc.update(outcome="no_change", reason=f"the editor changed no harness file ({result.detail})")
        elif flags:
            doc.update(outcome="guard_rejected", reason="the diff reads gold task data or touches scoring: "
                       + "; ".join(flags[:5]))
        else:
            doc.update(outcome=None, reason=result.detail)
        self._say(f"{label}: editor {self.cfg.editor} (1 call): {len(changed)} file(s) changed"
                  + (f"; {doc['reason']}" if doc["outcome"] else f": {', '.join(changed)}"))
        return doc

    def _validate(self, worktree: gitops.Worktree, rdir: Path, run_id: str, label: str,
                  base_score: float | None) -> dict[str, Any]:
        from .harness import harness_id

        started = time.monotonic()
        hid = harness_id(worktree.harness_dir, self.harness_dir.name)
        self._say(f"{label}: validating candidate {hid} (sub-run {run_id})")
        try:
            sub = self._subrun(worktree.harness_dir, rdir, run_id)
        except BrokenCandidate as exc:
            self._say(f"{label}: broken candidate: {exc}")
            return {"outcome": "broken_candidate", "reason": str(exc), "harness_id": hid,
                    "wall_s": round(time.monotonic() - started, 2)}
        self._say(f"{label}: candidate scored {_fmt(sub.score)} (incumbent {_fmt(base_score)}) in {sub.wall_s:.1f} s")
        return {"outcome": None, "reason": "", "score": sub.summary.get("suite_score"), "harness_id": hid,
                "run_path": str(sub.run_path), "run_id": run_id, "exit_code": sub.exit_code,
                "wall_s": round(time.monotonic() - started, 2), "pass_hat_k": sub.summary.get("pass_hat_k")}

    def _subrun(self, harness_dir: Path, run_dir: Path, run_id: str,
                overrides: dict[str, str | None] | None = None) -> SubRun:
        return run_suite(base_args=self.base_args, cwd=self.cwd, harness_dir=harness_dir, run_dir=run_dir,
                         run_id=run_id, sim_url=self.state.sim_url, overrides=overrides)

    def _finish_round(self, row: dict[str, Any], rdir: Path, *, already_written: bool = False) -> dict[str, Any]:
        if not already_written:
            row["wall_s"] = round(row.get("wall_s", 0.0), 2)  # the sum of its stages' wall-clock seconds
            _write_json(rdir / "decision.json", {"round": row, "incumbent": self.doc["incumbent"]})
        self.doc["rounds"].append(row)
        self._checkpoint()
        after = f" -> {_fmt(row['score_after'])}" if row.get("score_after") is not None else ""
        self._say(f"round {row['round']}: {OUTCOME_TEXT[row['outcome']]} (score {_fmt(row['score_before'])}{after})"
                  + (f": {row['reason']}" if row.get("reason") and row["outcome"] != "accepted" else ""), row["round"])
        return row

    def make_branch(self) -> None:
        accepted = [r for r in self.doc["rounds"] if r.get("accepted")]
        if not accepted:
            self.doc["branch"] = None
            self._say("no round was accepted: no branch created")
            return
        if self.doc.get("branch"):
            return
        name = gitops.create_branch(self.harness_dir, self.state.run_id, self.doc["incumbent"]["commit"])
        self.doc["branch"] = name
        self.doc["diff_command"] = f"git diff {self.doc['start']['commit'][:12]} {name}"
        elsewhere = gitops.uncommitted_elsewhere(self.harness_dir)
        note = (f"; {elsewhere} uncommitted change(s) elsewhere in your checkout were left alone"
                if elsewhere else "")
        commits = sum(sum(bool(st.get("accepted")) for st in r.get("steps") or []) or 1 for r in accepted)
        self._say(f"branch {name}: {commits} commit(s), one per accepted round (or self-evolution step); your "
                  f"checkout, index and current branch were not touched{note}. View: {self.doc['diff_command']}")
        self._checkpoint()

    def score_test(self) -> None:
        """Score the start and the frozen harness on the test split, side by side (and per test model)."""
        if not self.doc.get("test"):
            self.doc["test"] = {"start": None, "frozen": None, "trials": self.cfg.test_trials, "transfer": {}}
        test = self.doc["test"]
        start_c, frozen_c = self.doc["start"]["commit"], self.doc["incumbent"]["commit"]
        models: list[tuple[str | None, Path]] = [(None, self.dir / "test")]
        models += [(m, self.dir / "test" / "transfer" / _slug(m)) for m in self.cfg.test_models]
        for model, base in models:
            slot = test if model is None else test["transfer"].setdefault(model, {"start": None, "frozen": None})
            for which, commit in (("start", start_c), ("frozen", frozen_c)):
                if slot.get(which):
                    continue
                if which == "frozen" and commit == start_c:
                    slot["frozen"] = dict(slot["start"], same_as_start=True)
                    self._checkpoint()
                    continue
                overrides: dict[str, str | None] = {"--ecdysis-split": "test",
                                                    "--ecdysis-trials": str(self.cfg.test_trials),
                                                    "--ecdysis-tasks": None}
                if model:
                    overrides.update({"--ecdysis-model": model, "--ecdysis-user-model": self.cfg.user_model})
                label = f"test{'' if model is None else ' with ' + model}: {which} harness"
                self._say(f"{label} ({self.cfg.test_trials} trial(s) per task)")
                worktree = gitops.add_worktree(self.harness_dir, commit)
                try:
                    t0 = time.monotonic()
                    sub = self._subrun(worktree.harness_dir, base / which,
                                       f"{self.state.run_id}-test-{_slug(model) + '-' if model else ''}{which}",
                                       overrides)
                except BrokenCandidate as exc:
                    raise EcdysisError(f"{label} could not be scored: {exc}") from None
                finally:
                    worktree.remove()
                s = sub.summary
                slot[which] = {"suite_score": s.get("suite_score"), "pass_hat_k": s.get("pass_hat_k"),
                               "pass_at_k": s.get("pass_at_k"), "n_trials": s.get("n_trials"),
                               "n_tasks": s.get("n_tasks"), "harness_id": s.get("harness_id"),
                               "run_path": str(sub.run_path), "commit": commit}
                self._say(f"{label}: suite score {_fmt(s.get('suite_score'))} ({time.monotonic() - t0:.1f} s)")
                self._checkpoint()

    # --- state -----------------------------------------------------------------------------------

    def _load_or_start(self) -> dict[str, Any]:
        path = self.dir / "evolution.json"
        suite = self.summary.get("suite")
        if self.cfg.resume and path.is_file():
            doc = _read_json(path)
            if doc.get("suite") != suite:
                raise UsageError(f"--ecdysis-resume {self.state.run_id}: that run evolved suite "
                                 f"{doc.get('suite')!r}, this session collected {suite!r}; select the same "
                                 "tests (and options) as the interrupted run")
            if not gitops.commit_exists(self.harness_dir, doc["incumbent"]["commit"]):
                raise GitError(f"--ecdysis-resume: the incumbent commit {doc['incumbent']['commit'][:12]} is gone "
                               "from the repository (garbage-collected?); start a new run")
            done = [r["round"] for r in doc["rounds"]]
            self._say(f"resuming {self.state.run_id}: round(s) {done or 'none'} done; finished stages are not redone")
            doc["wall_s_before"] = doc.get("wall_s") or 0.0
            return doc
        commit = gitops.head_commit(self.harness_dir)
        start = {"commit": commit, "harness_id": self.state.harness_id,
                 "score": self.summary.get("suite_score"), "pass_hat_k": self.summary.get("pass_hat_k"),
                 "run_path": str(self.dir), "round": 0}
        doc = {"schema_version": SCHEMA_VERSION, "run_id": self.state.run_id, "suite": suite,
               "split": self.cfg.split, "trials": self.cfg.trials, "strategy": self.cfg.strategy,
               "editor": self.cfg.editor, "model": self.cfg.model, "harness": str(self.harness_dir),
               "status": "running", "start": start, "incumbent": dict(start), "rounds": [], "branch": None,
               "test": None, "wall_s": 0.0, "run_path": str(self.dir)}
        _write_json(path, doc)
        return doc

    def _checkpoint(self) -> None:
        self.doc["wall_s"] = round(self.doc.get("wall_s_before", 0.0) + time.monotonic() - self.started, 2)
        _write_json(self.dir / "evolution.json", self.doc)

    def _stage_json(self, path: Path, compute: Any) -> dict[str, Any]:
        if path.is_file():
            doc = _read_json(path)
            doc["fresh"] = False
            return doc
        doc = compute()
        _write_json(path, doc)
        doc["fresh"] = True
        return doc

    def _say(self, text: str, n: int | None = None) -> None:
        elapsed = time.monotonic() - self.started
        if getattr(self.tw, "width_of_current_line", 0):
            self.tw.line()  # the progress dots of the run before: start the stage lines on their own line
        self.tw.line(f"ecdysis [{elapsed:7.1f} s] {text}")


def _shorten(text: str, width: int) -> str:
    """`text` cut at a word boundary to at most `width` characters, with an ellipsis when cut."""
    return textwrap.shorten(" ".join(text.split()), width=width, placeholder=" …") if text else ""


def summary_lines(doc: dict[str, Any]) -> list[str]:
    """The final table of an evolution (terminal): per round score before/after, outcome, pass^k, flips,
    editor calls, tokens, wall-clock; then test scores side by side, and the branch."""
    out = ["", f"ecdysis evolution {doc.get('run_id')} ({doc.get('suite')}, strategy {doc.get('strategy')}, "
           f"editor {doc.get('editor')})",
           f"{'round':>5}  {'before':>7}  {'after':>7}  {'pass^k after':>12}  {'outcome':<17} {'edits':>5}  "
           f"{'tokens':>8}  {'wall s':>7}  flips (+solved / -lost)"]
    for r in doc.get("rounds", []):
        fl = r.get("flips") or {}
        gained, lost = fl.get("failed_to_solved", []), fl.get("solved_to_failed", [])
        out.append(f"{r['round']:>5}  {_fmt(r.get('score_before')):>7}  {_fmt(r.get('score_after')):>7}  "
                   f"{_pass_hat(r.get('pass_hat_k_after')):>12}  {r['outcome']:<17} {r.get('editor_calls', 0):>5}  {r.get('tokens', {}).get('total', 0):>8}  "
                   f"{r.get('wall_s', 0.0):>7.1f}  +{len(gained)} / -{len(lost)}"
                   + (f" (lost: {', '.join(lost[:6])})" if lost else ""))
        for st in r.get("steps") or []:  # instance-level rounds (self-evolution): one line per patched spec
            out.append(f"{'step ' + str(st['step']):>12}  {_fmt(st.get('score_before')):>7} -> "
                       f"{_fmt(st.get('score_after')):>7}  {st['outcome']:<17} {st.get('editor_calls', 0):>5}")
    test = doc.get("test") or {}
    if test.get("start") and test.get("frozen"):
        out.append(f"test split, {test.get('trials')} trial(s) per task:  start {_score_line(test['start'])}"
                   f"   frozen {_score_line(test['frozen'])}")
        for model, slot in (test.get("transfer") or {}).items():
            if slot.get("start") and slot.get("frozen"):
                out.append(f"  with {model}:  start {_score_line(slot['start'])}   frozen {_score_line(slot['frozen'])}")
    if doc.get("branch"):
        out.append(f"branch {doc['branch']}; view its diff: {doc.get('diff_command')}")
    else:
        out.append("no round was accepted: no branch")
    out.append(f"evolution wall-clock {doc.get('wall_s', 0.0):.1f} s; files in {doc.get('run_path', '')}".rstrip())
    return out


def load_evidence(run_path: Path) -> tuple[list[FailureRecord], list[PatternGroup]]:
    """Failure records and pattern groups of a run directory (`failures.jsonl`, `groups.json`).

    Raises:
        RunDirError: `failures.jsonl` missing (the run was not written by pytest-ecdysis).
    """
    path = run_path / "failures.jsonl"
    if not path.is_file():
        raise RunDirError(f"{path} is missing; the evidence of run {run_path.name} cannot be read")
    records = [FailureRecord.model_validate_json(line) for line in path.read_text().splitlines() if line.strip()]
    groups_path = run_path / "groups.json"
    groups = []
    if groups_path.is_file():
        groups = [PatternGroup.model_validate(g) for g in _read_json(groups_path).get("groups", [])]
    return records, groups


def _spec_of(rdir: Path) -> dict[str, Any] | None:
    path = rdir / "spec.json"
    return _read_json(path) if path.is_file() else None


def _score_line(entry: dict[str, Any]) -> str:
    hat = entry.get("pass_hat_k") or {}
    k = max(hat, key=int) if hat else None
    return f"{_fmt(entry.get('suite_score'))}" + (f" (pass^{k} {_fmt(hat[k])})" if k else "")


def _pass_hat(hat: dict[str, Any] | None) -> str:
    """pass^k for the largest k of a `pass_hat_k` object, '-' without one."""
    if not hat:
        return "-"
    k = max(hat, key=int)
    return f"{_fmt(hat[k])} (k={k})"


def _fmt(x: Any) -> str:
    return "-" if x is None else f"{float(x):.3f}"


def _slug(model: str | None) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", model or "")


def _add_tokens(total: dict[str, int], more: dict[str, Any]) -> None:
    for key in ("prompt", "completion", "total"):
        total[key] = total.get(key, 0) + int(more.get(key, 0) or 0)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise RunDirError(f"cannot read {path}: {exc}") from None


def _write_json(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    body = doc if "schema_version" in doc else {"schema_version": SCHEMA_VERSION, **doc}
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(body, indent=2, ensure_ascii=False) + "\n")
    tmp.replace(path)
