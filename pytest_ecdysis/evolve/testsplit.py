"""After the rounds: score the start and the frozen harness on the held-out test split, side by side.

Each harness is checked out at its commit in a temporary worktree and scored by a validation sub-run with
`--ecdysis-split test --ecdysis-trials <test-trials>` (and once more per `--ecdysis-test-model`). Results
go to `evolution.json` under `test` (`start`, `frozen`, `trials`, `transfer`; each scored harness with its
capability, `suite_score`, and efficiency, `tokens_per_task`); sub-runs to
`<run>/test/{start,frozen}/` and `<run>/test/transfer/<model>/`. A slot already filled is not re-scored
on `--ecdysis-resume`. A harness whose bytes a held-out check already scored on test at these trials
(`evolve.heldout`, `evolution.json` `heldout_runs`) takes that run (`heldout_check: true`), not a new one:
the test split is then also the selection set of the held-out check (docs/evolution.md).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_ecdysis.core.errors import EcdysisError, shown
from pytest_ecdysis.core.records import Flips
from pytest_ecdysis.core.rundir import slug
from pytest_ecdysis.git import worktree as gitworktree
from pytest_ecdysis.report.evolution import fmt
from pytest_ecdysis.validate.subrun import BrokenCandidate

if TYPE_CHECKING:
    from pytest_ecdysis.evolve.context import RoundContext


def efficiency(summary: dict) -> dict[str, int | None]:
    """`tokens` (the agent's total on the test run) and `tokens_per_task` (that total / tasks, so summed over a
    task's `--ecdysis-test-trials` trials; None without tasks): with `suite_score` (capability, held-out
    success) the efficiency a harness is reported with (HarnessDev's creation stage, docs/evolution.md)."""
    total = int((summary.get("tokens") or {}).get("total", 0))
    n_tasks = summary.get("n_tasks") or 0
    return {"tokens": total, "tokens_per_task": round(total / n_tasks) if n_tasks else None}


def score_test(ev: RoundContext) -> None:
    """Fill `ev.doc["test"]`, checkpointing after every scored harness.

    Raises:
        EcdysisError: a harness could not be scored (its sub-run did not produce a summary).
    """
    cfg = ev.cfg
    test = ev.doc.get("test")
    if not test:
        test = ev.doc["test"] = {"start": None, "frozen": None, "trials": cfg.test_trials, "transfer": {}}
    if cfg.test_trials == 0:
        test["skipped"] = "--ecdysis-test-trials 0: the start and frozen harness were not scored on test"
        ev.say(test["skipped"])
        ev.checkpoint()
        return
    start_c, frozen_c = ev.doc["start"]["commit"], ev.doc["incumbent"]["commit"]
    models: list[tuple[str | None, Path]] = [(None, ev.dir / "test")]
    models += [(m, ev.dir / "test" / "transfer" / slug(m)) for m in cfg.test_models]
    for model, base in models:
        slot = test if model is None else test["transfer"].setdefault(model, {"start": None, "frozen": None})
        for which, commit in (("start", start_c), ("frozen", frozen_c)):
            if slot.get(which):
                continue
            if which == "frozen" and commit == start_c:
                slot["frozen"] = dict(slot["start"], same_as_start=True)
                ev.checkpoint()
                continue
            hid = ev.doc["start" if which == "start" else "incumbent"].get("harness_id")
            reused = _heldout_run(ev, hid) if model is None else None
            if reused is not None:  # these bytes were scored on test by a held-out check (`evolve.heldout`)
                slot[which] = {**reused, "commit": commit}
                ev.say(
                    f"test: {which} harness: suite score {fmt(reused.get('suite_score'))} (the run of a held-out "
                    "check of these bytes, reused)"
                )
                ev.checkpoint()
                continue
            overrides: dict[str, str | None] = {
                "--ecdysis-split": "test",
                "--ecdysis-trials": str(cfg.test_trials),
                "--ecdysis-tasks": None,
            }
            if model:
                overrides.update({"--ecdysis-model": model, "--ecdysis-user-model": cfg.user_model})
            label = f"test{'' if model is None else ' with ' + model}: {which} harness"
            every = ", every test task: --ecdysis-tasks selects train tasks only" if cfg.tasks else ""
            ev.say(f"{label} ({cfg.test_trials} trial(s) per task{every})")
            worktree = gitworktree.add_worktree(ev.harness_dir, commit)
            try:
                t0 = time.monotonic()
                sub = ev.subrun(
                    worktree.harness_dir,
                    base / which,
                    f"{ev.state.run_id}-test-{slug(model) + '-' if model else ''}{which}",
                    overrides,
                )
            except BrokenCandidate as exc:
                raise EcdysisError(f"{label} could not be scored: {exc}") from None
            finally:
                worktree.remove()
            s = sub.summary
            slot[which] = {
                "suite_score": s.get("suite_score"),
                "pass_hat_k": s.get("pass_hat_k"),
                "pass_at_k": s.get("pass_at_k"),
                "n_trials": s.get("n_trials"),
                "n_tasks": s.get("n_tasks"),
                **efficiency(s),
                "harness_id": s.get("harness_id"),
                "run_path": str(sub.run_path),
                "commit": commit,
            }
            ev.say(f"{label}: suite score {fmt(s.get('suite_score'))} ({time.monotonic() - t0:.1f} s)")
            ev.checkpoint()
    if test.get("start") and test.get("frozen") and "regressions" not in test:
        test["regressions"] = held_out_regressions(test["start"], test["frozen"], cfg.threshold)
        if test["regressions"]["solved_to_failed"]:
            ev.say(
                f"test: the frozen harness lost {len(test['regressions']['solved_to_failed'])} task(s) the start "
                f"solved in every trial: {shown(test['regressions']['solved_to_failed'], 12)}"
            )
        ev.checkpoint()
    if test.get("start") and test.get("frozen") and "gap" not in test:
        test["gap"] = train_test_gap_of(ev.doc)
        if (test["gap"] or {}).get("said"):
            ev.say(f"test: {test['gap']['line']}")
        ev.checkpoint()


def _heldout_run(ev: RoundContext, harness_id: str | None) -> dict[str, Any] | None:
    """The test slot of a harness whose bytes (`harness_id`) a held-out check scored on test at this
    run's `--ecdysis-test-trials` (`evolution.json` `heldout_runs`); None when there is none or it cannot
    be read."""
    from pytest_ecdysis.core.errors import RunDirError
    from pytest_ecdysis.validate.results import read_run

    run = (ev.doc.get("heldout_runs") or {}).get(str(harness_id)) if harness_id else None
    if not run or run.get("trials") != ev.cfg.test_trials:
        return None
    try:
        ev.ledger.verify_run(Path(run["run_path"]))
        s, _ = read_run(Path(run["run_path"]))
    except (OSError, RunDirError):
        return None
    return {
        "suite_score": s.get("suite_score"),
        "pass_hat_k": s.get("pass_hat_k"),
        "pass_at_k": s.get("pass_at_k"),
        "n_trials": s.get("n_trials"),
        "n_tasks": s.get("n_tasks"),
        **efficiency(s),
        "harness_id": s.get("harness_id"),
        "run_path": str(run["run_path"]),
        "heldout_check": True,
    }


def train_test_gap_of(doc: Mapping[str, Any]) -> dict[str, Any] | None:
    """`gate.noninferiority.train_test_gap` of an evolution that accepted a change: the start's and the
    frozen harness's per-task rewards on train (the starting run; the accepted candidate's validation run)
    and on test (their test runs). `{train_gain, test_gain, gap, lower, said, tasks, line}`; None when
    nothing was accepted or a run is missing or unreadable."""
    from pytest_ecdysis.core.errors import RunDirError
    from pytest_ecdysis.gate.noninferiority import train_test_gap
    from pytest_ecdysis.validate.results import read_run

    test = doc.get("test") or {}
    start, frozen = test.get("start") or {}, test.get("frozen") or {}
    paths = [(doc.get("start") or {}).get("run_path"), (doc.get("incumbent") or {}).get("run_path")]
    paths += [start.get("run_path"), frozen.get("run_path")]
    if frozen.get("same_as_start") or not all(paths) or paths[0] == paths[1]:
        return None

    def rewards(path: str) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {}
        for t in read_run(Path(path))[1]:
            if t.get("reward") is not None:
                out.setdefault(str(t["task_id"]), []).append(float(t["reward"]))
        return out

    try:
        gap = train_test_gap(*(rewards(str(p)) for p in paths))
    except (OSError, RunDirError, ValueError):
        return None
    return {
        "train_gain": gap.train_gain,
        "test_gain": gap.test_gain,
        "gap": gap.gap,
        "lower": gap.lower,
        "said": gap.said,
        "tasks": list(gap.tasks),
        "line": f"train-test gap: {gap.line()}",
    }


def held_out_regressions(start: dict, frozen: dict, threshold: float) -> Flips:
    """`validate.results.flips` of the start's and the frozen harness's test runs: `solved_to_failed`
    (tasks the start solved in every trial and the frozen harness did not), `failed_to_solved`; both
    empty when the frozen harness is the start (no run of its own) or a run cannot be read."""
    from pytest_ecdysis.core.errors import RunDirError
    from pytest_ecdysis.validate.results import flips, read_run

    if frozen.get("same_as_start") or not start.get("run_path") or not frozen.get("run_path"):
        return {"solved_to_failed": [], "failed_to_solved": []}
    try:
        (_, before), (_, after) = read_run(Path(start["run_path"])), read_run(Path(frozen["run_path"]))
    except (OSError, RunDirError):
        return {"solved_to_failed": [], "failed_to_solved": []}
    return flips(before, after, threshold)
